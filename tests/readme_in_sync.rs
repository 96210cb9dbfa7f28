//! The README's catalog and stats tables are what operators read; keep them true.

use crawlguard::classify::builtin_catalog;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap_or_default()
}

#[test]
fn readme_lists_every_builtin_bot_with_its_class_and_verify_flag() {
    let text = readme();
    let mut missing = Vec::new();
    for b in builtin_catalog() {
        let row = format!(
            "| `{}` | {} | {} |",
            b.id,
            b.class.as_str(),
            if b.verify { "yes" } else { "no" }
        );
        if !text.contains(&row) {
            missing.push(row);
        }
    }
    assert!(
        missing.is_empty(),
        "README catalog rows missing or stale: {missing:#?}"
    );
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
