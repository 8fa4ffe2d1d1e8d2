//! The device commands: `mkfs` (everything checked before the target is touched; it makes
//! a volume) and `info` (a summary from the superblock and descriptors, or every group,
//! and the files). `fsck` is `fsck.rs`.

use super::output::counted;
use anyhow::{Context, Result};
use extalloc::disk::device::{Device, FileDevice};
use std::path::Path;

/// What `mkfs` is asked to make.
#[derive(clap::Args)]
pub struct MkfsArgs {
    /// The file (created or truncated to --size) or block device.
    pub path: std::path::PathBuf,
    /// Size (K, M, G, T); a block device's own size when omitted.
    #[arg(long)]
    pub size: Option<String>,
    #[arg(long, default_value_t = 4096)]
    pub block_size: u32,
    #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
    pub group_blocks: u64,
    /// Journal size (K, M, G); by default scaled to the device as ext4's: 4 MiB up to a
    /// 128 MiB device, 16 MiB up to 1 GiB, 32 MiB up to 2 GiB, 64 MiB above.
    #[arg(long)]
    pub journal_size: Option<String>,
    /// Overwrite a target that holds data or an extalloc device.
    #[arg(long)]
    pub force: bool,
}

/// `--block-size`: a power of two from 512 to 65536 (0 used to panic dividing by it).
fn check_block_size(block_size: u32) -> Result<()> {
    anyhow::ensure!(
        block_size.is_power_of_two() && (512..=65536).contains(&block_size),
        "--block-size {block_size}: a block is a power of two from 512 to 65536 bytes"
    );
    Ok(())
}

/// What mkfs will make, every argument checked: nothing is touched until this is known.
struct Plan {
    bytes: u64,
    geometry: extalloc::Geometry,
    journal_bytes: Option<u64>,
    journal_blocks: u64,
}

/// The journal's blocks: `journal_bytes` if given, else scaled to a device of `bytes`.
fn journal_blocks(bytes: u64, block_size: u32, journal_bytes: Option<u64>) -> u64 {
    journal_bytes.map_or_else(
        || extalloc::disk::format::default_journal_blocks(bytes, block_size),
        |j| j.div_ceil(u64::from(block_size)),
    )
}

/// mkfs's arguments checked against each other and the device's size, before the target
/// is touched.
fn plan(a: &MkfsArgs) -> Result<Plan> {
    let (path, block_size) = (&a.path, a.block_size);
    let journal_bytes = match &a.journal_size {
        Some(j) => Some(extalloc::parse_size(j).context("--journal-size")?),
        None => None,
    };
    let bytes = match &a.size {
        Some(s) => extalloc::parse_size(s).context("--size")?,
        None => FileDevice::open_read_only(path)
            .with_context(|| format!("{}: give --size to create it", path.display()))?
            .size(),
    };
    check_block_size(block_size)?;
    let blocks = bytes / u64::from(block_size);
    let geometry = extalloc::Geometry::new(block_size, a.group_blocks, blocks)
        .with_context(|| {
            format!(
                "{}: {bytes} bytes make {blocks} blocks of {block_size} bytes",
                path.display()
            )
        })
        .map_err(|e| size_refused(a, bytes, journal_bytes, e))?;
    let journal_blocks = journal_blocks(bytes, block_size, journal_bytes);
    extalloc::disk::format::Superblock::layout(&geometry, journal_blocks, [0; 16])
        .with_context(|| {
            let size = journal_blocks * u64::from(block_size);
            format!("{}: a journal of {size} bytes", path.display())
        })
        .map_err(|e| size_refused(a, bytes, journal_bytes, e))?;
    Ok(Plan {
        bytes,
        geometry,
        journal_bytes,
        journal_blocks,
    })
}

/// `e`, a refusal of `bytes` by the geometry or the layout, as "needs --size N at least"
/// when the size is below the least that holds a volume with these options
/// (`Volume::least_size`, searched only here, on the way out, and only for a journal of
/// 64 MiB or less: the search makes volumes in memory, journal included).
fn size_refused(
    a: &MkfsArgs,
    bytes: u64,
    journal_bytes: Option<u64>,
    e: anyhow::Error,
) -> anyhow::Error {
    let least = (journal_bytes.unwrap_or(0) <= 64 << 20)
        .then(|| extalloc::volume::Volume::least_size(a.block_size, a.group_blocks, journal_bytes))
        .flatten();
    match least {
        Some(least) if bytes < least => anyhow::anyhow!(
            "{}: mkfs needs --size {} at least: {bytes} bytes cannot hold a volume with these \
             options ({e:#})",
            a.path.display(),
            human(least)
        ),
        _ => e,
    }
}

/// `extalloc mkfs`.
pub fn mkfs(a: &MkfsArgs) -> Result<()> {
    let MkfsArgs {
        ref path,
        ref size,
        block_size,
        group_blocks,
        force,
        ..
    } = *a;
    let Plan {
        bytes,
        geometry,
        journal_bytes,
        journal_blocks,
    } = plan(a)?;
    let existed = path.exists();
    if existed && !force {
        refuse_overwrite(path)?;
    }
    let dev = match size {
        Some(_) => FileDevice::create(path, bytes)?,
        None => FileDevice::open(path)?,
    };
    let dev: std::sync::Arc<dyn Device> = std::sync::Arc::new(dev);
    let made =
        extalloc::disk::format::mkfs(dev.as_ref(), &geometry, journal_blocks, rand::random())
            .and_then(|sb| {
                extalloc::volume::Volume::format(dev.clone(), extalloc::Policy::default())
                    .and_then(|vol| vol.close())
                    .map(|()| sb)
            });
    let sb = match made {
        Ok(sb) => sb,
        Err(e) => {
            // Never leave a half-made file behind.
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            return Err(mkfs_failed(
                e,
                path,
                block_size,
                group_blocks,
                journal_bytes,
            ));
        }
    };
    println!(
        "{}: a volume of {} blocks of {} bytes, {}, metadata in blocks 0..{}, journal \
         {} blocks",
        path.display(),
        sb.blocks_count,
        sb.block_size,
        counted(sb.groups(), "group"),
        sb.metadata_end(),
        sb.journal_blocks
    );
    Ok(())
}

