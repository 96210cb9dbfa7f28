//! `crawlguard check-config`: validates a filter configuration with exactly the code the
//! filter's `on_configure` runs ([`crawlguard_core::config::parse`]), from
//! - a JSON document (what Envoy passes as `configuration`; empty = the embedded default),
//! - an Istio `WasmPlugin` YAML (its `spec.pluginConfig`, turned into the JSON Istio hands
//!   the filter; several documents in one file are each checked),
//! - an Envoy YAML with the wasm filter (each `configuration` `StringValue`'s `value`).

use crawlguard_core::config::{self, Config};
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
    if let Some(line) = flow_nesting_exceeds(text, MAX_YAML_DEPTH) {
        // Refused before the parser sees it: its cost grows with the square of the depth
        // (195 KiB of `[` took 36 s), and a configuration never nests this deep.
        return Err(InputError(format!(
            "YAML nests deeper than {MAX_YAML_DEPTH} levels of [ ] or {{ }} (line {line})"
        )));
    }
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

/// Deepest flow nesting (`[`, `{`) a YAML input may have: the YAML parser's own recursion
/// limit, and serde_json's, so nothing a parser would accept is refused.
pub const MAX_YAML_DEPTH: usize = 128;

/// The 1-based line where `text`'s `[`/`{` first nest deeper than `max`, if they do. Every
/// bracket counts, in quoted and block scalars and comments too: telling those apart needs
/// the parser's own rules (a quote starts a scalar only at its start), and a guess lets a
/// stray quote hide the nesting that follows it. A configuration has no reason to hold 129
/// unclosed brackets in a row, even as text. One pass, no allocation.
fn flow_nesting_exceeds(text: &str, max: usize) -> Option<usize> {
    let (mut depth, mut line) = (0usize, 1usize);
    for b in text.bytes() {
        match b {
            b'\n' => line += 1,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(line);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
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

/// A mode as the configuration spells it: `enforce` or `shadow`.
/// One line describing an accepted configuration (as the filter logs it at load).
pub fn summary(c: &Config) -> String {
    format!(
        "mode {}, {} limits, {} routes, {} bots, {} bucket slots, verifier {}",
        c.mode.as_str(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_nesting_is_bounded_wherever_the_brackets_are() {
        let nested = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(flow_nesting_exceeds(&nested(128), 128), None);
        assert_eq!(flow_nesting_exceeds(&nested(129), 128), Some(1));
        let deep_maps = format!("x: 1\ny: {}1{}\n", "{k: ".repeat(200), "}".repeat(200));
        assert_eq!(flow_nesting_exceeds(&deep_maps, 128), Some(2));
        // A stray quote or a comment hides nothing (the review's bypass: `k: a 'b`).
        for prefix in [
            "k: a 'b\nm: ",
            "k: say \"hi\nm: ",
            "# '\nm: ",
            "k: \"x #\", ",
        ] {
            let text = format!("{prefix}{}{}\n", "[".repeat(200), "]".repeat(200));
            assert!(flow_nesting_exceeds(&text, 128).is_some(), "{prefix:?}");
        }
        // Many brackets that close again are fine, however many.
        let wide = "[[]] ".repeat(10_000);
        assert_eq!(flow_nesting_exceeds(&wide, 128), None);
    }

    #[test]
    fn deep_yaml_is_refused_before_it_is_parsed() {
        // 100,000 levels: the parser would take minutes; the scan refuses it at once.
        let text = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            check(text.as_bytes()).map(|_| ()),
            Err(InputError(
                "YAML nests deeper than 128 levels of [ ] or { } (line 1)".into()
            ))
        );
    }
}
