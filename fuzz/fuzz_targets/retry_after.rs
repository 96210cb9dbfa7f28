//! Upstream `Retry-After` parsing (`rewrite::parse_retry_after`, `rewrite::http_date`).
//! Input: line 1 is "now" in Unix seconds (0 if not a number), every further line one header
//! value. Never panics; a date parses to 1970..=9999 and its IMF-fixdate form parses back to
//! the same second; delay-seconds parse to the exact (saturating) number.
#![no_main]

use crawlguard_core::response::rewrite::{http_date, parse_retry_after, UpstreamRetryAfter};
use libfuzzer_sys::fuzz_target;

const MAX_T: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// IMF-fixdate of `t` (Hinnant's civil_from_days).
fn imf_fixdate(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let s = t % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let now = lines
        .next()
        .and_then(|l| std::str::from_utf8(l).ok())
        .and_then(|l| l.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let values: Vec<Vec<u8>> = lines.map(<[u8]>::to_vec).collect();
    let all = parse_retry_after(&values, now);
    if values.is_empty() {
        assert_eq!(all, UpstreamRetryAfter::Missing);
    }
    for v in &values {
        let one = parse_retry_after(std::slice::from_ref(v), now);
        if values.len() == 1 {
            assert_eq!(one, all);
        }
        let t = v.trim_ascii();
        if !t.is_empty() && t.iter().all(u8::is_ascii_digit) {
            let n = t
                .iter()
                .fold(0u128, |a, d| (a * 10 + u128::from(d - b'0')).min(1 << 64));
            assert_eq!(
                one,
                UpstreamRetryAfter::Seconds(u64::try_from(n).unwrap_or(u64::MAX))
            );
        }
        if let Some(secs) = http_date(v) {
            // A leap second (:60) is the next second, so 9999-12-31 23:59:60 is MAX_T + 1
            // (a date in year 10000, which has no 4-digit form to roundtrip through).
            assert!(secs <= MAX_T + 1, "{secs}");
            if secs <= MAX_T {
                let again = imf_fixdate(secs);
                assert_eq!(http_date(again.as_bytes()), Some(secs), "{again}");
            }
            assert_eq!(one, UpstreamRetryAfter::Date(secs.saturating_sub(now)));
        }
    }
    let _ = http_date(data);
});
