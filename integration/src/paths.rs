//! Where things are: the repository, the Envoy binary, the built filter, the test upstream
//! binary. (The verifier sidecar binary, which may need building, is found by
//! [`crate::sidecar::verifier_bin`].)

use std::path::{Path, PathBuf};

/// The repository root (the parent of this crate's directory, symlinks resolved), or
/// `$CRAWLGUARD_ROOT`.
pub fn repo_root() -> PathBuf {
    if let Ok(root) = std::env::var("CRAWLGUARD_ROOT") {
        return PathBuf::from(root);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_path_buf());
    manifest
        .parent()
        .expect("integration/ has a parent directory")
        .to_path_buf()
}

/// `$<var>` if set, else `<repo>/<default>`; panics with `hint` when it does not exist.
fn existing(var: &str, default: &str, hint: &str) -> PathBuf {
    let path = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(default),
    };
    assert!(path.exists(), "{} is missing: {hint}", path.display());
    path
}

/// The Envoy binary: `$CRAWLGUARD_ENVOY`, else `<repo>/.venv/bin/envoy` (installed by
/// `scripts/setup.sh`). Panics with a hint when it is missing.
pub fn envoy_bin() -> PathBuf {
    existing(
        "CRAWLGUARD_ENVOY",
        ".venv/bin/envoy",
        "run `make test` (or scripts/setup.sh) to install Envoy, or set CRAWLGUARD_ENVOY",
    )
}

/// The built filter: `$CRAWLGUARD_WASM`, else
/// `<repo>/target/wasm32-wasip1/release/crawlguard.wasm`. Panics when it is missing.
pub fn wasm_path() -> PathBuf {
    existing(
        "CRAWLGUARD_WASM",
        "target/wasm32-wasip1/release/crawlguard.wasm",
        "run `make build` first",
    )
}

/// The directory of the running test executable's profile: `target/<profile>` for
/// `target/<profile>/deps/<test>-<hash>`, where cargo puts this package's binaries.
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("test executable directory");
    if dir.ends_with("deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The `crawlguard-test-upstream` binary: `$CRAWLGUARD_TEST_UPSTREAM`, else next to the
/// running test executable (`target/<profile>/`, where cargo builds the binaries of this
/// package before its integration tests).
pub fn test_upstream_bin() -> PathBuf {
    match std::env::var_os("CRAWLGUARD_TEST_UPSTREAM") {
        Some(p) => PathBuf::from(p),
        None => profile_dir().join("crawlguard-test-upstream"),
    }
}
