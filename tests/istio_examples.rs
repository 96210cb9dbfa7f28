//! The Istio examples in `envoy/istio/` are what operators copy: they must parse, name the
//! verifier's real outbound cluster, and carry a configuration the filter accepts.

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
    let all = docs("envoy/istio/verifier.yaml");
    assert_eq!(all.len(), 3, "Namespace, Deployment, Service");
    let svc = all
        .iter()
        .find(|d| s(d, &["kind"]) == "Service")
        .expect("a Service");
    let dep = all
        .iter()
        .find(|d| s(d, &["kind"]) == "Deployment")
        .expect("a Deployment");
    let port = get(svc, &["spec", "ports"])
        .get(0)
        .and_then(|p| p.get("port"))
        .and_then(Value::as_u64)
        .expect("service port");
    assert_eq!(port, 9090);
    // The Deployment really listens where the Service sends traffic.
    let container = get(dep, &["spec", "template", "spec", "containers"])
        .get(0)
        .expect("a container");
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

fn check_wasmplugin(rel: &str, url_scheme: &str) {
    let all = docs(rel);
    assert_eq!(all.len(), 1);
    let wp = &all[0];
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
    let cfg = crawlguard::config::parse(&plugin_cfg)
        .unwrap_or_else(|e| panic!("{rel}: pluginConfig refused: {e}"));
    assert_eq!(cfg.verifier.cluster, verifier_cluster(), "{rel}");
    assert_eq!(
        cfg.verifier.authority,
        "crawlguard-verifier.crawlguard-system.svc.cluster.local"
    );

    // The full default configuration, but for the verifier address.
    let default = crawlguard::config::parse(b"").expect("default");
    assert_eq!(cfg.limits, default.limits);
    assert_eq!(cfg.classes, default.classes);
    assert_eq!(cfg.exempt_paths, default.exempt_paths);
    assert_eq!(cfg.store, default.store);
    assert_eq!(cfg.rewrite, default.rewrite);
    assert_eq!(cfg.client_ip, default.client_ip);
    assert_eq!(cfg.verifier.timeout_ms, default.verifier.timeout_ms);
}

#[test]
fn oci_wasmplugin_is_valid() {
    check_wasmplugin("envoy/istio/wasmplugin.yaml", "oci://");
}

#[test]
fn file_wasmplugin_is_valid() {
    check_wasmplugin("envoy/istio/wasmplugin-file.yaml", "file:///");
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
