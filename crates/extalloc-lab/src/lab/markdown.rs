//! A report's Markdown: its preamble (warnings, verdict), then the throughput, latency and
//! contention table, the scan table when allocations looked far, and the layout and free
//! space table; a writeback report has its own table instead. Ratios are against the
//! report's reference policy (`report::reference`).

use super::report::{reference, Counters, ProgressPoint, Report};
use super::{units, verdict};

fn per_kop(n: u64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        n as f64 * 1000.0 / ops as f64
    }
}

/// The report in Markdown: its warnings, its verdict, then two tables: throughput, latency
/// and contention; then layout and free space. Ratios are against [`reference`](fn@reference) at the
/// same thread count. Between them, when some run forced commits or loaded bitmaps, a
/// third: how far allocations looked.
pub fn markdown(report: &Report) -> String {
    let mut out = preamble(report);
    if report.runs.iter().any(|r| r.writeback.is_some()) {
        out.push_str(&writeback_table(report));
        return out;
    }
    let scans = report.runs.iter().any(|r| {
        r.counters
            .as_ref()
            .is_some_and(|c| c.forced_commits > 0 || c.bitmaps_loaded > 0)
    });
    out.push_str(&throughput_table(report));
    if scans {
        out.push_str(&scan_table(report));
    }
    out.push_str(&layout_table(report));
    out
}

/// The warnings (`> warning: ...`) and the verdict line, each followed by a blank line.
fn preamble(report: &Report) -> String {
    let mut out = String::new();
    for w in &report.warnings {
        out.push_str(&format!("> warning: {w}\n\n"));
    }
    let v = report.verdict.clone().or_else(|| verdict::of(report));
    if let Some(v) = v {
        out.push_str(&format!("**Verdict**: {}\n\n", v.text));
    }
    out
}

/// Throughput (median, min-max over the repetitions, ratio to [`reference`]), latency and
/// contention, one row per run.
fn throughput_table(report: &Report) -> String {
    let baseline = reference(report);
    let mut out = String::new();
    out.push_str(&format!("| policy | threads | ops/s | min-max | vs {baseline} (reference) | p50 | p99 | lock waits /1k ops | try-lock skips /1k ops | groups scanned /op |\n"));
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &report.runs {
        let base = report
            .runs
            .iter()
            .find(|b| b.policy == baseline && b.threads == r.threads)
            .map(|b| b.ops_per_sec);
        let ratio = base.map_or("-".to_string(), |b| format!("{:.2}x", r.ops_per_sec / b));
        let counter = |f: &dyn Fn(&Counters) -> String| r.counters.as_ref().map_or("-".into(), f);
        let ops = r.ops;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.policy,
            r.threads,
            units::rate(r.ops_per_sec),
            units::spread(&r.ops_per_sec_repeats, units::rate),
            ratio,
            units::ns(r.latency_ns.p50),
            units::ns(r.latency_ns.p99),
            counter(&|c| format!("{:.2}", per_kop(c.lock_waits, ops))),
            counter(&|c| format!("{:.2}", per_kop(c.trylock_skips, ops))),
            counter(&|c| format!("{:.2}", c.groups_scanned as f64 / ops.max(1) as f64)),
        ));
    }
    out
}

/// The path of a crowded device: how far each allocation looked, what it read, how often it
/// had to force a commit (runs with counters).
fn scan_table(report: &Report) -> String {
    let mut out = String::from("\n| policy | threads | allocs/op | groups considered /alloc | groups scanned /alloc | bitmaps loaded /alloc | read-ahead hits | forced commits | commits |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &report.runs {
        let Some(c) = &r.counters else { continue };
        let per = |n: u64| n as f64 / c.allocs.max(1) as f64;
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} | {:.2} | {:.3} | {} | {} | {} |\n",
            r.policy,
            r.threads,
            c.allocs as f64 / r.ops.max(1) as f64,
            per(c.groups_considered),
            per(c.groups_scanned),
            per(c.bitmaps_loaded),
            c.prefetch_hits,
            c.forced_commits,
            c.commits
        ));
    }
    out
}

