//! Log timestamps: Apache/nginx `%t` (`17/May/2015:10:05:03 +0000`) and RFC 3339 / Envoy
//! `%START_TIME%` (`2026-11-30T05:59:00.123Z`), to milliseconds since the Unix epoch (UTC).
//! Hand-written (no allocation, no time-zone database): both formats carry their offset.

/// Days since 1970-01-01 of a proleptic Gregorian date: the filter's, for one algorithm.
pub use crawlguard_core::response::rewrite::days_from_civil;

/// `(year, month, day)` of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 {
        return None;
    }
    let mut v = 0u32;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(b - b'0');
    }
    Some(v)
}

fn month(s: &[u8]) -> Option<u32> {
    const M: [&[u8; 3]; 12] = [
        b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
        b"dec",
    ];
    let [a, b, c] = <[u8; 3]>::try_from(s).ok()?;
    let l = [
        a.to_ascii_lowercase(),
        b.to_ascii_lowercase(),
        c.to_ascii_lowercase(),
    ];
    M.iter().position(|m| **m == l).map(|i| i as u32 + 1)
}

/// Milliseconds of a validated civil date `(y, mo, d)` and time `(h, mi, s, ms)` at UTC
/// offset `off_min`.
fn to_ms(
    (y, mo, d): (i64, u32, u32),
    (h, mi, s, ms): (u32, u32, u32, u32),
    off_min: i64,
) -> Option<i64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + s) - off_min * 60;
    Some(secs * 1000 + i64::from(ms))
}

/// `+hhmm`, `-hhmm`, `+hh:mm`, `Z` -> minutes east of UTC.
fn offset(s: &[u8]) -> Option<i64> {
    match s {
        [b'Z'] | [b'z'] => Some(0),
        [sign @ (b'+' | b'-'), rest @ ..] => {
            let (h, m) = match rest {
                [a, b, b':', c, d] | [a, b, c, d] => (digits(&[*a, *b])?, digits(&[*c, *d])?),
                _ => return None,
            };
            let v = i64::from(h * 60 + m);
            Some(if *sign == b'-' { -v } else { v })
        }
        _ => None,
    }
}

/// Parses Apache/nginx `%t` without brackets: `17/May/2015:10:05:03 +0000`.
pub fn parse_apache(s: &[u8]) -> Option<i64> {
    // dd/Mon/yyyy:hh:mm:ss +zzzz
    if s.len() != 26 || s.get(2) != Some(&b'/') || s.get(6) != Some(&b'/') {
        return None;
    }
    let d = digits(s.get(0..2)?)?;
    let mo = month(s.get(3..6)?)?;
    let y = digits(s.get(7..11)?)?;
    if s.get(11) != Some(&b':') || s.get(14) != Some(&b':') || s.get(17) != Some(&b':') {
        return None;
    }
    let h = digits(s.get(12..14)?)?;
    let mi = digits(s.get(15..17)?)?;
    let sec = digits(s.get(18..20)?)?;
    if s.get(20) != Some(&b' ') {
        return None;
    }
    let off = offset(s.get(21..)?)?;
    to_ms((i64::from(y), mo, d), (h, mi, sec, 0), off)
}

/// Parses RFC 3339 as Envoy writes `%START_TIME%` (`2026-11-30T05:59:00.123Z`); fractional
/// seconds of any length (truncated to ms), `T` or a space, `Z` or a numeric offset.
pub fn parse_rfc3339(s: &[u8]) -> Option<i64> {
    if s.len() < 20 || s.get(4) != Some(&b'-') || s.get(7) != Some(&b'-') {
        return None;
    }
    let y = digits(s.get(0..4)?)?;
    let mo = digits(s.get(5..7)?)?;
    let d = digits(s.get(8..10)?)?;
    if !matches!(s.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    if s.get(13) != Some(&b':') || s.get(16) != Some(&b':') {
        return None;
    }
    let h = digits(s.get(11..13)?)?;
    let mi = digits(s.get(14..16)?)?;
    let sec = digits(s.get(17..19)?)?;
    let mut rest = s.get(19..)?;
    let mut ms = 0u32;
    if let [b'.', frac @ ..] = rest {
        let n = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        let f = frac.get(..n)?;
        let mut scale = 100;
        for &b in f.iter().take(3) {
            ms += u32::from(b - b'0') * scale;
            scale /= 10;
        }
        rest = frac.get(n..)?;
    }
    let off = offset(rest)?;
    to_ms((i64::from(y), mo, d), (h, mi, sec, ms), off)
}

/// `YYYY-MM-DD HH:MM` (UTC) of a minute number (minutes since the epoch).
pub fn fmt_minute(minute: i64) -> String {
    let days = minute.div_euclid(1440);
    let m = minute.rem_euclid(1440);
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02} {:02}:{:02}", m / 60, m % 60)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of a millisecond timestamp.
pub fn fmt_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let s = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apache_time() {
        // 2015-05-17T10:05:03Z = 1431857103
        assert_eq!(
            parse_apache(b"17/May/2015:10:05:03 +0000"),
            Some(1_431_857_103_000)
        );
        assert_eq!(
            parse_apache(b"17/May/2015:12:05:03 +0200"),
            Some(1_431_857_103_000)
        );
        assert_eq!(parse_apache(b"17/Mai/2015:10:05:03 +0000"), None);
        assert_eq!(parse_apache(b"17/May/2015:10:05:03"), None);
        assert_eq!(parse_apache(b"32/May/2015:10:05:03 +0000"), None);
    }

    #[test]
    fn rfc3339_time() {
        assert_eq!(
            parse_rfc3339(b"2015-05-17T10:05:03.250Z"),
            Some(1_431_857_103_250)
        );
        assert_eq!(
            parse_rfc3339(b"2015-05-17T11:05:03+01:00"),
            Some(1_431_857_103_000)
        );
        assert_eq!(
            parse_rfc3339(b"2015-05-17T10:05:03.123456789Z"),
            Some(1_431_857_103_123)
        );
        assert_eq!(parse_rfc3339(b"2015-05-17T10:05:03."), None);
        assert_eq!(parse_rfc3339(b"yesterday"), None);
    }

    #[test]
    fn civil_round_trip_and_formatting() {
        for d in [-1000, 0, 16_572, 20_000, 60_000] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        assert_eq!(fmt_minute(1_431_857_103 / 60), "2015-05-17 10:05");
        assert_eq!(fmt_ms(1_431_857_103_250), "2015-05-17T10:05:03.250Z");
    }
}
