//! The steps run on a damaged copy: fsck (read-only, as `extalloc fsck`), mount (as
//! `extalloc mount`, its repair at mount included), and the repair pipeline (`extalloc fsck
//! --repair`) followed by fsck and a mount; after each mount the check of every inode the
//! damage did not hit, and filling the device with new data, after which every surviving
//! file's blocks must still hold its data.
//!
//! Data structures: [`Served`] (what a mount served: inodes lost, found in /lost+found,
//! handed out twice). Invariant: every step works on its own copy of the image, on its
//! own thread (a hung one holds nothing shared). Lock order: none.

use super::former::FORMER_UID;
use super::image::BLOCK;
use super::truth::{bytes_of, fsck_problem, walk, Truth, Walked};
use super::types::{opts, ME};
use crate::corrupt::image_device;
use extalloc::disk::device::{Device, FaultDevice, MemDevice};
use extalloc::volume::Volume;
use extalloc::Policy;
use extalloc_fuse::fs::names::NewNode;
use extalloc_fuse::fs::{Fs, ROOT};
use extalloc_fuse::inode::Kind;
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

/// What a mount of a damaged image did.
#[derive(Debug, Default)]
pub(super) struct Served {
    /// Why it refused, if it did.
    pub(super) refused: Option<String>,
    /// Inodes not hit that it lost or served wrong, each with why.
    pub(super) lost: Vec<String>,
    /// Inodes not hit that a mount which read only the root (after a clean close) did not
    /// reach: damage cut the directory that named them, and only a whole read of the
    /// namespace (the repair, or a mount after a crash) finds them. Lost for any other.
    pub(super) unreached: Vec<String>,
    /// Inodes not hit found only in /lost+found.
    pub(super) lost_found: u64,
    /// Inodes not hit found only under another name in a directory whose log was hit.
    pub(super) renamed: u64,
    /// Surviving files whose blocks new data overwrote, each with why.
    pub(super) handed_twice: Vec<String>,
    /// Directories whose listing failed, each with the error.
    pub(super) failed_listings: Vec<String>,
}

/// Opens `dev` as `extalloc mount` does (the volume, then the file system with its repair
/// at mount), checks every inode not in `hit`, then fills the device and checks again.
pub(super) fn mount_and_check(dev: Arc<dyn Device>, truth: &Truth, hit: &BTreeSet<u64>) -> Served {
    let vol = match Volume::open(dev.clone(), Policy::default()) {
        Ok(v) => v,
        Err(e) => return refused(e.to_string()),
    };
    let (fs, whole) = match Fs::mount(vol, opts()) {
        Ok((fs, report)) => (fs, report.scanned),
        Err(e) => return refused(e),
    };
    let mut out = Served::default();
    let intact = check_served(&fs, truth, hit, &mut out);
    if whole {
        let listings = out.failed_listings.iter().map(|l| format!("listing {l}"));
        out.lost.extend(listings);
        out.lost.append(&mut out.unreached);
    }
    out.handed_twice = fill_and_recheck(&fs, dev.as_ref(), truth, &intact);
    out
}

/// What the repair did with a damaged image, and the mount after it.
#[derive(Debug, Default)]
pub(super) struct Repaired {
    /// Why the repair refused or failed, if it did.
    pub(super) refused: Option<String>,
    /// What fsck still reports after the repair.
    pub(super) dirty: Option<String>,
    pub(super) served: Served,
    /// The repair scanned the device for a lost file tree node's leaves, or for a lost
    /// root's children.
    pub(super) tree_scan: bool,
    /// The repair took the salvage, not the page path.
    pub(super) salvaged: bool,
}

/// `bytes` as a memory device; with `bad` (device bytes), one whose reads of them fail as
/// a bad sector's do on Linux (`EIO`, the other reads working: `FaultDevice`).
pub(super) fn device_of(bytes: &[u8], bad: Option<Range<u64>>) -> Arc<dyn Device> {
    let Some(bad) = bad else {
        return image_device(bytes);
    };
    let mem = MemDevice::new(bytes.len() as u64);
    mem.write_at(bytes, 0)
        .expect("a memory device takes its size");
    let dev = FaultDevice::new(mem, 0);
    dev.fail_reads_in(bad);
    Arc::new(dev)
}

/// Runs the repair pipeline on `bytes` (`extalloc fsck --repair`) on a device that fails
/// reads of `bad` (if any), fsck on what it left, then [`mount_and_check`].
pub(super) fn repair_and_check(
    (bytes, bad): (Vec<u8>, Option<Range<u64>>),
    truth: &Truth,
    hit: &BTreeSet<u64>,
) -> Repaired {
    let dev = device_of(&bytes, bad.clone());
    drop(bytes);
    let report = match extalloc_fuse::repair::repair(dev.clone(), Policy::default()) {
        Ok(report) => report,
        Err(e) => {
            return Repaired {
                refused: Some(e),
                ..Repaired::default()
            }
        }
    };
    // The device's bytes for fsck, but the bad sector's (zeros: fsck reads no file data).
    let mut now = vec![0u8; dev.size() as usize];
    let bad = bad.unwrap_or(now.len() as u64..now.len() as u64);
    let (head, tail) = now.split_at_mut(bad.start as usize);
    let tail = &mut tail[(bad.end - bad.start) as usize..];
    let read = (dev.read_at(head, 0)).and_then(|()| dev.read_at(tail, bad.end));
    let dirty = match read {
        Ok(()) => fsck_problem(&now),
        Err(e) => Some(format!("reading the repaired device: {e}")),
    };
    drop(now);
    Repaired {
        refused: None,
        dirty,
        served: mount_and_check(dev, truth, hit),
        tree_scan: report.salvage.tree_scan.is_some() || report.salvage.root_found.is_some(),
        salvaged: report.salvaged,
    }
}

