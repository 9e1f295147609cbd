//! What a server error is, by its SQLSTATE: the row's fault, the server's condition, a
//! transient abort, a lost connection. The README's table of error classes is this module.
//!
//! The class decides what the engine does: a row's fault is a bad row (or a reject under
//! `--max-errors`); the server's condition (a full disk, no memory, a resource limit, an I/O
//! or internal error) is never blamed on a row, never isolated row by row, and ends the load
//! with exit 5 and the next step; a transient abort is retried within `--retries` on a new
//! connection, as a lost connection is. Only this crate reads SQLSTATEs: the engine sees the
//! kind.

use crate::stream::ServerError;
use sluice_core::destination::ErrorKind;

/// The kind of a server error (a sibling conflict, which needs the load's streams to see, is
/// decided before this is asked).
pub fn classify(e: &ServerError) -> ErrorKind {
    if e.is_connection() {
        ErrorKind::Connection
    } else if e.is_cancelled() {
        ErrorKind::Cancelled
    } else if is_condition(e) {
        ErrorKind::Condition
    } else if is_transient(&e.sqlstate) {
        ErrorKind::Transient
    } else if e.is_row_fault() {
        ErrorKind::Rejected
    } else {
        ErrorKind::Other
    }
}

/// Insufficient resources (53: disk full, out of memory, too many connections, a configured
/// limit such as `temp_file_limit`), system and I/O errors (58), internal errors (XX): the
/// server's own state, which no row causes.
fn is_condition(e: &ServerError) -> bool {
    matches!(e.sqlstate.get(..2), Some("53" | "58" | "XX"))
}

/// Aborts that pass: a serialization failure, or a deadlock with a session that is not one of
/// this load's streams (those are conflicts, named with both rows).
fn is_transient(sqlstate: &str) -> bool {
    matches!(sqlstate, "40001" | "40P01")
}

/// A server condition in words: what it is, where, and the next step. `tablespaces` names
/// the tablespace a full disk's file is in.
pub fn condition_message(e: &ServerError, tablespaces: &[(u32, String)]) -> String {
    let again = "no row is at fault; run the same command again once that is done";
    match e.sqlstate.as_str() {
        "53100" => {
            let space = tablespace_of(&e.message, tablespaces);
            format!(
                "the server's disk for tablespace {space} is full: {e}. Free space on that disk, \
                 or move the table to a tablespace with room (ALTER TABLE ... SET TABLESPACE); \
                 {again}"
            )
        }
        "53200" => format!(
            "the server ran out of memory: {e}. Give it more, or lower --jobs or the server's \
             work_mem and maintenance_work_mem; {again}"
        ),
        "53300" => format!(
            "the server has no free connection slot: {e}. Lower --jobs, or end idle sessions, \
             or raise max_connections; {again}"
        ),
        "53400" if e.message.contains("temp_file_limit") => format!(
            "the server's temp_file_limit stopped a statement: {e}. Raise it for the loading \
             role (ALTER ROLE ... SET temp_file_limit = '...', or -1 for none), or give the \
             server more maintenance_work_mem; {again}"
        ),
        s if s.starts_with("53") => format!(
            "the server is out of a resource ({s}): {e}. No row is at fault; run the same \
             command again once that is done"
        ),
        s if s.starts_with("58") => format!(
            "the server had an I/O or system error ({s}): {e}. See the server's log; {again}"
        ),
        s => format!("the server failed internally ({s}): {e}. See the server's log; {again}"),
    }
}

/// The tablespace a "could not extend file" message's path lies in: `pg_tblspc/<oid>/...` is
/// a tablespace of its own, anything else the default one.
fn tablespace_of(message: &str, tablespaces: &[(u32, String)]) -> String {
    let oid = message
        .split("pg_tblspc/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|n| n.parse::<u32>().ok());
    let name = match oid {
        Some(oid) => tablespaces
            .iter()
            .find(|(o, _)| *o == oid)
            .map_or_else(|| format!("with oid {oid}"), |(_, n)| n.clone()),
        None => "pg_default".to_string(),
    };
    format!("\"{name}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(sqlstate: &str, message: &str, record: Option<u64>) -> ServerError {
        ServerError {
            message: message.into(),
            detail: None,
            hint: None,
            sqlstate: sqlstate.into(),
            record,
            column: None,
            context: None,
            constraint: None,
        }
    }

    /// The README's table, row by row (with a COPY record named, as a load's errors are).
    #[test]
    fn each_class_has_its_kind() {
        let table = [
            ("22P02", ErrorKind::Rejected),
            ("23505", ErrorKind::Rejected),
            ("P0001", ErrorKind::Rejected),
            ("54000", ErrorKind::Rejected),
            ("53100", ErrorKind::Condition),
            ("53200", ErrorKind::Condition),
            ("53300", ErrorKind::Condition),
            ("53400", ErrorKind::Condition),
            ("58030", ErrorKind::Condition),
            ("XX000", ErrorKind::Condition),
            ("40001", ErrorKind::Transient),
            ("40P01", ErrorKind::Transient),
            ("57P01", ErrorKind::Connection),
            ("57P03", ErrorKind::Connection),
            ("08006", ErrorKind::Connection),
            ("57014", ErrorKind::Cancelled),
            ("42501", ErrorKind::Other),
        ];
        for (state, kind) in table {
            assert_eq!(classify(&error(state, "m", Some(3))), kind, "{state}");
        }
        // Without a COPY record, a program limit is not tied to a row.
        assert_eq!(classify(&error("54000", "m", None)), ErrorKind::Other);
    }

    #[test]
    fn a_full_disk_names_its_tablespace() {
        let spaces = [(16384, "small".to_string())];
        let full = error(
            "53100",
            "could not extend file \"pg_tblspc/16384/PG_15_202209061/16385/16390\": No space \
             left on device",
            Some(149000),
        );
        let m = condition_message(&full, &spaces);
        assert!(
            m.starts_with("the server's disk for tablespace \"small\" is full"),
            "{m}"
        );
        assert!(
            m.contains("SET TABLESPACE") && m.contains("no row is at fault"),
            "{m}"
        );
        let base = error(
            "53100",
            "could not extend file \"base/5/16390\": No space",
            None,
        );
        assert!(condition_message(&base, &spaces).contains("\"pg_default\""));
        let unknown = error("53100", "could not extend file \"pg_tblspc/7/x\": No", None);
        assert!(condition_message(&unknown, &spaces).contains("with oid 7"));
    }
}
