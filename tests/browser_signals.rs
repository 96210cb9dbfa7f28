//! The browser checks that read what Envoy tells crawlguard about the client
//! (`client_signals`), on the filter's request path with the fake host: the TLS handshake's
//! JA4 (`tls_fingerprint`), the HTTP version at a listener that offers h2 (`http_version`),
//! the client's network (`network`), and the `asn` limit key. A signal whose trusted header
//! is not configured is never read, whatever the client sends.

mod common;

use common::T0;
use crawlguard_testkit::FakeProxy;

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/131.0.0.0 Safari/537.36";
const ANDROID_CHROME: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 \
                              (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
const SAFARI: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 \
                      (KHTML, like Gecko) Version/17.1 Safari/605.1.15";
/// What a current Chrome sends to a secure origin besides its User-Agent.
const BROWSER_HEADERS: [(&str, &str); 2] = [
    ("sec-fetch-site", "none"),
    (
        "sec-ch-ua",
        "\"Chromium\";v=\"131\", \"Not_A Brand\";v=\"24\"",
    ),
];
/// Chromium's JA4 (FoxIO's ja4plus-mapping.csv).
const JA4_CHROME: &str = "t13d1516h2_8daaf6152771_02713d6af862";
/// Python's default context (FoxIO's ja4plus-mapping.csv): no ALPN, Python's ciphers.
const JA4_PYTHON: &str = "t13d181000_85036bcba153_d41ae481755e";
/// Go's crypto/tls cipher list with ALPN h2 (the `b` part FoxIO lists for GoLang).
const JA4_GO_H2: &str = "t13d1910h2_9dc949149365_aaaaaaaaaaaa";
/// Some other stack offering no ALPN.
const JA4_NO_ALPN: &str = "t13d100900_000000000000_111111111111";

/// Every signal configured: JA4 in `x-ja4`, ASN in `x-asn`, a listener that offers h2.
const ALL: &str = r#"{"client_signals": {"ja4_header": "x-ja4", "asn_header": "x-asn",
    "listener_offers_h2": true}}"#;

struct Seen {
    class: String,
    /// `crawlguard.browser_check.<id>.inconsistent` of tls_fingerprint, http_version,
    /// network.
    failed: [u64; 3],
}

/// One request of `ua` over TLS with the browser's headers plus `extra`, on protocol
/// `proto`: its class and the three signal checks' counters.
fn judged(cfg: &str, proto: &str, ua: &str, extra: &[(&str, &str)]) -> Seen {
    let mut p = FakeProxy::new(cfg, T0);
    p.tls = true;
    p.protocol = Some(proto.to_string());
    let mut headers = vec![(":path", "/page"), ("user-agent", ua)];
    headers.extend_from_slice(&BROWSER_HEADERS);
    headers.extend_from_slice(extra);
    let (ctx, _) = p.request(&headers, "192.0.2.1:4000");
    p.tick();
    let c = |id: &str| p.counter(&format!("crawlguard.browser_check.{id}.inconsistent"));
    Seen {
        class: p.class_of(ctx).unwrap_or_default(),
        failed: [c("tls_fingerprint"), c("http_version"), c("network")],
    }
}

fn class(s: Seen) -> String {
    s.class
}

#[test]
fn a_browser_user_agent_over_a_library_handshake_is_a_suspect_browser() {
    let h2 = "HTTP/2";
    let s = judged(ALL, h2, CHROME, &[("x-ja4", JA4_CHROME)]);
    assert_eq!((s.class.as_str(), s.failed), ("human", [0, 0, 0]));
    for ja4 in [JA4_PYTHON, JA4_GO_H2, JA4_NO_ALPN] {
        let s = judged(ALL, h2, CHROME, &[("x-ja4", ja4)]);
        assert_eq!(
            (s.class.as_str(), s.failed),
            ("suspect_browser", [1, 0, 0]),
            "{ja4}"
        );
    }
    assert_eq!(
        class(judged(ALL, h2, FIREFOX, &[("x-ja4", JA4_GO_H2)])),
        "suspect_browser"
    );
    // Safari is not checked (its Version/ token is copied by other WebKit clients).
    assert_eq!(
        class(judged(ALL, h2, SAFARI, &[("x-ja4", JA4_PYTHON)])),
        "human"
    );
    // No fingerprint, or Envoy's "-" for a connection without TLS: nothing to judge.
    assert_eq!(class(judged(ALL, h2, CHROME, &[])), "human");
    assert_eq!(class(judged(ALL, h2, CHROME, &[("x-ja4", "-")])), "human");
    // Not configured: the header is never read, whatever the client sends.
    assert_eq!(
        class(judged("", h2, CHROME, &[("x-ja4", JA4_PYTHON)])),
        "human"
    );
}

