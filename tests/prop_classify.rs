//! Property tests of User-Agent classification (`classify::Classifier::classify`).
//!
//! The classifier is checked against a naive oracle (first catalog entry, in order, with any
//! non-blank token occurring in the UA followed by one space, ASCII case-insensitively; with
//! no entry, the human rule spelled out with plain substring searches), on arbitrary bytes up
//! to 64 KiB, on real UAs with random case and on random user catalogs (one-byte tokens,
//! non-ASCII tokens, blank tokens).
//!
//! Cases: 256 by default; `PROPTEST_CASES=N` raises (or lowers) every test's count.

mod common;

use common::pt_config;
use crawlguard_core::identity::catalog::{builtin_catalog, builtin_human_rule, BotEntry};
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::classify::{Classification, Classifier};
use proptest::prelude::*;
use std::sync::OnceLock;

/// The built-in catalog (loaded once).
fn catalog() -> &'static [BotEntry] {
    static C: OnceLock<Vec<BotEntry>> = OnceLock::new();
    C.get_or_init(builtin_catalog)
}

fn builtin() -> &'static Classifier {
    static C: OnceLock<Classifier> = OnceLock::new();
    C.get_or_init(|| Classifier::new(catalog().to_vec()))
}

/// Real User-Agents (uap-core `test_ua.yaml`, crawler-user-agents `instances`, vendor docs).
const REAL_UAS: &[&str] = &[
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/134.0.6998.165 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Googlebot-Image/1.0",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; ChatGPT-User/1.0; +https://openai.com/bot",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)",
    "CCBot/2.0 (https://commoncrawl.org/faq/)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.2 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    // device-detector fixtures: a device name with a bot marker, a lost parenthesis, none.
    "Mozilla/5.0 (Linux; Android 7.0; M bot 54) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/78.0.3904.96 Mobile Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; BDCbot/1.0; +http://bigweb.bigdatacorp.com.br/faq.aspx) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/69.0.3497.100 Safari/537.36",
    "Mozilla/5.0 Linux; Android 7.0; BQ-5201 AppleWebKit/537.36 KHTML, like Gecko Chrome/73.0.3683.90 Mobile Safari/537.36",
    "FBAN/FBIOS;FBAV/182.0.0.42.80;FBBV/118457561;FBDV/iPhone10,3;FBMD/iPhone;FBSN/iOS",
];

/// Browser fragments a bot UA may be followed by (all classify as `human` on their own).
const BROWSER_SUFFIXES: &[&str] = &[
    " Chrome/131.0.0.0 Safari/537.36",
    " AppleWebKit/537.36 (KHTML, like Gecko) Chrome/134.0.6998.165 Mobile Safari/537.36",
    " (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Edg/120.0.0.0",
    " Version/17.2 Mobile/15E148 Safari/604.1",
    " Gecko/20100101 Firefox/121.0",
    " (X11; Linux x86_64)",
    "",
];

const GOOGLEBOT_UAS: &[&str] = &[
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/134.0.6998.165 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; +http://www.google.com/bot.html) Chrome/134.0.6998.165 Safari/537.36",
];

/// Whether `hay` (lowercase) contains `needle` (lowercase, non-empty).
fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The parenthesised platform sections, naively: the bytes after the first `(` up to and
/// including the next `)` (or to the end), from the start and from the earliest anchor; as
/// ranges of `low`.
fn naive_sections(low: &[u8]) -> Vec<std::ops::Range<usize>> {
    let h = builtin_human_rule();
    let section = |from: usize| -> Option<std::ops::Range<usize>> {
        let open = from + low[from..].iter().position(|&b| b == b'(')? + 1;
        let len = low[open..].iter().take_while(|&&b| b != b')').count();
        Some(open..(open + len + 1).min(low.len()))
    };
    let anchor = h
        .platform_section_after
        .iter()
        .filter_map(|a| low.windows(a.len()).position(|w| w == a.as_bytes()))
        .min();
    [Some(0), anchor]
        .into_iter()
        .flatten()
        .filter_map(section)
        .collect()
}

/// The human rule, naively: `(browser-shaped, by a device platform)`. Browser-shaped: a
/// browser form anywhere; or a device platform in a platform section (the parenthesised ones,
/// and the head before the first `(`); or a desktop platform there and a browser token
/// anywhere.
fn naive_shape(ua: &[u8]) -> (bool, bool) {
    let h = builtin_human_rule();
    let low = ua.to_ascii_lowercase();
    let head = 0..low.iter().position(|&b| b == b'(').unwrap_or(low.len());
    let mut sections: Vec<&[u8]> = naive_sections(&low).into_iter().map(|r| &low[r]).collect();
    sections.push(&low[head]);
    let any_in = |list: &[&str]| sections.iter().any(|s| list.iter().any(|t| contains(s, t)));
    let device = any_in(h.device_platforms);
    let browser = h.browser_forms.iter().any(|t| contains(&low, t))
        || device
        || (any_in(h.desktop_platforms) && h.browser_tokens.iter().any(|t| contains(&low, t)));
    (browser, device)
}

