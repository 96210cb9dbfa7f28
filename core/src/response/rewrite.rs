//! Normalising rejections on the response path: a 429/503 from the origin, a CDN-style error
//! page or another Envoy filter leaves Envoy looking exactly like crawlguard's own rejection.
//!
//! Decided from the response headers alone (so a 10 MB error page costs nothing): the glue
//! answers with a fresh local reply (exactly one `Retry-After` in delay-seconds,
//! `Cache-Control: no-store`, the one-line body, no validators, no robots directives) and
//! Envoy drops the upstream response instead of buffering it.

use crate::config::{ClassPolicy, Config, RetryAfter};
use crate::identity::class::Class;
use crate::response::rejection;

/// What the upstream's `Retry-After` said (RFC 9110 section 10.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamRetryAfter {
    /// No header.
    Missing,
    /// delay-seconds.
    Seconds(u64),
    /// An HTTP-date, as seconds from now (0 if in the past).
    Date(u64),
    /// Anything else (`soon`, negative, garbage, several differing values).
    Invalid,
}

/// What was fixed, for stats (`crawlguard.rewrite.<fix>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fixes {
    /// `Retry-After` was missing or invalid and a computed one was added.
    pub retry_after_added: bool,
    /// An HTTP-date was converted into delay-seconds.
    pub retry_after_converted: bool,
    /// An upstream body was dropped for the one-line body.
    pub body_replaced: bool,
    /// An upstream `Cache-Control` other than `no-store` was replaced.
    pub cache_control_replaced: bool,
}

/// The normalised response to send instead of the upstream one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Status sent (the upstream's, or 503 for a degraded page).
    pub status: u16,
    /// Retry-After sent, seconds.
    pub retry_after_s: u32,
    /// What was wrong with the upstream response.
    pub fixes: Fixes,
    /// True when a degraded 200 was turned into a 503 (soft-404 guard).
    pub degraded: bool,
}

/// The response fields the decision reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Upstream<'a> {
    /// `:status`.
    pub status: Option<&'a [u8]>,
    /// Every `retry-after` value, in order.
    pub retry_after: &'a [Vec<u8>],
    /// `cache-control`, if any.
    pub cache_control: Option<&'a [u8]>,
    /// Whether the configured degraded header is present.
    pub degraded: bool,
    /// Whether the upstream sends a body (headers did not end the stream, or a non-zero
    /// `content-length`).
    pub has_body: bool,
}

/// Parses `Retry-After` values at `now_s` (Unix seconds). Several values count only if they
/// all agree; otherwise the header is invalid.
pub fn parse_retry_after(values: &[Vec<u8>], now_s: u64) -> UpstreamRetryAfter {
    let mut out = UpstreamRetryAfter::Missing;
    for v in values {
        let one = parse_one(v, now_s);
        out = match out {
            UpstreamRetryAfter::Missing => one,
            prev if prev == one => prev,
            _ => return UpstreamRetryAfter::Invalid,
        };
    }
    out
}

