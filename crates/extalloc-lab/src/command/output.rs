//! Where a lab command's results go besides stdout ([`Outputs`]: the JSON report, the
//! charts), checked before any work starts, and how a report is printed and written
//! ([`emit`]).

use crate::lab;
use anyhow::{Context, Result};

/// Where a run's results go besides stdout.
pub struct Outputs {
    pub json: Option<std::path::PathBuf>,
    pub plot: Option<std::path::PathBuf>,
}

impl Outputs {
    /// Before any work: `--json` names a file that can be written, `--plot` a directory
    /// (made now). A run of minutes must not fail at its end on a mistyped path.
    pub fn check(&self) -> Result<()> {
        if let Some(path) = &self.json {
            writable_file("--json", path)?;
        }
        if let Some(dir) = &self.plot {
            ready_dir("--plot", dir)?;
        }
        Ok(())
    }

    /// The same for the suite, whose `--json` is a directory too.
    pub fn check_dirs(&self) -> Result<()> {
        for (flag, dir) in [("--json", &self.json), ("--plot", &self.plot)] {
            if let Some(dir) = dir {
                ready_dir(flag, dir)?;
            }
        }
        Ok(())
    }
}

/// `path` can be created or replaced: its directory exists and it is not a directory.
pub fn writable_file(flag: &str, path: &std::path::Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    anyhow::ensure!(
        parent.is_dir(),
        "{flag} {}: the directory {} does not exist (create it first)",
        path.display(),
        parent.display()
    );
    anyhow::ensure!(
        !path.is_dir(),
        "{flag} {}: is a directory; give a file name",
        path.display()
    );
    let meta = std::fs::metadata(parent)
        .with_context(|| format!("{flag} {}: reading {}", path.display(), parent.display()))?;
    anyhow::ensure!(
        !meta.permissions().readonly(),
        "{flag} {}: the directory {} is read-only",
        path.display(),
        parent.display()
    );
    Ok(())
}

/// Makes directory `dir` (and its parents) now, or says why it cannot.
fn ready_dir(flag: &str, dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag} {}: cannot create the directory", dir.display()))
}

/// Prints the tables, writes the JSON report and the charts. The verdict is made again
/// first: `compare` adds the kernel's runs after its matrix judged extalloc's.
pub fn emit(report: &lab::report::Report, out: &Outputs) -> Result<()> {
    let mut report = report.clone();
    report.verdict = lab::verdict::of(&report);
    let report = &report;
    print!("{}", lab::markdown::markdown(report));
    if let Some(dir) = &out.plot {
        for path in lab::charts::write_all(report, dir)? {
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &out.json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
