//! `extalloc fsck --repair`: the file system repaired offline, modelled on e2fsck's passes.
//!
//! 1. A volume that opens for repair with every block owned once (a damaged bitmap or
//!    descriptor allowed: step 2 rebuilds them; a journal damaged in the middle replayed
//!    up to the damage; a map that does not read cleared, its file reading as holes, as
//!    the salvage does; file tree leaves that do not read and internal nodes under the
//!    root lost mended first, the journal's changes to their files applied), opens as a
//!    mount opens it, its files read when named. Any other (the tree's root lost, say) is
//!    opened salvaging
//!    ([`Volume::open_salvaging`], every file in memory): a journal damaged in
//!    the middle is replayed up to the damage, a damaged file table entry keeps its file
//!    when the file's map survived, a map segment that fails its check costs only the maps
//!    it held (those files read as holes). A kept file's inode is distrusted: a link count
//!    of 0 becomes 1 (so it is named or rescued, never taken for an orphan), and a
//!    "directory" whose data is not a directory log becomes a regular file (so no log
//!    repair cuts its data).
//! 2. Allocation (e2fsck's pass 5): every group's bitmap and descriptor rebuilt from who
//!    owns each block — the files' maps, the volume's table areas and map segments, the
//!    store's own metadata ([`Volume::rebuild_allocation`]); groups held corrupt are
//!    cleared. Then the files a crash left pending (never published) are removed: the
//!    open left them for after the rebuild, since a free into a group held corrupt is
//!    refused.
//! 3. Inodes (pass 1): a volume file whose attribute blob is not an inode gets a new one
//!    (a directory when its data reads as a directory log, else a regular file; mode 0600
//!    or 0700, owner root, one link), so its data is kept and the namespace pass names it.
//!    A spill file of extended attributes is not an inode and keeps its blob; an inode
//!    whose extended attributes are damaged (a tail that does not decode, a spill file
//!    that fails its checksum or names another owner) loses them, and keeps its data.
//! 4. Namespace (passes 2-4, what mount repairs too, `fs/scan/`): unnamed inodes with
//!    links into `/lost+found` as `#INODE` with their data, entries naming nothing
//!    dropped, damaged directory logs cut or rewritten from what survives, link counts
//!    set to the names found, orphans (link count 0, no name) removed, spill files no inode
//!    names removed.
//! 5. A checkpoint writes everything home; the device is closed.
//!
//! Every change is reported ([`RepairReport::changes`]). Nothing that holds data is removed
//! except an orphan: an inode whose last name went with a link count of 0, both written in
//! one checksummed record.
//!
//! Memory: the passes over every file take a page of files at a time
//! ([`Volume::list_page`]); the namespace pass takes a few bytes an inode when the
//! namespace holds only what a crash leaves (`scan/census.rs`), the whole of it
//! otherwise; a salvaged volume holds every file while it opens (a repair of 1M empty
//! files: 616 MB salvaged, 33 MB whole; docs/results.md).
//!
//! Data structures: [`RepairReport`]. Invariant: after `repair` returns `Ok`, the device
//! checks clean unless `RepairReport::left` says what could not be repaired. Locks: none
//! of its own (the volume's device is opened exclusively by the caller's device).

use crate::fs::{scan, NamespaceReport, ROOT};
use crate::inode::{self, Inode, Kind};
use crate::xattr;
use extalloc::disk::device::{Device, OverlayDevice};
use extalloc::store::Rebuilt;
use extalloc::volume::{ClearedMap, MendedLeaves, NodeScans, Salvage, ScanProgress, Volume};
use extalloc::Policy;
use std::sync::Arc;

#[path = "repair_lines.rs"]
mod lines;
pub use lines::salvage_lines;

/// Why a volume whose files hold no inode is not repaired as a file system.
const NO_FILE_SYSTEM: &str = "the volume holds no file system (no file holds an inode: a \
                              plain volume of `extalloc put`, or a file table that lost every \
                              entry)";