/// Layout and free space, one row per run (extents per file with their min-max over the
/// repetitions when known); with the first and last tenth's ops/s when some run recorded
/// its progress.
fn layout_table(report: &Report) -> String {
    let progress = report.runs.iter().any(|r| r.progress.is_some());
    let mut out = String::from("\n| policy | threads | extents/file | min-max | avg extent | free extents | largest free | fragmented groups | frag_pct mean |");
    out.push_str(if progress {
        " first 10% ops/s | last 10% ops/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    } else {
        "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    });
    fn known<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
        v.map_or("-".into(), f)
    }
    for r in &report.runs {
        let (l, f) = (&r.layout, r.free_space.as_ref());
        let repeats = report
            .extents_per_file_repeats
            .iter()
            .find(|c| c.policy == r.policy && c.threads == r.threads)
            .map_or(&[][..], |c| &c.values[..]);
        out.push_str(&format!(
            "| {} | {} | {:.2} | {} | {} | {} | {} | {} | {} |",
            r.policy,
            r.threads,
            l.extents_per_file,
            units::spread(repeats, |v| format!("{v:.2}")),
            units::kib(l.avg_extent_kib),
            known(f, |f| f.free_extents.to_string()),
            known(f.and_then(|f| f.largest_free_extent_kib), units::kib),
            known(f.and_then(|f| f.fragmented_groups), |v| v.to_string()),
            known(f.and_then(|f| f.frag_pct_mean), |v| format!("{v:.2}")),
        ));
        if progress {
            let tenths = r.progress.as_deref().unwrap_or_default();
            let rate =
                |p: Option<&ProgressPoint>| p.map_or("-".into(), |p| units::rate(p.ops_per_sec));
            out.push_str(&format!(
                " {} | {} |",
                rate(tenths.first()),
                rate(tenths.last())
            ));
        }
        out.push('\n');
    }
    out
}

/// The writeback workload: one row per policy x contexts x affinity.
fn writeback_table(report: &Report) -> String {
    let mut out = String::from(
        "| policy | pattern | contexts | affinity | MiB/s | min-max | p99 | extents/file | avg extent MiB | \
         free extents | largest free MiB | allocs/MiB | lock waits/MiB | switches | dirty peak MiB | throttled |\n",
    );
    out.push_str(
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    // The repetitions' rates are 4 KiB writes per second.
    let write_mib = super::writeback::WRITE_BYTES as f64 / f64::from(1 << 20);
    let mib = |b: f64| b / f64::from(1 << 20);
    for r in &report.runs {
        let Some(w) = &r.writeback else { continue };
        let (free, largest) = r.free_space.as_ref().map_or((0, 0.0), |f| {
            (
                f.free_extents,
                f.largest_free_extent_kib.unwrap_or(0.0) / 1024.0,
            )
        });
        let cache = w.cache.as_ref().map_or_else(
            || "- | - | - | - | -".to_string(),
            |c| {
                format!(
                    "{:.3} | {:.2} | {} | {:.0} | {}",
                    c.allocations_per_mib,
                    c.lock_waits_per_mib,
                    c.context_switches,
                    mib(c.dirty_peak_bytes as f64),
                    c.throttled_writes
                )
            },
        );
        let contexts = match w.wb_contexts {
            0 => "-".to_string(),
            n => n.to_string(),
        };
        out.push_str(&format!(
            "| {} | {:?} | {contexts} | {} | {:.0} | {} | {} | {:.2} | {:.1} | {free} | {largest:.0} | {cache} |\n",
            r.policy,
            w.pattern,
            w.wb_affinity,
            w.mib_per_sec,
            units::spread(&r.ops_per_sec_repeats, |v| format!("{:.0}", v * write_mib)),
            units::ns(r.latency_ns.p99),
            r.layout.extents_per_file,
            r.layout.avg_extent_kib / 1024.0,
        ));
    }
    out
}