#[test]
fn http_1_to_a_listener_offering_h2_is_not_a_desktop_browser() {
    let s = judged(ALL, "HTTP/1.1", CHROME, &[]);
    assert_eq!((s.class.as_str(), s.failed), ("suspect_browser", [0, 1, 0]));
    assert_eq!(
        class(judged(ALL, "HTTP/1.1", FIREFOX, &[])),
        "suspect_browser"
    );
    assert_eq!(class(judged(ALL, "HTTP/2", CHROME, &[])), "human");
    assert_eq!(class(judged(ALL, "HTTP/3", CHROME, &[])), "human");
    // A WebSocket handshake is HTTP/1.1 in every browser (RFC 6455); another upgrade is not
    // excused.
    for upgrade in ["websocket", "WebSocket"] {
        let s = judged(ALL, "HTTP/1.1", CHROME, &[("upgrade", upgrade)]);
        assert_eq!(
            (s.class.as_str(), s.failed),
            ("human", [0, 0, 0]),
            "{upgrade}"
        );
    }
    assert_eq!(
        class(judged(ALL, "HTTP/1.1", CHROME, &[("upgrade", "h2c")])),
        "suspect_browser"
    );
    // Mobile browsers are excused; a listener without h2 never fails it.
    assert_eq!(class(judged(ALL, "HTTP/1.1", ANDROID_CHROME, &[])), "human");
    let h1_listener = r#"{"client_signals": {"listener_offers_h2": false}}"#;
    assert_eq!(class(judged(h1_listener, "HTTP/1.1", CHROME, &[])), "human");
    // Over plain HTTP no browser speaks h2 (no ALPN without TLS).
    let mut p = FakeProxy::new(ALL, T0);
    p.protocol = Some("HTTP/1.1".into());
    let (ctx, _) = p.get("/", CHROME, "192.0.2.1:4000");
    assert_eq!(p.class_of(ctx).as_deref(), Some("human"));
}

#[test]
fn a_browser_user_agent_from_a_datacenter_network_is_a_suspect_browser() {
    let h2 = "HTTP/2";
    // AS16509 is Amazon's (the catalog's datacenter_asns); AS7922 an access network.
    for asn in ["16509", "AS16509", " as396982 "] {
        let s = judged(ALL, h2, CHROME, &[("x-asn", asn)]);
        assert_eq!(
            (s.class.as_str(), s.failed),
            ("suspect_browser", [0, 0, 1]),
            "{asn}"
        );
    }
    // Every human User-Agent, whatever its browser.
    assert_eq!(
        class(judged(ALL, h2, SAFARI, &[("x-asn", "16509")])),
        "suspect_browser"
    );
    for asn in ["7922", "", "-", "AMAZON-02", "99999999999"] {
        assert_eq!(
            class(judged(ALL, h2, CHROME, &[("x-asn", asn)])),
            "human",
            "{asn}"
        );
    }
    // The operator's own list: networks added, networks taken out.
    let own = r#"{"client_signals": {"asn_header": "x-asn", "datacenter_asns": [7922],
        "not_datacenter_asns": [16509]}}"#;
    assert_eq!(
        class(judged(own, h2, CHROME, &[("x-asn", "7922")])),
        "suspect_browser"
    );
    assert_eq!(
        class(judged(own, h2, CHROME, &[("x-asn", "16509")])),
        "human"
    );
    // Not configured: never read.
    assert_eq!(
        class(judged("", h2, CHROME, &[("x-asn", "16509")])),
        "human"
    );
    // Only browser claims are judged: a script from a cloud is a script.
    let mut p = FakeProxy::new(ALL, T0);
    let (ctx, _) = p.request(
        &[
            (":path", "/"),
            ("user-agent", "curl/8.5.0"),
            ("x-asn", "16509"),
        ],
        "192.0.2.1:4000",
    );
    assert_eq!(p.class_of(ctx).as_deref(), Some("script"));
}

