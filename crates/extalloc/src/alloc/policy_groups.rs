//! Which design each policy key's values reproduce: the knobs of the design extalloc runs,
//! and the keys whose other values exist only so the lab can run ext4's designs beside it
//! (its ablations). A reader of the allocator meets `policy.zombie_groups` or
//! `policy.stream_goal_locked` in hot code; [`Policy::key_group`] says such a branch
//! reproduces ext4 before its 2025 series and is never taken by default.
//!
//! Data structures: [`KeyGroup`]; [`Policy::value`], a key's value as a spec writes it
//! (the inverse of the key's setter in `policy.rs`).
//!
//! Invariant: the groups are derived from the presets, never listed by hand: a key is in
//! [`KeyGroup::Ext4Base`] when `ext4-base` and `ext4-2025` differ on it, in
//! [`KeyGroup::Ext4_2025`] when `ext4-2025` and `extalloc` do, else a [`KeyGroup::Tuning`]
//! knob; and `Policy::parse("p:k=" + p.value(k))` gives back `p` for every key and preset
//! (tested).
//!
//! Lock order: none (plain data).

use super::policy::{FreeList, Policy, StreamStart};

/// What a policy key's values are for (`extalloc policies` shows each key's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyGroup {
    /// A knob of the design extalloc runs: its values tune it; no preset's history.
    Tuning,
    /// Where extalloc departs from ext4 as of its 2025 scalability series (per-group free
    /// lists, first-free hints, size classes, append windows, scan depth): the `ext4-2025`
    /// preset's value reproduces ext4 today.
    Ext4_2025,
    /// What the 2025 series changed in ext4 (locks, lists, stream goals, the zombie-group
    /// bug): the `ext4-base` preset's value reproduces ext4 before it.
    Ext4Base,
}

impl KeyGroup {
    /// A short name (`tuning`, `ext4-2025`, `ext4-base`).
    pub fn name(self) -> &'static str {
        match self {
            KeyGroup::Tuning => "tuning",
            KeyGroup::Ext4_2025 => "ext4-2025",
            KeyGroup::Ext4Base => "ext4-base",
        }
    }
}

impl Policy {
    /// Key `key`'s value in this policy as a spec writes it; `None` for a key that is not
    /// one of [`Policy::keys`].
    pub fn value(&self, key: &str) -> Option<String> {
        let b = |v: bool| v.to_string();
        let pick = |v: bool, yes: &str, no: &str| if v { yes } else { no }.to_string();
        Some(match key {
            "optimize_scan" => b(self.optimize_scan),
            "group_index" => pick(self.ordered_index, "ordered", "list"),
            "trylock" => b(self.trylock),
            "stream_goals" => self.stream_goals.to_string(),
            "stream_goal_locked" => b(self.stream_goal_locked),
            "stream_start" => stream_start(self.stream_start).into(),
            "stream_threshold_kib" => self.stream_threshold_kib.to_string(),
            "free_list" => match self.free_list {
                FreeList::Global => "global".into(),
                FreeList::PerGroup => "per-group".into(),
            },
            "merge_before_insert" => b(self.merge_before_insert),
            "atomic_pending" => b(self.atomic_pending),
            "zombie_groups" => b(self.zombie_groups),
            "first_free_hint" => b(self.first_free_hint),
            "max_scan_extents" => self.max_scan_extents.to_string(),
            "min_scan_extents" => self.min_scan_extents.to_string(),
            "order2_min_order" => self.order2_min_order.to_string(),
            "best_avail_trim_orders" => self.best_avail_trim_orders.to_string(),
            "prealloc_index" => pick(self.prealloc_tree, "tree", "list"),
            "locality_prealloc" => b(self.locality_prealloc),
            "locality_prealloc_blocks" => self.locality_prealloc_blocks.to_string(),
            "locality_leftovers" => self.locality_leftovers.to_string(),
            "normalise_holes" => pick(self.normalise_by_size, "file-size", "request"),
            "size_classes" => b(self.size_classes),
            "append_window_kib" => self.append_window_kib.to_string(),
            "class_by" => pick(self.class_by_window, "window", "request"),
            "prefetch_groups" => self.prefetch_groups.to_string(),
            "bitmap_memory_mib" => self.bitmap_memory_mib.to_string(),
            "slow_pass_index" => b(self.slow_pass_index),
            _ => return None,
        })
    }

