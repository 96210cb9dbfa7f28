//! Property tests of configuration validation (`config::parse`).
//!
//! Arbitrary bytes, byte-mutated valid documents and structurally mutated valid documents (a
//! random node replaced, removed or joined by an unknown field) never panic; every error names
//! a field and a reason; every accepted document satisfies every documented bound; and any
//! valid limit comes out in `Config.limits` exactly as written.
//!
//! Cases: 256 by default; `PROPTEST_CASES=N` raises (or lowers) every test's count.

mod common;

use common::pt_config;
use crawlguard_core::config::{
    parse, Config, ConfigError, KeyKind, DEFAULT_CONFIG_JSON, MAX_REFILL_S,
};
use crawlguard_core::identity::class::Class;
use crawlguard_core::limits::bucket::Rate;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Valid documents to mutate (each parses).
const VALID_DOCS: &[&str] = &[
    DEFAULT_CONFIG_JSON,
    "{}",
    r#"{"routes":[{"name":"api","path_prefix":"/api/"}],"limits":[
        {"name":"per_ip","class":"*","route":"*","rate_per_s":0.001,"burst":5,"key":"client_ip"},
        {"name":"api_global","class":"*","route":"api","rate_per_s":0.001,"burst":3,"key":"global"}]}"#,
    r#"{"mode":"shadow","client_ip":{"source":"xff","xff_trusted_hops":2,"ipv4_prefix_len":24,"ipv6_prefix_len":48},
        "bots_mode":"replace","bots":[{"id":"acmebot","ua_contains":["AcmeBot","acme-crawler"],"class":"other_bot","verify":false}],
        "classes":{"script":{"retry_after":{"min_s":2,"max_s":100,"jitter_s":0},"reject_status":503}},
        "limits":[{"name":"k","class":"script","route":"default","rate_per_s":1000000,"burst":1000000,"key":"header:X-Api-Key"}],
        "exempt_paths":["/healthz"],"class_header":"X-Class","ratelimit_headers":true,
        "store":{"slots":1,"cas_retries":0,"hash_seed":0,"fallback_buckets":1},
        "verifier":{"enabled":false,"timeout_ms":10,"on_error":"claimed_class","cache_slots":1,"max_ttl_s":1,"unknown_ttl_s":1,"error_ttl_s":1},
        "rewrite":{"enabled":false,"statuses":[400,599]},"degraded":"x-degraded"}"#,
];

fn check_error(e: &ConfigError) {
    assert!(!e.path.is_empty(), "empty path in {e:?}");
    assert!(!e.reason.trim().is_empty(), "empty reason in {e:?}");
    assert!(!e.to_string().is_empty());
}

fn is_dotted_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.')
        })
}