/// What [`repair`] changed.
#[derive(Debug, Clone, Default)]
pub struct RepairReport {
    /// Superblock copies that failed their check before the repair (`"primary"`,
    /// `"backup"`): the repair's checkpoint writes both from the good one.
    pub superblocks_rewritten: Vec<&'static str>,
    /// What the salvaging open found and kept or lost (journal, file table, map segments);
    /// on the page path, only a damaged journal's loss.
    pub salvage: Salvage,
    /// Kept files whose inode was made safe: `(inode, what was changed)`.
    pub distrusted: Vec<(u64, String)>,
    /// Bitmaps and descriptors rebuilt.
    pub allocation: Rebuilt,
    /// Files a crash left pending (created, never published: an `O_TMPFILE` or a file
    /// made with its extended attributes), removed once the bitmaps were rebuilt.
    pub pending_removed: usize,
    /// Volume files given a new inode (their attribute blob was not one), with the kind.
    pub inodes_remade: Vec<(u64, Kind)>,
    /// The root directory was lost (its table entry with it) and made again, empty.
    pub root_made: bool,
    /// Inodes whose damaged extended attributes were dropped, with why.
    pub xattrs_dropped: Vec<(u64, String)>,
    /// What the namespace pass found and repaired.
    pub namespace: NamespaceReport,
    /// The volume was opened by the salvage ([`Volume::open_salvaging_reporting`]: every
    /// file and map in memory), not a page at a time as a mount opens it: the look found
    /// damage the page path does not mend, or no look ran (the device is marked in use by
    /// an owner this machine cannot tell is gone).
    pub salvaged: bool,
}

impl RepairReport {
    /// True if anything was changed.
    pub fn changed(&self) -> bool {
        self.allocation != Rebuilt::default()
            || self.pending_removed > 0
            || !self.superblocks_rewritten.is_empty()
            || !self.salvage.clean()
            || !self.inodes_remade.is_empty()
            || self.root_made
            || !self.xattrs_dropped.is_empty()
            || !self.namespace.clean()
    }

    /// One line per change, in words.
    pub fn changes(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .superblocks_rewritten
            .iter()
            .map(|c| format!("the {c} superblock was damaged: written again from the other copy"))
            .collect();
        out.extend(salvage_lines(&self.salvage));
        for (ino, what) in &self.distrusted {
            out.push(format!("inode {ino} (kept from a damaged entry): {what}"));
        }
        let a = &self.allocation;
        for &g in &a.corrupt_cleared {
            out.push(format!(
                "group {g}: descriptor or bitmap damaged, rebuilt from the owners of its blocks"
            ));
        }
        if a.marked_used + a.marked_free > 0 {
            out.push(format!(
                "bitmaps of groups {:?}: {} blocks in use marked used, {} blocks no one owns \
                 marked free",
                a.groups, a.marked_used, a.marked_free
            ));
        }
        if self.pending_removed > 0 {
            out.push(format!(
                "{} files a crash left unpublished (pending, never named): removed",
                self.pending_removed
            ));
        }
        if self.root_made {
            out.push(
                "the root directory was lost: made again, empty (what it named is in \
                 /lost+found)"
                    .into(),
            );
        }
        for (ino, kind) in &self.inodes_remade {
            out.push(format!(
                "inode {ino}: attributes damaged, made a {} again (owner root, private mode)",
                if *kind == Kind::Dir {
                    "directory"
                } else {
                    "regular file"
                }
            ));
        }
        for (ino, why) in &self.xattrs_dropped {
            out.push(format!(
                "inode {ino}: extended attributes damaged ({why}): dropped, the file kept"
            ));
        }
        let n = &self.namespace;
        for id in &n.stray_xattrs {
            out.push(format!(
                "volume file {id}: extended attributes of an inode that is gone: removed"
            ));
        }
        let lines = n.bad_entries.iter().chain(&n.link_counts).chain(&n.logs);
        out.extend(lines.map(|l| format!("fixed: {l}")));
        for ino in &n.lost_found {
            out.push(format!(
                "inode {ino}: no name referred to it; linked as /lost+found/#{ino}"
            ));
        }
        for ino in &n.orphans {
            out.push(format!(
                "inode {ino}: orphan (link count 0, no name): removed"
            ));
        }
        out
    }
}

/// Repairs the file system on `dev` (see the module documentation) and leaves the device
/// closed, everything written home. Fails, having written nothing, when the volume does
/// not open or holds no file system; fails part way (the changes made so far committed or
/// not, each whole, as after a crash) on an I/O error or a full device.
pub fn repair(dev: Arc<dyn Device>, policy: Policy) -> Result<RepairReport, String> {
    repair_reporting(dev, policy, &|_| {})
}

