//! Monitoring end to end: a real Prometheus (Debian's package) scrapes a real Envoy running
//! crawlguard under traffic, in fleet mode (its sidecar and a real `redis-server`), with
//! shedding under a slowed origin and crawler claims verified over DNS (dnsmasq).
//!
//! - `/stats/prometheus` exports exactly the names, labels and types of the README's
//!   "Monitoring" table, with bounded label values (the classes, decisions, configured
//!   routes and limits, the catalog's bot ids plus `other`, the shed levels).
//! - The per-bot and per-limit counters match what the clients saw, request for request.
//! - `promtool check rules` and `promtool test rules` pass on `deploy/prometheus/`.
//! - Every panel query of `deploy/grafana/crawlguard-dashboard.json` and every alert
//!   expression of `deploy/prometheus/crawlguard-alerts.yaml` (its threshold cut off)
//!   returns series through Prometheus' HTTP API, and every rule evaluates without error.
//!
//! Nothing here is skipped: without `prometheus`/`promtool` the test fails (`make setup`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crawlguard_integration::process::poll_until;
use crawlguard_integration::{
    claim, client, ip, promtool, repo_root, EnvoyOpts, Prometheus, Record, Redis, SidecarOpts,
    Stack, TestUpstream, GOOGLEBOT_V4, UA_CHROME, UA_CURL, UA_GOOGLEBOT,
};
use serde_json::{json, Value};

const UA_GPTBOT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; \
                         GPTBot/1.2; +https://openai.com/gptbot)";

/// Limits that reject some of the test's traffic; shedding on route `api` (scripts first,
/// then AI trainers); fleet mode through the sidecar; signed agents in shadow mode (so their
/// counters exist). Client addresses from `x-forwarded-for` (see tests/verify.rs).
fn config() -> Value {
    json!({
        "client_ip": {"source": "xff", "xff_trusted_hops": 1},
        "routes": [{"name": "api", "path_prefix": "/api"}],
        "limits": [
            {"name": "human_per_ip", "class": "human", "route": "*", "rate_per_s": 0.001,
             "burst": 4, "key": "client_ip"},
            {"name": "crawler_per_ip", "class": "search_crawler", "route": "*",
             "rate_per_s": 0.001, "burst": 5, "key": "client_ip"},
            {"name": "everyone", "class": "*", "route": "*", "rate_per_s": 100000,
             "burst": 1000000, "key": "client_ip"}
        ],
        "shedding": {"enabled": true, "window_s": 2, "min_requests": 5, "min_clients": 1,
                     "latency_ms": 150, "error_ratio": 0.3, "step_s": 1,
                     "order": ["script", "ai_trainer"]},
        "store": {"hash_seed": 4242},
        "fleet": {"enabled": true, "sync_interval_ms": 200},
        "signed_agents": {"mode": "shadow"},
        "verifier": {"timeout_ms": 3000},
    })
}

/// The README's "Monitoring" table: metric name -> (label names, type), braces expanded.
fn readme_metrics() -> BTreeMap<String, (BTreeSet<String>, String)> {
    let text = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let section = text
        .split("\n## Monitoring\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README section Monitoring");
    let mut out = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `crawlguard_")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let labels: BTreeSet<String> = cells[1]
            .split(", ")
            .filter(|l| !l.is_empty())
            .map(|l| l.trim_matches('`').to_string())
            .collect();
        for name in cells[0].split(", ") {
            for n in expand(name.trim_matches('`')) {
                out.insert(n, (labels.clone(), cells[2].to_string()));
            }
        }
    }
    assert!(out.len() > 50, "README Monitoring table: {out:?}");
    out
}

/// `a_{b,c}` -> `a_b`, `a_c` (one brace group).
fn expand(name: &str) -> Vec<String> {
    match (name.find('{'), name.find('}')) {
        (Some(i), Some(j)) => name[i + 1..j]
            .split(',')
            .map(|alt| format!("{}{alt}{}", &name[..i], &name[j + 1..]))
            .collect(),
        _ => vec![name.to_string()],
    }
}

