//! Browser claims checked by what the browser sends (the catalog's `browser_checks`), on the
//! filter's request path with the fake host: a current Chrome or Firefox User-Agent over TLS
//! without its fetch metadata (or Chrome without its client hints) is `suspect_browser`;
//! shadow mode counts and keeps `human`; `off` runs nothing; plain HTTP never fails a check.

mod common;

use common::T0;
use crawlguard_testkit::FakeProxy;

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/131.0.0.0 Safari/537.36";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
const WEBVIEW: &str = "Mozilla/5.0 (Linux; Android 13; Pixel 7; wv) AppleWebKit/537.36 (KHTML, \
                       like Gecko) Version/4.0 Chrome/131.0.6778.39 Mobile Safari/537.36";
const FETCH: (&str, &str) = ("sec-fetch-site", "none");
const HINTS: (&str, &str) = (
    "sec-ch-ua",
    "\"Chromium\";v=\"131\", \"Not_A Brand\";v=\"24\"",
);

/// The class `ua` with `extra` headers gets, and the two checks' counters after it.
fn judged(cfg: &str, tls: bool, ua: &str, extra: &[(&str, &str)]) -> (String, u64, u64) {
    let mut p = FakeProxy::new(cfg, T0);
    p.tls = tls;
    let mut headers = vec![(":path", "/page"), ("user-agent", ua)];
    headers.extend_from_slice(extra);
    let (ctx, _) = p.request(&headers, "192.0.2.1:4000");
    p.tick();
    (
        p.class_of(ctx).unwrap_or_default(),
        p.counter("crawlguard.browser_check.fetch_metadata.inconsistent"),
        p.counter("crawlguard.browser_check.client_hints.inconsistent"),
    )
}

#[test]
fn over_tls_a_browser_user_agent_without_its_headers_is_a_suspect_browser() {
    let s = |c: &str| c.to_string();
    // Chrome: both checks.
    assert_eq!(
        judged("", true, CHROME, &[FETCH, HINTS]),
        (s("human"), 0, 0)
    );
    assert_eq!(judged("", true, CHROME, &[]), (s("suspect_browser"), 1, 1));
    assert_eq!(
        judged("", true, CHROME, &[FETCH]),
        (s("suspect_browser"), 0, 1)
    );
    assert_eq!(
        judged("", true, CHROME, &[HINTS]),
        (s("suspect_browser"), 1, 0)
    );
    // Firefox never sends client hints; it does send fetch metadata.
    assert_eq!(judged("", true, FIREFOX, &[FETCH]), (s("human"), 0, 0));
    assert_eq!(judged("", true, FIREFOX, &[]), (s("suspect_browser"), 1, 0));
    // An Android WebView (an in-app browser) is excused.
    assert_eq!(judged("", true, WEBVIEW, &[]), (s("human"), 0, 0));
    // Any value passes: the check is that the browser sends the header at all.
    assert_eq!(
        judged(
            "",
            true,
            CHROME,
            &[("sec-fetch-site", ""), ("sec-ch-ua", "x")]
        ),
        (s("human"), 0, 0)
    );
}

#[test]
fn over_plain_http_no_check_fails() {
    // Browsers send neither header to an origin that is not secure.
    assert_eq!(judged("", false, CHROME, &[]), ("human".to_string(), 0, 0));
}

#[test]
fn shadow_mode_counts_and_off_runs_nothing() {
    let shadow = r#"{"browser_checks":{"client_hints":"shadow"}}"#;
    // Only client hints missing: counted, still human.
    assert_eq!(
        judged(shadow, true, CHROME, &[FETCH]),
        ("human".to_string(), 0, 1)
    );
    // Fetch metadata is still enforced.
    assert_eq!(
        judged(shadow, true, CHROME, &[]),
        ("suspect_browser".to_string(), 1, 1)
    );
    let off = r#"{"browser_checks":{"fetch_metadata":"off","client_hints":"off"}}"#;
    assert_eq!(judged(off, true, CHROME, &[]), ("human".to_string(), 0, 0));
}

#[test]
fn an_unknown_check_or_mode_is_refused_with_its_path() {
    let err = |doc: &str| {
        crawlguard_core::config::parse(doc.as_bytes())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        err(r#"{"browser_checks":{"ja4":"enforce"}}"#),
        Err(
            "browser_checks.ja4: unknown check (the catalog has fetch_metadata, client_hints, \
             tls_fingerprint, http_version, network)"
                .to_string()
        )
    );
    let bad_mode = err(r#"{"browser_checks":{"client_hints":"on"}}"#).unwrap_err();
    assert!(
        bad_mode.starts_with("browser_checks.client_hints: unknown variant `on`"),
        "{bad_mode}"
    );
    assert_eq!(
        err(r#"{"browser_checks":{"client_hints":"off","client_hints":"off"}}"#),
        Err(
            "browser_checks.client_hints: duplicate key \"client_hints\" at line 1 column 54"
                .to_string()
        )
    );
}

#[test]
fn a_suspect_browser_gets_its_class_limits_a_person_keeps_human_quota() {
    // Defaults: suspect_browser_per_ip has a burst of 40; human_per_ip 100.
    let mut p = FakeProxy::new("", T0);
    p.tls = true;
    let scraper = |p: &mut FakeProxy| {
        let (ctx, _) = p.request(&[(":path", "/"), ("user-agent", CHROME)], "192.0.2.7:4000");
        let status = p.reply_status(ctx);
        // One request after the other (its per-address max_in_flight, 8, is not what this
        // is about).
        p.hang_up(ctx);
        status
    };
    let refused = (0..60).filter(|_| scraper(&mut p) == Some(429)).count();
    assert_eq!(refused, 20);
    let person = (0..60)
        .filter(|_| {
            let (ctx, _) = p.request(
                &[(":path", "/"), ("user-agent", CHROME), FETCH, HINTS],
                "192.0.2.8:4000",
            );
            p.reply_status(ctx).is_none()
        })
        .count();
    assert_eq!(person, 60);
    p.tick();
    assert_eq!(p.counter("crawlguard.class.suspect_browser.allowed"), 40);
    assert_eq!(p.counter("crawlguard.class.suspect_browser.limited"), 20);
    assert_eq!(p.counter("crawlguard.class.human.allowed"), 60);
}
