//! `make test` (scripts/test-stages.sh) runs every stage even after one failed, ends with one
//! line per stage and `N passed, N failed`, and exits non-zero if any stage failed. Driven
//! with a stand-in `CARGO` (the script's documented variable) that fails the host stage and
//! passes the real-Envoy stage, so no real suite runs here.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn a_failing_stage_does_not_stop_the_next_and_the_summary_says_so() {
    let dir = std::env::temp_dir().join(format!("cg-stages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let fake = dir.join("fake-cargo");
    // Fails when asked for the workspace's host tests, passes for the integration crate.
    std::fs::write(
        &fake,
        "#!/bin/sh\ncase \"$*\" in *--workspace*) echo host-ran; exit 101;; esac\necho envoy-ran\n",
    )
    .expect("write fake cargo");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/test-stages.sh"
    ))
    .env("CARGO", &fake)
    .env("TEST_STAGES", "host envoy")
    .output()
    .expect("run scripts/test-stages.sh");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("host-ran\n"), "{stdout}");
    assert!(
        stdout.contains("envoy-ran\n"),
        "the envoy stage did not run: {stdout}"
    );
    let tail: Vec<&str> = stdout.lines().rev().take(3).collect();
    assert_eq!(
        tail.first().copied(),
        Some("1 passed, 1 failed"),
        "{stdout}"
    );
    assert!(
        tail.get(1)
            .is_some_and(|l| l.starts_with("stage envoy    passed")),
        "{stdout}"
    );
    assert!(
        tail.get(2)
            .is_some_and(|l| l.starts_with("stage host     FAILED") && l.ends_with("(exit 101)")),
        "{stdout}"
    );
}
