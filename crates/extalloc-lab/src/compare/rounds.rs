//! `compare-fs`'s rounds summarised: per job phase and target, the median of the rounds,
//! their min and max, and the ratio to the baseline target in the same round (then the
//! median of those ratios); the same for CPU time per operation (caller plus daemon,
//! `cpu.rs`), which a loaded machine disturbs less than wall time; FUSE requests per
//! operation; and the tables printed.
//!
//! Data structures: [`PhaseSummary`] (one phase of one job on every target),
//! [`TargetSummary`] (one target's rounds of it).
//!
//! Invariant: ratios pair figures of the same round only; a round where either side failed
//! gives no ratio, and a target with no successful round has no median (printed `failed`).

use super::fusetrace::Counts;
use super::jobs::Phase;
use std::collections::BTreeMap;

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Per round, `target / baseline` where both have a figure.
pub fn same_round_ratios(target: &[Option<f64>], baseline: &[Option<f64>]) -> Vec<f64> {
    target
        .iter()
        .zip(baseline)
        .filter_map(|(t, b)| match (t, b) {
            (Some(t), Some(b)) if *b != 0.0 => Some(t / b),
            _ => None,
        })
        .collect()
}

/// One target's rounds of a phase.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetSummary {
    /// The target.
    pub fs: String,
    /// The figure per round (`None`: that round failed).
    pub rounds: Vec<Option<f64>>,
    /// Median of the rounds that ran.
    pub median: Option<f64>,
    /// Smallest and largest.
    pub min: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
    /// Figure / the baseline's in the same round, per round.
    pub ratios: Vec<f64>,
    /// Median of `ratios`.
    pub ratio_median: Option<f64>,
    /// CPU time per operation, caller plus daemon, µs, per round (`None`: failed or not
    /// measured).
    pub cpu_us_per_op: Vec<Option<f64>>,
    /// Median of `cpu_us_per_op`.
    pub cpu_median: Option<f64>,
    /// Median over the rounds of the daemon's share of it, µs per operation (FUSE targets).
    pub daemon_us_per_op_median: Option<f64>,
    /// CPU per operation / the baseline's in the same round, per round.
    pub cpu_ratios: Vec<f64>,
    /// Median of `cpu_ratios`.
    pub cpu_ratio_median: Option<f64>,
    /// FUSE requests per operation, all rounds together (FUSE targets with tracing).
    pub fuse_per_op: Option<f64>,
    /// The same by opcode.
    pub fuse_per_op_by_opcode: BTreeMap<String, f64>,
    /// Events the trace buffer lost (the counts are then a lower bound).
    pub fuse_lost: u64,
}

/// One phase of a job on every target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseSummary {
    /// The phase.
    pub phase: String,
    /// Its unit.
    pub unit: String,
    /// The target the ratios divide by.
    pub baseline: String,
    /// One entry per target, in `--fs` order.
    pub targets: Vec<TargetSummary>,
}

/// Per round, the figure `get` reads from phase `phase` of target `t` (`None` where the
/// run failed or has no such figure).
fn per_round(
    runs: &[Vec<Option<Vec<Phase>>>],
    t: usize,
    phase: &str,
    get: fn(&Phase) -> Option<f64>,
) -> Vec<Option<f64>> {
    runs[t]
        .iter()
        .map(|r| {
            r.as_ref()
                .and_then(|ps| ps.iter().find(|p| p.name == phase))
                .and_then(get)
        })
        .collect()
}

