//! The torture's operations: each picks its arguments from the thread's model, calls the
//! file system, then changes the model whatever the call returned (a call the failing
//! device cut short may have happened, so the round's last state allows it: an entry a
//! failed make may have left names [`ANY`]).
//!
//! Data structures: none of their own (the [`Model`]). Invariant: an operation the model
//! says would fail (a name taken, a directory not empty, a directory below itself) is not
//! made, so any error while the device works is the file system's. Lock order: none.

use super::model::{Model, ANY};
use super::progress::Progress;
use extalloc_fuse::fs::data::SetAttr;
use extalloc_fuse::fs::names::{NewNode, RENAME_EXCHANGE};
use extalloc_fuse::fs::{Caller, Errno, Fs};
use extalloc_fuse::inode::Kind;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeMap;

/// Who makes every call (root: the torture is about names, not permissions).
const ME: Caller = Caller { uid: 0, gid: 0 };

/// `open(2)`'s `O_RDWR`, the flags a tmpfile is opened with.
const O_RDWR: i32 = 2;

/// Names a thread's directories use.
const NAMES: u32 = 10;
/// Inodes a thread keeps at most: the tree stays the size of a busy directory, not of a
/// device (rounds go on for thousands of crashes on one device).
const MAX_INODES: usize = 64;

/// One random operation, applied to the file system and then to the model; true for a
/// successful sync or fsync.
pub(super) fn step(
    fs: &Fs,
    m: &mut Model,
    rng: &mut StdRng,
    progress: &Progress,
) -> Result<bool, Errno> {
    let dir = pick(rng, &m.dirs()).expect("the top directory");
    let n = name(rng);
    let files: Vec<u64> = m
        .kinds
        .iter()
        .filter(|(_, &k)| k == Kind::File)
        .map(|(&i, _)| i)
        .collect();
    let file = pick(rng, &files);
    match rng.gen_range(0..100) {
        0..=15 => create(fs, m, rng, dir, n),
        16..=19 => tmpfile(fs, m, rng, dir, n),
        20..=31 => file.map_or(Ok(()), |f| write(fs, m, rng, f)),
        32..=36 => file.map_or(Ok(()), |f| truncate(fs, m, rng, f)),
        37..=44 => file.map_or(Ok(()), |f| link(fs, m, f, dir, n)),
        45..=53 => remove(fs, m, rng),
        54..=56 => unlink_open(fs, m, rng),
        57..=71 => rename(fs, m, rng, dir, n),
        72..=76 => close_held(fs, m, rng),
        77..=81 => exchange(fs, m, rng),
        82..=86 => xattr(fs, m, rng, file.unwrap_or(dir)),
        87..=92 => return fsync(fs, m, progress, file.unwrap_or(dir)).map(|()| true),
        _ => return sync(fs, m, progress).map(|()| true),
    }
    .map(|()| false)
}

/// A file (with nothing in it), a directory or a symbolic link, at a free name.
fn create(fs: &Fs, m: &mut Model, rng: &mut StdRng, dir: u64, n: Vec<u8>) -> Result<(), Errno> {
    if m.tree[&dir].contains_key(&n) || m.kinds.len() >= MAX_INODES {
        return Ok(());
    }
    let kind = match rng.gen_range(0..10) {
        0..=5 => Kind::File,
        6..=8 => Kind::Dir,
        _ => Kind::Symlink,
    };
    let made = make(fs, dir, &n, kind);
    let ino = *made.as_ref().unwrap_or(&ANY);
    m.tree.get_mut(&dir).unwrap().insert(n, ino);
    made?;
    m.kinds.insert(ino, kind);
    match kind {
        Kind::Dir => {
            m.tree.insert(ino, BTreeMap::new());
        }
        Kind::File => {
            m.data.insert(ino, Vec::new());
        }
        _ => {}
    }
    Ok(())
}

