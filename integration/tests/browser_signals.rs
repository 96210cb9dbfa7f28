//! Browser claims checked at a real TLS edge (`envoy/envoy-tls.yaml`: tls_inspector's JA4
//! copied into `x-crawlguard-ja4`, the geoip filter's ASN in `x-crawlguard-asn`, both
//! stripped from what the client sent): real headless Chromium and Firefox ESR are `human`
//! over HTTP/2 and HTTP/1.1 with every default check on; curl, Python and Go sending
//! Chrome's User-Agent with a browser's headers are not; and each check fails on its own
//! evidence (a test per check).
//!
//! The ASN database is built per test (`browsers::asn_db`): 127.0.0.0/16 is an access
//! network (AS7922), 127.16.0.0/12 a cloud (AS16509, in the catalog's `datacenter_asns`).

use std::collections::BTreeMap;
use std::time::Duration;

use crawlguard_integration::browsers::{
    chrome_user_agent, curl, go_get, python_get, Chromium, Firefox,
};
use crawlguard_integration::tls_edge::{browser_headers, page, Edge};
use crawlguard_integration::{poll_until, shipped_filter_config, TLS_TEMPLATE};
use serde_json::json;

/// An access network and a cloud (see the module documentation).
const NETWORKS: &[(&str, u32, &str)] = &[
    ("127.0.0.0/16", 7922, "COMCAST-7922"),
    ("127.16.0.0/12", 16509, "AMAZON-02"),
];

/// Chromium's cipher suites as JA4 hashes them (FoxIO's ja4plus-mapping.csv).
const CHROMIUM_CIPHERS: &str = "8daaf6152771";

/// How long Envoy may take to write an access log line (it flushes on a timer).
const LOG_DEADLINE: Duration = Duration::from_secs(15);

/// Asserts that every request the upstream saw for `who` came as `class`, at least `min` of
/// them; returns the JA4s seen.
async fn assert_seen_as(edge: &Edge, who: &str, class: &str, min: usize) -> Vec<String> {
    let seen = edge.seen(&format!("who={who}")).await;
    assert!(
        seen.len() >= min,
        "{who}: {} requests seen, want >= {min}",
        seen.len()
    );
    for (c, ja4, _) in &seen {
        assert_eq!(c, class, "{who}: a request came as {c} (JA4 {ja4})");
    }
    seen.into_iter().map(|(_, ja4, _)| ja4).collect()
}

#[tokio::test]
async fn real_chromium_and_firefox_are_human_over_http2_with_every_check_on() {
    let edge = Edge::start(None, true, NETWORKS).await;
    // The shipped configuration: every check enforced, every signal configured.
    assert_eq!(
        shipped_filter_config(TLS_TEMPLATE),
        json!({"client_signals": {"ja4_header": "x-crawlguard-ja4",
            "asn_header": "x-crawlguard-asn", "listener_offers_h2": true}})
    );
    let dom = Chromium::new(edge.ca())
        .load(&edge.url(&page("chromium-h2")), true)
        .expect("chromium");
    assert!(
        dom.contains("chromium-h2"),
        "chromium loaded the page: {dom}"
    );
    let ja4s = assert_seen_as(&edge, "chromium-h2", "human", 4).await;
    for ja4 in &ja4s {
        assert!(
            ja4.starts_with("t13d") && ja4.contains(&format!("h2_{CHROMIUM_CIPHERS}_")),
            "chromium's handshake as Envoy saw it: {ja4}"
        );
    }
    Firefox::new(edge.ca(), true)
        .load(&edge.url(&page("firefox-h2")))
        .expect("firefox");
    let ja4s = assert_seen_as(&edge, "firefox-h2", "human", 4).await;
    // Firefox's NSS: TLS 1.3, SNI, ALPN h2, its own cipher suites.
    assert!(
        ja4s.iter()
            .all(|j| j.starts_with("t13d") && j.contains("h2_")),
        "{ja4s:?}"
    );
    assert_eq!(edge.failed_checks().await, BTreeMap::new());
    // Envoy's access log (flushed on its own timer): both over HTTP/2, from an access
    // network.
    for who in ["chromium-h2", "firefox-h2"] {
        let line = edge
            .envoy
            .wait_for_log_line(LOG_DEADLINE, who, |l| l.contains(&format!("who={who}\"")))
            .await;
        assert!(
            line.contains("class=human")
                && line.contains("proto=HTTP/2")
                && line.contains("asn=7922"),
            "{line}"
        );
    }
    edge.envoy.assert_log_clean();
}