fn naive_browser_shaped(ua: &[u8]) -> bool {
    naive_shape(ua).0
}

/// Whether the generic markers entry `e` matched only as device names: the UA names a
/// device platform, every occurrence of its tokens (in `ua` plus one space) ends inside a parenthesised platform section, at most
/// 8 distinct end positions, and none is a declaration (`markers_in_platform_section`).
fn naive_device_names(e: &BotEntry, ua: &[u8]) -> bool {
    let h = builtin_human_rule();
    if e.id != h.generic_markers_id || !naive_shape(ua).1 {
        return false;
    }
    let low = ua.to_ascii_lowercase();
    let mut hay = low.clone();
    hay.push(b' ');
    if h.markers_in_platform_section
        .iter()
        .any(|t| contains(&hay, t))
    {
        return false;
    }
    let sections = naive_sections(&low);
    let mut ends = std::collections::BTreeSet::new();
    for t in e.ua_contains.iter().filter(|t| !t.trim().is_empty()) {
        let needle = t.as_bytes().to_ascii_lowercase();
        for (start, w) in hay.windows(needle.len()).enumerate() {
            if w == needle.as_slice() {
                ends.insert(start + needle.len() - 1);
            }
        }
    }
    ends.len() <= 8
        && ends
            .iter()
            .all(|end| sections.iter().any(|r| r.contains(end)))
}

/// The oracle: index of the first entry with a non-blank token occurring in `ua` followed by
/// one space, comparing ASCII case-insensitively (other bytes exactly). Quadratic; for inputs
/// up to a few KiB.
fn oracle(entries: &[BotEntry], ua: &[u8]) -> Option<usize> {
    let mut hay = ua.to_ascii_lowercase();
    hay.push(b' ');
    entries.iter().position(|e| {
        e.ua_contains.iter().any(|t| {
            if t.trim().is_empty() {
                return false;
            }
            let needle = t.as_bytes().to_ascii_lowercase();
            hay.windows(needle.len()).any(|w| w == needle.as_slice())
        })
    })
}

/// Checks `r` against what the docs promise for `ua` given the oracle's entry index.
fn check_against_oracle(c: &Classifier, ua: &[u8], r: &Classification<'_>) {
    if ua.iter().all(u8::is_ascii_whitespace) {
        assert_eq!(r.bot, None);
        assert_eq!(r.class, Class::Script);
        return;
    }
    let nb = c.non_browser();
    let want = oracle(c.entries(), ua)
        .and_then(|i| c.entries().get(i))
        .filter(|e| !naive_device_names(e, ua));
    let (want_bot, want_class) = match want {
        Some(e) if e.verify => (Some(&e.id), Class::UnverifiedBot),
        Some(e) => (Some(&e.id), e.class),
        None if nb.class == Class::Human || naive_browser_shaped(ua) => (None, Class::Human),
        None => (Some(&nb.id), nb.class),
    };
    assert_eq!(
        (r.bot.map(|b| &b.id), r.class),
        (want_bot, want_class),
        "ua {:?}",
        String::from_utf8_lossy(ua)
    );
}

/// Deterministic fast bytes (xorshift64*) so 64 KiB inputs cost nothing to generate.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// Pieces of browser shapes: every token of the human rule, parentheses and a Mozilla prefix.
fn shape_bits() -> &'static [&'static str] {
    static B: OnceLock<Vec<&'static str>> = OnceLock::new();
    B.get_or_init(|| {
        let h = builtin_human_rule();
        let mut v = vec!["(", ")", " (", "Mozilla/5.0 (", "; "];
        for list in [
            h.platform_section_after,
            h.device_platforms,
            h.desktop_platforms,
            h.browser_tokens,
            h.browser_forms,
        ] {
            v.extend_from_slice(list);
        }
        v
    })
}

