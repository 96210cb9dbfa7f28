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
    let catalog = crawlguard::catalog::builtin_catalog().expect("the embedded catalog loads");
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
    let cfg = crawlguard::config::parse(b"").expect("default config");
    for name in crawlguard::metrics::names(&cfg) {
        let family = name.rsplit_once('.').map_or(name.as_str(), |(f, _)| f);
        let generic = family
            .replace(".class.search_crawler", ".class.<class>")
            .replace(".route.default", ".route.<route>");
        assert!(
            text.contains(&generic)
                || crawlguard::classify::Class::ALL
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
    assert_eq!(checked, 4, "include markers checked");
}

#[test]
fn every_example_configuration_is_accepted() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("envoy/examples");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("envoy/examples") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        if let Err(e) = crawlguard::config::parse(&bytes) {
            panic!("{}: {e}", path.display());
        }
        n += 1;
    }
    assert!(n >= 1);
}
