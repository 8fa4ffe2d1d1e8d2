//! Allocation policies: every knob of the allocator, and the presets that reproduce history.
//!
//! - `ext4-base`: ext4's multi-block allocator before the 2025 scalability series: blocking
//!   group locks in every pass, one stream goal under a global lock that the free list also
//!   takes, list-based group indexes with "choose group" semantics, freed extents inserted
//!   before merging (up to three global-lock round trips), zombie groups left in the
//!   average-fragment lists, a pending-free counter kept under the global lock.
//! - `ext4-2025`: with the series applied: try-lock skipping busy groups in passes 1-4, many
//!   stream goals updated without a lock, merge-before-insert, an atomic pending counter,
//!   ordered (lock-free) group indexes traversed right-then-left from the goal, no zombies,
//!   and (since 2023) file preallocations in a tree.
//! - `extalloc` (the default): ext4-2025 plus per-group deferred-free sets found through a
//!   lock-free dirty-group set (no global lock on the free path at all) and first-free-per-order
//!   hints so in-group searches never rescan a known-full prefix, btrfs's size classes
//!   (with a lifetime hint as second key), and active groups (streams fill the first groups
//!   with room, one group per stream goal, instead of goals spread over the device).
//!
//! A spec string modifies a preset: `ext4-2025:optimize_scan=false:stream_goals=1`.
//!
//! The design extalloc runs is the `extalloc` preset. Of the 27 keys, 17 have other values
//! only to reproduce ext4's designs in the lab (8 for ext4 before the 2025 series, 9 for
//! ext4 as of it); the rest are tuning knobs. `policy_groups.rs` derives which is which
//! from the presets ([`Policy::key_group`], [`Policy::emulations`]).
//!
//! # Data structures
//!
//! [`Policy`], one field per knob, and `KEYS`: per key a spec may set, the values it takes
//! and the function that parses and stores them.
//!
//! # Invariant
//!
//! Every key of `KEYS` sets exactly one field, and a value out of its range is refused with
//! what the key takes; a policy is plain data, fixed once an allocator is built with it.
//!
//! # Lock order
//!
//! None: plain data.

use crate::error::{Error, Result};

/// Where freed extents wait for the commit that makes them reusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum FreeList {
    /// Per-group sets, plus one global list under the global lock (ext4's `s_md_lock`).
    Global,
    /// Per-group sets only; a lock-free bitset of groups with pending frees.
    PerGroup,
}

/// Where the stream goals start (policy key `stream_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum StreamStart {
    /// Spread evenly over the device: concurrent streams start far apart, and data lands
    /// all over a lightly used device.
    Spread,
    /// All at group 0, as ext4's: data packs from the front and free space stays whole
    /// behind it, but streams start on top of each other.
    Front,
    /// Goal `i` at group `i`: streams start apart, in the first groups, so free space stays
    /// whole behind them.
    Packed,
    /// Goal `k` of every size class at `k * groups / goals`, the classes side by side
    /// (class `c` one group further): a class's concurrent streams start far apart, while
    /// the classes together touch as few places of the device as one class would.
    Goals,
    /// Goal `k` of every size class at `k * groups / slots`, the classes side by side
    /// (class `c` one group further): a class's goals are as far apart as with `spread`
    /// (racing streams of one class get as much room before they meet), but the classes
    /// share each goal's place instead of each taking a third of the device, so the
    /// goals cover its first third and free space stays whole behind them. Without size
    /// classes it is `spread`. Not a preset's: a file whose first window lands far into
    /// it finds no room to its left (random-fill 1.00 -> 548 extents per file).
    Interleaved,
    /// Active groups: the goals start unplaced; a stream takes a best fit in its goal's
    /// group, else in the first group from the device's start that may hold its request
    /// and that no other goal holds. The groups being filled at once are the goals' (one
    /// per concurrent stream), at the front of the device, and holes left behind are
    /// refilled before untouched space is cut into (`docs/allocator.md`, "Active groups").
    Active,
}

