//! `extalloc replay`'s run once its arguments are read: the report on stdout (and as JSON
//! and charts where [`Outputs`] says), what was odd in the trace on stderr.

use super::output::{emit, writable_file, Outputs};
use crate::replay::{self, ReplayOptions};
use anyhow::Result;

/// Replays as `opts` says; `outputs` and `opts.dump_files` are checked first.
pub fn replay(opts: &ReplayOptions<'_>, outputs: &Outputs) -> Result<()> {
    outputs.check()?;
    if let Some(path) = &opts.dump_files {
        writable_file("--dump-files", path)?;
    }
    let (report, odd, trace) = replay::run(opts)?;
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
    emit(&report, outputs)
}
