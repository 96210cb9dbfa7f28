//! The README's catalog and stats tables are what operators read; keep them true.

use crawlguard_contract::catalog::{begin_marker, end_marker, Catalog};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap_or_default()
}

/// The catalog tables are rendered from `contract/catalog/bots.json`; the README must carry
/// exactly that rendering, so an edit of the data file without the README (or the other way
/// round) fails here.
#[test]
fn readme_catalog_tables_are_generated_from_the_data_file() {
    let text = readme();
    let catalog = Catalog::builtin().expect("the embedded catalog loads");
    for (name, block) in catalog.readme_blocks() {
        assert!(
            text.contains(&block),
            "README block {name:?} differs from contract/catalog/bots.json; regenerate it with\n  \
             cargo run -q -p crawlguard-contract --example catalog_tables -- --write README.md\n\
             expected:\n{block}"
        );
    }
}

/// The filter's matcher and the README's table are both the data file, in the same order.
#[test]
fn readme_bot_table_lists_the_filters_catalog_in_match_order() {
    let text = readme();
    let (begin, end) = (begin_marker("bot table"), end_marker("bot table"));
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != begin)
        .take_while(|l| *l != end)
        .filter(|l| l.starts_with("| `"))
        .collect();
    let catalog = crawlguard_core::identity::catalog::builtin_catalog();
    assert_eq!(rows.len(), catalog.len());
    for (row, b) in rows.iter().zip(&catalog) {
        let start = format!(
            "| `{}` | {} | {} | ",
            b.id,
            b.class.as_str(),
            if b.verify { "yes" } else { "no" }
        );
        assert!(row.starts_with(&start), "{row} is not {start}...");
    }
}

#[test]
fn readme_documents_every_stat_family() {
    let text = readme();
    // Every optional family too: shedding (with a route) and fleet mode on.
    let cfg = crawlguard_core::config::parse(
        br#"{"routes":[{"name":"api","path_prefix":"/api"}],
             "shedding":{"enabled":true},"fleet":{"enabled":true},"store":{"hash_seed":4242}}"#,
    )
    .expect("config");
    for name in crawlguard_core::metrics::names(&cfg) {
        let name = [".api.", ".default."]
            .iter()
            .fold(name.clone(), |n, r| n.replace(r, ".<route>."));
        // Per-bot and per-limit counters: one per catalog bot id / configured limit.
        let name = match (
            name.strip_prefix("crawlguard.bot."),
            name.strip_prefix("crawlguard.limit."),
        ) {
            (Some(rest), _) => format!(
                "crawlguard.bot.<bot>.{}",
                rest.rsplit_once('.').map_or(rest, |(_, c)| c)
            ),
            (_, Some(rest)) => format!(
                "crawlguard.limit.<limit>.{}",
                rest.rsplit_once('.').map_or(rest, |(_, c)| c)
            ),
            _ => name,
        };
        let family = name.rsplit_once('.').map_or(name.as_str(), |(f, _)| f);
        let generic = family.replace(".class.search_crawler", ".class.<class>");
        assert!(
            text.contains(&generic)
                || crawlguard_core::identity::class::Class::ALL
                    .iter()
                    .any(|c| text.contains(&family.replace(c.as_str(), "<class>"))),
            "README does not document {name}"
        );
    }
}

#[test]
fn readme_examples_are_verbatim_copies_of_files_tests_load() {
    let text = readme();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut rest = text.as_str();
    while let Some(i) = rest.find("<!-- include: ") {
        let after = &rest[i + "<!-- include: ".len()..];
        let (path, tail) = after.split_once(" -->").expect("closed include marker");
        let body_start = tail.find("```").expect("code block after include") + 3;
        let body = &tail[body_start..];
        let body = &body[body.find('\n').expect("fence line") + 1..];
        let block = &body[..body.find("\n```").expect("closing fence")];
        let file = std::fs::read_to_string(root.join(path)).expect("included file exists");
        assert!(
            file.contains(block),
            "README block claimed to come from {path} is not a verbatim copy"
        );
        checked += 1;
        rest = body;
    }
    assert_eq!(checked, 5, "include markers checked");
}

#[test]
fn every_example_configuration_is_accepted() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("envoy/examples");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("envoy/examples") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        if let Err(e) = crawlguard_core::config::parse(&bytes) {
            panic!("{}: {e}", path.display());
        }
        n += 1;
    }
    assert!(n >= 1);
}

/// The examples the README says repeat the default limits before their own (a `limits`
/// list replaces the defaults): each default limit is in them, unchanged.
#[test]
fn examples_that_repeat_the_defaults_keep_every_default_limit() {
    let defaults = crawlguard_core::config::parse(b"{}").expect("defaults");
    for name in ["api-route.json", "ai-retriever-herd.json"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("envoy/examples")
            .join(name);
        let cfg =
            crawlguard_core::config::parse(&std::fs::read(&path).expect("read")).expect("example");
        for want in &defaults.limits {
            let got = cfg.limits.iter().find(|l| l.name == want.name);
            assert_eq!(
                got.map(|l| format!("{l:?}")),
                Some(format!("{want:?}")),
                "{name}: default limit {}",
                want.name
            );
        }
    }
}