/// One target's summary of phase `phase`, ratios to target `baseline`.
fn target_summary(
    fs: &str,
    runs: &[Vec<Option<Vec<Phase>>>],
    t: usize,
    baseline: usize,
    phase: &str,
) -> TargetSummary {
    let value = |p: &Phase| Some(p.value);
    let rounds = per_round(runs, t, phase, value);
    let ran: Vec<f64> = rounds.iter().flatten().copied().collect();
    let ratios = same_round_ratios(&rounds, &per_round(runs, baseline, phase, value));
    let cpu = per_round(runs, t, phase, Phase::cpu_us_per_op);
    let cpu_ratios = same_round_ratios(
        &cpu,
        &per_round(runs, baseline, phase, Phase::cpu_us_per_op),
    );
    let daemon: Vec<f64> = per_round(runs, t, phase, Phase::daemon_us_per_op)
        .into_iter()
        .flatten()
        .collect();
    let (per_op, by_op, lost) = fuse_per_op(runs[t].iter().flatten(), phase);
    TargetSummary {
        fs: fs.to_string(),
        median: median(&ran),
        min: ran.iter().copied().reduce(f64::min),
        max: ran.iter().copied().reduce(f64::max),
        ratio_median: median(&ratios),
        ratios,
        rounds,
        cpu_median: median(&cpu.iter().flatten().copied().collect::<Vec<_>>()),
        cpu_us_per_op: cpu,
        daemon_us_per_op_median: median(&daemon),
        cpu_ratio_median: median(&cpu_ratios),
        cpu_ratios,
        fuse_per_op: per_op,
        fuse_per_op_by_opcode: by_op,
        fuse_lost: lost,
    }
}

/// Summarises `phases[target][round]` (each run's phases, `None` for a failed run).
pub fn summarise(
    names: &[String],
    baseline: usize,
    runs: &[Vec<Option<Vec<Phase>>>],
) -> Vec<PhaseSummary> {
    // Phase names and units in the order the first successful run gives them.
    let Some(first) = runs.iter().flatten().flatten().next() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|p| PhaseSummary {
            phase: p.name.clone(),
            unit: p.unit.clone(),
            baseline: names[baseline].clone(),
            targets: names
                .iter()
                .enumerate()
                .map(|(t, fs)| target_summary(fs, runs, t, baseline, &p.name))
                .collect(),
        })
        .collect()
}

type PerOp = (Option<f64>, BTreeMap<String, f64>, u64);

/// FUSE requests of `phase` over all runs, divided by its operations over those runs.
fn fuse_per_op<'a>(runs: impl Iterator<Item = &'a Vec<Phase>>, phase: &str) -> PerOp {
    let mut sum = Counts::default();
    let mut ops = 0;
    let mut traced = false;
    for p in runs.flat_map(|ps| ps.iter().filter(|p| p.name == phase)) {
        if let Some(c) = &p.fuse {
            traced = true;
            ops += p.ops;
            sum.lost += c.lost;
            for (k, v) in &c.by_opcode {
                *sum.by_opcode.entry(k.clone()).or_default() += v;
            }
        }
    }
    if !traced || ops == 0 {
        return (None, BTreeMap::new(), 0);
    }
    let per = |n: u64| n as f64 / ops as f64;
    let by_op = sum
        .by_opcode
        .iter()
        .map(|(k, v)| (k.clone(), per(*v)))
        .collect();
    (Some(per(sum.total())), by_op, sum.lost)
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 || v == 0.0 {
        format!("{v:.2}")
    } else if v.abs() >= 0.001 {
        format!("{v:.3}")
    } else {
        "<0.001".to_string()
    }
}

fn ratios_text(ratios: &[f64]) -> String {
    ratios
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), fmt)
}

/// One row of a job's table.
fn job_row(p: &PhaseSummary, t: &TargetSummary) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        p.phase,
        p.unit,
        t.fs,
        t.median.map_or("failed".into(), fmt),
        match (t.min, t.max) {
            (Some(a), Some(b)) => format!("{}-{}", fmt(a), fmt(b)),
            _ => "-".into(),
        },
        t.ratio_median.map_or("-".into(), |r| format!("{r:.2}")),
        ratios_text(&t.ratios),
        opt(t.cpu_median),
        opt(t.daemon_us_per_op_median),
        t.cpu_ratio_median.map_or("-".into(), |r| format!("{r:.2}")),
        ratios_text(&t.cpu_ratios),
        opt(t.fuse_per_op),
    )
}

