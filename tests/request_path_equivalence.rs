//! The request path's speed-ups (one pass over the User-Agent's slashes for the browser
//! versions, the excuses searched for only after a signal failed, the downstream address
//! read only when `x-forwarded-for` does not give the client) checked against the plain
//! implementations they replaced: a substring search per token, the excuses first, and
//! `client_ip` over both addresses.

mod common;

use common::{pt_config, T0};
use crawlguard_core::config::{parse, parse_asn, BrowserCheckMode, Config, IpSource};
use crawlguard_core::host::Host;
use crawlguard_core::identity::browser_checks::{judge, BrowserJudgement};
use crawlguard_core::identity::catalog::{
    browser_tokens, browser_versions, builtin_browser_checks, Signal, MAX_BROWSER_TOKENS,
};
use crawlguard_core::identity::client_ip::{from_xff, parse_addr};
use crawlguard_core::request::Facts;
use crawlguard_testkit::{FakeHost, FakeProxy, FakeRequest};
use proptest::prelude::*;
use std::net::IpAddr;
use std::path::Path;

// ---- browser versions -------------------------------------------------------------------

/// The reference: a substring search per token (ASCII case ignored), the leading digits
/// (at most 6) after its first match.
fn naive_versions(ua: &[u8]) -> [Option<u32>; MAX_BROWSER_TOKENS] {
    let mut out = [None; MAX_BROWSER_TOKENS];
    for (slot, t) in out.iter_mut().zip(browser_tokens()) {
        let t = t.as_bytes();
        let at = if t.is_empty() {
            Some(0)
        } else {
            ua.windows(t.len())
                .position(|w| w.eq_ignore_ascii_case(t))
                .map(|p| p + t.len())
        };
        *slot = at.and_then(|end| {
            let digits: Vec<u8> = ua
                .get(end..)
                .unwrap_or_default()
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .take(6)
                .copied()
                .collect();
            (!digits.is_empty()).then(|| {
                digits
                    .iter()
                    .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'))
            })
        });
    }
    out
}

/// User-Agent pieces that make the tokens, their near misses and slashes likely.
fn ua_piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"chrome/".to_vec()),
        Just(b"CHROME/".to_vec()),
        Just(b"Chrome/".to_vec()),
        Just(b"firefox/".to_vec()),
        Just(b"FireFox/".to_vec()),
        Just(b"hrome/".to_vec()),
        Just(b"chrome".to_vec()),
        Just(b"c".to_vec()),
        Just(b"/".to_vec()),
        Just(b"//".to_vec()),
        Just(b" ".to_vec()),
        Just(b"; wv)".to_vec()),
        Just(b"SamsungBrowser/".to_vec()),
        Just(b"Mobile".to_vec()),
        Just(b"\xff\xfe".to_vec()),
        "[0-9]{1,9}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..6),
    ]
}

fn ua_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(ua_piece(), 0..14).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 5_000, ..pt_config(1) })]

    #[test]
    fn browser_versions_equal_a_substring_search_per_token(ua in ua_bytes()) {
        prop_assert_eq!(browser_versions(&ua), naive_versions(&ua));
    }

    #[test]
    fn browser_versions_equal_a_substring_search_on_any_bytes(
        ua in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        prop_assert_eq!(browser_versions(&ua), naive_versions(&ua));
    }
}

/// Every line of the real User-Agent corpora (a superset of their User-Agents: a line that
/// is no User-Agent is input too). Returns how many lines were compared.
#[test]
fn browser_versions_equal_a_substring_search_on_real_corpora() {
    let roots = [
        ".cache/ua-corpora/device-detector",
        ".cache/ua-corpora/fake-useragent",
        "../shared/data/uap-core",
        "../shared/data/crawler-user-agents",
        "../shared/data/elastic-apache-logs",
    ];
    let mut n = 0usize;
    let mut files = Vec::new();
    for r in roots {
        collect_files(Path::new(r), &mut files);
    }
    for f in &files {
        let Ok(bytes) = std::fs::read(f) else {
            continue;
        };
        for line in bytes.split(|b| *b == b'\n') {
            assert_eq!(
                browser_versions(line),
                naive_versions(line),
                "{}: {}",
                f.display(),
                String::from_utf8_lossy(line)
            );
            n += 1;
        }
    }
    eprintln!("{n} lines of {} files", files.len());
    assert!(n > 40_000, "corpora missing: {n} lines");
}

fn collect_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_files(&p, out);
        } else if p.metadata().is_ok_and(|m| m.len() < 64 << 20) {
            out.push(p);
        }
    }
}