/// Every bound the configuration reference promises for an accepted document.
fn check_invariants(c: &Config) {
    assert!(c.client_ip.ipv4_prefix_len <= 32);
    assert!(c.client_ip.ipv6_prefix_len <= 128);
    assert!((1..=16).contains(&c.client_ip.xff_trusted_hops));
    let mut names = std::collections::HashSet::new();
    for l in &c.limits {
        assert!(is_dotted_name(&l.name), "limit name {:?}", l.name);
        assert!(names.insert(l.name.clone()), "duplicate limit {:?}", l.name);
        assert!(l.bucket.is_some() || l.max_in_flight.is_some(), "{l:?}");
        if let Some(m) = l.max_in_flight {
            assert!((1..=10_000).contains(&m), "{l:?}");
        }
        if let Some(b) = l.bucket {
            assert!(b.rate_per_s.is_finite() && b.rate_per_s > 0.0 && b.rate_per_s <= 1e6);
            assert!((1..=1_000_000).contains(&b.burst));
            assert!(f64::from(b.burst) / b.rate_per_s <= MAX_REFILL_S, "{l:?}");
            assert_eq!(b.rate, Rate::new(b.rate_per_s, b.burst));
            assert!(b.rate.emission_ns >= 1_000, "1e6/s at most: {:?}", b.rate);
        } else {
            assert!(l.cost.is_none(), "a cost needs a bucket: {l:?}");
        }
        if let Some(r) = l.route {
            assert!(r <= c.routes.len());
        }
        if let KeyKind::Header(h) = &l.key {
            assert!(!h.is_empty() && h.len() <= 128);
            assert_eq!(h, &h.to_ascii_lowercase());
        }
    }
    for class in Class::ALL {
        let p = c.policy(class);
        assert!(matches!(p.reject_status, 429 | 503));
        let ra = p.retry_after;
        assert!(ra.min_s >= 1 && ra.min_s <= ra.max_s && ra.max_s <= 86_400);
        assert!(ra.jitter_s <= 3_600);
    }
    let mut routes = std::collections::HashSet::new();
    for r in &c.routes {
        assert!(r.path_prefix.starts_with('/'));
        assert!(r.name != "default" && routes.insert(r.name.clone()));
    }
    for e in &c.exempt_paths {
        assert!(e.starts_with('/') && !e.contains('?'));
    }
    assert!(!c.class_header.is_empty());
    assert_eq!(c.class_header, c.class_header.to_ascii_lowercase());
    assert!((1..=1_048_576).contains(&c.store.slots));
    assert!(c.store.cas_retries <= 32);
    assert!((1..=1_000_000).contains(&c.store.fallback_buckets));
    let v = &c.verifier;
    assert!((10..=10_000).contains(&v.timeout_ms));
    assert!((1..=1_048_576).contains(&v.cache_slots));
    assert!((1..=604_800).contains(&v.max_ttl_s));
    assert!((1..=3_600).contains(&v.unknown_ttl_s));
    assert!((1..=3_600).contains(&v.error_ttl_s));
    assert!(!v.cluster.is_empty() && !v.authority.is_empty());
    assert!(c.rewrite.statuses.iter().all(|s| (400..=599).contains(s)));
    let mut ids = std::collections::HashSet::new();
    for e in c.classifier.entries() {
        assert!(!matches!(e.class, Class::UnverifiedBot | Class::Spoofed));
        assert!(ids.insert(e.id.clone()), "duplicate bot id {:?}", e.id);
    }
}

fn check_parse(bytes: &[u8]) {
    match parse(bytes) {
        Ok(c) => check_invariants(&c),
        Err(e) => check_error(&e),
    }
}