fn refused(why: String) -> Served {
    Served {
        refused: Some(why),
        ..Served::default()
    }
}

/// Checks every inode not in `hit`: found under one of its paths, below /lost+found, or
/// under another name in a directory that was hit; of its kind, with its bytes; and that
/// no name serves a former volume's inode (owned by [`FORMER_UID`]: lost, as served
/// wrong). Returns the regular files found intact.
fn check_served(fs: &Fs, truth: &Truth, hit: &BTreeSet<u64>, out: &mut Served) -> Vec<u64> {
    // A directory whose listing fails (damage met where it is read, on a mount that did
    // not read the whole namespace) leaves its names unreached; a whole read or a repair
    // makes unreached names lost.
    let Walked { served, failed } = walk(fs);
    out.failed_listings = failed.iter().map(|(p, e)| format!("{p}: {e}")).collect();
    // A name in a directory whose log was hit is that log's data: it may be an old one
    // (a stale block brings back the names it held).
    let in_hit_dir = |p: &str| {
        let dir = p
            .rsplit_once('/')
            .map_or("/", |(d, _)| if d.is_empty() { "/" } else { d });
        served.get(dir).is_some_and(|(d, _)| hit.contains(d))
    };
    for (path, &(ino, _)) in &served {
        if fs.getattr(ino).is_ok_and(|a| a.inode.uid == FORMER_UID) {
            out.lost
                .push(format!("{path} serves inode {ino} of the former volume"));
        }
    }
    let mut intact = Vec::new();
    for (&ino, want) in truth.inodes.iter().filter(|(i, _)| !hit.contains(i)) {
        let at_path = want
            .paths
            .iter()
            .any(|p| served.get(p) == Some(&(ino, want.kind)));
        let mut elsewhere = served.iter().filter(|(_, &(i, _))| i == ino);
        let in_lost_found = elsewhere
            .clone()
            .any(|(p, _)| p.starts_with("/lost+found/"));
        let renamed = elsewhere.any(|(p, _)| in_hit_dir(p));
        let first = &want.paths[0];
        if !(at_path || in_lost_found || renamed) {
            out.unreached.push(format!("inode {ino} ({first}) missing"));
            continue;
        }
        out.lost_found += u64::from(!at_path && in_lost_found);
        out.renamed += u64::from(!at_path && !in_lost_found);
        match bytes_of(fs, ino, want.kind) {
            Ok(b) if b == want.bytes => intact.extend((want.kind == Kind::File).then_some(ino)),
            Ok(b) => out.lost.push(format!(
                "inode {ino} ({first}) reads {} bytes, not its {}{}",
                b.len(),
                want.bytes.len(),
                if b.len() == want.bytes.len() {
                    " (others)"
                } else {
                    ""
                }
            )),
            Err(e) => out.lost.push(format!("inode {ino} ({first}) fails: {e}")),
        }
    }
    intact
}

/// Writes new data into a new file until the device is full, then reads each file of
/// `intact` straight from the device by the map it had before: every byte must be its own.
fn fill_and_recheck(fs: &Fs, dev: &dyn Device, truth: &Truth, intact: &[u64]) -> Vec<String> {
    let maps: Vec<_> = intact
        .iter()
        .filter_map(|&ino| Some((ino, fs.volume().extents(ino).ok()?)))
        .collect();
    fill(fs);
    let mut twice = Vec::new();
    for (ino, map) in maps {
        let want = &truth.inodes[&ino].bytes;
        let mut got = vec![0u8; want.len()];
        for e in map.iter().filter(|e| !e.unwritten) {
            let from = (e.logical * BLOCK) as usize;
            if from >= got.len() {
                continue;
            }
            let to = (from + (e.extent.len * BLOCK) as usize).min(got.len());
            if let Err(err) = dev.read_at(&mut got[from..to], e.extent.start * BLOCK) {
                twice.push(format!("inode {ino}: reading its blocks: {err}"));
            }
        }
        if &got != want {
            let first = (0..want.len()).find(|&i| got[i] != want[i]).unwrap_or(0);
            twice.push(format!(
                "inode {ino} ({}): byte {first} changed after the device was filled",
                truth.inodes[&ino].paths[0]
            ));
        }
    }
    twice
}

/// Bytes written between two syncs while filling.
const FILL_PIECE: usize = 256 << 10;

/// Fills the device through a new file in the root until a write or a sync fails.
fn fill(fs: &Fs) {
    let new = NewNode {
        kind: Kind::File,
        mode: 0o644,
        umask: 0o022,
        rdev: 0,
        target: None,
    };
    let Ok(made) = fs.make(ROOT, b"fill-after-damage", new, ME) else {
        return;
    };
    let piece: Vec<u8> = (0..FILL_PIECE).map(|i| (i % 251) as u8 ^ 0xa5).collect();
    let most = super::image::BLOCKS * BLOCK / FILL_PIECE as u64 + 4;
    for k in 0..most {
        let written = fs.write(made.ino, k * FILL_PIECE as u64, &piece, false);
        if written.is_err() || fs.sync().is_err() {
            break;
        }
    }
}
