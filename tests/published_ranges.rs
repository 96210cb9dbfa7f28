//! The sidecar's published ranges in the filter (issue 20 item 13): fetched on the tick,
//! then range-verifiable claims are decided without a callout, also after the sidecar died;
//! a bad answer keeps the ranges in use. Whole requests on the host (`fake_host`).

mod common;

use common::T0;
use crawlguard_contract::ranges::{render, OutOfRange};
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;

const S: u64 = 1_000_000_000;
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
const GPTBOT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; \
                      +https://openai.com/gptbot)";

fn doc() -> String {
    let p = |s: &str| {
        let (a, l) = s.split_once('/').unwrap();
        (a.parse().unwrap(), l.parse().unwrap())
    };
    render(
        &[vec![p("66.249.64.0/27")], vec![p("52.230.152.0/24")]],
        &[
            ("googlebot".into(), OutOfRange::Fcrdns, 0),
            ("gptbot".into(), OutOfRange::Spoofed, 1),
        ],
    )
    .1
}

/// A proxy that fetched `doc()` on its first tick.
fn fetched() -> FakeProxy {
    let mut p = FakeProxy::new("{}", T0);
    p.tick();
    assert_eq!(p.host.callouts.len(), 1);
    let c = p.host.callouts[0].clone();
    assert_eq!(c.path, "/v1/ranges");
    p.answer(c.token, Some("200"), &doc());
    assert_eq!(p.counter("crawlguard.verify.ranges_updated"), 1);
    p
}

#[test]
fn claims_inside_the_ranges_are_verified_without_a_callout() {
    let mut p = fetched();
    let (ctx, step) = p.get("/", GOOGLEBOT, "66.249.64.7:4000");
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    let (ctx, _) = p.get("/", GPTBOT, "52.230.152.9:4000");
    assert_eq!(p.class_of(ctx).as_deref(), Some("ai_trainer"));
    // GPTBot has no FCrDNS: outside its ranges it is spoofed, still no callout.
    let (ctx, step) = p.get("/", GPTBOT, "198.51.100.9:4000");
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx).as_deref(), Some("spoofed"));
    assert_eq!(p.host.callouts.len(), 1);
    assert_eq!(p.counter("crawlguard.verify.range_verified"), 2);
    assert_eq!(p.counter("crawlguard.verify.range_spoofed"), 1);
    // Googlebot outside its ranges: FCrDNS decides, the sidecar is asked.
    let (_, step) = p.get("/", GOOGLEBOT, "198.51.100.7:4000");
    assert_eq!(step, Step::Pause);
    p.wake();
    assert_eq!(
        p.host.callouts.last().map(|c| c.path.clone()).as_deref(),
        Some("/v1/verify?ip=198.51.100.7&bot=googlebot")
    );
}

#[test]
fn refresh_asks_with_the_generation_and_garbage_keeps_the_ranges() {
    let mut p = fetched();
    let generation = crawlguard_contract::ranges::generation_of(doc().as_bytes())
        .unwrap()
        .to_string();
    p.advance(60 * S);
    p.tick();
    let c = p.host.callouts.last().cloned().unwrap();
    assert_eq!(c.path, format!("/v1/ranges?since={generation}"));
    p.answer(c.token, Some("304"), "");
    assert_eq!(p.counter("crawlguard.verify.ranges_not_modified"), 1);
    let big = "x".repeat(crawlguard_contract::ranges::MAX_BODY_BYTES + 1);
    // A sidecar gone wrong: ranges covering every address would verify every claimant.
    let everything = "crawlguard-ranges 1 00000000000000ff\nset 0.0.0.0/0 2000::/3\n\
                      bot googlebot fcrdns 0\nend\n";
    // The same from prefixes each long enough: 256 /8s side by side.
    let eights: Vec<String> = (0..=255).map(|a| format!("{a}.0.0.0/8")).collect();
    let side_by_side = format!(
        "crawlguard-ranges 1 00000000000000ff\nset {}\nbot googlebot fcrdns 0\nend\n",
        eights.join(" ")
    );
    for (status, body) in [
        (Some("200"), everything),
        (Some("200"), side_by_side.as_str()),
        (Some("200"), "{\"prefixes\":[]}"),
        (Some("200"), &doc()[..40]),
        (Some("200"), big.as_str()),
        (Some("503"), "{}"),
        (None, ""),
    ] {
        p.advance(60 * S);
        p.tick();
        let c = p.host.callouts.last().cloned().unwrap();
        assert!(c.path.starts_with("/v1/ranges"));
        p.answer(c.token, status, body);
    }
    assert_eq!(p.counter("crawlguard.verify.ranges_error"), 7);
    let (ctx, step) = p.get("/", GOOGLEBOT, "66.249.64.7:4000");
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    // Outside the ranges in use, Googlebot is still the sidecar's to decide.
    assert_eq!(p.get("/", GOOGLEBOT, "198.51.100.7:4000").1, Step::Pause);
}

#[test]
fn a_new_worker_starts_with_the_stored_ranges() {
    let p = fetched();
    let mut second = p.second_worker(T0 + S);
    second.tick();
    let (ctx, step) = second.get("/", GOOGLEBOT, "66.249.64.7:4000");
    assert_eq!(step, Step::Continue);
    assert_eq!(second.class_of(ctx).as_deref(), Some("search_crawler"));
}

#[test]
fn zero_turns_it_off() {
    let mut p = FakeProxy::new(r#"{"verifier":{"ranges_refresh_s":0}}"#, T0);
    p.tick();
    assert!(p.host.callouts.is_empty());
}

/// The figures the README states: the real Google and OpenAI files as one document.
#[test]
fn real_published_files_size_and_memory() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    let mut sets = Vec::new();
    for f in [
        "google-crawler-ips/googlebot.json",
        "google-crawler-ips/googlesc.json",
        "google-crawler-ips/googleutf.json",
        "openai-crawler-ips/gptbot.json",
        "openai-crawler-ips/searchbot.json",
        "openai-crawler-ips/chatgpt-user.json",
    ] {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(f)).unwrap()).unwrap();
        let set: Vec<(std::net::IpAddr, u8)> = v["prefixes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let t = p["ipv4Prefix"]
                    .as_str()
                    .or(p["ipv6Prefix"].as_str())
                    .unwrap();
                let (a, l) = t.split_once('/').unwrap();
                (a.parse().unwrap(), l.parse().unwrap())
            })
            .collect();
        sets.push(set);
    }
    let bots: Vec<(String, OutOfRange, usize)> = (0..sets.len())
        .map(|i| (format!("bot{i}"), OutOfRange::Spoofed, i))
        .collect();
    let (_, text) = render(&sets, &bots);
    let r = crawlguard_contract::ranges::parse(text.as_bytes()).unwrap();
    eprintln!(
        "document {} bytes, {} prefixes, table {} bytes",
        text.len(),
        r.prefixes(),
        r.table_bytes()
    );
    assert_eq!(r.prefixes(), 1773);
    assert!(r.table_bytes() < 110_000);
    assert!(text.len() < 40_000);
}
