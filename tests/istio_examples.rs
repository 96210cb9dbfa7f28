//! The Istio examples in `envoy/istio/` are what operators copy: they must parse, name the
//! verifier's real outbound cluster, and carry a configuration the filter accepts, with
//! fleet mode off and (with `fleet-patch.yaml` applied) on; the example Redis, its Secret
//! and the verifier's reference to it must agree.

use serde_yaml_ng::Value;
use std::path::Path;

fn docs(rel: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .collect()
}

fn get<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .fold(v, |v, k| v.get(*k).unwrap_or(&Value::Null))
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path).as_str().unwrap_or_default()
}

/// `outbound|<port>||<name>.<namespace>.svc.cluster.local` of the verifier Service.
fn verifier_cluster() -> String {
    let all = docs("envoy/istio/sidecar.yaml");
    assert_eq!(all.len(), 3, "Namespace, Deployment, Service");
    let svc = all
        .iter()
        .find(|d| s(d, &["kind"]) == "Service")
        .expect("a Service");
    let port = get(svc, &["spec", "ports"])
        .get(0)
        .and_then(|p| p.get("port"))
        .and_then(Value::as_u64)
        .expect("service port");
    assert_eq!(port, 9090);
    // The Deployment really listens where the Service sends traffic.
    let container = verifier_container();
    let args: Vec<&str> = container
        .get("args")
        .and_then(Value::as_sequence)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(args, ["--listen", "0.0.0.0:9090"]);
    format!(
        "outbound|{port}||{}.{}.svc.cluster.local",
        s(svc, &["metadata", "name"]),
        s(svc, &["metadata", "namespace"])
    )
}

/// The verifier Deployment's first container.
fn verifier_container() -> Value {
    let all = docs("envoy/istio/sidecar.yaml");
    let dep = all
        .iter()
        .find(|d| s(d, &["kind"]) == "Deployment")
        .expect("a Deployment");
    get(dep, &["spec", "template", "spec", "containers"])
        .get(0)
        .expect("a container")
        .clone()
}

/// RFC 7386 JSON merge patch (what `kubectl patch --type merge` applies to a custom
/// resource): mappings merge key by key, `null` deletes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_mapping() else {
        *target = patch.clone();
        return;
    };
    if !target.is_mapping() {
        *target = Value::Mapping(Default::default());
    }
    let map = target.as_mapping_mut().expect("a mapping");
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Checks a WasmPlugin document; returns the filter configuration it carries.
fn check_wasmplugin(rel: &str, url_scheme: &str) -> crawlguard_core::config::Config {
    let all = docs(rel);
    assert_eq!(all.len(), 1);
    check_wasmplugin_doc(rel, &all[0], url_scheme)
}

