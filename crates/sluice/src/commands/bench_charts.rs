//! The bench's two charts, drawn with plotters as SVG (no fonts or native libraries needed):
//! throughput against `--jobs` with min-max bars, and one run's per-stream timeline, in the
//! spirit of the seed paper's per-stream write-rate figure.

use super::bench::{Results, Run};
use plotters::prelude::*;
use std::path::Path;

type Error = Box<dyn std::error::Error>;

/// MB/s against jobs: the median as a line, the spread over repeats as bars.
pub fn throughput(r: &Results, path: &Path) -> Result<(), Error> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    // One evenly spaced position per setting, labelled with its --jobs value.
    let n = r.settings.len();
    let jobs: Vec<usize> = r.settings.iter().map(|s| s.jobs).collect();
    let mb = |secs: f64, s: &super::bench::Setting| {
        s.median_mb_per_s * s.median_seconds / secs.max(1e-9)
    };
    let top = r
        .settings
        .iter()
        .map(|s| mb(s.min_seconds, s))
        .fold(0.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "TPC-H SF{} load throughput by --jobs (median, min-max)",
                r.scale
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("--jobs (connections)")
        .y_desc("MB/s")
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < jobs.len() {
                jobs[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .disable_x_mesh()
        .draw()?;
    let points: Vec<(f64, f64)> = r
        .settings
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64, s.median_mb_per_s))
        .collect();
    chart.draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, BLUE.filled())))?;
    chart.draw_series(r.settings.iter().enumerate().map(|(i, s)| {
        ErrorBar::new_vertical(
            i as f64,
            mb(s.max_seconds, s),
            s.median_mb_per_s,
            mb(s.min_seconds, s),
            BLACK.stroke_width(1),
            10,
        )
    }))?;
    root.present()?;
    Ok(())
}

/// One run: a row per stream, a bar per chunk from its start to its end, coloured by table.
pub fn timeline(run: &Run, path: &Path) -> Result<(), Error> {
    let height = (120 + 40 * run.streams.len() as u32).max(340);
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let end = run
        .streams
        .iter()
        .flat_map(|s| s.chunks.iter().map(|c| c.end))
        .fold(0.0, f64::max)
        .max(0.001);
    let streams = run.streams.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Per-stream timeline, --jobs {} ({:.2} s): each bar is one chunk's COPY",
                run.jobs, run.seconds
            ),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..end * 1.3, -0.5f64..streams - 0.5)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the load started")
        .y_desc("stream")
        .y_labels(run.streams.len().max(1))
        .y_label_formatter(&|y| format!("stream {}", y.round() as i64))
        .disable_y_mesh()
        .draw()?;
    let tables: Vec<String> = {
        let mut t: Vec<String> = run
            .streams
            .iter()
            .flat_map(|s| s.chunks.iter().map(|c| c.table.clone()))
            .collect();
        t.sort();
        t.dedup();
        t
    };
    for (ti, table) in tables.iter().enumerate() {
        let color = Palette99::pick(ti).to_rgba();
        let spans: Vec<(f64, f64, f64)> = run
            .streams
            .iter()
            .flat_map(|s| {
                s.chunks
                    .iter()
                    .filter(|c| &c.table == table)
                    .map(move |c| (c.start, c.end, s.stream as f64))
            })
            .collect();
        let bar = |&(a, b, y): &(f64, f64, f64)| [(a, y - 0.35), (b, y + 0.35)];
        chart
            .draw_series(
                spans
                    .iter()
                    .map(|sp| Rectangle::new(bar(sp), color.filled())),
            )?
            .label(table.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    // A white outline separates consecutive chunks of the same table.
    chart.draw_series(run.streams.iter().flat_map(|s| {
        s.chunks.iter().map(move |c| {
            let y = s.stream as f64;
            Rectangle::new(
                [(c.start, y - 0.35), (c.end, y + 0.35)],
                WHITE.stroke_width(1),
            )
        })
    }))?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
