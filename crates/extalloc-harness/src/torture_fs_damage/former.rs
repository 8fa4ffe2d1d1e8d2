//! A former volume under an image (`image.rs`): a device that held another volume before
//! the image's was made over it, as a `mkfs` without discard leaves a device. The former
//! volume's tree leaves then lie, whole, in the image's free blocks (or in blocks it took
//! for data not written yet); a repair that scans the device for leaves must take none of
//! them (`docs/format.md`, "Stamp"), and the judge counts a name that serves a file owned
//! by [`FORMER_UID`] as lost (`judge.rs`).
//!
//! Data structures: none (a seeded run through `Fs`). Invariant: every inode made here is
//! owned by [`FORMER_UID`], which no image's file has. Lock order: none (one thread).

use super::types::{opts, seeded_mkfs};
use anyhow::Result;
use extalloc::disk::device::{FaultDevice, MemDevice};
use extalloc::volume::Volume;
use extalloc::{Geometry, Policy};
use extalloc_fuse::fs::names::NewNode;
use extalloc_fuse::fs::{Caller, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The owner of a former volume's files ([`former`]); no file of an image has it.
pub(super) const FORMER_UID: u32 = 4242;

/// A former volume on `dev` (of `geometry`, with a journal of `journal_blocks`): a few
/// directories of empty files and fifos and some files with data, all owned by
/// [`FORMER_UID`], over several checkpoints (so that its tree has many leaves and older
/// copies of them in free blocks), unmounted cleanly. Its leaves
/// then lie, whole, in the blocks the image's volume leaves free (or takes for data it has
/// not written yet); none of its files may come back in the image's.
pub(super) fn former(
    dev: &Arc<FaultDevice<MemDevice>>,
    (geometry, journal_blocks): (&Geometry, u64),
    seed: u64,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xf0_3e_e3);
    let who = Caller {
        uid: FORMER_UID,
        gid: FORMER_UID,
    };
    let vol = seeded_mkfs(dev.clone(), (geometry, journal_blocks), seed ^ 0xf0_3e_e3)?;
    let (mut fs, _) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    let err = |e| anyhow::anyhow!("the former volume: {e:?}");
    for d in 0..rng.gen_range(2..5) {
        let new = |kind| NewNode {
            kind,
            mode: 0o644,
            umask: 0o022,
            rdev: 0,
            target: None,
        };
        let dir = fs.make(ROOT, format!("old{d}").as_bytes(), new(Kind::Dir), who);
        let dir = dir.map_err(err)?.ino;
        for n in 0..rng.gen_range(40..120) {
            let kind = if rng.gen_bool(0.5) {
                Kind::File
            } else {
                Kind::Fifo
            };
            let ino = fs.make(dir, format!("f{n}").as_bytes(), new(kind), who);
            let ino = ino.map_err(err)?.ino;
            if kind == Kind::File && rng.gen_bool(0.1) {
                let data = vec![0xf0; rng.gen_range(1..20_000)];
                fs.write(ino, 0, &data, false).map_err(err)?;
            }
            fs.forget(ino, 1);
        }
        fs.forget(dir, 1);
        // A checkpoint per directory: its leaves' older copies go to free blocks.
        fs.unmount().map_err(anyhow::Error::msg)?;
        let vol = Volume::open(dev.clone(), Policy::default())?;
        fs = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?.0;
    }
    fs.unmount().map_err(anyhow::Error::msg)
}
