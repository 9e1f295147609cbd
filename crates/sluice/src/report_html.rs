//! `--report-html`: the load's report as one self-contained page, to look at rather than read.
//!
//! Everything is inline (SVG charts, one style sheet) and nothing is fetched: the file can be
//! mailed, archived, opened offline. It holds the summary; the verdict with its figures; a
//! timeline of every stream's chunks coloured by table; throughput over time, overall and per
//! table; where each stream's time went; the server's activity over time; `--jobs auto`'s
//! curve and the rejects when there are any; and the server settings that matter.

use sluice_engine::report::Report;
use std::fmt::Write;

/// Colours for tables, stages and server activities, readable on white.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const WIDTH: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An x axis of `seconds` along the plot's width, with about 8 ticks, at `y`.
fn time_axis(out: &mut String, seconds: f64, y: f64) {
    let span = seconds.max(1e-3);
    let step = [
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0,
        60.0, 120.0, 300.0, 600.0,
    ]
    .into_iter()
    .find(|s| span / s <= 8.0)
    .unwrap_or(span / 8.0);
    let plot = WIDTH - LEFT - RIGHT;
    let mut t = 0.0;
    while t <= span + 1e-9 {
        let x = LEFT + t / span * plot;
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            y + 4.0,
            y + 16.0,
            match step {
                s if s < 0.01 => format!("{t:.3} s"),
                s if s < 0.1 => format!("{t:.2} s"),
                s if s < 1.0 => format!("{t:.1} s"),
                _ => format!("{t:.0} s"),
            }
        );
        t += step;
    }
}

/// A stream's name at the left of its lane.
fn lane_label(out: &mut String, y: f64, stream: usize) {
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" class="label" text-anchor="end">stream {}</text>"#,
        LEFT - 8.0,
        y + 15.0,
        stream + 1
    );
}

/// The streams that loaded at least one chunk: `--jobs auto` opens no lane for a stream it
/// never started, and a stream with nothing left to take has nothing to draw.
fn ran(r: &Report) -> Vec<&sluice_engine::run::StreamStats> {
    r.streams.iter().filter(|s| !s.chunks.is_empty()).collect()
}

/// A rate for an axis tick, with as many decimals as the axis's top needs (a tiny load's
/// ticks would all read "0 MB/s" otherwise).
fn rate_tick(v: f64, top: f64) -> String {
    // The unit the top reads at least 1 in, and one decimal more below 10 of it, so that the
    // axis's quarter steps read apart.
    let (scale, unit) = match top {
        t if t >= 1.0 => (1.0, "MB/s"),
        t if t >= 1e-3 => (1e3, "kB/s"),
        _ => (1e6, "B/s"),
    };
    let decimals = if top * scale >= 10.0 { 0 } else { 1 };
    format!("{:.*} {unit}", decimals, v * scale)
}

/// Each stream a lane, each chunk a bar from its start to its end, coloured by table.
fn timeline(r: &Report, tables: &[String]) -> String {
    let streams = ran(r);
    let lanes = streams.len().max(1);
    let lane = 24.0;
    let height = 20.0 + lanes as f64 * lane + 30.0;
    let span = r.elapsed_seconds.max(1e-3);
    let plot = WIDTH - LEFT - RIGHT;
    let mut out = format!(
        r#"<svg class="chart" id="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">"#
    );
    for (i, s) in streams.iter().enumerate() {
        let y = 10.0 + i as f64 * lane;
        lane_label(&mut out, y, s.stream);
        for c in &s.chunks {
            let color =
                PALETTE[tables.iter().position(|t| *t == c.table).unwrap_or(0) % PALETTE.len()];
            let x = LEFT + c.start / span * plot;
            let w = ((c.end - c.start) / span * plot).max(1.0);
            let _ = write!(
                out,
                r#"<rect class="chunk" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="{color}"><title>{}: {} rows, {} bytes, {:.2} s to {:.2} s</title></rect>"#,
                lane - 6.0,
                esc(&c.table),
                c.rows,
                c.bytes,
                c.start,
                c.end
            );
        }
        for step in &s.steps {
            let x = LEFT + step.start / span * plot;
            let w = ((step.end - step.start) / span * plot).max(1.0);
            let _ = write!(
                out,
                r##"<rect class="step" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="#bbb"><title>{}: {:.2} s to {:.2} s</title></rect>"##,
                lane - 6.0,
                esc(&step.what),
                step.start,
                step.end
            );
        }
    }
    after_the_chunks(&mut out, r, lanes as f64 * lane);
    time_axis(&mut out, span, 10.0 + lanes as f64 * lane + 2.0);
    out.push_str("</svg>");
    out
}

