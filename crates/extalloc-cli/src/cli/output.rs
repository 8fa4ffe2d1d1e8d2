//! Where a run's results go besides stdout, checked before any work starts; how errors
//! are worded; and what a closed stdout does.

use anyhow::{Context, Result};
use extalloc_cli::lab;

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
    print!("{}", lab::report::markdown(report));
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

/// The error and its causes, each cause once: the library's messages already quote the
/// operating system's error they keep as their source.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let t = cause.to_string();
        if !text.contains(&t) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&t);
        }
    }
    text
}

/// Restores `SIGPIPE`'s default action, which Rust's runtime sets to ignore: a write to a
/// closed pipe then ends the process at once and quietly (status 141 in a shell), as it
/// ends `ls` or `cat`, instead of `println!` panicking on `EPIPE`. One place for every
/// command, since reports are printed from hundreds of places (the lab's tables too);
/// a writer that maps `BrokenPipe` to an exit would have to replace every one of them.
/// The mount's server keeps ignoring it: its writes to the FUSE channel and its ready line
/// must fail as errors, never kill a file system that is being served.
pub fn end_quietly_on_closed_stdout() {
    // SAFETY: setting a signal's disposition to its default is async-signal-safe and
    // runs before any other thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
