//! The monitoring files agree with each other and with the filter (README, "Monitoring"):
//! one `stats_tags` block in every shipped Envoy configuration and the Istio bootstrap, the
//! Istio `proxyStatsMatcher` covering every crawlguard stat, the `PrometheusRule` holding
//! the rules file's groups, each alert named in the README's "Operating it" table with a
//! runbook link to it, and the dashboard's queries all on exported names. What Envoy and
//! Prometheus make of them is `integration/tests/prometheus.rs`.

use serde_yaml_ng::Value;
use std::path::Path;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(text: &str, what: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// `stats_config.stats_tags` of a YAML Envoy configuration (the compose template's
/// `@NAME@` placeholders replaced first).
fn stats_tags_of(rel: &str) -> Value {
    let mut text = read(rel);
    // `@ENVOY_PORT@` and the like (not `"@type"`).
    let mut from = 0;
    while let Some(i) = text[from..].find('@').map(|i| i + from) {
        let name_len = text[i + 1..]
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(0);
        if name_len > 0 && text[i + 1 + name_len..].starts_with('@') {
            text.replace_range(i..=i + 1 + name_len, "1");
        } else {
            from = i + 1;
        }
    }
    yaml(&text, rel)["stats_config"]["stats_tags"].clone()
}

#[test]
fn every_envoy_configuration_and_the_istio_bootstrap_have_the_same_stats_tags() {
    let tags = stats_tags_of("envoy/envoy.yaml");
    assert_eq!(tags.as_sequence().map(Vec::len), Some(8), "{tags:?}");
    for rel in [
        "envoy/envoy-tls.yaml",
        "envoy/envoy-local-ratelimit.yaml",
        "integration/compose/envoy.yaml.in",
    ] {
        assert_eq!(stats_tags_of(rel), tags, "{rel}");
    }
    let cm = yaml(&read("envoy/istio/stats.yaml"), "stats.yaml");
    let boot: serde_json::Value = serde_json::from_str(
        cm["data"]["custom_bootstrap.json"]
            .as_str()
            .expect("custom_bootstrap.json"),
    )
    .expect("bootstrap JSON");
    let boot_tags: Value =
        serde_json::from_value(boot["stats_config"]["stats_tags"].clone()).expect("tags");
    assert_eq!(boot_tags, tags, "envoy/istio/stats.yaml");
    assert_eq!(cm["metadata"]["name"], "crawlguard-envoy-stats");
}

#[test]
fn istio_lets_every_crawlguard_stat_out_of_the_proxy() {
    let patch = yaml(&read("envoy/istio/stats-gateway-patch.yaml"), "patch");
    let ann = &patch["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        ann["sidecar.istio.io/bootstrapOverride"],
        "crawlguard-envoy-stats"
    );
    let proxy = yaml(
        ann["proxy.istio.io/config"].as_str().expect("proxy config"),
        "proxy.istio.io/config",
    );
    let prefixes: Vec<&str> = proxy["proxyStatsMatcher"]["inclusionPrefixes"]
        .as_sequence()
        .expect("inclusionPrefixes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let cfg = crawlguard_core::config::parse(
        br#"{"shedding":{"enabled":true},"fleet":{"enabled":true},"store":{"hash_seed":1}}"#,
    )
    .expect("config");
    for name in crawlguard_core::metrics::names(&cfg) {
        // Envoy names a wasm module's stats wasmcustom.<name>.
        let full = format!("wasmcustom.{name}");
        assert!(
            prefixes.iter().any(|p| full.starts_with(p)),
            "{full} is not exported by {prefixes:?}"
        );
    }
}

/// The alerts of the rules file: (name, runbook_url).
fn alerts(groups: &Value) -> Vec<(String, String)> {
    groups
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["alert"].as_str().expect("alert").to_string(),
                r["annotations"]["runbook_url"]
                    .as_str()
                    .expect("runbook_url")
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn the_prometheus_rule_holds_the_rules_file_and_the_readme_names_every_alert() {
    let file = yaml(&read("deploy/prometheus/crawlguard-alerts.yaml"), "rules");
    let cr = yaml(
        &read("deploy/prometheus/crawlguard-prometheusrule.yaml"),
        "rule",
    );
    assert_eq!(cr["kind"], "PrometheusRule");
    assert_eq!(cr["spec"]["groups"], file["groups"]);
    let readme = read("README.md");
    let operating = readme
        .split("\n## Operating it\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("Operating it");
    let named: Vec<String> = operating
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let last = l.trim_end_matches('|').rsplit(" | ").next()?.trim();
            last.strip_prefix('`')?
                .strip_suffix('`')
                .map(str::to_string)
        })
        .collect();
    let alerts = alerts(&file["groups"]);
    assert_eq!(alerts.len(), 10);
    let names: Vec<String> = alerts.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(named, names, "the README table's rule column, in order");
    // The runbook is the row naming the alert, in the section the link opens.
    assert!(readme.contains("\n## Operating it\n"));
    for (name, url) in alerts {
        assert_eq!(url, "README.md#operating-it", "{name}");
    }
}

#[test]
fn the_dashboard_has_every_panel_the_issue_asks_for() {
    let d: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/crawlguard-dashboard.json")).expect("JSON");
    let titles: Vec<&str> = d["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    for t in [
        "Decisions per class",
        "Rejection share of verified crawlers",
        "Shed level per route",
        "Origin latency per route",
        "Verifier errors",
        "Stale verdicts",
        "Verifier latency",
        "Fleet replicas",
        "Fleet degraded",
        "Fleet sync errors",
        "Top limits by rejections",
    ] {
        assert!(titles.contains(&t), "no panel {t:?}: {titles:?}");
    }
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "job"]);
}
