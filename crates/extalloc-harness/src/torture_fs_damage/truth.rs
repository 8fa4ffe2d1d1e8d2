//! The ground truth of an image: what the undamaged image serves (checked against the
//! run's model, and by fsck: [`fsck_problem`], which the judge runs on damaged copies too),
//! and the device places of every piece of metadata.
//!
//! Data structures: [`Truth`]: every inode (kind, bytes, paths), each metadata kind's
//! places (device byte ranges a damage may start in), and each inode's own places (its
//! file table entry, its map segment, its data: a directory's log, a link's target).
//! Invariant: an inode's own places are the only ones whose damage "hits" it, but for the
//! journal: a damaged record costs the records from it on, so damage to the journal hits
//! every inode changed after the last checkpoint. Lock order: none.

use super::image::{Built, Model, Named, BLOCK};
use super::types::{opts, runs_in, MetaKind};
use crate::corrupt::image_device;
use anyhow::{bail, Context, Result};
use extalloc::disk::device::{Device, OverlayDevice};
use extalloc::disk::format;
use extalloc::volume::Volume;
use extalloc::Policy;
use extalloc_fuse::fs::{Errno, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// What `extalloc fsck` would say of `bytes`: the first problem it reports, or why it
/// refuses (the store's check, then the volume's, then the file system's, as
/// `fsck_checked`); `None` when clean.
pub(super) fn fsck_problem(bytes: &[u8]) -> Option<String> {
    let dev = image_device(bytes);
    match extalloc::store::fsck::check(dev.as_ref()) {
        Ok(r) if r.clean() => {}
        Ok(r) => return Some(format!("store: {:?}", r.problems.first())),
        Err(e) => return Some(format!("store: {e}")),
    }
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev));
    let vol = match Volume::open(view, Policy::default()) {
        Ok(v) => v,
        Err(e) => return Some(format!("volume: {e}")),
    };
    match vol.check() {
        Ok(c) if c.clean() => {}
        Ok(c) => return Some(format!("files: {c:?}")),
        Err(e) => return Some(format!("files: {e}")),
    }
    // As `fsck`: a volume whose file 1 holds no inode holds no file system to check.
    let is_fs = vol
        .attr(ROOT)
        .ok()
        .and_then(|a| extalloc_fuse::inode::Inode::decode(&a))
        .is_some();
    match extalloc_fuse::fs::check(&vol) {
        _ if !is_fs => None,
        Ok(n) if n.clean() => None,
        Ok(n) => Some(format!("file system: {}", n.summary())),
        Err(e) => Some(format!("file system: {e}")),
    }
}

/// One inode of the truth.
#[derive(Debug, Clone)]
pub(super) struct Inode {
    pub(super) kind: Kind,
    /// A file's data or a link's target.
    pub(super) bytes: Vec<u8>,
    pub(super) paths: Vec<String>,
}

/// The ground truth of one image.
pub(super) struct Truth {
    pub(super) inodes: BTreeMap<u64, Inode>,
    /// Where damage of each kind may start (device byte ranges, never empty ones).
    pub(super) places: BTreeMap<MetaKind, Vec<Range<u64>>>,
    /// Each inode's own places: its table entry, its map, its data.
    pub(super) own: BTreeMap<u64, Vec<Range<u64>>>,
    /// Inodes whose map lives in a map segment (as of the last checkpoint).
    pub(super) long_maps: u64,
    /// Each regular file's written data, by extent: its inode and the whole blocks that
    /// hold its bytes (where a bad sector may be put).
    pub(super) file_data: Vec<(u64, Range<u64>)>,
    /// Inodes changed after the last checkpoint (their changes live in the journal only):
    /// hit by any damage to the journal's records.
    pub(super) journal_touched: std::collections::BTreeSet<u64>,
}

