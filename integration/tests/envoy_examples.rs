//! Every Envoy configuration shipped in `envoy/` must load: `envoy --mode validate`.

use crawlguard_integration::{envoy_bin, repo_root};
use std::process::Command;

#[test]
fn every_example_envoy_config_validates() {
    let root = repo_root();
    let mut files: Vec<_> = std::fs::read_dir(root.join("envoy"))
        .expect("envoy/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    // The standalone config and the local_ratelimit backstop example, at least.
    assert!(names.contains(&"envoy.yaml".to_string()), "{names:?}");
    assert!(
        names.contains(&"envoy-local-ratelimit.yaml".to_string()),
        "{names:?}"
    );
    for f in &files {
        // Paths inside the configs (the module) are relative to the repository root.
        let out = Command::new(envoy_bin())
            .current_dir(&root)
            .args(["--mode", "validate", "--use-dynamic-base-id", "-c"])
            .arg(f)
            .output()
            .expect("run envoy");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("OK"),
            "{} does not validate:\n{text}",
            f.display()
        );
    }
}