/// The cells of every README table row whose first cell is a backticked name.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn readme_configuration_defaults_are_the_embedded_defaults() {
    let text = readme();
    let defaults: serde_json::Value =
        serde_json::from_str(crawlguard_core::config::DEFAULT_CONFIG_JSON).expect("default JSON");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for row in table_rows(&text) {
        let [field, _type, default, ..] = row.as_slice() else {
            continue;
        };
        let field = field.trim_matches('`');
        // Only rows of the configuration reference: a field path and a literal default.
        let Some(literal) = default.strip_prefix('`').and_then(|d| d.strip_suffix('`')) else {
            continue;
        };
        if field.starts_with("crawlguard.") || field.contains('<') || field.contains('[') {
            continue;
        }
        let Ok(want) = serde_json::from_str::<serde_json::Value>(literal) else {
            continue;
        };
        let pointer = format!("/{}", field.replace('.', "/"));
        match defaults.pointer(&pointer) {
            Some(have) if *have == want => checked += 1,
            have => wrong.push(format!(
                "{field}: README says {literal}, default is {have:?}"
            )),
        }
    }
    assert!(wrong.is_empty(), "README defaults drifted: {wrong:#?}");
    assert!(checked >= 25, "only {checked} rows checked");
}

#[test]
fn readme_class_policies_and_default_limits_are_the_defaults() {
    let text = readme();
    let cfg = crawlguard_core::config::parse(b"").expect("default config");
    let mut classes = 0;
    let mut limits = 0;
    for row in table_rows(&text) {
        let name = row[0].trim_matches('`');
        // The class table's third cell reads `min..max +0..jitter`.
        if let (Some(class), [_, _, ra, status, escalation]) = (
            crawlguard_core::identity::class::Class::parse(name),
            row.as_slice(),
        ) {
            if !ra.contains(" +0..") {
                continue;
            }
            let p = cfg.policy(class);
            let r = p.retry_after;
            assert_eq!(
                (ra.as_str(), status.as_str(), escalation.as_str()),
                (
                    format!("{}..{} +0..{}", r.min_s, r.max_s, r.jitter_s).as_str(),
                    p.reject_status.to_string().as_str(),
                    if p.escalation.enabled { "on" } else { "off" }
                ),
                "class {name}"
            );
            classes += 1;
        }
        if let Some(l) = cfg.limits.iter().find(|l| l.name == name) {
            let [_, class, rate, burst, in_flight, key] = row.as_slice() else {
                panic!("limit row {row:?}");
            };
            assert_eq!(
                (
                    class.as_str(),
                    rate.parse::<f64>().ok(),
                    burst.parse::<u32>().ok(),
                    in_flight.parse::<u16>().ok(),
                    key.as_str()
                ),
                (
                    l.class.map_or("*", |c| c.as_str()),
                    l.bucket.map(|b| b.rate_per_s),
                    l.bucket.map(|b| b.burst),
                    l.max_in_flight,
                    l.key_label().as_str()
                ),
                "limit {name}"
            );
            limits += 1;
        }
    }
    assert_eq!(classes, 9);
    assert_eq!(limits, cfg.limits.len());
}

#[test]
fn readmes_state_the_fleet_overshoot_bound_as_the_contract_computes_it() {
    let formula = crawlguard_contract::fleet::OVERSHOOT_FORMULA;
    assert!(readme().contains(formula), "README.md: {formula}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let sidecar = std::fs::read_to_string(root.join("sidecar/README.md")).expect("read");
    assert!(sidecar.contains(formula), "sidecar/README.md: {formula}");
    // The worked example: 3 replicas, 5/s, burst 10, 500 ms.
    let b = crawlguard_contract::fleet::overshoot_bound(3, 5.0, 10, 500);
    assert_eq!(b.round(), 19.0);
    assert!(readme().contains("For 3 replicas, 5/s, burst 10, 500 ms: 19 tokens"));
}

#[test]
fn every_configuration_field_has_a_readme_row() {
    let text = readme();
    let rows: Vec<String> = table_rows(&text)
        .into_iter()
        .filter_map(|r| r.first().map(|c| c.trim_matches('`').to_string()))
        .collect();
    let defaults: serde_json::Value =
        serde_json::from_str(crawlguard_core::config::DEFAULT_CONFIG_JSON).expect("default JSON");
    let mut missing = Vec::new();
    // Leaves and sections of the default document; maps keyed by class or route and
    // lists are documented by their pattern row (`classes.<class>...`, `limits[]...`).
    fn walk(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m)
                if !path.starts_with("classes") && !path.ends_with("routes") =>
            {
                for (k, v) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(v, p, out);
                }
            }
            _ => out.push(path),
        }
    }
    let mut fields = Vec::new();
    walk(&defaults, String::new(), &mut fields);
    for f in fields {
        // A row documents the field, its parts (`retry_after` for `{min_s, ...}`), or it
        // is documented by its own sub-rows (`limits[].name`).
        let documented = rows.iter().any(|r| {
            r == &f
                || f.starts_with(&format!("{r}."))
                || r.starts_with(&format!("{f}."))
                || r.starts_with(&format!("{f}["))
        });
        if !documented {
            missing.push(f);
        }
    }
    assert!(
        missing.is_empty(),
        "configuration fields without a README row: {missing:?}"
    );
}

