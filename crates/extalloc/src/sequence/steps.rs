//! The file calls of the sequence interpreter: each event run on the volume and on the
//! model, and what a call that failed as documented must have left.
//!
//! Data structures: [`Touched`], what an event changed (the commit bookkeeping of
//! `Runner::step` follows it). Invariant: a call that succeeds changes the model as Linux
//! defines the call; one that fails with `NoSpace` leaves what `volume/io.rs` promises (a
//! write a prefix of its chunks, an allocating fallocate nothing, a zeroing one zeros over
//! a prefix of its range), checked by reading the file back; any other error is a
//! failure, except the misuse events' documented ones. Locks: none.

use super::input::Event;
use super::model::{self, Version};
use super::runner::Runner;
use crate::error::Error;
use crate::volume::{Fallocate, MAX_FILE_BYTES};

/// What an event changed.
pub(super) enum Touched {
    /// Nothing (a skipped event, a misuse).
    Nothing,
    /// One file, whose version before the call this is.
    File(u64, Version),
    /// Everything is durable (sync, checkpoint).
    Committed,
    /// The event kept the model's commit bookkeeping itself (an atomic put).
    Accounted,
    /// The volume was opened again (the crash code brought the model up to date).
    Reopened,
}

type Step = std::result::Result<Touched, String>;

impl Runner {
    /// Runs `event` on the volume and the model.
    pub(super) fn apply(&mut self, event: &Event) -> Step {
        let skipped = |r: &mut Runner| {
            r.summary.skipped += 1;
            Ok(Touched::Nothing)
        };
        match event {
            Event::Create => self.create(),
            Event::Write {
                file,
                offset,
                len,
                seed,
            } => match self.pick(*file) {
                Some(id) => self.write(id, *offset, *len as usize, *seed),
                None => skipped(self),
            },
            Event::Fallocate {
                file,
                mode,
                offset,
                len,
            } => match self.pick(*file) {
                Some(id) => self.fallocate(id, *mode, *offset, *len),
                None => skipped(self),
            },
            Event::Truncate { file, size } => match self.pick(*file) {
                Some(id) => self.truncate(id, *size),
                None => skipped(self),
            },
            Event::Unlink { file } => match self.pick(*file) {
                Some(id) => self.unlink(id),
                None => skipped(self),
            },
            Event::Sync => self.commit(false),
            Event::FailedSync => self.failed_sync(),
            Event::Checkpoint => self.commit(true),
            Event::Crash { keep, tear } => self.power_loss(*keep, *tear),
            Event::Reopen => self.reopen(),
            Event::CloseOpen { policy } => {
                self.close_open(policy.clone())?;
                Ok(Touched::Reopened)
            }
            Event::Misuse { kind, file } => self.misuse(*kind, *file),
            Event::Put {
                file,
                len,
                seed,
                replace,
            } => {
                let old = replace.then(|| self.pick(*file)).flatten();
                self.put(old, *len as usize, *seed)
            }
        }
    }

    /// A sync whose first flush fails as on Linux (`FaultDevice::fail_flushes`): it must
    /// fail, and a retry must fail with `IoLatched` (a retried flush is never believed:
    /// the forgotten writes never reached the media); then a power loss, after which the
    /// volume must read as the durable versions say, nothing of the failed commit. A sync
    /// with nothing to flush succeeds and is a plain sync.
    fn failed_sync(&mut self) -> Step {
        self.dev.fault.fail_flushes(1);
        let first = self.vol().sync();
        self.dev.fault.fail_flushes(0);
        match first {
            Ok(()) => return Ok(Touched::Committed),
            Err(Error::Io { .. }) => {}
            Err(Error::NoSpace { .. }) => {
                // No room for the table before any flush: a sync that found no space.
                self.summary.no_space_commits += 1;
                self.model.commit_maybe();
                return Ok(Touched::Reopened);
            }
            Err(e) => return Err(format!("a sync whose flush failed: {e}")),
        }
        match self.vol().sync() {
            Err(Error::IoLatched { .. }) => {}
            other => return Err(format!("a retried sync after a failed flush: {other:?}")),
        }
        self.summary.failed_flushes += 1;
        self.power_loss(0, false)
    }