/// The stretch after the last chunk, where no rows move but the load is not over: a stage
/// load's index builds, statistics and publish, shaded and named so that it is no
/// unexplained gap.
fn after_the_chunks(out: &mut String, r: &Report, height: f64) {
    let Some(s) = r.steps.as_ref().filter(|s| s.staging_tables > 0) else {
        return;
    };
    let span = r.elapsed_seconds.max(1e-3);
    let last = r
        .streams
        .iter()
        .flat_map(|s| &s.chunks)
        .map(|c| c.end)
        .fold(0.0, f64::max);
    if span - last < span * 0.02 {
        return;
    }
    let plot = WIDTH - LEFT - RIGHT;
    let x = LEFT + last / span * plot;
    let w = (span - last) / span * plot;
    let _ = write!(
        out,
        r##"<rect class="after" x="{x:.1}" y="8" width="{w:.1}" height="{height:.1}" fill="#eee"><title>index builds, statistics and the publish: {:.2} s of index build and {:.2} s of analyze summed over streams, publish {:.2} s, parents' analyze {:.2} s</title></rect><text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">index, analyze, publish</text>"##,
        s.index_seconds,
        s.analyze_seconds,
        s.publish_seconds,
        s.parent_analyze_seconds,
        x + w / 2.0,
        8.0 + height / 2.0 + 4.0
    );
}

/// Throughput over time: each chunk's bytes spread evenly over its time, in 100 bins; one
/// line per table and one for the whole load.
fn throughput(r: &Report, tables: &[String]) -> String {
    const BINS: usize = 100;
    let span = r.elapsed_seconds.max(1e-3);
    let bin = span / BINS as f64;
    let mut per = vec![vec![0f64; BINS]; tables.len()];
    for c in r.streams.iter().flat_map(|s| &s.chunks) {
        let t = tables.iter().position(|x| *x == c.table).unwrap_or(0);
        let d = (c.end - c.start).max(1e-6);
        for (b, slot) in per[t].iter_mut().enumerate() {
            let (lo, hi) = (b as f64 * bin, (b + 1) as f64 * bin);
            let overlap = (hi.min(c.end) - lo.max(c.start)).max(0.0);
            *slot += c.bytes as f64 * overlap / d;
        }
    }
    let total: Vec<f64> = (0..BINS).map(|b| per.iter().map(|p| p[b]).sum()).collect();
    let mbps = |v: f64| v / 1e6 / bin;
    let top = total
        .iter()
        .copied()
        .map(mbps)
        .fold(0.0, f64::max)
        .max(1e-9);
    let (height, plot_h) = (260.0, 200.0);
    let plot = WIDTH - LEFT - RIGHT;
    let mut out = format!(
        r#"<svg class="chart" id="throughput" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">"#
    );
    for k in 0..=4 {
        let v = top * k as f64 / 4.0;
        let y = 10.0 + plot_h - plot_h * k as f64 / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            rate_tick(v, top)
        );
    }
    let line = |series: &[f64], color: &str, width: f64, name: &str| -> String {
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(b, v)| {
                let x = LEFT + (b as f64 + 0.5) / BINS as f64 * plot;
                let y = 10.0 + plot_h - mbps(*v) / top * plot_h;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        format!(
            r#"<polyline class="series" points="{}" fill="none" stroke="{color}" stroke-width="{width}"><title>{}</title></polyline>"#,
            points.join(" "),
            esc(name)
        )
    };
    for (t, series) in per.iter().enumerate() {
        out.push_str(&line(series, PALETTE[t % PALETTE.len()], 1.5, &tables[t]));
    }
    out.push_str(&line(&total, "#222", 2.5, "all tables"));
    time_axis(&mut out, span, 10.0 + plot_h + 2.0);
    out.push_str("</svg>");
    out
}

