//! The volume commands: `put` (a host file in, through the volume's write path), `get` (a
//! file out), `ls`, and the file summaries of `info --files` and `fsck`. Commands that only
//! read open the device read-only under a view whose writes stay in memory
//! (`OverlayDevice`), so the journal replay of the open never changes the device.

use anyhow::{Context, Result};
use extalloc::disk::device::{Device, FileDevice, OverlayDevice};
use extalloc::volume::{Volume, VolumeCheck};
use extalloc::Policy;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

/// Bytes copied per call.
const COPY_BYTES: usize = 1 << 20;

/// The volume on `path`, read-only (the device under a memory overlay).
pub fn open_read_only(path: &Path) -> Result<Volume> {
    let dev = FileDevice::open_read_only(path)?;
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(Arc::new(dev)));
    Volume::open(view, Policy::default()).with_context(|| format!("{}", path.display()))
}

/// `extalloc put DEVICE HOST_FILE`: prints the new file's id.
pub fn put(device: &Path, host: &Path) -> Result<()> {
    let mut src = std::fs::File::open(host).with_context(|| format!("{}", host.display()))?;
    let dev = FileDevice::open(device)?;
    let vol = Volume::open(Arc::new(dev), Policy::default())
        .with_context(|| format!("{}", device.display()))?;
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
    vol.close()
        .with_context(|| format!("{}: sync", device.display()))?;
    println!("{id}");
    Ok(())
}

/// `extalloc get DEVICE ID HOST_FILE`.
pub fn get(device: &Path, id: u64, host: &Path) -> Result<()> {
    let vol = open_read_only(device)?;
    let size = vol.size(id)?;
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

/// One file as `ls --json` prints it.
#[derive(serde::Serialize)]
struct Listed {
    id: u64,
    size: u64,
    extents: u64,
    blocks: u64,
    name: String,
}

/// `extalloc ls DEVICE [--json]`.
pub fn ls(device: &Path, json: bool) -> Result<()> {
    let vol = open_read_only(device)?;
    let files: Vec<Listed> = vol
        .list()
        .into_iter()
        .map(|f| Listed {
            name: String::from_utf8_lossy(&vol.attr(f.id).unwrap_or_default()).into_owned(),
            id: f.id,
            size: f.size,
            extents: f.extents,
            blocks: f.blocks,
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&files)?);
        return Ok(());
    }
    println!("| id | size | extents | blocks | name |");
    println!("|---:|---:|---:|---:|---|");
    for f in &files {
        println!(
            "| {} | {} | {} | {} | {} |",
            f.id, f.size, f.extents, f.blocks, f.name
        );
    }
    Ok(())
}

/// The files summary of `info --files`.
pub fn info_files(device: &Path) -> Result<()> {
    let vol = open_read_only(device)?;
    let files = vol.list();
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let extents: u64 = files.iter().map(|f| f.extents).sum();
    println!(
        "files: {}, {bytes} bytes, {extents} extents ({:.2} per file)",
        files.len(),
        extents as f64 / files.len().max(1) as f64
    );
    Ok(())
}

/// The volume's ownership check for `fsck`, if the device holds a volume.
pub fn check(device: &Path) -> Result<Option<VolumeCheck>> {
    let dev = FileDevice::open_read_only(device)?;
    let sb = extalloc::disk::format::read_superblock(&dev)?;
    if sb.root.is_empty() {
        return Ok(None);
    }
    Ok(Some(open_read_only(device)?.check()?))
}
