//! `extalloc torture`: its arguments, and the harness's verdict (`extalloc-harness`)
//! printed as JSON (a line per metadata kind for `--fs-damage`) and turned into the exit
//! status: an error when anything that must be zero is not.

use super::output::can_write;
use anyhow::{Context, Result};
use extalloc_harness as harness;
use std::path::Path;

/// `extalloc torture`: the JSON verdict on stdout (and in `json`); an error when anything
/// was lost, leaked or handed out twice.
pub fn torture(crashes: u64, seed: u64, threads: usize, json: Option<&Path>) -> Result<()> {
    anyhow::ensure!((1..=64).contains(&threads), "--threads must be 1 to 64");
    let out = harness::torture::run(crashes, seed, threads)?;
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
    let out = harness::torture_volume::run(crashes, seed, threads)?;
    let text = serde_json::to_string(&out)?;
    println!("{text}");
    if let Some(path) = json {
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(
        out.lost
            + out.leaked
            + out.double_allocated
            + out.stale_reads
            + out.data_mismatches
            + out.swallowed_flush_errors
            + out.believed_retries
            == 0,
        "volume torture found {} lost, {} leaked, {} doubly allocated, {} stale bytes, {} \
         files with wrong data, {} failed flushes reported as success, {} retries after a \
         failed flush believed",
        out.lost,
        out.leaked,
        out.double_allocated,
        out.stale_reads,
        out.data_mismatches,
        out.swallowed_flush_errors,
        out.believed_retries
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
        can_write("--json", path)?;
    }
    let out = harness::torture_fs::run(crashes, seed, threads)?;
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
        can_write("--json", path)?;
    }
    let out = harness::corrupt::run(damages, seed)?;
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
        can_write("--json", path)?;
    }
    let out = harness::torture_fs_damage::run(damages, seed)?;
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
