//! A column's type as MariaDB's catalog describes it (`information_schema.COLUMNS`), reduced
//! to what the client-side checks need.

use super::members::{parse_members, Fold};

/// What sluice checks on the client for a column, from its `DATA_TYPE` and `COLUMN_TYPE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// `TINYINT` to `BIGINT`, signed or `UNSIGNED`: the inclusive range.
    Integer {
        min: i128,
        max: i128,
    },
    /// `DECIMAL(p,s)`.
    Decimal {
        precision: u32,
        scale: u32,
    },
    Date,
    /// `DATETIME(fsp)` (and `TIMESTAMP(fsp)`'s text, whose range and time zone the server
    /// checks).
    DateTime,
    /// `CHAR(n)`/`VARCHAR(n)` in a character set of characters (utf8mb4): at most `n`
    /// characters, trailing spaces past `n` cut.
    Chars {
        max: u32,
    },
    /// `ENUM(...)` whose members sluice reads, under a collation whose ASCII rules it knows.
    Enum {
        members: Vec<String>,
        fold: Fold,
    },
    /// `SET(...)`, likewise.
    Set {
        members: Vec<String>,
        fold: Fold,
    },
    /// `YEAR` (four digits).
    Year,
    /// `FLOAT` or `DOUBLE` without `(M,D)`.
    Float {
        double: bool,
    },
    /// `TIME(fsp)`.
    Time {
        fsp: u32,
    },
    /// Anything else: sent as it is, converted by the server (its warnings are errors).
    Server,
}

/// One column of a load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// `COLUMN_TYPE` as the catalog spells it (`int(11) unsigned`), for messages.
    pub type_name: String,
    pub ty: ColumnType,
    pub not_null: bool,
}

impl ColumnType {
    /// The type from the catalog's `DATA_TYPE` (`int`), `COLUMN_TYPE` (`int(10) unsigned`),
    /// character length, numeric precision and scale, character set and collation.
    pub fn from_catalog(
        data_type: &str,
        column_type: &str,
        char_length: Option<u64>,
        precision: Option<u64>,
        scale: Option<u64>,
        charset: Option<&str>,
        collation: Option<&str>,
    ) -> ColumnType {
        let lower = column_type.to_ascii_lowercase();
        let unsigned = lower.contains("unsigned");
        let int = |bits: u32| match unsigned {
            true => ColumnType::Integer {
                min: 0,
                max: (1i128 << bits) - 1,
            },
            false => ColumnType::Integer {
                min: -(1i128 << (bits - 1)),
                max: (1i128 << (bits - 1)) - 1,
            },
        };
        match data_type.to_ascii_lowercase().as_str() {
            "tinyint" => int(8),
            "smallint" => int(16),
            "mediumint" => int(24),
            "int" | "integer" => int(32),
            "bigint" => int(64),
            "decimal" | "numeric" => match (precision, scale) {
                (Some(p), Some(s)) if (1..=65).contains(&p) && s <= 38 && s <= p => {
                    ColumnType::Decimal {
                        precision: p as u32,
                        scale: s as u32,
                    }
                }
                _ => ColumnType::Server,
            },
            "date" => ColumnType::Date,
            "datetime" => ColumnType::DateTime,
            "enum" | "set" => listed(data_type, column_type, collation),
            "year" if lower == "year" || lower == "year(4)" => ColumnType::Year,
            "float" if lower == "float" => ColumnType::Float { double: false },
            "double" if lower == "double" => ColumnType::Float { double: true },
            "time" => match scale {
                Some(fsp) if fsp <= 6 => ColumnType::Time { fsp: fsp as u32 },
                None if lower == "time" => ColumnType::Time { fsp: 0 },
                _ => ColumnType::Server,
            },
            "char" | "varchar" if charset.is_some_and(|c| c.starts_with("utf8mb4")) => {
                match char_length {
                    Some(n) if n <= u64::from(u32::MAX) => ColumnType::Chars { max: n as u32 },
                    _ => ColumnType::Server,
                }
            }
            _ => ColumnType::Server,
        }
    }

    /// Whether sluice checks this type's values itself (the types it declines in part, such
    /// as a numeric `ENUM` index, still count: it checks every value it can read).
    pub fn client_converted(&self) -> bool {
        !matches!(self, ColumnType::Server)
    }
}

/// An `ENUM` or `SET` whose members and collation sluice reads, else the server's.
fn listed(data_type: &str, column_type: &str, collation: Option<&str>) -> ColumnType {
    let (Some(members), Some(fold)) = (parse_members(column_type), collation.and_then(Fold::of))
    else {
        return ColumnType::Server;
    };
    match data_type.eq_ignore_ascii_case("enum") {
        true => ColumnType::Enum { members, fold },
        false => ColumnType::Set { members, fold },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ranges_follow_width_and_sign() {
        let t = |d: &str, c: &str| ColumnType::from_catalog(d, c, None, None, None, None, None);
        assert_eq!(
            t("tinyint", "tinyint(4)"),
            ColumnType::Integer {
                min: -128,
                max: 127
            }
        );
        assert_eq!(
            t("tinyint", "tinyint(3) unsigned"),
            ColumnType::Integer { min: 0, max: 255 }
        );
        assert_eq!(
            t("bigint", "bigint(20) unsigned"),
            ColumnType::Integer {
                min: 0,
                max: u64::MAX as i128
            }
        );
        assert_eq!(
            t("mediumint", "mediumint(9)"),
            ColumnType::Integer {
                min: -8388608,
                max: 8388607
            }
        );
    }

    #[test]
    fn chars_need_a_utf8_character_set() {
        let v =
            |cs| ColumnType::from_catalog("varchar", "varchar(5)", Some(5), None, None, cs, None);
        assert_eq!(v(Some("utf8mb4")), ColumnType::Chars { max: 5 });
        assert_eq!(v(Some("latin1")), ColumnType::Server);
    }
}