/// One series of Envoy's Prometheus text: name, labels, value.
type Series = (String, BTreeMap<String, String>, f64);

/// Envoy's `/stats/prometheus`: the crawlguard series, and each metric's `# TYPE`.
fn parse_exposition(text: &str) -> (Vec<Series>, BTreeMap<String, String>) {
    let mut series = Vec::new();
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE crawlguard_") {
            let (name, ty) = t.split_once(' ').expect("TYPE line");
            types.insert(format!("crawlguard_{name}"), ty.to_string());
            continue;
        }
        if !line.starts_with("crawlguard_") {
            continue;
        }
        let (head, value) = line.rsplit_once(' ').expect("series line");
        let (name, labels) = head.split_once('{').expect("labels");
        let labels = labels
            .trim_end_matches('}')
            .split(',')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("label");
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        series.push((name.to_string(), labels, value.parse().expect("value")));
    }
    (series, types)
}

fn values_of(series: &[Series], name: &str, label: &str) -> BTreeSet<String> {
    series
        .iter()
        .filter(|(n, _, _)| n == name)
        .filter_map(|(_, l, _)| l.get(label).cloned())
        .collect()
}

fn value(series: &[Series], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = series
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
        })
        .map(|(_, _, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0]
}

fn set(items: impl IntoIterator<Item = impl ToString>) -> BTreeSet<String> {
    items.into_iter().map(|s| s.to_string()).collect()
}

/// What the clients sent and got, per kind.
#[derive(Default, Debug)]
struct Sent {
    requests: u64,
    /// 429 (a limit) or 503 with crawlguard's shed details.
    rejected: u64,
    s429: u64,
}

async fn send(c: &reqwest::Client, url: &str, ua: &str, xff: &str, tally: &mut Sent) -> u16 {
    let r = claim(c, url, ua, xff).await;
    tally.requests += 1;
    if r.status == 429 {
        tally.s429 += 1;
        tally.rejected += 1;
    } else if r.status == 503 && r.header("x-envoy-upstream-service-time").is_none() {
        tally.rejected += 1;
    }
    r.status
}

/// Every `expr` of the dashboard's panels, with its template variables substituted.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = repo_root().join("deploy/grafana/crawlguard-dashboard.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("dashboard"))
        .expect("dashboard JSON");
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("expr");
            let q = expr
                .replace("$__rate_interval", "30s")
                .replace("$job", "crawlguard");
            assert!(!q.contains('$'), "unsubstituted variable in {expr}");
            out.push((p["title"].as_str().unwrap_or("?").to_string(), q));
        }
    }
    assert!(out.len() >= 15, "{out:?}");
    out
}

/// Every alert of the rules file: name and expression without its final threshold
/// comparison (`X > 0.01` -> `X`), so that a healthy system still returns the series.
fn alert_signals() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(rules_path()).expect("rules file");
    let mut out = Vec::new();
    let mut name = None;
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if let Some(n) = l.trim().strip_prefix("- alert: ") {
            name = Some(n.to_string());
        } else if l.trim() == "expr: |" {
            let mut expr = String::new();
            while let Some(next) = lines.peek() {
                if !next.starts_with("      ") {
                    break;
                }
                expr.push_str(next.trim());
                expr.push(' ');
                lines.next();
            }
            let expr = expr.trim();
            let (signal, threshold) = expr.rsplit_once(" > ").expect("`X > N` alert");
            threshold
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("threshold of {expr}"));
            out.push((name.take().expect("alert name"), signal.to_string()));
        }
    }
    assert_eq!(out.len(), 10, "{out:?}");
    out
}

fn rules_path() -> PathBuf {
    repo_root().join("deploy/prometheus/crawlguard-alerts.yaml")
}