    /// A sync or a checkpoint. Either may fail with `NoSpace` on a full device (the
    /// volume's table and map segments need blocks): nothing is lost (the file calls'
    /// state is as before), but what is durable is then not known exactly.
    fn commit(&mut self, checkpoint: bool) -> Step {
        let result = match checkpoint {
            true => self.vol().checkpoint(),
            false => self.vol().sync(),
        };
        match result {
            Ok(()) => Ok(Touched::Committed),
            Err(Error::NoSpace { .. }) => {
                self.summary.no_space_commits += 1;
                self.model.commit_maybe();
                Ok(Touched::Reopened)
            }
            Err(e) => Err(format!("sync or checkpoint: {e}")),
        }
    }

    /// A call on `id` that failed with `NoSpace` where it frees (truncate, punch, unlink:
    /// the commit it made room with ran into a checkpoint without space): each byte the
    /// file reads is one it held before or would hold after, its size between.
    fn failed_freeing(&mut self, id: u64, before: Version) -> std::result::Result<(), String> {
        self.summary.no_space_freeing += 1;
        let after = self.model.current.get(&id).cloned();
        let exists = self.vol().size(id).is_ok();
        if !exists {
            self.model.current.remove(&id);
            return match after {
                None => Ok(()),
                Some(_) => Err(format!("file {id} is gone after a failed call")),
            };
        }
        let got = self.read_all(id)?;
        model::matches_versions(&got, &[before, after], &[])
            .map_err(|e| format!("file {id} after a call that found no space: {e}"))?;
        self.model.current.insert(id, got);
        Ok(())
    }

    fn create(&mut self) -> Step {
        if self.model.current.len() >= 16 {
            self.summary.skipped += 1;
            return Ok(Touched::Nothing);
        }
        let id = self
            .vol()
            .create(b"sequence")
            .map_err(|e| format!("create: {e}"))?;
        if self.model.current.insert(id, Vec::new()).is_some() {
            return Err(format!("create returned id {id}, which a file has"));
        }
        Ok(Touched::File(id, None))
    }

    fn write(&mut self, id: u64, offset: u64, len: usize, seed: u8) -> Step {
        let before = self.model.current[&id].clone();
        let data = model::pattern(u64::from(seed) << 32 | offset, len);
        match self.vol().write(id, offset, &data) {
            Ok(()) => {
                let v = self.model.current.get_mut(&id).expect("picked");
                model::write(v, offset, &data);
            }
            Err(Error::NoSpace { .. }) => {
                self.summary.no_space += 1;
                let bs = u64::from(self.setup.block_size);
                let chunks = (bs, crate::volume::CHUNK_BLOCKS);
                let got = self.read_all(id)?;
                if !model::write_prefixes(&before, offset, &data, chunks).contains(&got) {
                    return Err(format!(
                        "a write that ran out of space left file {id} as no prefix of its \
                         chunks ({} bytes, {} before)",
                        got.len(),
                        before.len()
                    ));
                }
                self.model.current.insert(id, got);
            }
            Err(e) => return Err(format!("write: {e}")),
        }
        Ok(Touched::File(id, Some(before)))
    }

    fn fallocate(&mut self, id: u64, mode: Fallocate, offset: u64, len: u64) -> Step {
        let before = self.model.current[&id].clone();
        match self.vol().fallocate(id, mode, offset, len) {
            Ok(()) => {
                let v = self.model.current.get_mut(&id).expect("picked");
                model::fallocate(v, mode, offset, len);
            }
            Err(Error::NoSpace { .. }) if mode == Fallocate::PunchHole => {
                let v = self.model.current.get_mut(&id).expect("picked");
                model::fallocate(v, mode, offset, len);
                self.failed_freeing(id, Some(before.clone()))?;
            }
            Err(Error::NoSpace { .. }) => {
                self.summary.no_space += 1;
                // Allocating maps unwritten blocks (zeros) and grows the size last: the
                // file reads as before. Zeroing zeros a prefix of the range.
                let got = self.read_all(id)?;
                let end = offset.saturating_add(len);
                let fine = got.len() == before.len()
                    && got.iter().zip(&before).enumerate().all(|(i, (g, b))| {
                        let inside = (offset..end).contains(&(i as u64));
                        g == b || (inside && *g == 0 && matches!(mode, Fallocate::ZeroRange { .. }))
                    });
                if !fine {
                    return Err(format!(
                        "a fallocate that ran out of space changed file {id} beyond what \
                         its mode may ({} bytes, {} before)",
                        got.len(),
                        before.len()
                    ));
                }
                self.model.current.insert(id, got);
            }
            Err(e) => return Err(format!("fallocate: {e}")),
        }
        Ok(Touched::File(id, Some(before)))
    }