/// Every knob the allocator has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Policy {
    /// The spec this policy was parsed from (or the preset name).
    pub name: String,
    /// Use the group indexes to pick groups in passes 1-3 (otherwise scan groups linearly).
    pub optimize_scan: bool,
    /// Ordered lock-free indexes (`true`) or pre-2025 locked lists with choose semantics.
    pub ordered_index: bool,
    /// Skip groups whose lock is held in passes 1-4.
    pub trylock: bool,
    /// Number of stream goals; 0 = `min(cpus, groups / 4)`, at least 1.
    pub stream_goals: u32,
    /// Guard the stream goal with the global lock (shared with the free list).
    pub stream_goal_locked: bool,
    /// Where the stream goals start.
    pub stream_start: StreamStart,
    /// Files smaller than this (KiB) are small: their data goes to locality preallocations,
    /// and their requests are not stream allocations.
    pub stream_threshold_kib: u64,
    /// Where deferred frees wait.
    pub free_list: FreeList,
    /// Merge a freed extent with its neighbours before inserting it (one critical section).
    pub merge_before_insert: bool,
    /// Keep the pending-free counter in an atomic (otherwise under the global lock).
    pub atomic_pending: bool,
    /// Leave groups with no free blocks in the average-fragment index (pre-2025 bug).
    pub zombie_groups: bool,
    /// Keep first-free offsets per order so in-group searches skip known-full prefixes.
    pub first_free_hint: bool,
    /// Most free extents examined in one group by passes 2-5.
    pub max_scan_extents: u32,
    /// Free extents examined before settling for a fitting one.
    pub min_scan_extents: u32,
    /// Pass 1 serves power-of-two requests of at least 2^this blocks.
    pub order2_min_order: u32,
    /// Pass 3 trims a request by at most this many orders.
    pub best_avail_trim_orders: u32,
    /// File preallocations in an ordered tree (`true`) or ext4's old capped list.
    pub prealloc_tree: bool,
    /// Small files carve their blocks from a per-shard locality preallocation.
    pub locality_prealloc: bool,
    /// Size of one locality preallocation, in blocks.
    pub locality_prealloc_blocks: u64,
    /// Ends of retired locality chunks kept per shard for smaller files (0: released as
    /// holes when a file does not fit).
    pub locality_leftovers: u32,
    /// A write into a hole is normalised by the file's size, as ext4 does with i_size
    /// (`true`, every preset), or by the request's own end (`false`: small windows).
    pub normalise_by_size: bool,
    /// Tag groups with the size class (and lifetime hint) of their first allocation and
    /// prefer matching groups.
    pub size_classes: bool,
    /// A file data request's size class is that of its normalised window (`true`: what is
    /// actually allocated), or of the caller's request (`false`).
    pub class_by_window: bool,
    /// The largest window, in KiB, for a sequential append (a request right after the
    /// file's last mapped block) without a size hint: ext4 caps every window at 8 MiB
    /// (8192); 0 lets it grow with the file up to a group, as XFS's speculative
    /// preallocation doubles with the file, so appenders that interleave keep a few large
    /// extents.
    pub append_window_kib: u64,
    /// Lazily loaded devices: groups a scan reads ahead when it reaches an unloaded group
    /// (0 = no read-ahead).
    pub prefetch_groups: u32,
    /// Lazily loaded devices: memory for loaded bitmaps (MiB) above which a checkpoint drops
    /// idle ones; 0 = no limit.
    pub bitmap_memory_mib: u64,
    /// Passes 4 and 5 walk indexes as well (groups by free-count order; by largest free
    /// order, largest first) instead of every group; needs ordered indexes.
    pub slow_pass_index: bool,
}

/// Names of the presets, in the order the lab shows them.
pub const PRESETS: [&str; 3] = ["ext4-base", "ext4-2025", "extalloc"];

/// How a key's value is parsed and stored: `None` when the value is not one it takes.
type Setter = fn(&mut Policy, &str) -> Option<()>;