#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    let dir = repo_root().join("deploy/prometheus");
    let (ok, out) = promtool(&dir, &["check", "rules", "crawlguard-alerts.yaml"]);
    assert!(ok, "{out}");
    assert!(out.contains("SUCCESS: 10 rules found"), "{out}");
    let (ok, out) = promtool(&dir, &["test", "rules", "crawlguard-alerts.test.yaml"]);
    assert!(ok, "{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_envoy_with_exact_names_and_every_query_returns_series() {
    let redis = Redis::start().await;
    let up = TestUpstream::start().await;
    let stack = Stack::start(
        EnvoyOpts::with_config(config()).in_front_of(&up),
        &[Record::googlebot()],
        // Stack points the sidecar at its dnsmasq.
        SidecarOpts::fleet("127.0.0.1:9".parse().expect("addr"), &redis.url()),
    )
    .await;
    let envoy = &stack.envoy;
    envoy
        .wait_for_stat(
            "wasmcustom.crawlguard.fleet.replicas",
            Duration::from_secs(20),
            "fleet replicas",
            |v| v == 1,
        )
        .await;
    let prom = Prometheus::start(
        &[envoy.admin_url().trim_start_matches("http://").to_string()],
        &[rules_path()],
    )
    .await;

    // Healthy origin: humans over their burst, verified Googlebot over its, GPTBot
    // (unverified: no range file), curl.
    let mut sent: BTreeMap<&str, Sent> = BTreeMap::new();
    let c = client(ip(10));
    let page = envoy.url("/page");
    for (kind, ua, xff, n) in [
        ("human", UA_CHROME, "198.51.100.10", 6),
        ("googlebot", UA_GOOGLEBOT, GOOGLEBOT_V4, 7),
        ("gptbot", UA_GPTBOT, "198.51.100.11", 3),
        ("script", UA_CURL, "198.51.100.12", 3),
    ] {
        let tally = sent.entry(kind).or_default();
        for _ in 0..n {
            send(&c, &page, ua, xff, tally).await;
        }
    }
    assert_eq!(sent["human"].s429, 2, "{sent:?}");
    assert_eq!(sent["googlebot"].s429, 2, "{sent:?}");

    // A slow origin on route api: scripts are shed (level 1), for at least a second.
    up.set_mood(400, 0).await;
    let stop = Arc::new(AtomicBool::new(false));
    let lanes: Vec<_> = (0..4u8)
        .map(|lane| {
            let (url, stop) = (envoy.url("/api/slow"), stop.clone());
            tokio::spawn(async move {
                let c = client(ip(20 + lane));
                let mut tally = Sent::default();
                let xff = format!("203.0.113.{}", 20 + lane);
                while !stop.load(Ordering::Relaxed) {
                    send(&c, &url, UA_CURL, &xff, &mut tally).await;
                }
                tally
            })
        })
        .collect();
    envoy
        .wait_for_counter(
            "crawlguard.shed.api.duration_ms.1",
            1_000,
            Duration::from_secs(60),
            "a second shed at level 1 on route api",
        )
        .await;
    stop.store(true, Ordering::Relaxed);
    let script = sent.get_mut("script").expect("script");
    for lane in lanes {
        let t = lane.await.expect("lane");
        script.requests += t.requests;
        script.rejected += t.rejected;
        script.s429 += t.s429;
    }
    up.set_mood(0, 0).await;
    let script_rejected = script.rejected;
    assert!(script_rejected > 0, "no script was shed: {sent:?}");

    // Envoy's exposition: exact names, labels and types; bounded label values.
    envoy.wait_for_flush().await;
    let text = envoy.admin_get("/stats/prometheus").await;
    let (series, types) = parse_exposition(&text);
    let mut got: BTreeMap<String, (BTreeSet<String>, String)> = BTreeMap::new();
    for (name, labels, _) in &series {
        let ty = types.get(name).cloned().unwrap_or_default();
        let e = got
            .entry(name.clone())
            .or_insert_with(|| (set(labels.keys()), ty));
        assert_eq!(
            e.0,
            set(labels.keys()),
            "{name}: label names differ between series"
        );
    }
    assert_eq!(
        got,
        readme_metrics(),
        "exported names/labels/types vs the README table"
    );

    let classes = set(crawlguard_core::identity::class::Class::ALL.map(|c| c.as_str()));
    assert_eq!(values_of(&series, "crawlguard_class", "class"), classes);
    assert_eq!(
        values_of(&series, "crawlguard_class", "decision"),
        set(["allowed", "limited", "shadow_limited", "malformed", "shed"])
    );
    assert_eq!(
        values_of(&series, "crawlguard_limit", "limit"),
        set(["human_per_ip", "crawler_per_ip", "everyone"])
    );
    assert_eq!(
        values_of(&series, "crawlguard_route_limited", "route"),
        set(["api", "default"])
    );
    assert_eq!(
        values_of(&series, "crawlguard_shed_duration_ms", "level"),
        set(["1", "2"])
    );
    let mut bots = set(crawlguard_core::identity::catalog::builtin_bot_ids());
    bots.insert("other".into());
    assert_eq!(values_of(&series, "crawlguard_bot_requests", "bot"), bots);
    assert_eq!(values_of(&series, "crawlguard_bot_rejected", "bot"), bots);

    // The counters agree with what the clients saw.
    for (kind, bot) in [
        ("googlebot", "googlebot"),
        ("gptbot", "gptbot"),
        ("script", "script"),
    ] {
        let s = &sent[kind];
        assert_eq!(
            value(&series, "crawlguard_bot_requests", &[("bot", bot)]),
            s.requests as f64,
            "{kind}"
        );
        assert_eq!(
            value(&series, "crawlguard_bot_rejected", &[("bot", bot)]),
            s.rejected as f64,
            "{kind}"
        );
    }
    let limited = |limit| {
        value(
            &series,
            "crawlguard_limit",
            &[("limit", limit), ("decision", "limited")],
        )
    };
    assert_eq!(limited("human_per_ip"), 2.0);
    assert_eq!(limited("crawler_per_ip"), 2.0);
    assert_eq!(limited("everyone"), 0.0);
    assert_eq!(
        value(
            &series,
            "crawlguard_class",
            &[("class", "search_crawler"), ("decision", "allowed")]
        ),
        5.0
    );
    let shed = value(
        &series,
        "crawlguard_class",
        &[("class", "script"), ("decision", "shed")],
    );
    assert_eq!(shed, script_rejected as f64);
    assert!(
        value(
            &series,
            "crawlguard_shed_duration_ms",
            &[("route", "api"), ("level", "1")]
        ) >= 1_000.0
    );
    assert_eq!(
        value(
            &series,
            "crawlguard_shed_duration_ms",
            &[("route", "default"), ("level", "1")]
        ),
        0.0
    );

    // Prometheus: every dashboard query and every alert's signal returns series.
    let deadline = Duration::from_secs(60);
    for (panel, q) in dashboard_queries() {
        let r = prom.query_until(&q, deadline, |_| true).await;
        eprintln!("panel {panel:?}: {} series: {q}", r.len());
    }
    for (alert, q) in alert_signals() {
        let r = prom.query_until(&q, deadline, |_| true).await;
        eprintln!("alert {alert}: {} series: {q}", r.len());
    }
    // Data, not only series: the verified crawlers' rejections and the shed time.
    prom.query_until(
        r#"sum(crawlguard_limit{job="crawlguard",limit="crawler_per_ip",decision="limited"})"#,
        deadline,
        |r| r[0]["value"][1] == "2",
    )
    .await;
    // Every rule was loaded and evaluates without error.
    let healthy = poll_until(deadline, || async {
        let rules: Vec<Value> = prom
            .rules()
            .await
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (rules.len() == 10 && rules.iter().all(|r| r["health"] == "ok")).then_some(rules)
    })
    .await;
    assert!(
        healthy.is_some(),
        "rules: {:?}\n{}",
        prom.rules().await,
        prom.log()
    );
    envoy.assert_log_clean();
}
