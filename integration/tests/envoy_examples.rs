//! Every Envoy configuration shipped in `envoy/` must load (`envoy --mode validate`), and
//! the filter configurations of `envoy/examples/` keep every class limited in a real Envoy:
//! a configuration's own `limits` replace all the defaults, and the API route example once
//! left scripts, unverified and spoofed claims unlimited off `/api/` (issue 19, item 11); a
//! configuration that does so loads with one warning per class in Envoy's log.

use crawlguard_integration::browsers::asn_db;
use crawlguard_integration::process::temp_dir;
use crawlguard_integration::{
    claims, client, envoy_bin, ip, repo_root, runs, sequential, statuses, upstream_classes, Envoy,
    EnvoyOpts, Record, SidecarOpts, Stack, TestCa, NO_REFILL_PER_S, UA_CURL, UA_GOOGLEBOT,
};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn every_example_envoy_config_validates() {
    let root = repo_root();
    let mut files: Vec<_> = std::fs::read_dir(root.join("envoy"))
        .expect("envoy/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    // The standalone config and the local_ratelimit backstop example, at least.
    assert!(names.contains(&"envoy.yaml".to_string()), "{names:?}");
    assert!(
        names.contains(&"envoy-local-ratelimit.yaml".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"envoy-tls.yaml".to_string()), "{names:?}");
    // The operator's own files (a TLS certificate and key, an ASN database), which Envoy
    // opens to validate, are throwaway ones here.
    let own = temp_dir("validate-own-files");
    let ca = TestCa::generate(own.path());
    let db = asn_db(own.path(), &[("192.0.2.0/24", 64496, "EXAMPLE")]);
    let operator_files = [
        ("/etc/envoy/tls/cert.pem", ca.cert.display().to_string()),
        ("/etc/envoy/tls/key.pem", ca.key.display().to_string()),
        (
            "/usr/share/GeoIP/GeoLite2-ASN.mmdb",
            db.display().to_string(),
        ),
    ];
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read envoy config");
        let mut local = text.clone();
        for (shipped, test) in &operator_files {
            local = local.replace(shipped, test);
        }
        let config = if local == text {
            f.clone()
        } else {
            let copy = own.path().join(f.file_name().expect("file name"));
            std::fs::write(&copy, local).expect("write local copy");
            copy
        };
        // Paths inside the configs (the module) are relative to the repository root.
        let out = Command::new(envoy_bin())
            .current_dir(&root)
            .args(["--mode", "validate", "--use-dynamic-base-id", "-c"])
            .arg(&config)
            .output()
            .expect("run envoy");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("OK"),
            "{} does not validate:\n{text}",
            f.display()
        );
    }
}

/// `envoy/examples/<name>` with every `rate_per_s` set to [`NO_REFILL_PER_S`], so nothing
/// refills while a test runs and the counts are exact; classes, routes, bursts and keys are
/// the file's.
fn example_without_refill(name: &str) -> Value {
    let path = repo_root().join("envoy/examples").join(name);
    let text = std::fs::read_to_string(&path).expect("read the example");
    let mut v: Value = serde_json::from_str(&text).expect("the example is JSON");
    for l in v["limits"].as_array_mut().expect("the example has limits") {
        // A limit of requests in flight only has no bucket to slow down.
        if l.get("rate_per_s").is_some() {
            l["rate_per_s"] = json!(NO_REFILL_PER_S);
        }
    }
    v
}

/// Before issue 19, 30 curl requests and every unverified Googlebot claim got 200 off
/// `/api/` with the API route example. Now: `script_per_ip` (burst 10) and
/// `unverified_bot_per_ip` (burst 5) apply there, as in the defaults. No verifier cluster:
/// every claim is a verifier error, so `unverified_bot`.
#[tokio::test]
async fn the_api_route_example_limits_scripts_and_unverified_claims_off_the_api() {
    let envoy = Envoy::start(EnvoyOpts::with_config(example_without_refill(
        "api-route.json",
    )))
    .await;
    let curl = sequential(&client(ip(2)), &envoy.url("/page"), UA_CURL, 30).await;
    assert_eq!(statuses(&curl), runs(&[(200, 10), (429, 20)]));
    assert_eq!(upstream_classes(&curl), vec!["script"; 10]);
    let claimed = sequential(&client(ip(3)), &envoy.url("/page"), UA_GOOGLEBOT, 7).await;
    assert_eq!(statuses(&claimed), runs(&[(200, 5), (429, 2)]));
    assert_eq!(upstream_classes(&claimed), vec!["unverified_bot"; 5]);
    for r in curl[10..].iter().chain(&claimed[5..]) {
        assert!(r.retry_after_s().is_some(), "no Retry-After: {r:?}");
    }
    envoy
        .assert_counters(&[
            ("crawlguard.class.script.allowed", 10),
            ("crawlguard.class.script.limited", 20),
            ("crawlguard.class.unverified_bot.allowed", 5),
            ("crawlguard.class.unverified_bot.limited", 2),
        ])
        .await;
    // Every class is covered (the slowed rates do warn about Retry-After clamps).
    let uncovered: Vec<String> = warning_lines(&envoy)
        .into_iter()
        .filter(|l| l.contains("no enforced limit covers"))
        .collect();
    assert_eq!(uncovered, Vec::<String>::new());
    envoy.assert_log_clean();
}

