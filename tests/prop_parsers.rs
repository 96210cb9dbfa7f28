//! Property tests of the small parsers and encoders the filter owns: client address and
//! `x-forwarded-for` (`client_ip`), verifier answers (`verify::parse_response`), upstream
//! `Retry-After` (`rewrite::parse_retry_after`, `rewrite::http_date`), our own Retry-After
//! (`respond::retry_after_s`) and the shared-data slot encodings (`slot_table`, with bucket
//! and verdict values).
//!
//! Cases: 256 by default; `PROPTEST_CASES=N` raises (or lowers) every test's count.

mod common;

use common::pt_config;
use crawlguard_core::config::{ClientIpConfig, IpSource, RetryAfter};
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::client_ip::{client_ip, from_xff, masked, parse_addr};
use crawlguard_core::identity::verdict_cache::{ClaimEntry, PrefixEntry};
use crawlguard_core::identity::verifier_answer::{
    parse_response, CheckedAnswer, Verdict, VerifyError,
};
use crawlguard_core::limits::bucket::BucketState;
use crawlguard_core::limits::cost::CostState;
use crawlguard_core::limits::in_flight::InFlight;
use crawlguard_core::limits::limiter::KeyState;
use crawlguard_core::response::rejection::retry_after_s;
use crawlguard_core::response::rewrite::{http_date, parse_retry_after, UpstreamRetryAfter};
use crawlguard_core::store::slot_table::{SlotTable, SlotValue};
use crawlguard_core::store::SharedData;
use crawlguard_testkit::MemStore;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// ---------------------------------------------------------------------------------------------
// client_ip

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
        // IPv4-mapped IPv6, link-local and loopback are the interesting v6 shapes.
        any::<u32>().prop_map(|b| IpAddr::V6(Ipv4Addr::from(b).to_ipv6_mapped())),
        any::<u64>().prop_map(|b| IpAddr::V6(Ipv6Addr::from((0xfe80u128 << 112) | u128::from(b)))),
        Just(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        Just(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
    ]
}

/// Every textual form Envoy or a proxy may give for `ip`, with the port and zone to use.
fn forms(ip: IpAddr, port: u16, zone: &str, pad: &str) -> Vec<String> {
    let mut v = vec![
        format!("{ip}"),
        format!("{pad}{ip}{pad}"),
        format!("\"{ip}\""),
    ];
    match ip {
        IpAddr::V4(_) => v.push(format!("{ip}:{port}")),
        IpAddr::V6(v6) => {
            v.push(format!("[{ip}]"));
            v.push(format!("[{ip}]:{port}"));
            v.push(format!("{ip}%{zone}"));
            v.push(format!("[{ip}%25{zone}]:{port}"));
            // Fully expanded, leading zeros kept (8 x 4 hex digits, 39 chars).
            let full: Vec<String> = v6.segments().iter().map(|s| format!("{s:04x}")).collect();
            v.push(full.join(":"));
            v.push(format!("[{}]:{port}", full.join(":").to_uppercase()));
        }
    }
    v
}

fn prefix_cfg(v4: u8, v6: u8) -> ClientIpConfig {
    ClientIpConfig {
        ipv4_prefix_len: v4,
        ipv6_prefix_len: v6,
        ..ClientIpConfig::default()
    }
}

