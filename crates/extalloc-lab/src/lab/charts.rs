//! `extalloc report`: a bench JSON report as Markdown and PNG charts (plotters):
//! - `throughput.png`: ops/s against threads, one line per policy; with a single thread
//!   count, a bar per policy (its median) with a whisker from the repetitions' min to max;
//! - `free-histogram.png`: free extents per power-of-two size, one line per policy (its run
//!   with the most threads);
//! - `free-map-<policy>-<threads>.png`: the device at the end of a run, one cell per group,
//!   darker the fuller (runs that carry per-group figures);
//! - `index.md`: a link to each file written, with a line saying what it shows.
//!
//! Data structures: [`Chart`], a file written and what it shows. Invariant: every file a
//! call writes is listed in the index it writes (the suite's index lists every workload's
//! folder). Lock order: none.

use super::markdown::markdown;
use super::report::{Report, Run};
use super::units;
use anyhow::{Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// A file written and what it shows (a line of `index.md`).
#[derive(Debug, Clone)]
pub struct Chart {
    pub path: PathBuf,
    pub what: String,
}

/// Writes `report.md`, the charts and `index.md` into `dir`; returns the files written.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    let charts = write_charts(report, dir)?;
    let index = write_index(dir, &[(report.workload.clone(), charts.clone())])?;
    Ok(charts
        .into_iter()
        .map(|c| c.path)
        .chain(std::iter::once(index))
        .collect())
}

/// Writes `report.md` and the charts into `dir` (no index); returns what it wrote, the
/// Markdown first.
pub fn write_charts(report: &Report, dir: &Path) -> Result<Vec<Chart>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    let mut md = format!("# {}\n\n{}\n", report.workload, markdown(report));
    let throughput = dir.join("throughput.png");
    let what = throughput_chart(report, &throughput)?;
    written.push(Chart {
        path: throughput,
        what,
    });
    let hist = dir.join("free-histogram.png");
    if histogram_chart(report, &hist)? {
        written.push(Chart {
            path: hist,
            what: "free extents by power-of-two size at the end, a line per policy (its run \
                   with the most threads): more on the right is less fragmented"
                .into(),
        });
    }
    for run in &report.runs {
        let path = dir.join(format!(
            "free-map-{}-{}.png",
            sanitize(&run.policy),
            run.threads
        ));
        if free_map(run, &path)? {
            written.push(Chart {
                path,
                what: format!(
                    "the device after {} at {}: a cell per group, darker the fuller",
                    run.policy,
                    super::verdict::threads_text(run.threads)
                ),
            });
        }
    }
    md.push('\n');
    for c in &written {
        let name = c.path.file_name().expect("a file").to_string_lossy();
        md.push_str(&format!("![{name}]({name})\n\n"));
    }
    let md_path = dir.join("report.md");
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    written.insert(
        0,
        Chart {
            path: md_path,
            what: format!(
                "{}: the verdict and the tables, with every chart below them",
                report.workload
            ),
        },
    );
    Ok(written)
}

