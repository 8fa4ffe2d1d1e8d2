//! The memory a `find -delete` walk of one large directory costs the file system (no
//! FUSE): gnulib's fts lists 100,000 names at a time, the handle open, and removes each
//! batch in inode order (unrelated to the run's hashes, so a chunk read a name).
//!
//!     cargo run --release -p extalloc-fuse --example walk-memory N   # makes the image
//!     MALLOC_MMAP_THRESHOLD_=65536 target/release/examples/walk-memory 0   # the walk
//!
//! The first makes a directory of N empty files in /dev/shm/walk-memory.img (4 KiB
//! blocks, 8 GiB); the second, a fresh process as a daemon after a remount would be (the
//! daemon's malloc threshold given through the environment), mounts it and walks it,
//! printing its resident memory after the mount and after each batch on stderr.
//! `FILE_CACHE` sets the volume's file cache (files) and the node cache (an eighth), as
//! the daemon's `--file-cache` does.
use extalloc::disk::device::{Device, FileDevice};
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use extalloc::{Geometry, Policy};
use extalloc_fuse::fs::names::NewNode;
use extalloc_fuse::fs::{Caller, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use std::sync::Arc;

fn rss() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS"))
        .unwrap()
        .to_string()
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().unwrap());
    let img = std::path::PathBuf::from("/dev/shm/walk-memory.img");
    let size = 8u64 << 30;
    if n == 0 {
        return walk(&img);
    }
    let _ = std::fs::remove_file(&img);
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(&img, size).unwrap());
    let geometry = Geometry::new(4096, 32768, size / 4096).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 4096, Policy::default()).unwrap();
    let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
    let node = |kind| NewNode {
        kind,
        mode: 0o644,
        umask: 0,
        rdev: 0,
        target: None,
    };
    let me = Caller { uid: 0, gid: 0 };
    let d = fs.make(ROOT, b"d", node(Kind::Dir), me).unwrap().ino;
    for i in 0..n {
        let a = fs
            .make(d, format!("f{i:08}").as_bytes(), node(Kind::File), me)
            .unwrap();
        fs.forget(a.ino, 1);
    }
    fs.unmount().unwrap();
}

fn walk(img: &std::path::Path) {
    let dev: Arc<dyn Device> = Arc::new(FileDevice::open(img).unwrap());
    let vol = Volume::open(dev, Policy::default()).unwrap();
    let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
    // As the daemon sets them (`mount.rs`), from `FILE_CACHE` (files; default 262,144).
    let files = std::env::var("FILE_CACHE").map_or(262_144, |v| v.parse().expect("a count"));
    fs.volume().volume().set_file_cache(files);
    fs.set_node_cache(files / 8);
    eprintln!("after mount {}", rss());
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    let fh = fs.opendir(d).unwrap();
    let (mut from, mut names) = (0, Vec::new());
    // fts: 100,000 at a time, each batch removed (by inode) before the next is read.
    loop {
        let mut batch = Vec::new();
        fs.readdir(fh, from, |name, ino, _, next| {
            if batch.len() == 100_000 {
                return true;
            }
            if name != b"." && name != b".." {
                batch.push((ino, name.to_vec()));
            }
            from = next;
            false
        })
        .unwrap();
        if batch.is_empty() {
            break;
        }
        batch.sort();
        for (_, name) in &batch {
            fs.unlink(d, name).unwrap();
        }
        names.push(batch.len());
        eprintln!("after a batch of {} {}", batch.len(), rss());
        let _ = fs.sync();
    }
    fs.releasedir(fh);
    eprintln!("after the walk {}", rss());
    fs.unmount().unwrap();
}
