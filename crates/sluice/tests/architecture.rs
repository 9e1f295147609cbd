//! The layering rules of ARCHITECTURE.md, held by a test: `cargo metadata` must show that only
//! the PostgreSQL crate speaks PostgreSQL, and that the core stays free of I/O runtimes and of
//! any database client.

use std::collections::BTreeMap;
use std::process::Command;

/// Each workspace crate's normal (non-dev) dependencies, by name.
fn workspace_dependencies() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// Crates that speak a database's protocol: only a destination crate may depend on them.
const DATABASE_CLIENTS: &[&str] = &[
    "tokio-postgres",
    "postgres",
    "postgres-protocol",
    "sqlx",
    "mysql",
    "mysql_async",
    "diesel",
];

#[test]
fn only_the_postgresql_crate_speaks_postgresql() {
    let deps = workspace_dependencies();
    assert!(deps.contains_key("sluice-postgres"), "{deps:?}");
    for (krate, list) in &deps {
        for client in DATABASE_CLIENTS {
            if list.iter().any(|d| d == client) {
                assert_eq!(
                    krate, "sluice-postgres",
                    "{krate} depends on {client}: only a destination crate may"
                );
            }
        }
    }
}

/// The engine (the `sluice` crate) drives streams through `sluice_core::destination` from plain
/// threads: no async runtime, no protocol crate of its own.
#[test]
fn the_engine_holds_no_runtime() {
    let deps = workspace_dependencies();
    for forbidden in ["tokio", "futures-util", "bytes"] {
        assert!(
            !deps["sluice"].iter().any(|d| d == forbidden),
            "sluice depends on {forbidden}"
        );
    }
}

#[test]
fn the_core_does_no_io_and_knows_no_database() {
    let deps = workspace_dependencies();
    let core = &deps["sluice-core"];
    for forbidden in DATABASE_CLIENTS.iter().chain(&[
        "tokio",
        "memmap2",
        "flate2",
        "zstd",
        "sluice-postgres",
        // Time zones are a destination's session rule, not the core's.
        "chrono",
        "chrono-tz",
    ]) {
        assert!(
            !core.iter().any(|d| d == forbidden),
            "sluice-core depends on {forbidden}: {core:?}"
        );
    }
}

/// The engine (planning, reading, scheduling, strategies, reports) reaches a database only
/// through `sluice_core::destination`: it never names a destination crate, so a second
/// destination slots in beside PostgreSQL without touching it. Only the command that opens
/// the destination chooses one.
#[test]
fn the_engine_names_no_destination() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut engine: Vec<std::path::PathBuf> = std::fs::read_dir(src.join("load"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    engine.extend(["report.rs", "progress.rs", "signals.rs"].map(|f| src.join(f)));
    assert!(engine.len() > 5, "{engine:?}");
    for file in engine {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Doc comments may point at an implementation; code may not use one.
            if line.trim_start().starts_with("//") {
                continue;
            }
            assert!(
                !line.contains("sluice_postgres"),
                "{}:{}: the engine names sluice_postgres: {line}",
                file.display(),
                n + 1
            );
        }
    }
}
