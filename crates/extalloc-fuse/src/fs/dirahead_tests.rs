//! Directory read-ahead through the file system (`dirahead.rs`): a walk of a listed
//! directory advises the device of each file before it is read; a read without a listing,
//! or with read-ahead off, advises nothing; the data read is the same either way.

use super::tests::{mkdir, put};
use super::*;
use extalloc::disk::device::{FaultDevice, MemDevice};
use extalloc::{Geometry, Policy};
use std::sync::Arc;

/// Whether byte `at` of the device has been advised.
fn advised(dev: &FaultDevice<MemDevice>, at: u64) -> bool {
    dev.advised().iter().any(|&(o, l)| o <= at && at < o + l)
}

/// A file system on an advice-recording device with directory `d` of `n` files of 10 KiB
/// (file i filled with byte i), written back and committed.
fn walkable(n: u8) -> (Arc<FaultDevice<MemDevice>>, Fs, u64, Vec<u64>) {
    let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 1));
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
    let d = mkdir(&fs, ROOT, "d");
    let files = (0..n)
        .map(|i| put(&fs, d, &format!("f{i:03}"), &[i; 10 << 10]))
        .collect();
    fs.sync().unwrap();
    (dev, fs, d, files)
}

/// Lists `dir` from its start as the kernel does (READDIRPLUS).
fn list(fs: &Fs, dir: u64) {
    let fh = fs.opendir(dir).unwrap();
    fs.readdirplus(fh, 0, |_, _, _| false).unwrap();
    fs.releasedir(fh);
}

/// Where file `ino`'s data starts on the device.
fn start(fs: &Fs, ino: u64) -> u64 {
    let e = fs.volume().volume().extents(ino).unwrap();
    e[0].extent.start * fs.volume().volume().block_size()
}

#[test]
fn a_walk_of_a_listed_directory_advises_every_file_before_it_is_read() {
    let (dev, fs, d, files) = walkable(40);
    list(&fs, d);
    assert!(dev.advised().is_empty(), "a listing alone advises nothing");
    for (i, &f) in files.iter().enumerate() {
        if i > 0 {
            assert!(
                advised(&dev, start(&fs, f)),
                "file {i} advised before its read"
            );
        }
        assert_eq!(fs.read(f, 0, 1 << 20).unwrap(), vec![i as u8; 10 << 10]);
    }
    let calls = dev.advised().len();
    assert!(calls < files.len() / 2, "advice in few calls ({calls})");
}

#[test]
fn reads_without_a_listing_or_with_read_ahead_off_advise_nothing() {
    let (dev, fs, d, files) = walkable(12);
    for &f in &files {
        fs.read(f, 0, 4096).unwrap();
    }
    assert!(dev.advised().is_empty(), "no listing, no walk");
    fs.set_dir_readahead(false);
    list(&fs, d);
    for (i, &f) in files.iter().enumerate() {
        assert_eq!(fs.read(f, 0, 10).unwrap(), vec![i as u8; 10]);
    }
    assert!(dev.advised().is_empty(), "read-ahead off");
    fs.set_dir_readahead(true);
    list(&fs, d);
    fs.read(files[5], 100, 10).unwrap();
    assert!(
        dev.advised().is_empty(),
        "a read not from a file's start is no step"
    );
    fs.read(files[0], 0, 10).unwrap();
    assert!(
        advised(&dev, start(&fs, files[1])),
        "the listing's first file starts a walk"
    );
}
