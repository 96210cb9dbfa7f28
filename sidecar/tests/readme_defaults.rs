//! The configuration table of `sidecar/README.md` states the defaults the sidecar really has:
//! every key `--print-default-config` prints (the one source, `src/config.rs`) has a row
//! whose default column is that value, and every row's key is a real one.

use std::collections::BTreeMap;
use std::process::Command;

/// Flattens a TOML table to `section.key` -> value as the README writes it (strings
/// unquoted, arrays as TOML), leaving out the `[[bots]]` list (the built-in catalog).
fn flatten(table: &toml::Table, prefix: &str, out: &mut BTreeMap<String, String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(t, &key, out),
            toml::Value::Array(a) if a.iter().any(toml::Value::is_table) => {}
            toml::Value::String(s) => {
                out.insert(key, s.clone());
            }
            other => {
                out.insert(key, other.to_string());
            }
        }
    }
}

/// The README table's rows as `key` -> default: backticked names in the first column
/// (several, split by ` / `, take the backticked defaults of the second in order);
/// `[[bots]]` rows and defaults without a backticked value (`none`, `built-in`) are skipped.
fn readme_defaults(readme: &str) -> BTreeMap<String, String> {
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, s)| s.to_string())
            .collect()
    };
    let mut out = BTreeMap::new();
    let table = readme
        .split("| key | default | meaning |")
        .nth(1)
        .expect("sidecar/README.md has the configuration table");
    for line in table.lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        let (Some(keys), Some(defaults)) = (cells.first(), cells.get(1)) else {
            continue;
        };
        if keys.contains("[[bots]]") {
            continue;
        }
        let keys = ticked(keys);
        let defaults = ticked(defaults);
        for (i, k) in keys.iter().enumerate() {
            if let Some(d) = defaults.get(i) {
                out.insert(k.clone(), d.clone());
            } else {
                out.insert(k.clone(), String::new());
            }
        }
    }
    out
}

#[test]
fn readme_configuration_table_states_the_printed_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .arg("--print-default-config")
        .output()
        .expect("run crawlguard-sidecar --print-default-config");
    assert!(out.status.success(), "{out:?}");
    let printed: toml::Table =
        toml::from_str(&String::from_utf8_lossy(&out.stdout)).expect("the printout is TOML");
    let mut defaults = BTreeMap::new();
    flatten(&printed, "", &mut defaults);
    // The printout spells the catalog out, so it says `replace`; the default is `merge`.
    assert_eq!(
        defaults.insert("bots_mode".into(), "merge".into()),
        Some("replace".into())
    );

    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read sidecar/README.md");
    let documented = readme_defaults(&readme);
    for (key, value) in &defaults {
        assert_eq!(
            documented.get(key),
            Some(value),
            "sidecar/README.md's row for `{key}` (the sidecar's default: {value})"
        );
    }
    // Rows for keys the printout has no value for: only `redis.url` (unset: fleet mode off).
    let extra: Vec<&String> = documented
        .keys()
        .filter(|k| !defaults.contains_key(*k))
        .collect();
    assert_eq!(
        extra,
        ["redis.url"],
        "README rows without a default in the sidecar"
    );
    assert!(defaults.len() >= 20, "{defaults:?}");
}