#[test]
fn the_seed_documents_are_valid() {
    for d in VALID_DOCS {
        match parse(d.as_bytes()) {
            Ok(c) => check_invariants(&c),
            Err(e) => panic!("seed document rejected: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mutations

#[derive(Debug, Clone)]
enum ByteEdit {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    Dup(usize, usize),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    let interesting = prop::sample::select(b"{}[]\",:0123456789-.eE+ \\\x00\xff\xc3tfnu".to_vec());
    prop_oneof![
        (
            any::<usize>(),
            prop_oneof![any::<u8>(), interesting.clone()]
        )
            .prop_map(|(p, b)| ByteEdit::Flip(p, b)),
        (any::<usize>(), interesting).prop_map(|(p, b)| ByteEdit::Insert(p, b)),
        (any::<usize>(), 1usize..40).prop_map(|(p, n)| ByteEdit::Delete(p, n)),
        (any::<usize>(), 1usize..40).prop_map(|(p, n)| ByteEdit::Dup(p, n)),
    ]
}

fn apply(doc: &mut Vec<u8>, e: &ByteEdit) {
    let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
    match *e {
        ByteEdit::Flip(p, b) => {
            let i = at(p, doc.len());
            if let Some(x) = doc.get_mut(i) {
                *x = b;
            }
        }
        ByteEdit::Insert(p, b) => {
            let i = at(p, doc.len() + 1);
            doc.insert(i, b);
        }
        ByteEdit::Delete(p, n) => {
            let i = at(p, doc.len());
            let j = (i + n).min(doc.len());
            doc.drain(i..j);
        }
        ByteEdit::Dup(p, n) => {
            let i = at(p, doc.len());
            let j = (i + n).min(doc.len());
            let piece: Vec<u8> = doc.get(i..j).unwrap_or_default().to_vec();
            doc.splice(j..j, piece);
        }
    }
}

/// JSON pointers of every node of `v`, root first.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Strings that mean something somewhere in the schema.
const WORDS: &[&str] = &[
    "",
    " ",
    "*",
    "default",
    "client_ip",
    "global",
    "header:",
    "header:x-api-key",
    "header:user-agent",
    "bot",
    "path",
    "header:bad name",
    "human",
    "script",
    "spoofed",
    "unverified_bot",
    "search_crawler",
    "enforce",
    "shadow",
    "xff",
    "remote_address",
    "extend",
    "replace",
    "/",
    "/api/",
    "api",
    "robots.txt",
    "/a?b",
    "Googlebot",
    "x-crawler-class",
    "Name.With.Caps",
    "é",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(16),
            Just(17),
            Just(32),
            Just(33),
            Just(128),
            Just(129),
            Just(429),
            Just(503),
            Just(1_000_000),
            Just(1_000_001),
            Just(86_400),
            Just(u32::MAX as i64),
            Just(u32::MAX as i64 + 1),
        ]
        .prop_map(|n| json!(n)),
        prop_oneof![
            Just(0.0f64),
            Just(-0.0),
            Just(1e-300),
            Just(5e-324),
            Just(0.5),
            Just(1e6),
            Just(1e6 + 0.1),
            Just(1e308),
            -1e7f64..1e7,
        ]
        .prop_map(|f| json!(f)),
        prop::sample::select(WORDS).prop_map(|s| json!(s)),
        "\\PC{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    prop::sample::select(
                        &[
                            "name",
                            "class",
                            "route",
                            "rate_per_s",
                            "burst",
                            "key",
                            "id",
                            "ua_contains",
                            "path_prefix",
                            "min_s",
                            "max_s",
                            "bogus",
                        ][..]
                    )
                    .prop_map(String::from),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Debug, Clone)]
enum TreeEdit {
    Replace(usize, Value),
    Remove(usize),
    AddField(usize, String, Value),
}

fn tree_edit() -> impl Strategy<Value = TreeEdit> {
    prop_oneof![
        3 => (any::<usize>(), json_value()).prop_map(|(i, v)| TreeEdit::Replace(i, v)),
        1 => any::<usize>().prop_map(TreeEdit::Remove),
        1 => (any::<usize>(), prop_oneof![Just("bogus".to_string()), "[a-z_]{1,10}"], json_value())
            .prop_map(|(i, k, v)| TreeEdit::AddField(i, k, v)),
    ]
}

fn edit_tree(doc: &mut Value, e: &TreeEdit) {
    let mut ptrs = Vec::new();
    pointers(doc, String::new(), &mut ptrs);
    let pick = |i: usize| ptrs.get(i % ptrs.len().max(1)).cloned().unwrap_or_default();
    match e {
        TreeEdit::Replace(i, v) => {
            let p = pick(*i);
            if p.is_empty() {
                return; // keep the root an object: non-objects are covered elsewhere
            }
            if let Some(slot) = doc.pointer_mut(&p) {
                *slot = v.clone();
            }
        }
        TreeEdit::Remove(i) => {
            let p = pick(*i);
            let Some((parent, last)) = p.rsplit_once('/') else {
                return;
            };
            match doc.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(a)) => {
                    if let Ok(k) = last.parse::<usize>() {
                        if k < a.len() {
                            a.remove(k);
                        }
                    }
                }
                _ => {}
            }
        }
        TreeEdit::AddField(i, k, v) => {
            if let Some(Value::Object(m)) = doc.pointer_mut(&pick(*i)) {
                m.insert(k.clone(), v.clone());
            }
        }
    }
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..512)) {
        check_parse(&raw);
        let mut obj = b"{".to_vec();
        obj.extend_from_slice(&raw);
        check_parse(&obj);
    }

    #[test]
    fn non_objects_are_rejected_at_the_root(v in json_value()) {
        let text = v.to_string();
        if !v.is_object() {
            let e = parse(text.as_bytes()).err();
            prop_assert_eq!(e.map(|e| e.path), Some("<root>".to_string()));
        } else {
            check_parse(text.as_bytes());
        }
    }

    #[test]
    fn byte_mutated_documents_never_panic(
        doc in prop::sample::select(VALID_DOCS),
        edits in prop::collection::vec(byte_edit(), 1..6),
    ) {
        let mut d = doc.as_bytes().to_vec();
        for e in &edits {
            apply(&mut d, e);
        }
        check_parse(&d);
    }

    #[test]
    fn tree_mutated_documents_never_panic_and_keep_every_bound(
        doc in prop::sample::select(VALID_DOCS),
        edits in prop::collection::vec(tree_edit(), 1..4),
    ) {
        let Ok(mut v) = serde_json::from_str::<Value>(doc) else {
            return Err(TestCaseError::fail("seed is JSON"));
        };
        for e in &edits {
            edit_tree(&mut v, e);
        }
        check_parse(v.to_string().as_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Valid limits roundtrip

/// A rate in (0, 1e6] written as a short decimal (exactly parsed by any correct JSON reader).
fn rate_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u64..=1_000_000_000, 0u32..=9).prop_map(|(n, k)| {
            // n * 10^-k, kept <= 1e6.
            let scale = 10u64.pow(k);
            let n = if n / scale > 1_000_000 {
                n % (1_000_000 * scale) + 1
            } else {
                n
            };
            let int = n / scale;
            let frac = n % scale;
            if k == 0 {
                format!("{int}")
            } else {
                format!("{int}.{frac:0width$}", width = k as usize)
            }
        }),
        Just("1000000".to_string()),
        Just("1e6".to_string()),
        Just("1000000.0".to_string()),
        // The smallest rates with a refill time (burst / rate_per_s) within one year.
        Just("3.2e-8".to_string()),
        Just("0.000000032".to_string()),
    ]
}

