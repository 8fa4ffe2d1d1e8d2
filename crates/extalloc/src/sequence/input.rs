//! Decoding a run from bytes: the cursor, the device's shape, random valid policies and
//! the weighted events.
//!
//! Data structures: [`Input`] (the bytes and a position), [`Setup`], [`Event`], and
//! `POLICY_VALUES`: per policy key, the values a random policy picks from. Invariant: a
//! policy is `preset[:key=value]...` with every value one its key takes, so
//! [`Policy::parse`] accepts every one the fuzzer makes (no combination of valid values is
//! refused: each key is checked alone); input past its end reads as zeros until
//! [`Input::exhausted`]. Locks: none.

use crate::alloc::{Policy, PRESETS};
use crate::volume::Fallocate;

/// The bytes a run is decoded from.
pub struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Input<'a> {
        Input { bytes, at: 0 }
    }

    /// Whether every byte was read.
    pub fn exhausted(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// The next byte (zero past the end).
    pub fn u8(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | (u16::from(self.u8()) << 8)
    }

    /// The next three bytes, little-endian.
    pub fn u24(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u8()) << 16)
    }

    /// One of `options`, picked by the next byte.
    pub fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[usize::from(self.u8()) % options.len()]
    }
}

/// The values a random policy picks from, per key: every `true|false` and choice key takes
/// all of its values; number keys take their bounds and a few values between (not the
/// largest a key accepts where that only costs memory: a million stream goals).
const POLICY_VALUES: [(&str, &[&str]); 27] = [
    ("optimize_scan", &["true", "false"]),
    ("group_index", &["list", "ordered"]),
    ("trylock", &["true", "false"]),
    ("stream_goals", &["0", "1", "2", "3", "16"]),
    ("stream_goal_locked", &["true", "false"]),
    (
        "stream_start",
        &[
            "spread",
            "front",
            "packed",
            "goals",
            "interleaved",
            "active",
        ],
    ),
    ("stream_threshold_kib", &["0", "4", "64", "1024"]),
    ("free_list", &["global", "per-group"]),
    ("merge_before_insert", &["true", "false"]),
    ("atomic_pending", &["true", "false"]),
    ("zombie_groups", &["true", "false"]),
    ("first_free_hint", &["true", "false"]),
    ("max_scan_extents", &["1", "2", "10", "200"]),
    ("min_scan_extents", &["1", "10", "200", "1000"]),
    ("order2_min_order", &["0", "1", "2", "5", "20"]),
    ("best_avail_trim_orders", &["0", "1", "3", "20"]),
    ("prealloc_index", &["list", "tree"]),
    ("locality_prealloc", &["true", "false"]),
    ("locality_prealloc_blocks", &["1", "7", "64", "512", "4096"]),
    ("locality_leftovers", &["0", "1", "4", "64"]),
    ("normalise_holes", &["file-size", "request"]),
    ("size_classes", &["true", "false"]),
    ("append_window_kib", &["0", "16", "100", "8192"]),
    ("class_by", &["request", "window"]),
    ("prefetch_groups", &["0", "1", "32", "4096"]),
    ("bitmap_memory_mib", &["0", "1"]),
    ("slow_pass_index", &["true", "false"]),
];

/// The keys a random policy sets, in `Policy::keys` order (a test checks they are all).
pub fn policy_keys() -> impl Iterator<Item = &'static str> {
    POLICY_VALUES.iter().map(|(k, _)| *k)
}

/// A random valid policy: a preset, then each key set with probability one half to one of
/// its values.
pub fn random_policy(input: &mut Input) -> Policy {
    let mut spec = input.pick(&PRESETS).to_string();
    for (key, values) in POLICY_VALUES {
        let b = input.u8();
        if b & 1 == 1 {
            let value = values[usize::from(b >> 1) % values.len()];
            spec.push_str(&format!(":{key}={value}"));
        }
    }
    Policy::parse(&spec).unwrap_or_else(|e| panic!("the fuzzer made a bad policy {spec}: {e}"))
}

