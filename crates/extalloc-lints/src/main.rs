//! `extalloc-lints`: the project's own rules, checked on syn's parse of the sources (CI runs
//! both; docs/architecture.md states the rules):
//!
//! ```sh
//! cargo run -q -p extalloc-lints -- assertions            # the folders of the rule
//! cargo run -q -p extalloc-lints -- assertions PATH...    # files or folders: the table only
//! cargo run -q -p extalloc-lints -- assertions --update-floors
//! cargo run -q -p extalloc-lints -- import-cycles [CRATE_SRC...]
//! cargo run -q -p extalloc-lints -- long-files [--limit 600] [SRC...]   # a report
//! ```
//!
//! Exit status 1 when a rule is broken (an offender, a share below its floor, a cycle), 2
//! on a usage error or a file that does not parse. Paths are relative to the workspace
//! root, wherever it is run from.
//!
//! Data structures: none of its own. Locks: none.

mod assertions;
mod cycles;
mod floors;
mod long_files;
mod rust;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "extalloc-lints",
    about = "extalloc's own lints on syn's parse of the sources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Assertions in state-changing functions: offenders in the strict folders, the
    /// ratchet in the FUSE crate's.
    Assertions {
        /// Raise the ratcheted folders' floors to their shares now, and drop from
        /// known-offenders.txt the functions that now assert (a new offender is never
        /// added: assert in it).
        #[arg(long)]
        update_floors: bool,
        /// Files or folders to report on (the table only; default: the rule's folders).
        paths: Vec<String>,
    },
    /// Files that import each other, directly or through others.
    ImportCycles {
        /// Crate source folders (default: every crates/*/src).
        srcs: Vec<String>,
    },
    /// Files over a number of lines outside their inline tests: a report for review, never
    /// a failure (a file is split by concept, not by size).
    LongFiles {
        /// Lines outside inline tests above which a file is listed.
        #[arg(long, default_value_t = 600)]
        limit: usize,
        /// Folders or files (default: every crates/*/src).
        srcs: Vec<String>,
    },
}

/// The workspace root: two folders above this crate's manifest.
fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn assertions(update: bool, paths: Vec<String>) -> Result<bool> {
    let base = root();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bad = Vec::new();
    if !paths.is_empty() {
        assertions::print_rows(&assertions::folder_rows(&base, &paths, &mut bad)?);
        for b in &bad {
            println!("OFFENDER {b}");
        }
        return Ok(false);
    }
    let strict: Vec<String> = assertions::STRICT.iter().map(|s| s.to_string()).collect();
    assertions::print_rows(&assertions::folder_rows(&base, &strict, &mut bad)?);
    let ratcheted: Vec<String> = assertions::RATCHETED
        .iter()
        .map(|s| s.to_string())
        .collect();
    let rows = assertions::folder_rows(&base, &ratcheted, &mut Vec::new())?;
    assertions::print_rows(&rows);
    let fell = floors::ratchet(&rows, &here.join("assertion-floors.txt"), update)?;
    let known_path = here.join("known-offenders.txt");
    let known = floors::read_known(&known_path)?;
    let (new, gone) = floors::against_known(&bad, &known);
    for b in &new {
        println!("OFFENDER {b}");
    }
    if update {
        floors::write_known(&known_path, &known, &bad)?;
    } else if !gone.is_empty() {
        println!(
            "{} known offenders now assert (run with --update-floors to drop them): {}",
            gone.len(),
            gone.join(", ")
        );
    }
    println!(
        "assertions: {} new offenders, {} known ({}) in the strict folders",
        new.len(),
        bad.len() - new.len(),
        known_path
            .strip_prefix(&base)
            .unwrap_or(&known_path)
            .display()
    );
    Ok(fell || !new.is_empty())
}

/// `srcs` as paths, or every crates/*/src when empty.
fn sources(base: &Path, srcs: Vec<String>) -> Result<Vec<PathBuf>> {
    if !srcs.is_empty() {
        return Ok(srcs.into_iter().map(PathBuf::from).collect());
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(base.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .filter(|p| p.is_dir())
        .collect();
    all.sort();
    Ok(all)
}

fn import_cycles(srcs: Vec<String>) -> Result<bool> {
    let base = root();
    let srcs = sources(&base, srcs)?;
    let (mut pairs, mut longer, mut files) = (0, 0, 0);
    for src in &srcs {
        if !src.is_dir() {
            anyhow::bail!("{} is not a folder", src.display());
        }
        let found = cycles::Crate::read(src)?.check();
        let show = |p: &Path| p.strip_prefix(&base).unwrap_or(p).display().to_string();
        for p in &found.pairs {
            let (a, b) = (show(&p.a), show(&p.b));
            println!("{a} <-> {b}\n    {a}: {}\n    {b}: {}", p.a_line, p.b_line);
        }
        for c in &found.longer {
            let names: Vec<String> = c.iter().map(|p| show(p)).collect();
            println!(
                "files that reach each other through others ({}): {}",
                c.len(),
                names.join(", ")
            );
        }
        pairs += found.pairs.len();
        longer += found.longer.len();
        files += found.files;
    }
    println!(
        "import-cycles: {pairs} pair(s) of files importing each other and {longer} longer cycle(s) in {files} files"
    );
    Ok(pairs + longer > 0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = match cli.command {
        Command::Assertions {
            update_floors,
            paths,
        } => assertions(update_floors, paths),
        Command::ImportCycles { srcs } => import_cycles(srcs),
        Command::LongFiles { limit, srcs } => {
            let base = root();
            sources(&base, srcs)
                .and_then(|s| long_files::over(&s, limit))
                .map(|found| {
                    long_files::print(&base, &found, limit);
                    false
                })
        }
    };
    match run {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(e) => {
            eprintln!("extalloc-lints: {e:#}");
            ExitCode::from(2)
        }
    }
}