#[derive(Debug, Clone)]
struct LimitSpec {
    name: String,
    class: String,
    route: String,
    rate: String,
    burst: u32,
    key: String,
}

fn limit_spec() -> impl Strategy<Value = LimitSpec> {
    let classes: Vec<String> = std::iter::once("*".to_string())
        .chain(Class::ALL.iter().map(|c| c.as_str().to_string()))
        .collect();
    (
        "[a-z0-9._-]{1,64}",
        prop::sample::select(classes),
        prop::sample::select(&["*", "default", "api"][..]),
        rate_text(),
        prop_oneof![1u32..=100, 1u32..=1_000_000, Just(1_000_000)],
        prop::sample::select(
            &[
                "client_ip",
                "global",
                "path",
                "header:X-Api-Key",
                "header:x-tenant",
            ][..],
        ),
    )
        .prop_map(|(name, class, route, rate, burst, key)| LimitSpec {
            name,
            class,
            route: route.to_string(),
            rate,
            burst,
            key: key.to_string(),
        })
        .prop_filter("burst / rate_per_s within one year", |l| {
            l.rate
                .parse::<f64>()
                .is_ok_and(|r| f64::from(l.burst) / r <= MAX_REFILL_S)
        })
}

fn limit_json(l: &LimitSpec, rate: &str, burst: &str) -> String {
    format!(
        r#"{{"name":{},"class":"{}","route":"{}","rate_per_s":{rate},"burst":{burst},"key":"{}"}}"#,
        json!(l.name),
        l.class,
        l.route,
        l.key
    )
}