/// Where each stream's time went: a stacked bar per stream.
fn stages(r: &Report) -> String {
    let names = ["reading", "converting", "sending", "waiting on the server"];
    let streams = ran(r);
    let lane = 24.0;
    let height = 20.0 + streams.len().max(1) as f64 * lane + 30.0;
    let top = streams
        .iter()
        .map(|s| {
            let t = &s.timing;
            t.read_seconds + t.convert_seconds + t.send_seconds + t.server_seconds
        })
        .fold(0.0, f64::max)
        // On the load's own clock: the time the streams did not account for (a publish, the
        // parents' statistics) shows as the bars' distance from the end.
        .max(r.elapsed_seconds)
        .max(1e-3);
    let plot = WIDTH - LEFT - RIGHT;
    let mut out = format!(
        r#"<svg class="chart" id="stages" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">"#
    );
    for (i, s) in streams.iter().enumerate() {
        let y = 10.0 + i as f64 * lane;
        lane_label(&mut out, y, s.stream);
        let t = &s.timing;
        let mut x = LEFT;
        for (k, v) in [
            t.read_seconds,
            t.convert_seconds,
            t.send_seconds,
            t.server_seconds,
        ]
        .into_iter()
        .enumerate()
        {
            let w = v / top * plot;
            let _ = write!(
                out,
                r#"<rect class="stage" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="{}"><title>{}: {v:.2} s</title></rect>"#,
                lane - 6.0,
                PALETTE[k],
                names[k]
            );
            x += w;
        }
    }
    time_axis(
        &mut out,
        top,
        10.0 + streams.len().max(1) as f64 * lane + 2.0,
    );
    out.push_str("</svg>");
    out
}