/// Keys a spec may set, in the order they are listed: what each takes, and how it is set.
const KEYS: [(&str, &str, Setter); 27] = [
    ("optimize_scan", "true|false", |p, v| {
        boolean(v).map(|b| p.optimize_scan = b)
    }),
    ("group_index", "list|ordered", |p, v| {
        choice(v, &[("list", false), ("ordered", true)]).map(|b| p.ordered_index = b)
    }),
    ("trylock", "true|false", |p, v| {
        boolean(v).map(|b| p.trylock = b)
    }),
    (
        "stream_goals",
        "a count, 0 = min(cpus, groups/4)",
        |p, v| number(v, 0, 1 << 20).map(|n| p.stream_goals = n as u32),
    ),
    ("stream_goal_locked", "true|false", |p, v| {
        boolean(v).map(|b| p.stream_goal_locked = b)
    }),
    (
        "stream_start",
        "spread|front|packed|goals|interleaved|active",
        |p, v| {
            let starts = [
                ("spread", StreamStart::Spread),
                ("front", StreamStart::Front),
                ("packed", StreamStart::Packed),
                ("goals", StreamStart::Goals),
                ("interleaved", StreamStart::Interleaved),
                ("active", StreamStart::Active),
            ];
            choice(v, &starts).map(|s| p.stream_start = s)
        },
    ),
    ("stream_threshold_kib", "a size in KiB", |p, v| {
        number(v, 0, 1 << 40).map(|n| p.stream_threshold_kib = n)
    }),
    ("free_list", "global|per-group", |p, v| {
        let lists = [
            ("global", FreeList::Global),
            ("per-group", FreeList::PerGroup),
        ];
        choice(v, &lists).map(|l| p.free_list = l)
    }),
    ("merge_before_insert", "true|false", |p, v| {
        boolean(v).map(|b| p.merge_before_insert = b)
    }),
    ("atomic_pending", "true|false", |p, v| {
        boolean(v).map(|b| p.atomic_pending = b)
    }),
    ("zombie_groups", "true|false", |p, v| {
        boolean(v).map(|b| p.zombie_groups = b)
    }),
    ("first_free_hint", "true|false", |p, v| {
        boolean(v).map(|b| p.first_free_hint = b)
    }),
    ("max_scan_extents", "a count >= 1", |p, v| {
        number(v, 1, u32::MAX.into()).map(|n| p.max_scan_extents = n as u32)
    }),
    ("min_scan_extents", "a count >= 1", |p, v| {
        number(v, 1, u32::MAX.into()).map(|n| p.min_scan_extents = n as u32)
    }),
    ("order2_min_order", "an order 0..=20", |p, v| {
        number(v, 0, 20).map(|n| p.order2_min_order = n as u32)
    }),
    ("best_avail_trim_orders", "an order count 0..=20", |p, v| {
        number(v, 0, 20).map(|n| p.best_avail_trim_orders = n as u32)
    }),
    ("prealloc_index", "list|tree", |p, v| {
        choice(v, &[("list", false), ("tree", true)]).map(|b| p.prealloc_tree = b)
    }),
    ("locality_prealloc", "true|false", |p, v| {
        boolean(v).map(|b| p.locality_prealloc = b)
    }),
    (
        "locality_prealloc_blocks",
        "a block count 1..=1048576",
        |p, v| number(v, 1, 1 << 20).map(|n| p.locality_prealloc_blocks = n),
    ),
    (
        "locality_leftovers",
        "a count 0..=64, 0 = release them",
        |p, v| number(v, 0, 64).map(|n| p.locality_leftovers = n as u32),
    ),
    ("normalise_holes", "file-size|request", |p, v| {
        choice(v, &[("file-size", true), ("request", false)]).map(|b| p.normalise_by_size = b)
    }),
    ("size_classes", "true|false", |p, v| {
        boolean(v).map(|b| p.size_classes = b)
    }),
    (
        "append_window_kib",
        "a size in KiB >= 16, 0 = a group",
        |p, v| {
            let n = number(v, 0, 1 << 40).filter(|&n| n == 0 || n >= 16);
            n.map(|n| p.append_window_kib = n)
        },
    ),
    ("class_by", "request|window", |p, v| {
        choice(v, &[("window", true), ("request", false)]).map(|b| p.class_by_window = b)
    }),
    (
        "prefetch_groups",
        "a count 0..=4096, 0 = no read-ahead",
        |p, v| number(v, 0, 4096).map(|n| p.prefetch_groups = n as u32),
    ),
    (
        "bitmap_memory_mib",
        "MiB of loaded bitmaps kept, 0 = no limit",
        |p, v| number(v, 0, 1 << 40).map(|n| p.bitmap_memory_mib = n),
    ),
    ("slow_pass_index", "true|false", |p, v| {
        boolean(v).map(|b| p.slow_pass_index = b)
    }),
];

