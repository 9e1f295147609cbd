//! MariaDB's error codes in the engine's terms ([`ErrorKind`]), and the causes of refused
//! rows every destination shares. The README's table of error classes lists them.

use sluice_core::destination::{ErrorKey, ErrorKind};

/// The index and key a duplicate-key message names (`Duplicate entry '17' for key 'PRIMARY'`;
/// MySQL 8 writes `'table.index'`), given the unique indexes of the table being loaded, each
/// with its columns. A key of several columns is printed with its values joined by `-`: it is
/// split back only where that gives exactly one value per column.
pub fn duplicate_key(
    message: &str,
    unique: &[(String, Vec<String>)],
) -> Option<(String, ErrorKey)> {
    const ENTRY: &str = "Duplicate entry '";
    const FOR_KEY: &str = "' for key '";
    let rest = &message[message.find(ENTRY)? + ENTRY.len()..];
    let split = rest.rfind(FOR_KEY)?;
    let entry = &rest[..split];
    let name = rest[split + FOR_KEY.len()..].split('\'').next()?;
    let index = name.rsplit('.').next()?;
    let (index, columns) = unique.iter().find(|(i, _)| i.eq_ignore_ascii_case(index))?;
    let values: Vec<Option<String>> = match columns.len() {
        1 => vec![Some(entry.to_string())],
        n => {
            let parts: Vec<&str> = entry.split('-').collect();
            if parts.len() != n {
                return None;
            }
            parts.into_iter().map(|v| Some(v.to_string())).collect()
        }
    };
    Some((
        index.clone(),
        ErrorKey {
            columns: columns.clone(),
            values,
        },
    ))
}

/// The engine's kind for a server error code.
pub fn classify(code: u16) -> ErrorKind {
    match code {
        // Connection lost, server shut down, killed connection.
        1053 | 1077 | 1078 | 1079 | 1080 | 2006 | 2013 | 1927 => ErrorKind::Connection,
        // Query interrupted (KILL QUERY), max_statement_time.
        1317 | 1969 | 3024 => ErrorKind::Cancelled,
        // Deadlock, lock wait timeout (the transaction, or the statement, rolled back).
        1213 | 1205 => ErrorKind::Transient,
        // Bad values, NOT NULL, duplicates, foreign keys, checks, rows of wrong shape.
        1048 | 1062 | 1216 | 1217 | 1261 | 1262 | 1263 | 1264 | 1265 | 1292 | 1366 | 1406
        | 1451 | 1452 | 1557 | 1586 | 1690 | 4025 | 1367 | 1300 | 1411 | 1441 => {
            ErrorKind::Rejected
        }
        // No such table/column/database, no privilege, LOCAL refused, read-only.
        1044 | 1045 | 1046 | 1049 | 1054 | 1142 | 1143 | 1146 | 1148 | 1227 | 1290 | 1370
        | 3948 | 1836 | 4166 => ErrorKind::Usage,
        // Disk full, out of memory, too many connections, table full, lock table full,
        // packet too large, internal errors.
        1021 | 1037 | 1038 | 1040 | 1041 | 1114 | 1153 | 1206 | 1030 | 1180 | 1181 | 1815 => {
            ErrorKind::Condition
        }
        _ => ErrorKind::Other,
    }
}

/// The shared name of why a row was refused, for a code [`classify`] calls `Rejected`.
pub fn rejection_cause(code: u16) -> &'static str {
    match code {
        1048 => "not_null_violation",
        1062 | 1586 => "unique_violation",
        1216 | 1452 => "foreign_key_violation",
        4025 => "check_violation",
        1261 | 1262 | 1263 | 1264 | 1265 | 1292 | 1366 | 1406 | 1690 | 1367 | 1300 | 1411
        | 1441 => "invalid_value",
        _ => "rejected",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(classify(1265), ErrorKind::Rejected);
        assert_eq!(rejection_cause(1062), "unique_violation");
        assert_eq!(classify(2013), ErrorKind::Connection);
        assert_eq!(classify(1213), ErrorKind::Transient);
        assert_eq!(classify(1146), ErrorKind::Usage);
        assert_eq!(classify(1114), ErrorKind::Condition);
        assert_eq!(classify(9999), ErrorKind::Other);
    }

    #[test]
    fn a_duplicate_names_its_key_by_the_indexs_columns() {
        let unique = vec![
            ("PRIMARY".to_string(), vec!["id".to_string()]),
            ("pair".to_string(), vec!["a".to_string(), "b".to_string()]),
        ];
        let key = |m: &str| duplicate_key(m, &unique).map(|(i, k)| (i, k.columns, k.values));
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            key("Warning 1062: Duplicate entry '17' for key 'PRIMARY' (LOAD DATA ...)"),
            Some(("PRIMARY".into(), vec!["id".into()], vec![s("17")]))
        );
        // MySQL 8 names the table too; a value may hold quotes.
        assert_eq!(
            key("Duplicate entry 'it's' for key 't.PRIMARY'"),
            Some(("PRIMARY".into(), vec!["id".into()], vec![s("it's")]))
        );
        assert_eq!(
            key("Duplicate entry '3-x' for key 'pair'"),
            Some((
                "pair".into(),
                vec!["a".into(), "b".into()],
                vec![s("3"), s("x")]
            ))
        );
        // A value with `-` inside a key of several columns cannot be split back.
        assert_eq!(key("Duplicate entry '-3-x' for key 'pair'"), None);
        assert_eq!(key("Duplicate entry '1' for key 'other'"), None);
    }
}