#[test]
fn shadow_counts_off_reads_nothing() {
    let shadow = r#"{"client_signals": {"ja4_header": "x-ja4", "asn_header": "x-asn",
        "listener_offers_h2": true}, "browser_checks": {"tls_fingerprint": "shadow",
        "http_version": "shadow", "network": "shadow"}}"#;
    let s = judged(
        shadow,
        "HTTP/1.1",
        CHROME,
        &[("x-ja4", JA4_PYTHON), ("x-asn", "16509")],
    );
    assert_eq!((s.class.as_str(), s.failed), ("human", [1, 1, 1]));
    let off = r#"{"client_signals": {"ja4_header": "x-ja4", "asn_header": "x-asn",
        "listener_offers_h2": true}, "browser_checks": {"fetch_metadata": "off",
        "client_hints": "off", "tls_fingerprint": "off", "http_version": "off",
        "network": "off"}}"#;
    let mut p = FakeProxy::new(off, T0);
    p.tls = true;
    p.protocol = Some("HTTP/1.1".into());
    let (ctx, _) = p.request(
        &[
            (":path", "/"),
            ("user-agent", CHROME),
            ("x-ja4", JA4_PYTHON),
            ("x-asn", "16509"),
        ],
        "192.0.2.1:4000",
    );
    assert_eq!(p.class_of(ctx).as_deref(), Some("human"));
    // Every check off: no signal is read (the headers come in the one read of them all).
    assert_eq!(
        p.host.host_calls,
        [
            "get request headers",
            "get property source.address",
            "now",
            "replace request header x-crawler-class",
        ]
    );
}

/// The headers (fetch metadata, client hints, JA4, ASN) come in the module's one read of
/// every request header; the HTTP version is one property read, the TLS attribute is read
/// only when HTTP/1.x would otherwise fail a check.
#[test]
fn a_consistent_browser_costs_one_property_read_beyond_its_headers() {
    let mut p = FakeProxy::new(ALL, T0);
    p.tls = true;
    p.protocol = Some("HTTP/2".into());
    let mut headers = vec![(":path", "/"), ("user-agent", CHROME)];
    headers.extend_from_slice(&BROWSER_HEADERS);
    headers.extend_from_slice(&[("x-ja4", JA4_CHROME), ("x-asn", "7922")]);
    let (ctx, _) = p.request(&headers, "192.0.2.1:4000");
    assert_eq!(p.class_of(ctx).as_deref(), Some("human"));
    assert_eq!(
        p.host.host_calls,
        [
            "get request headers",
            "get property source.address",
            "get property request.protocol",
            "now",
            "replace request header x-crawler-class",
        ]
    );
}

