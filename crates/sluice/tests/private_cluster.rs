//! The private cluster (`sluice pg`), `sluice gen tpch` against the tpchgen crate, and
//! `sluice demo` end to end, against the private cluster and against a `--target`.

mod common;

use common::{db, sluice_cmd, stderr, wait_until};
use std::path::Path;
use std::process::Output;

fn pg(dir: &Path, args: &[&str]) -> Output {
    sluice_cmd()
        .arg("pg")
        .args(args)
        .arg("--pg-dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = common::pg().root.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn postmaster_pid(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn psql_url(url: &str, sql: &str) -> String {
    let out = std::process::Command::new(common::psql_bin())
        .args(["-XAtq", "-d", url, "-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text(&out).trim().to_string()
}

#[test]
fn start_stop_status_url_and_recovery_after_kill_9() {
    let root = temp_dir("private");
    let dir = root.join("pg");
    // No cluster yet.
    let st = pg(&dir, &["status"]);
    assert_eq!(st.status.code(), Some(4), "not running: cannot connect");
    assert!(text(&st).contains("no cluster"), "{}", text(&st));
    let u = pg(&dir, &["url"]);
    assert_eq!(u.status.code(), Some(4));
    assert!(stderr(&u).contains("no cluster"), "{}", stderr(&u));
    // Start creates it and prints the URL.
    let start = pg(&dir, &["start"]);
    assert!(start.status.success(), "{}", stderr(&start));
    let url = text(&start).trim().to_string();
    assert!(url.starts_with("postgresql://sluice@127.0.0.1:"), "{url}");
    assert_eq!(text(&pg(&dir, &["url"])).trim(), url);
    let st = text(&pg(&dir, &["status"]));
    assert!(st.contains("running"), "{st}");
    assert!(
        st.contains("shared_buffers = '1GB'"),
        "the configuration is shown: {st}"
    );
    assert!(st.contains("listen_addresses = '127.0.0.1'"), "{st}");
    // A second start reuses the running server.
    let pid = postmaster_pid(&dir);
    let again = pg(&dir, &["start"]);
    assert!(again.status.success());
    assert_eq!(text(&again).trim(), url);
    assert_eq!(postmaster_pid(&dir), pid);
    // As root, the server runs as postgres.
    let uid_line = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap()
        .to_string();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            !uid_line.split_whitespace().nth(1).unwrap().eq("0"),
            "server runs as root: {uid_line}"
        );
        assert!(st.contains("server user: postgres"), "{st}");
    }
    // Data survives kill -9 and a restart (crash recovery); the stale pid file is handled.
    psql_url(
        &url,
        "CREATE TABLE keep (a int); INSERT INTO keep VALUES (42)",
    );
    // SAFETY: sending SIGKILL to a process we started.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    // SAFETY: signal 0 only asks whether the process is still there.
    wait_until("the killed server to be gone", 30, || unsafe {
        libc::kill(pid as i32, 0) != 0
    });
    assert!(
        dir.join("postmaster.pid").exists(),
        "a crash leaves the pid file behind"
    );
    let restart = pg(&dir, &["start"]);
    assert!(restart.status.success(), "{}", stderr(&restart));
    assert_ne!(postmaster_pid(&dir), pid);
    assert_eq!(psql_url(&url, "SELECT a FROM keep"), "42");
    // psql with its own options before `--` and after it (issue 13, item 8).
    let q = sluice_cmd()
        .args(["pg", "--pg-dir"])
        .arg(&dir)
        .args(["psql", "-q", "--", "-Atc", "select 6 * 7"])
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", stderr(&q));
    assert_eq!(text(&q).trim(), "42");
    // Stop; a second stop says that it was not running.
    let stop = pg(&dir, &["stop"]);
    assert!(stop.status.success());
    assert!(
        stderr(&stop).contains("stopped the cluster"),
        "{}",
        stderr(&stop)
    );
    let stop = pg(&dir, &["stop"]);
    assert!(stop.status.success());
    assert!(
        stderr(&stop).contains("is not running"),
        "{}",
        stderr(&stop)
    );
    let st = pg(&dir, &["status"]);
    assert!(text(&st).contains("stopped"), "{}", text(&st));
    assert!(text(&st).contains("disk use:"), "{}", text(&st));
    assert_eq!(st.status.code(), Some(4));
    // The URL of a stopped cluster is not handed out as if it could be used.
    let u = pg(&dir, &["url"]);
    assert_eq!(u.status.code(), Some(4));
    assert!(text(&u).is_empty());
    assert!(stderr(&u).contains("not running"), "{}", stderr(&u));
    // Destroy removes the directory, and says how much it freed.
    let gone = pg(&dir, &["destroy"]);
    assert!(gone.status.success(), "{}", stderr(&gone));
    assert!(
        stderr(&gone).contains("removed the cluster"),
        "{}",
        stderr(&gone)
    );
    assert!(!dir.exists());
    // It refuses a directory that is not a cluster sluice made.
    let other = root.join("not-a-cluster");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("precious.txt"), b"keep me").unwrap();
    let refused = pg(&other, &["destroy"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(other.join("precious.txt").exists());
}

#[test]
fn missing_binaries_name_the_package_and_leave_nothing() {
    let root = temp_dir("nobin");
    let dir = root.join("pg");
    let out = sluice_cmd()
        .args(["pg", "start", "--pg-dir"])
        .arg(&dir)
        .env("SLUICE_PG_BIN", root.join("no-such-bin"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("apt-get install postgresql"), "{err}");
    assert!(!dir.exists(), "nothing half-made");
    // The same for a load without a target.
    let f = root.join("t.csv");
    std::fs::write(&f, "1\n").unwrap();
    let out = sluice_cmd()
        .args(["load", "-q", "--pg-dir"])
        .arg(&dir)
        .arg(&f)
        .env("SLUICE_PG_BIN", root.join("no-such-bin"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("apt-get install postgresql"));
}

/// What tpchgen itself writes for one table part, as the reference for `sluice gen`.
fn reference(table: &str, scale: f64, part: i32, parts: i32, csv: bool) -> String {
    use std::fmt::Write;
    use tpchgen::csv::*;
    use tpchgen::generators::*;
    let mut s = String::new();
    macro_rules! emit {
        ($g:expr, $c:ident) => {{
            if csv {
                writeln!(s, "{}", $c::header()).unwrap();
                for r in $g.iter() {
                    writeln!(s, "{}", $c::new(r)).unwrap();
                }
            } else {
                for r in $g.iter() {
                    writeln!(s, "{r}").unwrap();
                }
            }
        }};
    }
    match table {
        "nation" => emit!(NationGenerator::new(scale, 1, 1), NationCsv),
        "region" => emit!(RegionGenerator::new(scale, 1, 1), RegionCsv),
        "part" => emit!(PartGenerator::new(scale, part, parts), PartCsv),
        "supplier" => emit!(SupplierGenerator::new(scale, part, parts), SupplierCsv),
        "partsupp" => emit!(PartSuppGenerator::new(scale, part, parts), PartSuppCsv),
        "customer" => emit!(CustomerGenerator::new(scale, part, parts), CustomerCsv),
        "orders" => emit!(OrderGenerator::new(scale, part, parts), OrderCsv),
        "lineitem" => emit!(LineItemGenerator::new(scale, part, parts), LineItemCsv),
        _ => unreachable!(),
    }
    s
}

#[test]
fn gen_output_equals_tpchgen() {
    let root = temp_dir("gen");
    let tables = [
        "lineitem", "orders", "partsupp", "part", "customer", "supplier", "nation", "region",
    ];
    for (format, csv) in [("tbl", false), ("csv", true)] {
        for parts in [1, 3] {
            let out = root.join(format!("{format}-{parts}"));
            let o = sluice_cmd()
                .args(["gen", "tpch", "-q", "--scale", "0.01", "--format", format])
                .args(["--parts", &parts.to_string(), "--out"])
                .arg(&out)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            for t in tables {
                let split = parts > 1 && t != "nation" && t != "region";
                for p in 1..=(if split { parts } else { 1 }) {
                    let path = if split {
                        out.join(t).join(format!("{t}.{p}.{format}"))
                    } else {
                        out.join(format!("{t}.{format}"))
                    };
                    let got = std::fs::read_to_string(&path).unwrap();
                    let want = reference(t, 0.01, p, if split { parts } else { 1 }, csv);
                    assert!(got == want, "{} differs from tpchgen", path.display());
                }
            }
        }
    }
    // One part of a many-part set, as one source host of the seed would make.
    let out = root.join("one-part");
    let o = sluice_cmd()
        .args([
            "gen",
            "tpch",
            "-q",
            "--scale",
            "0.01",
            "--parts",
            "4",
            "--part",
            "3",
            "--tables",
            "orders,nation",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(out.join("orders/orders.3.tbl")).unwrap(),
        reference("orders", 0.01, 3, 4, false)
    );
    assert!(
        !out.join("nation.tbl").exists(),
        "nation belongs to part 1 only"
    );
}

#[test]
fn demo_end_to_end_on_the_private_cluster_and_on_a_target() {
    let root = temp_dir("demo");
    let out = sluice_cmd()
        .args(["demo", "-q", "--scale", "0.01", "--pg-dir"])
        .arg(root.join("pg"))
        .output()
        .unwrap();
    let stdout = text(&out);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(
        stdout.contains("verified: all eight tables hold exactly the generated rows"),
        "{stdout}"
    );
    assert!(stdout.contains("l_returnflag"), "Q1 answered: {stdout}");
    assert!(stdout.contains("TB/hour"), "{stdout}");
    assert!(stdout.contains(" pg psql"), "{stdout}");
    // Verified before the query's header, and where the gigabytes went.
    let verified = stdout.find("verified:").unwrap();
    assert!(verified < stdout.find("TPC-H Q1").unwrap(), "{stdout}");
    assert!(stdout.contains("data:    "), "{stdout}");
    assert!(stdout.contains("pg destroy"), "{stdout}");
    assert!(
        stdout.contains(&format!("cluster: {}", root.join("pg").display())),
        "{stdout}"
    );
    // A second run reuses the data and replaces the tables cleanly.
    let again = sluice_cmd()
        .args(["demo", "-q", "--scale", "0.01", "--pg-dir"])
        .arg(root.join("pg"))
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stderr(&again).contains("already in"), "{}", stderr(&again));
    assert!(text(&again).contains("verified"));
    // The preflight works on the private cluster too (issue 12), and leaves nothing.
    let probe = sluice_cmd()
        .args(["probe", "--jobs", "1", "--seconds", "0.2", "--pg-dir"])
        .arg(root.join("pg"))
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", stderr(&probe));
    assert!(
        text(&probe).contains("recommended: --jobs 1"),
        "{}",
        text(&probe)
    );
    let _ = pg(&root.join("pg"), &["stop"]);
    // Against a target.
    let d = db("demo_target");
    let out = sluice_cmd()
        .args([
            "demo", "-q", "--scale", "0.01", "--target", &d.url, "--data",
        ])
        .arg(root.join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text(&out).contains("verified"));
    assert_eq!(d.count("lineitem"), 60_175);
    assert_eq!(d.count("nation"), 25);
    // --clean deletes the generated data afterwards; the tables stay.
    let out = sluice_cmd()
        .args([
            "demo", "-q", "--scale", "0.01", "--clean", "--target", &d.url, "--data",
        ])
        .arg(root.join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text(&out).contains("removed the generated data"),
        "{}",
        text(&out)
    );
    assert!(!root.join("data").exists());
    assert_eq!(d.count("lineitem"), 60_175);
}

#[test]
fn a_relative_cluster_directory_works() {
    let root = temp_dir("relative");
    let out = sluice_cmd()
        .current_dir(&root)
        .args(["pg", "start", "--pg-dir", "rel/pg"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(root.join("rel/pg/PG_VERSION").exists());
    let stop = sluice_cmd()
        .current_dir(&root)
        .args(["pg", "stop", "--pg-dir", "rel/pg"])
        .output()
        .unwrap();
    assert!(stop.status.success(), "{}", stderr(&stop));
}