fn check_wasmplugin_doc(
    rel: &str,
    wp: &Value,
    url_scheme: &str,
) -> crawlguard_core::config::Config {
    assert_eq!(s(wp, &["apiVersion"]), "extensions.istio.io/v1alpha1");
    assert_eq!(s(wp, &["kind"]), "WasmPlugin");
    assert!(
        s(wp, &["spec", "url"]).starts_with(url_scheme),
        "{rel}: url"
    );
    assert_eq!(s(wp, &["spec", "phase"]), "AUTHN");
    assert_eq!(s(wp, &["spec", "failStrategy"]), "FAIL_OPEN");
    assert_eq!(get(wp, &["spec", "priority"]).as_u64(), Some(100));

    // pluginConfig is handed to the filter as JSON: the filter's own validator must accept it.
    let plugin_cfg = serde_json::to_vec(get(wp, &["spec", "pluginConfig"])).expect("to JSON");
    let cfg = crawlguard_core::config::parse(&plugin_cfg)
        .unwrap_or_else(|e| panic!("{rel}: pluginConfig refused: {e}"));
    assert_eq!(cfg.verifier.cluster, verifier_cluster(), "{rel}");
    assert_eq!(
        cfg.verifier.authority,
        "crawlguard-sidecar.crawlguard-system.svc.cluster.local"
    );

    // The full default configuration, but for the verifier address.
    let default = crawlguard_core::config::parse(b"").expect("default");
    assert_eq!(cfg.limits, default.limits);
    assert_eq!(cfg.classes, default.classes);
    assert_eq!(cfg.exempt_paths, default.exempt_paths);
    assert_eq!(cfg.exempt_limit, default.exempt_limit);
    // The store too, but for a seed (the fleet patch sets one: fleet mode needs it).
    let mut store = cfg.store;
    store.hash_seed = None;
    assert_eq!(store, default.store);
    assert_eq!(cfg.rewrite, default.rewrite);
    assert_eq!(cfg.client_ip, default.client_ip);
    assert_eq!(cfg.verifier.timeout_ms, default.verifier.timeout_ms);
    // Fleet syncs go to the same Service; the rest of the section is the default.
    assert_eq!(cfg.fleet.cluster, cfg.verifier.cluster, "{rel}");
    assert_eq!(cfg.fleet.authority, cfg.verifier.authority, "{rel}");
    let mut fleet = cfg.fleet.clone();
    fleet.cluster.clone_from(&default.fleet.cluster);
    fleet.authority.clone_from(&default.fleet.authority);
    fleet.enabled = default.fleet.enabled;
    assert_eq!(fleet, default.fleet, "{rel}");
    cfg
}

#[test]
fn oci_wasmplugin_is_valid() {
    let cfg = check_wasmplugin("envoy/istio/wasmplugin.yaml", "oci://");
    assert!(!cfg.fleet.enabled, "fleet mode is off in the main manifest");
}

#[test]
fn file_wasmplugin_is_valid() {
    let cfg = check_wasmplugin("envoy/istio/wasmplugin-file.yaml", "file:///");
    assert!(!cfg.fleet.enabled, "fleet mode is off in the main manifest");
}

#[test]
fn the_fleet_patch_turns_fleet_mode_on_and_keeps_the_rest() {
    let patch = docs("envoy/istio/fleet-patch.yaml");
    assert_eq!(patch.len(), 1);
    for (rel, scheme) in [
        ("envoy/istio/wasmplugin.yaml", "oci://"),
        ("envoy/istio/wasmplugin-file.yaml", "file:///"),
    ] {
        let mut wp = docs(rel).remove(0);
        let before = crawlguard_core::config::parse(
            &serde_json::to_vec(get(&wp, &["spec", "pluginConfig"])).expect("to JSON"),
        )
        .expect("pluginConfig");
        merge_patch(&mut wp, &patch[0]);
        let after = check_wasmplugin_doc(rel, &wp, scheme);
        assert!(after.fleet.enabled, "{rel}");
        // Nothing but fleet.enabled and the seed fleet mode needs changed.
        let mut fleet = after.fleet.clone();
        fleet.enabled = false;
        assert_eq!(fleet, before.fleet, "{rel}");
        assert_eq!(after.limits, before.limits, "{rel}");
        assert_eq!(after.verifier, before.verifier, "{rel}");
        assert_eq!(before.store.hash_seed, None, "{rel}");
        assert_eq!(after.store.hash_seed, Some(3_141_592_653_589_793), "{rel}");
        let mut store = after.store;
        store.hash_seed = None;
        assert_eq!(store, before.store, "{rel}");
    }
}

