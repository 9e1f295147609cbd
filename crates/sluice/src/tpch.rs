//! TPC-H: the eight tables' DDL with the specification's types, and dbgen-identical data from
//! the `tpchgen` crate, written in parts as `dbgen -C N -S k` would.
//!
//! Generation writes each file under a temporary name and renames it when complete, then
//! records a manifest (`.sluice-gen.json`) with every file's row count. A later `sluice demo`
//! trusts data only when the manifest matches what it asks for, and verifies the loaded row
//! counts against the manifest's.

use serde::{Deserialize, Serialize};
use std::fmt::Display;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use tpchgen::csv::{
    CustomerCsv, LineItemCsv, NationCsv, OrderCsv, PartCsv, PartSuppCsv, RegionCsv, SupplierCsv,
};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};

/// The eight tables, biggest first.
pub const TABLES: [&str; 8] = [
    "lineitem", "orders", "partsupp", "part", "customer", "supplier", "nation", "region",
];

/// `CREATE TABLE` statements with the specification's column types, without indexes. Keys
/// of orders and lineitem are bigint so that scale factors past 300 fit.
pub fn ddl() -> String {
    let mut out = String::from("-- TPC-H tables with the specification's types, no indexes.\n");
    for (name, cols) in COLUMNS {
        out.push_str(&format!("CREATE TABLE {name} (\n  {cols}\n);\n"));
    }
    out
}

/// Each table's column definitions.
const COLUMNS: [(&str, &str); 8] = [
        (
            "nation",
            "n_nationkey integer NOT NULL,\n  n_name char(25) NOT NULL,\n  n_regionkey integer NOT NULL,\n  n_comment varchar(152) NOT NULL",
        ),
        (
            "region",
            "r_regionkey integer NOT NULL,\n  r_name char(25) NOT NULL,\n  r_comment varchar(152) NOT NULL",
        ),
        (
            "part",
            "p_partkey integer NOT NULL,\n  p_name varchar(55) NOT NULL,\n  p_mfgr char(25) NOT NULL,\n  p_brand char(10) NOT NULL,\n  p_type varchar(25) NOT NULL,\n  p_size integer NOT NULL,\n  p_container char(10) NOT NULL,\n  p_retailprice numeric(15,2) NOT NULL,\n  p_comment varchar(23) NOT NULL",
        ),
        (
            "supplier",
            "s_suppkey integer NOT NULL,\n  s_name char(25) NOT NULL,\n  s_address varchar(40) NOT NULL,\n  s_nationkey integer NOT NULL,\n  s_phone char(15) NOT NULL,\n  s_acctbal numeric(15,2) NOT NULL,\n  s_comment varchar(101) NOT NULL",
        ),
        (
            "partsupp",
            "ps_partkey integer NOT NULL,\n  ps_suppkey integer NOT NULL,\n  ps_availqty integer NOT NULL,\n  ps_supplycost numeric(15,2) NOT NULL,\n  ps_comment varchar(199) NOT NULL",
        ),
        (
            "customer",
            "c_custkey integer NOT NULL,\n  c_name varchar(25) NOT NULL,\n  c_address varchar(40) NOT NULL,\n  c_nationkey integer NOT NULL,\n  c_phone char(15) NOT NULL,\n  c_acctbal numeric(15,2) NOT NULL,\n  c_mktsegment char(10) NOT NULL,\n  c_comment varchar(117) NOT NULL",
        ),
        (
            "orders",
            "o_orderkey bigint NOT NULL,\n  o_custkey integer NOT NULL,\n  o_orderstatus char(1) NOT NULL,\n  o_totalprice numeric(15,2) NOT NULL,\n  o_orderdate date NOT NULL,\n  o_orderpriority char(15) NOT NULL,\n  o_clerk char(15) NOT NULL,\n  o_shippriority integer NOT NULL,\n  o_comment varchar(79) NOT NULL",
        ),
        (
            "lineitem",
            "l_orderkey bigint NOT NULL,\n  l_partkey integer NOT NULL,\n  l_suppkey integer NOT NULL,\n  l_linenumber integer NOT NULL,\n  l_quantity numeric(15,2) NOT NULL,\n  l_extendedprice numeric(15,2) NOT NULL,\n  l_discount numeric(15,2) NOT NULL,\n  l_tax numeric(15,2) NOT NULL,\n  l_returnflag char(1) NOT NULL,\n  l_linestatus char(1) NOT NULL,\n  l_shipdate date NOT NULL,\n  l_commitdate date NOT NULL,\n  l_receiptdate date NOT NULL,\n  l_shipinstruct char(25) NOT NULL,\n  l_shipmode char(10) NOT NULL,\n  l_comment varchar(44) NOT NULL",
        ),
];