fn doc_with(limits: &[String]) -> String {
    format!(
        r#"{{"routes":[{{"name":"api","path_prefix":"/api/"}}],"limits":[{}]}}"#,
        limits.join(",")
    )
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn valid_limits_roundtrip_exactly(specs in prop::collection::vec(limit_spec(), 1..8)) {
        // Names must be unique: suffix duplicates with their index.
        let mut specs = specs;
        let mut seen = std::collections::HashSet::new();
        for (i, s) in specs.iter_mut().enumerate() {
            if !seen.insert(s.name.clone()) {
                s.name = format!("{}{i}", s.name.get(..60).unwrap_or(&s.name));
                seen.insert(s.name.clone());
            }
        }
        prop_assume!(seen.len() == specs.len());
        let items: Vec<String> = specs.iter().map(|s| limit_json(s, &s.rate, &s.burst.to_string())).collect();
        let c = match parse(doc_with(&items).as_bytes()) {
            Ok(c) => c,
            Err(e) => return Err(TestCaseError::fail(format!("rejected: {e}"))),
        };
        check_invariants(&c);
        prop_assert_eq!(c.limits.len(), specs.len());
        for (l, s) in c.limits.iter().zip(&specs) {
            let rate: f64 = s.rate.parse().unwrap_or(f64::NAN);
            prop_assert_eq!(&l.name, &s.name);
            let Some(b) = l.bucket else { return Err(TestCaseError::fail("no bucket")) };
            prop_assert_eq!(b.rate_per_s.to_bits(), rate.to_bits(), "{} vs {}", b.rate_per_s, s.rate);
            prop_assert_eq!(b.burst, s.burst);
            prop_assert_eq!(b.rate, Rate::new(rate, s.burst));
            prop_assert_eq!(l.class.map(|c| c.as_str()), (s.class != "*").then_some(s.class.as_str()));
            let route = match s.route.as_str() { "*" => None, "api" => Some(0), _ => Some(1) };
            prop_assert_eq!(l.route, route);
            let key = match s.key.as_str() {
                "client_ip" => KeyKind::ClientIp,
                "global" => KeyKind::Global,
                "path" => KeyKind::Path,
                k => KeyKind::Header(k.trim_start_matches("header:").to_ascii_lowercase()),
            };
            prop_assert_eq!(&l.key, &key);
        }
    }

    #[test]
    fn out_of_range_limits_name_the_field(
        spec in limit_spec(),
        bad_rate in prop_oneof![Just("0".to_string()), Just("-1".to_string()), Just("1000000.5".to_string()),
            Just("1e7".to_string()), (1_000_001u64..u64::MAX / 2).prop_map(|n| n.to_string()),
            // Refill time (burst 1 / rate_per_s) over one year.
            Just("1e-9".to_string()), Just("0.00000003".to_string())],
        bad_burst in prop_oneof![Just(0u64), 1_000_001u64..=u64::from(u32::MAX), u64::from(u32::MAX) + 1..u64::MAX],
        position in 0usize..3,
    ) {
        let good = |i: usize| limit_json(&LimitSpec { name: format!("ok{i}"), ..spec.clone() }, "1", "1");
        let mut items: Vec<String> = (0..3).map(good).collect();
        let bad = LimitSpec { name: "bad".into(), ..spec.clone() };
        if let Some(x) = items.get_mut(position) {
            *x = limit_json(&bad, &bad_rate, "1");
        }
        let e = parse(doc_with(&items).as_bytes()).err();
        prop_assert_eq!(e.map(|e| e.path), Some(format!("limits[{position}].rate_per_s")));
        if let Some(x) = items.get_mut(position) {
            *x = limit_json(&bad, "1", &bad_burst.to_string());
        }
        let e = parse(doc_with(&items).as_bytes()).err();
        prop_assert_eq!(e.as_ref().map(|e| e.path.clone()), Some(format!("limits[{position}].burst")));
        if let Some(e) = e {
            check_error(&e);
        }
    }
}

/// Found by `byte_mutated_documents_never_panic`: an unknown field with an empty name must
/// still give a path that names it (`""`, `store.""`), never an empty path or one ending
/// in a bare dot.
#[test]
fn an_empty_field_name_still_gives_a_path() {
    for doc in [r#"{"":1}"#, r#"{"mode":"enforce","":2}"#] {
        match parse(doc.as_bytes()) {
            Ok(_) => panic!("{doc} accepted"),
            Err(e) => check_error(&e),
        }
    }
}
