//! [`VerifyEvent`]: what the verification counters (`crawlguard.verify.<event>`) count.

/// A verification event to count (`crawlguard.verify.<event>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyEvent {
    /// The verifier answered `verified`.
    Verified,
    /// The verifier answered `spoofed`.
    Spoofed,
    /// The verifier answered `unknown`.
    Unknown,
    /// Verifier error (dispatch refused, timeout, non-200, malformed body, too many claims
    /// in flight) for a claim with no verdict to stand in.
    Error,
    /// A fresh cached verdict (or a remembered error) decided the request.
    CacheHit,
    /// No usable cached verdict: a callout was needed.
    CacheMiss,
    /// The request joined a callout already in flight for its claim and waited for it.
    InFlight,
    /// A stale verdict stood in for a failed callout (stale-if-error).
    Stale,
    /// `spoofed` without a callout: the client's prefix already produced
    /// `verifier.max_spoofed_per_prefix` spoofed verdicts.
    PrefixSpoofed,
    /// `verified` without a callout: inside the bot's published ranges ([`crate::identity::published_ranges`]).
    RangeVerified,
    /// `spoofed` without a callout: outside the published ranges of a bot without FCrDNS.
    RangeSpoofed,
    /// A fetch of the published ranges brought a new document, now in use.
    RangesUpdated,
    /// A fetch of the published ranges answered `304`: the ones in use are current.
    RangesNotModified,
    /// A fetch of the published ranges failed (no answer, another status, an oversize or
    /// malformed document), or a stored one did not parse; the ranges in use stay.
    RangesError,
}

impl VerifyEvent {
    /// Every event, in definition order.
    pub const ALL: [VerifyEvent; 14] = [
        VerifyEvent::Verified,
        VerifyEvent::Spoofed,
        VerifyEvent::Unknown,
        VerifyEvent::Error,
        VerifyEvent::CacheHit,
        VerifyEvent::CacheMiss,
        VerifyEvent::InFlight,
        VerifyEvent::Stale,
        VerifyEvent::PrefixSpoofed,
        VerifyEvent::RangeVerified,
        VerifyEvent::RangeSpoofed,
        VerifyEvent::RangesUpdated,
        VerifyEvent::RangesNotModified,
        VerifyEvent::RangesError,
    ];

    /// The counter suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyEvent::Verified => "verified",
            VerifyEvent::Spoofed => "spoofed",
            VerifyEvent::Unknown => "unknown",
            VerifyEvent::Error => "error",
            VerifyEvent::CacheHit => "cache_hit",
            VerifyEvent::CacheMiss => "cache_miss",
            VerifyEvent::InFlight => "in_flight",
            VerifyEvent::Stale => "stale",
            VerifyEvent::PrefixSpoofed => "prefix_spoofed",
            VerifyEvent::RangeVerified => "range_verified",
            VerifyEvent::RangeSpoofed => "range_spoofed",
            VerifyEvent::RangesUpdated => "ranges_updated",
            VerifyEvent::RangesNotModified => "ranges_not_modified",
            VerifyEvent::RangesError => "ranges_error",
        }
    }
}
