//! Whole loads against a real server: TPC-H against `psql \copy`, big CSV files cut into
//! chunks across streams, all-or-nothing across streams and tables, compressed inputs,
//! standard input, quoted names, and libpq's connection conventions.

mod common;

use common::{db, gen_tpch, pg, sluice_cmd, stderr};
use std::io::Write;

#[test]
fn tpch_sf01_matches_psql_row_for_row() {
    let d = db("tpch");
    let data = d.dir.join("sf01");
    let files = gen_tpch(&data, "0.1", "2");
    // sluice loads into public; psql into schema p.
    let ddl =
        String::from_utf8(sluice_cmd().args(["ddl", "tpch"]).output().unwrap().stdout).unwrap();
    d.psql(&ddl);
    d.psql(&format!("CREATE SCHEMA p; SET search_path = p; {ddl}"));
    assert_eq!(files.len(), 2 + 6 * 2);
    let mut args = vec!["load", "-q", "--jobs", "4", "--chunk-size", "8M"];
    let names: Vec<String> = files
        .iter()
        .map(|f| f.to_str().unwrap().to_string())
        .collect();
    args.extend(names.iter().map(String::as_str));
    let report = d.dir.join("report.json");
    args.extend(["--report-json", report.to_str().unwrap()]);
    let summary = d.sluice_ok(&args);
    assert!(summary.contains("lineitem"), "{summary}");
    d.psql_copy_tbl("p", &files);
    for t in [
        "nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem",
    ] {
        d.assert_same_rows(&format!("public.{t}"), &format!("p.{t}"));
    }
    assert_eq!(d.count("lineitem"), 600_572);
    // The JSON report holds the same figures, and every stream's work adds up.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(
        json["total"]["rows"].as_u64().unwrap(),
        d.count("lineitem")
            + d.count("orders")
            + d.count("partsupp")
            + d.count("part")
            + d.count("customer")
            + d.count("supplier")
            + 30
    );
    let stream_rows: u64 = json["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(stream_rows, json["total"]["rows"].as_u64().unwrap());
    assert_eq!(json["jobs"].as_u64(), Some(4));
    assert!(
        json["chunks"].as_u64().unwrap() > files.len() as u64,
        "big files were cut into chunks"
    );
    assert!(!json["target"].as_str().unwrap().contains("password"));
}

/// A CSV file whose records hold quoted newlines, doubled quotes and delimiters, big enough
/// to be cut into many chunks.
fn tricky_csv(rows: usize, crlf: bool) -> Vec<u8> {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut s = String::from("id,name,note");
    s.push_str(nl);
    for i in 0..rows {
        let note = match i % 5 {
            0 => format!("\"line one{nl}line two, with comma\""),
            1 => "\"say \"\"hi\"\"\"".to_string(),
            2 => String::new(),
            3 => "\"\"".to_string(),
            _ => format!("plain {i}"),
        };
        s.push_str(&format!("{i},\"n{nl}{i}\",{note}{nl}"));
    }
    s.into_bytes()
}

#[test]
fn csv_with_quoted_newlines_splits_safely_across_streams() {
    let d = db("csv_split");
    d.psql("CREATE TABLE s (id int, name text, note text); CREATE TABLE p (LIKE s)");
    for crlf in [false, true] {
        d.psql("TRUNCATE s, p");
        let file = d.file("tricky.csv", &tricky_csv(60_000, crlf));
        let report = d.dir.join("r.json");
        d.sluice_ok(&[
            "load",
            "-q",
            "--table",
            "s",
            "--header",
            "--jobs",
            "4",
            "--chunk-size",
            "64k",
            "--report-json",
            report.to_str().unwrap(),
            file.to_str().unwrap(),
        ]);
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert!(
            json["chunks"].as_u64().unwrap() > 10,
            "the file was cut: {json}"
        );
        d.psql_copy("p", &file, "format csv, header").unwrap();
        d.assert_same_rows("s", "p");
        assert_eq!(d.count("s"), 60_000);
    }
}

#[test]
fn text_with_escaped_newlines_splits_safely() {
    let d = db("text_split");
    d.psql("CREATE TABLE s (id int, v text); CREATE TABLE p (LIKE s)");
    let mut body = Vec::new();
    for i in 0..50_000 {
        // A backslash-newline is a data newline in COPY text format.
        let v = match i % 3 {
            0 => format!("a\\\nb{i}"),
            1 => format!("tab\\there\\\\{i}"),
            _ => "\\N".to_string(),
        };
        writeln!(body, "{i}\t{v}").unwrap();
    }
    let file = d.file("t.txt", &body);
    d.sluice_ok(&[
        "load",
        "-q",
        "--table",
        "s",
        "--jobs",
        "3",
        "--chunk-size",
        "32k",
        file.to_str().unwrap(),
    ]);
    d.psql_copy("p", &file, "format text").unwrap();
    d.assert_same_rows("s", "p");
}