/// Every file of the filter's crates (`src/`, `core/src/`, `testkit/src/`; not `lib.rs`,
/// a folder's `mod.rs` that only declares, or test files) has a line in README's Code map,
/// and every file the map names exists.
#[test]
fn the_code_map_lists_every_filter_module() {
    let text = readme();
    let map = text
        .split("## Code map")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("README has a Code map section");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed: Vec<&str> = map
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|p| p.ends_with(".rs"))
        .collect();
    let mut files = Vec::new();
    for dir in ["src", "core/src", "testkit/src"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).expect("source folder") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path
                    .strip_prefix(root)
                    .expect("under the root")
                    .to_string_lossy()
                    .replace('\\', "/");
                let only_declares = rel.ends_with("/mod.rs")
                    && std::fs::read_to_string(&path)
                        .expect("mod.rs")
                        .lines()
                        .all(|l| l.is_empty() || l.starts_with("//!") || l.starts_with("pub mod "));
                if rel.ends_with("/lib.rs") || rel.ends_with("/tests.rs") || only_declares {
                    continue;
                }
                files.push(rel);
            }
        }
    }
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !listed.contains(&f.as_str()))
        .collect();
    let stale: Vec<&&str> = listed.iter().filter(|p| !root.join(p).is_file()).collect();
    assert!(
        missing.is_empty(),
        "files missing from README's Code map: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "README's Code map names files that do not exist: {stale:?}"
    );
}

/// The README's list of cloud-customer reverse zones is the one the catalog and the sidecar
/// refuse (`contract/src/cloud_zones.rs`), in the same order.
#[test]
fn readme_lists_the_refused_cloud_customer_zones() {
    let text = readme();
    let zones: Vec<&str> = crawlguard_contract::cloud_zones::CLOUD_CUSTOMER_REVERSE_ZONES
        .iter()
        .map(|z| z.zone)
        .collect();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let listed = format!("cloud-customer reverse zone ({};", zones.join(", "));
    assert!(flat.contains(&listed), "README should say: {listed}");
}

/// The README's "cheap enough" figures are the instructions per request `make bench` last
/// wrote into bench/results.md (its callgrind section): each median and the two ratios the
/// paragraph names, so a new bench run without the README (or the other way round) fails.
#[test]
fn the_cheap_enough_figures_are_the_last_bench_runs() {
    let results = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/results.md"))
        .expect("bench/results.md");
    let section = results
        .split("## Instructions per request (callgrind)")
        .nth(1)
        .expect("bench/results.md has the callgrind section (make bench writes it)");
    let median = |name: &str| -> f64 {
        let row = section
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no {name} row in bench/results.md"));
        let cell = row.split('|').nth(4).expect("median column").trim();
        cell.replace(',', "").parse().expect("a number")
    };
    let text = readme();
    let start = text.find("**It is cheap enough").expect("the paragraph");
    let end = text[start..]
        .find("\n- **")
        .map_or(text.len(), |e| start + e);
    let paragraph = text[start..end].replace('\n', " ");
    let grouped = |x: f64| {
        let n = x.round() as u64;
        format!("{},{:03}", n / 1000, n % 1000)
    };
    for name in [
        "cg_allow",
        "wasm_floor",
        "local_rl",
        "cg_verified",
        "cg_reject",
    ] {
        let want = grouped(median(name));
        assert!(
            paragraph.contains(&want),
            "README's cheap-enough paragraph lacks {name}'s {want} (bench/results.md)"
        );
    }
    for (a, b) in [
        ("cg_allow", "wasm_floor"),
        ("cg_allow", "local_rl"),
        ("cg_verified", "cg_allow"),
        ("cg_reject", "cg_allow"),
        ("cg_signals", "cg_signals_off"),
    ] {
        let want = format!("{:.2}x", median(a) / median(b));
        assert!(
            paragraph.contains(&want),
            "README's cheap-enough paragraph lacks {a} / {b} = {want} (bench/results.md)"
        );
    }
}