/// Each table's primary key, and for the six big ones the column their parts (and the
/// partitioned layout's partitions) are cut along.
pub const KEYS: [(&str, &str, Option<&str>); 8] = [
    ("lineitem", "l_orderkey, l_linenumber", Some("l_orderkey")),
    ("orders", "o_orderkey", Some("o_orderkey")),
    ("partsupp", "ps_partkey, ps_suppkey", Some("ps_partkey")),
    ("part", "p_partkey", Some("p_partkey")),
    ("customer", "c_custkey", Some("c_custkey")),
    ("supplier", "s_suppkey", Some("s_suppkey")),
    ("nation", "n_nationkey", None),
    ("region", "r_regionkey", None),
];

/// The partition key of the first row of part `part` (1-based) of `parts` of a big table, as
/// the generator writes it: where that part's partition starts.
pub fn first_key(table: &str, scale: f64, part: i32, parts: i32) -> Option<i64> {
    match table {
        "part" => PartGenerator::new(scale, part, parts)
            .iter()
            .next()
            .map(|r| r.p_partkey),
        "supplier" => SupplierGenerator::new(scale, part, parts)
            .iter()
            .next()
            .map(|r| r.s_suppkey),
        "partsupp" => PartSuppGenerator::new(scale, part, parts)
            .iter()
            .next()
            .map(|r| r.ps_partkey),
        "customer" => CustomerGenerator::new(scale, part, parts)
            .iter()
            .next()
            .map(|r| r.c_custkey),
        "orders" => OrderGenerator::new(scale, part, parts)
            .iter()
            .next()
            .map(|r| r.o_orderkey),
        "lineitem" => LineItemGenerator::new(scale, part, parts)
            .iter()
            .next()
            .map(|r| r.l_orderkey),
        _ => None,
    }
}

/// Whose SQL the DDL is written in: the partitioned layout differs (PostgreSQL's partitions
/// are tables of their own; MariaDB's are clauses of the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SqlDialect {
    Postgres,
    Mariadb,
}

/// The DDL of the partitioned layout: the six big tables partitioned by ranges of their
/// key, one partition per part of `sluice gen tpch --scale scale --parts parts` (partition k
/// runs from part k's first key to part k+1's; the first and last are open-ended), named
/// `<table>_p<k>` (PostgreSQL: tables of their own) or `p<k>` (MariaDB); nation and region
/// plain. With `keys`, primary keys on every table (on the parents, so that every partition
/// has them; each holds its partition key, as MariaDB requires). A part the generator leaves
/// empty has no key to start its partition at: [`EmptyPart`].
pub fn partitioned_ddl(
    scale: f64,
    parts: u32,
    keys: bool,
    dialect: SqlDialect,
) -> Result<String, EmptyPart> {
    let mut out = format!(
        "-- TPC-H tables, the six big ones partitioned by key range into {parts} partitions \
         aligned with `sluice gen tpch --scale {scale} --parts {parts}`.\n"
    );
    for (name, cols) in COLUMNS {
        let Some((_, pk, part_key)) = KEYS.iter().find(|(t, _, _)| *t == name) else {
            continue;
        };
        let key_clause = if keys {
            format!(",\n  PRIMARY KEY ({pk})")
        } else {
            String::new()
        };
        let Some(k) = part_key else {
            out.push_str(&format!(
                "CREATE TABLE {name} (\n  {cols}{key_clause}\n);\n"
            ));
            continue;
        };
        let starts = part_starts(name, scale, parts)?;
        let create =
            format!("CREATE TABLE {name} (\n  {cols}{key_clause}\n) PARTITION BY RANGE ({k})");
        match dialect {
            SqlDialect::Postgres => {
                out.push_str(&format!("{create};\n"));
                for p in 1..=parts as usize {
                    let bound =
                        |s: Option<i64>, open: &str| s.map_or(open.into(), |v| v.to_string());
                    let lower = bound(starts[p - 1], "MINVALUE");
                    let upper = bound(starts.get(p).copied().flatten(), "MAXVALUE");
                    out.push_str(&format!(
                        "CREATE TABLE {name}_p{p} PARTITION OF {name} FOR VALUES FROM ({lower}) TO ({upper});\n"
                    ));
                }
            }
            SqlDialect::Mariadb => {
                let clauses: Vec<String> = (1..=parts as usize)
                    .map(|p| match starts.get(p).copied().flatten() {
                        Some(v) => format!("  PARTITION p{p} VALUES LESS THAN ({v})"),
                        None => format!("  PARTITION p{p} VALUES LESS THAN MAXVALUE"),
                    })
                    .collect();
                out.push_str(&format!("{create} (\n{}\n);\n", clauses.join(",\n")));
            }
        }
    }
    Ok(out)
}

