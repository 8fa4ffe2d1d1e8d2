//! `age-git`'s chart: the layout score, the aged tree's extents per file and its jumps %
//! (three panels) against checkouts, one line per file system (plotters, as
//! `lab/charts.rs`).
//!
//! Data structures: none of its own (it reads [`GitRun`]s).
//!
//! Invariant: the chart is drawn only from measured points; a target with none has no
//! line. No locks.

use super::age_git::{GitPoint, GitRun};
use crate::lab::charts::{draw_lines, err};
use anyhow::Result;
use plotters::prelude::*;
use std::path::Path;

/// A panel's title, y axis and figure.
type Panel = (&'static str, &'static str, fn(&GitPoint) -> f64);

/// Draws `runs`' curves into the PNG `path`; false (nothing drawn) when no run measured
/// anything.
pub fn git_chart(runs: &[GitRun], path: &Path) -> Result<bool> {
    let measured: Vec<&GitRun> = runs.iter().filter(|r| !r.points.is_empty()).collect();
    if measured.is_empty() {
        return Ok(false);
    }
    let max_x = measured
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.checkouts as f64))
        .fold(1.0, f64::max);
    let root = BitMapBackend::new(path, (640, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let halves = root.split_evenly((3, 1));
    let panels: [Panel; 3] = [
        (
            "age-git: layout score (aged / fresh cold read)",
            "score",
            |p| p.layout_score,
        ),
        ("extents per file of the aged tree", "extents/file", |p| {
            p.aged_extents_per_file
        }),
        (
            "aged tree: % of files not within 1 MiB after the previous",
            "jumps %",
            |p| p.aged_jumps_pct,
        ),
    ];
    for (area, (title, y_desc, value)) in halves.iter().zip(panels) {
        let series: Vec<(&str, Vec<(f64, f64)>)> = measured
            .iter()
            .map(|r| {
                let pts = r
                    .points
                    .iter()
                    .map(|p| (p.checkouts as f64, value(p)))
                    .collect();
                (r.fs.as_str(), pts)
            })
            .collect();
        let max_y = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max_x * 1.05, 0.0..max_y * 1.15)
            .map_err(err)?;
        chart
            .configure_mesh()
            // No light grid: the PNG stays small enough to commit.
            .light_line_style(WHITE)
            .x_desc("checkouts")
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        draw_lines(&mut chart, series)?;
    }
    root.present().map_err(err)?;
    Ok(true)
}
