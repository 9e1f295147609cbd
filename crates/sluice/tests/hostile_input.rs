//! Bad input, the rest of the list: inputs a hostile user feeds a loader. Each test
//! asserts the exit code, the message (file, line, value, reason) and the table afterwards,
//! and where psql can load the same bytes, that sluice loads what psql loads. (Invalid UTF-8
//! and an unterminated quote are in bad_input.rs; a missing file and a directory in
//! first_use.rs.)

mod common;

use common::{assert_has, db, run_bounded, sluice_cmd, stderr, Db};

fn load(d: &Db, args: &[&str]) -> std::process::Output {
    let mut all = vec!["load", "-q", "--table", "b"];
    all.extend_from_slice(args);
    d.sluice(&all)
}

#[test]
fn a_byte_order_mark_loads_as_psql_loads_it() {
    let d = db("bom_text");
    d.psql("CREATE TABLE b (s text, a int); CREATE TABLE ref (LIKE b)");
    let f = d.file("bom.csv", "\u{feff}x,1\ny,2\n".as_bytes());
    let out = load(&d, &[f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    d.psql_copy("ref", &f, "format csv").unwrap();
    d.assert_same_rows("b", "ref");
    // psql keeps the mark as data, and so does sluice.
    assert_eq!(
        d.psql("SELECT count(*) FROM b WHERE s = E'\\uFEFFx'")
            .trim(),
        "1"
    );
}

#[test]
fn a_nul_byte_is_a_bad_row_named_with_its_place() {
    let d = db("nul");
    d.psql("CREATE TABLE b (a int, s text); CREATE TABLE ref (LIKE b)");
    let f = d.file("nul.csv", b"1,ok\n2,a\x00b\n");
    let out = load(&d, &[f.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(
        &err,
        &[
            "nul.csv, line 2 (value at byte offset 7), column s (text)",
            "value \"a\\x00b\"",
            "0x00",
        ],
    );
    assert_eq!(d.count("b"), 0);
    // The server refuses 0x00 in text; psql's \copy never sends it: it cuts the line at the
    // NUL and loads "a", silently losing the rest. sluice refuses rather than lose data.
    d.psql_copy("ref", &f, "format csv").unwrap();
    assert_eq!(d.psql("SELECT s FROM ref WHERE a = 2").trim(), "a");
}

#[test]
fn a_lone_carriage_return_in_an_unquoted_field_is_a_bad_row() {
    let d = db("lone_cr");
    d.psql("CREATE TABLE b (a int, s text); CREATE TABLE ref (LIKE b)");
    for (name, bytes, format) in [
        ("cr.csv", &b"1,x\n2,a\rb\n"[..], "csv"),
        ("cr.txt", &b"1\tx\n2\ta\rb\n"[..], "text"),
    ] {
        let f = d.file(name, bytes);
        let out = load(&d, &["--format", format, f.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{name}: {err}");
        assert_has(&err, &[name, "line 2", "carriage return found in data"]);
        assert_eq!(d.count("b"), 0);
        assert!(
            d.psql_copy("ref", &f, &format!("format {format}")).is_err(),
            "psql refuses {name} too"
        );
    }
}

#[test]
fn a_50_mb_field_loads_whole() {
    let d = db("big_field");
    d.psql("CREATE TABLE b (a int, s text); CREATE TABLE ref (LIKE b)");
    let mut bytes = b"1,".to_vec();
    bytes.extend((0..50_000_000u32).map(|i| b"abcdefghij"[(i % 10) as usize]));
    bytes.extend_from_slice(b"\n2,small\n");
    let f = d.file("big.csv", &bytes);
    let out = load(&d, &[f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    d.psql_copy("ref", &f, "format csv").unwrap();
    let sums = "SELECT string_agg(a || ':' || length(s) || ':' || md5(s), ',' ORDER BY a) FROM";
    assert_eq!(d.psql(&format!("{sums} b")), d.psql(&format!("{sums} ref")));
    assert_eq!(
        d.psql("SELECT length(s) FROM b WHERE a = 1").trim(),
        "50000000"
    );
}

#[test]
fn a_line_with_a_million_fields_fails_in_bounded_time_and_memory() {
    let d = db("wide");
    d.psql("CREATE TABLE b (a int, s text)");
    let mut line = b"1".to_vec();
    for _ in 0..1_000_000 {
        line.extend_from_slice(b",x");
    }
    line.push(b'\n');
    let f = d.file("wide.csv", &line);
    let mut cmd = sluice_cmd();
    cmd.args(["load", "-q", "--table", "b", "--target", &d.url])
        .arg(&f)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = run_bounded(cmd, 120);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(
        &err,
        &[
            "wide.csv, line 1 (record at byte offset 0)",
            "extra data: 1000001 fields where the table takes 2",
            "(2000001 bytes in all)",
        ],
    );
    // One screen, not two megabytes.
    assert!(err.len() < 2000, "{} bytes of message", err.len());
    assert_eq!(d.count("b"), 0);
}

#[test]
fn empty_and_header_only_files_load_nothing_and_succeed() {
    let d = db("empty");
    d.psql("CREATE TABLE b (a int, s text)");
    let empty = d.file("empty.csv", b"");
    let header = d.file("header.csv", b"a,s\n");
    let out = load(&d, &[empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = load(&d, &["--header", header.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("total"), "{stdout}");
    assert_eq!(d.count("b"), 0);
}

#[test]
fn an_unreadable_file_exits_1_before_connecting() {
    let d = db("unreadable");
    let f = d.file("secret.csv", b"1,x\n");
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let mut cmd = sluice_cmd();
    cmd.args(["load", "--table", "b", "--target", &d.url])
        .arg(&f);
    // Root reads any file: run sluice as nobody then.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        cmd.uid(65534).gid(65534).env("HOME", "/tmp");
    }
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_has(&err, &["cannot read", "secret.csv", "ermission denied"]);
}

#[test]
fn corrupt_and_truncated_compressed_files_commit_nothing() {
    let d = db("corrupt");
    d.psql("CREATE TABLE b (a int, s text)");
    let rows: String = (0..20_000).map(|i| format!("{i},row {i}\n")).collect();
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(rows.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let zst = zstd::encode_all(rows.as_bytes(), 3).unwrap();
    let mut corrupt_gz = gz.clone();
    let mid = corrupt_gz.len() / 2;
    for b in &mut corrupt_gz[mid..mid + 16] {
        *b ^= 0x5a;
    }
    let mut corrupt_zst = zst.clone();
    let mid = corrupt_zst.len() / 2;
    for b in &mut corrupt_zst[mid..mid + 16] {
        *b ^= 0x5a;
    }
    // A good file beside each bad one, on two streams: nothing of either may commit.
    let good = d.file("b.good.csv", rows.as_bytes());
    for (name, bytes, says) in [
        ("b.trunc.csv.gz", &gz[..gz.len() / 2], "reading"),
        ("b.corrupt.csv.gz", &corrupt_gz[..], "reading"),
        ("b.trunc.csv.zst", &zst[..zst.len() / 2], "reading"),
        ("b.corrupt.csv.zst", &corrupt_zst[..], "reading"),
    ] {
        let f = d.file(name, bytes);
        let out = load(
            &d,
            &["--jobs", "2", good.to_str().unwrap(), f.to_str().unwrap()],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_has(&err, &[says, name]);
        assert_eq!(d.count("b"), 0, "{name} left rows");
    }
}
