//! The README's catalog and stats tables are what operators read; keep them true.

use crawlguard::catalog::builtin_catalog;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap_or_default()
}

#[test]
fn readme_lists_every_builtin_bot_with_its_class_and_verify_flag() {
    let text = readme();
    let mut missing = Vec::new();
    for b in builtin_catalog().expect("the embedded catalog loads") {
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
