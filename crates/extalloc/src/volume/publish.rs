//! Atomic publish: a file that becomes visible only once all its data is in.
//!
//! A blob store wants a new object to appear whole or not at all, even when its data spans
//! many commits. [`Volume::create_pending`] makes a file no listing shows; the caller
//! writes its data (as many calls and commits as it takes); [`Volume::publish`] gives it
//! its attribute blob in one change. Under `data=ordered` the commit that carries that
//! change is written after the file's data, so after a crash the file is either published
//! with every byte or still pending; [`Volume::open`] removes pending files (their blocks
//! free again), so a crash never leaves a partial object behind. [`Volume::put`] is
//! create, write and publish in one call; [`Volume::publish_replacing`] also makes the
//! file the new one replaces pending in the same commit (an object overwritten
//! atomically), then unlinks it.
//!
//! Data structures: the pending mark, [`PENDING`]: an attribute blob the volume reserves
//! (every public call that sets a blob refuses it), so the mark rides the file table and
//! the journal's records as any blob does and the format is unchanged.
//!
//! Invariant: a file is pending iff its blob is [`PENDING`]; no listing shows a pending
//! file and [`Volume::attr`] gives it an empty blob; after a writable open no pending file
//! exists (after [`Volume::open_for_repair`], once [`Volume::remove_pending`] ran). Locks: those of the calls it makes (`create`, `set_attr`, `unlink`, `atomic`).

use super::chunk::TailFirst;
use super::io::check_attr;
use super::record::Change;
use super::state::Volume;
use crate::error::{Error, Result};

/// The attribute blob that marks a pending file (reserved: see the module documentation;
/// defined with the table's entries, whose marks name it).
pub(crate) use super::table::PENDING;

/// A blob a caller may set: within the size limit and not the pending mark.
pub(super) fn check_caller_attr(attr: &[u8]) -> Result<()> {
    check_attr(attr)?;
    if attr == PENDING {
        return Err(Error::AttrReserved);
    }
    Ok(())
}

impl Volume {
    /// Replaces file `id`'s attribute blob. One chunk: a failure changes nothing. A blob
    /// over [`MAX_ATTR_BYTES`](super::MAX_ATTR_BYTES) is refused ([`Error::AttrTooLarge`]).
    pub fn set_attr(&self, id: u64, attr: &[u8]) -> Result<()> {
        check_caller_attr(attr)?;
        let why = "is pending: give it its attributes with Volume::publish";
        self.replace_attr(id, attr, false, why)
    }

    /// Creates an empty file that no listing shows until [`Volume::publish`] gives it its
    /// attribute blob; returns its id. Write its data with the usual calls. If the
    /// process or the power goes before it is published (and that publish committed), the
    /// next writable [`Volume::open`] removes it. Fails as [`Volume::create`] does,
    /// leaving nothing.
    ///
    /// ```
    /// # use extalloc::volume::Volume;
    /// # let dir = std::env::temp_dir().join(format!("extalloc-doc-pub-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let vol = Volume::mkfs_file(dir.join("v.img"), 32 << 20)?;
    /// let id = vol.create_pending()?;
    /// vol.write(id, 0, b"the whole object")?;
    /// assert!(vol.list().is_empty(), "not visible yet");
    /// vol.publish(id, b"key:report.pdf")?;
    /// vol.sync()?; // durable, with all of its data
    /// assert_eq!(vol.list()[0].id, id);
    /// # vol.close()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), extalloc::Error>(())
    /// ```
    pub fn create_pending(&self) -> Result<u64> {
        let id = self.make_file(PENDING, None, None)?;
        debug_assert!(self.is_pending(id), "made pending");
        Ok(id)
    }

    /// [`Volume::create_pending`] with a placement key, as [`Volume::create_placed`]
    /// gives one (a file system's file made with no name, `O_TMPFILE`, near its
    /// directory's files).
    pub fn create_pending_placed(&self, key: u64) -> Result<u64> {
        let id = self.make_file(PENDING, Some(key), None)?;
        debug_assert!(self.is_pending(id), "made pending");
        Ok(id)
    }

    /// Makes published file `id` pending again (its blob becomes the pending mark): one
    /// change, durable at the next commit, after which a crash leaves it for the next
    /// writable [`Volume::open`] to remove. Its data stays readable and writable until
    /// [`Volume::unlink`] or a [`Volume::publish`] that names it again. What a file system
    /// does to an inode no name reaches any more, in the atomic group that removes its
    /// last name, so that a crash never leaves it behind. Refused, nothing changed:
    /// [`Error::Pending`] when `id` is pending already, [`Error::NoSuchFile`] when there is
    /// no file `id`.
    pub fn retract(&self, id: u64) -> Result<()> {
        self.replace_attr(id, PENDING, false, "is pending already")?;
        debug_assert!(self.is_pending(id), "retracted");
        Ok(())
    }