/// [`repair`], telling `progress` how far the scan of the device for the file tree's
/// nodes has gone, when the tree lost a node and the salvage runs one
/// ([`Volume::open_salvaging_reporting`]) or the page path's open or mend does
/// ([`Volume::open_for_repair_reporting`], [`Volume::mend_unreadable_leaves_reporting`]:
/// the look, then the repair): on a large device the repair's one long step. The
/// repair's scans share one [`NodeScans`]: the first reads the blocks, the others only
/// the nodes it found there.
pub fn repair_reporting(
    dev: Arc<dyn Device>,
    policy: Policy,
    progress: &dyn Fn(ScanProgress),
) -> Result<RepairReport, String> {
    let scans = NodeScans::new(progress);
    let before = extalloc::store::fsck::check(dev.as_ref())
        .map_err(|e| format!("cannot read the device: {e}"))?;
    let superblocks_rewritten = [
        (before.primary_superblock_ok, "primary"),
        (before.backup_superblock_ok, "backup"),
    ]
    .iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, c)| *c)
    .collect();
    // A volume whole below its namespace opens as a mount opens it (its files read a
    // leaf at a time); any other is salvaged, every file in memory. An owner that only a
    // watch of its heartbeat can tell gone would be watched twice (the look, then the
    // open): such a volume is salvaged, which watches once.
    let at_once = !before.in_use || before.owner_gone;
    let whole = at_once
        .then(|| whole_volume(&dev, &policy, &scans))
        .flatten();
    let salvaged = whole.is_none();
    let (vol, salvage) = match whole {
        // A journal damaged in the middle: the records before the damage replayed (as the
        // salvage does), the groups later ones touch held corrupt until the rebuild.
        // Maps that do not read: cleared, as the salvage clears them.
        // Leaves of the file tree that did not read: mended from what survives, as the
        // salvage keeps it.
        Some((vol, maps_cleared, leaves)) => {
            let mut salvage = Salvage {
                journal_loss: vol.store().journal_loss(),
                journal_loss_earlier: vol.store().journal_loss_earlier(),
                maps_cleared,
                ..Salvage::default()
            };
            leaves.report_into(&mut salvage);
            (vol, salvage)
        }
        None => Volume::open_salvaging_reporting(dev, policy, &scans)
            .map_err(|e| format!("cannot open the volume: {e}"))?,
    };
    let mut report = RepairReport {
        allocation: vol
            .rebuild_allocation()
            .map_err(|e| format!("cannot rebuild the bitmaps: {e}"))?,
        salvage,
        superblocks_rewritten,
        salvaged,
        ..RepairReport::default()
    };
    // Their frees wait for the rebuild: a free into a group held corrupt is refused.
    report.pending_removed = vol
        .remove_pending()
        .map_err(|e| format!("cannot remove the files a crash left pending: {e}"))?;
    // A volume with no file yet (made by mkfs, never mounted) holds no namespace to check:
    // the store's and the volume's repairs are all there is.
    let empty = (vol.is_empty()).map_err(|e| format!("cannot list the volume's files: {e}"))?;
    if !empty || report.salvage.table_damaged {
        report.root_made = make_root_again(&vol)?;
        report.inodes_remade = remake_inodes(&vol)?;
        report.distrusted = distrust_kept(&vol, &report.salvage)?;
        report.xattrs_dropped = drop_damaged_xattrs(&vol)?;
        // The census first: a namespace is repaired without the whole of it in memory
        // (`scan/paged.rs`), unless inodes or their attributes are still damaged.
        report.namespace = match scan::repair_paged(&vol)? {
            Some(found) => found,
            None => scan::load(&vol, true)?.1,
        };
    }
    // The whole namespace was read and repaired: the next mount reads only the root.
    vol.store().mark_checked();
    vol.close()
        .map_err(|e| format!("cannot write the repairs home: {e}"))?;
    Ok(report)
}

