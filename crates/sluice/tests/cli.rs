//! The command line as a user meets it: exit codes that say whose move it is, messages that
//! say what to do, help that agrees with the README. Real PostgreSQL where a server is needed.

mod common;

use common::{assert_has, db, run_bounded, sluice_cmd, stderr};

/// `sluice ddl tpch --create` where the tables exist is the user's call (exit 2, with the ways
/// on), not a server failure that "the same command resumes" (exit 5); so is a role that may
/// not create them.
#[test]
fn ddl_create_over_existing_tables_or_without_privilege_is_a_usage_error() {
    let d = db("ddl_exists");
    let create = |url: &str, extra: &[&str]| {
        let mut c = sluice_cmd();
        c.args(["ddl", "tpch", "--create", "--target", url])
            .args(extra);
        run_bounded(c, 60)
    };
    let first = create(&d.url, &[]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let again = create(&d.url, &[]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert_has(
        &stderr(&again),
        &["lineitem", "already exist", "--replace", "drop them"],
    );
    let replaced = create(&d.url, &["--replace"]);
    assert_eq!(replaced.status.code(), Some(0), "{}", stderr(&replaced));

    d.psql("DROP ROLE IF EXISTS ddl_reader; CREATE ROLE ddl_reader LOGIN");
    let other = db("ddl_no_create");
    let url = other.url.replace("sluice@", "ddl_reader@");
    let denied = create(&url, &[]);
    assert_eq!(denied.status.code(), Some(2), "{}", stderr(&denied));
    assert_has(&stderr(&denied), &["permission denied"]);
}