/// Expected masked value computed independently (bit by bit, not by shifting a mask).
fn mask_bits(ip: IpAddr, v4: u8, v6: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let keep = u32::from(v4.min(32));
            let m = (0..32u32)
                .filter(|i| *i < keep)
                .fold(0u32, |m, i| m | (1 << (31 - i)));
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let keep = u32::from(v6.min(128));
            let m = (0..128u32)
                .filter(|i| *i < keep)
                .fold(0u128, |m, i| m | (1 << (127 - i)));
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

/// XFF entries that never parse as an address.
const XFF_GARBAGE: &[&str] = &[
    "unknown",
    "_hidden",
    "",
    " ",
    "1.2.3.4.5",
    "256.1.1.1",
    "[]",
    "::g",
    "for=1.2.3.4",
    "\u{0}",
    "1.2.3",
    "999999999999999999999999999999999999999999999999999999999999999999999",
];

#[derive(Debug, Clone)]
enum XffEntry {
    Ip(IpAddr, usize, u16),
    Garbage(&'static str),
}

fn xff_entry() -> impl Strategy<Value = XffEntry> {
    prop_oneof![
        3 => (any_ip(), 0..4usize, any::<u16>()).prop_map(|(ip, form, port)| XffEntry::Ip(ip, form, port)),
        1 => prop::sample::select(XFF_GARBAGE).prop_map(XffEntry::Garbage),
    ]
}

impl XffEntry {
    fn text(&self) -> String {
        match self {
            XffEntry::Ip(ip, form, port) => {
                let all = forms(*ip, *port, "eth0", " ");
                // Forms without a comma-free problem: every form is comma-free.
                all.get(form % all.len()).cloned().unwrap_or_default()
            }
            XffEntry::Garbage(g) => (*g).to_string(),
        }
    }

    fn want(&self) -> Option<IpAddr> {
        match self {
            XffEntry::Ip(ip, ..) => Some(ip.to_canonical()),
            XffEntry::Garbage(_) => None,
        }
    }
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn parse_addr_roundtrips_every_form(
        ip in any_ip(),
        port in any::<u16>(),
        zone in "[a-z0-9]{1,8}",
        pad in "[ \t]{0,3}",
    ) {
        for f in forms(ip, port, &zone, &pad) {
            prop_assert_eq!(parse_addr(f.as_bytes()), Some(ip.to_canonical()), "form {:?}", f);
        }
    }

    #[test]
    fn parse_addr_never_panics_and_returns_canonical(raw in prop::collection::vec(any::<u8>(), 0..100)) {
        if let Some(ip) = parse_addr(&raw) {
            prop_assert_eq!(ip, ip.to_canonical());
        }
    }

    #[test]
    fn parse_addr_on_ip_like_text_never_panics(s in "[0-9a-fA-F:.\\[\\]%\" ]{0,70}") {
        if let Some(ip) = parse_addr(s.as_bytes()) {
            prop_assert_eq!(ip, ip.to_canonical());
        }
    }

    #[test]
    fn masked_is_idempotent_and_keeps_only_the_prefix(ip in any_ip(), v4 in any::<u8>(), v6 in any::<u8>()) {
        let cfg = prefix_cfg(v4, v6);
        let m = masked(ip, &cfg);
        prop_assert_eq!(masked(m, &cfg), m);
        prop_assert_eq!(m, mask_bits(ip, v4, v6));
        // No bit set beyond the prefix.
        match m {
            IpAddr::V4(a) => {
                let len = u32::from(v4.min(32));
                prop_assert_eq!(u32::from(a).checked_shl(len).unwrap_or(0), 0);
            }
            IpAddr::V6(a) => {
                let len = u32::from(v6.min(128));
                prop_assert_eq!(u128::from(a).checked_shl(len).unwrap_or(0), 0);
            }
        }
        prop_assert_eq!(m.is_ipv4(), ip.is_ipv4());
    }

    #[test]
    fn masked_groups_exactly_the_addresses_sharing_the_prefix(a in any::<u128>(), b in any::<u128>(), len in 0u8..=128) {
        let cfg = prefix_cfg(32, len);
        let (x, y) = (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)));
        let same_prefix = (a ^ b).checked_shr(128 - u32::from(len)).unwrap_or(0) == 0;
        prop_assert_eq!(masked(x, &cfg) == masked(y, &cfg), same_prefix);
    }

    #[test]
    fn xff_picks_the_entry_n_hops_from_the_right(
        entries in prop::collection::vec(xff_entry(), 1..=100),
        hops in 0u32..=104,
        sep in prop::sample::select(&[",", ", ", " , ", ",\t"][..]),
    ) {
        let xff = entries.iter().map(XffEntry::text).collect::<Vec<_>>().join(sep);
        let n = entries.len();
        let want = match usize::try_from(hops) {
            Ok(h) if h >= 1 && h <= n => entries.get(n - h).and_then(XffEntry::want),
            _ => None,
        };
        prop_assert_eq!(from_xff(xff.as_bytes(), hops), want);
        prop_assert_eq!(from_xff(xff.as_bytes(), u32::MAX), None);
    }

    #[test]
    fn client_ip_prefers_xff_only_when_configured_and_usable(
        entries in prop::collection::vec(xff_entry(), 0..=12),
        hops in 1u32..=16,
        remote in prop::option::of(xff_entry()),
        use_xff in any::<bool>(),
        xff_present in any::<bool>(),
    ) {
        let xff = entries.iter().map(XffEntry::text).collect::<Vec<_>>().join(", ");
        let remote_text = remote.as_ref().map(XffEntry::text);
        let cfg = ClientIpConfig {
            source: if use_xff { IpSource::Xff } else { IpSource::RemoteAddress },
            xff_trusted_hops: hops,
            ..ClientIpConfig::default()
        };
        let xff_arg = xff_present.then_some(xff.as_bytes());
        let got = client_ip(&cfg, remote_text.as_deref().map(str::as_bytes), xff_arg);
        let from_remote = remote.as_ref().and_then(XffEntry::want);
        let h = hops as usize;
        let from_x = (xff_present && h <= entries.len())
            .then(|| entries.get(entries.len() - h).and_then(XffEntry::want))
            .flatten();
        let want = if use_xff { from_x.or(from_remote) } else { from_remote };
        prop_assert_eq!(got, want);
    }

    #[test]
    fn from_xff_never_panics(raw in prop::collection::vec(any::<u8>(), 0..600), hops in any::<u32>()) {
        let _ = from_xff(&raw, hops);
    }
}