#[test]
fn browser_versions_of_hostile_user_agents_never_panic() {
    let mb = 1 << 20;
    let cases: Vec<Vec<u8>> = vec![
        vec![b'/'; mb],
        b"chrome/".repeat(mb / 7),
        b"Chrome/9".repeat(mb / 8),
        [&b"x".repeat(mb)[..], b"firefox/"].concat(),
        [&b"firefox/"[..], &b"9".repeat(mb)].concat(),
        b"/chrome".repeat(mb / 7),
        vec![0xff; mb],
        b"chrome/120".to_vec(),
        b"/".to_vec(),
        b"e/".to_vec(),
    ];
    for ua in cases {
        assert_eq!(browser_versions(&ua), naive_versions(&ua), "{}", ua.len());
    }
    assert_eq!(
        browser_versions(&[&b"firefox/"[..], &b"9".repeat(mb)].concat())[1],
        Some(999_999)
    );
}

// ---- judge ------------------------------------------------------------------------------

/// The request's signals, each read at most once (as the module reads them).
struct Signals<'h> {
    host: &'h mut dyn Host,
    tls: Option<bool>,
    asn: Option<Option<u32>>,
}

impl Signals<'_> {
    fn tls(&mut self) -> bool {
        *self.tls.get_or_insert_with(|| self.host.downstream_tls())
    }
    fn asn(&mut self, header: &str) -> Option<u32> {
        *self
            .asn
            .get_or_insert_with(|| self.host.request_header(header).and_then(|v| parse_asn(&v)))
    }
}

/// `judge` as of e6a2f65^ (the excuses searched for before the signal is read), with the
/// substring-search versions. The one change since, the TLS fingerprint judged whatever the
/// connection, reaches both through the catalog's data (`tls_fingerprint` is not
/// `secure_only`).
fn judge_before(cfg: &Config, host: &mut dyn Host, ua: &[u8]) -> BrowserJudgement {
    let mut out = BrowserJudgement::default();
    let checks = builtin_browser_checks();
    if (0..checks.len()).all(|i| cfg.browser_checks.mode(i) == BrowserCheckMode::Off) {
        return out;
    }
    let versions = naive_versions(ua);
    let mut s = Signals {
        host,
        tls: None,
        asn: None,
    };
    for (i, check) in checks.iter().enumerate() {
        let mode = cfg.browser_checks.mode(i);
        if mode == BrowserCheckMode::Off
            || (check.secure_only && s.tls == Some(false))
            || !check.applies_to(ua, &versions)
        {
            continue;
        }
        if consistent_before(cfg, check.signal, check.header, check.secure_only, &mut s) {
            continue;
        }
        out.failed |= 1u32
            .checked_shl(u32::try_from(i).unwrap_or(u32::MAX))
            .unwrap_or(0);
        out.suspect |= mode == BrowserCheckMode::Enforce;
    }
    out.asn = s.asn;
    out
}

fn consistent_before(
    cfg: &Config,
    signal: Signal,
    header: &str,
    secure_only: bool,
    s: &mut Signals<'_>,
) -> bool {
    let cs = &cfg.client_signals;
    match signal {
        Signal::Header => s.host.request_header(header).is_some() || (secure_only && !s.tls()),
        Signal::TlsFingerprint => match &cs.ja4_header {
            None => true,
            Some(h) => match s.host.request_header(h) {
                None => true,
                Some(ja4) => !cs.is_library_handshake(&ja4),
            },
        },
        Signal::HttpVersion => {
            !cs.listener_offers_h2
                || s.host
                    .request_protocol()
                    .is_none_or(|p| !p.starts_with(b"HTTP/1"))
                || !s.tls()
                || s.host
                    .request_header("upgrade")
                    .is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
        }
        Signal::Network => match &cs.asn_header {
            None => true,
            Some(h) => s.asn(h).is_none_or(|asn| !cs.is_datacenter(asn)),
        },
    }
}

const UAS: [&str; 7] = [
    // Chrome, Firefox, an Android WebView, Samsung Internet, mobile Chrome, Safari, curl.
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Linux; Android 13; Pixel 7; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/131.0.6778.39 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/25.0 Chrome/121.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "curl/8.5.0",
];

/// One request's inputs to the checks.
#[derive(Debug, Clone)]
struct Case {
    modes: [u8; 5],
    ja4: bool,
    asn: bool,
    h2: bool,
    ua: Vec<u8>,
    tls: bool,
    protocol: Option<&'static str>,
    headers: Vec<(&'static str, &'static str)>,
}

