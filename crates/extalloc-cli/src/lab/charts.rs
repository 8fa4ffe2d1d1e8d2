//! `extalloc report`: a bench JSON report as Markdown and PNG charts (plotters):
//! - `throughput.png`: ops/s against threads, one line per policy;
//! - `free-histogram.png`: free extents per power-of-two size, one line per policy (its run
//!   with the most threads);
//! - `free-map-<policy>-<threads>.png`: the device at the end of a run, one cell per group,
//!   darker the fuller (runs that carry per-group figures).

use super::report::{markdown, Report, Run};
use anyhow::{Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Writes `report.md` and the charts into `dir`; returns the files written.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    let mut md = format!("# {}\n\n{}\n", report.workload, markdown(report));
    let throughput = dir.join("throughput.png");
    throughput_chart(report, &throughput)?;
    written.push(throughput);
    let hist = dir.join("free-histogram.png");
    if histogram_chart(report, &hist)? {
        written.push(hist);
    }
    for run in &report.runs {
        let path = dir.join(format!(
            "free-map-{}-{}.png",
            sanitize(&run.policy),
            run.threads
        ));
        if free_map(run, &path)? {
            written.push(path);
        }
    }
    md.push('\n');
    for p in &written {
        let name = p.file_name().expect("a file").to_string_lossy();
        md.push_str(&format!("![{name}]({name})\n\n"));
    }
    let md_path = dir.join("report.md");
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    written.insert(0, md_path);
    Ok(written)
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Policies in the order they first appear.
fn policies(report: &Report) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for r in &report.runs {
        if !out.contains(&r.policy.as_str()) {
            out.push(&r.policy);
        }
    }
    out
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing: {e}")
}

fn throughput_chart(report: &Report, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max_threads = report.runs.iter().map(|r| r.threads).max().unwrap_or(1) as f64;
    let max_ops = report
        .runs
        .iter()
        .map(|r| r.ops_per_sec)
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: ops/s by threads", report.workload),
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(0.5..max_threads + 0.5, 0.0..max_ops * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("threads")
        .y_desc("ops/s")
        .x_labels(max_threads as usize + 1)
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() < 1e-6 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| format!("{:.2}M", v / 1e6))
        .draw()
        .map_err(err)?;
    let series = policies(report)
        .into_iter()
        .map(|policy| {
            let mut points: Vec<(f64, f64)> = report
                .runs
                .iter()
                .filter(|r| r.policy == policy)
                .map(|r| (r.threads as f64, r.ops_per_sec))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (policy, points)
        })
        .collect();
    draw_lines(&mut chart, series)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One line with dots per policy, and the legend.
pub(crate) fn draw_lines<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    series: Vec<(&str, Vec<(f64, f64)>)>,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    for (i, (policy, points)) in series.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(policy)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Returns false (and draws nothing) when no run has a histogram.
fn histogram_chart(report: &Report, path: &Path) -> Result<bool> {
    let block_kib = f64::from(report.device.block_size) / 1024.0;
    // Each policy's run with the most threads.
    let mut series: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
    for policy in policies(report) {
        let Some(run) = report
            .runs
            .iter()
            .filter(|r| r.policy == policy)
            .max_by_key(|r| r.threads)
        else {
            continue;
        };
        let Some(fs) = &run.free_space else { continue };
        let points: Vec<(f64, f64)> = fs
            .histogram
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| ((b.min_kib / block_kib).max(1.0).log2(), b.count as f64))
            .collect();
        if !points.is_empty() {
            series.push((policy, points));
        }
    }
    if series.is_empty() {
        return Ok(false);
    }
    let max_x = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(1.0, f64::max);
    let max_y = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(1.0, f64::max);
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: free extents by size at the end", report.workload),
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..max_x + 0.5, (0.5..max_y * 2.0).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("free extent size (at least)")
        .y_desc("free extents")
        .x_label_formatter(&|v| {
            let kib = block_kib * 2f64.powf(v.round());
            if kib >= 1024.0 * 1024.0 {
                format!("{:.0}G", kib / 1024.0 / 1024.0)
            } else if kib >= 1024.0 {
                format!("{:.0}M", kib / 1024.0)
            } else {
                format!("{kib:.0}K")
            }
        })
        .draw()
        .map_err(err)?;
    draw_lines(&mut chart, series)?;
    root.present().map_err(err)?;
    Ok(true)
}

/// Returns false (and draws nothing) when the run has no per-group figures.
fn free_map(run: &Run, path: &Path) -> Result<bool> {
    let Some(groups) = run
        .free_space
        .as_ref()
        .map(|f| &f.group_free_pct)
        .filter(|g| !g.is_empty())
    else {
        return Ok(false);
    };
    let n = groups.len();
    let cols = ((n as f64).sqrt().ceil() as usize).max(1) * 2;
    let rows = n.div_ceil(cols);
    let cell = (720 / cols).clamp(2, 40) as i32;
    let (w, h) = (cols as i32 * cell, rows as i32 * cell);
    let root = BitMapBackend::new(path, (w as u32 + 40, h as u32 + 70)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    root.draw(&Text::new(
        format!(
            "{} x{}: {} groups, darker = fuller",
            run.policy, run.threads, n
        ),
        (20, 10),
        ("sans-serif", 18).into_font(),
    ))
    .map_err(err)?;
    for (g, &free) in groups.iter().enumerate() {
        let (x, y) = ((g % cols) as i32 * cell + 20, (g / cols) as i32 * cell + 50);
        let used = 100 - u32::from(free.min(100));
        let shade = 245 - used * 2; // 245 empty .. 45 full
        let color = RGBColor(shade as u8, shade as u8, (shade + 40).min(255) as u8);
        root.draw(&Rectangle::new(
            [(x, y), (x + cell - 1, y + cell - 1)],
            color.filled(),
        ))
        .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(true)
}
