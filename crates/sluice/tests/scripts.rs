//! The README's test command, `scripts/test.sh`, as a newcomer runs it: it installs what the
//! tests need (through `scripts/ensure-*.sh`, which find PostgreSQL and Chromium here), runs
//! every test binary even when one fails, and prints the totals line whatever the outcome.
//! Here `cargo` is a stand-in script that records its arguments and reports one failing test:
//! running the real suite inside itself would take the suite's own time again.

use std::path::Path;
use std::process::Command;

const FAKE_CARGO: &str = r#"#!/bin/sh
echo "$@" >> "$CALLS"
case "$1" in
  test)
    echo "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
    echo "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out"
    exit 101 ;;
esac
exit 0
"#;

#[test]
fn a_failing_test_run_still_prints_the_totals_and_runs_every_binary() {
    let dir = tempfile_dir();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, FAKE_CARGO).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let calls = dir.join("calls");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new(root.join("scripts/test.sh"))
        .env("PATH", path)
        .env("CALLS", &calls)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(101), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("tests: 5 passed, 1 failed"),
        "{stdout}"
    );
    let calls = std::fs::read_to_string(&calls).unwrap();
    let test = calls.lines().find(|l| l.starts_with("test ")).unwrap();
    assert!(test.contains("--no-fail-fast"), "{calls}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-scripts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn ci_runs_the_readme_test_command_and_installs_nothing_itself() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.contains("exec scripts/test.sh"), "{ci}");
    assert!(!ci.contains("apt-get"), "{ci}");
    let test = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    for step in [
        "scripts/ensure-postgres.sh",
        "scripts/ensure-chromium.sh",
        "scripts/ensure-ping.sh",
    ] {
        assert!(test.contains(step), "test.sh does not run {step}");
    }
}
