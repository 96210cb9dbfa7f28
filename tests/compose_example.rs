//! The docker-compose suite (`integration/docker-compose.yml`, `make test-compose`) runs a
//! fleet of two Envoys whose filter configuration lives in `integration/compose/envoy.yaml.in`
//! and whose expectations are constants in `integration/compose/tester.sh`. The suite needs
//! podman and takes a while; these checks keep its files in agreement on every `cargo test`:
//! the configuration is one the filter accepts, and the bound the tester allows is the
//! contract's bound for that configuration.

use crawlguard_contract::fleet::overshoot_bound;
use crawlguard_core::config::KeyKind;
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::classify::Classifier;
use serde_yaml_ng::Value;

fn read(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The crawlguard filter configuration of `envoy.yaml.in` (placeholders filled with ports).
fn compose_filter_config() -> crawlguard_core::config::Config {
    let text = read("integration/compose/envoy.yaml.in");
    let rendered = [
        "ENVOY_PORT",
        "ENVOY_ADMIN_PORT",
        "UPSTREAM_PORT",
        "VERIFIER_PORT",
        "DNS_PORT",
    ]
    .iter()
    .fold(text, |t, p| t.replace(&format!("@{p}@"), "10000"));
    let doc: Value = serde_yaml_ng::from_str(&rendered).expect("envoy.yaml.in parses");
    let filters = &doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"]["http_filters"];
    let wasm = filters
        .as_sequence()
        .expect("http_filters")
        .iter()
        .find(|f| f["name"].as_str() == Some("envoy.filters.http.wasm"))
        .expect("the wasm filter");
    let value = wasm["typed_config"]["config"]["configuration"]["value"]
        .as_str()
        .expect("configuration value");
    crawlguard_core::config::parse(value.as_bytes())
        .unwrap_or_else(|e| panic!("envoy.yaml.in: configuration refused: {e}"))
}

/// `NAME=<value>` assigned in tester.sh (a plain constant, not an environment default).
fn tester_const(name: &str) -> String {
    let text = read("integration/compose/tester.sh");
    let prefix = format!("{name}=");
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("tester.sh sets no {name}"));
    line[prefix.len()..]
        .trim_matches(|c| c == '\'' || c == '"')
        .to_string()
}

fn tester_num(name: &str) -> u64 {
    let v = tester_const(name);
    v.parse()
        .unwrap_or_else(|_| panic!("tester.sh: {name}={v} is not a number"))
}

#[test]
fn compose_envoys_run_fleet_mode_through_their_sidecar() {
    let cfg = compose_filter_config();
    assert!(cfg.fleet.enabled);
    // Syncs go to the cluster verification uses: each replica's own sidecar.
    assert_eq!(cfg.fleet.cluster, cfg.verifier.cluster);
    assert_eq!(
        u64::from(cfg.fleet.sync_interval_ms),
        tester_num("FLEET_SYNC_INTERVAL_MS")
    );
    // The compose file runs as many Envoys as the tester expects replicas.
    let mut compose: Value =
        serde_yaml_ng::from_str(&read("integration/docker-compose.yml")).expect("compose file");
    compose.apply_merge().expect("`<<` merge keys");
    let envoys = compose["services"]
        .as_mapping()
        .expect("services")
        .values()
        .filter(|s| {
            s["entrypoint"].as_sequence().is_some_and(|e| {
                e.iter().any(|a| {
                    a.as_str()
                        .is_some_and(|a| a.ends_with("envoy-entrypoint.sh"))
                })
            })
        })
        .count();
    assert_eq!(envoys as u64, tester_num("FLEET_REPLICAS"));
}

#[test]
fn the_tester_allows_exactly_the_contracts_overshoot_for_the_compose_fleet() {
    let cfg = compose_filter_config();
    // The fleet check's client is a MojeekBot: class other_bot, no verifier callout.
    let ua = tester_const("UA_MOJEEK");
    let classifier = Classifier::new(crawlguard_core::identity::catalog::builtin_catalog());
    let c = classifier.classify(Some(ua.as_bytes()));
    assert_eq!(c.class, Class::OtherBot, "{ua}");
    assert!(!c.bot.expect("a catalog entry").verify);
    // Its one per-address limit is the one the tester's constants describe; the aggregate
    // one (per /24) admits more in rate and burst, so for one client from one
    // address that one binds.
    let (per_address, aggregate): (Vec<_>, Vec<_>) = cfg
        .limits
        .iter()
        .filter(|l| l.class.is_none_or(|k| k == Class::OtherBot))
        .partition(|l| l.key == KeyKind::ClientIp && l.address_prefix.is_none());
    assert_eq!(per_address.len(), 1, "{per_address:?}");
    let l = per_address[0].bucket.expect("a token bucket");
    assert_eq!(aggregate.len(), 1, "{aggregate:?}");
    for a in aggregate {
        let a = a.bucket.expect("a token bucket");
        assert!(a.rate_per_s > l.rate_per_s && a.burst > l.burst, "{a:?}");
    }
    assert_eq!(u64::from(l.burst), tester_num("FLEET_BURST"));
    assert_eq!(l.rate_per_s, tester_num("FLEET_RATE_PER_S") as f64);
    // No escalation: a penalty would reject requests the limit admits.
    assert!(!cfg.policy(Class::OtherBot).escalation.enabled);

    let replicas = u32::try_from(tester_num("FLEET_REPLICAS")).expect("replicas");
    let bound = overshoot_bound(replicas, l.rate_per_s, l.burst, cfg.fleet.sync_interval_ms);
    // The tester's constant is the bound in milli-tokens, rounded up.
    assert_eq!(
        tester_num("FLEET_OVERSHOOT_MILLI"),
        (bound * 1000.0).ceil() as u64,
        "bound {bound}"
    );
}