/// Random bytes seeded with catalog tokens and pieces of browser shapes (random case) at
/// random places, so that matches, near-matches and competing matches are common.
fn ua_bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    let token = (
        0..catalog().len() + shape_bits().len(),
        any::<u64>(),
        any::<u8>(),
    );
    (
        prop::collection::vec(any::<u8>(), 0..max_len),
        prop::collection::vec(token, 0..8),
        prop::collection::vec(any::<usize>(), 8),
    )
        .prop_map(|(mut bytes, toks, places)| {
            let cat = catalog();
            for ((entry, case_bits, cut), place) in toks.iter().zip(places) {
                let t = match cat.get(*entry) {
                    Some(e) => match e.ua_contains.first() {
                        Some(t) => t.as_str(),
                        None => continue,
                    },
                    None => match shape_bits().get(*entry - cat.len()) {
                        Some(t) => t,
                        None => continue,
                    },
                };
                // Random case per byte; sometimes cut the token short (a near-miss).
                let mut t: Vec<u8> = t
                    .bytes()
                    .enumerate()
                    .map(|(i, b)| {
                        if case_bits >> (i % 64) & 1 == 1 {
                            b.to_ascii_uppercase()
                        } else {
                            b
                        }
                    })
                    .collect();
                if cut % 4 == 0 {
                    t.truncate(t.len().saturating_sub(1));
                }
                let at = place % (bytes.len() + 1);
                bytes.splice(at..at, t);
            }
            bytes
        })
}

fn flip_case(s: &[u8], bits: &[bool]) -> Vec<u8> {
    s.iter()
        .zip(bits.iter().cycle())
        .map(|(b, up)| {
            if *up {
                b.to_ascii_uppercase()
            } else {
                b.to_ascii_lowercase()
            }
        })
        .collect()
}

fn user_entry() -> impl Strategy<Value = BotEntry> {
    let token = prop_oneof![
        // One-byte tokens take the classifier's separate path.
        any::<u8>().prop_map(|b| char::from(b & 0x7f).to_string()),
        "[a-zA-Z0-9 /._-]{1,12}",
        // Non-ASCII and blank tokens (blank ones must be ignored, not match everything).
        "[a-zé ü\u{3000}]{0,6}",
        Just(" ".to_string()),
        Just(String::new()),
    ];
    (
        "[a-z0-9._-]{1,16}",
        prop::collection::vec(token, 1..4),
        prop::sample::select(Class::ALL.to_vec()),
        any::<bool>(),
    )
        .prop_map(|(id, ua_contains, class, verify)| BotEntry {
            id,
            ua_contains,
            class,
            verify,
        })
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn builtin_matches_the_naive_oracle(ua in ua_bytes(600)) {
        let c = builtin();
        let r = c.classify(Some(&ua));
        check_against_oracle(c, &ua, &r);
    }

    /// Real UAs behind product tokens and comments of their own (how apps and embedded
    /// browsers prefix a browser's UA) and followed by random printable text.
    #[test]
    fn prefixed_real_uas_match_the_naive_oracle(
        prefix in "([A-Za-z]{1,8}/[0-9.]{1,4} (\\([A-Za-z0-9 ;]{0,10}\\) )?){0,2}",
        ua in prop::sample::select(REAL_UAS),
        suffix in "[ -~]{0,24}",
    ) {
        let c = builtin();
        let full = format!("{prefix}{ua}{suffix}");
        let r = c.classify(Some(full.as_bytes()));
        check_against_oracle(c, full.as_bytes(), &r);
    }

    #[test]
    fn classification_ignores_ascii_case(ua in ua_bytes(400), bits in prop::collection::vec(any::<bool>(), 1..64)) {
        let c = builtin();
        let base = c.classify(Some(&ua));
        for variant in [ua.to_ascii_uppercase(), ua.to_ascii_lowercase(), flip_case(&ua, &bits)] {
            let r = c.classify(Some(&variant));
            prop_assert_eq!(r.bot.map(|b| &b.id), base.bot.map(|b| &b.id));
            prop_assert_eq!(r.class, base.class);
        }
    }

    #[test]
    fn real_uas_in_any_case_keep_their_bot_and_class(
        ua in prop::sample::select(REAL_UAS),
        bits in prop::collection::vec(any::<bool>(), 1..64),
    ) {
        let c = builtin();
        let base = c.classify(Some(ua.as_bytes()));
        let r = c.classify(Some(&flip_case(ua.as_bytes(), &bits)));
        prop_assert_eq!(r.bot.map(|b| &b.id), base.bot.map(|b| &b.id));
        prop_assert_eq!(r.class, base.class);
    }

    #[test]
    fn googlebot_stays_googlebot_whatever_browser_text_follows(
        ua in prop::sample::select(GOOGLEBOT_UAS),
        suffix in prop::sample::select(BROWSER_SUFFIXES),
        tail in "[ -~]{0,80}",
    ) {
        let c = builtin();
        let full = format!("{ua}{suffix}");
        let r = c.classify(Some(full.as_bytes()));
        prop_assert_eq!(r.bot.map(|b| b.id.as_str()), Some("googlebot"));
        prop_assert_eq!(r.class, Class::UnverifiedBot);
        prop_assert_eq!(r.bot.map(|b| b.class), Some(Class::SearchCrawler));
        // Any printable tail: googlebot, unless the tail itself names an earlier entry.
        let with_tail = format!("{full} {tail}");
        let r = c.classify(Some(with_tail.as_bytes()));
        let google = c.entries().iter().position(|e| e.id == "googlebot");
        let tail_first = oracle(c.entries(), tail.as_bytes());
        let want = match (tail_first, google) {
            (Some(t), Some(g)) if t < g => c.entries().get(t),
            _ => google.and_then(|g| c.entries().get(g)),
        };
        prop_assert_eq!(r.bot.map(|b| &b.id), want.map(|b| &b.id));
    }

    #[test]
    fn every_catalog_bot_survives_a_browser_suffix(
        entry in 0..catalog().len(),
        suffix in prop::sample::select(BROWSER_SUFFIXES),
        upper in any::<bool>(),
    ) {
        let c = builtin();
        let Some(e) = c.entries().get(entry) else { return Ok(()) };
        let Some(token) = e.ua_contains.first() else { return Ok(()) };
        let token = if upper { token.to_ascii_uppercase() } else { token.clone() };
        let bare = format!("Mozilla/5.0 (compatible; {token}/1.0; +https://example.com/bot)");
        let with_suffix = format!("{bare}{suffix}");
        let a = c.classify(Some(bare.as_bytes()));
        let b = c.classify(Some(with_suffix.as_bytes()));
        prop_assert!(a.bot.is_some(), "{bare:?} matched nothing");
        prop_assert_eq!(b.bot.map(|x| &x.id), a.bot.map(|x| &x.id));
        prop_assert_eq!(b.class, a.class);
        check_against_oracle(c, bare.as_bytes(), &a);
    }

    #[test]
    fn random_user_catalogs_match_the_naive_oracle(
        entries in prop::collection::vec(user_entry(), 0..8),
        ua in "[a-zA-Z0-9 /._éü\u{3000}-]{0,40}",
        raw in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let c = Classifier::new(entries);
        for ua in [ua.as_bytes(), raw.as_slice()] {
            let r = c.classify(Some(ua));
            check_against_oracle(&c, ua, &r);
        }
    }

    #[test]
    fn whitespace_only_or_missing_is_script(ws in "[ \t\r\n\x0c]{0,20}") {
        let c = builtin();
        for ua in [Some(ws.as_bytes()), None] {
            let r = c.classify(ua);
            prop_assert_eq!(r.bot, None);
            prop_assert_eq!(r.class, Class::Script);
        }
    }
}