/// A part of `table` that `sluice gen tpch` leaves empty at this scale (more parts than rows).
#[derive(Debug, PartialEq, Eq)]
pub struct EmptyPart {
    pub table: &'static str,
    pub part: u32,
}

/// Where each of `parts` partitions of `table` starts: part k's first key, `None` for the
/// first (open below).
fn part_starts(table: &'static str, scale: f64, parts: u32) -> Result<Vec<Option<i64>>, EmptyPart> {
    (1..=parts)
        .map(|part| match part {
            1 => Ok(None),
            _ => first_key(table, scale, part as i32, parts as i32)
                .map(Some)
                .ok_or(EmptyPart { table, part }),
        })
        .collect()
}

/// The plain layout's primary keys, as `ALTER TABLE` statements (for `--keys`).
pub fn primary_keys() -> String {
    KEYS.iter()
        .map(|(t, pk, _)| format!("ALTER TABLE {t} ADD PRIMARY KEY ({pk});\n"))
        .collect()
}

/// TPC-H Q1, the pricing summary report: proof that the data is queryable.
pub const Q1: &str = "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, \
    sum(l_extendedprice) AS sum_base_price, \
    sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, \
    sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, \
    avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, \
    avg(l_discount) AS avg_disc, count(*) AS count_order \
    FROM lineitem WHERE l_shipdate <= date '1998-12-01' - interval '90' day \
    GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus";

/// Rows in each of the eight tables, biggest first, as the server counts them.
pub fn table_counts(
    db: &sluice_postgres::admin::Admin,
) -> Result<Vec<(String, u64)>, sluice_postgres::admin::DbError> {
    TABLES
        .iter()
        .map(|t| Ok((t.to_string(), db.count_rows(t)?)))
        .collect()
}

/// Output format of the generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GenFormat {
    Tbl,
    Csv,
}

impl GenFormat {
    pub fn extension(self) -> &'static str {
        match self {
            GenFormat::Tbl => "tbl",
            GenFormat::Csv => "csv",
        }
    }
}

/// Whether a table is split into parts (nation and region are tiny and never are, as in dbgen).
pub fn is_partitioned(table: &str) -> bool {
    !matches!(table, "nation" | "region")
}

/// The path of one generated file.
pub fn file_path(out: &Path, table: &str, part: u32, parts: u32, format: GenFormat) -> PathBuf {
    let ext = format.extension();
    if parts <= 1 || !is_partitioned(table) {
        out.join(format!("{table}.{ext}"))
    } else {
        out.join(table).join(format!("{table}.{part}.{ext}"))
    }
}

