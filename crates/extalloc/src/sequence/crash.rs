//! Power losses and reopens of the sequence interpreter, and what the volume must read
//! after them (`docs/volume.md`, "Crash semantics").
//!
//! What is checked, per file id the durable state, the versions since or the volume name:
//!
//! - **Which files exist and their sizes**: metadata reaches the device only in a commit
//!   (a sync, a checkpoint, a commit the volume makes by itself), so a file exists after
//!   the loss if and only if a durable version has it, and its size is a durable version's
//!   (between the two when the volume committed inside a call: a prefix of its chunks).
//! - **Bytes**: when the loss dropped every unflushed write, exactly the durable version's
//!   (each byte one of the two, inside a call as above). When it kept some (and tore one),
//!   or the process died with the device's cache intact, each byte is one a version since
//!   the last commit held there: overwrites in place are not journaled (each block old or
//!   new), and new mappings are never durable without their data (`data=ordered`), so no
//!   byte of another file or of a deleted one shows.
//!
//! Then the model becomes what was read (every byte of it checked above), all durable.
//! Data structures: none of their own. Invariant: the device's `fsck` is clean after every
//! `close`. Locks: none.

use super::model::{self, Version};
use super::runner::Runner;
use super::steps::Touched;
use crate::alloc::Policy;
use crate::disk::device::Crash;
use crate::store::fsck;
use crate::volume::Volume;
use std::collections::BTreeMap;

type Step = std::result::Result<Touched, String>;

impl Runner {
    /// Power loss: writes fail, the volume dropped, the device crashed (`keep` eighths of the unflushed
    /// writes kept, none when 0; one torn if `tear`), the volume opened again.
    pub(super) fn power_loss(&mut self, keep: u8, tear: bool) -> Step {
        // The power is gone before the volume is dropped: dropping a store marks the
        // device clean and flushes (a clean close), which a power loss never does.
        self.dev.fault.fail_writes(true);
        drop(self.vol.take());
        let how = if keep == 0 {
            Crash::DropAll
        } else {
            Crash::Random {
                keep: f64::from(keep) / 8.0,
                tear,
            }
        };
        let report = self
            .dev
            .fault
            .crash(how)
            .map_err(|e| format!("crash: {e}"))?;
        self.summary.crashes += 1;
        if report.kept > 0 {
            self.summary.crashes_keeping += 1;
        }
        self.open_and_check(report.kept > 0)
    }

    /// A killed process: the volume dropped without `close`, the device (and its cache of
    /// unflushed writes) intact, the volume opened again.
    pub(super) fn reopen(&mut self) -> Step {
        drop(self.vol.take());
        self.summary.reopens += 1;
        self.open_and_check(true)
    }

    /// Opens the volume after a loss and checks it against the durable versions (and the
    /// versions since the last commit, if unflushed writes may have survived).
    fn open_and_check(&mut self, kept_writes: bool) -> Step {
        let vol = Volume::open(self.dev.clone(), self.policy.clone())
            .map_err(|e| format!("open after a loss: {e}"))?;
        vol.set_file_cache(super::FILE_CACHE);
        self.vol = Some(vol);
        self.unlinked = None;
        self.leftovers.clear();
        let listed: Vec<u64> = self.vol().list().iter().map(|f| f.id).collect();
        let mut read_back = BTreeMap::new();
        for id in self.model.ids_after_crash(listed.iter().copied()) {
            let durable = self.model.durable_versions(id);
            let since: Vec<Version> = match kept_writes {
                true => self.model.since.get(&id).cloned().unwrap_or_default(),
                false => Vec::new(),
            };
            let exists = listed.contains(&id);
            if exists && durable.iter().all(Option::is_none) {
                return Err(format!(
                    "file {id} exists after the loss, but was never durable"
                ));
            }
            if !exists && durable.iter().all(Option::is_some) {
                return Err(format!("file {id} was durable, and is lost"));
            }
            if exists {
                let got = self.read_all(id)?;
                model::matches_versions(&got, &durable, &since)
                    .map_err(|e| format!("file {id} after the loss: {e}"))?;
                read_back.insert(id, got);
            }
        }
        self.model.adopt(read_back);
        Ok(Touched::Reopened)
    }

    /// `close` (everything durable), the store's `fsck` of the device (clean), then
    /// `Volume::open` under `policy` (a policy is not on the device: any one opens it).
    pub(super) fn close_open(&mut self, policy: Policy) -> std::result::Result<(), String> {
        let vol = self.vol.take().expect("open");
        match vol.close() {
            Ok(()) => {
                self.summary.commits += 1;
                self.model.commit_all();
                let report = fsck::check(self.dev.as_ref()).map_err(|e| format!("fsck: {e}"))?;
                if !report.clean() {
                    return Err(format!("fsck after close: {report:?}"));
                }
            }
            Err(crate::error::Error::NoSpace { .. }) => {
                // No room for the table: the volume was dropped (the store's drop flushes),
                // what was committed is replayed at the open.
                self.summary.no_space_commits += 1;
                self.model.commit_maybe();
                self.policy = policy;
                self.open_and_check(true)?;
                return Ok(());
            }
            Err(e) => return Err(format!("close: {e}")),
        }
        self.policy = policy;
        let vol = Volume::open(self.dev.clone(), self.policy.clone())
            .map_err(|e| format!("open after close: {e}"))?;
        vol.set_file_cache(super::FILE_CACHE);
        self.vol = Some(vol);
        self.leftovers.clear();
        self.summary.reopens += 1;
        Ok(())
    }
}
