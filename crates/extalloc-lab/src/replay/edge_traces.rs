//! Synthetic traces at the device's edges, written as tracefs text and replayed through
//! [`super::run`] (parse, geometry, engine): files that end at the device's last block,
//! devices the trace fills, single-group devices with a short last group, goals equal to
//! the block count (`pleft + 1` of a file ending at the last block) and goals far outside
//! (up to `u64::MAX`, the `%llu` of `ext4_request_blocks`), journal commits with `%d`
//! transaction numbers past 2^31 (negative). ext4 clamps such a goal to the first data
//! block (`ext4_mb_initialize_context`), so each trace must replay without refusal, and
//! every policy must end with exactly the kernel's free blocks (the replay allocates the
//! same logical blocks the kernel did).
//!
//! Data structures: `Edge`, one synthetic trace (geometry, files laid back to back up to
//! the last block, each request's goal, an append, a free, a commit). Invariant: the
//! kernel's decisions it writes never overlap and lie inside the device, each within one
//! group, and `Edge::used_blocks` is what they leave allocated. Lock order: none.

use super::{run, ReplayOptions};
use proptest::prelude::*;
use std::fmt::Write as _;

/// Where a request's goal points.
#[derive(Debug, Clone, Copy)]
enum Goal {
    /// The block after the file's previous piece, or the piece's own start: what the
    /// kernel usually asks.
    Inside,
    /// The device's block count: `pleft + 1` when the file before ends at the last block.
    BlockCount,
    /// Past the device by this much (saturating at `u64::MAX`).
    Past(u64),
}

/// One synthetic trace.
#[derive(Debug, Clone)]
struct Edge {
    block_size: u32,
    group_blocks: u64,
    blocks: u64,
    /// File lengths in blocks, laid out back to back so the last ends at the last block.
    files: Vec<u64>,
    /// The first block of the first file (the first data block: the files fill the
    /// device).
    first: u64,
    /// ext4's first data block: 1 with 1 KiB blocks, else 0.
    first_data: u64,
    goals: Vec<Goal>,
    /// Blocks appended to the last file after it reached the device's end (its goal is
    /// the block count); placed at the first data block, where ext4's clamp puts the goal.
    /// On a full device the request is traced with no decision (ENOSPC).
    append: u64,
    /// Free the first file before the end (its blocks go back, then a commit).
    free_first: bool,
    /// The transaction number of the trace's jbd2 commit, as `%d` prints it.
    transaction: i32,
}

impl Edge {
    fn full(&self) -> bool {
        self.first == self.first_data
    }

    fn used_blocks(&self) -> u64 {
        let files: u64 = self.files.iter().sum();
        let freed = if self.free_first { self.files[0] } else { 0 };
        files - freed + if self.full() { 0 } else { self.append }
    }

    /// The trace's text: a capture header, then requests, decisions, a free and a commit.
    fn text(&self) -> String {
        let mut out = format!(
            "# extalloc capture: dev 7,1; block_size {}; blocks {}; group_blocks {}; first_block 0; cpus 1; command: edge\n",
            self.block_size, self.blocks, self.group_blocks
        );
        let mut clock = 0u64;
        let mut line = |out: &mut String, event: &str, fields: String| {
            clock += 1;
            writeln!(
                out,
                "edge-100 [000] ..... {}.{:06}: {event}: dev 7,1 {fields}",
                clock / 1_000_000,
                clock % 1_000_000
            )
            .unwrap();
        };
        let mut start = self.first;
        for (i, (&len, &goal)) in self.files.iter().zip(&self.goals).enumerate() {
            let ino = 12 + i as u64;
            self.file_pieces(ino, start, len, goal, &mut |e, f| line(&mut out, e, f));
            start += len;
        }
        let last = (
            11 + self.files.len() as u64,
            *self.files.last().expect("a file"),
        );
        let fields = |block: u64| {
            format!(
                "ino {} flags HINT_DATA len {} block {block} lblk {} goal {} lleft {} lright 0 pleft {} pright 0",
                last.0, self.append, last.1, self.blocks, last.1 - 1, self.blocks - 1
            )
        };
        if self.append > 0 {
            let at = self.first_data;
            let request = fields(at).replace(&format!(" block {at}"), "");
            line(&mut out, "ext4_request_blocks", request);
            if !self.full() {
                line(&mut out, "ext4_allocate_blocks", fields(at));
            }
        }
        if self.free_first {
            line(
                &mut out,
                "ext4_free_blocks",
                format!(
                    "ino 12 mode 0100644 block {} count {} flags ",
                    self.first, self.files[0]
                ),
            );
        }
        let tid = self.transaction;
        line(
            &mut out,
            "jbd2_end_commit",
            format!("transaction {tid} sync 0 head {}", tid.wrapping_sub(2)),
        );
        out
    }