/// Each stream's TCP connection as the kernel saw it (`TCP_INFO`): what tells a window that
/// is too small (held by the send buffer or the receiver's window) from a full link (held by
/// neither: congestion control, pacing, or little to send). Empty when no stream had a TCP
/// connection.
fn connections(r: &Report) -> String {
    let rows: Vec<String> = ran(r)
        .iter()
        .filter_map(|s| Some((s.stream, s.transport?)))
        .map(|(n, t)| {
            let busy = t.busy_us.max(1) as f64;
            let share = |us: u64| format!("{:.0}%", us as f64 / busy * 100.0);
            format!(
                "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.2}</td>\
                 <td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td></tr>",
                n + 1,
                t.rtt_us as f64 / 1e3,
                t.bytes_acked as f64 / busy,
                busy / 1e6,
                t.send_buffer as f64 / f64::from(1 << 20),
                t.receive_window as f64 / f64::from(1 << 20),
                t.cwnd_bytes as f64 / f64::from(1 << 20),
                share(t.sndbuf_limited_us),
                share(t.rwnd_limited_us),
                share(
                    t.busy_us
                        .saturating_sub(t.sndbuf_limited_us + t.rwnd_limited_us)
                ),
                t.bytes_retransmitted as f64 / t.bytes_acked.max(1) as f64 * 100.0,
            )
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "<h2>Each stream's connection (the kernel's TCP_INFO)</h2><p>Of the time a connection \
         had data in flight: held by its own send buffer, by the server's receive window, or by \
         neither (congestion control, pacing, or little to send). A window that holds a stream \
         most of that time moves about a window a round trip.</p><table id=\"tcp\"><tr><th>stream</th><th>round trip ms</th>\
         <th>MB/s while busy</th><th>busy s</th><th>send buffer MiB</th>\
         <th>receive window MiB</th><th>cwnd MiB</th><th>send buffer held</th>\
         <th>receive window held</th><th>neither</th><th>retransmitted %</th></tr>{}\
         </table>",
        rows.concat()
    )
}

/// A crew's workers: a bar each from when it joined to its hand-over, on one time axis with
/// the job's commit, and a table of each worker's host, state, rows, rate and verdict.
fn workers(r: &Report) -> String {
    let Some(c) = r.crew.as_ref().filter(|c| !c.slots.is_empty()) else {
        return String::new();
    };
    let start = c
        .slots
        .iter()
        .map(|w| w.joined_at)
        .fold(f64::INFINITY, f64::min);
    let end = c
        .slots
        .iter()
        .map(|w| w.updated_at)
        .chain(c.finished_at)
        .fold(start, f64::max);
    let span = (end - start).max(1e-3);
    let (width, lane) = (900.0, 22.0);
    let height = lane * c.slots.len() as f64 + 30.0;
    let mut svg = format!(
        r#"<svg id="workers" width="{}" height="{height}" xmlns="http://www.w3.org/2000/svg">"#,
        width + 120.0
    );
    for (i, w) in c.slots.iter().enumerate() {
        let y = i as f64 * lane + 4.0;
        let x = 110.0 + (w.joined_at - start) / span * width;
        let len = ((w.updated_at - w.joined_at) / span * width).max(1.0);
        svg.push_str(&format!(
            r#"<text x="0" y="{}" font-size="12">worker {} {}</text><rect x="{x:.1}" y="{y}" width="{len:.1}" height="{}" fill="{}"><title>worker {}: {} on {}, {} rows in {:.1} s</title></rect>"#,
            y + 13.0,
            w.worker,
            esc(&w.host),
            lane - 6.0,
            PALETTE[(w.worker as usize - 1) % PALETTE.len()],
            w.worker,
            esc(&w.state),
            esc(&w.host),
            w.rows,
            w.seconds
        ));
    }
    if let Some(f) = c.finished_at {
        let x = 110.0 + (f - start) / span * width;
        svg.push_str(&format!(
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"0\" y2=\"{:.0}\" stroke=\"#222\" \
             stroke-dasharray=\"4 3\"/><text x=\"{x:.1}\" y=\"{:.0}\" font-size=\"12\">\
             committed, {:.1} s after the first worker joined</text>",
            height - 18.0,
            height - 4.0,
            f - start
        ));
    }
    svg.push_str("</svg>");
    let rows: Vec<String> = c
        .slots
        .iter()
        .map(|w| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td>\
                 <td>{:.1}</td><td>{}</td></tr>",
                w.worker,
                esc(&w.host),
                esc(&w.state),
                w.streams,
                w.rows,
                w.seconds,
                w.bytes as f64 / w.seconds.max(1e-9) / 1e6,
                esc(w.verdict.as_deref().unwrap_or("-"))
            )
        })
        .collect();
    format!(
        "<h2>Workers of job {} ({} of them)</h2><p>Each bar runs from when the worker joined to \
         when it handed its prepared part over; the dashed line is the job's commit.</p>{svg}\
         <table id=\"crew\"><tr><th>worker</th><th>host</th><th>state</th><th>streams</th>\
         <th>rows</th><th>seconds</th><th>MB/s</th><th>verdict</th></tr>{}</table>",
        esc(&c.job),
        c.workers,
        rows.concat()
    )
}

/// The server's sessions by activity over time: one stacked column per sample.
fn server_activity(r: &Report) -> String {
    let w = &r.server_waits;
    let (height, plot_h) = (200.0, 140.0);
    let plot = WIDTH - LEFT - RIGHT;
    let span = w
        .series
        .last()
        .map_or(1.0, |s| s.0)
        .max(r.elapsed_seconds)
        .max(1e-3);
    let most = w
        .series
        .iter()
        .map(|(_, c)| c.iter().sum::<u32>())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let col = (plot / w.series.len().max(1) as f64).clamp(1.0, 12.0);
    let mut out = format!(
        r#"<svg class="chart" id="server" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">"#
    );
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{most:.0} sessions</text>"#,
        LEFT - 6.0,
        14.0
    );
    for (t, counts) in &w.series {
        let x = LEFT + t / span * plot;
        let mut y = 10.0 + plot_h;
        for (k, n) in counts.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let h = *n as f64 / most * plot_h;
            y -= h;
            let _ = write!(
                out,
                r#"<rect class="sample" x="{x:.1}" y="{y:.1}" width="{col:.1}" height="{h:.1}" fill="{}"><title>{t:.1} s: {n} {}</title></rect>"#,
                PALETTE[k],
                w.classes.get(k).copied().unwrap_or("?")
            );
        }
    }
    time_axis(&mut out, span, 10.0 + plot_h + 2.0);
    out.push_str("</svg>");
    out
}

