//! Every log format's parser on real lines (from the repository's real access log, Envoy's
//! and Istio's documented examples, and lines written by a real Envoy with
//! `envoy/envoy.yaml`'s format) and on garbage.

mod common;

use common::APACHE_LOG;

use crawlguard_cli::logfmt::{self, Format, LogRecord, UpstreamReach};
use crawlguard_core::identity::classify::Class;

fn parse(fmt: Format, line: &str) -> Option<String> {
    let mut out = None;
    logfmt::parse(fmt, line.as_bytes(), &mut |r: &LogRecord<'_>| {
        out = Some(format!("{r:?}"))
    });
    out
}

fn with<T>(fmt: Format, line: &[u8], f: impl FnOnce(&LogRecord<'_>) -> T) -> Option<T> {
    let mut f = Some(f);
    let mut out = None;
    logfmt::parse(fmt, line, &mut |r: &LogRecord<'_>| {
        if let Some(f) = f.take() {
            out = Some(f(r));
        }
    });
    out
}

fn s(b: Option<&[u8]>) -> Option<String> {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
}

#[test]
fn combined_real_apache_lines() {
    let text = std::fs::read(APACHE_LOG).expect("the shared apache log");
    let lines: Vec<&[u8]> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 10_000);
    let first = with(Format::Combined, lines[0], |r| {
        (
            r.ts_ms,
            s(r.client),
            s(Some(r.method)),
            s(Some(r.path)),
            r.status,
            s(r.ua),
            r.upstream_ms,
            r.upstream,
        )
    })
    .expect("line 1 parses");
    assert_eq!(
        first,
        (
            1_431_857_103_000,
            Some("83.149.9.216".into()),
            Some("GET".into()),
            Some("/presentations/logstash-monitorama-2013/images/kibana-search.png".into()),
            200,
            Some(
                "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like \
                 Gecko) Chrome/32.0.1700.77 Safari/537.36"
                    .into()
            ),
            None,
            UpstreamReach::Unknown
        )
    );
    // Line 8899 is cut inside the User-Agent: not a record.
    assert_eq!(
        parse(Format::Combined, &String::from_utf8_lossy(lines[8898])),
        None
    );
    let ok = lines
        .iter()
        .filter(|l| with(Format::Combined, l, |_| ()).is_some())
        .count();
    assert_eq!(ok, 9_999);
    // None of them parses as another format.
    for fmt in [Format::Crawlguard, Format::EnvoyDefault, Format::EnvoyJson] {
        assert!(
            lines.iter().all(|l| with(fmt, l, |_| ()).is_none()),
            "{fmt:?}"
        );
    }
}