// ---------------------------------------------------------------------------------------------
// verify::parse_response

fn verdict() -> impl Strategy<Value = Verdict> {
    prop::sample::select(vec![Verdict::Verified, Verdict::Spoofed, Verdict::Unknown])
}

/// Textual forms of `ip` a verifier may echo (all denote the same address).
fn ip_texts(ip: IpAddr) -> Vec<String> {
    match ip {
        IpAddr::V4(v4) => vec![ip.to_string(), v4.to_ipv6_mapped().to_string()],
        IpAddr::V6(v6) => {
            let full: Vec<String> = v6.segments().iter().map(|s| format!("{s:x}")).collect();
            vec![
                ip.to_string(),
                full.join(":"),
                ip.to_string().to_uppercase(),
            ]
        }
    }
}

/// A contract answer as JSON, fields in the order given by `order`, with extra fields.
fn answer_json(
    ip: &str,
    bot: &str,
    v: Verdict,
    ttl: u64,
    host: &str,
    order: &[usize],
    ws: &str,
) -> String {
    let js = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let fields = [
        format!("\"ip\":{ws}{}", js(ip)),
        format!("\"bot\":{ws}{}", js(bot)),
        format!("\"verdict\":{ws}\"{}\"", v.as_str()),
        format!("\"method\":{ws}\"fcrdns\""),
        format!("\"host\":{ws}{}", js(host)),
        format!("\"ttl_s\":{ws}{ttl}"),
    ];
    let picked: Vec<&String> = order.iter().filter_map(|i| fields.get(*i)).collect();
    format!(
        "{{{ws}{}{ws}}}",
        picked
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(&format!(",{ws}"))
    )
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn parse_response_never_panics(
        status in prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
        body in prop::collection::vec(any::<u8>(), 0..300),
        ip in any_ip(),
        bot in "[a-z0-9._-]{0,20}",
    ) {
        let r = parse_response(status.as_deref(), &body, ip.to_canonical(), &bot);
        match (&status, &r) {
            (None, _) => prop_assert_eq!(r.clone(), Err(VerifyError::NoResponse)),
            (Some(s), Err(VerifyError::Status(t))) => {
                prop_assert_ne!(s.as_slice(), b"200");
                prop_assert!(t.chars().count() <= 16);
            }
            (Some(s), _) => prop_assert_eq!(s.as_slice(), b"200"),
        }
        if let Err(VerifyError::Body(m)) = &r {
            prop_assert!(m.len() <= 512);
        }
    }

    #[test]
    fn parse_response_on_json_shaped_bodies_never_panics(
        body in "\\{[\"a-z_:, 0-9.\\[\\]{}\\\\-]{0,120}\\}",
        ip in any_ip(),
    ) {
        let _ = parse_response(Some(b"200"), body.as_bytes(), ip.to_canonical(), "googlebot");
    }

    #[test]
    fn well_formed_answers_parse_to_the_same_verdict_and_ttl(
        ip in any_ip(),
        bot in "[a-z0-9._-]{1,64}",
        v in verdict(),
        ttl in any::<u64>(),
        host in "\\PC{0,40}",
        perm in Just((0..6).collect::<Vec<usize>>()).prop_shuffle(),
        drop_extra in any::<bool>(),
        ws in prop::sample::select(&["", " ", "\n  ", "\t"][..]),
    ) {
        let ip = ip.to_canonical();
        // Extra fields (method, host) may be absent or anywhere.
        let order: Vec<usize> = perm.into_iter().filter(|i| !(drop_extra && (*i == 3 || *i == 4))).collect();
        let want = Ok(CheckedAnswer { verdict: v, ttl_s: ttl });
        for text in ip_texts(ip) {
            let body = answer_json(&text, &bot, v, ttl, &host, &order, ws);
            prop_assert_eq!(parse_response(Some(b"200"), body.as_bytes(), ip, &bot), want.clone(), "{}", body);
        }
        // The same answer for another bot or another address is not an answer to this claim.
        let body = answer_json(&ip.to_string(), &bot, v, ttl, &host, &order, ws);
        let other_bot = format!("{bot}x");
        prop_assert!(matches!(parse_response(Some(b"200"), body.as_bytes(), ip, &other_bot), Err(VerifyError::Body(_))));
        let other_ip = match ip {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) ^ 1)),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) ^ 1)).to_canonical(),
        };
        prop_assert!(matches!(parse_response(Some(b"200"), body.as_bytes(), other_ip, &bot), Err(VerifyError::Body(_))));
        // A non-200 status is never an answer, whatever the body.
        prop_assert!(matches!(parse_response(Some(b"503"), body.as_bytes(), ip, &bot), Err(VerifyError::Status(_))));
    }
}

