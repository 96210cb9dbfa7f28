//! JA4 TLS client fingerprints (FoxIO, "JA4+ Network Fingerprinting", JA4 technical
//! details: <https://github.com/FoxIO-LLC/ja4/blob/main/technical_details/JA4.md>), as
//! Envoy's `%TLS_JA4_FINGERPRINT%` (tls_inspector `enable_ja4_fingerprinting`) or a CDN's
//! header (`cf-ja4`) carries them: `a_b_c`, where
//!
//! - `a` is 10 readable characters: protocol (`t` TCP, `q` QUIC, `d` DTLS), TLS version
//!   (`13`, `12`, ...), `d` with SNI or `i` without, the cipher and extension counts (two
//!   digits each), and the first ALPN value's first and last characters (`h2`, `h1`), or
//!   `00` when the client offered no ALPN;
//! - `b` is the first 12 hex digits of SHA-256 over the sorted cipher suites: a TLS
//!   library's default list gives one `b` whatever the application;
//! - `c` likewise over the sorted extensions and signature algorithms.
//!
//! [`Ja4Pattern`] is how the catalog names a library's TLS stack: each part exact or `*`.

/// Length of a JA4 `a` part.
const A_LEN: usize = 10;
/// Length of a JA4 `b` or `c` part (truncated SHA-256, lowercase hex).
const HASH_LEN: usize = 12;

/// The three parts of a well-formed JA4 fingerprint, or `None`: `a` is 10 ASCII
/// alphanumerics, `b` and `c` 12 lowercase hex digits each (surrounding blanks ignored;
/// anything else, such as Envoy's `-` for a plain-text connection, is no fingerprint).
pub fn parts(ja4: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let ja4 = ja4.trim_ascii();
    let mut it = ja4.split(|b| *b == b'_');
    let (a, b, c) = (it.next()?, it.next()?, it.next()?);
    let ok = it.next().is_none()
        && a.len() == A_LEN
        && a.iter().all(u8::is_ascii_alphanumeric)
        && is_hash(b)
        && is_hash(c);
    ok.then_some((a, b, c))
}

fn is_hash(p: &[u8]) -> bool {
    p.len() == HASH_LEN
        && p.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Whether a well-formed fingerprint says the client offered no ALPN (`a` ends in `00`):
/// every browser offers ALPN on HTTPS (`h2`, or `h1` with HTTP/2 switched off).
pub fn offers_no_alpn(ja4: &[u8]) -> bool {
    parts(ja4).is_some_and(|(a, _, _)| a.ends_with(b"00"))
}

/// A fingerprint pattern: `a_b_c` with each part exact or `*` (at least one exact), e.g.
/// `*_85036bcba153_*` for every handshake with one library's default cipher suites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ja4Pattern<'p> {
    parts: [Option<&'p str>; 3],
}

impl<'p> Ja4Pattern<'p> {
    /// A pattern from its parts, `None` standing for `*` (as the filter's build script
    /// writes the catalog's validated patterns).
    pub const fn from_parts(parts: [Option<&'p str>; 3]) -> Ja4Pattern<'p> {
        Ja4Pattern { parts }
    }

    /// Parses a pattern; `Err` says what is wrong.
    pub fn parse(pattern: &'p str) -> Result<Ja4Pattern<'p>, String> {
        let split: Vec<&str> = pattern.split('_').collect();
        let [a, b, c] = split.as_slice() else {
            return Err(format!("{pattern:?}: three parts a_b_c"));
        };
        let part = |p: &'p str, ok: bool, what: &str| match (p, ok) {
            ("*", _) => Ok(None),
            (_, true) => Ok(Some(p)),
            _ => Err(format!("{pattern:?}: {p:?} is not {what} or *")),
        };
        let a_ok = a.len() == A_LEN
            && a.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
        let parts = [
            part(a, a_ok, "a 10-character JA4_a")?,
            part(b, is_hash(b.as_bytes()), "12 lowercase hex digits")?,
            part(c, is_hash(c.as_bytes()), "12 lowercase hex digits")?,
        ];
        if parts.iter().all(Option::is_none) {
            return Err(format!("{pattern:?}: matches every fingerprint"));
        }
        Ok(Ja4Pattern { parts })
    }

    /// Whether fingerprint `ja4` (well-formed, else never) matches: every exact part equal
    /// (the `a` part ASCII case-insensitively).
    pub fn matches(&self, ja4: &[u8]) -> bool {
        let Some((a, b, c)) = parts(ja4) else {
            return false;
        };
        let [pa, pb, pc] = self.parts;
        pa.is_none_or(|p| p.as_bytes().eq_ignore_ascii_case(a))
            && pb.is_none_or(|p| p.as_bytes() == b)
            && pc.is_none_or(|p| p.as_bytes() == c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME: &[u8] = b"t13d1516h2_8daaf6152771_02713d6af862";
    const PYTHON: &[u8] = b"t13d181000_85036bcba153_d41ae481755e";

    #[test]
    fn fingerprints_are_three_parts_of_fixed_shape() {
        assert_eq!(
            parts(CHROME),
            Some((
                &b"t13d1516h2"[..],
                &b"8daaf6152771"[..],
                &b"02713d6af862"[..]
            ))
        );
        assert!(parts(b" t13d1516h2_8daaf6152771_02713d6af862 ").is_some());
        for bad in [
            &b"-"[..],
            b"",
            b"t13d1516h2_8daaf6152771",
            b"t13d1516h2_8daaf6152771_02713d6af862_x",
            b"t13d1516h_8daaf6152771_02713d6af862",
            b"t13d1516h2_8DAAF6152771_02713d6af862",
            b"t13d1516h2_8daaf615277g_02713d6af862",
            b"t13d1516\xff2_8daaf6152771_02713d6af862",
        ] {
            assert_eq!(parts(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn no_alpn_is_00_at_the_end_of_a() {
        assert!(offers_no_alpn(PYTHON));
        assert!(!offers_no_alpn(CHROME));
        assert!(!offers_no_alpn(b"garbage00"));
    }

    #[test]
    fn patterns_match_their_exact_parts() {
        let lib = Ja4Pattern::parse("*_85036bcba153_*").unwrap();
        assert!(lib.matches(PYTHON));
        assert!(lib.matches(b"t13i1811h1_85036bcba153_aaaaaaaaaaaa"));
        assert!(!lib.matches(CHROME));
        assert!(!lib.matches(b"not a fingerprint"));
        let full = Ja4Pattern::parse("t13d1516h2_8daaf6152771_02713d6af862").unwrap();
        assert!(full.matches(CHROME) && full.matches(b"T13D1516H2_8daaf6152771_02713d6af862"));
        for bad in [
            "*_*_*",
            "t13d1516h2_8daaf6152771",
            "x_8daaf6152771_*",
            "*_8DAAF6152771_*",
            "*_*_02713d6af86",
        ] {
            assert!(Ja4Pattern::parse(bad).is_err(), "{bad}");
        }
    }
}
