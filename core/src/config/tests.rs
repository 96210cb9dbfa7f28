//! Configuration parsing and validation: defaults, exact error messages, warnings.

use super::*;

fn parse_err(json: &str) -> String {
    match parse(json.as_bytes()) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_document_is_the_embedded_default() {
    let c = parse(b"").expect("default parses");
    assert_eq!(c.mode, Mode::Enforce);
    assert_eq!(c.limits.len(), 21);
    assert_eq!(c.class_header, "x-crawler-class");
    assert_eq!(
        c.exempt_paths,
        vec!["/robots.txt", "/sitemap.xml", "/sitemap_index.xml"]
    );
    assert_eq!(c.store.slots, 65_536);
    assert!(!c.classifier.entries().is_empty());
}

#[test]
fn embedded_default_file_equals_field_defaults() {
    let file = parse(DEFAULT_CONFIG_JSON.as_bytes()).expect("file parses");
    let fields = parse(b"{}").expect("{} parses");
    assert_eq!(file.limits, fields.limits);
    assert_eq!(file.classes, fields.classes);
    assert_eq!(file.exempt_paths, fields.exempt_paths);
    assert_eq!(file.exempt_limit, fields.exempt_limit);
    assert_eq!(file.store, fields.store);
    assert_eq!(file.client_ip, fields.client_ip);
    assert_eq!(file.class_header, fields.class_header);
    assert_eq!(file.mode, fields.mode);
    assert_eq!(file.ratelimit_headers, fields.ratelimit_headers);
    assert_eq!(file.routes, fields.routes);
    assert_eq!(file.verifier, fields.verifier);
    assert_eq!(file.fleet, fields.fleet);
    assert_eq!(file.rewrite, fields.rewrite);
    assert_eq!(file.shedding, fields.shedding);
    assert_eq!(file.degraded, fields.degraded);
    assert_eq!(file.browser_checks, fields.browser_checks);
    assert_eq!(file.client_signals, fields.client_signals);
    assert_eq!(file.signed_agents, fields.signed_agents);
    assert_eq!(file.classifier.entries(), fields.classifier.entries());
    assert_eq!(
        file.classifier.non_browser(),
        fields.classifier.non_browser()
    );
    assert_eq!(file.browser_checks, fields.browser_checks);
    assert_eq!(file.cost_headers, fields.cost_headers);
    assert_eq!(file.warnings, fields.warnings);
}

#[test]
fn non_browser_class_is_configurable() {
    let class_of = |json: &str, ua: &[u8]| match parse(json.as_bytes()) {
        Ok(c) => c.classifier.classify(Some(ua)).class,
        Err(e) => panic!("{json}: {e}"),
    };
    assert_eq!(class_of("{}", b"Luminary/1.0"), Class::OtherBot);
    let script = r#"{"non_browser_class": "script"}"#;
    assert_eq!(class_of(script, b"Luminary/1.0"), Class::Script);
    let off = r#"{"non_browser_class": "human"}"#;
    assert_eq!(class_of(off, b"Luminary/1.0"), Class::Human);
    assert_eq!(class_of(off, b"curl/8.5.0"), Class::Script);
    assert_eq!(
        parse_err(r#"{"non_browser_class": "search_crawler"}"#),
        "non_browser_class: search_crawler is not other_bot, script or human (nothing about such \
         a client was verified)"
    );
    assert!(parse_err(r#"{"non_browser_class": "robot"}"#)
        .starts_with("non_browser_class: unknown variant `robot`"));
}

/// How an error message is compared in [`check_errors`].
enum Want {
    /// The whole message.
    Exactly(&'static str),
    /// Its start (serde's messages go on to list expected values).
    StartsWith(&'static str),
}

/// Parses every document of `cases` and reports every row whose error differs from the
/// expected one (or that was accepted), not just the first.
fn check_errors(cases: &[(String, Want)]) {
    let mut failures = Vec::new();
    for (doc, want) in cases {
        let got = match parse(doc.as_bytes()) {
            Ok(_) => "<accepted>".to_string(),
            Err(e) => e.to_string(),
        };
        let ok = match want {
            Want::Exactly(w) => got == *w,
            Want::StartsWith(w) => got.starts_with(w),
        };
        if !ok {
            let w = match want {
                Want::Exactly(w) | Want::StartsWith(w) => w,
            };
            failures.push(format!("{doc}\n   want: {w}\n    got: {got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

const L: &str =
    r#"{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":1,"key":"client_ip"}"#;

/// Parses each `(document, expected error text or "<accepted>")` and panics once, listing
/// every document whose outcome differs.
fn assert_parse_outcomes(cases: &[(String, String)]) {
    let mut failures = Vec::new();
    for (doc, want) in cases {
        let got = match parse(doc.as_bytes()) {
            Ok(_) => "<accepted>".to_string(),
            Err(e) => e.to_string(),
        };
        if got != *want {
            failures.push(format!("{doc}\n   want: {want}\n    got: {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A document with one limit: `L` with `from` replaced by `to`.
fn one_limit(from: &str, to: &str) -> String {
    format!(r#"{{"limits":[{}]}}"#, L.replace(from, to))
}

#[test]
fn errors_name_the_field_path() {
    use Want::Exactly as Is;
    let third_bad = format!(
        r#"{{"limits":[{L},{},{}]}}"#,
        L.replace("\"a\"", "\"b\""),
        L.replace(r#""rate_per_s":1"#, r#""rate_per_s":0"#)
            .replace("\"a\"", "\"c\"")
    );
    let twice = format!(r#"{{"limits":[{L},{L}]}}"#);
    let cases: Vec<(String, Want)> = vec![
        (third_bad, Is("limits[2].rate_per_s: must be > 0")),
        (twice, Is(r#"limits[1].name: duplicate limit "a""#)),
        (
            one_limit(r#""class":"*""#, r#""class":"robot""#),
            Is(r#"limits[0].class: unknown class "robot" (expected a class name or "*")"#),
        ),
        (
            one_limit(r#""route":"*""#, r#""route":"api""#),
            Is(r#"limits[0].route: unknown route "api" (define it in routes)"#),
        ),
        (
            one_limit(r#""burst":1"#, r#""burst":0"#),
            Is("limits[0].burst: must be 1..=1000000"),
        ),
        (
            one_limit(r#""rate_per_s":1,"burst":1"#, r#""rate_per_s":1e-10,"burst":5"#),
            Is("limits[0].rate_per_s: burst / rate_per_s must be <= 31536000 s (one year), is 50000000000 s"),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":"cookie""#),
            Is(r#"limits[0].key: "cookie": expected "client_ip", "global", "bot", "path", "asn", "header:<name>" or a list of them"#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["client_ip","cookie"]"#),
            Is(r#"limits[0].key[1]: "cookie": expected "client_ip", "global", "bot", "path", "asn", "header:<name>" or a list of them"#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["client_ip"]"#),
            Is("limits[0].key: a compound key has 2..=4 parts, has 1 (one part is a string)"),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["client_ip","path","bot","header:a","header:b"]"#),
            Is("limits[0].key: a compound key has 2..=4 parts, has 5 (one part is a string)"),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["path","global"]"#),
            Is(r#"limits[0].key[1]: "global" cannot be part of a compound key (it is one bucket for all)"#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["header:X-A","header:x-a"]"#),
            Is(r#"limits[0].key[1]: "header:x-a" is already a part of this key"#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["path","header:x-forwarded-for"]"#),
            Want::StartsWith(r#"limits[0].key[1]: "header:x-forwarded-for" cannot be a limit key: "#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":7"#),
            Want::StartsWith("limits[0].key: "),
        ),
        (
            one_limit(r#""class":"*","#, r#""class":"human","#).replace(r#""client_ip""#, r#""bot""#),
            Is(r#"limits[0].key: "bot" in a limit of class human: human requests name no bot id, so the limit would charge nothing"#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":"path","ipv4_prefix_len":24"#),
            Is(r#"limits[0].ipv4_prefix_len: only for a key with a "client_ip" part"#),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":"client_ip","ipv4_prefix_len":33"#),
            Is("limits[0].ipv4_prefix_len: must be 0..=32"),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":"client_ip","ipv4_prefix_len":300"#),
            Is("limits[0].ipv4_prefix_len: must be 0..=32"),
        ),
        (
            one_limit(r#""key":"client_ip""#, r#""key":["client_ip","path"],"ipv6_prefix_len":129"#),
            Is("limits[0].ipv6_prefix_len: must be 0..=128"),
        ),
        (
            r#"{"classes":{"human":{"reject_status":500}}}"#.into(),
            Is("classes.human.reject_status: must be 429 or 503"),
        ),
        (
            r#"{"classes":{"human":{"retry_after":{"min_s":10,"max_s":5}}}}"#.into(),
            Is("classes.human.retry_after.max_s: must be in min_s..=86400 (min_s is 10)"),
        ),
        (r#"{"classes":{"robots":{}}}"#.into(), Is("classes.robots: unknown class")),
        (
            r#"{"client_ip":{"ipv6_prefix_len":129}}"#.into(),
            Is("client_ip.ipv6_prefix_len: must be 0..=128"),
        ),
        (
            r#"{"class_header":"x bad"}"#.into(),
            Is(r#"class_header: "x bad" is not a valid header name"#),
        ),
        (r#"{"store":{"slots":0}}"#.into(), Is("store.slots: must be 1..=1048576")),
        (
            r#"{"exempt_paths":["robots.txt"]}"#.into(),
            Is("exempt_paths[0]: must start with '/', have no query or fragment, and be visible ASCII (percent-encode anything else)"),
        ),
        (
            r#"{"exempt_paths":["/robots.txt","/a\tb"]}"#.into(),
            Is("exempt_paths[1]: must start with '/', have no query or fragment, and be visible ASCII (percent-encode anything else)"),
        ),
        (
            r#"{"exempt_paths":["/robots.txt#x"]}"#.into(),
            Is("exempt_paths[0]: must start with '/', have no query or fragment, and be visible ASCII (percent-encode anything else)"),
        ),
        (
            r#"{"bots":[{"id":"x","ua_contains":[" "],"class":"other_bot"}]}"#.into(),
            Is("bots[0].ua_contains[0]: must be 1..=256 bytes, not blank"),
        ),
        (
            r#"{"bots":[{"id":"x","ua_contains":["x"],"class":"spoofed"}]}"#.into(),
            Is("bots[0].class: unverified_bot and spoofed are assigned by verification, not by the catalog"),
        ),
        (
            r#"{"bots":[{"id":"x","ua_contains":["x"],"class":"ai_trainer"}]}"#.into(),
            Is("bots[0].class: ai_trainer is only given to verified claims: set verify: true (and \
                teach the verifier how to check it) or use other_bot"),
        ),
        (
            r#"{"rewrite":{"statuses":[429,200]}}"#.into(),
            Is("rewrite.statuses[1]: must be 400..=599"),
        ),
        (
            r#"{"shedding":{"min_clients":0}}"#.into(),
            Is("shedding.min_clients: must be 1..=8"),
        ),
        (
            r#"{"shedding":{"min_clients":9}}"#.into(),
            Is("shedding.min_clients: must be 1..=8"),
        ),
        (
            r#"{"fleet":{"sync_interval_ms":99}}"#.into(),
            Is("fleet.sync_interval_ms: must be 100..=60000"),
        ),
        (
            r#"{"fleet":{"sync_interval_ms":1000,"timeout_ms":1001}}"#.into(),
            Is("fleet.timeout_ms: must be 10..=fleet.sync_interval_ms (one sync in flight at a time)"),
        ),
        (
            r#"{"fleet":{"max_keys_per_sync":10001}}"#.into(),
            Is("fleet.max_keys_per_sync: must be 1..=10000"),
        ),
        (
            r#"{"fleet":{"max_replicas":0}}"#.into(),
            Is("fleet.max_replicas: must be 1..=10000"),
        ),
        (
            r#"{"fleet":{"cluster":""}}"#.into(),
            Is("fleet.cluster: must be 1..=128 printable ASCII chars"),
        ),
        (
            r#"{"fleet":{"degraded_share":"half"}}"#.into(),
            Want::StartsWith("fleet.degraded_share: unknown variant `half`"),
        ),
        (
            r#"{"verifier":{"timeout_ms":0}}"#.into(),
            Is("verifier.timeout_ms: must be 10..=10000"),
        ),
        (
            r#"{"verifier":{"stale_if_error_s":604801}}"#.into(),
            Is("verifier.stale_if_error_s: must be 0..=604800"),
        ),
        (
            r#"{"verifier":{"max_spoofed_per_prefix":1001}}"#.into(),
            Is("verifier.max_spoofed_per_prefix: must be 0..=1000"),
        ),
        (
            r#"{"verifier":{"on_error":"allow"}}"#.into(),
            Want::StartsWith("verifier.on_error: unknown variant `allow`,"),
        ),
        (
            r#"{"routes":[{"name":"api","path_prefix":"api"}]}"#.into(),
            Is("routes[0].path_prefix: must start with '/'"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":5,"key":"client_ip","cost":{"reserve":1,"max_in_flight":0,"from_response_header":"x-cost"}}]}"#.into(),
            Is("limits[0].cost.max_in_flight: 0: must be 1..=255"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":5,"key":"client_ip","cost":{"reserve":1,"max_in_flight":256,"from_response_header":"x-cost"}}]}"#.into(),
            Is("limits[0].cost.max_in_flight: 256: must be 1..=255"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","key":"client_ip"}]}"#.into(),
            Is("limits[0]: a limit needs rate_per_s and burst (a token bucket), max_in_flight \
                (requests in flight at once), or both"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":1,"key":"client_ip","max_in_flight":3}]}"#.into(),
            Is("limits[0].burst: required with rate_per_s (a token bucket has both)"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","burst":3,"key":"client_ip"}]}"#.into(),
            Is("limits[0].rate_per_s: required with burst (a token bucket has both)"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","key":"path","max_in_flight":0}]}"#.into(),
            Is("limits[0].max_in_flight: 0: must be 1..=10000"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","key":"path","max_in_flight":10001}]}"#.into(),
            Is("limits[0].max_in_flight: 10001: must be 1..=10000"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","key":"path","max_in_flight":-1}]}"#.into(),
            Want::StartsWith("limits[0].max_in_flight: invalid value: integer `-1`"),
        ),
        (
            r#"{"limits":[{"name":"a","class":"*","route":"*","key":"global","max_in_flight":4,"cost":{"reserve":1,"from_response_header":"x-cost"}}]}"#.into(),
            Is("limits[0].cost: needs rate_per_s and burst: a cost is charged to a token bucket"),
        ),
        (
            r#"{"limits":[{"name":"exempt_limit","class":"*","route":"*","key":"global","max_in_flight":4}]}"#.into(),
            Is("limits[0].name: \"exempt_limit\" is the exempt paths' own limit (configure it \
                in exempt_limit)"),
        ),
        (
            r#"{"exempt_limit":{"rate_per_s":0}}"#.into(),
            Is("exempt_limit.rate_per_s: must be > 0"),
        ),
        (
            r#"{"exempt_limit":{"burst":0}}"#.into(),
            Is("exempt_limit.burst: must be 1..=1000000"),
        ),
        (
            r#"{"exempt_limit":{"retry_after":{"min_s":30,"max_s":10}}}"#.into(),
            Is("exempt_limit.retry_after.max_s: must be in min_s..=86400 (min_s is 30)"),
        ),
        (
            r#"{"exempt_limit":{"enabled":true,"key":"global"}}"#.into(),
            Want::StartsWith("exempt_limit.key: unknown field `key`"),
        ),
    ];
    check_errors(&cases);
}

#[test]
fn a_limit_may_bound_requests_in_flight_beside_or_instead_of_a_bucket() {
    let c = parse(
        br#"{"limits":[
            {"name":"both","class":"script","route":"*","rate_per_s":1,"burst":10,"max_in_flight":8,"key":"client_ip"},
            {"name":"herd","class":"ai_retriever","route":"*","max_in_flight":4,"key":"path"}]}"#,
    )
    .expect("valid");
    let both = &c.limits[0];
    assert_eq!(both.max_in_flight, Some(8));
    assert_eq!(
        both.bucket.map(|b| (b.rate_per_s, b.burst)),
        Some((1.0, 10))
    );
    let herd = &c.limits[1];
    assert_eq!((herd.max_in_flight, herd.bucket), (Some(4), None));
    // A limit of requests in flight only refills nothing: no Retry-After warning for it.
    assert!(
        !c.warnings.iter().any(|w| w.contains("limits[1]")),
        "{:?}",
        c.warnings
    );
    // The exempt paths' own limit: on by default, per address, 1/s, burst 60, in the
    // global mode unless it has its own.
    let d = parse(b"").expect("default");
    let ex = d.exempt_limit.as_ref().expect("on by default");
    assert_eq!(
        (
            ex.limit.name.as_str(),
            ex.limit.bucket.map(|b| (b.rate_per_s, b.burst)),
            &ex.limit.key,
            ex.limit.mode,
            ex.policy.reject_status,
            ex.policy.escalation.enabled,
        ),
        (
            "exempt_limit",
            Some((1.0, 60)),
            &KeyKind::ClientIp,
            Mode::Enforce,
            429,
            false
        )
    );
    let shadow = parse(br#"{"mode":"shadow"}"#).expect("valid");
    assert_eq!(
        shadow.exempt_limit.map(|e| e.limit.mode),
        Some(Mode::Shadow)
    );
    let own =
        parse(br#"{"mode":"shadow","exempt_limit":{"mode":"enforce","burst":5}}"#).expect("valid");
    assert_eq!(
        own.exempt_limit
            .map(|e| (e.limit.mode, e.limit.bucket.map(|b| b.burst))),
        Some((Mode::Enforce, Some(5)))
    );
    let off = parse(br#"{"exempt_limit":{"enabled":false}}"#).expect("valid");
    assert!(off.exempt_limit.is_none());
}

#[test]
fn a_cost_limit_whose_burst_outlasts_the_retry_after_max_is_warned_about() {
    // 1,000 at 10/s: 100 s to refill, more than the 60 s humans are told at most; 200 s is
    // within script's 300. The cap defaults to 4 in flight.
    let c = parse(
        br#"{"limits":[
            {"name":"items","class":"human","route":"*","rate_per_s":10,"burst":1000,"key":"client_ip",
             "cost":{"reserve":20,"from_response_header":"x-cost"}},
            {"name":"fits","class":"human","route":"*","rate_per_s":20,"burst":1000,"key":"client_ip",
             "cost":{"reserve":20,"max_in_flight":9,"from_response_header":"x-cost"}},
            {"name":"scripts","class":"script","route":"*","rate_per_s":1,"burst":200,"key":"client_ip",
             "cost":{"reserve":20,"from_response_header":"x-cost"}}]}"#,
    )
    .expect("valid: warnings do not refuse a configuration");
    let cost: Vec<&String> = c.warnings.iter().filter(|w| w.contains(".cost:")).collect();
    assert_eq!(
        cost,
        ["limits[0].cost: limit \"items\" takes 100 s to refill its burst (burst / rate_per_s), \
          longer than classes.human.retry_after.max_s (60 s): a client of class human whose \
          costs spent the burst (or put it in debt) and that waits Retry-After can be rejected \
          again"]
    );
    let in_flight: Vec<u8> = c
        .limits
        .iter()
        .filter_map(|l| l.cost.as_ref().map(|c| c.max_in_flight))
        .collect();
    assert_eq!(in_flight, [4, 9, 4]);
}

#[test]
fn a_refill_slower_than_the_retry_after_max_is_warned_about() {
    let c = parse(
        br#"{"classes":{"script":{"retry_after":{"max_s":30}}},"limits":[
            {"name":"slow_scripts","class":"script","route":"*","rate_per_s":0.01,"burst":1,"key":"client_ip"},
            {"name":"all_slow","class":"*","route":"*","rate_per_s":0.02,"burst":3,"key":"client_ip"},
            {"name":"at_max","class":"script","route":"*","rate_per_s":0.03333333333333333,"burst":1,"key":"global"}]}"#,
    )
    .expect("valid: warnings do not refuse a configuration");
    assert_eq!(
        c.warnings,
        [
            "limits[0].rate_per_s: limit \"slow_scripts\" refills one token every 100 s \
             (1 / rate_per_s), longer than classes.script.retry_after.max_s (30 s): a client \
             of class script that waits Retry-After can be rejected again",
            "limits[1].rate_per_s: limit \"all_slow\" refills one token every 50 s \
             (1 / rate_per_s), longer than classes.ai_retriever.retry_after.max_s (30 s): a \
             client of class ai_retriever that waits Retry-After can be rejected again",
            "limits[1].rate_per_s: limit \"all_slow\" refills one token every 50 s \
             (1 / rate_per_s), longer than classes.script.retry_after.max_s (30 s): a \
             client of class script that waits Retry-After can be rejected again",
        ]
    );
    // The clamp itself is unchanged.
    assert_eq!(c.policy(Class::Script).retry_after.max_s, 30);
    // The defaults (and a limit refilling exactly at max_s, limits[2]) warn about nothing.
    assert_eq!(parse(b"").expect("default").warnings, Vec::<String>::new());
    assert_eq!(parse(b"{}").expect("{}").warnings, Vec::<String>::new());
}

#[test]
fn refill_time_is_bounded_by_one_year() {
    let doc = |rate: &str, burst: u32| {
        format!(
            r#"{{"limits":[{{"name":"a","class":"*","route":"*","rate_per_s":{rate},"burst":{burst},"key":"global"}}]}}"#
        )
    };
    // Exactly one year: 31536 / 0.001 and 1 / (1 / 31536000) are both 31536000.0.
    assert!(parse(doc("0.001", 31_536).as_bytes()).is_ok());
    assert!(parse(doc(&(1.0 / MAX_REFILL_S).to_string(), 1).as_bytes()).is_ok());
    assert_eq!(
        parse_err(&doc("0.001", 31_537)),
        "limits[0].rate_per_s: burst / rate_per_s must be <= 31536000 s (one year), is 31537000 s"
    );
    assert_eq!(
        parse_err(&doc("1e-9", 20)),
        "limits[0].rate_per_s: burst / rate_per_s must be <= 31536000 s (one year), is 20000000000 s"
    );
    // The smallest rate any burst allows is 1 token a year.
    assert_eq!(
        parse_err(&doc("3e-8", 1)),
        "limits[0].rate_per_s: burst / rate_per_s must be <= 31536000 s (one year), is 33333334 s"
    );
}

#[test]
fn unknown_and_mistyped_fields_are_errors_with_their_path() {
    use Want::{Exactly as Is, StartsWith as Starts};
    let cases: Vec<(String, Want)> = vec![
        (
            r#"{"bogus":1}"#.into(),
            Starts("bogus: unknown field `bogus`, expected one of `mode`"),
        ),
        (
            r#"{"store":{"slotz":1}}"#.into(),
            Starts("store.slotz: unknown field `slotz`"),
        ),
        (r#"{"":1}"#.into(), Starts("\"\": unknown field ``")),
        (
            r#"{"store":{"":1}}"#.into(),
            Starts("store.\"\": unknown field ``"),
        ),
        (
            r#"{"mode":"off"}"#.into(),
            Starts("mode: unknown variant `off`"),
        ),
        (
            one_limit(r#""rate_per_s":1"#, r#""rate_per_s":"1""#),
            Starts("limits[0].rate_per_s: invalid type"),
        ),
        ("{not json".into(), Starts("<root>: key must be a string")),
        ("[]".into(), Is("<root>: must be a JSON object")),
        (
            "\u{feff}{}".into(),
            Is("<root>: starts with a UTF-8 byte-order mark (EF BB BF); save the file without it"),
        ),
        (
            r#"{"mode":"shadow"}{"mode":"enforce"}"#.into(),
            Starts("<root>: trailing characters after the configuration object (trailing characters at line 1 column 18)"),
        ),
        (
            "{\"mode\":\"shadow\"} ]]]] not json".into(),
            Starts("<root>: trailing characters after the configuration object"),
        ),
        (
            "{}\0".into(),
            Starts("<root>: trailing characters after the configuration object"),
        ),
    ];
    check_errors(&cases);
}

#[test]
fn routes_first_match_wins_and_default_route() {
    let c = parse(
        br#"{"routes":[{"name":"api","path_prefix":"/api/"},{"name":"all_a","path_prefix":"/a"}],
             "limits":[{"name":"api","class":"*","route":"api","rate_per_s":1,"burst":1,"key":"global"},
                       {"name":"dflt","class":"human","route":"default","rate_per_s":1,"burst":1,"key":"header:X-Api-Key"}]}"#,
    )
    .expect("valid");
    assert_eq!(c.route_of(b"/api/v1"), 0);
    assert_eq!(c.route_of(b"/about"), 1);
    assert_eq!(c.route_of(b"/"), 2);
    assert_eq!(c.route_name(2), "default");
    assert_eq!(c.limits[0].route, Some(0));
    assert_eq!(c.limits[1].route, Some(2));
    assert_eq!(c.limits[1].class, Some(Class::Human));
    assert_eq!(c.limits[1].key, KeyKind::Header("x-api-key".into()));
}

#[test]
fn class_overrides_merge_onto_defaults() {
    let c = parse(
        br#"{"classes":{"script":{"retry_after":{"max_s":20}},"human":{"reject_status":503}}}"#,
    )
    .expect("valid");
    assert_eq!(
        c.policy(Class::Script).retry_after,
        RetryAfter {
            min_s: 1,
            max_s: 20,
            jitter_s: 10
        }
    );
    assert_eq!(c.policy(Class::Human).reject_status, 503);
    assert_eq!(c.policy(Class::Spoofed).retry_after.min_s, 60);
}

#[test]
fn bots_extend_puts_configured_entries_first_and_replace_drops_builtins() {
    let c = parse(br#"{"bots":[{"id":"acmebot","ua_contains":["AcmeBot"],"class":"other_bot"}]}"#)
        .expect("valid");
    assert_eq!(c.classifier.entries()[0].id, "acmebot");
    assert!(c.classifier.entries().len() > 1);
    let c = parse(br#"{"bots_mode":"replace","bots":[{"id":"acmebot","ua_contains":["AcmeBot"],"class":"other_bot","verify":false}]}"#)
        .expect("valid");
    assert_eq!(c.classifier.entries().len(), 1);
}

/// `envoy/examples/api-route.json` as it was shipped before issue 19: its own `limits`
/// replaced all nine defaults and left most classes unlimited off the API.
const OLD_API_ROUTE: &str = r#"{
  "routes": [{ "name": "api", "path_prefix": "/api/" }],
  "limits": [
    { "name": "human_per_ip", "class": "human", "route": "*", "rate_per_s": 20, "burst": 100, "key": "client_ip" },
    { "name": "api_per_key", "class": "*", "route": "api", "rate_per_s": 5, "burst": 10, "key": "header:x-api-key" },
    { "name": "crawlers_off_api", "class": "search_crawler", "route": "api", "rate_per_s": 0.2, "burst": 2, "key": "client_ip" }
  ],
  "ratelimit_headers": true
}"#;

#[test]
fn a_class_no_enforced_limit_covers_is_warned_about_per_route() {
    let c = parse(OLD_API_ROUTE.as_bytes()).expect("valid: warnings do not refuse");
    let w = |class: &str, default: &str| {
        format!(
            "limits: no enforced limit covers class {class} on route default: its requests \
             there are never limited (a configuration's own limits replace all 21 defaults; \
             the default for {class}: {default})"
        )
    };
    assert_eq!(
        c.warnings,
        [
            w(
                "search_crawler",
                "search_crawler_per_ip (10/s, burst 50, at most 30 in flight, key client_ip) and \
                 search_crawler_per_bot (200/s, burst 2000, key bot)"
            ),
            w(
                "ai_retriever",
                "ai_retriever_per_ip (5/s, burst 20, at most 30 in flight, key client_ip) and \
                 ai_retriever_per_bot (50/s, burst 500, key bot)"
            ),
            w(
                "ai_trainer",
                "ai_trainer_per_ip (1/s, burst 5, key client_ip) and \
                 ai_trainer_per_bot (5/s, burst 50, key bot)"
            ),
            w(
                "other_bot",
                "other_bot_per_ip (1/s, burst 10, key client_ip) and \
                 other_bot_per_24 (3/s, burst 30, key client_ip /24 /48)"
            ),
            w(
                "script",
                "script_per_ip (1/s, burst 10, at most 8 in flight, key client_ip) and \
                 script_per_24 (5/s, burst 50, key client_ip /24 /48)"
            ),
            w(
                "unverified_bot",
                "unverified_bot_per_ip (0.5/s, burst 5, key client_ip) and \
                 unverified_bot_per_24 (2/s, burst 20, key client_ip /24 /48) and \
                 unverified_bot_global (20/s, burst 100, key global)"
            ),
            w(
                "spoofed",
                "spoofed_per_ip (0.1/s, burst 2, key client_ip) and \
                 spoofed_per_24 (0.5/s, burst 5, key client_ip /24 /48) and \
                 spoofed_global (5/s, burst 50, key global)"
            ),
            w(
                "suspect_browser",
                "suspect_browser_per_ip (2/s, burst 40, at most 8 in flight, key client_ip) and \
                 suspect_browser_per_24 (5/s, burst 100, key client_ip /24 /48) and \
                 suspect_browser_per_asn (10/s, burst 100, key asn) and \
                 suspect_browser_global (50/s, burst 500, key global)"
            ),
        ]
    );
    // No route at all: the class is named without one; a shadow limit protects nothing.
    let c = parse(
        br#"{"limits":[
            {"name":"a","class":"*","route":"*","rate_per_s":1,"burst":1,"key":"client_ip"},
            {"name":"s","class":"spoofed","route":"*","rate_per_s":1,"burst":1,"key":"client_ip","mode":"shadow"}],
          "routes":[{"name":"api","path_prefix":"/api/"}]}"#,
    )
    .expect("valid");
    assert_eq!(c.warnings, Vec::<String>::new());
    let c = parse(
        br#"{"limits":[
            {"name":"h","class":"human","route":"*","rate_per_s":1,"burst":1,"key":"client_ip"},
            {"name":"s","class":"spoofed","route":"*","rate_per_s":1,"burst":1,"key":"client_ip","mode":"shadow"},
            {"name":"a","class":"*","route":"api","rate_per_s":1,"burst":1,"key":"client_ip","mode":"shadow"}],
          "routes":[{"name":"api","path_prefix":"/api/"},{"name":"b","path_prefix":"/b/"}]}"#,
    )
    .expect("valid");
    let spoofed: Vec<&String> = c
        .warnings
        .iter()
        .filter(|w| w.contains("class spoofed"))
        .collect();
    assert_eq!(
        spoofed,
        [
            "limits: no enforced limit covers class spoofed: its requests are never limited (a \
          configuration's own limits replace all 21 defaults; the default for spoofed: \
          spoofed_per_ip (0.1/s, burst 2, key client_ip) and spoofed_per_24 (0.5/s, burst 5, \
          key client_ip /24 /48) and spoofed_global (5/s, burst 50, key global))"
        ]
    );
    assert_eq!(c.warnings.len(), 8, "{:#?}", c.warnings);
    // Global shadow mode: the whole configuration is a trial, its limits count.
    let c = parse(
        br#"{"mode":"shadow","limits":[
            {"name":"a","class":"*","route":"*","rate_per_s":1,"burst":1,"key":"client_ip"}]}"#,
    )
    .expect("valid");
    assert_eq!(c.warnings, Vec::<String>::new());
}

#[test]
fn exempt_paths_without_robots_txt_are_warned_about() {
    let c = parse(br#"{"exempt_paths":["/sitemap.xml"]}"#).expect("valid");
    assert_eq!(
        c.warnings,
        [
            "exempt_paths: \"/robots.txt\" is not exempt: crawlers fetching it are limited like \
          any page, and a crawler refused its robots.txt may stop crawling the site (Googlebot \
          treats a 429 or 5xx there as a server error); the default list exempts it, a \
          configuration's own list replaces the default"
        ]
    );
    let c = parse(br#"{"exempt_paths":["/robots.txt"]}"#).expect("valid");
    assert_eq!(c.warnings, Vec::<String>::new());
}

#[test]
fn shipped_examples_keep_every_class_limited() {
    for (name, doc) in [
        (
            "api-route.json",
            include_str!("../../../envoy/examples/api-route.json"),
        ),
        (
            "cost-quotas.json",
            include_str!("../../../envoy/examples/cost-quotas.json"),
        ),
    ] {
        let c = parse(doc.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.warnings, Vec::<String>::new(), "{name}");
        // The spoofed and unverified protections of the defaults, unchanged.
        for default in [
            "unverified_bot_per_ip",
            "unverified_bot_global",
            "spoofed_per_ip",
        ] {
            let want = parse(b"{}")
                .expect("default")
                .limits
                .into_iter()
                .find(|l| l.name == default);
            let have = c.limits.iter().find(|l| l.name == default).cloned();
            assert_eq!(have, want, "{name}: {default}");
        }
    }
}

#[test]
fn a_limit_may_be_keyed_by_user_agent_but_not_by_unsafe_headers() {
    let per_ua = one_limit(r#""client_ip""#, r#""header:User-Agent""#);
    let c = parse(
        per_ua
            .replace(r#""class":"*""#, r#""class":"human""#)
            .as_bytes(),
    )
    .expect("user-agent is a key");
    assert_eq!(c.limits[0].key, KeyKind::Header("user-agent".into()));
    // With class "*" too: the class is then part of the bucket's identity, so a spoofer's
    // requests (class spoofed) never share the verified crawler's bucket.
    let c = parse(per_ua.as_bytes()).expect("user-agent is a key of every class");
    assert_eq!(c.limits[0].class, None);
    assert!(c.limits[0].key.keyed_by_claim());
    let c = parse(one_limit(r#""client_ip""#, r#""header:authorization""#).as_bytes())
        .expect("authorization is a key");
    assert_eq!(c.limits[0].key, KeyKind::Header("authorization".into()));
    let key = |h: &str| one_limit(r#""client_ip""#, &format!("\"header:{h}\""));
    let refused =
        |h: &str, why: &str| format!("limits[0].key: \"header:{h}\" cannot be a limit key: {why}");
    let xff = "clients write any addresses into it and every listed value is charged, so a \
               client could spend other clients' buckets by naming their addresses; use key \
               \"client_ip\" with client_ip.source \"xff\", which takes the entry your proxies \
               appended";
    let hop = "hop-by-hop (RFC 9110 section 7.6.1): Envoy consumes it, so the key would be one \
               bucket for nearly every request";
    let mut cases = vec![
        (
            key("Host"),
            refused(
                "Host",
                "Envoy keeps the Host as :authority, so no `host` header reaches the filter \
                 and every request would share one bucket",
            ),
        ),
        (key("x-forwarded-for"), refused("x-forwarded-for", xff)),
        (key("forwarded"), refused("forwarded", xff)),
        (key("connection"), refused("connection", hop)),
        (key("te"), refused("te", hop)),
        (
            key("content-length"),
            refused(
                "content-length",
                "message framing, not the client: the key would be one bucket per body size",
            ),
        ),
    ];
    let class = "it is class_header, which crawlguard sets to the class (the client's value \
                 is removed); limit by class with limits[].class";
    cases.push((key("x-crawler-class"), refused("x-crawler-class", class)));
    let custom = format!(
        r#"{{"class_header":"X-Class","limits":[{}]}}"#,
        L.replace(r#""client_ip""#, r#""header:x-class""#)
    );
    cases.push((custom, refused("x-class", class)));
    assert_parse_outcomes(&cases);
    // Every refused name has its reason in the README's limits[].key row.
    let readme = include_str!("../../../README.md");
    for (name, _) in KEY_REFUSED {
        assert!(
            readme.contains(&format!("`{name}`")),
            "README does not name {name}"
        );
    }
}

#[test]
fn a_key_repeated_in_a_map_is_refused() {
    // The first entry is invalid (418) and used to vanish behind the second.
    assert_eq!(
        parse_err(r#"{"classes":{"human":{"reject_status":418},"human":{}}}"#),
        r#"classes.human: duplicate key "human" at line 1 column 49"#
    );
    assert_eq!(
        parse_err(
            r#"{"shedding":{"routes":{"default":{"latency_ms":0},"default":{"latency_ms":5}}}}"#
        ),
        r#"shedding.routes.default: duplicate key "default" at line 1 column 59"#
    );
    // Distinct keys still load.
    let c = parse(br#"{"classes":{"human":{"reject_status":503},"script":{}}}"#).expect("valid");
    assert_eq!(c.policy(Class::Human).reject_status, 503);
}

#[test]
fn a_huge_invalid_value_is_cut_in_the_error() {
    let big = "x".repeat(10_000_000);
    let e = parse_err(&format!(r#"{{"mode":"{big}"}}"#));
    // The reason is "unknown variant `<10^7 x>`, expected `enforce` or `shadow` at line 1
    // column 10000010": 17 + 10^7 + 59 bytes, of which 1024 are kept.
    assert_eq!(
        e,
        format!(
            "mode: unknown variant `{}... (9999052 more bytes)",
            "x".repeat(1007)
        ),
        "{}",
        &e[..e.len().min(400)]
    );
    // A huge map key is cut in the path too; a short error is left whole.
    let e = parse_err(&format!(r#"{{"classes":{{"{big}":{{}}}}}}"#));
    assert_eq!(
        e,
        format!(
            "classes.{}... (9998984 more bytes): unknown class",
            "x".repeat(1016)
        )
    );
    assert_eq!(
        parse_err(r#"{"mode":"off"}"#),
        "mode: unknown variant `off`, expected `enforce` or `shadow` at line 1 column 13"
    );
}

#[test]
fn headers_crawlguard_must_not_take_over_are_refused() {
    let cost = |h: &str| {
        format!(
            r#"{{"limits":[{{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":5,"key":"client_ip","cost":{{"reserve":1,"from_response_header":"{h}"}}}}]}}"#
        )
    };
    let cred = "it carries credentials or cookies, which the origin or the client would lose";
    let cases = [
        (
            r#"{"class_header":"Authorization"}"#.to_string(),
            format!("class_header: \"Authorization\" cannot be taken over by crawlguard: {cred}"),
        ),
        (
            r#"{"class_header":"cookie"}"#.to_string(),
            format!("class_header: \"cookie\" cannot be taken over by crawlguard: {cred}"),
        ),
        (
            r#"{"class_header":"x-envoy-upstream-rq-timeout-ms"}"#.to_string(),
            "class_header: \"x-envoy-upstream-rq-timeout-ms\" cannot be taken over by \
             crawlguard: Envoy's own headers (x-envoy-*): Envoy sets, strips and acts on them"
                .to_string(),
        ),
        (
            r#"{"class_header":"user-agent"}"#.to_string(),
            "class_header: \"user-agent\" cannot be taken over by crawlguard: it says who the \
             client is: crawlguard classifies by it and the origin needs it"
                .to_string(),
        ),
        (
            cost("Set-Cookie"),
            format!(
                "limits[0].cost.from_response_header: \"Set-Cookie\" cannot be taken over by \
                 crawlguard: {cred}"
            ),
        ),
        (
            cost("retry-after"),
            "limits[0].cost.from_response_header: \"retry-after\" cannot be taken over by \
             crawlguard: standard response semantics (crawlguard sets some of them on its own \
             answers): clients and caches need it intact"
                .to_string(),
        ),
        (
            cost("transfer-encoding"),
            "limits[0].cost.from_response_header: \"transfer-encoding\" cannot be taken over \
             by crawlguard: hop-by-hop, framing or routing: Envoy and the origin need it intact"
                .to_string(),
        ),
    ];
    assert_parse_outcomes(&cases);
    let c = parse(br#"{"class_header":"X-Bot-Class"}"#).expect("an own header is fine");
    assert_eq!(c.class_header, "x-bot-class");
    parse(cost("x-crawlguard-cost").as_bytes()).expect("an own cost header is fine");
}

#[test]
fn escalation_is_refused_for_the_crawler_classes_only() {
    let doc =
        |class: &str| format!(r#"{{"classes":{{"{class}":{{"escalation":{{"enabled":true}}}}}}}}"#);
    let mut cases: Vec<(String, String)> = ["search_crawler", "ai_retriever", "ai_trainer"]
        .iter()
        .map(|c| {
            (
                doc(c),
                format!(
                    "classes.{c}.escalation.enabled: must be false for {c} (a verified crawler \
                     never escalates)"
                ),
            )
        })
        .collect();
    for c in ["human", "other_bot", "script", "unverified_bot", "spoofed"] {
        cases.push((doc(c), "<accepted>".to_string()));
    }
    // Turning it off stays allowed everywhere.
    cases.push((
        r#"{"classes":{"search_crawler":{"escalation":{"enabled":false}}}}"#.into(),
        "<accepted>".into(),
    ));
    assert_parse_outcomes(&cases);
}

#[test]
fn a_fleet_mode_limit_must_refill_within_the_fleet_contracts_bound() {
    // 9,000,000 s is the bound (contract::fleet::MAX_AHEAD_NS): burst 9 at 1e-6 per second
    // refills in exactly that; burst 1 at 1e-7 in 10,000,000 s. Without fleet mode a year
    // is allowed.
    let doc = |fleet: bool, rate: &str, burst: &str| {
        format!(
            r#"{{"fleet":{{"enabled":{fleet}}},"store":{{"hash_seed":12345}},"limits":[{}]}}"#,
            L.replace(r#""rate_per_s":1"#, &format!(r#""rate_per_s":{rate}"#))
                .replace(r#""burst":1"#, &format!(r#""burst":{burst}"#))
        )
    };
    assert_parse_outcomes(&[
        (
            doc(true, "1e-7", "1"),
            "limits[0].rate_per_s: in fleet mode burst / rate_per_s must be <= 9000000 s (the \
             fleet contract's bound, about 104 days), is 10000000 s"
                .to_string(),
        ),
        (doc(true, "1e-6", "9"), "<accepted>".to_string()),
        (doc(false, "1e-7", "1"), "<accepted>".to_string()),
    ]);
}

#[test]
fn fleet_mode_needs_a_hash_seed_and_the_published_one_is_warned_about() {
    let fleet = r#"{"fleet":{"enabled":true}}"#;
    assert_parse_outcomes(&[
        (
            fleet.to_string(),
            "store.hash_seed: required when fleet.enabled: every replica must hash a client \
             to the same fleet key; set the same secret random u64 on every replica"
                .to_string(),
        ),
        (
            r#"{"fleet":{"enabled":true},"store":{"hash_seed":12345}}"#.to_string(),
            "<accepted>".to_string(),
        ),
    ]);
    let unset = parse(b"").expect("default");
    assert_eq!(unset.store.hash_seed, None);
    assert!(unset
        .warnings
        .iter()
        .all(|w| !w.starts_with("store.hash_seed")));
    let published = parse(br#"{"store":{"hash_seed":7165897122647602529}}"#).expect("loads");
    assert_eq!(
        published
            .warnings
            .iter()
            .filter(|w| w.starts_with("store.hash_seed: is the seed published"))
            .count(),
        1
    );
}

#[test]
fn a_modes_name_is_what_the_configuration_says() {
    for m in [Mode::Enforce, Mode::Shadow] {
        let read: Mode = serde_json::from_str(&format!("\"{}\"", m.as_str())).expect("a mode");
        assert_eq!(read, m);
    }
    assert_eq!(Mode::Shadow.as_str(), "shadow");
}

#[test]
fn signed_agents_extend_the_catalogs_and_are_checked_with_their_field_path() {
    let c = parse(b"{}").expect("defaults");
    assert_eq!(
        c.signed_agents.mode,
        crate::config::SignedAgentsMode::Enforce
    );
    assert_eq!(c.signed_agents.nonce_slots, 16_384);
    assert_eq!(
        c.signed_agents
            .agents
            .iter()
            .map(|a| (a.id.as_str(), a.origin.as_str(), a.class))
            .collect::<Vec<_>>(),
        vec![("chatgpt-agent", "https://chatgpt.com", Class::AiRetriever)]
    );
    let c = parse(
        br#"{"signed_agents":{"mode":"shadow","agents":[
            {"id":"my-agent","origin":"https://agent.example:8443","class":"ai_retriever"},
            {"id":"chatgpt-agent","origin":"https://chatgpt.example","class":"ai_trainer"}]}}"#,
    )
    .expect("valid");
    assert_eq!(
        c.signed_agents.mode,
        crate::config::SignedAgentsMode::Shadow
    );
    // A configured id replaces the catalog's entry.
    assert_eq!(
        c.signed_agents
            .agents
            .iter()
            .map(|a| (a.id.as_str(), a.origin.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("my-agent", "https://agent.example:8443"),
            ("chatgpt-agent", "https://chatgpt.example")
        ]
    );
    for (json, path) in [
        (
            r#"{"signed_agents":{"agents":[{"id":"googlebot","origin":"https://a.example","class":"ai_retriever"}]}}"#,
            "signed_agents.agents[0].id",
        ),
        (
            r#"{"signed_agents":{"agents":[{"id":"a","origin":"http://a.example","class":"ai_retriever"}]}}"#,
            "signed_agents.agents[0].origin",
        ),
        (
            r#"{"signed_agents":{"agents":[{"id":"a","origin":"https://a.example/x","class":"ai_retriever"}]}}"#,
            "signed_agents.agents[0].origin",
        ),
        (
            r#"{"signed_agents":{"agents":[{"id":"a","origin":"https://a.example","class":"human"}]}}"#,
            "signed_agents.agents[0].class",
        ),
        (
            r#"{"signed_agents":{"agents":[{"id":"a","origin":"https://a.example","class":"ai_retriever"},{"id":"b","origin":"https://a.example","class":"ai_retriever"}]}}"#,
            "signed_agents.agents[1].origin",
        ),
        (
            r#"{"signed_agents":{"nonce_slots":8}}"#,
            "signed_agents.nonce_slots",
        ),
        (r#"{"signed_agents":{"mode":"loud"}}"#, "signed_agents.mode"),
        (
            r#"{"signed_agents":{"agents":[],"extra":1}}"#,
            "signed_agents.extra",
        ),
    ] {
        let e = parse(json.as_bytes()).expect_err(json);
        assert_eq!(e.path, path, "{json}: {e}");
    }
}

/// Values the hostile review found accepted: refused with their field path, or (the home
/// page exempt) a warning naming the field.
#[test]
fn repeated_and_contradictory_values_are_refused_with_their_path() {
    let agents = |a: &str, b: &str| {
        format!(
            r#"{{"signed_agents":{{"agents":[{{"id":"a","origin":"{a}","class":"ai_retriever"}},
                {{"id":"b","origin":"{b}","class":"ai_retriever"}}]}}}}"#
        )
    };
    let cases = [
        (
            r#"{"exempt_paths":["/robots.txt","/a","/robots.txt"]}"#.to_string(),
            "exempt_paths[2]: \"/robots.txt\" is also exempt_paths[0]",
        ),
        (
            agents("https://a.example", "https://a.example:443"),
            "signed_agents.agents[1].origin: \"https://a.example\" is also \
             signed_agents.agents[0].origin (the host lowercased, the default port :443 dropped)",
        ),
        (
            agents("https://A.Example:443", "https://a.example"),
            "signed_agents.agents[1].origin: \"https://a.example\" is also \
             signed_agents.agents[0].origin (the host lowercased, the default port :443 dropped)",
        ),
        (
            r#"{"client_signals":{"datacenter_asns":[16509,15169],"not_datacenter_asns":[3320,15169]}}"#
                .to_string(),
            "client_signals.not_datacenter_asns[1]: 15169 is also in client_signals.datacenter_asns",
        ),
    ];
    let got: Vec<(String, String)> = cases
        .iter()
        .map(|(doc, _)| {
            let out = match parse(doc.as_bytes()) {
                Ok(_) => "<accepted>".to_string(),
                Err(e) => e.to_string(),
            };
            (doc.clone(), out)
        })
        .collect();
    let want: Vec<(String, String)> = cases
        .iter()
        .map(|(doc, w)| (doc.clone(), w.to_string()))
        .collect();
    assert_eq!(got, want);

    // Spelled differently, one origin: the host lowercased, :443 dropped, another port kept.
    let c =
        parse(agents("https://A.example:443", "https://a.example:8443").as_bytes()).expect("valid");
    let origins: Vec<&str> = c
        .signed_agents
        .agents
        .iter()
        .map(|a| a.origin.as_str())
        .collect();
    assert_eq!(
        origins.get(..2),
        Some(&["https://a.example", "https://a.example:8443"][..])
    );

    // Header names are lowercased, like every header name of the configuration.
    let c =
        parse(br#"{"client_signals":{"ja4_header":"X-JA4","asn_header":"X-ASN"}}"#).expect("valid");
    assert_eq!(c.client_signals.ja4_header.as_deref(), Some("x-ja4"));
    assert_eq!(c.client_signals.asn_header.as_deref(), Some("x-asn"));
    assert_eq!(
        parse_err(r#"{"client_signals":{"ja4_header":"X-JA4","asn_header":"x-ja4"}}"#),
        "client_signals.asn_header: is the ja4_header: one header cannot carry both"
    );

    // A trusted header cannot be one a browser sends and a check reads.
    assert_eq!(
        parse_err(r#"{"client_signals":{"ja4_header":"Sec-Fetch-Site"}}"#),
        "client_signals.ja4_header: is \"sec-fetch-site\", which browsers send and the \
         fetch_metadata check reads: a header only Envoy sets needs a name of its own"
    );
    assert_eq!(
        parse_err(r#"{"client_signals":{"asn_header":"sec-ch-ua"}}"#),
        "client_signals.asn_header: is \"sec-ch-ua\", which browsers send and the \
         client_hints check reads: a header only Envoy sets needs a name of its own"
    );

    // A class whose only limits are keyed by asn, without asn_header: never limited, and
    // the warning says why. With asn_header, or with another limit, no warning for it.
    let limit = |name: &str, key: &str| {
        format!(
            r#"{{"name":"{name}","class":"suspect_browser","route":"*","rate_per_s":1,"burst":5,"key":{key}}}"#
        )
    };
    let only_asn = format!(
        r#"{{"limits":[{},{}]}}"#,
        limit("a", r#""asn""#),
        limit("b", r#"["asn","path"]"#)
    );
    let about = |doc: &str| -> Vec<String> {
        parse(doc.as_bytes())
            .expect("valid")
            .warnings
            .into_iter()
            .filter(|w| w.contains("class suspect_browser"))
            .collect()
    };
    let got = about(&only_asn);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got.iter().all(|w| w.starts_with(
            "limits: no enforced limit covers class suspect_browser: its requests are never \
             limited (its limits keyed by asn charge no one while client_signals.asn_header \
             is unset; a configuration's own limits replace all"
        )),
        "{got:?}"
    );
    let with_header = only_asn.replacen(
        r#"{"limits""#,
        r#"{"client_signals":{"asn_header":"x-asn"},"limits""#,
        1,
    );
    assert_eq!(about(&with_header), Vec::<String>::new());
    let with_ip = only_asn.replacen("[", &format!("[{},", limit("c", r#""client_ip""#)), 1);
    assert_eq!(about(&with_ip), Vec::<String>::new());

    // The home page exempt: legal, warned about with the field.
    let c = parse(br#"{"exempt_paths":["/robots.txt","/"]}"#).expect("valid");
    assert_eq!(
        c.warnings,
        [
            "exempt_paths[1]: \"/\" exempts the home page from every class limit and from \
          shedding (only exempt_limit applies); exempt paths match exactly, so it does not \
          exempt anything below it"
        ]
    );
}

/// Hostile review 2: a `bot` key charges no `human` request, and no `suspect_browser` one
/// either (a human request whose browser check failed: it names no bot id). So a limit of
/// class `suspect_browser` keyed by `bot` is refused like one of class `human`, and a `bot`
/// limit of class `*` covers neither class in the never-limited warning.
#[test]
fn bot_keys_charge_no_human_or_suspect_browser_request() {
    assert_eq!(
        parse_err(
            r#"{"limits":[{"name":"a","class":"suspect_browser","route":"*","rate_per_s":1,"burst":5,"key":"bot"}]}"#
        ),
        "limits[0].key: \"bot\" in a limit of class suspect_browser: suspect_browser requests \
         name no bot id, so the limit would charge nothing"
    );
    let c = parse(
        br#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":5,"key":["bot","client_ip"]}]}"#,
    )
    .expect("valid");
    let about: Vec<&String> = c
        .warnings
        .iter()
        .filter(|w| w.starts_with("limits: no enforced limit covers class"))
        .collect();
    assert_eq!(about.len(), 2, "{about:#?}");
    for (w, class) in about.iter().zip(["human", "suspect_browser"]) {
        assert!(
            w.starts_with(&format!(
                "limits: no enforced limit covers class {class}: its requests are never \
                 limited (its limits keyed by bot charge no one: its requests name no bot id; \
                 a configuration's own limits replace all"
            )),
            "{w}"
        );
    }
}