/// `O_TMPFILE`: a file with no name in `dir`, written, then named at a free name two times
/// in three (`linkat`) or closed unnamed (an orphan, gone at the last close; a crash
/// before it leaves one the next mount removes).
fn tmpfile(fs: &Fs, m: &mut Model, rng: &mut StdRng, dir: u64, n: Vec<u8>) -> Result<(), Errno> {
    if m.tree[&dir].contains_key(&n) || m.kinds.len() >= MAX_INODES {
        return Ok(());
    }
    let (attr, _fh) = fs.tmpfile(dir, 0o644, 0o022, O_RDWR, ME)?;
    let ino = attr.ino;
    assert_eq!(attr.inode.nlink, 0, "a tmpfile has no name");
    let data = pattern(rng);
    let written = fs.write(ino, 0, &data, false);
    let named = match (written, rng.gen_range(0..3)) {
        (Ok(_), 0) => Ok(()),
        (Ok(_), _) => {
            let linked = fs.link(ino, dir, &n, Caller::ROOT);
            m.tree.get_mut(&dir).unwrap().insert(n, ino);
            linked.map(|a| {
                fs.forget(a.ino, 1);
                m.kinds.insert(ino, Kind::File);
                m.data.insert(ino, data);
            })
        }
        (Err(e), _) => Err(e),
    };
    let closed = fs.release(ino);
    fs.forget(ino, 1);
    named.and(closed)
}

/// New bytes from the start of `file` (it grows if they run past its end).
fn write(fs: &Fs, m: &mut Model, rng: &mut StdRng, file: u64) -> Result<(), Errno> {
    let data = pattern(rng);
    m.synced.remove(&file);
    let old = m.data.get_mut(&file).unwrap();
    if old.len() < data.len() {
        old.resize(data.len(), 0);
    }
    old[..data.len()].copy_from_slice(&data);
    fs.write(file, 0, &data, false).map(|_| ())
}

/// A new size for `file`, shorter or longer.
fn truncate(fs: &Fs, m: &mut Model, rng: &mut StdRng, file: u64) -> Result<(), Errno> {
    let size = rng.gen_range(0..2 * 4096 + 10);
    m.synced.remove(&file);
    m.data.get_mut(&file).unwrap().resize(size as usize, 0);
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(file, set, ME).map(|_| ())
}

/// One more name for `file`, at a free name.
fn link(fs: &Fs, m: &mut Model, file: u64, dir: u64, n: Vec<u8>) -> Result<(), Errno> {
    if m.tree[&dir].contains_key(&n) {
        return Ok(());
    }
    let linked = fs.link(file, dir, &n, Caller::ROOT);
    m.tree.get_mut(&dir).unwrap().insert(n, file);
    fs.forget(linked?.ino, 1);
    Ok(())
}

/// Unlink of a name, or rmdir of an empty directory.
fn remove(fs: &Fs, m: &mut Model, rng: &mut StdRng) -> Result<(), Errno> {
    let Some((d, nm, ino)) = pick(rng, &m.entries()) else {
        return Ok(());
    };
    let removed = if m.kinds[&ino] == Kind::Dir {
        if !m.tree[&ino].is_empty() {
            return Ok(());
        }
        fs.rmdir(d, &nm)
    } else {
        fs.unlink(d, &nm)
    };
    m.tree.get_mut(&d).unwrap().remove(&nm);
    m.forget_unnamed(ino);
    removed
}