fn legend(items: &[(&str, &str)]) -> String {
    let mut out = String::from(r#"<p class="legend">"#);
    for (name, color) in items {
        let _ = write!(
            out,
            r#"<span><i style="background:{color}"></i>{}</span>"#,
            esc(name)
        );
    }
    out.push_str("</p>");
    out
}

/// What the terminal's summary says after its table: the stage strategy's steps, the WAL
/// the server wrote, the inputs that went direct and why.
fn strategy_steps(r: &Report) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    if let Some(s) = r.steps.as_ref().filter(|s| s.staging_tables > 0) {
        rows.push(("staging tables".into(), s.staging_tables.to_string()));
        for (step, secs) in [
            (
                "load into staging tables (summed over streams)",
                s.load_seconds,
            ),
            ("index build (summed over streams)", s.index_seconds),
            ("analyze (summed over streams)", s.analyze_seconds),
            ("publish", s.publish_seconds),
            ("analyze of the parents", s.parent_analyze_seconds),
        ] {
            rows.push((step.into(), format!("{secs:.2} s")));
        }
        rows.push(("publish attempts".into(), s.publish_attempts.to_string()));
        for t in &s.routed {
            for (partition, n) in &t.partitions {
                rows.push((
                    format!("rows routed on the client to {partition}"),
                    crate::progress::thousands(*n),
                ));
            }
            rows.push((
                format!("{}: rows outside their chunk's main partition", t.table),
                crate::progress::thousands(t.crossed),
            ));
            rows.push((
                format!("{}: spill (deleted)", t.table),
                crate::progress::human_bytes(t.spill_bytes),
            ));
        }
    }
    if let Some(w) = r.wal_bytes {
        rows.push((
            "WAL written during the load".into(),
            crate::progress::human_bytes(w),
        ));
    }
    for f in &r.fallbacks {
        rows.push((
            format!("direct: {} ({})", f.file, f.table),
            f.reason.clone(),
        ));
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        r#"<h2>Strategy: {}</h2><table id="steps"><tr><th>step</th><th>value</th></tr>"#,
        r.strategy
    );
    for (k, v) in rows {
        let _ = write!(out, "<tr><td>{}</td><td>{}</td></tr>", esc(&k), esc(&v));
    }
    out.push_str("</table>");
    out
}