fn case() -> impl Strategy<Value = Case> {
    let ua = prop_oneof![
        4 => proptest::sample::select(UAS.to_vec()).prop_map(|s| s.as_bytes().to_vec()),
        1 => ua_bytes(),
    ];
    let header = proptest::sample::select(vec![
        ("sec-fetch-site", "none"),
        ("sec-ch-ua", "\"Chromium\";v=\"131\""),
        ("x-ja4", "t13d1516h2_8daaf6152771_02713d6af862"),
        ("x-ja4", "t13d181000_85036bcba153_d41ae481755e"),
        ("x-ja4", "-"),
        ("x-asn", "16509"),
        ("x-asn", "7922"),
        ("x-asn", "garbage"),
        ("upgrade", "websocket"),
    ]);
    (
        [0u8..3, 0u8..3, 0u8..3, 0u8..3, 0u8..3],
        any::<(bool, bool, bool, bool)>(),
        ua,
        proptest::option::of(proptest::sample::select(vec!["HTTP/1.1", "HTTP/2"])),
        proptest::collection::vec(header, 0..6),
    )
        .prop_map(|(modes, (ja4, asn, h2, tls), ua, protocol, headers)| Case {
            modes,
            ja4,
            asn,
            h2,
            ua,
            tls,
            protocol,
            headers,
        })
}

/// The case's configuration, parsed once per distinct one (3^5 modes x 8 signal settings).
fn config_of(c: &Case) -> &'static Config {
    type Key = ([u8; 5], bool, bool, bool);
    static CONFIGS: std::sync::Mutex<Vec<(Key, &'static Config)>> =
        std::sync::Mutex::new(Vec::new());
    let key = (c.modes, c.ja4, c.asn, c.h2);
    let mut all = CONFIGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, cfg)) = all.iter().find(|(k, _)| *k == key) {
        return cfg;
    }
    let cfg: &'static Config = Box::leak(Box::new(parse_config_of(c)));
    all.push((key, cfg));
    cfg
}

fn parse_config_of(c: &Case) -> Config {
    let names = ["off", "shadow", "enforce"];
    let ids: Vec<&str> = builtin_browser_checks().iter().map(|c| c.id).collect();
    let modes: Vec<String> = ids
        .iter()
        .zip(c.modes)
        .map(|(id, m)| format!("\"{id}\":\"{}\"", names[usize::from(m)]))
        .collect();
    let mut signals = vec![format!("\"listener_offers_h2\":{}", c.h2)];
    if c.ja4 {
        signals.push("\"ja4_header\":\"x-ja4\"".into());
    }
    if c.asn {
        signals.push("\"asn_header\":\"x-asn\"".into());
    }
    let json = format!(
        "{{\"browser_checks\":{{{}}},\"client_signals\":{{{}}}}}",
        modes.join(","),
        signals.join(",")
    );
    match parse(json.as_bytes()) {
        Ok(cfg) => cfg,
        Err(e) => panic!("{json}: {e}"),
    }
}

fn host_of(c: &Case) -> FakeHost {
    let mut host = FakeHost::default();
    let mut headers = vec![("user-agent".to_string(), c.ua.clone())];
    headers.extend(
        c.headers
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.as_bytes().to_vec())),
    );
    host.requests.insert(
        1,
        FakeRequest {
            request_headers: headers,
            tls: c.tls,
            protocol: c.protocol.map(str::to_string),
            ..FakeRequest::default()
        },
    );
    host.current = 1;
    host
}

proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 20_000, ..pt_config(1) })]

    /// The class, the failed checks and the network read are what the module decided
    /// before the excuses moved after the signals.
    #[test]
    fn judge_decides_as_before(c in case()) {
        let cfg = config_of(&c);
        let before = judge_before(cfg, &mut host_of(&c), &c.ua);
        let now = judge(cfg, &mut host_of(&c), &c.ua);
        prop_assert_eq!(now, before, "{:?}", c);
    }
}