    fn truncate(&mut self, id: u64, size: u64) -> Step {
        let before = self.model.current[&id].clone();
        let result = self.vol().truncate(id, size);
        let v = self.model.current.get_mut(&id).expect("picked");
        v.resize(size as usize, 0);
        match result {
            Ok(()) => {}
            Err(Error::NoSpace { .. }) => self.failed_freeing(id, Some(before.clone()))?,
            Err(e) => return Err(format!("truncate: {e}")),
        }
        Ok(Touched::File(id, Some(before)))
    }

    fn unlink(&mut self, id: u64) -> Step {
        let result = self.vol().unlink(id);
        let before = self.model.current.remove(&id);
        match result {
            Ok(()) => self.unlinked = Some(id),
            Err(Error::NoSpace { .. }) => self.failed_freeing(id, before.clone())?,
            Err(e) => return Err(format!("unlink: {e}")),
        }
        Ok(Touched::File(id, before))
    }

    /// Every byte of file `id`.
    pub(super) fn read_all(&self, id: u64) -> std::result::Result<Vec<u8>, String> {
        let vol = self.vol();
        let size = vol.size(id).map_err(|e| format!("size of {id}: {e}"))?;
        vol.read(id, 0, size)
            .map_err(|e| format!("read of file {id}: {e}"))
    }

    /// A call the volume must refuse with its documented error.
    fn misuse(&mut self, kind: u8, file: u8) -> Step {
        // Ids the volume never gave out (they count up from 1).
        let absent = self.unlinked.unwrap_or(1 << 48);
        let id = self.pick(file).unwrap_or(absent);
        let vol = self.vol();
        let pending = crate::volume::publish::PENDING;
        let (what, result, documented): (&str, _, fn(&Error) -> bool) = match kind % 8 {
            0 => ("write to an absent file", vol.write(absent, 0, b"x"), |e| {
                matches!(e, Error::NoSuchFile { .. })
            }),
            1 => (
                "fallocate of no bytes",
                vol.fallocate(id, Fallocate::KeepSize, 0, 0),
                |e| matches!(e, Error::ZeroLength),
            ),
            2 => (
                "a write past the largest file",
                vol.write(id, MAX_FILE_BYTES - 1, b"xy"),
                |e| matches!(e, Error::PastLargestFile { unit: "bytes", .. }),
            ),
            3 => (
                "a truncate past the largest file",
                vol.truncate(id, MAX_FILE_BYTES + 1),
                |e| matches!(e, Error::PastLargestFile { unit: "bytes", .. }),
            ),
            4 => (
                "an attribute too large",
                vol.set_attr(id, &[0; crate::volume::MAX_ATTR_BYTES + 1]),
                |e| matches!(e, Error::AttrTooLarge { .. }),
            ),
            5 => (
                "the pending mark as an attribute",
                vol.set_attr(id, pending),
                |e| matches!(e, Error::AttrReserved),
            ),
            6 => (
                "a publish of a file that is not pending",
                vol.publish(id, b"again"),
                |e| matches!(e, Error::Pending { .. } | Error::NoSuchFile { .. }),
            ),
            _ => ("unlink of an absent file", vol.unlink(absent), |e| {
                matches!(e, Error::NoSuchFile { .. })
            }),
        };
        match result {
            Err(e) if documented(&e) => {
                self.summary.misuses += 1;
                Ok(Touched::Nothing)
            }
            other => Err(format!(
                "{what} returned {other:?}, not its documented error"
            )),
        }
    }
}
