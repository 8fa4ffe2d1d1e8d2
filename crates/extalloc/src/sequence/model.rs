//! The trivial model the sequence fuzzer compares a volume with: each file's bytes, what a
//! crash may leave of them, and the pure effect of every call on a file's bytes.
//!
//! Data structures: [`Model`]: `current` (id -> bytes: what the volume must read now,
//! exactly), `durable` (id -> the versions the durable state may hold: one when it is
//! known exactly, two, before and after one call, when the volume committed by itself in
//! the middle of that call; `None` = no such file) and `since` (id -> every version since
//! the last commit: what unflushed writes in place may leave in a block after a power
//! loss that keeps some of them).
//!
//! Invariant: an id absent from `durable` is durably absent; `since` is empty right after
//! a commit; `durable` holds one exact version per file right after an explicit sync,
//! checkpoint or close. Locks: none (single-threaded).

use crate::volume::Fallocate;
use std::collections::BTreeMap;

/// One version of a file: its bytes, or `None` when it does not exist.
pub type Version = Option<Vec<u8>>;

/// Bounds the versions `since` holds: past this the interpreter syncs (memory).
pub const MAX_SINCE_VERSIONS: usize = 48;

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct Model {
    /// What the volume must read now.
    pub current: BTreeMap<u64, Vec<u8>>,
    /// What the durable state may hold, per id.
    pub durable: BTreeMap<u64, Vec<Version>>,
    /// Versions since the last commit, per id.
    pub since: BTreeMap<u64, Vec<Version>>,
}

impl Model {
    /// Everything is durable (an explicit sync, checkpoint or close succeeded).
    pub fn commit_all(&mut self) {
        self.durable = self
            .current
            .iter()
            .map(|(&id, b)| (id, vec![Some(b.clone())]))
            .collect();
        self.since.clear();
    }

    /// The volume committed by itself in the middle of a call on `id`, whose version was
    /// `before`: every other file is durable as it is now, `id` somewhere between the two
    /// (a prefix of the call's chunks).
    pub fn commit_inside(&mut self, id: u64, before: Version) {
        self.commit_all();
        let after = self.current.get(&id).cloned();
        if before != after {
            self.durable.insert(id, vec![before, after]);
        }
        self.durable.retain(|_, v| v.iter().any(Option::is_some));
    }

    /// A sync or checkpoint failed (no space for the volume's own table or map segments):
    /// its commit may or may not have happened, and its flush may have made writes in
    /// place durable, so every version since the last commit may be durable now.
    pub fn commit_maybe(&mut self) {
        let since = std::mem::take(&mut self.since);
        let mut ids: Vec<u64> = self.current.keys().chain(since.keys()).copied().collect();
        ids.extend(self.durable.keys());
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let mut versions = self.durable_versions(id);
            versions.extend(since.get(&id).into_iter().flatten().cloned());
            versions.push(self.current.get(&id).cloned());
            versions.dedup();
            if versions.iter().any(Option::is_some) {
                self.durable.insert(id, versions);
            }
        }
    }

    /// A call changed `id` (and nothing was committed): its new version may reach the
    /// device in part.
    pub fn touched(&mut self, id: u64) {
        let now = self.current.get(&id).cloned();
        self.since.entry(id).or_default().push(now);
    }

    /// Versions `since` holds in all.
    pub fn since_versions(&self) -> usize {
        self.since.values().map(Vec::len).sum()
    }

    /// Every id the durable state, the versions since or `extra` name.
    pub fn ids_after_crash(&self, extra: impl Iterator<Item = u64>) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .durable
            .keys()
            .chain(self.since.keys())
            .copied()
            .collect();
        ids.extend(extra);
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The versions the durable state may hold for `id` (`[None]` when durably absent).
    pub fn durable_versions(&self, id: u64) -> Vec<Version> {
        self.durable.get(&id).cloned().unwrap_or_else(|| vec![None])
    }

    /// After a crash and open, the volume's contents become the model (checked first by
    /// the caller): everything read back is durable.
    pub fn adopt(&mut self, read_back: BTreeMap<u64, Vec<u8>>) {
        self.current = read_back;
        self.commit_all();
    }
}

/// Byte `i` of a version: zero past its end or when it does not exist.
pub fn byte_of(v: &Version, i: usize) -> u8 {
    v.as_ref().and_then(|b| b.get(i).copied()).unwrap_or(0)
}

