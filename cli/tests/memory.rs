//! `crawlguard report`'s memory is bounded: run under a 256 MiB address-space limit
//! (`ulimit -v`), a gzip bomb (a 4 GiB line in 4 MiB of gzip) and thousands of distinct
//! long names are reported in full, the long line counted and skipped.

mod common;

use common::BIN;

use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::Value;
use std::io::Write;
use std::process::Command;

/// Address space the command gets, KiB: far below what holding the inputs would take.
const LIMIT_KIB: u32 = 256 * 1024;

/// Gzip at the best level: deflate's ~1,000:1 on a repeated byte makes the bomb small.
fn gz(data: &[u8]) -> Vec<u8> {
    gz_at(data, Compression::best())
}

fn gz_at(data: &[u8], level: Compression) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), level);
    e.write_all(data).expect("gz");
    e.finish().expect("gz")
}

fn line(sec: u32, client: &str, ua: &str) -> String {
    format!(
        "[2026-12-01T07:00:{:02}.000Z] {client} \"GET /\" 200 via_upstream class=human \
         retry_after=- duration_ms=1 upstream_ms=2 limit=- ua=\"{ua}\"\n",
        sec % 60
    )
}

/// Runs `report --json FILE` under the address-space limit; its JSON.
fn report_limited(file: &std::path::Path) -> Value {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {LIMIT_KIB}; exec \"$0\" report --json \"$1\""
        ))
        .arg(BIN)
        .arg(file)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn a_4_gib_line_in_4_mib_of_gzip_is_counted_and_skipped() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut file = gz((0..10)
        .map(|s| line(s, "192.0.2.1", "curl/8"))
        .collect::<String>()
        .as_bytes());
    file.extend(gz(b"[2026-12-01T07:00:30.000Z] 192.0.2.2 \"GET /"));
    // 64 gzip members of 64 MiB each, no line end: one 4 GiB line.
    let member = gz(&vec![b'a'; 64 << 20]);
    for _ in 0..64 {
        file.extend_from_slice(&member);
    }
    file.extend(gz(
        format!("\"\n{}", line(40, "192.0.2.3", "curl/8")).as_bytes()
    ));
    assert!(file.len() < 5 << 20, "{} bytes", file.len());
    let p = dir.path().join("bomb.log.gz");
    std::fs::write(&p, &file).expect("write");
    let j = report_limited(&p);
    assert_eq!(
        (&j["lines"], &j["parsed"], &j["unparsable"]),
        (&12.into(), &11.into(), &1.into())
    );
    assert_eq!(j["inputs"][0]["too_long"], 1);
    assert_eq!(
        j["inputs"][0]["unparsable_examples"],
        serde_json::json!([11])
    );
    assert_eq!(j["inputs"][0]["error"], Value::Null);
}

#[test]
fn distinct_long_names_are_stored_cut() {
    let dir = tempfile::tempdir().expect("tmp");
    // 5,000 distinct 31 KiB client names, each with its own 31 KiB User-Agent (a line
    // within the 64 KiB line cap): 310 MB of names if they were held.
    let mut text = String::new();
    let pad = "x".repeat(31 * 1024);
    for i in 0..5000u32 {
        text += &line(i, &format!("{i:05}.{pad}"), &format!("agent-{i}/{pad}"));
    }
    let p = dir.path().join("names.log.gz");
    std::fs::write(&p, gz_at(text.as_bytes(), Compression::fast())).expect("write");
    let j = report_limited(&p);
    assert_eq!((&j["lines"], &j["parsed"]), (&5000.into(), &5000.into()));
    assert_eq!(j["inputs"][0]["too_long"], 0);
    let c = &j["top_talkers"]["clients"][0];
    assert_eq!(c["requests"], 1);
    // Cut to 255 bytes: the DNS limit is 253.
    assert_eq!(c["client"].as_str().map(str::len), Some(255));
    assert_eq!(c["client"].as_str().map(|s| &s[..6]), Some("00000."));
}

#[test]
fn readme_states_the_bounds() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let rows = crawlguard_cli::minutes::MAX_MINUTE_ROWS;
    for want in [
        format!(
            "lines up to {} KiB",
            crawlguard_cli::input::MAX_LINE_BYTES / 1024
        ),
        format!("cut to {} bytes", crawlguard_cli::report::CLIENT_NAME_BYTES),
        format!("{} limit names", crawlguard_cli::report::LIMITS_KEPT),
        format!("{},{:03} minute rows", rows / 1000, rows % 1000),
        format!("under a {} MiB address-space limit", LIMIT_KIB / 1024),
    ] {
        assert!(flat.contains(&want), "README does not say {want:?}");
    }
}