/// The device a run makes: its shape, the journal's size and the crash seed.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks per group.
    pub group_blocks: u64,
    /// Blocks of the device.
    pub blocks: u64,
    /// Blocks of the journal.
    pub journal_blocks: u64,
    /// Seeds the fault-injecting device's choices at a crash.
    pub seed: u64,
}

impl Setup {
    /// A small device (2 to 8 MiB, so runs fill it), 1 or 4 KiB blocks, 1 to 32 groups,
    /// a journal of 96 to 512 KiB (small ones commit and checkpoint by themselves often).
    pub fn decode(input: &mut Input) -> Setup {
        let block_size = input.pick(&[1024u32, 4096]);
        let bytes = input.pick(&[2u64 << 20, 4 << 20, 8 << 20]);
        let blocks = bytes / u64::from(block_size);
        let group_blocks = input.pick(&[256u64, 512, 1024]);
        let journal_bytes = input.pick(&[96u64 << 10, 192 << 10, 512 << 10]);
        Setup {
            block_size,
            group_blocks,
            blocks,
            journal_blocks: journal_bytes / u64::from(block_size),
            seed: u64::from(input.u16()),
        }
    }
}

/// One call (or power loss) of a run. Files are named by their rank among the files that
/// exist (modulo their count), so every event names one when there is any.
#[derive(Debug, Clone)]
pub enum Event {
    /// `create` with an attribute of the id's bytes.
    Create,
    /// `write(offset, pattern(seed, len))`.
    Write {
        /// Rank of the file.
        file: u8,
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u32,
        /// Seed of the pattern.
        seed: u8,
    },
    /// `fallocate(mode, offset, len)` (every mode, punch included).
    Fallocate {
        /// Rank of the file.
        file: u8,
        /// The mode.
        mode: Fallocate,
        /// Byte offset.
        offset: u64,
        /// Bytes (at least one).
        len: u64,
    },
    /// `truncate(size)`.
    Truncate {
        /// Rank of the file.
        file: u8,
        /// New size.
        size: u64,
    },
    /// `unlink`.
    Unlink {
        /// Rank of the file.
        file: u8,
    },
    /// `sync`.
    Sync,
    /// `sync` on a device whose next flush fails as Linux's does (the unflushed writes
    /// forgotten, the error reported once): the sync must fail, a retry must fail too (the
    /// latch), and after a power loss the volume reads as at the last commit before.
    FailedSync,
    /// `checkpoint`.
    Checkpoint,
    /// Power loss, then `Volume::open`: every unflushed write dropped (`keep` 0), or each
    /// kept with probability `keep`/8 and one torn if `tear`.
    Crash {
        /// Eighths of the unflushed writes kept.
        keep: u8,
        /// Tear one kept write.
        tear: bool,
    },
    /// The volume dropped without `close` and opened again (a killed process: unflushed
    /// writes stay in the device's cache).
    Reopen,
    /// `close`, `fsck` of the device, then `Volume::open` under a new random policy.
    CloseOpen {
        /// The policy of the open.
        policy: Policy,
    },
    /// An atomic put (`Volume::put`: made pending, written, published) of
    /// `pattern(seed, len)`, or with `replace` and a file to replace, the same written into
    /// a pending file then published in place of that file (`publish_replacing`).
    Put {
        /// Rank of the file replaced (with `replace`).
        file: u8,
        /// Bytes.
        len: u32,
        /// Seed of the pattern.
        seed: u8,
        /// Replace the file of rank `file`.
        replace: bool,
    },
    /// A call the volume must refuse with its documented error, changing nothing.
    Misuse {
        /// Which call.
        kind: u8,
        /// Rank of the file.
        file: u8,
    },
}

