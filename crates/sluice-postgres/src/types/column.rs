//! Target columns as the catalog describes them: the type, its modifier and NOT NULL.
//!
//! The destination reads `pg_attribute` and hands sluice a name, a type name and a `typmod`;
//! this module turns that into a [`PgType`] that the converters dispatch on, decoding typmods
//! the way PostgreSQL stores them (`numeric(p,s)` packs both in one int, lengths carry a
//! 4-byte header offset). A type sluice does not convert itself becomes [`PgType::Other`], and
//! the whole table is then loaded through text COPY so the server converts that column.

/// The types sluice converts on the client, plus [`PgType::Other`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `numeric(precision, scale)`, or unconstrained.
    Numeric(Option<(i32, i32)>),
    Date,
    /// Fractional-second precision, when declared.
    Time(Option<u32>),
    Timestamp(Option<u32>),
    Timestamptz(Option<u32>),
    /// `character(n)`: blank-padded.
    Char(Option<usize>),
    Varchar(Option<usize>),
    Text,
    Bytea,
    Uuid,
    Json,
    Jsonb,
    /// Converted by the server from text.
    Other,
}

impl PgType {
    /// Builds a type from `pg_type.typname` and `pg_attribute.atttypmod`.
    pub fn from_catalog(typname: &str, typmod: i32) -> PgType {
        let len = || (typmod >= 4).then(|| (typmod - 4) as usize);
        let precision = || (typmod >= 0).then_some(typmod as u32);
        match typname {
            "bool" => PgType::Bool,
            "int2" => PgType::Int2,
            "int4" => PgType::Int4,
            "int8" => PgType::Int8,
            "float4" => PgType::Float4,
            "float8" => PgType::Float8,
            "numeric" => PgType::Numeric((typmod >= 4).then(|| {
                let t = typmod - 4;
                let precision = (t >> 16) & 0xffff;
                // The scale is an 11-bit signed field since PostgreSQL 15.
                let scale = ((t & 0x7ff) ^ 1024) - 1024;
                (precision, scale)
            })),
            "date" => PgType::Date,
            "time" => PgType::Time(precision()),
            "timestamp" => PgType::Timestamp(precision()),
            "timestamptz" => PgType::Timestamptz(precision()),
            "bpchar" => PgType::Char(len()),
            "varchar" => PgType::Varchar(len()),
            "text" | "name" => PgType::Text,
            "bytea" => PgType::Bytea,
            "uuid" => PgType::Uuid,
            "json" => PgType::Json,
            "jsonb" => PgType::Jsonb,
            _ => PgType::Other,
        }
    }

    /// Whether sluice converts this type on the client.
    pub fn client_converted(&self) -> bool {
        *self != PgType::Other
    }
}

/// One column of the target table, as used by the converters and in error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: PgType,
    /// The type as PostgreSQL spells it (`numeric(15,2)`), for messages and summaries.
    pub type_name: String,
    pub not_null: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typmods_decode_like_postgres() {
        // numeric(15,2) is stored as ((15 << 16) | 2) + 4.
        assert_eq!(
            PgType::from_catalog("numeric", ((15 << 16) | 2) + 4),
            PgType::Numeric(Some((15, 2)))
        );
        // numeric(2,-3) (PostgreSQL 15) stores the scale as 11-bit two's complement.
        assert_eq!(
            PgType::from_catalog("numeric", ((2 << 16) | (-3i32 & 0x7ff)) + 4),
            PgType::Numeric(Some((2, -3)))
        );
        assert_eq!(PgType::from_catalog("numeric", -1), PgType::Numeric(None));
        assert_eq!(
            PgType::from_catalog("varchar", 14),
            PgType::Varchar(Some(10))
        );
        assert_eq!(PgType::from_catalog("bpchar", -1), PgType::Char(None));
        assert_eq!(
            PgType::from_catalog("timestamptz", 3),
            PgType::Timestamptz(Some(3))
        );
        assert_eq!(PgType::from_catalog("interval", -1), PgType::Other);
    }
}
