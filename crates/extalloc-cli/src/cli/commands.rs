//! The lab commands that are more than a call into the library: the quick suite (its
//! reports to a directory), trace replay (its oddities to stderr), the crash torture (its
//! verdict), open-bench and report.

use super::output::{emit, writable_file, Outputs};
use anyhow::{Context, Result};
use extalloc_cli::{lab, replay, torture};
use lab::LabOptions;
use std::path::Path;

/// `extalloc bench --suite quick`: every table on stdout, each report under `--json DIR`
/// and `--plot DIR` (a folder per workload, and `DIR/index.md` linking every chart).
pub fn quick_suite(opts: &LabOptions, out: &Outputs) -> Result<()> {
    out.check_dirs()?;
    let reports = lab::suite::run(&lab::suite::quick(), opts)?;
    println!("## Summary\n\n{}", lab::suite::summary(&reports));
    let mut sections = Vec::new();
    for report in &reports {
        if let Some(dir) = &out.json {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{}.json", report.workload));
            std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(dir) = &out.plot {
            let charts = lab::charts::write_charts(report, &dir.join(&report.workload))?;
            sections.push((report.workload.clone(), charts));
        }
    }
    if let Some(dir) = &out.plot {
        let index = lab::charts::write_index(dir, &sections)?;
        eprintln!("wrote {} (a link to every chart)", index.display());
    }
    if let Some(dir) = out.json.as_ref().or(out.plot.as_ref()) {
        eprintln!("wrote the reports under {}", dir.display());
    }
    Ok(())
}

/// What `extalloc replay` is asked.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The trace.
    pub trace: std::path::PathBuf,
    /// Device to keep, `major,minor` [default: the most frequent in the trace].
    #[arg(long)]
    pub dev: Option<String>,
    /// Device size in blocks [default: the trace's capture header, else the README next
    /// to it].
    #[arg(long)]
    pub blocks: Option<u64>,
    /// Blocks per group [default: the header or README, else 32768].
    #[arg(long)]
    pub group_blocks: Option<u64>,
    /// Block size in bytes [default: the header or README, else 4096].
    #[arg(long)]
    pub block_size: Option<u32>,
    /// Policies, comma-separated.
    #[arg(long, default_value = "ext4-base,ext4-2025,extalloc")]
    pub policy: String,
    /// Replay only the first N events.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Fidelity rules to switch off, comma-separated: commits, reuse, cpu, complete,
    /// streams, metagoals (docs/replay.md says what each does).
    #[arg(long, value_delimiter = ',')]
    pub without: Vec<String>,
    /// Write every file's extents on each side to this JSON file.
    #[arg(long)]
    pub dump_files: Option<std::path::PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Also write report.md and PNG charts into this directory.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
}

/// `extalloc replay`: the report on stdout, what was odd on stderr.
pub fn replay(a: ReplayArgs) -> Result<()> {
    let ReplayArgs {
        trace,
        dev,
        blocks,
        group_blocks,
        block_size,
        policy,
        limit,
        without,
        dump_files,
        json,
        plot,
    } = a;
    let outputs = Outputs { json, plot };

    let dev = dev
        .map(|d| -> Result<(u32, u32)> {
            let (a, b) = d
                .split_once(',')
                .context("--dev: expected major,minor such as 7,1")?;
            Ok((
                a.trim().parse().context("--dev major")?,
                b.trim().parse().context("--dev minor")?,
            ))
        })
        .transpose()?;
    let policies: Vec<String> = policy
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    anyhow::ensure!(!policies.is_empty(), "--policy is empty");
    outputs.check()?;
    if let Some(path) = &dump_files {
        writable_file("--dump-files", path)?;
    }
    let (report, odd, trace) = replay::run(&replay::ReplayOptions {
        trace: &trace,
        dev,
        blocks,
        group_blocks,
        block_size,
        policies,
        limit,
        without,
        dump_files,
    })?;
    eprintln!(
        "{} lines, {} events, {} requests replayed",
        trace.lines,
        trace.events.len(),
        odd.requests
    );
    if trace.malformed > 0 {
        eprintln!("{} malformed lines, for example:", trace.malformed);
        for l in &trace.malformed_examples {
            eprintln!("  {l}");
        }
    }
    for (what, n) in [
        (
            "frees of blocks the trace never allocated",
            odd.frees_of_unseen_blocks,
        ),
        (
            "requests over blocks already mapped",
            odd.requests_over_mapped_blocks,
        ),
        ("decisions without a request", odd.decisions_without_request),
    ] {
        if n > 0 {
            eprintln!("{n} {what}");
        }
    }
    emit(&report, &outputs)
}