/// Event kinds and their weights (out of their sum).
const WEIGHTS: [(u8, u32); 12] = [
    (0, 6),  // create
    (1, 30), // write
    (2, 14), // fallocate and punch
    (3, 2),  // a large fallocate: fills the device
    (4, 8),  // truncate
    (5, 4),  // unlink
    (6, 8),  // sync
    (7, 2),  // checkpoint
    (8, 5),  // crash
    (9, 2),  // reopen, close and open
    (10, 2), // misuse
    (11, 5), // atomic put, or replace
];

/// Largest byte offset of a write or fallocate (a few hundred KiB: files stay cheap to
/// read back after every event).
const SPAN: u64 = 320 << 10;

impl Event {
    /// The next event of `input` (`None` once it is exhausted).
    pub fn decode(input: &mut Input, file_size: impl Fn(u8) -> u64) -> Option<Event> {
        if input.exhausted() {
            return None;
        }
        let total: u32 = WEIGHTS.iter().map(|w| w.1).sum();
        let mut roll = u32::from(input.u16()) % total;
        let kind = WEIGHTS
            .iter()
            .find(|(_, w)| {
                let hit = roll < *w;
                roll = roll.saturating_sub(*w);
                hit
            })
            .map_or(0, |w| w.0);
        let file = input.u8();
        Some(match kind {
            0 => Event::Create,
            1 => {
                let len = 1 + u32::from(input.u16()) % (48 << 10);
                let offset = match input.u8() % 4 {
                    0 => file_size(file),
                    1 => u64::from(input.u24()) % SPAN / 4096 * 4096,
                    _ => u64::from(input.u24()) % SPAN,
                };
                let seed = input.u8();
                Event::Write {
                    file,
                    offset,
                    len,
                    seed,
                }
            }
            2 | 3 => Event::fallocate(input, file, kind == 3),
            4 => {
                let size = file_size(file);
                let size = match input.u8() % 4 {
                    0 => 0,
                    1 => size.saturating_sub(u64::from(input.u16())),
                    2 => size + u64::from(input.u16()),
                    _ => u64::from(input.u24()) % SPAN,
                };
                Event::Truncate { file, size }
            }
            5 => Event::Unlink { file },
            6 if file % 4 == 3 => Event::FailedSync,
            6 => Event::Sync,
            7 => Event::Checkpoint,
            8 => {
                let b = input.u8();
                Event::Crash {
                    keep: if b & 1 == 0 { 0 } else { (b >> 1) % 9 },
                    tear: b & 0x80 != 0,
                }
            }
            9 if file.is_multiple_of(2) => Event::Reopen,
            9 => Event::CloseOpen {
                policy: random_policy(input),
            },
            10 => Event::Misuse {
                kind: input.u8(),
                file,
            },
            _ => {
                let b = input.u8();
                Event::Put {
                    file,
                    // Up to 256 KiB: many chunks, so small journals commit inside a put.
                    len: u32::from(input.u16()) * 4 + u32::from(b & 3),
                    seed: input.u8(),
                    replace: b & 0x80 != 0,
                }
            }
        })
    }

    fn fallocate(input: &mut Input, file: u8, fill: bool) -> Event {
        let m = input.u8();
        let mode = match m % 5 {
            0 => Fallocate::Allocate,
            1 => Fallocate::KeepSize,
            2 | 3 => Fallocate::PunchHole,
            _ => Fallocate::ZeroRange {
                keep_size: m & 0x80 != 0,
            },
        };
        if fill {
            // Blocks past the end (the size kept: reading back stays cheap), up to the whole
            // device: no space, most of the time.
            let mode = Fallocate::KeepSize;
            let offset = (SPAN + u64::from(input.u16()) * 4096) / 4096 * 4096;
            let len = 1 + u64::from(input.u24()) * 4;
            return Event::Fallocate {
                file,
                mode,
                offset,
                len,
            };
        }
        let offset = u64::from(input.u24()) % SPAN;
        let offset = if m & 0x40 != 0 {
            offset / 4096 * 4096
        } else {
            offset
        };
        let len = 1 + u64::from(input.u24()) % (128 << 10);
        Event::Fallocate {
            file,
            mode,
            offset,
            len,
        }
    }
}