#[test]
fn combined_with_nginx_request_and_upstream_times() {
    let base = r#"203.0.113.7 - - [20/May/2015:21:05:15 +0000] "GET /a?b=1 HTTP/1.1" 429 12 "-" "curl/8.5.0""#;
    let got = |tail: &str| {
        with(Format::Combined, format!("{base}{tail}").as_bytes(), |r| {
            (r.duration_ms, r.upstream_ms, r.upstream)
        })
    };
    assert_eq!(got(""), Some((None, None, UpstreamReach::Unknown)));
    assert_eq!(
        got(" 0.005 0.004"),
        Some((Some(5), Some(4), UpstreamReach::Reached))
    );
    assert_eq!(
        got(" 0.000 -"),
        Some((Some(0), None, UpstreamReach::NotReached))
    );
    // Two upstream attempts: their times add up.
    assert_eq!(
        got(" 0.120 0.100, 0.015"),
        Some((Some(120), Some(115), UpstreamReach::Reached))
    );
    // nginx separates internal redirects' upstream times with " : ".
    assert_eq!(
        got(" 1.5 0.5 : 0.25"),
        Some((Some(1500), Some(750), UpstreamReach::Reached))
    );
    assert_eq!(got(" soon -"), None);
    // Escaped quotes inside the User-Agent (nginx writes \x22, Apache \").
    let esc = r#"198.51.100.1 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-" "a \"quoted\" agent""#;
    assert_eq!(
        with(Format::Combined, esc.as_bytes(), |r| s(r.ua)),
        Some(Some(r#"a \"quoted\" agent"#.into()))
    );
}

/// Envoy's documented example of its default format
/// (docs: configuration/observability/access_log, "Default format string").
const ENVOY_DEFAULT: &str = r#"[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80""#;

#[test]
fn envoy_default_format() {
    let r = with(Format::EnvoyDefault, ENVOY_DEFAULT.as_bytes(), |r| {
        (
            r.ts_ms,
            s(Some(r.method)),
            s(Some(r.path)),
            r.status,
            r.duration_ms,
            r.upstream_ms,
            s(r.client),
            s(r.ua),
            r.upstream,
            s(r.flags),
        )
    });
    assert_eq!(
        r,
        Some((
            1_460_751_420_310,
            Some("POST".into()),
            Some("/api/v1/locations".into()),
            204,
            Some(226),
            Some(100),
            Some("10.0.35.28".into()),
            Some("nsq2http".into()),
            UpstreamReach::Reached,
            None
        ))
    );
    // A local reply (no upstream host, no upstream time) with a response flag.
    let local = r#"[2026-11-30T05:59:00.001Z] "GET /x HTTP/1.1" 429 RL 0 18 0 - "-" "-" "id" "example.com" "-""#;
    let r = with(Format::EnvoyDefault, local.as_bytes(), |r| {
        (
            r.status,
            r.upstream,
            s(r.flags),
            r.ua.is_none(),
            r.client.is_none(),
        )
    });
    assert_eq!(
        r,
        Some((
            429,
            UpstreamReach::NotReached,
            Some("RL".into()),
            true,
            true
        ))
    );
    assert_eq!(parse(Format::EnvoyDefault, &ENVOY_DEFAULT[..120]), None);
    assert_eq!(parse(Format::Crawlguard, ENVOY_DEFAULT), None);
}

/// An Istio JSON access log line (Istio's default `json` encoding keys).
const ISTIO_JSON: &str = r#"{"authority":"productpage:9080","bytes_received":0,"bytes_sent":4294,"connection_termination_details":null,"downstream_local_address":"10.244.0.11:9080","downstream_remote_address":"10.244.0.10:53236","duration":12,"method":"GET","path":"/productpage","protocol":"HTTP/1.1","request_id":"d9b0b6a2-6d1f-9a2c-b2a4-0a6b2f0c0d11","requested_server_name":null,"response_code":200,"response_code_details":"via_upstream","response_flags":"-","route_name":"default","start_time":"2022-11-22T08:27:45.329Z","upstream_cluster":"inbound|9080||","upstream_host":"10.244.0.11:9080","upstream_local_address":"127.0.0.6:50045","upstream_service_time":"11","upstream_transport_failure_reason":null,"user_agent":"curl/7.86.0-DEV","x_forwarded_for":null}"#;

#[test]
fn envoy_json_format() {
    let r = with(Format::EnvoyJson, ISTIO_JSON.as_bytes(), |r| {
        (
            r.status,
            r.duration_ms,
            r.upstream_ms,
            s(r.client),
            s(r.ua),
            s(r.details),
            r.upstream,
            s(r.route),
            s(Some(r.path)),
        )
    });
    assert_eq!(
        r,
        Some((
            200,
            Some(12),
            Some(11),
            Some("10.244.0.10".into()),
            Some("curl/7.86.0-DEV".into()),
            Some("via_upstream".into()),
            UpstreamReach::Reached,
            Some("default".into()),
            Some("/productpage".into())
        ))
    );
    // crawlguard's own fields, typed numbers, escapes in strings.
    let cg = r#"{"start_time":"2026-11-30T05:59:00.000Z","method":"GET","path":"/p\"q","response_code":429,"response_code_details":"crawlguard_rate_limited","duration":0,"upstream_service_time":null,"user_agent":"Mozilla/5.0 (compatible; Googlebot/2.1)","downstream_remote_address":"[2001:db8::1]:443","class":"unverified_bot","limit":"\"unverified_bot_per_ip\";q=5;w=10"}"#;
    let r = with(Format::EnvoyJson, cg.as_bytes(), |r| {
        (
            s(Some(r.path)),
            r.class,
            s(r.limit),
            s(r.client),
            r.upstream,
            r.upstream_ms,
        )
    });
    assert_eq!(
        r,
        Some((
            Some("/p\"q".into()),
            Some(Class::UnverifiedBot),
            Some("unverified_bot_per_ip".into()),
            Some("2001:db8::1".into()),
            UpstreamReach::NotReached,
            None
        ))
    );
    for bad in [
        "{}",
        r#"{"start_time":"yesterday","response_code":200}"#,
        r#"{"start_time":"2026-11-30T05:59:00Z","response_code":"abc"}"#,
        "[1,2,3]",
        "{\"start_time\":",
        "",
    ] {
        assert_eq!(parse(Format::EnvoyJson, bad), None, "{bad}");
    }
}

/// Lines in the shape of `envoy/envoy.yaml`'s access log format (the agreement test in
/// integration/ parses a whole log written by a real Envoy with it).
const CRAWLGUARD_LINES: [&str; 4] = [
    r#"[2026-12-01T07:10:02.512Z] 127.1.1.1 "GET /presentations/logstash-monitorama-2013/images/kibana-search.png" 200 via_upstream class=human retry_after=- duration_ms=1 upstream_ms=0 limit=- ua="Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36""#,
    r#"[2026-12-01T07:10:05.101Z] 127.1.2.7 "GET /blog/geekery/xvfb-firefox.html" 429 crawlguard_rate_limited class=unverified_bot retry_after=7 duration_ms=0 upstream_ms=- limit="unverified_bot_per_ip";q=5;w=10 ua="Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)""#,
    r#"[2026-12-01T07:10:05.230Z] 127.1.3.9 "GET /robots.txt" 200 via_upstream class=- retry_after=- duration_ms=2 upstream_ms=1 limit=- ua="-""#,
    r#"[2026-12-01T07:10:06.000Z] 127.1.3.9 "GET /" 503 crawlguard_normalised_upstream class=human retry_after=4 duration_ms=15 upstream_ms=14 limit=- ua="odd "quoted" agent""#,
];

/// A log written by a real Envoy 1.40 with `envoy/envoy.yaml` during the agreement test
/// (integration/tests/cli_agreement.rs): Envoy's own startup lines, then access-log lines.
const REAL_ENVOY_LOG: &str = include_str!("data/envoy-crawlguard.log");

#[test]
fn crawlguard_format_real_envoy_lines() {
    let (mut access, mut other) = (0, 0);
    for l in REAL_ENVOY_LOG.lines() {
        let parsed = with(Format::Crawlguard, l.as_bytes(), |_| ()).is_some();
        if l.contains(" ua=\"") {
            assert!(parsed, "{l}");
            access += 1;
        } else {
            assert!(!parsed, "{l}");
            other += 1;
        }
    }
    assert_eq!((access, other), (40, 8));
    let first = REAL_ENVOY_LOG
        .lines()
        .find(|l| l.contains(" ua=\""))
        .expect("an access line");
    assert_eq!(
        with(Format::Crawlguard, first.as_bytes(), |r| (
            r.ts_ms,
            s(r.client),
            s(Some(r.path)),
            r.status,
            s(r.details),
            r.class,
            r.duration_ms,
            r.upstream_ms,
            r.upstream,
            r.limit.is_none()
        )),
        Some((
            1_796_108_735_208,
            Some("127.1.1.1".into()),
            Some("/presentations/logstash-monitorama-2013/images/kibana-search.png".into()),
            200,
            Some("via_upstream".into()),
            Some(Class::Human),
            Some(1),
            Some(0),
            UpstreamReach::Reached,
            true
        ))
    );
    let rejected = REAL_ENVOY_LOG
        .lines()
        .find(|l| l.contains(" 429 crawlguard_rate_limited "))
        .expect("a rejection");
    assert_eq!(
        with(Format::Crawlguard, rejected.as_bytes(), |r| (
            r.class,
            r.upstream_ms,
            r.upstream
        )),
        Some((Some(Class::UnverifiedBot), None, UpstreamReach::NotReached))
    );
    // The whole file is detected as crawlguard's format.
    assert_eq!(
        logfmt::detect(REAL_ENVOY_LOG.lines().map(str::as_bytes)),
        Some(Format::Crawlguard)
    );
}

#[test]
fn crawlguard_format() {
    let got: Vec<_> = CRAWLGUARD_LINES
        .iter()
        .map(|l| {
            with(Format::Crawlguard, l.as_bytes(), |r| {
                (
                    r.status,
                    r.class,
                    s(r.details),
                    r.duration_ms,
                    r.upstream_ms,
                    r.upstream,
                    s(r.limit),
                    s(r.ua).map(|u| u.len()),
                    s(r.client),
                )
            })
        })
        .collect();
    assert_eq!(
        got[1],
        Some((
            429,
            Some(Class::UnverifiedBot),
            Some("crawlguard_rate_limited".into()),
            Some(0),
            None,
            UpstreamReach::NotReached,
            Some("unverified_bot_per_ip".into()),
            Some(72),
            Some("127.1.2.7".into())
        ))
    );
    let g0 = got[0].clone().expect("line 0");
    assert_eq!(
        (g0.0, g0.1, g0.3, g0.4, g0.5),
        (
            200,
            Some(Class::Human),
            Some(1),
            Some(0),
            UpstreamReach::Reached
        )
    );
    let g2 = got[2].clone().expect("line 2");
    assert_eq!((g2.1, g2.7), (None, None), "class - and ua - are absent");
    let g3 = got[3].clone().expect("line 3");
    assert_eq!((g3.0, g3.5), (503, UpstreamReach::Reached));
    assert_eq!(
        with(Format::Crawlguard, CRAWLGUARD_LINES[3].as_bytes(), |r| s(
            r.ua
        )),
        Some(Some(r#"odd "quoted" agent"#.into()))
    );
    // The format before duration/upstream/limit were added still parses.
    let old = r#"[2026-11-30T05:59:00.123Z] 127.0.0.1 "GET /" 200 via_upstream class=human retry_after=- ua="curl/8.5.0""#;
    assert_eq!(
        with(Format::Crawlguard, old.as_bytes(), |r| (
            r.status,
            r.upstream,
            r.upstream_ms
        )),
        Some((200, UpstreamReach::Reached, None))
    );
    for bad in [
        &CRAWLGUARD_LINES[0][..80],
        r#"[2026-11-30T05:59:00.123Z] 127.0.0.1 "GET /" 200 via_upstream class=human"#,
        r#"[not a time] 127.0.0.1 "GET /" 200 via_upstream ua="x""#,
        r#"[2026-11-30T05:59:00.123Z] 127.0.0.1 "GET /" 2000 via_upstream ua="x""#,
        "[2026-11-30 05:59:00.123][17][info][main] starting main dispatch loop",
    ] {
        assert_eq!(parse(Format::Crawlguard, bad), None, "{bad}");
    }
}

#[test]
fn garbage_never_parses_and_never_panics() {
    let mut junk: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\0\0\0".to_vec(),
        b"[".to_vec(),
        b"\"".to_vec(),
        b"- - - [] \"\" 200".to_vec(),
        vec![0xff; 300],
        "\u{feff}{\"start_time\":1}".as_bytes().to_vec(),
        b"1.2.3.4 - - [17/May/2015:10:05:03 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"unterminated"
            .to_vec(),
    ];
    // Every prefix of real lines.
    for l in [ENVOY_DEFAULT, ISTIO_JSON, CRAWLGUARD_LINES[1]] {
        for n in 0..l.len() - 1 {
            junk.push(l.as_bytes()[..n].to_vec());
        }
    }
    for j in &junk {
        for fmt in Format::ALL {
            // Prefixes may parse only if they end where a complete line could.
            let _ = with(fmt, j, |_| ());
        }
        assert_eq!(
            with(Format::Combined, j, |_| ()),
            None,
            "{:?}",
            String::from_utf8_lossy(j)
        );
    }
    // Non-UTF-8 bytes inside a field are kept as bytes.
    let mut l =
        br#"1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET /\xff HTTP/1.1" 200 5 "-" "agent "#
            .to_vec();
    l.extend_from_slice(&[0xfe, b'"']);
    assert_eq!(
        with(Format::Combined, &l, |r| r.ua.map(<[u8]>::to_vec)),
        Some(Some(b"agent \xfe".to_vec()))
    );
}

#[test]
fn detection_picks_the_format_of_most_lines() {
    let lines = |v: &[&'static str]| v.iter().map(|l| l.as_bytes()).collect::<Vec<_>>();
    let detect = |v: Vec<&'static [u8]>| logfmt::detect(v.iter().copied());
    assert_eq!(
        detect(lines(&[ENVOY_DEFAULT, "junk"])),
        Some(Format::EnvoyDefault)
    );
    assert_eq!(detect(lines(&[ISTIO_JSON])), Some(Format::EnvoyJson));
    assert_eq!(
        detect(lines(&[
            "[2026-12-01 07:10:00.000][1][info][main] envoy log",
            CRAWLGUARD_LINES[0],
            CRAWLGUARD_LINES[1]
        ])),
        Some(Format::Crawlguard)
    );
    assert_eq!(detect(lines(&["junk", "more junk"])), None);
}
