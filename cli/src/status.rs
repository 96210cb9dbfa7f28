//! Response status groups, as `report` counts them and `replay` compares its predictions
//! with them: one enum, so both commands group (and name) statuses alike.

/// A group of response statuses. 429 and 503 stand apart from their ranges: they are what
/// rate limiting and load shedding answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusBucket {
    /// 200..=299.
    S2xx,
    /// 300..=399.
    S3xx,
    /// 400..=499 other than 429.
    S4xx,
    /// 429.
    S429,
    /// 503.
    S503,
    /// 500..=599 other than 503.
    S5xx,
    /// 0 (no response), 1xx, or >= 600.
    Other,
}

impl StatusBucket {
    /// Number of buckets (the length of a per-bucket array).
    pub const COUNT: usize = 7;

    /// Every bucket, in declaration (and output) order.
    pub const ALL: [StatusBucket; StatusBucket::COUNT] = [
        StatusBucket::S2xx,
        StatusBucket::S3xx,
        StatusBucket::S4xx,
        StatusBucket::S429,
        StatusBucket::S503,
        StatusBucket::S5xx,
        StatusBucket::Other,
    ];

    /// The bucket of `status`.
    pub fn of(status: u16) -> StatusBucket {
        match status {
            429 => StatusBucket::S429,
            503 => StatusBucket::S503,
            200..=299 => StatusBucket::S2xx,
            300..=399 => StatusBucket::S3xx,
            400..=499 => StatusBucket::S4xx,
            500..=599 => StatusBucket::S5xx,
            _ => StatusBucket::Other,
        }
    }

    /// Position in [`StatusBucket::ALL`] (index of a per-bucket array).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Name in output: `2xx`, `3xx`, `4xx`, `429`, `503`, `5xx`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusBucket::S2xx => "2xx",
            StatusBucket::S3xx => "3xx",
            StatusBucket::S4xx => "4xx",
            StatusBucket::S429 => "429",
            StatusBucket::S503 => "503",
            StatusBucket::S5xx => "5xx",
            StatusBucket::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_in_order_and_429_503_apart() {
        assert_eq!(
            [0, 101, 200, 304, 404, 429, 500, 503, 599, 600].map(|s| StatusBucket::of(s).as_str()),
            ["other", "other", "2xx", "3xx", "4xx", "429", "5xx", "503", "5xx", "other"]
        );
        for (i, b) in StatusBucket::ALL.into_iter().enumerate() {
            assert_eq!(b.index(), i);
        }
    }
}
