//! A report's one-line verdict: which policy was fastest and by how much (the ratio of
//! median ops/s to the next one's), flagged "within noise" when the two min-max spreads
//! over the repetitions overlap; and which left the fewest extents per file.
//!
//! Data structures: [`Verdict`], kept in the JSON report (`report.rs`; fields may be added,
//! never renamed); [`Report::judged`] sets it. Invariants: the compared runs are those at the largest thread count that two
//! or more policies ran (every policy's, else the single policy's largest); runs without a
//! measured rate (a replay's `kernel` row, which has the trace's pace, not a measurement)
//! are never compared; `within_noise` is `None` when either side ran once (no spread to
//! judge by), never `false`. Lock order: none.

use super::machine::MachineLoad;
use super::report::{reference, CellRepeats, Report, Run, Verdict};
use super::units;

impl Report {
    /// The report with its reference policy, load check (and its warning) and verdict.
    pub fn judged(mut self, machine: Option<MachineLoad>) -> Report {
        self.reference = Some(reference(&self));
        if let Some(w) = machine.as_ref().and_then(MachineLoad::warning) {
            self.warnings.push(w);
        }
        self.machine = machine;
        self.verdict = of(&self);
        self
    }
}

/// The verdict of `report` (`None` when no run has a measured rate).
pub fn of(report: &Report) -> Option<Verdict> {
    let measured: Vec<&Run> = report
        .runs
        .iter()
        .filter(|r| !r.ops_per_sec_repeats.is_empty())
        .collect();
    let threads = compared_threads(&measured)?;
    let mut runs: Vec<&Run> = Vec::new();
    for r in measured.iter().filter(|r| r.threads == threads) {
        if !runs.iter().any(|x| x.policy == r.policy) {
            runs.push(r);
        }
    }
    runs.sort_by(|a, b| b.ops_per_sec.total_cmp(&a.ops_per_sec));
    let (best, next) = (runs[0], runs.get(1).copied());
    let repeats = best.ops_per_sec_repeats.len();
    let mut text = format!("{}, median of {repeats}: ", threads_text(threads));
    let (ratio, within_noise) = match next {
        None => {
            text.push_str(&format!(
                "only {} ran ({} ops/s), nothing to compare",
                best.policy,
                units::rate(best.ops_per_sec)
            ));
            (None, None)
        }
        Some(next) => {
            let ratio = best.ops_per_sec / next.ops_per_sec.max(f64::MIN_POSITIVE);
            let noise = overlap(&best.ops_per_sec_repeats, &next.ops_per_sec_repeats);
            text.push_str(&format!(
                "fastest {}, {ratio:.2}x {} ({} vs {} ops/s){}",
                best.policy,
                next.policy,
                units::rate(best.ops_per_sec),
                units::rate(next.ops_per_sec),
                noise_note(
                    noise,
                    &best.ops_per_sec_repeats,
                    &next.ops_per_sec_repeats,
                    units::rate
                )
            ));
            (Some(ratio), noise)
        }
    };
    if let Some(layout) = layout_clause(&runs, &report.extents_per_file_repeats) {
        text.push_str("; ");
        text.push_str(&layout);
    }
    Some(Verdict {
        threads,
        fastest: best.policy.clone(),
        next: next.map(|n| n.policy.clone()),
        ratio,
        within_noise,
        text,
    })
}

/// "1 thread", "16 threads".
pub fn threads_text(threads: usize) -> String {
    format!("{threads} thread{}", if threads == 1 { "" } else { "s" })
}

/// The largest thread count two or more policies ran at; else the largest any ran at.
fn compared_threads(runs: &[&Run]) -> Option<usize> {
    let mut counts: Vec<usize> = runs.iter().map(|r| r.threads).collect();
    counts.sort_unstable();
    counts.dedup();
    let policies_at = |t: usize| {
        let mut p: Vec<&str> = runs
            .iter()
            .filter(|r| r.threads == t)
            .map(|r| r.policy.as_str())
            .collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    counts
        .iter()
        .rev()
        .find(|&&t| policies_at(t) >= 2)
        .or(counts.last())
        .copied()
}

/// Whether two sets of repetitions' min-max spreads overlap (`None`: either ran once).
pub fn overlap(a: &[f64], b: &[f64]) -> Option<bool> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (a_lo, a_hi) = units::min_max(a)?;
    let (b_lo, b_hi) = units::min_max(b)?;
    Some(a_lo <= b_hi && b_lo <= a_hi)
}

