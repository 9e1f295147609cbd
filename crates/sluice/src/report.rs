//! The end-of-load summary: a table on stdout and the same figures as JSON.

use crate::load::plan::Plan;
use crate::load::RunOutcome;
use serde::Serialize;

#[derive(Serialize, Debug, Clone)]
pub struct TableReport {
    pub table: String,
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    /// How the destination loads the table (PostgreSQL: `binary`, or `text` when some column
    /// is converted by the server).
    pub copy_format: &'static str,
    pub server_converted_columns: Vec<String>,
}

#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub target: String,
    pub dry_run: bool,
    /// How the rows reached their tables (`direct`).
    pub strategy: &'static str,
    pub jobs: usize,
    pub copy_buffer_bytes: usize,
    pub chunks: usize,
    pub tables: Vec<TableReport>,
    pub total: TableReport,
    pub elapsed_seconds: f64,
    pub server_conversions: u64,
    pub streams: Vec<crate::load::StreamStats>,
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

pub fn build(
    plan: &Plan,
    outcome: &RunOutcome,
    target: String,
    formats: Vec<&'static str>,
    dry_run: bool,
    jobs: usize,
    copy_buffer: usize,
) -> Report {
    let chunks: Vec<&crate::load::ChunkStat> =
        outcome.streams.iter().flat_map(|s| &s.chunks).collect();
    let tables: Vec<TableReport> = plan
        .tables
        .iter()
        .enumerate()
        .map(|(i, tp)| {
            let mine = chunks.iter().filter(|c| c.table_index == i);
            let (rows, bytes, start, end) = mine
                .fold((0, 0, f64::INFINITY, 0f64), |(r, b, s, e), c| {
                    (r + c.rows, b + c.bytes, s.min(c.start), e.max(c.end))
                });
            let seconds = (end - start).max(0.0);
            TableReport {
                table: tp.table.name.clone(),
                files: plan.inputs.iter().filter(|inp| inp.table == i).count(),
                rows,
                bytes,
                seconds,
                mb_per_s: mbps(bytes, seconds),
                copy_format: formats.get(i).copied().unwrap_or(""),
                server_converted_columns: tp
                    .server_converted()
                    .iter()
                    .map(|c| format!("{} ({})", c.name, c.type_name))
                    .collect(),
            }
        })
        .collect();
    let elapsed = outcome.elapsed.as_secs_f64();
    let bytes = tables.iter().map(|t| t.bytes).sum();
    let total = TableReport {
        table: "total".into(),
        files: plan.inputs.len(),
        rows: tables.iter().map(|t| t.rows).sum(),
        bytes,
        seconds: elapsed,
        mb_per_s: mbps(bytes, elapsed),
        copy_format: "",
        server_converted_columns: Vec::new(),
    };
    Report {
        target,
        dry_run,
        strategy: outcome.strategy,
        jobs,
        copy_buffer_bytes: copy_buffer,
        chunks: plan.chunks.len(),
        tables,
        total,
        elapsed_seconds: elapsed,
        server_conversions: outcome.server_conversions,
        streams: outcome.streams.clone(),
    }
}

/// The summary as an aligned text table.
pub fn render(report: &Report) -> String {
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
            crate::progress::thousands(t.rows),
            crate::progress::human_bytes(t.bytes),
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
        if !t.server_converted_columns.is_empty() {
            out.push_str(&format!(
                "note: {} loads through text COPY; the server converts {}\n",
                t.table,
                t.server_converted_columns.join(", ")
            ));
        }
    }
    if report.server_conversions > 0 {
        out.push_str(&format!(
            "note: {} values in spellings sluice does not parse were converted by the server\n",
            crate::progress::thousands(report.server_conversions)
        ));
    }
    if report.dry_run {
        out.push_str("dry run: every row was read, converted and encoded; nothing was sent\n");
    }
    out
}
