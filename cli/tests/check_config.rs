//! `crawlguard check-config`: every shipped configuration is accepted, files without one are
//! refused, an invalid configuration exits 1 with the filter's own `field: reason`, and a
//! valid one the filter would warn about is accepted with each warning on its own line.

mod common;

use common::BIN;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn check(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("check-config")
        .args(args)
        .output()
        .expect("run crawlguard")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_shipped_example_and_istio_file() {
    let mut seen = 0;
    for dir in ["envoy/examples", "envoy/istio"] {
        let mut entries: Vec<_> = std::fs::read_dir(root().join(dir))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let out = check(&[p.to_str().expect("utf-8 path")]);
            let carries_config = name.ends_with(".json") || name.starts_with("wasmplugin");
            if carries_config {
                assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
                assert!(
                    text(&out.stdout).contains(": ok ("),
                    "{name}: {}",
                    text(&out.stdout)
                );
                // Shipped examples are meant as they are: nothing to warn about.
                assert!(
                    !text(&out.stdout).contains("configuration warning"),
                    "{name}: {}",
                    text(&out.stdout)
                );
            } else {
                // The verifier's Deployment/Service and the Dockerfile carry no filter
                // configuration: refused, with the reason.
                assert_eq!(out.status.code(), Some(1), "{name}");
                assert!(
                    text(&out.stderr).contains("no filter configuration found"),
                    "{name}: {}",
                    text(&out.stderr)
                );
            }
            seen += 1;
        }
    }
    assert!(seen >= 5, "{seen} files");
    let out = check(&[root()
        .join("envoy/istio/wasmplugin.yaml")
        .to_str()
        .expect("path")]);
    assert_eq!(
        text(&out.stdout).trim_end(),
        format!(
            "{}: WasmPlugin crawlguard (spec.pluginConfig): ok (mode enforce, 21 limits, 0 routes, \
             161 bots, 65536 bucket slots, verifier cluster \
             \"outbound|9090||crawlguard-sidecar.crawlguard-system.svc.cluster.local\")",
            root().join("envoy/istio/wasmplugin.yaml").display()
        )
    );
}

#[test]
fn envoy_yaml_and_the_embedded_default() {
    for f in [
        "envoy/envoy.yaml",
        "envoy/envoy-local-ratelimit.yaml",
        "envoy/crawlguard.default.json",
    ] {
        let out = check(&[root().join(f).to_str().expect("path")]);
        assert_eq!(out.status.code(), Some(0), "{f}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("ok (mode enforce, 21 limits"),
            "{f}"
        );
    }
}

#[test]
fn invalid_configurations_exit_1_with_the_filters_message() {
    let dir = tempfile::tempdir().expect("tmp");
    let bad = r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":0,"burst":1,"key":"global"}]}"#;
    let expected = crawlguard_core::config::parse(bad.as_bytes())
        .expect_err("invalid")
        .to_string();
    assert_eq!(expected, "limits[0].rate_per_s: must be > 0");
    let p = dir.path().join("bad.json");
    std::fs::write(&p, bad).expect("write");
    let out = check(&[p.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim_end(),
        format!(
            "{}: configuration: invalid configuration: {expected}",
            p.display()
        )
    );
    assert!(out.stdout.is_empty());

    // The same error inside a WasmPlugin's pluginConfig.
    let wp = std::fs::read_to_string(root().join("envoy/istio/wasmplugin.yaml")).expect("read");
    let broken = wp.replacen("xff_trusted_hops: 1", "xff_trusted_hops: 99", 1);
    assert_ne!(wp, broken);
    let p2 = dir.path().join("wp.yaml");
    std::fs::write(&p2, broken).expect("write");
    let out = check(&[p2.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).ends_with(
            "WasmPlugin crawlguard (spec.pluginConfig): invalid configuration: \
             client_ip.xff_trusted_hops: must be 1..=16\n"
        ),
        "{}",
        text(&out.stderr)
    );

    // Unknown fields, syntax errors, stdin; one bad file among good ones still fails.
    let mut child = Command::new(BIN)
        .args([
            "check-config",
            "-",
            root()
                .join("envoy/examples/api-route.json")
                .to_str()
                .expect("p"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(br#"{"store":{"slotz":1}}"#)
        .expect("feed");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(
            "-: configuration: invalid configuration: store.slotz: unknown field `slotz`"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stdout)
        .contains("api-route.json: configuration: ok (mode enforce, 23 limits, 1 routes"));
    let out = check(&["/nonexistent.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent.json"));
    // No file: a usage error.
    assert_eq!(check(&[]).status.code(), Some(2));
}

#[test]
fn load_warnings_are_printed_one_line_each_and_do_not_fail() {
    // A script limit that refills one token every 100 s, while scripts are told to come
    // back after at most 30 s (and a limit for everyone, so every class stays covered).
    let cfg = r#"{"classes":{"script":{"retry_after":{"max_s":30}}},"limits":[
        {"name":"slow_scripts","class":"script","route":"*","rate_per_s":0.01,"burst":1,"key":"client_ip"},
        {"name":"everyone","class":"*","route":"*","rate_per_s":20,"burst":100,"key":"client_ip"}]}"#;
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("slow.json");
    std::fs::write(&p, cfg).expect("write");
    let out = check(&[p.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let f = p.display();
    assert_eq!(
        text(&out.stdout),
        format!(
            "{f}: configuration: ok (mode enforce, 2 limits, 0 routes, 161 bots, 65536 bucket \
             slots, verifier cluster \"crawlguard_verifier\")\n\
             {f}: configuration: configuration warning: limits[0].rate_per_s: limit \
             \"slow_scripts\" refills one token every 100 s (1 / rate_per_s), longer than \
             classes.script.retry_after.max_s (30 s): a client of class script that waits \
             Retry-After can be rejected again\n"
        )
    );
}

#[test]
fn a_class_left_unlimited_and_robots_txt_not_exempt_are_warned_about() {
    // The API route example as it was: its own limits replaced the defaults, and its own
    // exempt_paths the default list.
    let cfg = r#"{"routes":[{"name":"api","path_prefix":"/api/"}],"limits":[
        {"name":"human_per_ip","class":"human","route":"*","rate_per_s":20,"burst":100,"key":"client_ip"},
        {"name":"api_per_key","class":"*","route":"api","rate_per_s":5,"burst":10,"key":"header:x-api-key"}],
        "exempt_paths":["/sitemap.xml"]}"#;
    let out = Command::new(BIN)
        .args(["check-config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            if let Some(mut i) = c.stdin.take() {
                i.write_all(cfg.as_bytes())?;
            }
            c.wait_with_output()
        })
        .expect("run crawlguard");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    let w = |class: &str, default: &str| {
        format!(
            "-: configuration: configuration warning: limits: no enforced limit covers class \
             {class} on route default: its requests there are never limited (a configuration's \
             own limits replace all 21 defaults; the default for {class}: {default})"
        )
    };
    assert_eq!(
        lines,
        [
            "-: configuration: ok (mode enforce, 2 limits, 1 routes, 161 bots, 65536 bucket \
             slots, verifier cluster \"crawlguard_verifier\")"
                .to_string(),
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
            "-: configuration: configuration warning: exempt_paths: \"/robots.txt\" is not \
             exempt: crawlers fetching it are limited like any page, and a crawler refused its \
             robots.txt may stop crawling the site (Googlebot treats a 429 or 5xx there as a \
             server error); the default list exempts it, a configuration's own list replaces \
             the default"
                .to_string(),
        ]
    );
}
