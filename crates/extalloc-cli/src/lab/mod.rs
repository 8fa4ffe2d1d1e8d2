//! The lab: workloads that run against each requested policy and thread count in one process
//! and report throughput, latency, layout and free-space figures (DESIGN.md section 8).

pub mod fallocate2;
pub mod report;

use anyhow::{bail, Context, Result};
use extalloc::{Geometry, Policy};
use report::{Report, Run};

/// Options shared by the lab's workloads.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LabOptions {
    pub threads: Vec<usize>,
    pub policies: Vec<String>,
    pub seconds: f64,
    pub repeat: usize,
    pub device_bytes: u64,
    pub block_size: u32,
    pub group_blocks: u64,
    pub commit_ms: u64,
    pub seed: u64,
}

impl LabOptions {
    pub fn geometry(&self) -> Result<Geometry> {
        Geometry::from_bytes(self.block_size, self.group_blocks, self.device_bytes)
            .context("device geometry")
    }
}

/// Parses sizes like `16GiB`, `512MiB`, `64K`, `4096`.
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().with_context(|| {
        format!(
            "size '{s}': expected a number with an optional unit (K, M, G, T, KiB, MiB, GiB, TiB)"
        )
    })?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        "t" | "tib" | "tb" => 40,
        other => bail!("size '{s}': unknown unit '{other}' (use K, M, G, T or KiB, MiB, GiB, TiB)"),
    };
    n.checked_mul(1u64 << shift)
        .with_context(|| format!("size '{s}' overflows"))
}

/// Parses `1,2,4,8`.
pub fn parse_threads(s: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=1024).contains(&n))
        })
        .collect::<Option<_>>()
        .with_context(|| {
            format!("--threads '{s}': expected a comma-separated list of counts from 1 to 1024")
        })?;
    if v.is_empty() {
        bail!("--threads is empty");
    }
    Ok(v)
}

/// Runs `run_once` for every policy x threads, `repeat` times interleaved (so drift on a
/// shared machine hits every configuration alike), and keeps the median repetition of each.
pub fn run_matrix(
    workload: &str,
    opts: &LabOptions,
    run_once: impl Fn(&Policy, usize, &LabOptions) -> Result<Run>,
) -> Result<Report> {
    let policies: Vec<Policy> = opts
        .policies
        .iter()
        .map(|p| Policy::parse(p).with_context(|| format!("--policy '{p}'")))
        .collect::<Result<_>>()?;
    let geometry = opts.geometry()?;
    let total = policies.len() * opts.threads.len() * opts.repeat;
    let mut done = 0;
    let mut all: Vec<Vec<Run>> = vec![Vec::new(); policies.len() * opts.threads.len()];
    for rep in 0..opts.repeat {
        for (pi, policy) in policies.iter().enumerate() {
            for (ti, &threads) in opts.threads.iter().enumerate() {
                done += 1;
                eprint!(
                    "[{done}/{total}] {workload} {} x{threads} (repeat {}/{})... ",
                    policy.name,
                    rep + 1,
                    opts.repeat
                );
                let run = run_once(policy, threads, opts)?;
                eprintln!("{:.0} ops/s", run.ops_per_sec);
                all[pi * opts.threads.len() + ti].push(run);
            }
        }
    }
    let runs = all
        .into_iter()
        .map(|mut reps| {
            let rates: Vec<f64> = reps.iter().map(|r| r.ops_per_sec).collect();
            reps.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            let mut chosen = reps.swap_remove(reps.len() / 2);
            chosen.ops_per_sec = report::median(&rates);
            chosen.ops_per_sec_repeats = rates;
            chosen
        })
        .collect();
    Ok(Report {
        schema: "extalloc-bench/1",
        workload: workload.to_string(),
        params: serde_json::to_value(opts)?,
        device: report::Device {
            blocks: geometry.blocks_count,
            block_size: geometry.block_size,
            group_blocks: geometry.group_blocks,
            groups: geometry.groups_count(),
        },
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("16GiB").unwrap(), 16 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn threads_parse() {
        assert_eq!(parse_threads("1,2, 8").unwrap(), vec![1, 2, 8]);
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("a").is_err());
    }
}