// ---------------------------------------------------------------------------------------------
// Retry-After: upstream parsing, HTTP-dates, and our own value

/// Last second of 9999-12-31, the largest time an HTTP-date with a 4-digit year can name.
const MAX_T: u64 = 253_402_300_799;
const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const LONG_DAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// (year, month 1..=12, day 1..=31) of days since 1970-01-01 (Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, usize, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as usize;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

struct Parts {
    wday: usize,
    y: i64,
    mon: &'static str,
    d: u32,
    hms: String,
}

fn parts(t: u64) -> Parts {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    let (y, m, d) = civil_from_days(days);
    Parts {
        wday: (days % 7) as usize,
        y,
        mon: MONTHS.get(m - 1).copied().unwrap_or("???"),
        d,
        hms: format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60),
    }
}

/// IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
fn imf_fixdate(t: u64) -> String {
    let p = parts(t);
    let wd = DAYS.get(p.wday).copied().unwrap_or("???");
    format!("{wd}, {:02} {} {:04} {} GMT", p.d, p.mon, p.y, p.hms)
}

/// rfc850-date: `Sunday, 06-Nov-94 08:49:37 GMT`.
fn rfc850(t: u64) -> String {
    let p = parts(t);
    let wd = LONG_DAYS.get(p.wday).copied().unwrap_or("???");
    format!("{wd}, {:02}-{}-{:02} {} GMT", p.d, p.mon, p.y % 100, p.hms)
}

/// asctime-date: `Sun Nov  6 08:49:37 1994`.
fn asctime(t: u64) -> String {
    let p = parts(t);
    let wd = DAYS.get(p.wday).copied().unwrap_or("???");
    format!("{wd} {} {:>2} {} {}", p.mon, p.d, p.hms, p.y)
}