fn parse_one(v: &[u8], now_s: u64) -> UpstreamRetryAfter {
    let v = v.trim_ascii();
    if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
        // delay-seconds = 1*DIGIT; absurdly long values saturate and get clamped.
        let secs = v.iter().fold(0u64, |acc, d| {
            acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
        return UpstreamRetryAfter::Seconds(secs);
    }
    match http_date(v) {
        Some(t) => UpstreamRetryAfter::Date(t.saturating_sub(now_s)),
        None => UpstreamRetryAfter::Invalid,
    }
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Parses an HTTP-date (RFC 9110 section 5.6.7: IMF-fixdate, and the obsolete RFC 850 and
/// asctime forms recipients must accept) into Unix seconds.
pub fn http_date(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    let (day, mon, year, time) = match parts.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [wd, d, m, y, t, "GMT"] if wd.ends_with(',') && wd.len() == 4 => {
            (d.parse::<u32>().ok()?, *m, y.parse::<i64>().ok()?, *t)
        }
        // rfc850-date: Sunday, 06-Nov-94 08:49:37 GMT
        [wd, dmy, t, "GMT"] if wd.ends_with(',') => {
            let mut it = dmy.split('-');
            let d = it.next()?.parse::<u32>().ok()?;
            let m = it.next()?;
            let yy = it.next()?;
            if yy.len() != 2 || it.next().is_some() {
                return None;
            }
            let yy = yy.parse::<i64>().ok()?;
            // Two-digit years: RFC 9110 says interpret 50+ years ahead as the past century.
            let y = if yy >= 70 { 1900 + yy } else { 2000 + yy };
            (d, m, y, *t)
        }
        // asctime-date: Sun Nov  6 08:49:37 1994
        [_, m, d, t, y] => (d.parse::<u32>().ok()?, *m, y.parse::<i64>().ok()?, *t),
        _ => return None,
    };
    let month = MONTHS.iter().position(|m| m.as_slice() == mon.as_bytes())? as u32 + 1;
    let mut hms = time.split(':');
    let h = hms.next()?.parse::<u64>().ok()?;
    let mi = hms.next()?.parse::<u64>().ok()?;
    let se = hms.next()?.parse::<u64>().ok()?;
    if hms.next().is_some() || h > 23 || mi > 59 || se > 60 || !(1..=31).contains(&day) {
        return None;
    }
    if !(1970..=9999).contains(&year) {
        return None;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day > month_days {
        return None;
    }
    let days = days_from_civil(year, month, day);
    u64::try_from(days)
        .ok()?
        .checked_mul(86_400)?
        .checked_add(h * 3600 + mi * 60 + se)
}

/// Days since 1970-01-01 of a proleptic Gregorian date `(year, month 1..=12, day 1..=31)`
/// (Howard Hinnant's `days_from_civil`, chrono-Compatible Low-Level Date Algorithms); the
/// `crawlguard` command's log timestamps use it too.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn status_code(s: Option<&[u8]>) -> Option<u16> {
    let s = s?;
    if s.len() != 3 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Decides whether and how to normalise an upstream response for a request of `class`, at
/// `now_s` (Unix seconds). `None` = pass it through untouched. The Retry-After is the
/// class's range for a 429 (or another configured status); for a 503 (the origin's, Envoy's
/// own, or a degraded page) it is `shedding.retry_after`, an upstream value kept up to
/// `rewrite.max_retry_after_s`. `random` feeds the jitter of a computed Retry-After and is
/// called only then.
pub fn plan(
    cfg: &Config,
    class: Class,
    up: &Upstream<'_>,
    now_s: u64,
    random: &mut dyn FnMut() -> u32,
) -> Option<Plan> {
    if !cfg.rewrite.enabled {
        return None;
    }
    let code = status_code(up.status)?;
    let degraded = code == 200 && up.degraded && class.is_crawler();
    if !degraded && !cfg.rewrite.statuses.contains(&code) {
        return None;
    }
    let status = if degraded { 503 } else { code };
    let policy: &ClassPolicy = cfg.policy(class);
    // A 503 is the site's load, not the client's rate: retrying in the class's 1-3 s makes
    // it worse, so it gets the shedding range, and the origin's own longer value up to
    // rewrite.max_retry_after_s.
    let (ra, kept) = if status == 503 {
        let shed = cfg.shedding.retry_after;
        let kept = RetryAfter {
            max_s: cfg.rewrite.max_retry_after_s,
            ..shed
        };
        (shed, kept)
    } else {
        (policy.retry_after, policy.retry_after)
    };
    let mut fixes = Fixes {
        body_replaced: up.has_body,
        cache_control_replaced: up
            .cache_control
            .is_some_and(|c| !c.trim_ascii().eq_ignore_ascii_case(b"no-store")),
        ..Fixes::default()
    };
    let retry_after_s = match parse_retry_after(up.retry_after, now_s) {
        UpstreamRetryAfter::Seconds(s) => rejection::clamp_s(s, &kept),
        UpstreamRetryAfter::Date(s) => {
            fixes.retry_after_converted = true;
            rejection::clamp_s(s, &kept)
        }
        UpstreamRetryAfter::Missing | UpstreamRetryAfter::Invalid => {
            fixes.retry_after_added = true;
            rejection::retry_after_s(0, &ra, random())
        }
    };
    Some(Plan {
        status,
        retry_after_s,
        fixes,
        degraded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    // 2026-11-30T12:00:00Z
    const NOW: u64 = 1_796_040_000;

    fn cfg(json: &str) -> Config {
        config::parse(json.as_bytes()).expect("valid config")
    }

    fn vals(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        assert_eq!(
            http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(http_date(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777));
        assert_eq!(http_date(b"Mon, 30 Nov 2026 12:00:00 GMT"), Some(NOW));
        assert_eq!(
            http_date(b"Thu, 29 Feb 2024 00:00:00 GMT"),
            Some(1_709_164_800)
        );
        for bad in [
            &b"soon"[..],
            b"Sun, 06 Nov 1994 08:49:37 PST",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Sat, 31 Feb 2024 08:49:37 GMT",
            b"Thu, 29 Feb 2023 00:00:00 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49 GMT",
            b"Sun, 06 Nov 99999999999999999999 08:49:37 GMT",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_values() {
        assert_eq!(
            parse_retry_after(&vals(&["120"]), NOW),
            UpstreamRetryAfter::Seconds(120)
        );
        assert_eq!(
            parse_retry_after(&vals(&[" 7 "]), NOW),
            UpstreamRetryAfter::Seconds(7)
        );
        assert_eq!(
            parse_retry_after(&vals(&["Mon, 30 Nov 2026 12:01:30 GMT"]), NOW),
            UpstreamRetryAfter::Date(90)
        );
        assert_eq!(
            parse_retry_after(&vals(&["Mon, 30 Nov 2026 11:00:00 GMT"]), NOW),
            UpstreamRetryAfter::Date(0)
        );
        assert_eq!(
            parse_retry_after(&vals(&["soon"]), NOW),
            UpstreamRetryAfter::Invalid
        );
        assert_eq!(
            parse_retry_after(&vals(&["-5"]), NOW),
            UpstreamRetryAfter::Invalid
        );
        assert_eq!(
            parse_retry_after(&vals(&["1.5"]), NOW),
            UpstreamRetryAfter::Invalid
        );
        assert_eq!(parse_retry_after(&[], NOW), UpstreamRetryAfter::Missing);
        assert_eq!(
            parse_retry_after(&vals(&["5", "5"]), NOW),
            UpstreamRetryAfter::Seconds(5)
        );
        assert_eq!(
            parse_retry_after(&vals(&["5", "6"]), NOW),
            UpstreamRetryAfter::Invalid
        );
        assert_eq!(
            parse_retry_after(&vals(&["99999999999999999999999"]), NOW),
            UpstreamRetryAfter::Seconds(u64::MAX)
        );
    }

    fn up<'a>(status: &'a str, ra: &'a [Vec<u8>]) -> Upstream<'a> {
        Upstream {
            status: Some(status.as_bytes()),
            retry_after: ra,
            cache_control: None,
            degraded: false,
            has_body: true,
        }
    }

    #[test]
    fn plans_for_upstream_429_and_503() {
        let c = cfg("{}");
        // human: min 1, max 60, jitter 2.
        let ra = vals(&["120"]);
        let p = plan(&c, Class::Human, &up("429", &ra), NOW, &mut || 0).expect("rewritten");
        assert_eq!(p.status, 429);
        assert_eq!(p.retry_after_s, 60); // clamped to the class max
        assert_eq!(
            p.fixes,
            Fixes {
                body_replaced: true,
                ..Fixes::default()
            }
        );
        let ra = vals(&["Mon, 30 Nov 2026 12:01:30 GMT"]);
        let p = plan(&c, Class::Script, &up("503", &ra), NOW, &mut || 0).expect("rewritten");
        assert_eq!((p.status, p.retry_after_s), (503, 90));
        assert!(p.fixes.retry_after_converted);
        let ra = vals(&["soon"]);
        let p = plan(&c, Class::Human, &up("429", &ra), NOW, &mut || 2).expect("rewritten");
        assert_eq!(p.retry_after_s, 1 + 2); // computed: min_s + jitter
        assert!(p.fixes.retry_after_added);
        let p = plan(&c, Class::Human, &up("503", &[]), NOW, &mut || 0).expect("rewritten");
        assert_eq!(p.retry_after_s, 15); // a 503: shedding.retry_after.min_s
        assert!(p.fixes.retry_after_added);
    }

    #[test]
    fn a_503_gets_the_shedding_range_and_keeps_a_longer_origin_value_up_to_the_cap() {
        let c = cfg("{}");
        let mut u = up("503", &[]);
        // Missing or invalid: shedding.retry_after, 15 + 0..=15, for every class.
        for class in [Class::Human, Class::SearchCrawler, Class::Script] {
            let p = plan(&c, class, &u, NOW, &mut || 0).expect("rewritten");
            assert_eq!((p.status, p.retry_after_s), (503, 15), "{class:?}");
            let p = plan(&c, class, &u, NOW, &mut || 15).expect("rewritten");
            assert_eq!(p.retry_after_s, 30, "{class:?}");
            let p = plan(&c, class, &u, NOW, &mut || 16).expect("rewritten");
            assert_eq!(p.retry_after_s, 15, "{class:?}"); // 16 % 16
        }
        let bad = vals(&["soon"]);
        u.retry_after = &bad;
        let p = plan(&c, Class::Human, &u, NOW, &mut || 3).expect("rewritten");
        assert_eq!(p.retry_after_s, 18);
        // The origin's own: raised to 15, kept above 60 (no jitter), cut at 3600.
        for (sent, want) in [
            ("2", 15),
            ("15", 15),
            ("45", 45),
            ("300", 300),
            ("3600", 3600),
            ("86400", 3600),
        ] {
            let ra = vals(&[sent]);
            let p =
                plan(&c, Class::SearchCrawler, &up("503", &ra), NOW, &mut || 7).expect("rewritten");
            assert_eq!((p.status, p.retry_after_s), (503, want), "{sent}");
            assert!(!p.fixes.retry_after_added);
        }
        let ra = vals(&["Mon, 30 Nov 2026 12:05:00 GMT"]);
        let p = plan(&c, Class::AiTrainer, &up("503", &ra), NOW, &mut || 7).expect("rewritten");
        assert_eq!(p.retry_after_s, 300);
        // A 429 still gets the class range: a human's 300 is cut to its max_s, 60.
        let ra = vals(&["300"]);
        let p = plan(&c, Class::Human, &up("429", &ra), NOW, &mut || 0).expect("rewritten");
        assert_eq!((p.status, p.retry_after_s), (429, 60));
        // Both ends configurable.
        let c = cfg(
            r#"{"shedding":{"retry_after":{"min_s":20,"max_s":90,"jitter_s":0}},
                "rewrite":{"max_retry_after_s":120}}"#,
        );
        let p = plan(&c, Class::Human, &up("503", &[]), NOW, &mut || 9).expect("rewritten");
        assert_eq!(p.retry_after_s, 20);
        let p = plan(&c, Class::Human, &up("503", &ra), NOW, &mut || 9).expect("rewritten");
        assert_eq!(p.retry_after_s, 120);
    }

    #[test]
    fn a_cap_below_the_shedding_max_is_refused_with_its_field_path() {
        let e = config::parse(br#"{"rewrite":{"max_retry_after_s":30}}"#).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "rewrite.max_retry_after_s: must be in shedding.retry_after.max_s..=86400 \
             (shedding.retry_after.max_s is 60)"
        );
        let e = config::parse(br#"{"rewrite":{"max_retry_after_s":86401}}"#).expect_err("refused");
        assert!(
            e.to_string().starts_with("rewrite.max_retry_after_s: "),
            "{e}"
        );
        let c =
            cfg(r#"{"shedding":{"retry_after":{"max_s":20}},"rewrite":{"max_retry_after_s":20}}"#);
        assert_eq!(c.rewrite.max_retry_after_s, 20);
    }

    #[test]
    fn cache_control_and_body_fixes_are_reported() {
        let c = cfg("{}");
        let mut u = up("503", &[]);
        u.cache_control = Some(b"public, max-age=600");
        u.has_body = false;
        let p = plan(&c, Class::Human, &u, NOW, &mut || 0).expect("rewritten");
        assert!(p.fixes.cache_control_replaced);
        assert!(!p.fixes.body_replaced);
        u.cache_control = Some(b"No-Store");
        let p = plan(&c, Class::Human, &u, NOW, &mut || 0).expect("rewritten");
        assert!(!p.fixes.cache_control_replaced);
    }

    #[test]
    fn other_statuses_pass_untouched_unless_configured() {
        let c = cfg("{}");
        for s in ["200", "404", "500", "502", "504", "2000", "abc"] {
            assert_eq!(
                plan(&c, Class::Human, &up(s, &[]), NOW, &mut || 0),
                None,
                "{s}"
            );
        }
        let c = cfg(r#"{"rewrite":{"statuses":[429,503,502,504]}}"#);
        assert!(plan(&c, Class::Human, &up("502", &[]), NOW, &mut || 0).is_some());
        let off = cfg(r#"{"rewrite":{"enabled":false}}"#);
        assert_eq!(
            plan(&off, Class::Human, &up("429", &[]), NOW, &mut || 0),
            None
        );
    }

    #[test]
    fn degraded_200_becomes_503_for_crawlers_only() {
        let c = cfg(r#"{"degraded":"x-degraded"}"#);
        let mut u = up("200", &[]);
        u.degraded = true;
        let p = plan(&c, Class::SearchCrawler, &u, NOW, &mut || 0).expect("rewritten");
        assert_eq!(p.status, 503);
        assert!(p.degraded);
        assert_eq!(p.retry_after_s, 15);
        assert_eq!(plan(&c, Class::Human, &u, NOW, &mut || 0), None);
        assert_eq!(plan(&c, Class::UnverifiedBot, &u, NOW, &mut || 0), None);
        u.degraded = false;
        assert_eq!(plan(&c, Class::SearchCrawler, &u, NOW, &mut || 0), None);
    }
}
