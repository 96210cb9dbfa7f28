//! [`ConfigError`]: what a refused configuration says, the field path and the reason, each
//! cut to [`MAX_ERROR_PART_BYTES`].

use std::fmt;

/// A configuration error: the field path (`limits[2].rate_per_s`, or `<root>`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending field, with `[i]` for list items.
    pub path: String,
    /// Human-readable reason.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// Longest path or reason a [`ConfigError`] carries, bytes: errors quote the offending
/// value, and a 10 MB value echoed whole would flood the log line.
pub const MAX_ERROR_PART_BYTES: usize = 1024;

/// `s` cut to [`MAX_ERROR_PART_BYTES`] (at a char boundary), saying how much was cut.
fn cut(mut s: String) -> String {
    if s.len() <= MAX_ERROR_PART_BYTES {
        return s;
    }
    let mut end = MAX_ERROR_PART_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let more = s.len() - end;
    s.truncate(end);
    s.push_str(&format!("... ({more} more bytes)"));
    s
}

/// A [`ConfigError`] for field `path`, each part cut to [`MAX_ERROR_PART_BYTES`].
pub(super) fn err(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        path: cut(path.into()),
        reason: cut(reason.into()),
    }
}
