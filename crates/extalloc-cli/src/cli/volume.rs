//! The volume commands: `put` (a host file in, through the volume's write path, or by
//! key), `get` (a file out, by id or name), `rm` (a file removed), `ls`, and the file
//! summaries of `info --files` and `fsck`. Commands that only read open the device read-only under a view whose writes
//! stay in memory (`OverlayDevice`), so the journal replay of the open never changes the
//! device.
//!
//! `put` and `rm` work on plain volumes (files by id) and refuse a file system made by
//! `extalloc mount` (every file an inode, reached by path): a file put there would hold no
//! inode and the file system would no longer mount, a file removed by id would leave its
//! directory entry behind. `get` only reads, so it takes both: on a file system a regular
//! file by its path or by the inode number `ls` shows.

use anyhow::{Context, Result};
use extalloc::disk::device::FileDevice;
use extalloc::volume::{Volume, VolumeCheck};
use extalloc::Policy;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

/// Bytes copied per call.
const COPY_BYTES: usize = 1 << 20;

/// Files `ls` keeps in memory as it walks a file system (`Volume::set_file_cache`).
const LS_FILE_CACHE: usize = 4096;

/// The volume on `path`, read-only (`Volume::open_read_only`: the device is never written).
fn open_read_only(path: &Path) -> Result<Volume> {
    Volume::open_read_only(path).map_err(|e| super::mount::busy(path, e))
}

/// The volume on `path`, read-write.
fn open_read_write(path: &Path) -> Result<Volume> {
    let dev = FileDevice::open(path)?;
    Volume::open(Arc::new(dev), Policy::default()).with_context(|| format!("{}", path.display()))
}

/// Refuses a volume that holds a file system (`extalloc mount`) for `command`, which
/// works on files by id.
fn refuse_file_system(vol: &Volume, device: &Path, command: &str) -> Result<()> {
    anyhow::ensure!(
        !super::mount::is_fs(vol),
        "{}: holds a file system (made by `extalloc mount`), whose files are inodes reached \
         by path; `{command}` works on a plain volume's files by id and would break it: \
         mount it (`extalloc mount {} MOUNTPOINT`) and use the mount point instead",
        device.display(),
        device.display()
    );
    Ok(())
}

/// `extalloc put DEVICE HOST_FILE [--key KEY]`: prints the new file's id. Without a key
/// the file is streamed in under the host file's name (a new file each time); with one,
/// read whole and stored with [`Volume::put_keyed`] in place of the blob the key named.
pub fn put(device: &Path, host: &Path, key: Option<&str>) -> Result<()> {
    let mut src = std::fs::File::open(host).with_context(|| format!("{}", host.display()))?;
    let vol = open_read_write(device)?;
    refuse_file_system(&vol, device, "put")?;
    let id = match key {
        Some(key) => {
            let mut data = Vec::new();
            src.read_to_end(&mut data)
                .with_context(|| format!("reading {}", host.display()))?;
            vol.put_keyed(key.as_bytes(), &data)
                .with_context(|| format!("{}: storing {key:?}", device.display()))?
        }
        None => stream_in(&vol, &mut src, host, device)?,
    };
    vol.close()
        .with_context(|| format!("{}: sync", device.display()))?;
    println!("{id}");
    Ok(())
}

/// A new file named after `host`, holding `src`'s bytes written a chunk at a time.
fn stream_in(vol: &Volume, src: &mut std::fs::File, host: &Path, device: &Path) -> Result<u64> {
    let name = host
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id = vol.create(name.as_bytes())?;
    let mut buf = vec![0u8; COPY_BYTES];
    let mut at = 0u64;
    loop {
        let n = src
            .read(&mut buf)
            .with_context(|| format!("reading {}", host.display()))?;
        if n == 0 {
            break;
        }
        vol.write(id, at, &buf[..n])
            .with_context(|| format!("{}: writing file {id}", device.display()))?;
        at += n as u64;
    }
    Ok(id)
}

