//! Bot ids: the names the catalog gives bots, the filter sends as `bot=` and the sidecar keys
//! its verification methods and metric labels by.

/// The longest bot id, in bytes.
pub const MAX_LEN: usize = 64;

/// Whether `id` is a bot id: 1..=64 bytes of `[a-z0-9._-]`.
///
/// Ids travel unescaped in the verify query ([`crate::verify::request_path`]) and become
/// metric label values, so they are kept short and plain.
pub fn is_valid_bot_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lowercase_ids_are_valid() {
        for id in [
            "googlebot",
            "mail.ru_bot",
            "archive.org_bot",
            "360spider",
            "a",
        ] {
            assert!(is_valid_bot_id(id), "{id}");
        }
        assert!(is_valid_bot_id(&"x".repeat(MAX_LEN)));
    }

    #[test]
    fn empty_long_uppercase_and_other_bytes_are_not() {
        for id in [
            "",
            "Googlebot",
            "google bot",
            "bot&x=1",
            "bot/1",
            "ü",
            "a%20b",
        ] {
            assert!(!is_valid_bot_id(id), "{id:?}");
        }
        assert!(!is_valid_bot_id(&"x".repeat(MAX_LEN + 1)));
    }
}