#[tokio::test]
async fn real_chromium_and_firefox_are_human_over_http1_at_a_listener_without_h2() {
    let mut cfg = shipped_filter_config(TLS_TEMPLATE);
    cfg["client_signals"]["listener_offers_h2"] = json!(false);
    let edge = Edge::start(Some(cfg), false, NETWORKS).await;
    Chromium::new(edge.ca())
        .load(&edge.url(&page("chromium-h1")), true)
        .expect("chromium");
    assert_seen_as(&edge, "chromium-h1", "human", 4).await;
    // Firefox with HTTP/2 switched off offers http/1.1 alone.
    Firefox::new(edge.ca(), false)
        .load(&edge.url(&page("firefox-h1")))
        .expect("firefox");
    let ja4s = assert_seen_as(&edge, "firefox-h1", "human", 4).await;
    assert!(ja4s.iter().all(|j| j.contains("h1_")), "{ja4s:?}");
    assert_eq!(edge.failed_checks().await, BTreeMap::new());
    let h1_lines = || {
        let log = edge.envoy.log();
        log.lines()
            .filter(|l| l.contains("who=chromium-h1") && l.contains("proto=HTTP/1.1"))
            .count()
    };
    let h1 = poll_until(LOG_DEADLINE, || async { (h1_lines() >= 4).then_some(()) }).await;
    assert!(h1.is_some(), "chromium over HTTP/1.1: {} lines", h1_lines());
    edge.envoy.assert_log_clean();
}

#[tokio::test]
async fn http_libraries_behind_chromes_user_agent_are_suspect_browsers() {
    let edge = Edge::start(None, true, NETWORKS).await;
    let ua = chrome_user_agent();
    let headers = browser_headers(&ua);
    // Every library sends what Chrome sends, from an access network; only its handshake
    // (and Python's HTTP/1.1) gives it away.
    let ca = edge.ca();
    let statuses = [
        curl(&edge.ip_url("/?who=curl"), ca, "127.0.0.11", &headers),
        python_get(&edge.ip_url("/?who=python"), ca, "127.0.0.12", &headers),
        go_get(&edge.ip_url("/?who=go"), ca, "127.0.0.13", &headers),
    ];
    assert_eq!(statuses, [200, 200, 200]);
    let mut ciphers = BTreeMap::new();
    for who in ["curl", "python", "go"] {
        let ja4s = assert_seen_as(&edge, who, "suspect_browser", 1).await;
        ciphers.insert(
            who,
            ja4s[0].split('_').nth(1).unwrap_or_default().to_string(),
        );
    }
    // The catalog's library_tls_fingerprints name exactly these stacks.
    assert_eq!(
        ciphers,
        BTreeMap::from([
            ("curl", "e8f1e7e78f70".to_string()),
            ("go", "9dc949149365".to_string()),
            ("python", "85036bcba153".to_string()),
        ])
    );
    // Python speaks HTTP/1.1 to a listener that offers h2: that fails too.
    assert_eq!(
        edge.failed_checks().await,
        BTreeMap::from([
            ("http_version".to_string(), 1),
            ("tls_fingerprint".to_string(), 3)
        ])
    );
}

#[tokio::test]
async fn http_1_from_chromium_at_a_listener_offering_h2_fails_http_version_alone() {
    let edge = Edge::start(None, true, NETWORKS).await;
    Chromium::new(edge.ca())
        .load(&edge.url(&page("chromium-no-h2")), false)
        .expect("chromium");
    let ja4s = assert_seen_as(&edge, "chromium-no-h2", "suspect_browser", 1).await;
    // Still Chromium's own handshake, offering http/1.1 alone.
    assert!(
        ja4s.iter()
            .all(|j| j.contains(&format!("h1_{CHROMIUM_CIPHERS}_"))),
        "{ja4s:?}"
    );
    let failed = edge.failed_checks().await;
    assert_eq!(failed.keys().collect::<Vec<_>>(), ["http_version"]);
}

#[tokio::test]
async fn chromium_from_a_cloud_network_fails_network_alone() {
    // Here every loopback address is Amazon's.
    let edge = Edge::start(None, true, &[("127.0.0.0/8", 16509, "AMAZON-02")]).await;
    Chromium::new(edge.ca())
        .load(&edge.url(&page("chromium-cloud")), true)
        .expect("chromium");
    assert_seen_as(&edge, "chromium-cloud", "suspect_browser", 1).await;
    let seen = edge.seen("who=chromium-cloud").await;
    assert!(seen.iter().all(|(_, _, asn)| asn == "16509"), "{seen:?}");
    let failed = edge.failed_checks().await;
    assert_eq!(failed.keys().collect::<Vec<_>>(), ["network"]);
}