/// The id `file` names on a plain volume: a number is an id (unless `by_key`), anything
/// else the newest file whose name (key) it is. When several files have that name, a copy
/// (`copy`: `get`) takes the newest with a note on stderr saying so, and a removal is
/// refused with every id (which one is meant is the caller's to say).
fn plain_file(vol: &Volume, file: &str, by_key: bool, device: &Path, copy: bool) -> Result<u64> {
    if !by_key {
        if let Ok(id) = file.parse::<u64>() {
            return Ok(id);
        }
    }
    let ids = vol
        .find_key_all(file.as_bytes())
        .with_context(|| format!("{}: {file:?}", device.display()))?;
    let Some(&newest) = ids.first() else {
        anyhow::bail!(
            "{}: no file named {file:?}: a plain volume's files are named by id or by \
             name (`extalloc ls {}` lists both)",
            device.display(),
            device.display()
        );
    };
    if ids.len() > 1 && !copy {
        anyhow::bail!(
            "{}: {} files are named {file:?} (ids {}): name the one to remove by its id \
             (`put --key` keeps one file a name)",
            device.display(),
            ids.len(),
            ids.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if ids.len() > 1 {
        eprintln!(
            "extalloc: note: {} files are named {file:?} (ids {}); copying the newest, {newest} \
             (name one by its id; `put --key` keeps one file a name)",
            ids.len(),
            ids.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(newest)
}

/// `extalloc rm DEVICE FILE [--key]`: removes the file (its blocks are freed), durably.
pub fn rm(device: &Path, file: &str, by_key: bool) -> Result<()> {
    let vol = open_read_write(device)?;
    refuse_file_system(&vol, device, "rm")?;
    let id = plain_file(&vol, file, by_key, device, false)?;
    vol.unlink(id)
        .with_context(|| format!("{}: removing file {id}", device.display()))?;
    vol.close()
        .with_context(|| format!("{}: sync", device.display()))
}

/// `extalloc get DEVICE FILE HOST_FILE [--key]`: FILE is an id or a name on a plain
/// volume; on a file system (`extalloc mount`) a regular file's path (from its root, as
/// `ls` prints it) or its inode number.
pub fn get(device: &Path, file: &str, host: &Path, by_key: bool) -> Result<()> {
    let vol = open_read_only(device)?;
    let id = match super::mount::is_fs(&vol) {
        false => plain_file(&vol, file, by_key, device, true)?,
        true => file_in(&vol, file, device)?,
    };
    let size = vol
        .size(id)
        .with_context(|| format!("{}: file {file}", device.display()))?;
    let mut out = std::fs::File::create(host).with_context(|| format!("{}", host.display()))?;
    let mut at = 0u64;
    while at < size {
        let bytes = vol.read(id, at, COPY_BYTES as u64)?;
        out.write_all(&bytes)
            .with_context(|| format!("writing {}", host.display()))?;
        at += bytes.len() as u64;
    }
    out.sync_all()
        .with_context(|| format!("writing {}", host.display()))?;
    Ok(())
}

/// The inode of regular file `file` (a path from the root, or an inode number) in the
/// file system on `vol`, found one directory at a time, or an error that says what `file`
/// is instead.
fn file_in(vol: &Volume, file: &str, device: &Path) -> Result<u64> {
    let found = match file.parse::<u64>() {
        Ok(id) => vol
            .attr(id)
            .ok()
            .and_then(|blob| extalloc_fuse::inode::Inode::decode(&blob))
            .map(|inode| (id, inode.kind)),
        Err(_) => extalloc_fuse::fs::resolve(vol, file)
            .map_err(|e| anyhow::anyhow!("{}: {e}", device.display()))?,
    };
    match found {
        Some((id, extalloc_fuse::inode::Kind::File)) => Ok(id),
        Some((id, kind)) => anyhow::bail!(
            "{}: {file} (inode {id}) is a {}, not a regular file: `get` copies a file's data",
            device.display(),
            kind_name(kind)
        ),
        None => anyhow::bail!(
            "{}: no regular file {file} in this file system (`extalloc ls {}` lists its \
             paths and inode numbers)",
            device.display(),
            device.display()
        ),
    }
}

/// One file as `ls --json` prints it.
#[derive(serde::Serialize)]
struct Listed {
    id: u64,
    size: u64,
    extents: u64,
    blocks: u64,
    /// The attribute blob as text, or the path on a file system.
    name: String,
    /// On a file system: file, dir, symlink, fifo, socket, char, block.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    /// With `--extents`: each mapped extent.
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<Vec<Mapped>>,
}

/// One mapped extent in `ls --extents`.
#[derive(serde::Serialize)]
struct Mapped {
    logical: u64,
    start: u64,
    len: u64,
    unwritten: bool,
}

/// `extalloc ls DEVICE [--json] [--extents]`: a plain volume's files by id with their
/// attribute blobs; on a file system (`extalloc mount`) each inode a walk from the root
/// reaches, at its first path, with its kind, printed as the walk goes (one directory
/// in memory at a time: `extalloc_fuse::fs::walk`); inodes no path reaches are left out.
pub fn ls(device: &Path, json: bool, extents: bool) -> Result<()> {
    let vol = open_read_only(device)?;
    let mut out = Listing::new(json);
    if super::mount::is_fs(&vol) {
        // Each file is read once: the walk's trims keep a few thousand, not the default
        // cache (about 440 bytes a file).
        vol.set_file_cache(LS_FILE_CACHE);
        let walked = extalloc_fuse::fs::walk(&vol, |path, ino, kind| {
            let map = vol.extents(ino).map_err(|e| format!("inode {ino}: {e}"))?;
            let size = vol.size(ino).map_err(|e| format!("inode {ino}: {e}"))?;
            let listed = Listed {
                id: ino,
                size,
                extents: map.len() as u64,
                blocks: map.iter().map(|e| e.extent.len).sum(),
                name: path.to_string(),
                kind: Some(kind_name(kind)),
                map: extents.then(|| mapped(&map)),
            };
            out.print(&listed).map_err(|e| e.to_string())
        });
        // What was listed is closed (a JSON array stays one) before an error is said.
        out.end()?;
        let problems = walked.map_err(|e| anyhow::anyhow!("{}: {e}", device.display()))?;
        for p in problems {
            eprintln!("extalloc: warning: {}: {p}", device.display());
        }
        return Ok(());
    }
    let listed = |f: &extalloc::volume::FileInfo, attr: &[u8], map| Listed {
        id: f.id,
        size: f.size,
        extents: f.extents,
        blocks: f.blocks,
        name: String::from_utf8_lossy(attr).into_owned(),
        kind: None,
        map,
    };
    // Every file, or the error of a leaf that cannot be read (never a silent part).
    if extents {
        // Each file's map is read outside the pass (it may load the file): ids first.
        let files = vol.try_list()?;
        for f in files {
            let map = mapped(&vol.extents(f.id).unwrap_or_default());
            out.print(&listed(&f, &vol.attr(f.id).unwrap_or_default(), Some(map)))?;
        }
    } else {
        // One pass, printed as it goes: a tree leaf in memory, not the whole list.
        let mut printed = Ok(());
        let visited = vol.try_visit_with_attrs(|f, attr| {
            if printed.is_ok() {
                printed = out.print(&listed(&f, attr, None));
            }
        });
        // What was listed is closed (a JSON array stays one) before an error is said.
        out.end()?;
        visited?;
        return printed;
    }
    out.end()
}

/// A file's extents as `ls --extents` prints them.
fn mapped(map: &[extalloc::volume::FileExtent]) -> Vec<Mapped> {
    map.iter()
        .map(|e| Mapped {
            logical: e.logical,
            start: e.extent.start,
            len: e.extent.len,
            unwritten: e.unwritten,
        })
        .collect()
}

/// `ls`'s output, a file at a time: a Markdown table, or a JSON array.
struct Listing {
    json: bool,
    printed: u64,
}

impl Listing {
    fn new(json: bool) -> Listing {
        if !json {
            println!("| id | size | extents | blocks | name |");
            println!("|---:|---:|---:|---:|---|");
        }
        Listing { json, printed: 0 }
    }

    fn print(&mut self, f: &Listed) -> Result<()> {
        if self.json {
            let sep = if self.printed == 0 { "[" } else { "," };
            println!("{sep}\n{}", serde_json::to_string(f)?);
        } else {
            print_row(f);
        }
        self.printed += 1;
        Ok(())
    }

    fn end(self) -> Result<()> {
        if self.json {
            println!("{}]", if self.printed == 0 { "[" } else { "" });
        }
        std::io::stdout().flush()?;
        Ok(())
    }
}

fn print_row(f: &Listed) {
    let kind = f.kind.map(|k| format!(" ({k})")).unwrap_or_default();
    println!(
        "| {} | {} | {} | {} | {}{kind} |",
        f.id, f.size, f.extents, f.blocks, f.name
    );
    for m in f.map.iter().flatten() {
        println!(
            "|  | logical {} | blocks {}..{} | {} | {} |",
            m.logical,
            m.start,
            m.start + m.len,
            m.len,
            if m.unwritten { "unwritten" } else { "" }
        );
    }
}

fn kind_name(k: extalloc_fuse::inode::Kind) -> &'static str {
    use extalloc_fuse::inode::Kind;
    match k {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
        Kind::Fifo => "fifo",
        Kind::Socket => "socket",
        Kind::CharDevice => "char",
        Kind::BlockDevice => "block",
    }
}

/// The files summary of `info --files`.
pub fn info_files(device: &Path) -> Result<()> {
    let vol = open_read_only(device)?;
    // One pass, summed as it goes.
    let (mut files, mut bytes, mut extents) = (0u64, 0u64, 0u64);
    vol.try_visit_with_attrs(|f, _| {
        files += 1;
        bytes += f.size;
        extents += f.extents;
    })?;
    println!(
        "files: {files}, {bytes} bytes, {extents} extents ({:.2} per file)",
        extents as f64 / files.max(1) as f64
    );
    Ok(())
}

/// The volume's ownership check for `fsck`, if the device holds a volume.
/// With it, the open volume, so the namespace check (`mount::check_namespace`) need not
/// open and replay it again.
pub fn check(device: &Path) -> Result<Option<(VolumeCheck, Volume)>> {
    let dev = super::mount::open_read_only(device)?;
    let sb = extalloc::disk::format::read_superblock(&dev)?;
    if sb.root.is_empty() {
        return Ok(None);
    }
    let vol = open_read_only(device)?;
    Ok(Some((vol.check()?, vol)))
}
