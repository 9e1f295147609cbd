//! MariaDB's two bulk transports side by side, for issue 35's question of which sluice should
//! use: `LOAD DATA LOCAL INFILE` of a text stream (what sluice sends today) against
//! `COM_STMT_BULK_EXECUTE` (an `INSERT` with typed binary parameters for many rows in one
//! command, what `mysql_async`'s `exec_batch` sends to MariaDB). Both get the same rows of a
//! TPC-H `lineitem` file, converted before the clock starts (sluice converts on the client for
//! either), into an empty InnoDB table without indexes, each in one transaction; the rounds
//! interleave them. It prints each run and the medians, and `Innodb_bulk_operations` (whether
//! InnoDB's empty-table bulk path was taken).
//!
//!   cargo run --release -p sluice-mariadb --example transports -- URL lineitem.tbl [ROWS] [ROUNDS]

use bytes::Bytes;
use futures_util::StreamExt;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, Value};
use std::time::Instant;

const COLUMNS: &str = "l_orderkey bigint NOT NULL, l_partkey int NOT NULL, \
    l_suppkey int NOT NULL, l_linenumber int NOT NULL, l_quantity decimal(15,2) NOT NULL, \
    l_extendedprice decimal(15,2) NOT NULL, l_discount decimal(15,2) NOT NULL, \
    l_tax decimal(15,2) NOT NULL, l_returnflag char(1) NOT NULL, l_linestatus char(1) NOT NULL, \
    l_shipdate date NOT NULL, l_commitdate date NOT NULL, l_receiptdate date NOT NULL, \
    l_shipinstruct char(25) NOT NULL, l_shipmode char(10) NOT NULL, l_comment varchar(44) NOT NULL";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, file) = (&args[1], &args[2]);
    let limit: usize = args.get(3).map_or(Ok(usize::MAX), |s| s.parse())?;
    let rounds: usize = args.get(4).map_or(Ok(3), |s| s.parse())?;
    let lines: Vec<String> = std::fs::read_to_string(file)?
        .lines()
        .take(limit)
        .map(|l| l.trim_end_matches('|').to_string())
        .collect();
    let text = canonical(&lines);
    let typed = typed(&lines);
    let bytes = text.len();
    let mut conn = Conn::new(Opts::from_url(url)?).await?;
    conn.query_drop("DROP TABLE IF EXISTS t_load, t_bulk")
        .await?;
    for t in ["t_load", "t_bulk"] {
        conn.query_drop(format!("CREATE TABLE {t} ({COLUMNS}) ENGINE=InnoDB"))
            .await?;
    }
    let (mut load, mut bulk) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (a, ops_a) = timed(&mut conn, "t_load", |c| load_local(c, &text)).await?;
        // The parameters are copied before the clock starts: `exec_batch` takes them owned.
        let batch = typed.clone();
        let (b, ops_b) = timed(&mut conn, "t_bulk", move |c| bulk_execute(c, batch)).await?;
        for t in ["t_load", "t_bulk"] {
            let n: Option<usize> = conn
                .query_first(format!("SELECT COUNT(*) FROM {t}"))
                .await?;
            assert_eq!(n, Some(lines.len()), "{t} holds every row");
        }
        println!(
            "round {}: LOAD DATA LOCAL {a:.2} s (bulk path {ops_a}), \
             COM_STMT_BULK_EXECUTE {b:.2} s (bulk path {ops_b})",
            round + 1
        );
        load.push(a);
        bulk.push(b);
    }
    let (a, b) = (median(&mut load), median(&mut bulk));
    let mb = |s: f64| bytes as f64 / s / 1e6;
    println!(
        "{} rows ({bytes} bytes of text), {rounds} rounds interleaved: LOAD DATA LOCAL median \
         {a:.2} s ({:.1} MB/s), COM_STMT_BULK_EXECUTE median {b:.2} s ({:.1} MB/s), \
         bulk execute / load = {:.2}",
        lines.len(),
        mb(a),
        mb(b),
        b / a
    );
    Ok(())
}

/// Empties `table`, runs `load` in one transaction, and returns its seconds and how many
/// times InnoDB took its empty-table bulk path meanwhile.
async fn timed<'c, F, Fut>(
    conn: &'c mut Conn,
    table: &str,
    load: F,
) -> Result<(f64, i64), mysql_async::Error>
where
    F: FnOnce(&'c mut Conn) -> Fut,
    Fut: std::future::Future<Output = Result<&'c mut Conn, mysql_async::Error>>,
{
    conn.query_drop(format!("TRUNCATE TABLE {table}")).await?;
    let before = bulk_operations(conn).await?;
    let start = Instant::now();
    let conn = load(conn).await?;
    let seconds = start.elapsed().as_secs_f64();
    let after = bulk_operations(conn).await?;
    Ok((seconds, after - before))
}

async fn bulk_operations(conn: &mut Conn) -> Result<i64, mysql_async::Error> {
    let row: Option<(String, i64)> = conn
        .query_first("SHOW GLOBAL STATUS LIKE 'Innodb_bulk_operations'")
        .await?;
    Ok(row.map_or(-1, |r| r.1))
}

async fn load_local<'c>(
    conn: &'c mut Conn,
    text: &[u8],
) -> Result<&'c mut Conn, mysql_async::Error> {
    let data = Bytes::copy_from_slice(text);
    conn.set_infile_handler(async move {
        let chunks: Vec<std::io::Result<Bytes>> = (0..data.len())
            .step_by(1 << 20)
            .map(|at| Ok(data.slice(at..(at + (1 << 20)).min(data.len()))))
            .collect();
        Ok(futures_util::stream::iter(chunks).boxed())
    });
    conn.query_drop("START TRANSACTION").await?;
    conn.query_drop(
        "LOAD DATA LOCAL INFILE 'rows' INTO TABLE t_load CHARACTER SET utf8mb4 \
         FIELDS TERMINATED BY '\\t' ENCLOSED BY '' ESCAPED BY '\\\\' \
         LINES STARTING BY '' TERMINATED BY '\\n'",
    )
    .await?;
    conn.query_drop("COMMIT").await?;
    Ok(conn)
}

async fn bulk_execute(
    conn: &mut Conn,
    rows: Vec<mysql_async::Params>,
) -> Result<&mut Conn, mysql_async::Error> {
    let marks = vec!["?"; 16].join(", ");
    conn.query_drop("START TRANSACTION").await?;
    conn.exec_batch(format!("INSERT INTO t_bulk VALUES ({marks})"), rows)
        .await?;
    conn.query_drop("COMMIT").await?;
    Ok(conn)
}

/// The rows as sluice's canonical stream (tab-separated; TPC-H text needs no escapes).
fn canonical(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend(l.replace('|', "\t").bytes());
        out.push(b'\n');
    }
    out
}

/// The rows as typed parameters: integers, decimals as their digits, dates, strings.
fn typed(lines: &[String]) -> Vec<mysql_async::Params> {
    lines
        .iter()
        .map(|l| {
            let values = l
                .split('|')
                .enumerate()
                .map(|(i, f)| match i {
                    0..=3 => Value::Int(f.parse().expect("an integer")),
                    10..=12 => {
                        let p: Vec<u32> = f.split('-').map(|x| x.parse().unwrap()).collect();
                        Value::Date(p[0] as u16, p[1] as u8, p[2] as u8, 0, 0, 0, 0)
                    }
                    _ => Value::Bytes(f.as_bytes().to_vec()),
                })
                .collect();
            mysql_async::Params::Positional(values)
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