    /// Publishes pending file `id` under `attr`: one change, durable at the next commit
    /// ([`Volume::sync`]) together with, never before, the file's data. Refused, nothing
    /// changed: [`Error::Pending`] when `id` is not pending, [`Error::AttrReserved`] or
    /// [`Error::AttrTooLarge`] for such an `attr`, [`Error::NoSuchFile`] when there is no
    /// file `id`.
    pub fn publish(&self, id: u64, attr: &[u8]) -> Result<()> {
        check_caller_attr(attr)?;
        let why = "is not pending: only a file made by create_pending is published";
        self.replace_attr(id, attr, true, why)?;
        debug_assert!(!self.is_pending(id), "published");
        Ok(())
    }

    /// Sets file `id`'s blob to `attr` in one chunk if the file is pending exactly when
    /// `pending` says, else refuses with [`Error::Pending`] and `why`, changing nothing.
    /// The one place a blob is replaced (`set_attr`, `publish`, a replacement's old file).
    pub(super) fn replace_attr(
        &self,
        id: u64,
        attr: &[u8],
        pending: bool,
        why: &'static str,
    ) -> Result<()> {
        // A blob touches no block: a tail kept back (`tail.rs`) stays for the commit.
        self.chunk(id, TailFirst::Kept, |_, f| {
            if (f.attr == PENDING) != pending {
                return Err(Error::Pending { id, why });
            }
            f.attr = attr.to_vec();
            debug_assert_eq!(f.attr, attr, "the blob replaced");
            Ok(vec![Change::SetAttr {
                id,
                attr: attr.to_vec(),
            }])
        })
    }

    /// Publishes pending file `id` under `attr` in place of file `old` (the object it
    /// replaces): one atomic group of two changes (`id` published, `old` made pending),
    /// then `old` is unlinked. After a crash either `old` is there as it was and `id` is
    /// pending, or `id` is published and `old` pending; an open removes whichever is
    /// pending. Refused, nothing changed, as [`Volume::publish`] is, and when `old` is
    /// `id`, pending, or missing. If only the last step, freeing `old`'s blocks, fails,
    /// the replacement stands and its error is returned; `old` stays pending and hidden
    /// and the next open removes it.
    pub fn publish_replacing(&self, id: u64, attr: &[u8], old: u64) -> Result<()> {
        check_caller_attr(attr)?;
        if old == id || self.is_pending(old) {
            return Err(Error::Pending {
                id: old,
                why: "cannot be replaced: it is the new file itself, or pending",
            });
        }
        self.file(old)?;
        let group = self.atomic(2)?;
        if let Err(e) = self.publish(id, attr) {
            // Nothing in the group changed yet: it ends whole.
            group.finish();
            return Err(e);
        }
        // A failure here leaves the group unfinished: the volume stops committing, so the
        // half change (both published) is never durable.
        self.replace_attr(old, PENDING, false, "is pending already")?;
        group.finish();
        debug_assert!(!self.is_pending(id) && self.is_pending(old), "swapped");
        self.unlink(old)
    }

    /// Is file `id` pending (made by [`Volume::create_pending`], not yet published)?
    /// `false` when there is no such file.
    pub fn is_pending(&self, id: u64) -> bool {
        self.file(id).is_ok_and(|f| f.lock().attr == PENDING)
    }

    /// The pending files, in id order (a writable open removes those a crash left).
    pub fn pending(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .file_handles()
            .into_iter()
            .filter(|(_, f)| f.lock().attr == PENDING)
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Removes the pending files a crash left (at open: [`Volume::open`] calls it, a
    /// repair after [`Volume::open_for_repair`] and the bitmaps' rebuild), and
    /// commits: returns how many. Stops at the first failure (a read-only device, a free
    /// into a group held corrupt), leaving the rest pending and hidden for the next open;
    /// call it only while no caller has made a pending file of its own.
    pub fn remove_pending(&self) -> Result<usize> {
        let ids = self.pending();
        for &id in &ids {
            self.unlink(id)?;
        }
        if !ids.is_empty() {
            self.sync()?;
        }
        debug_assert!(self.pending().is_empty(), "every pending file removed");
        Ok(ids.len())
    }
}