#[test]
fn a_bad_row_in_one_stream_leaves_every_table_empty() {
    let d = db("atomic");
    d.psql("CREATE TABLE big (id int, v text); CREATE TABLE small (id int)");
    let mut body = String::new();
    for i in 0..200_000 {
        body.push_str(&format!("{i}|value {i}|\n"));
    }
    body.push_str("oops|bad row at the end|\n");
    let big = d.file("big.tbl", body.as_bytes());
    let small = d.file("small.tbl", b"1|\n2|\n");
    let out = d.sluice(&[
        "load",
        "-q",
        "--jobs",
        "4",
        "--chunk-size",
        "256k",
        big.to_str().unwrap(),
        small.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("big.tbl -> table big, line 200001"),
        "the absolute line is named: {err}"
    );
    assert!(err.contains("value \"oops\""), "{err}");
    assert_eq!(d.count("big"), 0);
    assert_eq!(d.count("small"), 0);
    // And the same load without the bad row commits everything.
    let body = body.replace("oops|bad row at the end|\n", "");
    let big = d.file("big.tbl", body.as_bytes());
    d.sluice_ok(&[
        "load",
        "-q",
        "--jobs",
        "4",
        "--chunk-size",
        "256k",
        big.to_str().unwrap(),
        small.to_str().unwrap(),
    ]);
    assert_eq!(d.count("big"), 200_000);
    assert_eq!(d.count("small"), 2);
}

#[test]
fn compressed_inputs_and_standard_input() {
    let d = db("compressed");
    d.psql("CREATE TABLE orders (id int, note text); CREATE TABLE ref (LIKE orders)");
    let mut plain = String::new();
    for i in 0..10_000 {
        plain.push_str(&format!("{i}|note {i}|\n"));
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(plain.as_bytes()).unwrap();
    let gz_file = d.file("orders.tbl.gz", &gz.finish().unwrap());
    let zst_file = d.file(
        "orders.2.tbl.zst",
        &zstd::encode_all(plain.as_bytes(), 3).unwrap(),
    );
    d.sluice_ok(&[
        "load",
        "-q",
        gz_file.to_str().unwrap(),
        zst_file.to_str().unwrap(),
    ]);
    assert_eq!(d.count("orders"), 20_000);
    // Standard input, text format.
    let text: String = (0..500).map(|i| format!("{i}\tstdin {i}\n")).collect();
    let mut child = sluice_cmd()
        .args([
            "load", "-q", "--table", "orders", "--format", "text", "-", "--target", &d.url,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(d.count("orders"), 20_500);
    let stripped = d.file("ref.txt", plain.replace("|\n", "\n").as_bytes());
    d.psql_copy("ref", &stripped, "delimiter '|'").unwrap();
    d.psql_copy("ref", &stripped, "delimiter '|'").unwrap();
    let stdin_file = d.file("stdin.txt", text.as_bytes());
    d.psql_copy("ref", &stdin_file, "format text").unwrap();
    d.assert_same_rows("orders", "ref");
}

#[test]
fn quoted_names_options_and_column_lists() {
    let d = db("names");
    d.psql(
        r#"CREATE SCHEMA "Odd Schema";
           CREATE TABLE "Odd Schema"."My ""Table""" ("Weird Col" text, "ID" int, filler text DEFAULT 'dflt');
           CREATE TABLE ref (LIKE "Odd Schema"."My ""Table""" INCLUDING DEFAULTS)"#,
    );
    let file = d.file("x.csv", b"ID;Weird Col\n1;'a;b'\n2;NULL\n3;''\n");
    d.sluice_ok(&[
        "load",
        "-q",
        "--table",
        r#""Odd Schema"."My ""Table""""#,
        "--format",
        "csv",
        "--delimiter",
        ";",
        "--quote",
        "'",
        "--null",
        "NULL",
        "--header",
        "--columns",
        r#""ID", "Weird Col""#,
        file.to_str().unwrap(),
    ]);
    d.psql_copy(
        r#"ref ("ID", "Weird Col")"#,
        &file,
        "format csv, delimiter ';', quote '''', null 'NULL', header",
    )
    .unwrap();
    d.assert_same_rows(r#""Odd Schema"."My ""Table""""#, "ref");
    assert_eq!(
        d.psql(r#"SELECT filler FROM "Odd Schema"."My ""Table""" LIMIT 1"#)
            .trim(),
        "dflt"
    );
}

#[test]
fn libpq_environment_variables_name_the_server() {
    let d = db("env");
    d.psql("CREATE TABLE t (a int)");
    let f = d.file("t.csv", b"1\n2\n");
    let out = sluice_cmd()
        .args(["load", "-q", f.to_str().unwrap()])
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", pg().port.to_string())
        .env("PGUSER", "sluice")
        .env("PGDATABASE", &d.name)
        .env("PGSSLMODE", "disable")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("t"), 2);
    // The key=value form works too (--restart: the ledger knows the file is loaded).
    let kv = format!(
        "host=127.0.0.1 port={} user=sluice dbname={} sslmode=disable",
        pg().port,
        d.name
    );
    let out = sluice_cmd()
        .args([
            "load",
            "-q",
            "--restart",
            f.to_str().unwrap(),
            "--target",
            &kv,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("t"), 4);
}

#[test]
fn passwords_from_pgpass_and_never_in_output() {
    let d = db("pgpass");
    // A role that must authenticate with a password, ahead of the cluster's trust rule.
    d.psql("CREATE ROLE pwuser LOGIN PASSWORD 's3cret-pw'; GRANT ALL ON SCHEMA public TO pwuser");
    d.psql("CREATE TABLE t (a int); ALTER TABLE t OWNER TO pwuser");
    let hba = pg().cluster.dir.join("pg_hba.conf");
    let text = std::fs::read_to_string(&hba).unwrap();
    if !text.contains("pwuser") {
        std::fs::write(
            &hba,
            format!("host all pwuser 127.0.0.1/32 scram-sha-256\n{text}"),
        )
        .unwrap();
        d.psql("SELECT pg_reload_conf()");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let f = d.file("t.csv", b"7\n");
    let url = format!(
        "postgresql://pwuser@127.0.0.1:{}/{}?sslmode=disable",
        pg().port,
        d.name
    );
    let home = d.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let pgpass = home.join(".pgpass");
    let run = || {
        sluice_cmd()
            .args(["load", "-q", f.to_str().unwrap(), "--target", &url])
            .env("HOME", &home)
            .output()
            .unwrap()
    };
    // No password anywhere: authentication fails, exit 4.
    let out = run();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    // A wrong password in the URI is not echoed.
    let bad = url.replace("pwuser@", "pwuser:wrong-pw-123@");
    let out = sluice_cmd()
        .args(["load", "-q", f.to_str().unwrap(), "--target", &bad])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(!stderr(&out).contains("wrong-pw-123"), "{}", stderr(&out));
    // .pgpass with safe permissions is used.
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(
        &pgpass,
        format!("127.0.0.1:{}:*:pwuser:s3cret-pw\n", pg().port),
    )
    .unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("t"), 1);
    // World-readable: ignored with libpq's warning.
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("has group or world access"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("s3cret-pw"));
}

#[test]
fn compressed_csv_with_records_across_block_boundaries_matches_psql() {
    // Several MB of CSV with quoted newlines, gzip- and zstd-compressed: decompressed blocks
    // are 1 MB, so many records (some inside quotes) straddle a block boundary.
    let d = db("blocks");
    d.psql("CREATE TABLE s (id int, name text, note text); CREATE TABLE p (LIKE s)");
    let csv = tricky_csv(250_000, false);
    assert!(csv.len() > 5 << 20);
    let plain = d.file("tricky.csv", &csv);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&csv).unwrap();
    let gz_file = d.file("tricky.csv.gz", &gz.finish().unwrap());
    let zst_file = d.file("tricky.csv.zst", &zstd::encode_all(&csv[..], 1).unwrap());
    for f in [&gz_file, &zst_file] {
        d.psql("TRUNCATE s");
        d.sluice_ok(&[
            "load",
            "-q",
            "--table",
            "s",
            "--header",
            f.to_str().unwrap(),
        ]);
        if d.count("p") == 0 {
            d.psql_copy("p", &plain, "format csv, header").unwrap();
        }
        d.assert_same_rows("s", "p");
    }
}

#[test]
fn plain_progress_lines_when_not_a_terminal() {
    let d = db("progress");
    d.psql("CREATE TABLE t (id int, v text)");
    let body: String = (0..400_000).map(|i| format!("{i}|value {i}|\n")).collect();
    let f = d.file("t.tbl", body.as_bytes());
    let run = |quiet: bool| {
        let mut c = sluice_cmd();
        c.args([
            "load",
            f.to_str().unwrap(),
            "--target",
            &d.url,
            "--jobs",
            "1",
        ])
        .env("SLUICE_PROGRESS_SECONDS", "0.001");
        if quiet {
            c.arg("--quiet");
        }
        c.output().unwrap()
    };
    let out = run(false);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("sluice: loading "),
        "progress lines on stderr: {err}"
    );
    assert!(err.contains(" rows, ") && err.contains(" MB/s"), "{err}");
    // The summary goes to stdout.
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(summary.starts_with("table"), "{summary}");
    assert!(summary.contains("total"), "{summary}");
    let quiet = run(true);
    assert!(
        !stderr(&quiet).contains("sluice: loading"),
        "{}",
        stderr(&quiet)
    );
}