/// The whole page.
pub fn render(r: &Report) -> String {
    let tables: Vec<String> = r.tables.iter().map(|t| t.table.clone()).collect();
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>sluice load report</title><style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}}
h1{{font-size:22px}} h2{{font-size:17px;margin-top:28px}}
table{{border-collapse:collapse;margin:8px 0}} td,th{{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}}
td:first-child,th:first-child{{text-align:left}}
.verdict{{border-left:5px solid #e15759;background:#fafafa;padding:10px 14px}}
.kind{{font-weight:bold;font-size:16px}}
.tick{{font-size:11px;fill:#555}} .label{{font-size:12px;fill:#222}}
.legend span{{margin-right:14px;white-space:nowrap}} .legend i{{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}}
</style></head><body><h1>sluice load report</h1><p>{} &middot; strategy {} &middot; {} stream(s) &middot; {} chunk(s) &middot; COPY messages of {} bytes</p>"#,
        esc(&r.target),
        r.strategy,
        ran(r).len(),
        r.chunks,
        r.copy_buffer_bytes
    );
    h.push_str("<h2>Summary</h2><table><tr><th>table</th><th>files</th><th>rows</th><th>bytes</th><th>seconds</th><th>MB/s</th></tr>");
    for t in r.tables.iter().chain(std::iter::once(&r.total)) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td></tr>",
            esc(&t.table),
            t.files,
            crate::progress::thousands(t.rows),
            crate::progress::human_bytes(t.bytes),
            t.seconds,
            t.mb_per_s
        );
    }
    h.push_str("</table>");
    h.push_str(&strategy_steps(r));
    match &r.verdict {
        Some(v) => {
            let _ = write!(
                h,
                r#"<h2>Verdict</h2><div class="verdict"><div class="kind">{}</div><p>{}</p><p><b>Next:</b> {}</p></div><table><tr><th>figure</th><th>value</th></tr>"#,
                v.kind,
                esc(&v.because),
                esc(&v.next_step)
            );
            for (k, x) in &v.figures {
                let shown = if *k == "server_samples" {
                    format!("{x:.0}")
                } else if k.ends_with("seconds") {
                    format!("{x:.2} s")
                } else {
                    format!("{:.1}%", x * 100.0)
                };
                let _ = write!(h, "<tr><td>{k}</td><td>{shown}</td></tr>");
            }
            h.push_str("</table>");
        }
        None => h.push_str("<h2>Verdict</h2><p>Too short (or a dry run) to judge.</p>"),
    }
    let table_legend: Vec<(&str, &str)> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), PALETTE[i % PALETTE.len()]))
        .collect();
    h.push_str(&workers(r));
    h.push_str("<h2>Timeline: each stream's chunks</h2>");
    h.push_str(&legend(&table_legend));
    h.push_str(&timeline(r, &tables));
    h.push_str("<h2>Throughput over time</h2>");
    let mut with_total = table_legend.clone();
    with_total.push(("all tables", "#222"));
    h.push_str(&legend(&with_total));
    h.push_str(&throughput(r, &tables));
    h.push_str("<h2>Where each stream's time went</h2>");
    h.push_str(&legend(&[
        ("reading", PALETTE[0]),
        ("converting", PALETTE[1]),
        ("sending (socket full)", PALETTE[2]),
        ("waiting on the server", PALETTE[3]),
    ]));
    h.push_str(&stages(r));
    h.push_str(&connections(r));
    let _ = write!(
        h,
        "<h2>The server's sessions over time</h2><p>{} session samples.</p>",
        r.server_waits.samples
    );
    let classes: Vec<(&str, &str)> = r
        .server_waits
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| (*c, PALETTE[i % PALETTE.len()]))
        .collect();
    if r.server_waits.series.is_empty() {
        h.push_str(
            "<p>No chart: the load ended before the server's sessions were sampled (five \
             times a second while the streams run).</p>",
        );
    } else {
        h.push_str(&legend(&classes));
        h.push_str(&server_activity(r));
    }
    if !r.server_waits.events.is_empty() {
        h.push_str("<table><tr><th>event</th><th>class</th><th>samples</th></tr>");
        for e in &r.server_waits.events {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&e.event),
                e.class,
                e.samples
            );
        }
        h.push_str("</table>");
    }
    if let Some(c) = &r.calibration {
        h.push_str("<h2>--jobs auto</h2><table><tr><th>streams</th><th>MB/s</th></tr>");
        for p in &c.curve {
            let _ = write!(h, "<tr><td>{}</td><td>{:.1}</td></tr>", p.jobs, p.mb_per_s);
        }
        let knee = c.knee.map_or(String::new(), |k| format!("Knee at {k}; "));
        let _ = write!(
            h,
            "</table><p>{knee}{} stream(s) loaded the rest: {}.</p>",
            c.chosen,
            esc(&c.why)
        );
    }
    if let Some(rej) = r.rejected.as_ref().filter(|x| x.rows > 0) {
        let _ = write!(
            h,
            "<h2>Rejected rows</h2><p>{} row(s), within --max-errors {}.</p><table><tr><th>cause</th><th>rows</th></tr>",
            rej.rows,
            esc(&rej.max_errors)
        );
        for (c, n) in &rej.by_cause {
            let _ = write!(h, "<tr><td>{c}</td><td>{n}</td></tr>");
        }
        h.push_str("</table>");
    }
    if !r.server_settings.is_empty() {
        h.push_str("<h2>Server settings</h2><table><tr><th>setting</th><th>value</th></tr>");
        for (k, v) in &r.server_settings {
            let _ = write!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v));
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>\n");
    h
}