/// delay-seconds digits as the exact (saturating) u64.
fn digits_value(d: &str) -> u64 {
    let v = d.bytes().fold(0u128, |acc, b| {
        (acc * 10 + u128::from(b - b'0')).min(u128::from(u64::MAX) + 1)
    });
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[test]
fn date_formatter_matches_the_rfc_example() {
    assert_eq!(imf_fixdate(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(rfc850(784_111_777), "Sunday, 06-Nov-94 08:49:37 GMT");
    assert_eq!(asctime(784_111_777), "Sun Nov  6 08:49:37 1994");
    assert_eq!(imf_fixdate(MAX_T), "Fri, 31 Dec 9999 23:59:59 GMT");
    assert_eq!(imf_fixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(http_date(imf_fixdate(MAX_T).as_bytes()), Some(MAX_T));
    assert_eq!(http_date(b"Sat, 01 Jan 10000 00:00:00 GMT"), None);
    assert_eq!(http_date(b"Wed, 31 Dec 1969 23:59:59 GMT"), None);
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn imf_fixdate_roundtrips_for_every_second_1970_to_9999(t in 0..=MAX_T, now in any::<u64>()) {
        let s = imf_fixdate(t);
        prop_assert_eq!(http_date(s.as_bytes()), Some(t), "{}", s);
        prop_assert_eq!(
            parse_retry_after(&[s.clone().into_bytes()], now),
            UpstreamRetryAfter::Date(t.saturating_sub(now))
        );
        // Several identical values count once.
        prop_assert_eq!(
            parse_retry_after(&[s.clone().into_bytes(), format!("  {s} ").into_bytes()], now),
            UpstreamRetryAfter::Date(t.saturating_sub(now))
        );
    }

    #[test]
    fn obsolete_date_forms_roundtrip(t in 0u64..3_155_760_000, t_any in 0..=MAX_T) {
        // rfc850 two-digit years: 70..=99 are 19xx, 00..=69 are 20xx, so 1970..=2069 roundtrip.
        let s = rfc850(t);
        prop_assert_eq!(http_date(s.as_bytes()), Some(t), "{}", s);
        let s = asctime(t_any);
        prop_assert_eq!(http_date(s.as_bytes()), Some(t_any), "{}", s);
    }

    #[test]
    fn delay_seconds_parse_to_the_exact_saturating_number(
        d in "[0-9]{1,45}",
        pad_l in "[ \t]{0,2}",
        pad_r in "[ \t]{0,2}",
        n in any::<u64>(),
        now in any::<u64>(),
    ) {
        let v = format!("{pad_l}{d}{pad_r}").into_bytes();
        prop_assert_eq!(parse_retry_after(&[v], now), UpstreamRetryAfter::Seconds(digits_value(&d)));
        prop_assert_eq!(parse_retry_after(&[n.to_string().into_bytes()], now), UpstreamRetryAfter::Seconds(n));
    }

    #[test]
    fn disagreeing_values_are_invalid(a in any::<u64>(), b in any::<u64>(), now in any::<u64>()) {
        let va = a.to_string().into_bytes();
        let vb = b.to_string().into_bytes();
        let want = if a == b { UpstreamRetryAfter::Seconds(a) } else { UpstreamRetryAfter::Invalid };
        prop_assert_eq!(parse_retry_after(&[va, vb], now), want);
        prop_assert_eq!(parse_retry_after(&[], now), UpstreamRetryAfter::Missing);
    }

    #[test]
    fn retry_after_parsing_never_panics(
        values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..4),
        text in "[A-Za-z0-9 ,:+-]{0,40}",
        now in any::<u64>(),
    ) {
        let _ = parse_retry_after(&values, now);
        let _ = parse_retry_after(&[text.clone().into_bytes()], now);
        for v in &values {
            if let Some(t) = http_date(v) {
                prop_assert!(t <= MAX_T + 86_400);
            }
        }
        if let Some(t) = http_date(text.as_bytes()) {
            prop_assert!(t <= MAX_T + 86_400);
        }
    }

    #[test]
    fn our_retry_after_is_within_the_class_range_and_never_zero(
        wait_ns in any::<u64>(),
        min_s in prop_oneof![0u32..100, any::<u32>()],
        max_s in prop_oneof![0u32..10_000, any::<u32>()],
        jitter_s in prop_oneof![0u32..100, any::<u32>()],
        random in any::<u32>(),
    ) {
        let policy = RetryAfter { min_s, max_s, jitter_s };
        let v = retry_after_s(wait_ns, &policy, random);
        let lo = u64::from(min_s.max(1));
        let hi = u64::from(max_s.max(min_s).max(1)) + u64::from(jitter_s);
        prop_assert!(v >= 1);
        prop_assert!(u64::from(v) >= lo && u64::from(v) <= hi, "{} not in {}..={}", v, lo, hi);
        // Exact: clamp(ceil(wait / 1 s)) + random % (jitter + 1), saturating at u32::MAX.
        if jitter_s < u32::MAX {
            let secs = u64::from(wait_ns.div_ceil(1_000_000_000).min(u64::from(u32::MAX)) as u32);
            let clamped = secs.clamp(lo, u64::from(max_s.max(min_s).max(1)));
            let want = (clamped + u64::from(random % (jitter_s + 1))).min(u64::from(u32::MAX));
            prop_assert_eq!(u64::from(v), want);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared-data slot encodings

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn bucket_slot_roundtrips(owner in 2u64.., tat_ns in any::<u64>(), last_ns in any::<u64>(), class in 0usize..=Class::ALL.len(), current in any::<u16>(), previous in any::<u16>(), epoch_s in any::<u32>(), last_cost in any::<u32>()) {
        // The slot layout: version 6, owner, tat_ns, last_ns, then the compliance fields
        // (all zero here but the told class: 0 for none, else its index + 1), then the places
        // in flight (current, previous, epoch_s) and the learned cost, little-endian.
        let t: SlotTable<KeyState> = SlotTable::new("b:", 1, 0);
        let store = MemStore::default();
        let mut state = KeyState { bucket: BucketState { tat_ns, last_ns }, ..KeyState::default() };
        state.compliance.class = class.checked_sub(1).and_then(|i| Class::ALL.get(i).copied());
        state.places = InFlight { current, previous, epoch_s };
        state.cost = CostState { last_cost };
        prop_assert!(t.measure_and_replace(&store, owner, 0, |_| ((), Some(state))).is_ok());
        let (bytes, _) = store.get("b:0").ok().flatten().unwrap_or_default();
        let mut want = vec![6u8];
        want.extend_from_slice(&owner.to_le_bytes());
        want.extend_from_slice(&tat_ns.to_le_bytes());
        want.extend_from_slice(&last_ns.to_le_bytes());
        want.extend_from_slice(&[0u8; 27]);
        want.push(class as u8);
        want.extend_from_slice(&current.to_le_bytes());
        want.extend_from_slice(&previous.to_le_bytes());
        want.extend_from_slice(&epoch_s.to_le_bytes());
        want.extend_from_slice(&last_cost.to_le_bytes());
        prop_assert_eq!(&bytes, &want);
        prop_assert_eq!(t.get(&store, owner, 0), Ok(Some(state)));
        // Any truncation or extension is refused (and healed), never misread.
        for n in 0..want.len() {
            store.poke("b:0", want.get(..n).unwrap_or_default());
            prop_assert_ne!(t.get(&store, owner, 0), Ok(Some(state)));
        }
        let mut longer = want.clone();
        longer.push(0);
        store.poke("b:0", &longer);
        prop_assert_ne!(t.get(&store, owner, 0), Ok(Some(state)));
    }

    #[test]
    fn claim_entry_roundtrips(verdict in 0u8..4, fresh in any::<u64>(), stale in any::<u64>(), backoff in any::<u64>()) {
        let e = ClaimEntry {
            verdict: match verdict {
                0 => None,
                1 => Some(Verdict::Verified),
                2 => Some(Verdict::Spoofed),
                _ => Some(Verdict::Unknown),
            },
            fresh_until_ns: fresh,
            stale_until_ns: stale,
            backoff_until_ns: backoff,
        };
        let mut b = [0u8; ClaimEntry::LEN];
        e.encode(&mut b);
        prop_assert_eq!(ClaimEntry::decode(&b), Some(e));
    }

    #[test]
    fn prefix_entry_roundtrips(spoofed in any::<u32>(), until in any::<u64>()) {
        let e = PrefixEntry { spoofed, until_ns: until };
        let mut b = [0u8; PrefixEntry::LEN];
        e.encode(&mut b);
        prop_assert_eq!(PrefixEntry::decode(&b), Some(e));
    }

    #[test]
    fn arbitrary_slot_bytes_never_misread(raw in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(any::<u8>(), 34..=34),
    ], fp in any::<u64>()) {
        // Whatever a slot holds, reading it through the table never panics, and what
        // decodes re-encodes to the same bytes.
        let t: SlotTable<ClaimEntry> = SlotTable::new("p:", 1, 2);
        let store = MemStore::default();
        store.poke("p:0", &raw);
        if let Ok(Some(e)) = t.get(&store, fp, 0) {
            let mut b = [0u8; ClaimEntry::LEN];
            e.encode(&mut b);
            prop_assert_eq!(raw.get(9..), Some(&b[..]));
        }
        let _ = t.measure_and_replace(&store, fp, 0, |e| ((), e.or(Some(ClaimEntry::default()))));
    }
}
