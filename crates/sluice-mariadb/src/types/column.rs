//! A column's type as MariaDB's catalog describes it (`information_schema.COLUMNS`), reduced
//! to what the client-side checks need.

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
    /// character length, numeric precision and scale, and character set.
    pub fn from_catalog(
        data_type: &str,
        column_type: &str,
        char_length: Option<u64>,
        precision: Option<u64>,
        scale: Option<u64>,
        charset: Option<&str>,
    ) -> ColumnType {
        let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
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
            "char" | "varchar" if charset.is_some_and(|c| c.starts_with("utf8mb4")) => {
                match char_length {
                    Some(n) if n <= u64::from(u32::MAX) => ColumnType::Chars { max: n as u32 },
                    _ => ColumnType::Server,
                }
            }
            _ => ColumnType::Server,
        }
    }

    /// Whether sluice checks this type's values itself.
    pub fn client_converted(&self) -> bool {
        !matches!(self, ColumnType::Server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ranges_follow_width_and_sign() {
        let t = |d: &str, c: &str| ColumnType::from_catalog(d, c, None, None, None, None);
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
        let v = |cs| ColumnType::from_catalog("varchar", "varchar(5)", Some(5), None, None, cs);
        assert_eq!(v(Some("utf8mb4")), ColumnType::Chars { max: 5 });
        assert_eq!(v(Some("latin1")), ColumnType::Server);
    }
}