/// A boolean value: `true`, `1`, `on` or `false`, `0`, `off`.
fn boolean(value: &str) -> Option<bool> {
    match value {
        "true" | "1" | "on" => Some(true),
        "false" | "0" | "off" => Some(false),
        _ => None,
    }
}

/// A whole number from `min` to `max`.
fn number(value: &str, min: u64, max: u64) -> Option<u64> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
}

/// The value of the option named `value`.
fn choice<T: Copy>(value: &str, options: &[(&str, T)]) -> Option<T> {
    options
        .iter()
        .find(|(name, _)| *name == value)
        .map(|&(_, t)| t)
}

impl Default for Policy {
    fn default() -> Self {
        Policy::preset("extalloc").expect("extalloc is a preset")
    }
}

impl Policy {
    /// One of [`PRESETS`].
    pub fn preset(name: &str) -> Result<Self> {
        let ext4_2025 = Self::ext4_2025();
        match name {
            "ext4-base" => Ok(Policy {
                name: name.into(),
                ordered_index: false,
                trylock: false,
                stream_goals: 1,
                stream_goal_locked: true,
                merge_before_insert: false,
                atomic_pending: false,
                zombie_groups: true,
                prealloc_tree: false,
                ..ext4_2025
            }),
            "ext4-2025" => Ok(ext4_2025),
            "extalloc" => Ok(Policy {
                name: name.into(),
                free_list: FreeList::PerGroup,
                first_free_hint: true,
                size_classes: true,
                // A 1-block write normalised to an 8 MiB window allocates 8 MiB: its class
                // is the window's (docs/preallocation.md has the measurements).
                class_by_window: true,
                // Appends' windows grow with the file up to a group (docs/preallocation.md).
                append_window_kib: 0,
                // Look through as many free extents as ext4's upper bound for an exact fit
                // before splitting a larger one: 11 % fewer free extents on the tree-copy
                // trace, no throughput lost (docs/allocator.md).
                min_scan_extents: 200,
                // Pass 1 only for windows of 8 MiB and more (ext4's largest): it takes the
                // first aligned chunk, wherever it splits a longer run (a piece left on each
                // side), where pass 2 takes the best fit and refills holes. On the aging
                // profile at 80 % free extents fall 1,060-1,099 -> 779-824 and fresh copies'
                // extents per file 1.37-1.92 -> 1.19-1.22; the lab's throughput is unchanged
                // (docs/results.md, the aging section).
                order2_min_order: 11,
                slow_pass_index: true,
                // Active groups: as many groups filled at once as there are goals, the
                // first ones with room. On the replayed traces the largest free extent
                // grows (mixed-lifetimes 1,218 -> 2,563 MiB, the kernel 2,080;
                // docs/allocator.md, "Active groups"; docs/results.md has the scaling).
                stream_start: StreamStart::Active,
                ..ext4_2025
            }),
            _ => Err(Error::UnknownPreset {
                name: name.into(),
                valid: PRESETS.join(", "),
            }),
        }
    }

