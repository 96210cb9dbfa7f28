//! `crawlguard report --baseline FILE.json`: an earlier `report --json` document, read and
//! checked before any log is (exit status 2 when it is not one, or compares nothing).

/// An earlier `report --json` document; the error says why it is not one.
pub fn read(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let name = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{name}: not JSON: {e}"))?;
    if v["schema"] != super::SCHEMA {
        return Err(format!(
            "{name}: not a `crawlguard report --json` document (schema {})",
            super::SCHEMA
        ));
    }
    baseline_classes_are_sound(&v).map_err(|e| format!("{name}: {e}"))?;
    Ok(v)
}

/// A baseline compares nothing unless it has classes, and a nonsense count or share would
/// print a nonsense change: `classes` must be a non-empty array of distinct classes, each
/// with a whole `requests` and a 2xx share in 0..=1 (what `report --json` writes).
fn baseline_classes_are_sound(v: &serde_json::Value) -> Result<(), String> {
    let classes = v["classes"]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or("no classes to compare (an empty log's report cannot be a baseline)")?;
    let mut seen = std::collections::HashSet::new();
    for (i, c) in classes.iter().enumerate() {
        let name = c["class"]
            .as_str()
            .ok_or_else(|| format!("classes[{i}]: no class name"))?;
        if !seen.insert(name) {
            return Err(format!("classes[{i}]: class {name:?} listed twice"));
        }
        if c["requests"].as_u64().is_none() {
            return Err(format!(
                "classes[{i}].requests: not a whole number of requests"
            ));
        }
        if let Some(share) = c["share"].get("2xx") {
            if !share.as_f64().is_some_and(|s| (0.0..=1.0).contains(&s)) {
                return Err(format!("classes[{i}].share.2xx: not a share in 0..1"));
            }
        }
    }
    Ok(())
}
