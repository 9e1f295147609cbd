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
    /// `DATETIME(fsp)`.
    DateTime,
    /// `TIMESTAMP(fsp)`: a `DATETIME`'s calendar, and the range in the session's time zone.
    Timestamp(TimestampRule),
    /// `BIT(M)`: `LOAD DATA` stores the field's bytes as they are, right-aligned in `M` bits.
    Bit {
        bits: u32,
    },
    /// MariaDB's `JSON`: `LONGTEXT` in utf8mb4 with the column's `CHECK (json_valid(col))`.
    Json,
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

/// Where a `TIMESTAMP` value fits: 1970-01-01 00:00:01 UTC to the server's last second, read
/// in the session's time zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampRule {
    /// The session's time zone as the server names it (`SYSTEM (UTC)`, `+02:00`), for messages.
    pub zone: String,
    /// Its offset east of UTC in seconds when it is fixed. A zone with rules (summer time) is
    /// `None`: then only values more than a day outside the range are refused, which no zone's
    /// offset can bring back into it.
    pub offset: Option<i64>,
    /// The last second, in seconds since 1970 UTC: 2038-01-19 03:14:07, or 2106-02-07
    /// 06:28:15 from MariaDB 11.5.
    pub max: i64,
}

impl TimestampRule {
    /// The rule before the session is read: any zone, the 2038 limit.
    pub fn unknown() -> TimestampRule {
        TimestampRule {
            zone: "unknown".into(),
            offset: None,
            max: i64::from(i32::MAX),
        }
    }

    /// The rule for a server `version` whose session has `time_zone` (`SYSTEM`, `+05:30`, a
    /// name) and `system_time_zone` (the zone `SYSTEM` stands for, as an abbreviation). An
    /// abbreviation says nothing certain (`GMT` is also Africa/Monrovia's name, which was not
    /// UTC in 1970; `TZ=UTC+5` is called `UTC`), so `SYSTEM` is a zone with rules.
    pub fn of(version: &str, time_zone: &str, system_zone: &str) -> TimestampRule {
        let (zone, offset) = match time_zone.eq_ignore_ascii_case("SYSTEM") {
            true => (format!("SYSTEM ({system_zone})"), None),
            false => match time_zone {
                "UTC" | "Etc/UTC" | "Universal" => (time_zone.to_string(), Some(0)),
                _ => (time_zone.to_string(), offset_seconds(time_zone)),
            },
        };
        TimestampRule {
            zone,
            offset,
            max: match extended_timestamps(version) {
                true => i64::from(u32::MAX),
                false => i64::from(i32::MAX),
            },
        }
    }
}

/// `+05:30` or `-8:00` in seconds east of UTC.
fn offset_seconds(zone: &str) -> Option<i64> {
    let (sign, rest) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// Whether the server keeps `TIMESTAMP`s to 2106 (MariaDB 11.5 and later).
fn extended_timestamps(version: &str) -> bool {
    let real = version.strip_prefix("5.5.5-").unwrap_or(version);
    let mut parts = real.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    version.contains("MariaDB") && (major, minor) >= (11, 5)
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
            "timestamp" => ColumnType::Timestamp(TimestampRule::unknown()),
            "bit" => match precision {
                Some(m) if (1..=64).contains(&m) => ColumnType::Bit { bits: m as u32 },
                _ => ColumnType::Server,
            },
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

    /// The type once the session and the table's constraints are known: a `TIMESTAMP`'s range
    /// in the session's time zone, and a `LONGTEXT` in utf8mb4 whose column check is exactly
    /// `json_valid` of itself (MariaDB's `JSON`) checked as JSON.
    pub fn in_session(self, timestamps: &TimestampRule, json_checked: bool) -> ColumnType {
        match self {
            ColumnType::Timestamp(_) => ColumnType::Timestamp(timestamps.clone()),
            ColumnType::Server if json_checked => ColumnType::Json,
            other => other,
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
    fn timestamp_rules_follow_the_session_zone_and_the_version() {
        let r = TimestampRule::of("10.11.19-MariaDB-0+deb12u1", "SYSTEM", "UTC");
        assert_eq!((r.offset, r.max), (None, i64::from(i32::MAX)));
        assert_eq!(r.zone, "SYSTEM (UTC)");
        assert_eq!(
            TimestampRule::of("10.11.2-MariaDB", "UTC", "CET").offset,
            Some(0)
        );
        assert_eq!(
            TimestampRule::of("10.11.2-MariaDB", "+00:00", "CET").offset,
            Some(0)
        );
        assert_eq!(
            TimestampRule::of("10.11.2-MariaDB", "+05:30", "CET").offset,
            Some(19800)
        );
        assert_eq!(
            TimestampRule::of("10.11.2-MariaDB", "-8:00", "UTC").offset,
            Some(-28800)
        );
        assert_eq!(
            TimestampRule::of("10.11.2-MariaDB", "SYSTEM", "CET").offset,
            None
        );
        assert_eq!(
            TimestampRule::of("10.11.2-MariaDB", "Europe/Berlin", "UTC").offset,
            None
        );
        assert_eq!(
            TimestampRule::of("11.8.1-MariaDB", "SYSTEM", "UTC").max,
            i64::from(u32::MAX)
        );
        assert_eq!(
            TimestampRule::of("8.4.2", "SYSTEM", "UTC").max,
            i64::from(i32::MAX)
        );
    }

    #[test]
    fn bits_and_json_from_the_catalog() {
        let t = |d: &str, c: &str, p| ColumnType::from_catalog(d, c, None, p, None, None, None);
        assert_eq!(t("bit", "bit(10)", Some(10)), ColumnType::Bit { bits: 10 });
        let text = t("longtext", "longtext", None);
        let rule = TimestampRule::unknown();
        assert_eq!(text.clone().in_session(&rule, true), ColumnType::Json);
        assert_eq!(text.in_session(&rule, false), ColumnType::Server);
    }

    #[test]
    fn chars_need_a_utf8_character_set() {
        let v =
            |cs| ColumnType::from_catalog("varchar", "varchar(5)", Some(5), None, None, cs, None);
        assert_eq!(v(Some("utf8mb4")), ColumnType::Chars { max: 5 });
        assert_eq!(v(Some("latin1")), ColumnType::Server);
    }
}