    /// The `ext4-2025` preset: ext4 with the 2025 scalability series, the base the other
    /// presets change.
    fn ext4_2025() -> Self {
        Policy {
            name: "ext4-2025".into(),
            optimize_scan: true,
            ordered_index: true,
            trylock: true,
            stream_goals: 0,
            stream_goal_locked: false,
            stream_start: StreamStart::Spread,
            stream_threshold_kib: 64,
            free_list: FreeList::Global,
            merge_before_insert: true,
            atomic_pending: true,
            zombie_groups: false,
            first_free_hint: false,
            max_scan_extents: 200,
            min_scan_extents: 10,
            order2_min_order: 2,
            best_avail_trim_orders: 3,
            prealloc_tree: true,
            locality_prealloc: true,
            locality_prealloc_blocks: 512,
            locality_leftovers: 0,
            normalise_by_size: true,
            size_classes: false,
            class_by_window: false,
            append_window_kib: 8192,
            // ext4's default prefetch distance (s_mb_prefetch) on a device without flex_bg.
            prefetch_groups: 32,
            bitmap_memory_mib: 0,
            // ext4 walks every group in its last two passes.
            slow_pass_index: false,
        }
    }

    /// Parses `preset[:key=value]...`.
    pub fn parse(spec: &str) -> Result<Self> {
        let spec = spec.trim();
        let mut parts = spec.split(':');
        let mut policy = Policy::preset(parts.next().unwrap_or(""))?;
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| Error::InvalidPolicyValue {
                    key: part.into(),
                    value: String::new(),
                    expected: "key=value".into(),
                })?;
            policy.set(key.trim(), value.trim())?;
        }
        policy.name = spec.to_string();
        Ok(policy)
    }

    /// Parses a comma-separated list of specs.
    pub fn parse_list(list: &str) -> Result<Vec<Self>> {
        list.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Policy::parse)
            .collect()
    }

    /// Every key a spec may set, with the values it takes.
    pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
        KEYS.into_iter().map(|(key, expected, _)| (key, expected))
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        debug_assert!(
            KEYS.iter().filter(|(k, _, _)| *k == key).count() <= 1,
            "policy key {key} listed twice"
        );
        let Some(&(_, expected, set)) = KEYS.iter().find(|(k, _, _)| *k == key) else {
            return Err(Error::UnknownPolicyKey {
                key: key.into(),
                valid: Policy::keys()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        set(self, value).ok_or_else(|| Error::InvalidPolicyValue {
            key: key.into(),
            value: value.into(),
            expected: expected.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse() {
        for p in PRESETS {
            assert_eq!(Policy::parse(p).unwrap().name, p);
        }
        let p = Policy::parse("ext4-2025:optimize_scan=false:stream_goals=1").unwrap();
        assert!(!p.optimize_scan);
        assert_eq!(p.stream_goals, 1);
        assert_eq!(p.name, "ext4-2025:optimize_scan=false:stream_goals=1");
    }

    #[test]
    fn list_parses() {
        let l = Policy::parse_list("ext4-base,ext4-2025:stream_goals=1,extalloc").unwrap();
        assert_eq!(l.len(), 3);
        assert!(!l[0].trylock);
        assert_eq!(l[1].stream_goals, 1);
    }

    #[test]
    fn unknown_key_lists_valid_keys() {
        let e = Policy::parse("extalloc:bogus=1").unwrap_err();
        match &e {
            Error::UnknownPolicyKey { key, valid } => {
                assert_eq!(key, "bogus");
                assert!(valid.contains("optimize_scan"));
                assert!(valid.contains("best_avail_trim_orders"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(e.to_string().contains("valid keys"));
    }

    #[test]
    fn every_key_refuses_a_bad_value_with_what_it_takes() {
        for (key, takes) in Policy::keys() {
            match Policy::parse(&format!("extalloc:{key}=bogus")) {
                Err(Error::InvalidPolicyValue {
                    key: k, expected, ..
                }) => {
                    assert_eq!((k.as_str(), expected.as_str()), (key, takes));
                }
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn bad_values_and_presets() {
        assert!(matches!(
            Policy::parse("nope"),
            Err(Error::UnknownPreset { .. })
        ));
        assert!(matches!(
            Policy::parse("extalloc:trylock=maybe"),
            Err(Error::InvalidPolicyValue { .. })
        ));
        assert!(matches!(
            Policy::parse("extalloc:trylock"),
            Err(Error::InvalidPolicyValue { .. })
        ));
        assert!(matches!(
            Policy::parse("extalloc:order2_min_order=21"),
            Err(Error::InvalidPolicyValue { .. })
        ));
    }
}