impl Truth {
    /// The inodes a damage over `bytes` hits.
    pub(super) fn hit(&self, bytes: &Range<u64>) -> Vec<u64> {
        let overlaps = |r: &Range<u64>| r.start < bytes.end && bytes.start < r.end;
        self.own
            .iter()
            .filter(|(_, places)| places.iter().any(overlaps))
            .map(|(&ino, _)| ino)
            .collect()
    }
}

/// Reads `built`'s undamaged image back and takes its truth; fails when the image does
/// not hold the run's model, or its check is not clean (the image is wrong, not a damage).
pub(super) fn take(built: &Built) -> Result<Truth> {
    if let Some(problem) = fsck_problem(&built.bytes) {
        bail!("the undamaged image is not clean by fsck: {problem}");
    }
    let (fs, report) = Fs::mount(
        Volume::open(image_device(&built.bytes), Policy::default())?,
        opts(),
    )
    .map_err(anyhow::Error::msg)?;
    if !report.repaired.clean() {
        bail!("mounting the undamaged image repaired {report:?}");
    }
    let found = read_all(&fs).map_err(|e| anyhow::anyhow!("reading the image back: {e}"))?;
    check_model(&built.model, &found)?;
    let mut inodes: BTreeMap<u64, Inode> = BTreeMap::new();
    for (path, n) in &built.model {
        let node = inodes.entry(n.ino).or_insert_with(|| Inode {
            kind: n.kind,
            bytes: n.bytes.clone(),
            paths: Vec::new(),
        });
        node.paths.push(path.clone());
    }
    drop(fs);
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(image_device(&built.bytes)));
    let vol = Volume::open(view.clone(), Policy::default())?;
    let mut truth = Truth {
        inodes,
        places: BTreeMap::new(),
        own: BTreeMap::new(),
        long_maps: 0,
        file_data: Vec::new(),
        journal_touched: built.journal_touched.clone(),
    };
    store_places(&mut truth, view.as_ref(), &vol)?;
    data_places(&mut truth, &vol)?;
    Ok(truth)
}

/// Every path the mounted file system serves, with its inode, kind and bytes; fails at
/// the first directory it cannot list.
pub(super) fn read_all(fs: &Fs) -> Result<Model, Errno> {
    let walked = walk(fs);
    if let Some((_, e)) = walked.failed.first() {
        return Err(*e);
    }
    let mut out = Model::new();
    for (path, (ino, kind)) in walked.served {
        let bytes = bytes_of(fs, ino, kind)?;
        out.insert(path, Named { ino, kind, bytes });
    }
    Ok(out)
}

/// What a walk of the tree found.
pub(super) struct Walked {
    /// Every path served (`/` the root), with its inode and kind.
    pub(super) served: BTreeMap<String, (u64, Kind)>,
    /// The directories whose listing failed (what they held up to then is served).
    pub(super) failed: Vec<(String, Errno)>,
}

/// Every path the mounted file system serves, each directory listed as the kernel lists
/// one (`readdirplus` calls from the position the last one ended at, until one gives
/// nothing); a directory whose listing fails is noted and the walk goes on.
pub(super) fn walk(fs: &Fs) -> Walked {
    let mut out = Walked {
        served: BTreeMap::from([("/".to_string(), (ROOT, Kind::Dir))]),
        failed: Vec::new(),
    };
    let mut todo = vec![(String::new(), ROOT)];
    // A directory listed once, whatever damage made of the tree.
    let mut seen = std::collections::BTreeSet::from([ROOT]);
    while let Some((dir, ino)) = todo.pop() {
        let (entries, failed) = list(fs, ino);
        if let Some(e) = failed {
            let path = if dir.is_empty() { "/" } else { &dir };
            out.failed.push((path.to_string(), e));
        }
        for (name, ino, kind) in entries {
            let path = format!("{dir}/{name}");
            if kind == Kind::Dir && seen.insert(ino) {
                todo.push((path.clone(), ino));
            }
            out.served.insert(path, (ino, kind));
        }
    }
    out
}