/// Writes `dir/index.md`: a section per `(title, charts)`, a link per chart (relative to
/// `dir`) with what it shows. Returns its path.
pub fn write_index(dir: &Path, sections: &[(String, Vec<Chart>)]) -> Result<PathBuf> {
    let mut md = String::from("# Charts\n\n");
    for (title, charts) in sections {
        md.push_str(&format!("## {title}\n\n"));
        for c in charts {
            let rel = c.path.strip_prefix(dir).unwrap_or(&c.path);
            let rel = rel.to_string_lossy();
            md.push_str(&format!("- [{rel}]({rel}): {}\n", c.what));
        }
        md.push('\n');
    }
    let path = dir.join("index.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
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

/// The throughput chart: lines against threads, or bars when every run has the same
/// thread count. Returns what it shows.
fn throughput_chart(report: &Report, path: &Path) -> Result<String> {
    let mut counts: Vec<usize> = report.runs.iter().map(|r| r.threads).collect();
    counts.sort_unstable();
    counts.dedup();
    if let [threads] = counts[..] {
        throughput_bars(report, threads, path)?;
        return Ok(format!(
            "median ops/s of each policy at {}, a bar each, the whisker from the \
             repetitions' min to max",
            super::verdict::threads_text(threads)
        ));
    }
    throughput_lines(report, path)?;
    Ok("ops/s against threads, a line per policy".into())
}

fn throughput_lines(report: &Report, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max_threads = report.runs.iter().map(|r| r.threads).max().unwrap_or(1) as f64;
    let max_ops = report
        .runs
        .iter()
        .map(|r| r.ops_per_sec)
        .fold(1.0, f64::max);
    let mut chart = ops_chart(
        &root,
        format!("{}: ops/s by threads", report.workload),
        0.5..max_threads + 0.5,
        max_ops * 1.1,
    )?;
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
        .y_label_formatter(&|v| units::rate(*v))
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

/// A chart of ops/s (from 0 to `y_top`) over `x`, with its caption, on `root`.
fn ops_chart<'a, DB: DrawingBackend + 'a>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    caption: String,
    x: std::ops::Range<f64>,
    y_top: f64,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>> {
    ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(x, 0.0..y_top)
        .map_err(err)
}

/// A bar per policy at the single thread count: its median ops/s, with a whisker from the
/// repetitions' min to max.
fn throughput_bars(report: &Report, threads: usize, path: &Path) -> Result<()> {
    let names = policies(report);
    let runs: Vec<&Run> = names
        .iter()
        .filter_map(|p| report.runs.iter().find(|r| r.policy == *p))
        .collect();
    let top = runs
        .iter()
        .flat_map(|r| r.ops_per_sec_repeats.iter().copied().chain([r.ops_per_sec]))
        .fold(1.0, f64::max);
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = runs.len() as f64;
    let mut chart = ops_chart(
        &root,
        format!(
            "{}: ops/s at {}",
            report.workload,
            super::verdict::threads_text(threads)
        ),
        -0.5..n - 0.5,
        top * 1.15,
    )?;
    let label = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            names
                .get(i as usize)
                .map_or(String::new(), |s| s.to_string())
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(runs.len() * 2 + 1)
        .x_label_formatter(&label)
        .y_desc("ops/s")
        .y_label_formatter(&|v| units::rate(*v))
        .draw()
        .map_err(err)?;
    for (i, r) in runs.iter().enumerate() {
        let (x, color) = (i as f64, Palette99::pick(i).to_rgba());
        chart
            .draw_series([Rectangle::new(
                [(x - 0.3, 0.0), (x + 0.3, r.ops_per_sec)],
                color.filled(),
            )])
            .map_err(err)?;
        if let Some((lo, hi)) = units::min_max(&r.ops_per_sec_repeats) {
            let whisker = [
                vec![(x, lo), (x, hi)],
                vec![(x - 0.08, lo), (x + 0.08, lo)],
                vec![(x - 0.08, hi), (x + 0.08, hi)],
            ];
            chart
                .draw_series(
                    whisker
                        .into_iter()
                        .map(|p| PathElement::new(p, BLACK.stroke_width(2))),
                )
                .map_err(err)?;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread count: a bar chart; the index links every file written, each with what
    /// it shows.
    #[test]
    fn a_single_thread_count_gets_bars_and_every_file_an_index_line() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/frag-report.json"
        );
        let mut report: Report =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        report.runs.retain(|r| r.threads == 2);
        let dir = std::env::temp_dir().join(format!("extalloc-bars-{}", std::process::id()));
        let written = write_all(&report, &dir).unwrap();
        let index = std::fs::read_to_string(dir.join("index.md")).unwrap();
        assert_eq!(written.last(), Some(&dir.join("index.md")));
        for path in &written[..written.len() - 1] {
            let name = path.file_name().unwrap().to_string_lossy();
            assert!(path.exists(), "{name}");
            assert!(
                index.contains(&format!("- [{name}]({name}): ")),
                "{name}: {index}"
            );
        }
        assert!(
            index.contains("throughput.png): median ops/s of each policy at 2 threads, a bar each"),
            "{index}"
        );
        assert!(
            index.contains("free-map-tlsf-2.png): the device after tlsf at 2 threads"),
            "{index}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