/// Unlink of a file's only name while it is open (a program's scratch file, a database's
/// deleted journal), then a write and a read through the open file: the inode lives on
/// with no name until [`close_held`] closes it, or the round's crash finds it open (the
/// next mount must leave no orphan and no leaked block: `fsck_dirty`, `unnamed`).
pub(super) fn unlink_open(fs: &Fs, m: &mut Model, rng: &mut StdRng) -> Result<(), Errno> {
    let only: Vec<_> = m
        .entries()
        .into_iter()
        .filter(|&(_, _, i)| m.kinds.get(&i) == Some(&Kind::File) && m.names_of(i) == 1)
        .collect();
    let Some((d, nm, ino)) = pick(rng, &only) else {
        return Ok(());
    };
    // The kernel's reference (the lookup that named it) and the open file.
    let found = fs.lookup(d, &nm)?;
    assert_eq!(found.ino, ino, "the model's name names its inode");
    if let Err(e) = fs.open(ino, O_RDWR) {
        fs.forget(ino, 1);
        return Err(e);
    }
    let mut held = m.data.get(&ino).cloned().unwrap_or_default();
    let removed = fs.unlink(d, &nm);
    m.tree.get_mut(&d).unwrap().remove(&nm);
    m.forget_unnamed(ino);
    m.held.push((ino, held.clone()));
    removed?;
    let data = pattern(rng);
    if held.len() < data.len() {
        held.resize(data.len(), 0);
    }
    held[..data.len()].copy_from_slice(&data);
    m.held.last_mut().expect("pushed above").1 = held;
    fs.write(ino, 0, &data, false)?;
    read_held(fs, m, m.held.len() - 1)
}

/// Reads a held file back whole: what the model says it holds, or `EBADMSG` (an
/// unexpected error to the round: the inode's data went astray without its name).
fn read_held(fs: &Fs, m: &Model, at: usize) -> Result<(), Errno> {
    let (ino, want) = &m.held[at];
    let got = fs.read(*ino, 0, want.len() as u32 + 4096)?;
    if got != *want {
        eprintln!(
            "torture --fs: unlinked open inode {ino} reads {} bytes, not the {} it holds",
            got.len(),
            want.len()
        );
        return Err(Errno(EBADMSG));
    }
    Ok(())
}

/// `EBADMSG`: what a held file's read gives that differs from the model.
const EBADMSG: i32 = 74;

/// Closes one file [`unlink_open`] left open, after reading it back: its last close
/// removes it.
fn close_held(fs: &Fs, m: &mut Model, rng: &mut StdRng) -> Result<(), Errno> {
    if m.held.is_empty() {
        return Ok(());
    }
    let at = rng.gen_range(0..m.held.len());
    let read = read_held(fs, m, at);
    let (ino, _) = m.held.swap_remove(at);
    let closed = fs.release(ino);
    fs.forget(ino, 1);
    read.and(closed)
}

/// A rename of an entry to `(dir, n)`: a free name, over a file, over an empty directory.
fn rename(fs: &Fs, m: &mut Model, rng: &mut StdRng, dir: u64, n: Vec<u8>) -> Result<(), Errno> {
    let Some((d, nm, ino)) = pick(rng, &m.entries()) else {
        return Ok(());
    };
    let is_dir = m.kinds[&ino] == Kind::Dir;
    if is_dir && m.below(dir, ino) {
        return Ok(());
    }
    let dst = m.tree[&dir].get(&n).copied();
    if let Some(x) = dst {
        let x_dir = m.kinds[&x] == Kind::Dir;
        if x_dir != is_dir || (x_dir && !m.tree[&x].is_empty()) {
            return Ok(());
        }
    }
    let moved = fs.rename(d, &nm, dir, &n, 0, Caller::ROOT);
    if dst != Some(ino) {
        m.tree.get_mut(&d).unwrap().remove(&nm);
        m.tree.get_mut(&dir).unwrap().insert(n, ino);
        if let Some(x) = dst {
            m.forget_unnamed(x);
        }
    }
    moved
}

/// Names of the extended attributes a thread sets.
const XATTR_NAMES: u32 = 4;

