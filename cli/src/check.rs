//! `crawlguard check-config`: validates a filter configuration with exactly the code the
//! filter's `on_configure` runs ([`crawlguard::config::parse`]), from
//! - a JSON document (what Envoy passes as `configuration`; empty = the embedded default),
//! - an Istio `WasmPlugin` YAML (its `spec.pluginConfig`, turned into the JSON Istio hands
//!   the filter; several documents in one file are each checked),
//! - an Envoy YAML with the wasm filter (each `configuration` `StringValue`'s `value`).

use crawlguard::config::{self, Config};
use serde_yaml_ng::Value;

/// One configuration found in the input and its verdict.
#[derive(Debug)]
pub struct Checked {
    /// Where in the input it was (`<json>`, `WasmPlugin crawlguard`, ...).
    pub what: String,
    /// The filter's verdict.
    pub result: Result<Config, config::ConfigError>,
}

/// Why nothing could be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Finds and validates every filter configuration in `bytes`.
pub fn check(bytes: &[u8]) -> Result<Vec<Checked>, InputError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    // JSON (or empty, which the filter reads as the embedded default): the bytes as they are,
    // exactly what Envoy would hand on_configure.
    if matches!(first, None | Some(b'{') | Some(b'[')) {
        return Ok(vec![Checked {
            what: "configuration".into(),
            result: config::parse(bytes),
        }]);
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| InputError(format!("neither JSON nor UTF-8 YAML: {e}")))?;
    let mut found = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| InputError(format!("YAML document {}: {e}", i + 1)))?;
        if v.get("kind").and_then(Value::as_str) == Some("WasmPlugin") {
            let name = v
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            let plugin = v.get("spec").and_then(|s| s.get("pluginConfig"));
            let result = match plugin {
                // Istio passes nothing: the filter uses its embedded default.
                None | Some(Value::Null) => config::parse(b""),
                Some(p) => match serde_json::to_vec(p) {
                    Ok(json) => config::parse(&json),
                    Err(e) => {
                        return Err(InputError(format!(
                            "WasmPlugin {name}: pluginConfig is not representable as JSON: {e}"
                        )))
                    }
                },
            };
            found.push(Checked {
                what: format!("WasmPlugin {name} (spec.pluginConfig)"),
                result,
            });
        } else {
            let mut values = Vec::new();
            string_value_configs(&v, &mut values);
            for (n, s) in values.into_iter().enumerate() {
                found.push(Checked {
                    what: format!("Envoy wasm filter configuration #{}", n + 1),
                    result: config::parse(s.as_bytes()),
                });
            }
        }
    }
    if found.is_empty() {
        return Err(InputError(
            "no filter configuration found: expected a JSON document, an Istio WasmPlugin \
             (kind: WasmPlugin, spec.pluginConfig) or an Envoy YAML with a wasm filter \
             configuration (google.protobuf.StringValue)"
                .into(),
        ));
    }
    Ok(found)
}

/// Every `configuration: {"@type": ...StringValue, value: "..."}` under a wasm filter
/// (`envoy.extensions.filters.http.wasm.v3.Wasm`) in an Envoy YAML tree.
fn string_value_configs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            let is_wasm = m
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("envoy.extensions.filters.http.wasm.v3.Wasm"));
            if is_wasm {
                let c = m.get("config").and_then(|c| c.get("configuration"));
                // No configuration (or no value) is the empty string: the embedded default.
                let value = c.and_then(|c| c.get("value")).and_then(Value::as_str);
                out.push(value.unwrap_or_default().to_string());
                return;
            }
            for (_, child) in m {
                string_value_configs(child, out);
            }
        }
        Value::Sequence(s) => {
            for child in s {
                string_value_configs(child, out);
            }
        }
        Value::Tagged(t) => string_value_configs(&t.value, out),
        _ => {}
    }
}

/// One line describing an accepted configuration (as the filter logs it at load).
pub fn summary(c: &Config) -> String {
    format!(
        "mode {}, {} limits, {} routes, {} bots, {} bucket slots, verifier {}",
        match c.mode {
            config::Mode::Enforce => "enforce",
            config::Mode::Shadow => "shadow",
        },
        c.limits.len(),
        c.routes.len(),
        c.classifier.entries().len(),
        c.store.slots,
        if c.verifier.enabled {
            format!("cluster {:?}", c.verifier.cluster)
        } else {
            "disabled".into()
        }
    )
}