fn noise_note(
    noise: Option<bool>,
    a: &[f64],
    b: &[f64],
    fmt: impl Fn(f64) -> String + Copy,
) -> String {
    match noise {
        Some(true) => format!(
            ", within noise (spreads {} and {} overlap)",
            units::spread(a, fmt),
            units::spread(b, fmt)
        ),
        Some(false) => format!(
            ", beyond noise (spreads {} and {})",
            units::spread(a, fmt),
            units::spread(b, fmt)
        ),
        None => ", one run each: no spread to judge noise by (--repeat 3)".into(),
    }
}

/// "fewest extents/file P x.xx (next Q y.yy)", "fewest extents/file x.xx: P, Q" (a tie),
/// or "extents/file: the same for all (x.xx)".
fn layout_clause(runs: &[&Run], repeats: &[CellRepeats]) -> Option<String> {
    if runs.len() < 2 {
        return None;
    }
    let mut by_layout = runs.to_vec();
    by_layout.sort_by(|a, b| {
        a.layout
            .extents_per_file
            .total_cmp(&b.layout.extents_per_file)
    });
    let best = by_layout[0].layout.extents_per_file;
    let tied: Vec<&str> = by_layout
        .iter()
        .take_while(|r| r.layout.extents_per_file - best < 0.005)
        .map(|r| r.policy.as_str())
        .collect();
    if tied.len() == by_layout.len() {
        return Some(format!("extents/file: the same for all ({best:.2})"));
    }
    if tied.len() > 1 {
        return Some(format!(
            "fewest extents/file {best:.2}: {}",
            tied.join(", ")
        ));
    }
    let (b, n) = (by_layout[0], by_layout[1]);
    let of = |r: &Run| {
        repeats
            .iter()
            .find(|c| c.policy == r.policy && c.threads == r.threads)
            .map_or_else(Vec::new, |c| c.values.clone())
    };
    let noise = match overlap(&of(b), &of(n)) {
        Some(true) => ", within noise",
        _ => "",
    };
    Some(format!(
        "fewest extents/file {} {best:.2} (next {} {:.2}){noise}",
        b.policy, n.policy, n.layout.extents_per_file
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/frag-report.json"
        );
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap()
    }

    fn with_rates(mut r: Report, policy: &str, rates: &[f64]) -> Report {
        for run in r.runs.iter_mut().filter(|x| x.policy == policy) {
            run.ops_per_sec_repeats = rates.to_vec();
            run.ops_per_sec = super::super::report::median(rates);
        }
        r
    }

    #[test]
    fn names_the_fastest_and_flags_noise() {
        // Spreads apart: a verdict beyond noise.
        let r = with_rates(report(), "extalloc", &[9e6, 10e6, 11e6]);
        let r = with_rates(r, "tlsf", &[4e6, 5e6, 6e6]);
        let v = of(&r).unwrap();
        assert_eq!(v.threads, 2);
        assert_eq!(v.fastest, "extalloc");
        assert_eq!(v.next.as_deref(), Some("tlsf"));
        assert_eq!(v.ratio, Some(2.0));
        assert_eq!(v.within_noise, Some(false));
        assert!(
            v.text
                .contains("fastest extalloc, 2.00x tlsf (10.0 M vs 5.00 M ops/s), beyond noise"),
            "{}",
            v.text
        );
        // Overlapping spreads: flagged.
        let r = with_rates(r, "tlsf", &[4e6, 9.5e6, 6e6]);
        let v = of(&r).unwrap();
        assert_eq!(v.within_noise, Some(true));
        assert!(
            v.text
                .contains("within noise (spreads 9.00 M-11.0 M and 4.00 M-9.50 M overlap)"),
            "{}",
            v.text
        );
        // One repetition: no claim either way.
        let r = with_rates(with_rates(r, "tlsf", &[5e6]), "extalloc", &[10e6]);
        let v = of(&r).unwrap();
        assert_eq!(v.within_noise, None);
        assert!(v.text.contains("no spread"), "{}", v.text);
    }

    #[test]
    fn unmeasured_runs_and_single_policies() {
        let mut r = report();
        r.runs.retain(|x| x.policy == "extalloc");
        let v = of(&r).unwrap();
        assert_eq!(v.next, None);
        assert!(v.text.contains("only extalloc ran"), "{}", v.text);
        for run in &mut r.runs {
            run.ops_per_sec_repeats.clear();
        }
        assert_eq!(of(&r), None, "a replay's kernel row is never compared");
        assert_eq!(overlap(&[1.0, 2.0], &[2.0, 3.0]), Some(true));
        let mut r = report();
        for run in &mut r.runs {
            run.layout.extents_per_file = 1.0;
        }
        assert!(of(&r)
            .unwrap()
            .text
            .ends_with("extents/file: the same for all (1.00)"));
        assert_eq!(overlap(&[1.0, 2.0], &[2.5, 3.0]), Some(false));
    }
}
