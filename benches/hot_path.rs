//! Host-side microbenchmarks of the per-request work (no Envoy): where the allow path's time
//! goes between classification and the store. `cargo bench --bench hot_path`; `make bench`
//! measures the whole filter inside Envoy.

use crawlguard_core::config;
use crawlguard_core::identity::catalog::builtin_catalog;
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::classify::Classifier;
use crawlguard_core::limits::bucket::NS_PER_S;
use crawlguard_core::limits::decision::decide;
use crawlguard_core::limits::limiter::{Limiter, RequestKeys};
use crawlguard_testkit::MemStore;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

const CHROME: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
const GOOGLEBOT: &[u8] =
    b"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
const CURL: &[u8] = b"curl/8.5.0";
/// A long mobile browser UA (an in-app browser: every byte is scanned, no entry matches).
const IPHONE_APP: &[u8] = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 [FBAN/FBIOS;FBAV/446.0.0.36.110;FBBV/553012637;FBDV/iPhone15,3;FBMD/iPhone;FBSN/iOS;FBSV/17.2;FBSS/3;FBCR/;FBID/phone;FBLC/en_US;FBOP/80]";
/// Not browser-shaped: the human rule's non-browser fallback.
const APP: &[u8] = b"Luminary/70 (build 71; iOS 12.2)";

fn classify(c: &mut Criterion) {
    let cl = Classifier::new(builtin_catalog());
    for (name, ua) in [
        ("chrome", CHROME),
        ("iphone_app", IPHONE_APP),
        ("googlebot", GOOGLEBOT),
        ("curl", CURL),
        ("non_browser", APP),
    ] {
        c.bench_function(&format!("classify/{name}"), |b| {
            b.iter(|| black_box(cl.classify(black_box(Some(ua))).class))
        });
    }
}

fn decide_allow(c: &mut Criterion) {
    // Two matching limits, as in `make bench` configuration 4.
    let cfg = config::parse(
        br#"{"limits":[
        {"name":"human_per_ip","class":"human","route":"*","rate_per_s":1000000,"burst":1000000,"key":"client_ip"},
        {"name":"all_global","class":"*","route":"*","rate_per_s":1000000,"burst":1000000,"key":"global"}]}"#,
    )
    .expect("valid");
    let mut lim = Limiter::new(&cfg);
    let store = MemStore::default();
    lim.table().precreate(&store).expect("precreate");
    let req = RequestKeys {
        route: 0,
        client: "127.0.0.1".parse().ok(),
        client_ip: "127.0.0.1".parse().ok(),
        bot: None,
        path: b"/",
        asn: None,
        key_headers: &[],
        verified_claim: false,
    };
    let mut now = 1_700_000_000 * NS_PER_S;
    c.bench_function("decide/allow_two_limits_mem_store", |b| {
        b.iter(|| {
            now += 1_000;
            black_box(decide(
                &cfg,
                &mut lim,
                &store,
                &req,
                Class::Human,
                now,
                &mut || 0,
            ))
        })
    });
}

/// One response counted for shedding (`Worker::record_response`, on every forwarded
/// response with `shedding.enabled`): a fast 2xx, and slow ones from 12 rotating client
/// prefixes (more than the 8 rows of the per-client table: every one scans and evicts).
fn record_response(c: &mut Criterion) {
    let cfg = config::parse(br#"{"shedding":{"enabled":true}}"#).expect("valid");
    let w = crawlguard_core::worker::Worker::new(cfg, Default::default(), 0);
    let clients: Vec<std::net::IpAddr> = (1..=12u8)
        .map(|i| std::net::IpAddr::from([192, 0, 2, i]))
        .collect();
    let mut i = 0usize;
    for (name, ms) in [("fast_2xx", 3u64), ("slow_12_clients", 2_500)] {
        c.bench_function(&format!("shedding/record_response_{name}"), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let client = clients.get(i % clients.len()).copied();
                w.shedder
                    .record_response(&w.cfg, 0, black_box(ms), false, client)
            })
        });
    }
}

/// A claim decided by the sidecar's published ranges (issue 20 item 13: a binary search of
/// Google's 315 prefixes, the set of the 1,773 real ones that Googlebot uses) against the
/// same claim as a verdict-cache hit (a shared-data read of the claim's slot, in memory
/// here; in Envoy a host call besides).
fn verify_lookup(c: &mut Criterion) {
    use crawlguard_contract::ranges::{parse, render, OutOfRange};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    let mut sets = Vec::new();
    for f in [
        "google-crawler-ips/googlebot.json",
        "google-crawler-ips/googlesc.json",
        "google-crawler-ips/googleutf.json",
        "openai-crawler-ips/gptbot.json",
    ] {
        let text = std::fs::read_to_string(root.join(f)).expect("shared data");
        let set: Vec<(std::net::IpAddr, u8)> = text
            .split('"')
            .filter_map(|t| t.split_once('/'))
            .filter_map(|(a, l)| Some((a.parse().ok()?, l.parse().ok()?)))
            .collect();
        sets.push(set);
    }
    let mut bots: Vec<(String, OutOfRange, usize)> =
        crawlguard_core::identity::catalog::builtin_catalog()
            .iter()
            .filter(|b| b.verify)
            .map(|b| (b.id.clone(), OutOfRange::Fcrdns, 0))
            .collect();
    bots.retain(|b| b.0 != "gptbot");
    bots.push(("gptbot".into(), OutOfRange::Spoofed, 3));
    let table = parse(render(&sets, &bots).1.as_bytes()).expect("own document");
    let ip: std::net::IpAddr = "66.249.66.1".parse().expect("ip");
    assert_eq!(
        table.verdict(ip, "googlebot"),
        Some(crawlguard_core::identity::verifier_answer::Verdict::Verified)
    );
    c.bench_function("verify/published_ranges_hit", |b| {
        b.iter(|| black_box(table.verdict(black_box(ip), black_box("googlebot"))))
    });
    let cache = crawlguard_core::identity::verdict_cache::VerdictCache::new(8_192, 8);
    let store = MemStore::default();
    cache.precreate(&store).expect("precreate");
    let now = 1_700_000_000 * NS_PER_S;
    let fp = 0x1234_5678_9abc_def0;
    let _ = cache.put_verdict(
        &store,
        fp,
        crawlguard_core::identity::verifier_answer::Verdict::Verified,
        now,
        now + 3_600 * NS_PER_S,
        0,
    );
    c.bench_function("verify/verdict_cache_hit_mem_store", |b| {
        b.iter(|| {
            black_box(
                cache
                    .claim(&store, black_box(fp), now)
                    .and_then(|e| e.fresh(now)),
            )
        })
    });
}

criterion_group!(
    benches,
    classify,
    decide_allow,
    record_response,
    verify_lookup
);
criterion_main!(benches);