/// Directory `ino`'s entries but the dots (name, inode, kind), listed with attributes as
/// the kernel lists (a directory the mount has not read yet comes back through its name),
/// and the error that ended the listing, if one did.
fn list(fs: &Fs, ino: u64) -> (Vec<(String, u64, Kind)>, Option<Errno>) {
    let fh = match fs.opendir(ino) {
        Ok(fh) => fh,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let (mut entries, mut at, mut failed) = (Vec::new(), 0, None);
    loop {
        let mut given = 0;
        let listed = fs.readdirplus(fh, at, |name, a, next| {
            given += 1;
            at = next;
            if name != b"." && name != b".." {
                let name = String::from_utf8_lossy(name).into_owned();
                entries.push((name, a.ino, a.inode.kind));
            }
            false
        });
        if let Err(e) = listed {
            failed = Some(e);
        }
        if given == 0 || failed.is_some() {
            break;
        }
    }
    fs.releasedir(fh);
    (entries, failed)
}

/// A file's data or a link's target (nothing for other kinds).
pub(super) fn bytes_of(fs: &Fs, ino: u64, kind: Kind) -> Result<Vec<u8>, Errno> {
    match kind {
        Kind::File => {
            let size = fs.getattr(ino)?.size;
            let mut data = Vec::with_capacity(size as usize);
            while (data.len() as u64) < size {
                let piece = fs.read(ino, data.len() as u64, 1 << 20)?;
                if piece.is_empty() {
                    break;
                }
                data.extend_from_slice(&piece);
            }
            Ok(data)
        }
        Kind::Symlink => fs.readlink(ino),
        _ => Ok(Vec::new()),
    }
}

/// Fails unless `found` is exactly the model.
fn check_model(model: &Model, found: &Model) -> Result<()> {
    for (path, want) in model {
        match found.get(path) {
            None => bail!("the undamaged image lost {path}"),
            Some(got) if got != want => bail!(
                "the undamaged image serves {path} as inode {} ({:?}, {} bytes), the run made \
                 inode {} ({:?}, {} bytes){}",
                got.ino,
                got.kind,
                got.bytes.len(),
                want.ino,
                want.kind,
                want.bytes.len(),
                if got.bytes != want.bytes {
                    ", other bytes"
                } else {
                    ""
                }
            ),
            Some(_) => {}
        }
    }
    if let Some(extra) = found.keys().find(|p| !model.contains_key(*p)) {
        bail!("the undamaged image serves {extra}, which the run did not make");
    }
    Ok(())
}

/// The store's places: superblocks, descriptors, bitmaps, the journal's records.
fn store_places(truth: &mut Truth, dev: &dyn Device, vol: &Volume) -> Result<()> {
    let sb = format::read_superblock(dev)?;
    let blocks = |first: u64, end: u64| first * BLOCK..end * BLOCK;
    let sb_bytes = format::SUPERBLOCK_READ as u64;
    let backup = sb.backup_block() * BLOCK;
    let places = [
        (MetaKind::PrimarySuperblock, 0..sb_bytes),
        (MetaKind::BackupSuperblock, backup..backup + sb_bytes),
        (
            MetaKind::Descriptors,
            blocks(sb.desc_start, sb.bitmap_start),
        ),
        (
            MetaKind::Bitmaps,
            blocks(sb.bitmap_start, sb.metadata_end()),
        ),
    ];
    for (kind, r) in places {
        truth.places.insert(kind, vec![r]);
    }
    // The records from the tail (at least one byte), wrapping around the journal area.
    // An open that finds a checkpoint cut short finishes it (the journal is then empty):
    // the records are then the written blocks from the tail on.
    let area = sb.journal_blocks * BLOCK;
    let start = sb.journal_start * BLOCK;
    let tail = sb.journal_tail % area;
    let mut used = vol.statfs().journal_used_bytes;
    if used == 0 && extalloc::store::fsck::check(dev)?.journal_records > 0 {
        used = written_from(dev, start, area, tail)?;
    }
    let used = used.clamp(1, area);
    let first = start + tail..start + (tail + used).min(area);
    let mut records = Vec::from([first]);
    if tail + used > area {
        records.push(start..start + tail + used - area);
    }
    truth.places.insert(MetaKind::JournalRecords, records);
    Ok(())
}

/// Bytes of the journal area (`area` bytes from `start`) from `tail` to the end of the last
/// block before the first block of zeros.
fn written_from(dev: &dyn Device, start: u64, area: u64, tail: u64) -> Result<u64> {
    let mut block = vec![0u8; BLOCK as usize];
    let mut at = tail / BLOCK * BLOCK;
    loop {
        dev.read_at(&mut block, start + at % area)?;
        if block.iter().all(|&b| b == 0) || at + BLOCK - tail >= area {
            return Ok(at.saturating_sub(tail));
        }
        at += BLOCK;
    }
}

/// Each inode's data places (a directory's log, a link's target, a file's data), its
/// table entry and map segment.
fn data_places(truth: &mut Truth, vol: &Volume) -> Result<()> {
    let ids: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
    for id in ids {
        let size = vol.size(id)?;
        let kind = truth.inodes.get(&id).map(|n| n.kind);
        let mut own = Vec::new();
        let map = vol
            .extents(id)
            .with_context(|| format!("file {id}'s map"))?;
        let runs = match kind {
            Some(Kind::Dir) => runs_in(vol, id)?,
            _ => Vec::new(),
        };
        // Longer than the inline extents: the map lives in a map segment.
        truth.long_maps += u64::from(map.len() > 4);
        for e in map {
            let at = e.extent.start * BLOCK;
            own.push(at..at + e.extent.len * BLOCK);
            // Where a damage of the data's kind may start: the bytes the file holds.
            let live = (size.saturating_sub(e.logical * BLOCK)).min(e.extent.len * BLOCK);
            if kind == Some(Kind::File) && live > 0 && !e.unwritten {
                truth
                    .file_data
                    .push((id, at..at + live.div_ceil(BLOCK) * BLOCK));
            }
            let meta = match kind {
                Some(Kind::Dir) => MetaKind::DirLogs,
                Some(Kind::Symlink) => MetaKind::SymlinkTargets,
                _ => continue,
            };
            // A directory's blocks in a run are the run's kind, the others its log's.
            let from = e.logical * BLOCK;
            let mut cut = Vec::from([from, from + live]);
            cut.extend(runs.iter().flat_map(|r| [r.start, r.end]));
            cut.retain(|&b| b >= from && b <= from + live);
            cut.sort_unstable();
            cut.dedup();
            for piece in cut.windows(2) {
                let in_run = runs.iter().any(|r| r.contains(&piece[0]));
                let meta = if in_run { MetaKind::DirRuns } else { meta };
                let (a, b) = (at + piece[0] - from, at + piece[1] - from);
                truth.places.entry(meta).or_default().push(a..b);
            }
        }
        truth.own.insert(id, own);
    }
    table_places(truth, vol)
}

/// Each file's entry in the durable file table and its map in a map segment
/// ([`Volume::places`]): places of those kinds, and the file's own; the file tree's
/// internal nodes ([`Volume::tree_nodes`]), no file's own.
fn table_places(truth: &mut Truth, vol: &Volume) -> Result<()> {
    let nodes = vol.tree_nodes().into_iter().map(|n| n.bytes);
    truth
        .places
        .entry(MetaKind::TreeNodes)
        .or_default()
        .extend(nodes);
    for p in vol.places()? {
        let own = truth.own.entry(p.id).or_default();
        if !p.table.is_empty() {
            own.push(p.table.clone());
            let table = truth.places.entry(MetaKind::FileTable).or_default();
            table.push(p.table);
        }
        if let Some(map) = p.map.filter(|m| !m.is_empty()) {
            own.push(map.clone());
            truth.long_maps += 1;
            let maps = truth.places.entry(MetaKind::MapSegments).or_default();
            maps.push(map);
        }
    }
    Ok(())
}