/// mkfs's error `e` on `path`, with the least `--size` that works when the device was too
/// small for a volume's journal.
fn mkfs_failed(
    e: extalloc::Error,
    path: &Path,
    block_size: u32,
    group_blocks: u64,
    journal_bytes: Option<u64>,
) -> anyhow::Error {
    let least = matches!(e, extalloc::Error::JournalTooSmall { .. })
        .then(|| extalloc::volume::Volume::least_size(block_size, group_blocks, journal_bytes))
        .flatten();
    let Some(least) = least else {
        return anyhow::Error::new(e).context(format!("{}: mkfs", path.display()));
    };
    anyhow::Error::new(e).context(format!(
        "{}: mkfs needs --size {} at least",
        path.display(),
        human(least)
    ))
}

/// A size as `--size` takes it: `640K`, `4M`, or bytes.
fn human(bytes: u64) -> String {
    match bytes {
        b if b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b % 1024 == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// `extalloc info`: the summary, each group with `groups`, the files with `files`.
pub fn info(path: &Path, groups: bool, files: bool) -> Result<()> {
    info_store(path, groups)?;
    if files {
        super::volume::info_files(path)?;
    }
    Ok(())
}

fn info_store(path: &Path, groups: bool) -> Result<()> {
    let dev = super::mount::open_read_only(path)?;
    let sb = extalloc::disk::format::read_superblock(&dev)
        .with_context(|| format!("{}", path.display()))?;
    let bs = u64::from(sb.block_size);
    println!(
        "{}: extalloc format {}, {} blocks of {bs} bytes ({:.1} GiB), {} of {} \
         blocks",
        path.display(),
        extalloc::disk::format::VERSION,
        sb.blocks_count,
        (sb.blocks_count * bs) as f64 / f64::from(1u32 << 30),
        counted(sb.groups(), "group"),
        sb.group_blocks
    );
    println!(
        "metadata in blocks 0..{} (journal {} blocks from block {}), backup superblock \
         at {}; journal tail at byte {} (sequence {}); generation {}{}",
        sb.metadata_end(),
        sb.journal_blocks,
        sb.journal_start,
        sb.backup_block(),
        sb.journal_tail,
        sb.journal_tail_seq,
        sb.generation,
        if sb.state & extalloc::disk::format::STATE_CHECKPOINTING != 0 {
            "; a checkpoint was interrupted (open repairs it)"
        } else {
            ""
        }
    );
    if !groups {
        // The descriptors only: one read of the table, no bitmap.
        let descs = extalloc::disk::format::read_descriptors(&dev, &sb)?;
        let (mut free, mut uninit, mut bad) = (0u64, 0u64, 0u64);
        for d in &descs {
            match d {
                Ok(d) => {
                    free += u64::from(d.free_blocks);
                    uninit += u64::from(d.flags & extalloc::disk::format::DESC_BITMAP_UNINIT != 0);
                }
                Err(_) => bad += 1,
            }
        }
        println!(
            "{}, {free} free blocks ({} never written), {} (from the \
             descriptors; --groups checks every bitmap)",
            counted(sb.groups(), "group"),
            counted(uninit, "group"),
            counted(bad, "corrupt descriptor"),
        );
        return Ok(());
    }
    let mut free = 0u64;
    let mut corrupt = 0u64;
    for g in 0..sb.groups() {
        match extalloc::disk::format::read_group(&dev, &sb, g) {
            Ok((desc, _)) => {
                free += u64::from(desc.free_blocks);
                println!(
                    "group {g}: {} free, largest order {:?}, tag {}",
                    desc.free_blocks, desc.largest_order, desc.class_tag
                );
            }
            Err(e) => {
                corrupt += 1;
                println!("group {g}: {e}");
            }
        }
    }
    println!(
        "{}, {free} free blocks, {}",
        counted(sb.groups(), "group"),
        counted(corrupt, "corrupt group")
    );
    Ok(())
}

/// Refuses to make a file system over `path` when it holds an extalloc device or other
/// data (a non-empty file, a block device whose first MiB is not all zeros).
fn refuse_overwrite(path: &std::path::Path) -> Result<()> {
    use std::io::Read;
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    anyhow::ensure!(
        !meta.is_dir(),
        "{}: is a directory; give a file or a block device",
        path.display()
    );
    let mut head = vec![0u8; 1 << 20];
    let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    let head = &head[..n];
    if head.starts_with(&extalloc::disk::format::MAGIC.to_le_bytes()) {
        anyhow::bail!(
            "{}: already an extalloc device; mkfs would discard everything on it \
             (give --force to do so)",
            path.display()
        );
    }
    let has_data = if meta.is_file() {
        // A file of holes only (`truncate -s 64G img`) holds nothing to lose.
        meta.len() > 0 && !extalloc::disk::device::all_holes(&f)
    } else {
        head.iter().any(|&b| b != 0)
    };
    anyhow::ensure!(
        !has_data,
        "{}: holds data ({} bytes) and is not an extalloc device; give --force to overwrite it",
        path.display(),
        if meta.is_file() { meta.len() } else { n as u64 }
    );
    Ok(())
}