#[tokio::test]
async fn a_missing_fetch_metadata_or_client_hint_fails_its_check_alone() {
    // The handshake check in shadow mode, so that curl's own handshake is only counted.
    let mut cfg = shipped_filter_config(TLS_TEMPLATE);
    cfg["browser_checks"] = json!({"tls_fingerprint": "shadow"});
    let edge = Edge::start(Some(cfg), true, NETWORKS).await;
    let ua = chrome_user_agent();
    let all = browser_headers(&ua);
    let without = |name: &str| -> Vec<(&str, &str)> {
        all.iter().copied().filter(|(k, _)| *k != name).collect()
    };
    let ca = edge.ca();
    assert_eq!(curl(&edge.ip_url("/?who=all"), ca, "127.0.0.21", &all), 200);
    assert_eq!(
        curl(
            &edge.ip_url("/?who=no-fetch"),
            ca,
            "127.0.0.22",
            &without("sec-fetch-site")
        ),
        200
    );
    assert_eq!(
        curl(
            &edge.ip_url("/?who=no-hints"),
            ca,
            "127.0.0.23",
            &without("sec-ch-ua")
        ),
        200
    );
    assert_seen_as(&edge, "all", "human", 1).await;
    assert_seen_as(&edge, "no-fetch", "suspect_browser", 1).await;
    assert_seen_as(&edge, "no-hints", "suspect_browser", 1).await;
    assert_eq!(
        edge.failed_checks().await,
        BTreeMap::from([
            ("client_hints".to_string(), 1),
            ("fetch_metadata".to_string(), 1),
            ("tls_fingerprint".to_string(), 3)
        ])
    );
}

#[tokio::test]
async fn signal_headers_a_client_sends_are_replaced_by_what_envoy_saw() {
    let edge = Edge::start(None, true, NETWORKS).await;
    let ua = chrome_user_agent();
    let mut headers = browser_headers(&ua);
    // A scraper in a cloud claiming Chrome's handshake and an access network.
    headers.push(("x-crawlguard-ja4", "t13d1516h2_8daaf6152771_02713d6af862"));
    headers.push(("x-crawlguard-asn", "7922"));
    let status = curl(
        &edge.ip_url("/?who=forger"),
        edge.ca(),
        "127.16.0.9",
        &headers,
    );
    assert_eq!(status, 200);
    let seen = edge.seen("who=forger").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (class, ja4, asn) = &seen[0];
    assert_eq!(class, "suspect_browser");
    assert!(
        ja4.contains("_e8f1e7e78f70_"),
        "curl's own handshake: {ja4}"
    );
    assert_eq!(asn, "16509");
    assert_eq!(
        edge.failed_checks().await,
        BTreeMap::from([
            ("network".to_string(), 1),
            ("tls_fingerprint".to_string(), 1)
        ])
    );
}