/// Checks `got` (a file read back after a crash) against the versions it may hold: its
/// size within theirs (or exactly theirs when there is one), every byte one of theirs.
/// `bytes_from` adds versions whose bytes (not size) may show. Returns why not.
pub fn matches_versions(
    got: &[u8],
    sizes_from: &[Version],
    bytes_from: &[Version],
) -> std::result::Result<(), String> {
    let sizes: Vec<usize> = sizes_from.iter().flatten().map(Vec::len).collect();
    let (lo, hi) = (
        sizes.iter().min().copied().unwrap_or(0),
        sizes.iter().max().copied().unwrap_or(0),
    );
    if sizes.is_empty() || got.len() < lo || got.len() > hi {
        return Err(format!(
            "size {} is none the durable versions allow (sizes {sizes:?})",
            got.len()
        ));
    }
    if sizes_from.len() == 1 && bytes_from.is_empty() {
        let want = sizes_from[0].as_deref().unwrap_or(&[]);
        return match first_difference(got, want) {
            None => Ok(()),
            Some(i) => Err(format!(
                "byte {i} reads {:#04x}, durable {:#04x}",
                got[i], want[i]
            )),
        };
    }
    let all: Vec<&Version> = sizes_from.iter().chain(bytes_from).collect();
    for (i, &b) in got.iter().enumerate() {
        if !all.iter().any(|v| byte_of(v, i) == b) {
            let seen: Vec<u8> = all.iter().map(|v| byte_of(v, i)).collect();
            return Err(format!(
                "byte {i} reads {b:#04x}, which no version held (they held {seen:?})"
            ));
        }
    }
    Ok(())
}

/// The first index where `a` and `b` differ (a length difference counts).
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len())),
    )
}

/// `data` written at `offset` of `v`.
pub fn write(v: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let (at, end) = (offset as usize, offset as usize + data.len());
    if v.len() < end {
        v.resize(end, 0);
    }
    v[at..end].copy_from_slice(data);
}

/// `fallocate(mode, offset, len)` on `v`, as Linux defines it for the bytes a file reads.
pub fn fallocate(v: &mut Vec<u8>, mode: Fallocate, offset: u64, len: u64) {
    let end = (offset + len) as usize;
    let grow = matches!(
        mode,
        Fallocate::Allocate | Fallocate::ZeroRange { keep_size: false }
    );
    if matches!(mode, Fallocate::PunchHole | Fallocate::ZeroRange { .. }) {
        let stop = end.min(v.len());
        if (offset as usize) < stop {
            v[offset as usize..stop].fill(0);
        }
    }
    if grow && v.len() < end {
        v.resize(end, 0);
    }
}

/// The versions a write that failed part way may have left: its first `k` chunks done,
/// for every `k` (a chunk ends `chunk_blocks` blocks of `bs` bytes past the block it starts
/// in, as `Volume::write` cuts them).
pub fn write_prefixes(
    before: &[u8],
    offset: u64,
    data: &[u8],
    (bs, chunk_blocks): (u64, u64),
) -> Vec<Vec<u8>> {
    let mut out = vec![before.to_vec()];
    let end = offset + data.len() as u64;
    let mut pos = offset;
    while pos < end {
        let stop = end.min((pos / bs + chunk_blocks) * bs);
        let mut v = before.to_vec();
        write(&mut v, offset, &data[..(stop - offset) as usize]);
        out.push(v);
        pos = stop;
    }
    out
}

/// The bytes of a pattern: `len` bytes from `seed`, never one long run of one value.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_bound_sizes_and_bytes() {
        let a = [Some(vec![1, 2, 3])];
        let b = [Some(vec![1, 9, 3, 4])];
        assert!(matches_versions(&[1, 2, 3], &a, &[]).is_ok());
        assert!(matches_versions(&[1, 9, 3], &a, &[]).is_err());
        assert!(matches_versions(&[1, 9, 3], &a, &b).is_ok());
        assert!(matches_versions(&[1, 9, 3, 4], &a, &b).is_err());
        assert!(matches_versions(&[1, 2, 3, 4], &[a[0].clone(), b[0].clone()], &[]).is_ok());
    }

    #[test]
    fn prefixes_cut_at_chunk_ends() {
        let p = write_prefixes(&[0; 4], 2, &[7; 10], (2, 2));
        assert_eq!(p.len(), 4);
        assert_eq!(p[1], vec![0, 0, 7, 7, 7, 7]);
        assert_eq!(p[2].len(), 10);
        assert_eq!(p[3].len(), 12);
    }
}