/// Where TLS ends at a CDN (README, Browser checks: `"ja4_header": "cf-ja4"`), Envoy's own
/// connection is plain HTTP: an HTTP library with a copied Android WebView User-Agent was
/// a `suspect_browser` by its handshake before e6a2f65, but the excused checks then read
/// the connection's TLS first, and a plain connection skipped `tls_fingerprint`; a copied
/// desktop Chrome User-Agent without `sec-ch-ua` skipped it before e6a2f65 already.
#[test]
fn behind_a_cdn_a_browser_user_agent_over_a_library_handshake_is_a_suspect_browser() {
    const CHROME: &str = UAS[0];
    const WEBVIEW: &str = UAS[2];
    const SAMSUNG: &str = UAS[3];
    const PYTHON: &str = "t13d181000_85036bcba153_d41ae481755e";
    for ua in [CHROME, WEBVIEW, SAMSUNG] {
        let mut p = FakeProxy::new(r#"{"client_signals":{"ja4_header":"cf-ja4"}}"#, T0);
        p.tls = false;
        let (ctx, _) = p.request(
            &[
                (":path", "/page"),
                ("user-agent", ua),
                ("sec-fetch-site", "none"),
                ("cf-ja4", PYTHON),
            ],
            "192.0.2.1:4000",
        );
        p.tick();
        assert_eq!(p.class_of(ctx).as_deref(), Some("suspect_browser"), "{ua}");
        assert_eq!(
            p.counter("crawlguard.browser_check.tls_fingerprint.inconsistent"),
            1,
            "{ua}"
        );
    }
}

// ---- client address ---------------------------------------------------------------------

/// `client_ip::client_ip` as of 25642bb^: the XFF entry when configured and present, else
/// the downstream address.
fn client_ip_before(
    source: IpSource,
    hops: u32,
    remote: Option<&[u8]>,
    xff: Option<&[u8]>,
) -> Option<IpAddr> {
    if source == IpSource::Xff {
        if let Some(ip) = xff.and_then(|x| from_xff(x, hops)) {
            return Some(ip);
        }
    }
    remote.and_then(parse_addr)
}

fn xff_entry() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(" ".to_string()),
        Just("unknown".to_string()),
        Just("_hidden".to_string()),
        Just("\"[2001:db8::1]:443\"".to_string()),
        Just("fe80::1%eth0".to_string()),
        Just("[fe80::1%25eth0]:80".to_string()),
        Just("::ffff:192.0.2.1".to_string()),
        Just("[::1".to_string()),
        Just("1.2.3.4.5".to_string()),
        Just("9".repeat(70)),
        any::<[u8; 4]>().prop_map(|a| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])),
        any::<[u8; 4]>().prop_map(|a| format!(" {}.{}.{}.{}:{} ", a[0], a[1], a[2], a[3], a[0])),
        any::<u128>().prop_map(|a| std::net::Ipv6Addr::from(a).to_string()),
        "[ -~]{0,12}",
    ]
}

fn xff_line() -> impl Strategy<Value = String> {
    proptest::collection::vec(xff_entry(), 0..6).prop_map(|v| v.join(","))
}

/// The configuration with `client_ip.source` xff (or `remote_address`) and
/// `xff_trusted_hops` 1 to 4, parsed once.
fn ip_config(xff: bool, hops: u32) -> &'static Config {
    static CONFIGS: std::sync::OnceLock<Vec<Config>> = std::sync::OnceLock::new();
    let all = CONFIGS.get_or_init(|| {
        let mut out = Vec::new();
        for source in ["remote_address", "xff"] {
            for hops in 1..5 {
                let json =
                    format!(r#"{{"client_ip":{{"source":"{source}","xff_trusted_hops":{hops}}}}}"#);
                match parse(json.as_bytes()) {
                    Ok(c) => out.push(c),
                    Err(e) => panic!("{json}: {e}"),
                }
            }
        }
        out
    });
    let i = usize::from(xff) * 4 + usize::try_from(hops - 1).unwrap_or(0);
    &all[i]
}

proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 20_000, ..pt_config(1) })]

    /// The client address (and its prefix) is what `client_ip` made of both addresses, and
    /// the downstream address is read exactly when the forwarded one does not decide.
    #[test]
    fn the_client_address_is_as_before(
        xff_source in any::<bool>(),
        hops in 0u32..5,
        lines in proptest::collection::vec(xff_line(), 0..3),
        remote in proptest::option::of(prop_oneof![
            Just("192.0.2.9:4000".to_string()),
            Just("[2001:db8::9]:443".to_string()),
            Just("garbage".to_string()),
            xff_entry(),
        ]),
    ) {
        let source = if xff_source { IpSource::Xff } else { IpSource::RemoteAddress };
        let cfg = ip_config(xff_source, hops.max(1));
        prop_assert_eq!(cfg.client_ip.source, source);
        let mut host = FakeHost::default();
        let mut headers = vec![(":path".to_string(), b"/".to_vec())];
        headers.extend(lines.iter().map(|l| ("x-forwarded-for".to_string(), l.clone().into_bytes())));
        host.requests.insert(1, FakeRequest {
            request_headers: headers,
            downstream: remote.clone().map(String::into_bytes),
            ..FakeRequest::default()
        });
        host.current = 1;
        let facts = Facts::read(cfg, &mut host);
        // The module reads the first line (`Host::request_header`).
        let xff = xff_source.then(|| lines.first().map(|l| l.as_bytes())).flatten();
        let remote_b = remote.as_deref().map(str::as_bytes);
        let want = client_ip_before(source, hops.max(1), remote_b, xff);
        prop_assert_eq!(facts.client_ip, want);
        let from_forwarded = xff_source && xff.and_then(|x| from_xff(x, hops.max(1))).is_some();
        let read_remote = host.host_calls.iter().any(|c| c == "get property source.address");
        prop_assert_eq!(read_remote, !from_forwarded, "{:?}", host.host_calls);
    }
}
