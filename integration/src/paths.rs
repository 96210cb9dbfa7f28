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

/// The Envoy binary: `$CRAWLGUARD_ENVOY`, else `<repo>/.venv/bin/envoy` (installed by
/// `scripts/setup.sh`). Panics with a hint when it is missing.
pub fn envoy_bin() -> PathBuf {
    let path = match std::env::var_os("CRAWLGUARD_ENVOY") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(".venv/bin/envoy"),
    };
    assert!(
        path.exists(),
        "envoy not found at {}: run `make test` (or scripts/setup.sh) to install it, \
         or set CRAWLGUARD_ENVOY",
        path.display()
    );
    path
}

/// The built filter: `$CRAWLGUARD_WASM`, else
/// `<repo>/target/wasm32-wasip1/release/crawlguard.wasm`. Panics when it is missing.
pub fn wasm_path() -> PathBuf {
    let path = match std::env::var_os("CRAWLGUARD_WASM") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join("target/wasm32-wasip1/release/crawlguard.wasm"),
    };
    assert!(
        path.exists(),
        "{} is missing: run `make build` first",
        path.display()
    );
    path
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
