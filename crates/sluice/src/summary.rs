//! The end-of-load summary as a text table on stdout, from the engine's report. What the
//! ledger decided is not repeated here: the load says it once, on stderr, as it decides.

use sluice_engine::report::Report;
use sluice_engine::units::{human_bytes, thousands};

/// The summary as an aligned text table.
pub fn render(report: &Report) -> String {
    if report.ledger.is_some() && report.tables.is_empty() {
        // The ledger found nothing to load, which the load has said once, on stderr, whatever
        // `-q` says (as it says every ledger decision): there is no summary to add.
        return String::new();
    }
    let mut rows: Vec<[String; 6]> = vec![[
        "table".into(),
        "files".into(),
        "rows".into(),
        "bytes".into(),
        "seconds".into(),
        "MB/s".into(),
    ]];
    for t in report.tables.iter().chain(std::iter::once(&report.total)) {
        rows.push([
            t.table.clone(),
            t.files.to_string(),
            thousands(t.rows),
            human_bytes(t.bytes),
            format!("{:.2}", t.seconds),
            format!("{:.1}", t.mb_per_s),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        if i == rows.len() - 1 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for t in &report.tables {
        if t.copy_format == "text" && t.server_converted_columns.is_empty() {
            let asked = match report.wire_choice {
                Some(_) => "chosen by --wire auto, below",
                None => "--wire text",
            };
            out.push_str(&format!(
                "note: {} loads through text COPY ({asked}): fewer bytes on the wire, every \
                 value validated by sluice, converted again by the server\n",
                t.table
            ));
        }
        if !t.server_converted_columns.is_empty() {
            let how = match t.copy_format {
                "text" => "loads through text COPY; the server converts",
                // MariaDB's one format: the server checks what sluice does not.
                _ => "goes as written; the server checks and converts",
            };
            out.push_str(&format!(
                "note: {} {how} {}\n",
                t.table,
                t.server_converted_columns.join(", ")
            ));
        }
    }
    if let Some(line) = wire_line(report) {
        out.push_str(&line);
    }
    if report.server_conversions > 0 {
        out.push_str(&format!(
            "note: {} values in spellings sluice does not parse were converted by the server\n",
            thousands(report.server_conversions)
        ));
    }
    if report.strategy != "direct" {
        let staged: Vec<&str> = report
            .tables
            .iter()
            .filter(|t| t.strategy != "direct")
            .map(|t| t.table.as_str())
            .collect();
        out.push_str(&format!(
            "strategy: {} (staged: {})\n",
            report.strategy,
            staged.join(", ")
        ));
    }
    if let Some(s) = &report.steps {
        if s.staging_tables > 0 {
            out.push_str(&format!(
                "stage: {} staging table{}; load {:.2} s, index build {:.2} s, analyze {:.2} s \
                 (summed over streams); publish {:.2} s in {} attempt(s), then analyze of the \
                 parents {:.2} s\n",
                s.staging_tables,
                if s.staging_tables == 1 { "" } else { "s" },
                s.load_seconds,
                s.index_seconds,
                s.analyze_seconds,
                s.publish_seconds,
                s.publish_attempts,
                s.parent_analyze_seconds
            ));
        }
        if s.reused_staging_tables > 0 {
            out.push_str(&format!(
                "stage: {} staging table(s) an earlier run of the job committed were published \
                 as they were ({} rows, not loaded again)\n",
                s.reused_staging_tables,
                thousands(s.reused_rows)
            ));
        }
        for r in &s.routed {
            out.push_str(&routed_line(r));
        }
        for p in &s.appended {
            out.push_str(&format!(
                "note: {p} had rows by the publish, so its staged rows were appended, not \
                 switched in\n"
            ));
        }
    }
    out.push_str(&fallback_lines(&report.fallbacks));
    if let Some(w) = report.wal_bytes {
        out.push_str(&format!(
            "WAL written during the load: {}\n",
            human_bytes(w)
        ));
    }
    if let Some(r) = report.rejected.as_ref().filter(|r| r.rows > 0) {
        let causes: Vec<String> = r
            .by_cause
            .iter()
            .map(|(c, n)| format!("{} {}", thousands(*n), c.replace('_', " ")))
            .collect();
        out.push_str(&format!(
            "rejected: {} row{} ({}), within --max-errors {}{}\n",
            thousands(r.rows),
            if r.rows == 1 { "" } else { "s" },
            causes.join(", "),
            r.max_errors,
            match (&r.file, &r.details) {
                (Some(f), Some(d)) => format!("; the rows are in {f}, why in {d}"),
                _ => "; give --rejects PATH to keep them".to_string(),
            }
        ));
        if let Some(first) = &r.first {
            out.push_str(&format!("first rejected row: {first}\n"));
        }
    }
    if let Some(c) = &report.calibration {
        let curve: Vec<String> = c
            .curve
            .iter()
            .map(|p| format!("{} -> {:.0} MB/s", p.jobs, p.mb_per_s))
            .collect();
        let knee = match c.knee {
            Some(k) if k != c.chosen => format!("knee at {k}, kept {}", c.chosen),
            Some(k) => format!("knee at {k}"),
            None => format!("chose {}", c.chosen),
        };
        out.push_str(&format!(
            "jobs auto: {}; {knee} ({})\n",
            curve.join(", "),
            c.why
        ));
    }
    if let Some(v) = &report.verdict {
        out.push_str(&format!("verdict: {}\n", v.line()));
    }
    if let Some(c) = &report.crew {
        out.push_str(&format!(
            "job {}: worker {} of {} loaded the rows above; {} chunk(s) of its files were \
             other workers'; every worker's part is committed (`sluice jobs` lists them)\n",
            c.job, c.worker, c.workers, c.chunks_loaded_elsewhere
        ));
    }
    if report.dry_run {
        out.push_str("dry run: every row was read, converted and encoded; nothing was sent\n");
        if let Some(why) = &report.wire_choice {
            out.push_str(&format!("dry run: --wire auto: {why}\n"));
        }
    }
    out
}

/// What went over the wire: bytes in the destination's encodings, and their ratio to the
/// input's (binary tuples are bigger than the text for most tables; `--wire text` sends less).
fn wire_line(report: &Report) -> Option<String> {
    let t = &report.total;
    if report.dry_run || t.wire_bytes == 0 || t.bytes == 0 {
        return None;
    }
    let mut formats: Vec<&str> = report.tables.iter().map(|t| t.copy_format).collect();
    formats.sort_unstable();
    formats.dedup();
    let chosen = report
        .wire_choice
        .as_ref()
        .map_or(String::new(), |why| format!("; --wire auto chose {why}"));
    Some(format!(
        "wire: {} sent ({}), {:.2}x the input's {}{chosen}\n",
        human_bytes(t.wire_bytes),
        formats.join(" and "),
        t.wire_bytes as f64 / t.bytes as f64,
        human_bytes(t.bytes)
    ))
}

/// What routing rows on the client did for one table.
fn routed_line(r: &sluice_engine::route::RoutedSummary) -> String {
    let rows: u64 = r.partitions.iter().map(|(_, n)| n).sum();
    let parts: Vec<String> = r
        .partitions
        .iter()
        .map(|(name, n)| format!("{name} {}", thousands(*n)))
        .collect();
    format!(
        "routed: {} rows of {} to {} partition(s) on the client ({}); {} outside their chunk's \
         main partition; spill {} in unnamed files \
         under {}, freed\n",
        thousands(rows),
        r.table,
        r.partitions.len(),
        parts.join(", "),
        thousands(r.crossed),
        sluice_engine::units::human_bytes(r.spill_bytes),
        r.spill_dir
    )
}

/// The inputs loaded directly, and why: one line per table and reason (a table of many files
/// that all went direct for one reason says so once).
fn fallback_lines(fallbacks: &[sluice_engine::stage::Fallback]) -> String {
    let mut groups: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for f in fallbacks {
        match groups
            .iter_mut()
            .find(|(t, r, _)| *t == f.table && *r == f.reason)
        {
            Some(g) => g.2.push(&f.file),
            None => groups.push((&f.table, &f.reason, vec![&f.file])),
        }
    }
    groups
        .into_iter()
        .map(|(table, reason, files)| {
            let which = match files.len() {
                1 => files[0].to_string(),
                n => format!("{} and {} more file(s)", files[0], n - 1),
            };
            format!("direct: {which} (table {table}): {reason}\n")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::stage::Fallback;

    fn fallback(file: &str, table: &str, reason: &str) -> Fallback {
        Fallback {
            file: file.into(),
            table: table.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_tables_files_that_went_direct_for_one_reason_are_said_once() {
        let lines = fallback_lines(&[
            fallback("l.1.tbl", "lineitem", "measured slower"),
            fallback("o.1.tbl", "orders", "measured slower"),
            fallback("l.2.tbl", "lineitem", "measured slower"),
            fallback("l.3.tbl", "lineitem", "it has triggers"),
        ]);
        assert_eq!(
            lines,
            "direct: l.1.tbl and 1 more file(s) (table lineitem): measured slower\n\
             direct: o.1.tbl (table orders): measured slower\n\
             direct: l.3.tbl (table lineitem): it has triggers\n"
        );
    }
}
