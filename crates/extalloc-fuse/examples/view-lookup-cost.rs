//! What a lookup in a large directory costs through its run's view (`fs/runview.rs`: the
//! filter, then one entry chunk read from the volume) against one in the entries held
//! whole, and what the whole read costs: the figures `READS_PER_CHUNK` is set from.
//!
//!     cargo run --release -p extalloc-fuse --example view-lookup-cost [N ...]
//!
//! For each N (default 200,000): a directory of N empty files is made on a file device
//! in /dev/shm (`IMG` names another path), the volume remounted (the directory comes back
//! shelved with a view), then 4,000 lookups of distinct names through the view, lookups
//! until one reads the log whole (the slowest of them is that read), and 4,000 more in
//! the entries then held; each name's inode is read back the same way in both. One line
//! per N on stdout: µs per lookup each way, the whole read, and the reads per chunk it
//! is worth.

use extalloc::disk::device::{Device, FileDevice};
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use extalloc::{Geometry, Policy};
use extalloc_fuse::fs::names::NewNode;
use extalloc_fuse::fs::{Caller, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const SIZE: u64 = 4 << 30;
const ME: Caller = Caller { uid: 0, gid: 0 };

fn node(kind: Kind) -> NewNode<'static> {
    NewNode {
        kind,
        mode: 0o644,
        umask: 0,
        rdev: 0,
        target: None,
    }
}

/// `count` distinct names of the directory's `n`, in a random order.
fn names(n: u64, count: usize) -> Vec<String> {
    let mut x = 12345u64;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut set = std::collections::BTreeSet::new();
    while set.len() < count.min(n as usize) {
        set.insert(format!("f{:08}", next() % n));
    }
    let mut out: Vec<String> = set.into_iter().collect();
    for i in (1..out.len()).rev() {
        out.swap(i, next() as usize % (i + 1));
    }
    out
}

/// Looks each of `part` up in `d` (and forgets it); µs per lookup and the slowest one's.
fn lookups(fs: &Fs, d: u64, part: &[String]) -> (f64, f64) {
    let (t, mut slowest) = (Instant::now(), 0f64);
    for name in part {
        let one = Instant::now();
        let a = fs.lookup(d, name.as_bytes()).expect("a name made");
        fs.forget(a.ino, 1);
        slowest = slowest.max(one.elapsed().as_secs_f64() * 1e6);
    }
    (t.elapsed().as_secs_f64() * 1e6 / part.len() as f64, slowest)
}

fn one(n: u64, img: &PathBuf) {
    let _ = std::fs::remove_file(img);
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(img, SIZE).expect("the image"));
    let geometry = Geometry::new(4096, 32768, SIZE / 4096).expect("a geometry");
    let vol = Volume::mkfs(dev.clone(), &geometry, 4096, Policy::default()).expect("mkfs");
    let (fs, _) = Fs::mount(vol, WritebackOptions::default()).expect("mount");
    let d = fs.make(ROOT, b"d", node(Kind::Dir), ME).expect("mkdir").ino;
    for i in 0..n {
        let name = format!("f{i:08}");
        let a = fs
            .make(d, name.as_bytes(), node(Kind::File), ME)
            .expect("create");
        fs.forget(a.ino, 1);
    }
    fs.unmount().expect("unmount");
    let vol = Volume::open(dev, Policy::default()).expect("open");
    let (fs, _) = Fs::mount(vol, WritebackOptions::default()).expect("mount");
    let d = fs.lookup(ROOT, b"d").expect("the directory").ino;
    let all = names(n, n as usize);
    let (view, _) = lookups(&fs, d, &all[..4000]);
    // Until the view's cap reads the log whole: the slowest lookup is that read.
    let (mut whole_read, mut at) = (0f64, 4000);
    while at + 1000 <= all.len() - 4000 {
        let (per, slowest) = lookups(&fs, d, &all[at..at + 1000]);
        at += 1000;
        if slowest > 50.0 * per {
            whole_read = slowest;
            break;
        }
    }
    let (whole, _) = lookups(&fs, d, &all[at..at + 4000]);
    // An entry chunk's payload (4,076 bytes) holds entries of 18 bytes and the name.
    let chunks = n as f64 / (4076.0 / (18.0 + all[0].len() as f64)).floor();
    println!(
        "{n} entries: {view:.2} us a lookup through the view, {whole:.2} in entries held \
         whole; the whole read {:.1} ms, {:.0} us a chunk, worth {:.0} reads a chunk",
        whole_read / 1e3,
        whole_read / chunks,
        whole_read / chunks / (view - whole).max(0.1),
    );
    fs.unmount().expect("unmount");
    let _ = std::fs::remove_file(img);
}

fn main() {
    let parsed: Result<Vec<u64>, _> = std::env::args().skip(1).map(|a| a.parse()).collect();
    let counts = match parsed {
        Ok(v) if !v.is_empty() => v,
        Ok(_) => vec![200_000],
        Err(e) => {
            eprintln!("view-lookup-cost: an entry count is a number: {e}");
            std::process::exit(2);
        }
    };
    let img = PathBuf::from(std::env::var("IMG").unwrap_or("/dev/shm/view-lookup-cost.img".into()));
    for n in counts {
        one(n, &img);
    }
}
