//! Input patterns: `sluice load 'logs/*.csv'` expands the pattern itself, as DuckDB's
//! `read_csv('logs/*.csv')` and Snowflake's `PATTERN` do. A shell cannot pass 100,000 file
//! names to one command (its argument list is limited to a few megabytes), and a load split
//! across several commands gives up one job, one ledger entry and one report. A quoted pattern
//! has no such limit.
//!
//! The rules follow the shell's, so that a quoted and an unquoted pattern name the same files:
//! an argument that names an existing file is taken as it is, whatever its characters; one
//! with `*`, `?` or `[` is expanded (`**` spans directories), in sorted order, without hidden
//! files unless the pattern names the dot; a pattern that matches nothing is an error, not
//! an empty load.

use crate::failure::Failure;

/// The files the command's arguments name, patterns expanded, in the arguments' order.
pub fn expand(args: &[String]) -> Result<Vec<String>, Failure> {
    let mut files = Vec::with_capacity(args.len());
    for a in args {
        if !is_pattern(a) || std::path::Path::new(a).exists() {
            files.push(a.clone());
            continue;
        }
        let before = files.len();
        files.extend(matches(a)?);
        if files.len() == before {
            return Err(Failure::Local(format!(
                "no file matches `{a}`: check the pattern (it is expanded by sluice, as the \
                 shell would: `*` within a name, `**` across directories)"
            )));
        }
    }
    Ok(files)
}

fn is_pattern(a: &str) -> bool {
    a.contains(['*', '?', '['])
}

const OPTIONS: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: true,
};

/// The regular files and links a pattern matches, sorted (directories are left out: a pattern
/// such as `data/*` names the files in `data`).
fn matches(pattern: &str) -> Result<Vec<String>, Failure> {
    if let Some(found) = matches_in_one_directory(pattern)? {
        return Ok(found);
    }
    let options = OPTIONS;
    let paths = glob::glob_with(pattern, options)
        .map_err(|e| Failure::Usage(format!("`{pattern}` is not a valid pattern: {e}")))?;
    let mut out = Vec::new();
    for p in paths {
        let p =
            p.map_err(|e| Failure::Local(format!("cannot read {}: {e}", e.path().display())))?;
        if !p.is_dir() {
            out.push(p.to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// A pattern whose wildcards are all in its last component (`logs/2024/*.csv`, the usual
/// case), matched against one directory's listing: the listing says which entries are
/// directories, so 100,000 files cost no call each. `None` for other patterns.
fn matches_in_one_directory(pattern: &str) -> Result<Option<Vec<String>>, Failure> {
    let (dir, name) = match pattern.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", pattern),
    };
    if is_pattern(dir) || name.contains("**") {
        return Ok(None);
    }
    let compiled = glob::Pattern::new(name)
        .map_err(|e| Failure::Usage(format!("`{pattern}` is not a valid pattern: {e}")))?;
    // `/x*` lists the root; `x*` the working directory, and names what it finds as given.
    let listed = match (dir, pattern.starts_with('/')) {
        ("", true) => std::path::Path::new("/"),
        ("", false) => std::path::Path::new("."),
        (d, _) => std::path::Path::new(d),
    };
    let entries = match std::fs::read_dir(listed) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(Vec::new())),
        Err(e) => {
            return Err(Failure::Local(format!(
                "cannot list {}: {e}",
                listed.display()
            )))
        }
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Failure::Local(format!("cannot list {dir}: {e}")))?;
        let file_name = entry.file_name();
        let Some(n) = file_name.to_str() else {
            continue;
        };
        if !compiled.matches_with(n, OPTIONS) {
            continue;
        }
        let is_dir = match entry.file_type() {
            Ok(t) if t.is_symlink() => entry.path().is_dir(),
            Ok(t) => t.is_dir(),
            Err(_) => entry.path().is_dir(),
        };
        if !is_dir {
            found.push(match (dir, pattern.starts_with('/')) {
                ("", true) => format!("/{n}"),
                ("", false) => n.to_string(),
                (d, _) => format!("{d}/{n}"),
            });
        }
    }
    found.sort();
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_in_order_and_literal_names_stay() {
        let dir = std::env::temp_dir().join(format!("sluice-patterns-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for f in [
            "b.csv",
            "a.csv",
            ".hidden.csv",
            "c.tbl",
            "sub/d.csv",
            "star*.csv",
        ] {
            std::fs::write(dir.join(f), "1\n").unwrap();
        }
        let d = dir.to_str().unwrap();
        let got = expand(&[format!("{d}/*.csv"), format!("{d}/c.tbl")]).unwrap();
        let want: Vec<String> = ["a.csv", "b.csv", "star*.csv", "c.tbl"]
            .iter()
            .map(|f| format!("{d}/{f}"))
            .collect();
        assert_eq!(got, want);
        // A name that exists is itself, even with a pattern's characters in it.
        assert_eq!(
            expand(&[format!("{d}/star*.csv")]).unwrap(),
            vec![format!("{d}/star*.csv")]
        );
        // `**` spans directories; a pattern that matches nothing is an error naming it.
        let deep = expand(&[format!("{d}/**/d.csv")]).unwrap();
        assert_eq!(deep, vec![format!("{d}/sub/d.csv")]);
        let err = expand(&[format!("{d}/*.zzz")]).unwrap_err().to_string();
        assert!(
            err.contains("no file matches") && err.contains("*.zzz"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