#[tokio::test]
async fn replay_decides_the_tls_edges_access_log_as_envoy_did() {
    use crawlguard_cli::input;
    use crawlguard_cli::logfmt::Format;
    use crawlguard_cli::replay::Replay;

    let cfg = shipped_filter_config(TLS_TEMPLATE);
    let edge = Edge::start(None, true, NETWORKS).await;
    let ua = chrome_user_agent();
    let all = browser_headers(&ua);
    let no_fetch: Vec<(&str, &str)> = all
        .iter()
        .copied()
        .filter(|(k, _)| *k != "sec-fetch-site")
        .collect();
    let chromium = Chromium::new(edge.ca());
    chromium
        .load(&edge.url(&page("r-h2")), true)
        .expect("chromium");
    chromium
        .load(&edge.url(&page("r-h1")), false)
        .expect("chromium");
    let ca = edge.ca();
    for (who, source, headers) in [
        ("r-curl", "127.0.0.31", &all),
        ("r-curl-no-fetch", "127.0.0.32", &no_fetch),
        ("r-cloud", "127.16.0.33", &all),
    ] {
        assert_eq!(
            curl(&edge.ip_url(&format!("/?who={who}")), ca, source, headers),
            200
        );
    }
    assert_eq!(
        python_get(&edge.ip_url("/?who=r-python"), ca, "127.0.0.34", &all),
        200
    );
    // Every request in Envoy's access log (flushed on a timer).
    let stats = edge.envoy.crawlguard_stats().await;
    let decided: u64 = ["human", "suspect_browser"]
        .iter()
        .map(|c| {
            stats
                .get(&format!("crawlguard.class.{c}.allowed"))
                .copied()
                .unwrap_or(0)
        })
        .sum();
    let lines = || {
        edge.envoy
            .log()
            .lines()
            .filter(|l| l.contains(" proto="))
            .count() as u64
    };
    let all_logged = poll_until(LOG_DEADLINE, || async {
        (lines() >= decided).then_some(())
    })
    .await;
    assert!(
        all_logged.is_some(),
        "{} of {decided} access log lines",
        lines()
    );
    let log = edge.envoy.log();
    let config = crawlguard_core::config::parse(cfg.to_string().as_bytes()).expect("config");
    let mut rp = Replay::new(config, 1.0, None);
    let st = input::each_record(
        "envoy.log",
        &mut log.as_bytes(),
        Some(Format::Crawlguard),
        &mut |r| rp.add(r),
    );
    assert_eq!(st.parsed, decided);
    let j = serde_json::to_value(rp.json(5)).expect("json");
    assert_eq!(j["no_browser_signals"], json!(0));
    let replayed = |class: &str| {
        j["classes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["class"] == class)
            .map_or(0, |c| c["admitted"].as_u64().unwrap_or(0))
    };
    let envoy = |class: &str| {
        stats
            .get(&format!("crawlguard.class.{class}.allowed"))
            .copied()
            .unwrap_or(0)
    };
    // Chromium's two pages (h2 human; h1 at this listener suspect) and four libraries.
    assert!(
        envoy("human") >= 4 && envoy("suspect_browser") >= 5,
        "{stats:?}"
    );
    for class in ["human", "suspect_browser"] {
        assert_eq!(replayed(class), envoy(class), "{class}: replay vs Envoy");
    }
}

/// Behind a CDN that ends TLS and speaks plain HTTP to Envoy (README: `"ja4_header":
/// "cf-ja4"`), the TLS fingerprint is judged from the CDN's header over a plain connection:
/// an HTTP library's handshake behind Chrome's User-Agent is a suspect browser whatever
/// browser headers it adds or leaves out (before, the check was skipped whenever an earlier
/// check had read that the connection to Envoy is not TLS, so the bare library passed and
/// the one imitating more headers was caught); Chromium's handshake stays `human`.
#[tokio::test]
async fn behind_a_cdn_the_tls_fingerprint_is_judged_over_plain_http() {
    use crawlguard_integration::client::{client, get, ip};
    use crawlguard_integration::envoy::Envoy;
    let (envoy, _up) = Envoy::start_with_upstream(json!({
        "verifier": {"enabled": false},
        "client_signals": {"ja4_header": "cf-ja4"}
    }))
    .await;
    let ua = chrome_user_agent();
    // curl on OpenSSL 3 (its b part is the catalog's OpenSSL default cipher list).
    let library = "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6";
    let chromium = format!("t13d1516h2_{CHROMIUM_CIPHERS}_02713d6af862");
    let hints = (
        "sec-ch-ua",
        "\"Chromium\";v=\"131\", \"Not_A Brand\";v=\"24\"",
    );
    let fetch = ("sec-fetch-site", "none");
    // (what the client is, its headers, the class the upstream must see)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: [Case; 5] = [
        (
            "library, no browser header",
            vec![("cf-ja4", library)],
            "suspect_browser",
        ),
        (
            "library, fetch metadata",
            vec![("cf-ja4", library), fetch],
            "suspect_browser",
        ),
        (
            "library, both headers",
            vec![("cf-ja4", library), fetch, hints],
            "suspect_browser",
        ),
        (
            "chromium, no browser header",
            vec![("cf-ja4", &chromium)],
            "human",
        ),
        (
            "chromium, both headers",
            vec![("cf-ja4", &chromium), fetch, hints],
            "human",
        ),
    ];
    for (i, (what, headers, want)) in cases.iter().enumerate() {
        let c = client(ip(40 + u8::try_from(i).unwrap_or(0)));
        let r = get(&c, &envoy.url("/"), &ua, headers).await;
        assert_eq!(r.status, 200, "{what}");
        assert_eq!(r.upstream_class(), Some(*want), "{what}");
    }
    let stats = envoy.stats().await;
    assert_eq!(
        stats.get("wasmcustom.crawlguard.browser_check.tls_fingerprint.inconsistent"),
        Some(&3),
        "{stats:?}"
    );
}