    /// A file's requests and decisions, a piece per group it crosses (ext4 allocates
    /// within one group).
    fn file_pieces(
        &self,
        ino: u64,
        start: u64,
        len: u64,
        goal: Goal,
        line: &mut dyn FnMut(&'static str, String),
    ) {
        let mut at = start;
        while at < start + len {
            let group_end = (at / self.group_blocks + 1) * self.group_blocks;
            let piece = group_end.min(start + len) - at;
            let lblk = at - start;
            let asked = match (goal, lblk) {
                (Goal::Inside, _) | (_, 1..) => at,
                (Goal::BlockCount, 0) => self.blocks,
                (Goal::Past(by), 0) => self.blocks.saturating_add(by),
            };
            let fields = format!(
                "ino {ino} flags HINT_DATA len {piece} lblk {lblk} goal {asked} lleft 0 lright 0 pleft 0 pright 0"
            );
            line("ext4_request_blocks", fields.clone());
            let decided = fields.replacen(" lblk", &format!(" block {at} lblk"), 1);
            line("ext4_allocate_blocks", decided);
            at += piece;
        }
    }
}

fn goal() -> impl Strategy<Value = Goal> {
    prop_oneof![
        Just(Goal::Inside),
        Just(Goal::BlockCount),
        prop::sample::select(vec![1u64, 4096, 1 << 32, u64::MAX]).prop_map(Goal::Past),
    ]
}

/// Devices of one to three groups (the last one short or whole), filled by the files or
/// with room before them.
fn edge() -> impl Strategy<Value = Edge> {
    (
        prop::sample::select(vec![1024u32, 4096]),
        prop::sample::select(vec![64u64, 512, 32768]),
        1u64..=3,
        0.0f64..1.0,
        prop::collection::vec(1u64..1000, 1..6),
        any::<bool>(),
        0.0f64..0.9,
        prop::collection::vec(goal(), 6),
        (0u64..64, any::<bool>(), any::<i32>()),
    )
        .prop_map(
            |(
                block_size,
                gb,
                groups,
                tail,
                weights,
                full,
                room,
                goals,
                (append, free_first, tid),
            )| {
                let blocks = ((groups - 1) * gb + (tail * gb as f64).ceil() as u64).max(16);
                let first_data = u64::from(block_size == 1024);
                let append = append.min(blocks / 4);
                // Room before the files, at least the append's.
                let first = if full {
                    first_data
                } else {
                    ((room * blocks as f64) as u64).clamp(first_data + append.max(1), blocks / 2)
                };
                let span = blocks - first;
                let n = (weights.len() as u64).min(span) as usize;
                let total: u64 = weights[..n].iter().sum();
                let mut files: Vec<u64> = weights[..n]
                    .iter()
                    .map(|w| (w * span / total).max(1))
                    .collect();
                let used: u64 = files.iter().sum();
                // The rounding goes to the last file, so it ends at the last block.
                let last = files.last_mut().expect("a file");
                *last = (*last + span)
                    .checked_sub(used)
                    .filter(|&l| l > 0)
                    .unwrap_or(1);
                let fits = files.iter().sum::<u64>() == span;
                Edge {
                    block_size,
                    group_blocks: gb,
                    blocks,
                    files: if fits { files } else { vec![span] },
                    first,
                    first_data,
                    goals,
                    append: if full {
                        append
                    } else {
                        append.min(first - first_data)
                    },
                    free_first,
                    transaction: tid,
                }
            },
        )
}

static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn edge_traces_replay_without_refusal(edge in edge()) {
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("extalloc-edge-{}-{case}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("edge.trace.txt");
        let text = edge.text();
        std::fs::write(&path, &text).unwrap();
        let opts = ReplayOptions {
            trace: &path,
            dev: None,
            blocks: None,
            group_blocks: None,
            block_size: None,
            policies: vec!["ext4-base".into(), "extalloc".into()],
            limit: None,
            without: Vec::new(),
            dump_files: None,
        };
        let result = run(&opts);
        std::fs::remove_dir_all(&dir).unwrap();
        let (report, odd, trace) = result.map_err(|e| {
            TestCaseError::fail(format!("refused: {e:#}\n{text}"))
        })?;
        prop_assert_eq!(trace.malformed, 0, "{:?}\n{}", trace.malformed_examples, text);
        prop_assert_eq!(report.device.blocks, edge.blocks);
        prop_assert_eq!(odd.decisions_without_request, 0);
        let names: Vec<&str> = report.runs.iter().map(|r| r.policy.as_str()).collect();
        prop_assert_eq!(names, ["ext4-base", "extalloc", "kernel"]);
        let free = edge.blocks - edge.used_blocks();
        for r in &report.runs {
            let fs = r.free_space.as_ref().expect("replays measure free space");
            prop_assert_eq!(fs.free_blocks, free, "{}: {}", r.policy, text);
        }
    }
}