#[test]
fn the_asn_key_is_one_bucket_per_network() {
    let cfg = r#"{"client_signals": {"asn_header": "x-asn"}, "limits": [
        {"name": "per_network", "class": "*", "route": "*", "rate_per_s": 0.001,
         "burst": 3, "key": "asn"}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    let send = |p: &mut FakeProxy, asn: Option<&str>, addr: &str| {
        let mut h = vec![(":path", "/"), ("user-agent", "curl/8.5.0")];
        if let Some(a) = asn {
            h.push(("x-asn", a));
        }
        let (ctx, _) = p.request(&h, addr);
        p.reply_status(ctx).unwrap_or(200)
    };
    // Four addresses of AS7922 share one bucket of 3.
    let got: Vec<u16> = (1..=4)
        .map(|i| send(&mut p, Some("7922"), &format!("198.51.100.{i}:4000")))
        .collect();
    assert_eq!(got, [200, 200, 200, 429]);
    // Another network has its own; "AS7922" is the same network; unknown ones are free.
    assert_eq!(send(&mut p, Some("16509"), "198.51.100.9:4000"), 200);
    assert_eq!(send(&mut p, Some("AS7922"), "203.0.113.1:4000"), 429);
    for _ in 0..5 {
        assert_eq!(send(&mut p, None, "203.0.113.2:4000"), 200);
        assert_eq!(send(&mut p, Some("garbage"), "203.0.113.3:4000"), 200);
    }
    // Without an asn_header the key charges nothing.
    let unset = cfg.replace(r#""client_signals": {"asn_header": "x-asn"}, "#, "");
    let mut p = FakeProxy::new(&unset, T0);
    for _ in 0..5 {
        assert_eq!(send(&mut p, Some("7922"), "198.51.100.1:4000"), 200);
    }
}

#[test]
fn signal_settings_are_validated_with_their_paths() {
    let err = |doc: &str| {
        crawlguard_core::config::parse(doc.as_bytes())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let cases = [
        (
            r#"{"client_signals": {"asn_header": "x-crawler-class"}}"#,
            "client_signals.asn_header: is the class_header, which crawlguard itself sets",
        ),
        (
            r#"{"client_signals": {"ja4_header": "user-agent"}}"#,
            "client_signals.ja4_header: \"user-agent\" is reserved",
        ),
        (
            r#"{"client_signals": {"ja4_header": "x a"}}"#,
            "client_signals.ja4_header: \"x a\" is not a valid header name",
        ),
        (
            r#"{"client_signals": {"ja4_header": "x-sig", "asn_header": "X-Sig"}}"#,
            "client_signals.asn_header: is the ja4_header: one header cannot carry both",
        ),
        (
            r#"{"client_signals": {"datacenter_asns": [16509, 64512]}}"#,
            "client_signals.datacenter_asns[1]: 64512 is not a public AS number",
        ),
        (
            r#"{"client_signals": {"not_datacenter_asns": [0]}}"#,
            "client_signals.not_datacenter_asns[0]: 0 is not a public AS number",
        ),
    ];
    for (doc, want) in cases {
        assert_eq!(err(doc), Err(want.to_string()), "{doc}");
    }
    let unknown = err(r#"{"client_signals": {"ja3_header": "x"}}"#).unwrap_err();
    assert!(
        unknown.starts_with("client_signals.ja3_header: unknown field `ja3_header`"),
        "{unknown}"
    );
}

/// Hostile review 2 (4088e71, `tls_fingerprint` judged over plain HTTP too): a real browser
/// over plain HTTP to Envoy sends no `sec-fetch-site` nor `sec-ch-ua`, and Envoy's header
/// mutation gives no fingerprint there (`%TLS_JA4_FINGERPRINT%` empty, so no header, or a
/// `-`): still `human`, for every checked User-Agent. Where the mutation was forgotten, a
/// client's own JA4 header makes only its own request `suspect_browser`.
#[test]
fn over_plain_http_a_browser_without_a_fingerprint_is_human() {
    let plain = |ua: &str, extra: &[(&str, &str)]| {
        let mut p = FakeProxy::new(ALL, T0);
        p.tls = false;
        p.protocol = Some("HTTP/1.1".to_string());
        let mut headers = vec![(":path", "/page"), ("user-agent", ua)];
        headers.extend_from_slice(extra);
        let (ctx, _) = p.request(&headers, "192.0.2.1:4000");
        let (other, _) = p.request(&[(":path", "/page"), ("user-agent", ua)], "192.0.2.1:4001");
        (
            p.class_of(ctx).unwrap_or_default(),
            p.class_of(other).unwrap_or_default(),
        )
    };
    let mut cases = 0;
    for ua in [CHROME, ANDROID_CHROME, FIREFOX] {
        for extra in [&[][..], &[("x-ja4", "-")], &[("x-ja4", "")]] {
            cases += 1;
            assert_eq!(
                plain(ua, extra),
                ("human".into(), "human".into()),
                "{ua} {extra:?}"
            );
        }
        cases += 1;
        assert_eq!(
            plain(ua, &[("x-ja4", JA4_PYTHON)]),
            ("suspect_browser".into(), "human".into()),
            "{ua}"
        );
    }
    assert_eq!(cases, 12);
}