/// Sets or removes an extended attribute of a file or directory: small values stay in the
/// inode's blob, large ones (up to 6 KiB) move the set to a spill file and back.
fn xattr(fs: &Fs, m: &mut Model, rng: &mut StdRng, ino: u64) -> Result<(), Errno> {
    let name = format!("user.t{}", rng.gen_range(0..XATTR_NAMES)).into_bytes();
    m.xsynced.remove(&ino);
    let set = m.xattrs.entry(ino).or_default();
    if rng.gen_range(0..4) == 0 {
        if set.remove(&name).is_none() {
            return Ok(());
        }
        return fs.removexattr(ino, &name);
    }
    let len = match rng.gen_range(0..3) {
        0 => rng.gen_range(0..6 * 1024),
        _ => rng.gen_range(0..64),
    };
    let b: u8 = rng.gen_range(0..=255);
    let value: Vec<u8> = (0..len).map(|i| b.wrapping_add(i as u8)).collect();
    set.insert(name.clone(), value.clone());
    fs.setxattr(ino, &name, &value, 0, Caller::ROOT, &[])
}

/// `RENAME_EXCHANGE` of two entries (no directory moved below itself).
fn exchange(fs: &Fs, m: &mut Model, rng: &mut StdRng) -> Result<(), Errno> {
    let entries = m.entries();
    let (Some((d1, n1, i1)), Some((d2, n2, i2))) = (pick(rng, &entries), pick(rng, &entries))
    else {
        return Ok(());
    };
    let loops = (m.kinds[&i1] == Kind::Dir && m.below(d2, i1))
        || (m.kinds[&i2] == Kind::Dir && m.below(d1, i2));
    if loops || (d1, &n1) == (d2, &n2) {
        return Ok(());
    }
    let swapped = fs.rename(d1, &n1, d2, &n2, RENAME_EXCHANGE, Caller::ROOT);
    m.tree.get_mut(&d1).unwrap().insert(n1, i2);
    m.tree.get_mut(&d2).unwrap().insert(n2, i1);
    swapped
}

/// fsync of a file or directory: it commits every namespace change (one journal), and
/// writes back only its own file's data.
fn fsync(fs: &Fs, m: &mut Model, progress: &Progress, ino: u64) -> Result<(), Errno> {
    let marks = progress.marks();
    fs.fsync(ino)?;
    progress.durable_from(marks);
    if let Some(d) = m.data.get(&ino) {
        m.synced.insert(ino, d.clone());
    }
    // An inode's attributes are its blob (and spill file), written in the journal's
    // order: the commit makes them durable with the namespace.
    for (&i, set) in &m.xattrs {
        m.xsynced.insert(i, set.clone());
    }
    Ok(())
}

/// sync: every change and every file's data durable.
fn sync(fs: &Fs, m: &mut Model, progress: &Progress) -> Result<(), Errno> {
    let marks = progress.marks();
    fs.sync()?;
    progress.durable_from(marks);
    m.synced = m.data.clone();
    m.xsynced = m.xattrs.clone();
    Ok(())
}

/// One of `v`, if any.
fn pick<T: Clone>(rng: &mut StdRng, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())].clone())
}

/// One of the [`NAMES`] names.
fn name(rng: &mut StdRng) -> Vec<u8> {
    format!("n{}", rng.gen_range(0..NAMES)).into_bytes()
}

/// Up to three blocks and a bit of bytes, a new pattern each time.
fn pattern(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.gen_range(0..3 * 4096 + 100);
    let b: u8 = rng.gen_range(1..=255);
    (0..len).map(|i| b.wrapping_add((i / 512) as u8)).collect()
}

/// Makes `name` in `parent` (a symbolic link with a fixed target) as root; the kernel
/// forgets it at once, as after a close.
pub(super) fn make(fs: &Fs, parent: u64, name: &[u8], kind: Kind) -> Result<u64, Errno> {
    let target = (kind == Kind::Symlink).then_some(&b"target/of/a/link"[..]);
    let new = NewNode {
        kind,
        mode: 0o755,
        umask: 0o022,
        rdev: 0,
        target,
    };
    let ino = fs.make(parent, name, new, ME)?.ino;
    fs.forget(ino, 1);
    Ok(ino)
}