    /// Which design key `key`'s values reproduce (see [`KeyGroup`]); `None` for a key
    /// that is not one of [`Policy::keys`].
    pub fn key_group(key: &str) -> Option<KeyGroup> {
        let preset = |name| Policy::preset(name).expect("a preset").value(key);
        let (base, today, ours) = (
            preset("ext4-base")?,
            preset("ext4-2025")?,
            preset("extalloc")?,
        );
        Some(if base != today {
            KeyGroup::Ext4Base
        } else if today != ours {
            KeyGroup::Ext4_2025
        } else {
            KeyGroup::Tuning
        })
    }

    /// The keys on which this policy runs an older ext4 design than the default's: those
    /// of [`KeyGroup::Ext4Base`] or [`KeyGroup::Ext4_2025`] set to the value of the preset
    /// that reproduces it. Empty for the default policy.
    pub fn emulations(&self) -> Vec<&'static str> {
        let ours = Policy::default();
        Policy::keys()
            .map(|(k, _)| k)
            .filter(|&k| {
                let older = match Policy::key_group(k) {
                    Some(KeyGroup::Ext4Base) => Policy::preset("ext4-base"),
                    Some(KeyGroup::Ext4_2025) => Policy::preset("ext4-2025"),
                    _ => return false,
                };
                let mine = self.value(k);
                mine != ours.value(k) && mine == older.expect("a preset").value(k)
            })
            .collect()
    }
}

/// `stream_start`'s spec word.
fn stream_start(s: StreamStart) -> &'static str {
    match s {
        StreamStart::Spread => "spread",
        StreamStart::Front => "front",
        StreamStart::Packed => "packed",
        StreamStart::Goals => "goals",
        StreamStart::Interleaved => "interleaved",
        StreamStart::Active => "active",
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::PRESETS;
    use super::*;

    #[test]
    fn every_value_parses_back_to_the_same_policy() {
        for preset in PRESETS {
            let p = Policy::preset(preset).unwrap();
            for (key, _) in Policy::keys() {
                let v = p.value(key).unwrap_or_else(|| panic!("{key}: no value"));
                let mut back = Policy::parse(&format!("{preset}:{key}={v}")).unwrap();
                back.name = p.name.clone();
                assert_eq!(back, p, "{preset}: {key}={v}");
            }
        }
        assert_eq!(Policy::default().value("bogus"), None);
        assert_eq!(Policy::key_group("bogus"), None);
    }

    #[test]
    fn the_groups_are_what_each_preset_changed() {
        let group = |g| {
            Policy::keys()
                .map(|(k, _)| k)
                .filter(|&k| Policy::key_group(k) == Some(g))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            group(KeyGroup::Ext4Base),
            [
                "group_index",
                "trylock",
                "stream_goals",
                "stream_goal_locked",
                "merge_before_insert",
                "atomic_pending",
                "zombie_groups",
                "prealloc_index"
            ]
        );
        assert_eq!(
            group(KeyGroup::Ext4_2025),
            [
                "stream_start",
                "free_list",
                "first_free_hint",
                "min_scan_extents",
                "order2_min_order",
                "size_classes",
                "append_window_kib",
                "class_by",
                "slow_pass_index"
            ]
        );
        assert!(Policy::default().emulations().is_empty());
        let base = Policy::preset("ext4-base").unwrap().emulations();
        assert_eq!(base.len(), 17, "{base:?}");
        let one = Policy::parse("extalloc:zombie_groups=true:stream_goals=7").unwrap();
        assert_eq!(one.emulations(), ["zombie_groups"]);
    }
}
