//! The fidelity rules of a replay: what the trace lets the replay give the allocator, each
//! of which `--without` can switch off (`docs/replay.md` says what each does and changes).
//!
//! Data structures: [`Rules`] (one flag or choice per rule, from [`Rules::for_events`]),
//! [`CommitRule`]. No invariant beyond each rule's documentation; no locks.

use super::parse::{Event, Traced};
use anyhow::{bail, Result};

/// When the replay commits (makes freed blocks reusable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CommitRule {
    /// At each `jbd2_end_commit` in the trace (captures by `extalloc capture`).
    Traced,
    /// Traces without journal events: when this many nanoseconds of trace time have passed
    /// since the last commit (jbd2's commit interval, 5 s by default), and at each fsync.
    Interval(u64),
    /// After every this many requests, whatever the kernel did (`--without commits`).
    Requests(u64),
}

/// jbd2's default commit interval (`commit=5`).
pub const DEFAULT_COMMIT_NS: u64 = 5_000_000_000;

/// The fidelity rules of one replay, derived from what the trace holds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Rules {
    pub commit: CommitRule,
    /// The trace records inode deaths (`ext4_free_inode`); else a file whose every data
    /// block the kernel freed starts anew at its next discard.
    pub traced_inode_frees: bool,
    /// The trace records mballoc's searches and new preallocations, so a request served at
    /// exactly its length with no preallocation can be replayed as complete.
    pub traced_searches: bool,
    /// Small files carve from the locality chunk of the traced CPU.
    pub locality_by_cpu: bool,
    /// A reused inode number starts a new file.
    pub new_file_on_reuse: bool,
    /// Stream goals as many as the traced machine had CPUs (see `as_traced`).
    pub traced_stream_goals: bool,
    /// A metadata block the kernel asked for right after one of its metadata blocks (a
    /// directory's next block) is asked for right after our copy of that block; metadata it
    /// asked for at another place of its layout (a flex group's start) is asked for where
    /// our copy of the first metadata asked for there went.
    pub traced_metadata_goals: bool,
}

/// Names of the rules `--without` can switch off, with what each does.
pub const RULES: [(&str, &str); 6] = [
    (
        "commits",
        "commit at jbd2's commits (else every 4,096 requests)",
    ),
    ("reuse", "a reused inode number is a new file"),
    (
        "cpu",
        "small files carve from the traced CPU's locality chunk",
    ),
    (
        "complete",
        "requests the kernel did not round up are not rounded up",
    ),
    ("streams", "stream goals for the traced CPU count"),
    (
        "metagoals",
        "a metadata block's goal follows the kernel's, through our copy of its metadata",
    ),
];

/// The request count between commits when the `commits` rule is off (the replay's rule
/// before commits followed the kernel's).
pub const LEGACY_COMMIT_REQUESTS: u64 = 4096;

impl Rules {
    /// Switches off the named rules (`commits`, `reuse`, `cpu`, `complete`, `streams`,
    /// `metagoals`).
    pub fn without(mut self, names: &[String]) -> Result<Rules> {
        for name in names {
            match name.as_str() {
                "commits" => self.commit = CommitRule::Requests(LEGACY_COMMIT_REQUESTS),
                "reuse" => self.new_file_on_reuse = false,
                "cpu" => self.locality_by_cpu = false,
                "complete" => self.traced_searches = false,
                "streams" => self.traced_stream_goals = false,
                "metagoals" => self.traced_metadata_goals = false,
                other => bail!(
                    "--without: unknown rule '{other}'; rules: {}",
                    RULES.map(|r| r.0).join(", ")
                ),
            }
        }
        Ok(self)
    }
}

impl Rules {
    /// The rules a trace's events allow.
    pub fn for_events<'e>(events: impl Iterator<Item = &'e Traced>) -> Rules {
        let (mut commits, mut inode_frees, mut searches) = (false, false, false);
        for t in events {
            match t.event {
                Event::Commit => commits = true,
                Event::InodeFree { .. } => inode_frees = true,
                Event::Search { .. } => searches = true,
                _ => {}
            }
        }
        Rules {
            commit: if commits {
                CommitRule::Traced
            } else {
                CommitRule::Interval(DEFAULT_COMMIT_NS)
            },
            traced_inode_frees: inode_frees,
            traced_searches: searches,
            locality_by_cpu: true,
            new_file_on_reuse: true,
            traced_stream_goals: true,
            traced_metadata_goals: true,
        }
    }
}