/// Four spoofed Googlebot claims (PTR outside Google's domains, through the real sidecar and
/// dnsmasq) got 200 with the API route example; now `spoofed_per_ip` (burst 2) applies.
/// Client addresses come from `x-forwarded-for` (see `tests/verify.rs` on why).
#[tokio::test]
async fn the_api_route_example_limits_spoofed_claims_off_the_api() {
    let mut cfg = example_without_refill("api-route.json");
    cfg["client_ip"] = json!({"source": "xff", "xff_trusted_hops": 1});
    let records = [
        Record::ptr("192.0.2.2", "host-2.example.net"),
        Record::forward("host-2.example.net", "192.0.2.2"),
    ];
    let s = Stack::start(
        EnvoyOpts::with_config(cfg),
        &records,
        SidecarOpts::default(),
    )
    .await;
    let replies = claims(
        &client(ip(2)),
        &s.envoy.url("/page"),
        UA_GOOGLEBOT,
        "192.0.2.2",
        4,
    )
    .await;
    assert_eq!(statuses(&replies), [200, 200, 429, 429]);
    assert_eq!(upstream_classes(&replies), ["spoofed", "spoofed"]);
    for r in &replies[2..] {
        let ra = r.retry_after_s().expect("Retry-After");
        assert!((60..=3720).contains(&ra), "spoofed Retry-After {ra}");
    }
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.spoofed", 1),
            ("crawlguard.class.spoofed.allowed", 2),
            ("crawlguard.class.spoofed.limited", 2),
        ])
        .await;
    s.envoy.assert_log_clean();
}

/// Envoy's log lines that carry a configuration warning.
fn warning_lines(envoy: &Envoy) -> Vec<String> {
    envoy
        .log()
        .lines()
        .filter(|l| l.contains("configuration warning:"))
        .map(String::from)
        .collect()
}

/// The API route example as it was: each class it leaves unlimited off `/api/` is one
/// warning at warn level in Envoy's log, per load, and the configuration still loads.
#[tokio::test]
async fn a_configuration_leaving_classes_unlimited_loads_with_a_warning_per_class() {
    let old = json!({
        "routes": [{"name": "api", "path_prefix": "/api/"}],
        "limits": [
            {"name": "human_per_ip", "class": "human", "route": "*", "rate_per_s": 20,
             "burst": 100, "key": "client_ip"},
            {"name": "api_per_key", "class": "*", "route": "api", "rate_per_s": 5,
             "burst": 10, "key": "header:x-api-key"},
            {"name": "crawlers_off_api", "class": "search_crawler", "route": "api",
             "rate_per_s": 0.2, "burst": 2, "key": "client_ip"}
        ],
        "ratelimit_headers": true
    });
    let envoy = Envoy::start(EnvoyOpts::with_config(old)).await;
    let spoofed = "configuration warning: limits: no enforced limit covers class spoofed on \
                   route default: its requests there are never limited (a configuration's own \
                   limits replace all 21 defaults; the default for spoofed: spoofed_per_ip \
                   (0.1/s, burst 2, key client_ip) and spoofed_per_24 (0.5/s, burst 5, key \
                   client_ip /24 /48) and spoofed_global (5/s, burst 50, key global))";
    let classes = [
        "search_crawler",
        "ai_retriever",
        "ai_trainer",
        "other_bot",
        "script",
        "unverified_bot",
        "spoofed",
        "suspect_browser",
    ];
    // Envoy configures the plugin in several VMs (the main thread's and each worker's); each
    // logs its warnings, then its `configured:` line. Poll (20 s at most) until every VM that
    // logged `configured:` has logged each class's warning once, and no other warning.
    let consistent = |log: &str| {
        let loads = log
            .lines()
            .filter(|l| l.contains("configured: mode"))
            .count();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("configuration warning:"))
            .collect();
        let per_class_ok = classes.iter().all(|class| {
            let head = format!(
                "configuration warning: limits: no enforced limit covers class {class} on \
                 route default: its requests there are never limited"
            );
            lines
                .iter()
                .filter(|l| l.contains(&head) && l.contains("][warning]["))
                .count()
                == loads
        });
        loads >= 1
            && per_class_ok
            && lines.len() == classes.len() * loads
            && lines.iter().filter(|l| l.contains(spoofed)).count() == loads
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !consistent(&envoy.log()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        consistent(&envoy.log()),
        "expected each load to warn once per class {classes:?}:\n{:#?}",
        warning_lines(&envoy)
    );
    // Valid, so it loads and serves: curl is unlimited here, as the warning says.
    let curl = sequential(&client(ip(2)), &envoy.url("/page"), UA_CURL, 12).await;
    assert_eq!(statuses(&curl), vec![200; 12]);
    envoy.assert_log_clean();
}