/// The volume opened as any open does (the journal's replay after a crash written),
/// when nothing in it needs the salvage: a read-only open of it (under an overlay:
/// nothing written) succeeded, so a superblock copy is whole, and found every file tree
/// leaf readable, no block mapped twice or mapped and free, and none leaked but what the
/// maps that do not read named ([`Volume::check`] after
/// [`Volume::clear_unreadable_maps`]; groups held corrupt, a damaged bitmap or
/// descriptor or the groups a damaged journal's lost records touch, are allowed: the
/// repair rebuilds every bitmap from the owners, as after a salvage). Both opens are
/// [`Volume::open_for_repair`]: a journal damaged in the middle replays up to the
/// damage, as the salvage's does, and the files a crash left pending stay (a free into
/// a group held corrupt is refused), for the repair to remove once the rebuild has
/// cleared such groups. The real open's maps that do not read are cleared as the
/// salvage clears them (the files read as holes) and returned. The repair of such a
/// volume (after a crash, of its allocation, of a superblock copy, a map segment, or
/// its namespace) then holds a page of files at a time instead of every file (the
/// salvaging open's memory grows with the file count). `None`: salvage it. A lost
/// node's scans of the device are made by `scans` (the look's reads the blocks, the
/// repair's only the nodes the look found there).
pub(crate) fn whole_volume(
    dev: &Arc<dyn Device>,
    policy: &Policy,
    scans: &NodeScans<'_>,
) -> Option<(Volume, Vec<ClearedMap>, MendedLeaves)> {
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let looked = Volume::open_for_repair_reporting(view, policy.clone(), scans).ok()?;
    let whole = looked
        .mend_unreadable_leaves_reporting(scans)
        .is_ok_and(|mended| {
            looked.clear_unreadable_maps().is_ok_and(|cleared| {
                // The blocks the cleared maps named are owned by no one now: leaked, and no
                // more; so are the mended leaves' lost entries' blocks (as many as their maps
                // counted, or any number when an entry was lost with its bytes: the salvage
                // can keep none of those either).
                let named =
                    (cleared.iter()).fold(0u64, |n, &(_, blocks, _)| n.saturating_add(blocks));
                let lost = mended.leaked_bound();
                let leaked_allowed =
                    |leaked| lost.is_none_or(|l| leaked <= named.saturating_add(l));
                (looked.check()).is_ok_and(|c| {
                    c.mapped_free == 0 && c.mapped_twice == 0 && leaked_allowed(c.leaked)
                })
            })
        });
    // Its changes lie in the overlay's memory only.
    let _ = looked.close();
    if !whole {
        return None;
    }
    let vol = Volume::open_for_repair_reporting(dev.clone(), policy.clone(), scans).ok()?;
    let mended = vol.mend_unreadable_leaves_reporting(scans).ok()?;
    let cleared = vol.clear_unreadable_maps().ok()?;
    let cleared = cleared
        .into_iter()
        .map(|(id, _, why)| ClearedMap { id, why });
    Some((vol, cleared.collect(), mended))
}

/// Files listed a page at a time.
const PAGE: usize = 4096;