#[test]
fn the_verifier_reads_redis_from_the_example_secret_which_names_the_example_redis() {
    let all = docs("envoy/istio/redis-example.yaml");
    assert_eq!(all.len(), 3, "Secret, Deployment, Service");
    let find = |kind: &str| {
        all.iter()
            .find(|d| s(d, &["kind"]) == kind)
            .unwrap_or_else(|| panic!("a {kind}"))
    };
    let (secret, dep, svc) = (find("Secret"), find("Deployment"), find("Service"));
    for d in &all {
        assert_eq!(s(d, &["metadata", "namespace"]), "crawlguard-system");
        // Labelled as an example, not as something to run in production.
        assert_eq!(
            s(d, &["metadata", "labels", "crawlguard.example/only"]),
            "true"
        );
    }

    // The verifier: CRAWLGUARD_SIDECAR_REDIS from the Secret's `url`, optional (the
    // verifier runs without Redis until the Secret exists).
    let container = verifier_container();
    let env = container
        .get("env")
        .and_then(Value::as_sequence)
        .expect("verifier env");
    let redis_env = env
        .iter()
        .find(|e| s(e, &["name"]) == "CRAWLGUARD_SIDECAR_REDIS")
        .expect("CRAWLGUARD_SIDECAR_REDIS");
    let key_ref = get(redis_env, &["valueFrom", "secretKeyRef"]);
    assert_eq!(s(key_ref, &["name"]), s(secret, &["metadata", "name"]));
    assert_eq!(s(key_ref, &["key"]), "url");
    assert_eq!(get(key_ref, &["optional"]).as_bool(), Some(true));

    // The URL: redis://:<password>@<Service FQDN>:<Service port>/0, the password Redis
    // is started with.
    let url = s(secret, &["stringData", "url"]);
    let password = s(secret, &["stringData", "password"]);
    assert!(!password.is_empty());
    let port = get(svc, &["spec", "ports"])
        .get(0)
        .and_then(|p| p.get("port"))
        .and_then(Value::as_u64)
        .expect("service port");
    assert_eq!(
        url,
        format!(
            "redis://:{password}@{}.{}.svc.cluster.local:{port}/0",
            s(svc, &["metadata", "name"]),
            s(svc, &["metadata", "namespace"])
        )
    );

    // One Redis pod, selected by the Service, listening where it sends traffic, with the
    // Secret's password.
    assert_eq!(get(dep, &["spec", "replicas"]).as_u64(), Some(1));
    let labels = get(dep, &["spec", "template", "metadata", "labels"]);
    let selector = get(svc, &["spec", "selector"]);
    assert_eq!(labels, selector);
    let redis = get(dep, &["spec", "template", "spec", "containers"])
        .get(0)
        .expect("redis container");
    let target = get(svc, &["spec", "ports"])
        .get(0)
        .and_then(|p| p.get("targetPort"))
        .and_then(Value::as_str)
        .expect("a named targetPort");
    let container_port = redis
        .get("ports")
        .and_then(Value::as_sequence)
        .and_then(|p| p.iter().find(|p| s(p, &["name"]) == target))
        .and_then(|p| p.get("containerPort"))
        .and_then(Value::as_u64);
    assert_eq!(container_port, Some(port));
    let pw_env = redis
        .get("env")
        .and_then(Value::as_sequence)
        .and_then(|e| e.iter().find(|e| s(e, &["name"]) == "REDIS_PASSWORD"))
        .expect("REDIS_PASSWORD");
    let pw_ref = get(pw_env, &["valueFrom", "secretKeyRef"]);
    assert_eq!(s(pw_ref, &["name"]), s(secret, &["metadata", "name"]));
    assert_eq!(s(pw_ref, &["key"]), "password");
    let args: Vec<&str> = redis
        .get("args")
        .and_then(Value::as_sequence)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(args[0], "redis-server");
    let requirepass = args.iter().position(|a| *a == "--requirepass");
    assert_eq!(
        requirepass.and_then(|i| args.get(i + 1)),
        Some(&"$(REDIS_PASSWORD)")
    );
}

#[test]
fn oci_artifact_dockerfile_ships_the_module_as_plugin_wasm() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("envoy/istio/Dockerfile"),
    )
    .expect("Dockerfile");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(
        lines,
        [
            "FROM scratch",
            "COPY target/wasm32-wasip1/release/crawlguard.wasm ./plugin.wasm"
        ]
    );
}
