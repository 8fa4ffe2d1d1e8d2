//! How errors are worded, what a closed stdout does, and whether a report's file can be
//! written before a long run starts.

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
    // The command line's own case of a busy device, which the library's message (for
    // every caller) does not name.
    let busy = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<extalloc::Error>(),
            Some(extalloc::Error::DeviceBusy { .. })
        )
    });
    if busy {
        text.push_str(
            " (after a plain `umount` a mount's daemon may still write back: wait, or use \
             `extalloc umount`)",
        );
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

/// Tunes glibc's malloc for the mount's daemon, before it starts a thread:
///
/// - **Arenas at one per CPU** (at least 2, at most 8). glibc's default, 8 per CPU, let each
///   of the daemon's threads (FUSE workers, writeback, commits) keep its own 64 MiB arena,
///   holding freed checkpoint buffers: about 160 MiB of the daemon's 800 MiB after 1M
///   creates on 2 CPUs (heaptrack and `/proc/PID/smaps`; `MALLOC_ARENA_MAX=2` gave 633 MiB).
/// - **Blocks of 64 KiB and more mapped on their own** (`M_MMAP_THRESHOLD`). glibc raises
///   that threshold each time such a block is freed (up to 32 MiB), after which the
///   directories' entry arenas and index tables, which grow in steps of tens to hundreds
///   of KiB, come from the heap and leave holes there as they grow; a fixed threshold
///   maps each on its own and gives it back whole. 3M empty files in 1,000 directories:
///   the daemon's peak 288-342 MiB (median 326) -> 280-296 (median 281), three runs each;
///   1 GiB written and read back cold in 1 MiB blocks took the same time and CPU
///   (`docs/results.md`, "The daemon's memory at 10M under 512 MiB").
///
/// `MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_` or `GLIBC_TUNABLES` in the environment
/// win over the matching setting.
pub fn tune_malloc() {
    let env = |name: &str| std::env::var_os(name).is_some();
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if !env("MALLOC_ARENA_MAX") && !tunables.contains("arena_max") {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        mallopt(
            "M_ARENA_MAX",
            libc::M_ARENA_MAX,
            cpus.clamp(2, 8) as libc::c_int,
        );
    }
    if !env("MALLOC_MMAP_THRESHOLD_") && !tunables.contains("mmap_threshold") {
        mallopt("M_MMAP_THRESHOLD", libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// The daemon's `M_MMAP_THRESHOLD` ([`tune_malloc`]).
const MMAP_THRESHOLD: libc::c_int = 64 << 10;

/// Sets one of malloc's tunables, saying so when glibc refuses it (its default stays).
fn mallopt(name: &str, param: libc::c_int, value: libc::c_int) {
    // SAFETY: mallopt only sets a tunable of the allocator; it runs before any other
    // thread is started, so no allocation races it.
    if unsafe { libc::mallopt(param, value) } == 0 {
        eprintln!("extalloc mount: mallopt({name}, {value}) refused; glibc's default stays");
    }
}

/// A line to stdout that never panics: the mount's server says its ready line and its
/// last error through a pipe its parent may have closed long ago (`println!` panics on
/// `EPIPE`, and the panic hid the real error). A line nobody can read is dropped.
pub fn say_out(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// [`say_out`] for stderr (the server's log).
pub fn say_err(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Before a run of minutes (`extalloc torture --json PATH`): a file can be made beside
/// `path` (one is made and removed again, so the answer holds for root and for read-only
/// mounts alike) and `path` is not a directory. The run must not fail at its end on a
/// mistyped path.
pub fn can_write(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    anyhow::ensure!(
        !path.is_dir(),
        "{flag} {}: is a directory; give a file name",
        path.display()
    );
    let probe = dir.join(format!(".extalloc-probe-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(|| {
        format!(
            "{flag} {}: cannot write a file in {}",
            path.display(),
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `n` and `noun`, the noun plural unless `n` is 1 ("1 group", "3 groups"): every noun a
/// report counts this way takes a plain `s`.
pub fn counted(n: u64, noun: &str) -> String {
    debug_assert!(!noun.ends_with('s'), "{noun}: give the singular");
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
