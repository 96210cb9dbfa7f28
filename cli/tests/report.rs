//! `crawlguard report`: exact figures on the repository's real access log, percentiles on a
//! synthetic log with known values, rejection origins, gzip and stdin input, `--json`, and
//! the plot file.

mod common;

use common::{write_tmp, APACHE_LOG, BIN, BROWSER_UA};

use crawlguard_cli::input;
use crawlguard_cli::report::Report;
use crawlguard_core::config;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn report_of(paths: &[String]) -> Value {
    let mut rep = Report::new(config::parse(b"").expect("default"));
    rep.inputs = input::each_input(paths, None, &mut |r| rep.add(r));
    serde_json::to_value(rep.json(5)).expect("json")
}

fn class<'a>(j: &'a Value, name: &str) -> &'a Value {
    j["classes"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["class"] == name))
        .unwrap_or(&Value::Null)
}

fn bot<'a>(j: &'a Value, name: &str) -> &'a Value {
    j["bots"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["bot"] == name))
        .unwrap_or(&Value::Null)
}

#[test]
fn apache_log_exact_figures() {
    let j = report_of(&[APACHE_LOG.to_string()]);
    assert_eq!(j["lines"], 10_000);
    assert_eq!(j["parsed"], 9_999);
    assert_eq!(j["unparsable"], 1);
    assert_eq!(j["inputs"][0]["format"], "combined");
    assert_eq!(
        j["inputs"][0]["unparsable_examples"],
        serde_json::json!([8899])
    );
    assert_eq!(j["first"], "2015-05-17T10:05:00.000Z");
    assert_eq!(j["last"], "2015-05-20T21:05:59.000Z");
    assert_eq!(j["class_source"]["classifier"], 9_999);
    // Per class: the filter's classifier on the User-Agent (crawler claims unverified).
    for (name, n, s2xx, s3xx, s4xx, s5xx) in [
        ("human", 7_096, 6_647, 367, 82, 0),
        ("unverified_bot", 1_178, 1_026, 137, 13, 2),
        ("other_bot", 1_513, 1_376, 55, 81, 1),
        ("script", 212, 121, 50, 41, 0),
    ] {
        let c = class(&j, name);
        assert_eq!(c["requests"], n, "{name}");
        assert_eq!(c["status"]["2xx"], s2xx, "{name}");
        assert_eq!(c["status"]["3xx"], s3xx, "{name}");
        assert_eq!(c["status"]["4xx"], s4xx, "{name}");
        assert_eq!(c["status"]["5xx"], s5xx, "{name}");
        assert_eq!(c["status"]["429"], 0, "{name}");
        assert_eq!(
            c["ttfb_ms"]["n"], 0,
            "no upstream times in a plain Apache log"
        );
        assert_eq!(c["ttfb_ms"]["p50"], Value::Null);
    }
    assert_eq!(j["classes"].as_array().map(Vec::len), Some(4));
    // Per bot id; the data's README counts 543 Googlebot lines: 529 googlebot + 13
    // googlebot-image + the malformed line 8899.
    for (id, n) in [
        ("googlebot", 529),
        ("googlebot-image", 13),
        ("bingbot", 58),
        ("ahrefsbot", 34),
        ("yandexbot", 85),
        ("declared-bot", 1_130),
    ] {
        assert_eq!(bot(&j, id)["requests"], n, "{id}");
    }
    assert_eq!(bot(&j, "googlebot")["catalog_class"], "search_crawler");
    assert_eq!(bot(&j, "googlebot")["verify"], true);
    // Peak minutes: this log's requests all fall in minute :05 of each hour.
    let busiest: Vec<(String, u64)> = j["busiest_minutes"]
        .as_array()
        .expect("array")
        .iter()
        .map(|m| {
            (
                m["minute"].as_str().unwrap_or("").to_string(),
                m["requests"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        busiest,
        [
            ("2015-05-19 19:05".to_string(), 136),
            ("2015-05-19 14:05".to_string(), 134),
            ("2015-05-18 15:05".to_string(), 133),
            ("2015-05-18 10:05".to_string(), 132),
            ("2015-05-18 17:05".to_string(), 132),
        ]
    );
    assert_eq!(j["top_429_minutes"], serde_json::json!([]));
    // Top talkers, exact (fewer distinct clients than the table tracks).
    assert_eq!(j["top_talkers"]["error_bound"], 0);
    let top: Vec<(String, u64, String)> = j["top_talkers"]["clients"]
        .as_array()
        .expect("array")
        .iter()
        .take(3)
        .map(|c| {
            (
                c["client"].as_str().unwrap_or("").to_string(),
                c["requests"].as_u64().unwrap_or(0),
                c["class"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        top,
        [
            ("66.249.73.135".into(), 482, "unverified_bot".into()),
            ("46.105.14.53".into(), 364, "other_bot".into()),
            ("130.237.218.86".into(), 357, "human".into()),
        ]
    );
}

/// crawlguard-format lines (envoy/envoy.yaml) at `ts` second offsets.
fn cg_line(sec: u32, status: u16, details: &str, class: &str, up: &str, ua: &str) -> String {
    format!(
        "[2026-11-30T06:{:02}:{:02}.000Z] 192.0.2.{} \"GET /p\" {status} {details} class={class} \
         retry_after=- duration_ms=1 upstream_ms={up} limit=- ua=\"{ua}\"\n",
        sec / 60,
        sec % 60,
        1 + sec % 3
    )
}

#[test]
fn percentiles_nearest_rank_on_known_values() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut text = String::new();
    // Upstream times 1..=100 ms in shuffled order, plus 50 lines that never reached the
    // upstream: those must not count as fast.
    for i in 0..100u32 {
        let v = (i * 37) % 100 + 1;
        text += &cg_line(
            i,
            200,
            "via_upstream",
            "human",
            &v.to_string(),
            "Mozilla/5.0",
        );
    }
    for i in 0..50 {
        text += &cg_line(
            100 + i,
            429,
            "crawlguard_rate_limited",
            "human",
            "-",
            "Mozilla/5.0",
        );
    }
    // A second class with times 10, 20, ..., 200 (20 values).
    for i in 0..20u32 {
        text += &cg_line(
            i,
            200,
            "via_upstream",
            "script",
            &((i + 1) * 10).to_string(),
            "curl/8",
        );
    }
    let j = report_of(&[write_tmp(&dir, "cg.log", &text)]);
    let h = &class(&j, "human")["ttfb_ms"];
    assert_eq!(
        (&h["n"], &h["p50"], &h["p95"], &h["p99"]),
        (&100.into(), &50.into(), &95.into(), &99.into())
    );
    // Nearest rank on 20 values: P50 = 10th (100), P95 = 19th (190), P99 = 20th (200).
    let sc = &class(&j, "script")["ttfb_ms"];
    assert_eq!(
        (&sc["p50"], &sc["p95"], &sc["p99"]),
        (&100.into(), &190.into(), &200.into())
    );
    assert_eq!(class(&j, "human")["requests"], 150);
    assert_eq!(j["class_source"]["logged"], 170);

    // nginx combined with $request_time $upstream_response_time: the same percentiles.
    let mut ng = String::new();
    for i in 0..100u32 {
        let v = (i * 37) % 100 + 1;
        ng += &format!(
            "198.51.100.{} - - [30/Nov/2026:06:00:{:02} +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"{BROWSER_UA}\" 0.{:03} 0.{:03}\n",
            i % 7,
            i % 60,
            v + 1,
            v
        );
    }
    ng += &format!("198.51.100.9 - - [30/Nov/2026:06:00:01 +0000] \"GET / HTTP/1.1\" 502 1 \"-\" \"{BROWSER_UA}\" 0.000 -\n");
    let j = report_of(&[write_tmp(&dir, "nginx.log", &ng)]);
    let h = &class(&j, "human")["ttfb_ms"];
    assert_eq!(
        (&h["n"], &h["p50"], &h["p95"], &h["p99"]),
        (&100.into(), &50.into(), &95.into(), &99.into())
    );
}

#[test]
fn rejection_origins_and_top_429_minutes() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut text = String::new();
    // minute 06:00: 3 crawlguard 429s; 06:01: 2 normalised upstream 429s + 1 origin 503;
    // 06:02: 1 from another Envoy filter, 4 crawlguard 429s for a script.
    for s in [1, 2, 3] {
        text += &cg_line(
            s,
            429,
            "crawlguard_rate_limited",
            "human",
            "-",
            "Mozilla/5.0",
        );
    }
    for s in [61, 62] {
        text += &cg_line(
            s,
            429,
            "crawlguard_normalised_upstream",
            "human",
            "30",
            "Mozilla/5.0",
        );
    }
    text += &cg_line(63, 503, "via_upstream", "human", "40", "Mozilla/5.0");
    text += &cg_line(121, 429, "local_rate_limited", "human", "-", "Mozilla/5.0");
    for s in [122, 123, 124, 125] {
        text += &cg_line(s, 429, "crawlguard_rate_limited", "script", "-", "curl/8");
    }
    let j = report_of(&[write_tmp(&dir, "o.log", &text)]);
    let o = &class(&j, "human")["rejections_by_origin"];
    assert_eq!(
        (
            &o["crawlguard"],
            &o["upstream"],
            &o["other_envoy"],
            &o["unknown"]
        ),
        (&3.into(), &3.into(), &1.into(), &0.into())
    );
    assert_eq!(class(&j, "human")["share"]["429"], 6.0 / 7.0);
    assert_eq!(class(&j, "human")["share"]["503"], 1.0 / 7.0);
    let top: Vec<(String, u64)> = j["top_429_minutes"]
        .as_array()
        .expect("array")
        .iter()
        .map(|m| {
            (
                m["minute"].as_str().unwrap_or("").into(),
                m["429"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        top,
        [
            ("2026-11-30 06:02".to_string(), 5),
            ("2026-11-30 06:00".to_string(), 3),
            ("2026-11-30 06:01".to_string(), 2)
        ]
    );
    assert_eq!(
        j["top_429_minutes"][0]["429_by_class"],
        serde_json::json!({"human": 1, "script": 4})
    );
}

#[test]
fn shed_503s_are_crawlguards_apart_from_its_rate_limit() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut text = String::new();
    // 3 rate-limit 429s, 2 shed 503s, 1 origin 503, 1 Envoy 503 (no healthy upstream).
    for s in [1, 2, 3] {
        text += &cg_line(s, 429, "crawlguard_rate_limited", "script", "-", "curl/8");
    }
    for s in [4, 5] {
        text += &cg_line(s, 503, "crawlguard_shed", "script", "-", "curl/8");
    }
    text += &cg_line(6, 503, "via_upstream", "script", "900", "curl/8");
    text += &cg_line(7, 503, "no_healthy_upstream", "script", "-", "curl/8");
    let path = write_tmp(&dir, "shed.log", &text);
    let j = report_of(std::slice::from_ref(&path));
    let o = &class(&j, "script")["rejections_by_origin"];
    assert_eq!(
        o,
        &serde_json::json!({"crawlguard": 3, "crawlguard_shed": 2, "upstream": 1,
                            "other_envoy": 1, "unknown": 0})
    );
    assert_eq!(class(&j, "script")["status"]["503"], 4);
    // The table: its own column, after crawlguard's rate limit.
    let out = Command::new(BIN)
        .args(["report", &path])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let words = |prefix: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        words("class ")[6..10],
        ["rej:cg", "rej:shed", "rej:up", "rej:other"]
    );
    assert_eq!(words("script ")[6..10], ["3", "2", "1", "1"]);
}

#[test]
fn gzip_input_equals_plain_and_truncation_keeps_what_was_read() {
    let dir = tempfile::tempdir().expect("tmp");
    let plain = std::fs::read(APACHE_LOG).expect("log");
    let gz = |data: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).expect("gz");
        e.finish().expect("gz")
    };
    let p = dir.path().join("access.log.gz");
    std::fs::write(&p, gz(&plain)).expect("write");
    let a = report_of(&[APACHE_LOG.to_string()]);
    let mut b = report_of(&[p.display().to_string()]);
    b["inputs"] = a["inputs"].clone();
    assert_eq!(a, b);
    // Two gzip members (a rotated file appended to another) are read whole.
    let half = plain.len() / 2;
    let cut = half + plain[half..].iter().position(|c| *c == b'\n').unwrap_or(0) + 1;
    let mut two = gz(&plain[..cut]);
    two.extend(gz(&plain[cut..]));
    let p2 = dir.path().join("two.gz");
    std::fs::write(&p2, &two).expect("write");
    let mut c = report_of(&[p2.display().to_string()]);
    c["inputs"] = a["inputs"].clone();
    assert_eq!(a, c);
    // A truncated file: an error, and every line before it still counted.
    let whole = gz(&plain);
    let p3 = dir.path().join("cut.gz");
    std::fs::write(&p3, &whole[..whole.len() / 2]).expect("write");
    let d = report_of(&[p3.display().to_string()]);
    assert!(d["inputs"][0]["error"].is_string(), "{}", d["inputs"][0]);
    let n = d["parsed"].as_u64().unwrap_or(0);
    assert!(n > 3_000 && n < 9_999, "{n}");
}

#[test]
fn stdin_gzip_json_schema_and_exit_status() {
    let plain = std::fs::read(APACHE_LOG).expect("log");
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(&plain).expect("gz");
    let gz = e.finish().expect("gz");
    let mut child = Command::new(BIN)
        .args(["report", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&gz)
        .expect("feed");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    // The documented schema (README, "crawlguard report --json").
    assert_eq!(j["schema"], "crawlguard.report/v1");
    for key in [
        "inputs",
        "lines",
        "parsed",
        "unparsable",
        "first",
        "last",
        "class_source",
        "classes",
        "routes",
        "bots",
        "top_429_minutes",
        "busiest_minutes",
        "top_talkers",
        "limits",
        "ttfb",
    ] {
        assert!(j.get(key).is_some(), "missing {key}");
    }
    let c = &j["classes"][0];
    for key in [
        "class",
        "requests",
        "status",
        "share",
        "rejections_by_origin",
        "ttfb_ms",
    ] {
        assert!(c.get(key).is_some(), "class row missing {key}");
    }
    for key in ["2xx", "3xx", "4xx", "429", "503", "5xx", "other"] {
        assert!(c["status"][key].is_u64(), "status.{key}");
    }
    for key in ["2xx", "429", "503", "5xx"] {
        assert!(c["share"][key].is_f64(), "share.{key}");
    }
    for key in [
        "crawlguard",
        "crawlguard_shed",
        "upstream",
        "other_envoy",
        "unknown",
    ] {
        assert!(c["rejections_by_origin"][key].is_u64(), "origin.{key}");
    }
    for key in ["n", "p50", "p95", "p99"] {
        assert!(c["ttfb_ms"].get(key).is_some(), "ttfb_ms.{key}");
    }
    assert!(j["bots"][0]["bot"].is_string() && j["bots"][0]["verify"].is_boolean());
    assert!(j["top_talkers"]["error_bound"].is_u64());
    assert_eq!(j["inputs"][0]["name"], "-");
    assert_eq!(j["parsed"], 9_999);

    // A file that does not exist: exit 1, the others still reported.
    let out = Command::new(BIN)
        .args(["report", APACHE_LOG, "/nonexistent/access.log"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/access.log: cannot open"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("9999 parsed"));
    // Garbage only: counted, not fatal.
    let dir = tempfile::tempdir().expect("tmp");
    let g = write_tmp(&dir, "g.log", "garbage\n\u{0}\u{1}\nmore garbage\n");
    let out = Command::new(BIN)
        .args(["report", "--json", &g])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let j: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!((&j["lines"], &j["unparsable"]), (&3.into(), &3.into()));
}

#[test]
fn plot_files_are_written() {
    let dir = tempfile::tempdir().expect("tmp");
    for ext in ["svg", "png"] {
        let p = dir.path().join(format!("plot.{ext}"));
        let out = Command::new(BIN)
            .args(["report", APACHE_LOG, "--plot"])
            .arg(&p)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&p).expect("plot file");
        assert!(bytes.len() > 10_000, "{ext}: {} bytes", bytes.len());
        match ext {
            "svg" => {
                let text = String::from_utf8_lossy(&bytes);
                assert!(text.starts_with("<svg"), "{}", &text[..40]);
                assert!(text.trim_end().ends_with("</svg>"));
                assert!(text.contains("<polyline"));
            }
            _ => assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n"),
        }
    }
    let out = Command::new(BIN)
        .args(["report", APACHE_LOG, "--plot", "/tmp/x.gif"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(".svg or .png"));
}
