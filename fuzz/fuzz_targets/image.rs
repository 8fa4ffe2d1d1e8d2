//! Open, journal replay and fsck on damaged images. Two small images are built once: one
//! clean (committed transactions, a checkpoint, more transactions in the journal) and one
//! left by a crash in the middle of a checkpoint. The input picks one and overwrites bytes of
//! its metadata (superblock, journal, descriptors, bitmaps, backup superblock): each patch
//! is 4 bytes of offset and 1 byte of value. None of fsck, replay and open may panic; an open
//! that succeeds leaves a store whose `check()` holds while it allocates until full.
#![no_main]

use extalloc::disk::device::{Crash, Device, FaultDevice, MemDevice};
use extalloc::disk::format;
use extalloc::disk::journal::{self, Area};
use extalloc::store::{fsck, Store};
use extalloc::{AllocRequest, Error, Geometry, Policy};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

const BLOCK: u64 = 1024;
const BLOCKS: u64 = 4096;

/// An image's metadata: the front of the device up to the end of the bitmaps, and the
/// backup superblock's block (the rest holds no metadata).
struct Image {
    front: Vec<u8>,
    backup_at: u64,
    backup: Vec<u8>,
}

fn build(mid_checkpoint: bool) -> Image {
    let geometry = Geometry::new(BLOCK as u32, 512, BLOCKS).expect("geometry");
    let dev = Arc::new(FaultDevice::new(MemDevice::new(BLOCKS * BLOCK), 7));
    let store = Store::create(dev.clone(), &geometry, 24, Policy::default()).expect("mkfs");
    let mut held = Vec::new();
    for i in 0..60u64 {
        held.push(store.allocate(&AllocRequest::new(i, 1 + i % 9)).expect("room"));
        if i % 3 == 0 {
            store.free(held.swap_remove(0)).expect("free");
        }
        store.commit(&i.to_le_bytes()).expect("commit");
        if i == 30 {
            store.checkpoint().expect("checkpoint");
        }
    }
    if mid_checkpoint {
        dev.fail_after(3);
        let _ = store.checkpoint();
    }
    drop(store);
    dev.crash(Crash::Random {
        keep: 0.5,
        tear: false,
    })
    .expect("crash");
    let sb = format::read_superblock(dev.as_ref()).expect("superblock");
    let mut front = vec![0u8; (sb.metadata_end() * BLOCK) as usize];
    dev.read_at(&mut front, 0).expect("read");
    let backup_at = sb.backup_block() * BLOCK;
    let mut backup = vec![0u8; BLOCK as usize];
    dev.read_at(&mut backup, backup_at).expect("read");
    Image {
        front,
        backup_at,
        backup,
    }
}

fn images() -> &'static [Image; 2] {
    static IMAGES: OnceLock<[Image; 2]> = OnceLock::new();
    IMAGES.get_or_init(|| [build(false), build(true)])
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, patches)) = data.split_first() else {
        return;
    };
    let image = &images()[usize::from(pick & 1)];
    let (mut front, mut backup) = (image.front.clone(), image.backup.clone());
    for p in patches.chunks_exact(5) {
        let at = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
        // The metadata at the front, or (one patch in eight) the backup superblock's block.
        if at % 8 == 0 {
            let i = (at / 8) % backup.len();
            backup[i] = p[4];
        } else {
            let i = at % front.len();
            front[i] = p[4];
        }
    }
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BLOCKS * BLOCK));
    dev.write_at(&front, 0).expect("write");
    dev.write_at(&backup, image.backup_at).expect("write");
    let _ = fsck::check(dev.as_ref());
    if let Ok(sb) = format::read_superblock(dev.as_ref()) {
        let area = Area {
            start: sb.journal_start * u64::from(sb.block_size),
            len: sb.journal_blocks * u64::from(sb.block_size),
        };
        let _ = journal::replay(dev.as_ref(), area, sb.journal_tail, sb.journal_tail_seq);
    }
    if let Ok((store, _)) = Store::open(dev, Policy::default()) {
        store.allocator().check().expect("an opened store is consistent");
        let mut n = 0u64;
        loop {
            match store.allocate(&AllocRequest::new(n, 8)) {
                Ok(_) => n += 1,
                Err(Error::NoSpace { .. }) => break,
                Err(_) => break,
            }
            if n % 64 == 0 && store.commit(b"fill").is_err() {
                break;
            }
        }
        let _ = store.commit(b"fill");
        store.allocator().check().expect("still consistent after filling");
    }
});