/// The summaries of one job as Markdown: the figures, then FUSE requests per operation.
/// `fuse_note` says why FUSE targets have no counts, when they have none.
pub fn job_table(job: &str, rounds: usize, phases: &[PhaseSummary], fuse_note: &str) -> String {
    let Some(p0) = phases.first() else {
        return format!("### compare-fs: {job}\n\nEvery run failed (see above).\n");
    };
    let rounds = if rounds == 1 {
        "1 round".to_string()
    } else {
        format!("{rounds} rounds")
    };
    let mut s = format!(
        "### compare-fs: {job}\n\n{rounds}, the targets' order rotated each round; \
         ratio: to {} in the same round, then the median (for `s`, lower is better; for \
         the rest, higher). CPU: µs on CPU per operation, the caller's (this process and \
         the tools it ran) plus the FUSE daemon's (its own column), from schedstat; lower is \
         better; its ratio is taken the same way.\n\n| phase | unit | fs | median | min-max | ratio | \
         ratios per round | CPU µs/op | daemon µs/op | CPU ratio | CPU ratios per round | FUSE req/op |\n\
         |---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|\n",
        p0.baseline
    );
    for p in phases {
        for t in &p.targets {
            s.push_str(&job_row(p, t));
        }
    }
    s.push_str(&opcode_table(phases, fuse_note));
    s
}

/// The opcodes of at least [`SHOWN_PER_OP`] requests per operation, largest first, then
/// the sum of the rest (the JSON report has them all).
pub fn by_opcode_text(per_op: &BTreeMap<String, f64>) -> String {
    let mut shown: Vec<(&String, f64)> = per_op
        .iter()
        .filter(|(_, v)| **v >= SHOWN_PER_OP)
        .map(|(k, v)| (k, *v))
        .collect();
    shown.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let mut s: Vec<String> = shown
        .iter()
        .map(|(k, v)| format!("{k} {}", fmt(*v)))
        .collect();
    let rest: f64 = per_op.values().filter(|v| **v < SHOWN_PER_OP).sum();
    if rest > 0.0 {
        s.push(format!("others {}", fmt(rest)));
    }
    s.join(", ")
}

/// Opcodes under this many requests per operation are summed as `others` in the tables.
pub const SHOWN_PER_OP: f64 = 0.01;

/// FUSE requests per operation by opcode, one row per phase and traced target.
fn opcode_table(phases: &[PhaseSummary], fuse_note: &str) -> String {
    let mut rows = String::new();
    for p in phases {
        for t in p.targets.iter().filter(|t| t.fuse_per_op.is_some()) {
            let ops = by_opcode_text(&t.fuse_per_op_by_opcode);
            let lost = if t.fuse_lost > 0 {
                format!(" (buffer lost {} events: a lower bound)", t.fuse_lost)
            } else {
                String::new()
            };
            rows.push_str(&format!("| {} | {} | {}{lost} |\n", p.phase, t.fs, ops));
        }
    }
    let mut s = String::new();
    if !fuse_note.is_empty() {
        s.push_str(&format!("\nFUSE requests: {fuse_note}\n"));
    }
    if !rows.is_empty() {
        s.push_str(
            "\nFUSE requests per operation by opcode (fuse_request_send, this mount's \
             connection only; under 0.01 summed as others):\n\n| phase | fs | requests per operation |\n|---|---|---|\n",
        );
        s.push_str(&rows);
    }
    s
}