/// Hands `f` the volume's files with their attribute blobs, in id order, a page at a
/// time ([`Volume::list_page`]: one page in memory whatever the file count), until `f`
/// says stop (`false`) or the files end. Fails with why a leaf of the file tree cannot be
/// read: a repair that went on with the files it could see would make the root again
/// over one the tree still holds.
fn each_page(
    vol: &Volume,
    mut f: impl FnMut(&[(extalloc::volume::FileInfo, Vec<u8>)]) -> Result<bool, String>,
) -> Result<(), String> {
    let mut after = None;
    loop {
        let page = (vol.list_page(after, PAGE))
            .map_err(|e| format!("cannot list the volume's files: {e}"))?;
        if !f(&page.files)? {
            return Ok(());
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

/// Whether the volume holds `ROOT`'s file, and whether any file holds an inode.
fn root_and_inodes(vol: &Volume) -> Result<(bool, bool), String> {
    let (mut root, mut inodes) = (false, false);
    each_page(vol, |files| {
        for (f, blob) in files {
            root |= f.id == ROOT;
            inodes |= Inode::decode(blob).is_some();
        }
        // Ids only grow: once past ROOT, the first inode ends it.
        Ok(!(inodes && files.last().is_some_and(|(f, _)| f.id >= ROOT)))
    })?;
    Ok((root, inodes))
}

/// Makes the root directory again, empty, when its volume file is gone (lost with its
/// table entry) and other files hold inodes; what it named goes to /lost+found in the
/// namespace pass. True if it did.
pub(crate) fn make_root_again(vol: &Volume) -> Result<bool, String> {
    match root_and_inodes(vol)? {
        (true, _) => return Ok(false),
        (false, false) => return Err(NO_FILE_SYSTEM.into()),
        (false, true) => {}
    }
    let root = Inode::new(Kind::Dir, 0o755, 0, 0, 0);
    vol.create_at(ROOT, &root.encode())
        .map_err(|e| format!("cannot make the root directory again: {e}"))?;
    Ok(true)
}

/// Gives every volume file whose attribute blob is not an inode a new one (the root a
/// directory). Refuses a volume where no file holds an inode: not a file system.
pub(crate) fn remake_inodes(vol: &Volume) -> Result<Vec<(u64, Kind)>, String> {
    // Refused before anything changes: no inode at all, or a blob a newer extalloc wrote.
    let (mut inodes, mut newer) = (false, None);
    each_page(vol, |files| {
        for (f, blob) in files {
            match Inode::decode(blob) {
                Some(_) => inodes = true,
                None => newer = newer.or(crate::inode::newer_version(blob).map(|v| (f.id, v))),
            }
        }
        Ok(true)
    })?;
    if !inodes {
        return Err(NO_FILE_SYSTEM.into());
    }
    // Never "repair" what a newer extalloc wrote.
    if let Some((id, v)) = newer {
        return Err(crate::inode::newer_refusal(id, v));
    }
    let mut out = Vec::new();
    each_page(vol, |files| {
        for (f, blob) in files {
            if Inode::decode(blob).is_some() || xattr::spill_owner(blob).is_some() {
                continue; // an inode, or extended attributes
            }
            let kind = if f.id == ROOT || reads_as_dir_log(vol, f.id)? {
                Kind::Dir
            } else {
                Kind::File
            };
            let mode = if kind == Kind::Dir { 0o700 } else { 0o600 };
            let mut inode = Inode::new(kind, mode, 0, 0, 0);
            inode.nlink = 1; // named or rescued by the namespace pass, which sets the count
            vol.set_attr(f.id, &inode.encode())
                .map_err(|e| format!("cannot give volume file {} an inode: {e}", f.id))?;
            // What the namespace pass relies on: the file now reads as an inode of its kind.
            debug_assert!(
                (vol.attr(f.id).ok().as_deref())
                    .and_then(Inode::decode)
                    .is_some_and(|i| i.kind == kind),
                "volume file {}: an inode set",
                f.id
            );
            out.push((f.id, kind));
        }
        Ok(true)
    })?;
    Ok(out)
}

/// True if file `id`'s data is a directory log: non-empty, every record whole and checked.
fn reads_as_dir_log(vol: &Volume, id: u64) -> Result<bool, String> {
    if vol.size(id).map_err(|e| e.to_string())? == 0 {
        return Ok(false);
    }
    let log = scan::read_log(vol, id, false, &mut NamespaceReport::default())?;
    Ok(log.problem.is_none() && log.records > 0)
}

/// Makes each file kept from a damaged table entry safe for the namespace pass: its inode
/// came from bytes that failed their check. A link count of 0 becomes 1 (an orphan is
/// only what was written whole), and a directory whose data is not a directory log
/// becomes a regular file (no log repair may cut its data).
fn distrust_kept(vol: &Volume, s: &Salvage) -> Result<Vec<(u64, String)>, String> {
    let mut out = Vec::new();
    for &(id, _) in &s.recovered {
        let blob = vol.attr(id).map_err(|e| e.to_string())?;
        let Some(mut inode) = Inode::decode(&blob) else {
            continue; // remade already (`remake_inodes`)
        };
        let mut what = Vec::new();
        if inode.nlink == 0 {
            inode.nlink = 1;
            what.push("link count 0 taken as damage, not an orphan");
        }
        let empty = vol.size(id).map_err(|e| e.to_string())? == 0;
        if inode.kind == Kind::Dir && id != ROOT && !empty && !reads_as_dir_log(vol, id)? {
            inode.kind = Kind::File;
            what.push("a directory whose data is no directory log: made a regular file");
        }
        if !what.is_empty() {
            vol.set_attr(id, &inode::rewrite(&blob, &inode))
                .map_err(|e| format!("cannot set inode {id}: {e}"))?;
            out.push((id, what.join("; ")));
        }
    }
    Ok(out)
}

/// Drops the extended attributes the namespace check finds damaged: each such inode's
/// blob loses its tail (its spill file, if any, is then stray and removed by the namespace
/// pass). Returns them with why.
fn drop_damaged_xattrs(vol: &Volume) -> Result<Vec<(u64, String)>, String> {
    let found = scan::check(vol)?.damaged_xattrs;
    for (ino, _) in &found {
        let blob = vol.attr(*ino).map_err(|e| e.to_string())?;
        let inode = Inode::decode(&blob).expect("a damaged set is found on an inode");
        vol.set_attr(*ino, &inode.encode())
            .map_err(|e| format!("cannot drop inode {ino}'s extended attributes: {e}"))?;
    }
    Ok(found)
}