proptest! {
    #![proptest_config(pt_config(8))]

    /// 64 KiB of arbitrary bytes (not UTF-8), with tokens at the very start and end.
    #[test]
    fn huge_non_utf8_user_agents_never_panic(
        seed in any::<u64>(),
        len in prop_oneof![Just(65_536usize), 60_000usize..70_000],
        head in prop::option::of(prop::sample::select(REAL_UAS)),
        tail in prop::option::of(prop::sample::select(REAL_UAS)),
    ) {
        let c = builtin();
        let mut ua = head.map(|h| h.as_bytes().to_vec()).unwrap_or_default();
        ua.extend(noise(seed, len));
        ua.extend(tail.map(|t| t.as_bytes().to_vec()).unwrap_or_default());
        let r = c.classify(Some(&ua));
        let r_up = c.classify(Some(&ua.to_ascii_uppercase()));
        prop_assert_eq!(r.bot.map(|b| &b.id), r_up.bot.map(|b| &b.id));
        prop_assert_eq!(r.class, r_up.class);
        match r.bot {
            Some(e) => prop_assert_eq!(r.class, if e.verify { Class::UnverifiedBot } else { e.class }),
            None => prop_assert!(matches!(r.class, Class::Human | Class::Script)),
        }
        // A UA that starts with a real bot UA is at least as specific as that UA alone.
        if let Some(h) = head {
            let alone = c.classify(Some(h.as_bytes()));
            let pos = |id: Option<&String>| id.and_then(|id| c.entries().iter().position(|e| &e.id == id));
            if let Some(a) = pos(alone.bot.map(|b| &b.id)) {
                prop_assert!(pos(r.bot.map(|b| &b.id)).is_some_and(|p| p <= a));
            }
        }
    }
}