/// Every job's phases side by side: the medians, one column per target (issue 34's table).
pub fn side_by_side(names: &[String], jobs: &[(String, Vec<PhaseSummary>)]) -> String {
    let mut s = format!(
        "### compare-fs: medians side by side\n\n| workload | unit | {} |\n|---|---|{}\n",
        names.join(" | "),
        "---:|".repeat(names.len())
    );
    let mut cpu_rows = String::new();
    for (job, phases) in jobs {
        for p in phases {
            let label = if p.phase == *job || job.starts_with(&p.phase) {
                job.clone()
            } else {
                format!("{job}: {}", p.phase)
            };
            let cells: Vec<String> = p
                .targets
                .iter()
                .map(|t| t.median.map_or("failed".into(), fmt))
                .collect();
            s.push_str(&format!(
                "| {label} | {} | {} |\n",
                p.unit,
                cells.join(" | ")
            ));
            let cpu: Vec<String> = p.targets.iter().map(|t| opt(t.cpu_median)).collect();
            cpu_rows.push_str(&format!("| {label} | {} |\n", cpu.join(" | ")));
        }
    }
    s.push_str(&format!(
        "\nCPU µs per operation (caller plus daemon), medians:\n\n| workload | {} |\n|---|{}\n{cpu_rows}",
        names.join(" | "),
        "---:|".repeat(names.len())
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, value: f64, fuse: Option<u64>) -> Phase {
        Phase {
            name: name.into(),
            unit: "ops/s".into(),
            value,
            ops: 10,
            fuse: fuse.map(|n| Counts {
                by_opcode: [("LOOKUP".to_string(), n)].into_iter().collect(),
                lost: 0,
            }),
            // 1 µs of CPU per unit of the figure, over the phase's 10 operations.
            cpu: Some(super::super::cpu::Cpu {
                caller_ns: (value * 10_000.0) as u64,
                daemon_ns: fuse.map(|_| 5_000),
            }),
        }
    }

    #[test]
    fn small_opcodes_are_summed_as_others() {
        let per_op: BTreeMap<String, f64> = [
            ("LOOKUP", 1.0),
            ("CREATE", 2.0),
            ("ACCESS", 0.004),
            ("FLUSH", 0.002),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            by_opcode_text(&per_op),
            "CREATE 2.00, LOOKUP 1.00, others 0.006"
        );
    }

    #[test]
    fn medians_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn ratios_pair_the_same_round_and_skip_failures() {
        let t = [Some(10.0), None, Some(30.0), Some(8.0)];
        let b = [Some(5.0), Some(7.0), Some(10.0), None];
        assert_eq!(same_round_ratios(&t, &b), [2.0, 3.0]);
    }

    #[test]
    fn summaries_take_medians_ratios_and_requests_per_operation() {
        let names = vec!["ext4".to_string(), "extalloc".to_string()];
        // Two targets x three rounds; extalloc's second round failed.
        let runs = vec![
            vec![
                Some(vec![phase("create", 100.0, None)]),
                Some(vec![phase("create", 200.0, None)]),
                Some(vec![phase("create", 150.0, None)]),
            ],
            vec![
                Some(vec![phase("create", 50.0, Some(20))]),
                None,
                Some(vec![phase("create", 60.0, Some(40))]),
            ],
        ];
        let s = summarise(&names, 0, &runs);
        assert_eq!(s.len(), 1);
        let ext4 = &s[0].targets[0];
        assert_eq!(ext4.median, Some(150.0));
        assert_eq!((ext4.min, ext4.max), (Some(100.0), Some(200.0)));
        assert_eq!(ext4.ratio_median, Some(1.0));
        assert_eq!(ext4.fuse_per_op, None);
        let ea = &s[0].targets[1];
        assert_eq!(ea.median, Some(55.0));
        assert_eq!(ea.ratios, [0.5, 0.4]);
        assert_eq!(ea.ratio_median, Some(0.45));
        // CPU: 50 and 60 µs/op of the caller's plus 0.5 of the daemon's, against ext4's
        // 100 and 150 in the same rounds.
        assert_eq!(ea.cpu_us_per_op, [Some(50.5), None, Some(60.5)]);
        assert_eq!(ea.cpu_median, Some(55.5));
        assert_eq!(ea.daemon_us_per_op_median, Some(0.5));
        assert_eq!(ea.cpu_ratios, [0.505, 60.5 / 150.0]);
        assert_eq!(ext4.daemon_us_per_op_median, None);
        // 60 LOOKUPs over 20 operations.
        assert_eq!(ea.fuse_per_op, Some(3.0));
        assert_eq!(ea.fuse_per_op_by_opcode["LOOKUP"], 3.0);
        let table = job_table("metadata", 3, &s, "");
        assert!(
            table.contains(
                "| create | ops/s | extalloc | 55.0 | 50.0-60.0 | 0.45 | 0.50 0.40 | 55.5 | 0.500 | \
                 0.45 | 0.51 0.40 | 3.00 |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| create | extalloc | LOOKUP 3.00 |"),
            "{table}"
        );
        let side = side_by_side(&names, &[("metadata".into(), s)]);
        assert!(
            side.contains("| metadata: create | ops/s | 150 | 55.0 |"),
            "{side}"
        );
        assert!(side.contains("| metadata: create | 150 | 55.5 |"), "{side}");
    }
}
