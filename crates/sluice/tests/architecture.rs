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

/// Which destination crate may depend on each database client (none for the others).
fn client_owner(client: &str) -> Option<&'static str> {
    match client {
        "tokio-postgres" | "postgres" | "postgres-protocol" => Some("sluice-postgres"),
        "mysql" | "mysql_async" => Some("sluice-mariadb"),
        _ => None,
    }
}

#[test]
fn only_a_destination_crate_speaks_its_database() {
    let deps = workspace_dependencies();
    assert!(deps.contains_key("sluice-postgres"), "{deps:?}");
    assert!(deps.contains_key("sluice-mariadb"), "{deps:?}");
    for (krate, list) in &deps {
        for client in DATABASE_CLIENTS {
            if list.iter().any(|d| d == client) {
                assert_eq!(
                    Some(krate.as_str()),
                    client_owner(client),
                    "{krate} depends on {client}: only its destination crate may"
                );
            }
        }
    }
}

/// The engine is a library: it drives streams through `sluice_core::destination` from plain
/// threads, and depends on no command line, no database client, no destination crate and no
/// async runtime.
#[test]
fn the_engine_is_a_library_of_its_own() {
    let deps = workspace_dependencies();
    let engine = &deps["sluice-engine"];
    for forbidden in DATABASE_CLIENTS.iter().chain(&[
        "tokio",
        "futures-util",
        "bytes",
        "clap",
        "indicatif",
        "anyhow",
        "plotters",
        "sluice-postgres",
        "sluice-mariadb",
        "sluice",
    ]) {
        assert!(
            !engine.iter().any(|d| d == forbidden),
            "sluice-engine depends on {forbidden}: {engine:?}"
        );
    }
    // The command line holds no engine of its own: no runtime either.
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

/// Every `.rs` file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// Words that belong to one database: its name, its clients, its settings, its statements.
/// The engine, its verdict and its report must say none of them, in code or in comments: a
/// destination maps its own terms to the engine's (activity classes, advice, capabilities).
const DATABASE_WORDS: &[&str] = &[
    "postgres",
    "pg_",
    "psql",
    "libpq",
    "mariadb",
    "mysql",
    "innodb",
    "statement_timeout",
    "lock_timeout",
    "min_wal_size",
    "wal_level",
    "WAL",
    "COPY",
    "FREEZE",
    "ANALYZE",
    "VACUUM",
    "oid",
];

/// Whether `line` holds `word` as a word of its own (ASCII-case-insensitive for lower-case
/// words, exact for upper-case ones, which are SQL keywords or acronyms).
fn names(line: &str, word: &str) -> bool {
    let exact = word.chars().any(|c| c.is_ascii_uppercase());
    let (hay, needle) = match exact {
        true => (line.to_string(), word.to_string()),
        false => (line.to_ascii_lowercase(), word.to_string()),
    };
    let ident = |c: char| c.is_ascii_alphanumeric();
    hay.match_indices(&needle).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + needle.len()..].chars().next();
        // `pg_` and `postgres` are prefixes: they end inside a name.
        let prefix = needle.ends_with('_') || needle == "postgres";
        !before.is_some_and(ident) && (prefix || !after.is_some_and(ident))
    })
}

/// The engine (planning, reading, scheduling, strategies, the verdict, the report's data)
/// reaches a database only through `sluice_core::destination`, and names none: a second
/// destination slots in beside PostgreSQL without touching it. Only the command line's
/// `destination.rs` chooses one.
#[test]
fn no_engine_file_names_a_database() {
    let engine_src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sluice-engine/src");
    let files = walk(&engine_src);
    assert!(files.len() > 10, "{files:?}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for word in DATABASE_WORDS {
                if names(line, word) {
                    found.push(format!("{}:{}: {word}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the engine names a database:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_word_check_finds_words_not_parts_of_words() {
    assert!(names("a PostgreSQL server", "postgres"));
    assert!(names("pg_cancel_backend", "pg_"));
    assert!(names("binary COPY", "COPY"));
    assert!(!names("copy the chunk", "COPY"));
    assert!(!names("a void pointer", "oid"));
    assert!(names("the table's oid", "oid"));
    assert!(!names("swallow", "WAL"));
}
