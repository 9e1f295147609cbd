//! A statement in one round trip. tokio-postgres runs `query(&str, params)` in two: it first
//! prepares the statement (Parse, Describe, Sync) to learn its parameters' types, then binds
//! and executes it. On loopback nobody notices; across a 200 ms path each statement costs
//! 0.4 s, and a load's planning, ledger and publishing run a few dozen in series (17 s of a
//! 40 s load there, BENCHMARKS.md "Across a long fat path"). Here each parameter's type comes
//! from its Rust type ([`Param`]) and the statement goes out as Parse, Bind, Execute and Sync
//! at once (tokio-postgres' `query_typed`, an unnamed statement): one round trip.
//!
//! A parameter's type is the one its Rust type binds as anyway (`i64` only ever binds as
//! `int8`, `String` as `text`), so the server sees the same statement; where the SQL wants
//! another (a `name` column compared with a `text` parameter), PostgreSQL casts as it does
//! for a literal of that type.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row};

/// A parameter whose PostgreSQL type follows from its Rust type.
pub trait Param: ToSql + Sync {
    fn pg_type(&self) -> Type;
}

/// A Rust type that binds as one PostgreSQL type.
pub trait Typed {
    const TYPE: Type;
}

/// A Rust type whose vectors bind as one PostgreSQL array type.
pub trait Element: Typed {
    const ARRAY: Type;
}

impl<T: Typed + ToSql + Sync + ?Sized> Param for T {
    fn pg_type(&self) -> Type {
        T::TYPE
    }
}

macro_rules! typed {
    ($($t:ty => $one:ident, $array:ident;)*) => {$(
        impl Typed for $t {
            const TYPE: Type = Type::$one;
        }
        impl Element for $t {
            const ARRAY: Type = Type::$array;
        }
    )*};
}

typed! {
    bool => BOOL, BOOL_ARRAY;
    i16 => INT2, INT2_ARRAY;
    i32 => INT4, INT4_ARRAY;
    i64 => INT8, INT8_ARRAY;
    u32 => OID, OID_ARRAY;
    f64 => FLOAT8, FLOAT8_ARRAY;
    String => TEXT, TEXT_ARRAY;
    str => TEXT, TEXT_ARRAY;
}

impl<T: Typed + ?Sized> Typed for &T {
    const TYPE: Type = T::TYPE;
}

impl<T: Element + ?Sized> Element for &T {
    const ARRAY: Type = T::ARRAY;
}

impl<T: Typed> Typed for Option<T> {
    const TYPE: Type = T::TYPE;
}

impl<T: Element> Element for Option<T> {
    const ARRAY: Type = T::ARRAY;
}

impl<T: Element> Typed for Vec<T> {
    const TYPE: Type = T::ARRAY;
}

impl<T: Element> Typed for [T] {
    const TYPE: Type = T::ARRAY;
}

fn typed<'a>(params: &'a [&'a dyn Param]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|p| (*p as &(dyn ToSql + Sync), p.pg_type()))
        .collect()
}

/// tokio-postgres' `query`, `query_one`, `query_opt` and `execute`, each in one round trip.
#[allow(async_fn_in_trait)]
pub trait OneTrip {
    async fn fetch(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>, Error>;
    async fn fetch_one(&self, sql: &str, params: &[&dyn Param]) -> Result<Row, Error>;
    async fn fetch_opt(&self, sql: &str, params: &[&dyn Param]) -> Result<Option<Row>, Error>;
    /// Runs a statement and returns the number of rows it affected.
    async fn run(&self, sql: &str, params: &[&dyn Param]) -> Result<u64, Error>;
}

impl OneTrip for Client {
    async fn fetch(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>, Error> {
        self.query_typed(sql, &typed(params)).await
    }

    async fn fetch_one(&self, sql: &str, params: &[&dyn Param]) -> Result<Row, Error> {
        self.query_typed_one(sql, &typed(params)).await
    }

    async fn fetch_opt(&self, sql: &str, params: &[&dyn Param]) -> Result<Option<Row>, Error> {
        self.query_typed_opt(sql, &typed(params)).await
    }

    async fn run(&self, sql: &str, params: &[&dyn Param]) -> Result<u64, Error> {
        use futures_util::TryStreamExt;
        let typed = typed(params);
        let rows = self
            .query_typed_raw(sql, typed.iter().map(|(v, t)| (*v, t.clone())))
            .await?;
        let mut rows = std::pin::pin!(rows);
        while rows.as_mut().try_next().await?.is_some() {}
        Ok(rows.rows_affected().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each declared type must be one the value's encoder accepts, or every statement with
    /// such a parameter would fail before it is sent.
    fn accepted<T: Typed + ToSql + Sized>() -> bool {
        T::accepts(&T::TYPE)
    }

    #[test]
    fn every_declared_type_is_one_its_encoder_accepts() {
        assert!(accepted::<bool>());
        assert!(accepted::<i16>());
        assert!(accepted::<i32>());
        assert!(accepted::<i64>());
        assert!(accepted::<u32>());
        assert!(accepted::<f64>());
        assert!(accepted::<String>());
        assert!(accepted::<&str>());
        assert!(accepted::<Option<i64>>());
        assert!(accepted::<Vec<String>>());
        assert!(accepted::<Vec<&str>>());
        assert!(accepted::<Vec<i32>>());
        assert!(accepted::<Vec<i64>>());
        assert!(accepted::<Vec<bool>>());
        assert!(accepted::<Vec<Option<i64>>>());
        assert!(accepted::<Vec<Option<String>>>());
    }

    #[test]
    fn a_parameter_binds_as_its_rust_type_says() {
        let params: [&dyn Param; 4] = [&7i64, &"x", &vec![1i32], &Some(true)];
        let types: Vec<Type> = typed(&params).into_iter().map(|(_, t)| t).collect();
        assert_eq!(
            types,
            [Type::INT8, Type::TEXT, Type::INT4_ARRAY, Type::BOOL]
        );
    }
}