/// `extalloc torture`: the JSON verdict on stdout (and in `json`); an error when anything
/// was lost, leaked or handed out twice.
pub fn torture(crashes: u64, seed: u64, threads: usize, json: Option<&Path>) -> Result<()> {
    anyhow::ensure!((1..=64).contains(&threads), "--threads must be 1 to 64");
    let out = torture::run(crashes, seed, threads)?;
    let text = serde_json::to_string(&out)?;
    println!("{text}");
    if let Some(path) = json {
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(
        out.lost == 0 && out.leaked == 0 && out.double_allocated == 0,
        "torture found {} lost, {} leaked, {} doubly allocated blocks",
        out.lost,
        out.leaked,
        out.double_allocated
    );
    Ok(())
}

/// `extalloc torture --volume`: the JSON verdict on stdout (and in `json`); an error when
/// any file lost data, read bytes it never wrote, or any block was lost, leaked or mapped
/// twice.
pub fn torture_volume(crashes: u64, seed: u64, threads: usize, json: Option<&Path>) -> Result<()> {
    anyhow::ensure!((1..=64).contains(&threads), "--threads must be 1 to 64");
    let out = extalloc_cli::torture_volume::run(crashes, seed, threads)?;
    let text = serde_json::to_string(&out)?;
    println!("{text}");
    if let Some(path) = json {
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(
        out.lost + out.leaked + out.double_allocated + out.stale_reads + out.data_mismatches == 0,
        "volume torture found {} lost, {} leaked, {} doubly allocated, {} stale bytes, {} \
         files with wrong data",
        out.lost,
        out.leaked,
        out.double_allocated,
        out.stale_reads,
        out.data_mismatches
    );
    Ok(())
}

/// `extalloc torture`'s options.
#[derive(clap::Args, Debug)]
pub struct TortureArgs {
    /// Crashes to inject (rounds).
    #[arg(long, default_value_t = 200)]
    pub crashes: u64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Threads working at once.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Instead of crashes: a corruption campaign of this many damages (one each) to
    /// images whose in-use blocks are known; fsck, then open and allocate until full.
    /// The JSON counts damages, panics, hangs, fsck_missed and handed_in_use; it fails
    /// when any of the last four is not zero.
    #[arg(long, value_name = "N")]
    pub corrupt: Option<u64>,
    /// Instead of the store's transactions: random file operations on a volume, with
    /// crashes; every file checked after each reopen (stale reads, lost data, leaks).
    /// Odd seeds write through the buffered cache (delayed allocation, writeback).
    #[arg(long, conflicts_with = "corrupt")]
    pub volume: bool,
    /// Instead of the store's transactions: the file system's namespace changes from
    /// every thread in its own directory, crashes at random write boundaries; after
    /// each recovery every tree checked against a model (names, link counts, synced
    /// data) and the namespace check run.
    #[arg(long, conflicts_with_all = ["corrupt", "volume"])]
    pub fs: bool,
    /// Instead: a damage campaign of this many damages (one each) to file-system images
    /// whose every path, content and metadata place is known; fsck; mount; repair
    /// (`fsck --repair`), fsck and mount; after each mount every file the damage did not
    /// hit checked, the device filled and the files checked again. One line per metadata
    /// kind on stdout, the counts in --json; fails when panics, hangs, files lost or
    /// overwritten, or fsck after repair is not clean.
    #[arg(long, value_name = "N", conflicts_with_all = ["corrupt", "volume", "fs"])]
    pub fs_damage: Option<u64>,
    /// Also write the JSON verdict here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// `extalloc torture`: the store's crash torture, or (by flag) the corruption campaign,
/// the volume's or the file system's namespace torture.
pub fn torture_command(a: &TortureArgs) -> Result<()> {
    let json = a.json.as_deref();
    if let Some(damages) = a.fs_damage {
        return fs_damage(damages, a.seed, json);
    }
    match a.corrupt {
        Some(damages) => corrupt(damages, a.seed, json),
        None if a.volume => torture_volume(a.crashes, a.seed, a.threads, json),
        None if a.fs => torture_fs(a.crashes, a.seed, a.threads, json),
        None => torture(a.crashes, a.seed, a.threads, json),
    }
}

/// `extalloc torture --fs`: the JSON verdict on stdout (and in `json`); an error when a
/// name was lost, a link count wrong, synced data wrong or the check not clean.
pub fn torture_fs(crashes: u64, seed: u64, threads: usize, json: Option<&Path>) -> Result<()> {
    anyhow::ensure!((1..=16).contains(&threads), "--threads must be 1 to 16");
    if let Some(path) = json {
        super::output::writable_file("--json", path)?;
    }
    let out = extalloc_cli::torture_fs::run(crashes, seed, threads)?;
    let text = serde_json::to_string(&out)?;
    println!("{text}");
    if let Some(path) = json {
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(out.clean(), "namespace torture failed: {out:?}");
    Ok(())
}

/// `extalloc torture --corrupt N`: the campaign's JSON verdict on stdout (and in `json`);
/// an error when anything that must be zero is not (the first failures on stderr).
pub fn corrupt(damages: u64, seed: u64, json: Option<&Path>) -> Result<()> {
    if let Some(path) = json {
        super::output::writable_file("--json", path)?;
    }
    let out = extalloc_cli::corrupt::run(damages, seed)?;
    let text = serde_json::to_string(&out)?;
    println!("{text}");
    if let Some(path) = json {
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    for f in &out.failures {
        eprintln!("{f}");
    }
    anyhow::ensure!(
        out.passed(),
        "the corruption campaign found {} panics, {} hangs, {} fsck misses, {} in-use blocks handed out",
        out.panics,
        out.hangs,
        out.fsck_missed,
        out.handed_in_use
    );
    Ok(())
}

/// `extalloc torture --fs-damage N`: a line per metadata kind on stdout, the JSON in
/// `json`; an error when anything that must be zero is not (the first failures on stderr).
pub fn fs_damage(damages: u64, seed: u64, json: Option<&Path>) -> Result<()> {
    if let Some(path) = json {
        super::output::writable_file("--json", path)?;
    }
    let out = extalloc_cli::torture_fs_damage::run(damages, seed)?;
    print!("{}", out.summary());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&out)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    for f in &out.failures {
        eprintln!("{f}");
    }
    anyhow::ensure!(
        out.passed(),
        "the file-system damage campaign found {} panics, {} hangs and {}",
        out.panics,
        out.hangs,
        out.summary().lines().last().unwrap_or_default()
    );
    Ok(())
}

/// Options of `extalloc open-bench`.
#[derive(clap::Args, Debug)]
pub struct OpenBenchArgs {
    /// A file to create (and remove afterwards).
    pub path: std::path::PathBuf,
    /// Size of the sparse device for the open measurement.
    #[arg(long, default_value = "16TiB")]
    pub size: String,
    /// Blocks per group of that device.
    #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
    pub group_blocks: u64,
    /// Records to replay, comma-separated (each a recovery measurement).
    #[arg(long, default_value = "1000,10000,100000")]
    pub records: String,
    /// Also open a volume holding this many files (0: skip).
    #[arg(long, default_value_t = 0)]
    pub volume_files: u64,
    /// Extents of each of those files.
    #[arg(long, default_value_t = 10)]
    pub extents_per_file: u64,
    /// Instead: open synthetic devices of each --size (comma-separated, e.g.
    /// 64GiB,1TiB,1PiB), --fill full; PATH is not used.
    #[arg(long)]
    pub synthetic: bool,
    /// --synthetic: fraction of each group in use (0 to 0.95).
    #[arg(long, default_value_t = 0.7)]
    pub fill: f64,
}

/// `extalloc open-bench`: opening a large device, then recovery at each record count (or,
/// with `--synthetic`, opening synthetic filled devices).
pub fn open_bench(a: &OpenBenchArgs) -> Result<()> {
    if a.synthetic {
        return open_bench_synthetic(&a.size, a.group_blocks, a.fill);
    }
    let (path, size, group_blocks, records) = (&a.path, &a.size, a.group_blocks, &a.records);
    let (volume_files, extents_per_file) = (a.volume_files, a.extents_per_file);
    let bytes = lab::parse_size(size)?;
    let open = lab::open_bench::open_big(path, bytes, group_blocks)?;
    let mut rows = Vec::new();
    for n in records.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let n: u64 = n
            .parse()
            .with_context(|| format!("--records: {n:?} is not a count"))?;
        eprintln!("recovery: {n} records...");
        rows.push(lab::open_bench::recovery(path, n)?);
    }
    print!("{}", lab::open_bench::markdown(&open, &rows));
    if volume_files > 0 {
        let v = lab::open_bench::volume_open(path, volume_files, extents_per_file)?;
        println!(
            "\n| volume files | extents | build s | open s | bytes read | bitmaps loaded | maps read | \
             check s (every map) | check bytes read |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|\n\
             | {} | {} | {:.1} | {:.3} | {} | {} | {} | {:.3} | {} |",
            v.files,
            v.extents,
            v.build_seconds,
            v.open_seconds,
            v.bytes_read,
            v.bitmaps_loaded,
            v.maps_read,
            v.check_seconds,
            v.check_bytes_read
        );
    }
    Ok(())
}

/// `extalloc open-bench --synthetic --size A,B,...`: one synthetic device of each size,
/// smallest first, each made and opened in this process (RSS grows with the largest).
pub fn open_bench_synthetic(sizes: &str, group_blocks: u64, fill: f64) -> Result<()> {
    anyhow::ensure!(
        (0.0..=0.95).contains(&fill),
        "--fill must be from 0 to 0.95"
    );
    let syn = lab::Synthetic {
        fill,
        free_extent_kib: (4, 4096),
    };
    let mut rows = Vec::new();
    for size in sizes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bytes = lab::parse_size(size).with_context(|| format!("--size {size}"))?;
        eprintln!("open-bench: synthetic {size}, {fill} full...");
        rows.push(lab::open_bench::open_synthetic(
            bytes,
            group_blocks,
            syn,
            1,
        )?);
    }
    print!("{}", lab::open_bench::synthetic_markdown(&rows));
    Ok(())
}

/// How a file workload runs in memory.
pub type InMemory =
    fn(&lab::backend::LabPolicy, usize, &lab::LabOptions) -> Result<lab::report::Run>;
/// How a file workload runs on a volume over a device file.
pub type OnVolume = fn(&lab::volume_run::OnDevice<'_>) -> Result<lab::volume_run::VolumeRun>;

/// `extalloc bench FILE-WORKLOAD --device PATH`: each extalloc policy and thread
/// count in memory and on a journaled volume made anew over PATH (data written through the
/// volume), side by side.
pub fn file_workload_volume(
    name: &str,
    opts: &lab::LabOptions,
    in_memory_run: InMemory,
    volume_run: OnVolume,
) -> Result<()> {
    let path = opts.device.clone().context("--device")?;
    let mut in_memory = opts.clone();
    in_memory.device = None;
    println!(
        "| {name} policy | threads | memory ops/s | volume ops/s | volume/memory | extents/file \
         memory | volume | free extents memory | volume |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for spec in &opts.policies {
        let policy = lab::backend::LabPolicy::parse(spec)?;
        let lab::backend::LabPolicy::Extalloc(p) = &policy else {
            anyhow::bail!("--device runs extalloc policies only, not {spec}");
        };
        for &t in &opts.threads {
            eprintln!(
                "{name} {spec} x{t}: memory, then the volume on {}",
                path.display()
            );
            let mem = in_memory_run(&policy, t, &in_memory)?;
            let vol = volume_run(&lab::volume_run::OnDevice {
                path: &path,
                policy: p,
                threads: t,
                opts,
            })?;
            println!(
                "| {spec} | {t} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} |",
                mem.ops_per_sec,
                vol.ops_per_sec,
                vol.ops_per_sec / mem.ops_per_sec,
                mem.layout.extents_per_file,
                vol.extents_per_file,
                mem.free_space.as_ref().map_or(0, |f| f.free_extents),
                vol.free_extents
            );
        }
    }
    Ok(())
}

/// `extalloc report`: charts and tables from a bench or compare report.
pub fn report(json: &Path, out: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let report: lab::report::Report = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a bench report", json.display()))?;
    anyhow::ensure!(
        report.schema == "extalloc-bench/1",
        "{}: schema '{}', expected extalloc-bench/1",
        json.display(),
        report.schema
    );
    for path in lab::charts::write_all(&report, out)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}