fn write_rows<R, F: Display>(
    w: &mut impl Write,
    rows: impl Iterator<Item = R>,
    format: GenFormat,
    csv: impl Fn(R) -> F,
    csv_header: &str,
) -> std::io::Result<u64>
where
    R: Display,
{
    let mut n = 0;
    match format {
        GenFormat::Tbl => {
            for r in rows {
                writeln!(w, "{r}")?;
                n += 1;
            }
        }
        GenFormat::Csv => {
            writeln!(w, "{csv_header}")?;
            for r in rows {
                writeln!(w, "{}", csv(r))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Writes one table's part `part` of `parts` to `w`; returns the number of rows.
pub fn generate(
    table: &str,
    scale: f64,
    part: u32,
    parts: u32,
    format: GenFormat,
    w: &mut impl Write,
) -> std::io::Result<u64> {
    let (p, n) = (part as i32, parts as i32);
    match table {
        "nation" => write_rows(
            w,
            NationGenerator::new(scale, 1, 1).iter(),
            format,
            NationCsv::new,
            NationCsv::header(),
        ),
        "region" => write_rows(
            w,
            RegionGenerator::new(scale, 1, 1).iter(),
            format,
            RegionCsv::new,
            RegionCsv::header(),
        ),
        "part" => write_rows(
            w,
            PartGenerator::new(scale, p, n).iter(),
            format,
            PartCsv::new,
            PartCsv::header(),
        ),
        "supplier" => write_rows(
            w,
            SupplierGenerator::new(scale, p, n).iter(),
            format,
            SupplierCsv::new,
            SupplierCsv::header(),
        ),
        "partsupp" => write_rows(
            w,
            PartSuppGenerator::new(scale, p, n).iter(),
            format,
            PartSuppCsv::new,
            PartSuppCsv::header(),
        ),
        "customer" => write_rows(
            w,
            CustomerGenerator::new(scale, p, n).iter(),
            format,
            CustomerCsv::new,
            CustomerCsv::header(),
        ),
        "orders" => write_rows(
            w,
            OrderGenerator::new(scale, p, n).iter(),
            format,
            OrderCsv::new,
            OrderCsv::header(),
        ),
        "lineitem" => write_rows(
            w,
            LineItemGenerator::new(scale, p, n).iter(),
            format,
            LineItemCsv::new,
            LineItemCsv::header(),
        ),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{other}` is not a TPC-H table ({})", TABLES.join(", ")),
        )),
    }
}

/// One generated file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GeneratedFile {
    pub table: String,
    pub part: u32,
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
}

/// What a generation run produced, stored beside the data.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub scale: f64,
    pub parts: u32,
    pub format: GenFormat,
    pub files: Vec<GeneratedFile>,
}

pub const MANIFEST: &str = ".sluice-gen.json";

impl Manifest {
    pub fn read(out: &Path) -> Option<Manifest> {
        let text = std::fs::read_to_string(out.join(MANIFEST)).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn write(&self, out: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("manifest serializes");
        std::fs::write(out.join(MANIFEST), text + "\n")
    }

    /// Rows of `table` over all its files.
    pub fn rows(&self, table: &str) -> u64 {
        self.files
            .iter()
            .filter(|f| f.table == table)
            .map(|f| f.rows)
            .sum()
    }

    /// Whether every file is still there with its recorded size.
    pub fn complete(&self) -> bool {
        self.files
            .iter()
            .all(|f| std::fs::metadata(&f.path).is_ok_and(|m| m.len() == f.bytes))
    }
}

/// Generates one file atomically (temporary name, then rename).
pub fn generate_file(
    table: &str,
    scale: f64,
    part: u32,
    parts: u32,
    format: GenFormat,
    path: &Path,
) -> std::io::Result<GeneratedFile> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("{}.partial", format.extension()));
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    let rows = generate(table, scale, part, parts, format, &mut w)?;
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, path)?;
    let bytes = std::fs::metadata(path)?.len();
    Ok(GeneratedFile {
        table: table.to_string(),
        part,
        path: path.to_path_buf(),
        rows,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_lineitem_row_is_dbgen_s() {
        // dbgen's SF1 lineitem.tbl starts with this line.
        let first = LineItemGenerator::new(1.0, 1, 1)
            .iter()
            .next()
            .unwrap()
            .to_string();
        assert_eq!(
            first,
            "1|155190|7706|1|17|21168.23|0.04|0.02|N|O|1996-03-13|1996-02-12|1996-03-22|DELIVER IN PERSON|TRUCK|egular courts above the|"
        );
    }

    #[test]
    fn layout_follows_dbgen_parts() {
        let out = Path::new("d");
        assert_eq!(
            file_path(out, "lineitem", 3, 4, GenFormat::Tbl),
            Path::new("d/lineitem/lineitem.3.tbl")
        );
        assert_eq!(
            file_path(out, "lineitem", 1, 1, GenFormat::Csv),
            Path::new("d/lineitem.csv")
        );
        assert_eq!(
            file_path(out, "nation", 1, 4, GenFormat::Tbl),
            Path::new("d/nation.tbl")
        );
    }
}
