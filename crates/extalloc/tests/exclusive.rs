//! Exclusive open by device identity: a device open read-write is refused through every
//! other name for it (a hard link, `/proc/self/fd/N`, a loop device over its image), and
//! the in-use mark on the media names a live owner, is taken over when stale, and refuses
//! a live owner the locks cannot see (another machine, simulated by its owner record).

use extalloc::disk::device::{Device, FileDevice};
use extalloc::disk::format::{self, OwnerRecord};
use extalloc::store::Store;
use extalloc::{Error, Geometry, Policy};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests here run one at a time: a child process (`losetup`, `sleep`) shares the
/// parent's open files, and their locks, from its fork to its exec, so another test's
/// reopen in that window would meet a lock of its own process's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn image(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("extalloc-excl-{name}-{}.img", std::process::id()));
    let dev = FileDevice::create(&path, 64 << 20).unwrap();
    let geometry = Geometry::new(4096, 4096, (64 << 20) / 4096).unwrap();
    format::mkfs(&dev, &geometry, 64, [3; 16]).unwrap();
    path
}

fn store_on(path: &Path, heartbeat: Duration) -> Result<Store, Error> {
    let dev: Arc<dyn Device> = Arc::new(FileDevice::open(path)?.with_heartbeat(heartbeat));
    Ok(Store::open(dev, Policy::default())?.0)
}

fn assert_busy(r: Result<FileDevice, Error>, what: &str) {
    match r {
        Err(Error::DeviceBusy { .. }) => {}
        Err(e) => panic!("{what}: not DeviceBusy: {e}"),
        Ok(_) => panic!("{what}: a second open of a device open for writing was accepted"),
    }
}

/// A hard link, a symbolic link and `/proc/self/fd/N` name the same inode: each is
/// refused while the image is open for writing, to write and to read.
#[test]
fn aliases_of_an_open_image_are_refused() {
    let _serial = serial();
    let path = image("alias");
    let link = path.with_extension("link");
    let sym = path.with_extension("sym");
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_file(&sym);
    std::fs::hard_link(&path, &link).unwrap();
    std::os::unix::fs::symlink(&path, &sym).unwrap();
    let store = store_on(&path, Duration::from_secs(5)).unwrap();
    // Another open file of the same inode, held by this process: its /proc/self/fd name.
    let held = std::fs::File::open(&path).unwrap();
    let fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held));
    for alias in [link.as_path(), sym.as_path(), Path::new(&fd)] {
        assert_busy(
            FileDevice::open(alias),
            &format!("{} to write", alias.display()),
        );
        assert_busy(
            FileDevice::open_read_only(alias),
            &format!("{} to read", alias.display()),
        );
    }
    drop(store);
    let again = store_on(&link, Duration::from_secs(5)).unwrap();
    assert_eq!(
        again.unclean_close(),
        None,
        "the first store closed cleanly"
    );
    drop(again);
    for p in [&path, &link, &sym] {
        std::fs::remove_file(p).unwrap();
    }
}

/// A loop device over `path`, detached when dropped.
struct Loop(String);

impl Loop {
    fn attach(path: &Path) -> Loop {
        assert!(
            rustix_is_root(),
            "this test needs root (loop devices): run it as root, as CI does"
        );
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(path)
            .output()
            .expect("running losetup (util-linux) to attach a loop device");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop(String::from_utf8(out.stdout).unwrap().trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
}

/// The image open through its file refuses a loop device over it (to write and to read),
/// and the loop device open refuses the file; so does a second loop device over the same
/// image. Before, both opens were accepted and the second store's checkpoints overwrote
/// the first's.
#[test]
fn a_loop_device_over_an_open_image_is_refused() {
    let _serial = serial();
    let path = image("loop");
    let lo = Loop::attach(&path);
    let store = store_on(&path, Duration::from_secs(5)).unwrap();
    assert_busy(
        FileDevice::open(Path::new(&lo.0)),
        "the loop device to write",
    );
    assert_busy(
        FileDevice::open_read_only(Path::new(&lo.0)),
        "the loop device to read",
    );
    drop(store);
    let through_loop = store_on(Path::new(&lo.0), Duration::from_secs(5)).unwrap();
    assert_busy(
        FileDevice::open(&path),
        "the image under an open loop device",
    );
    let lo2 = Loop::attach(&path);
    assert_busy(
        FileDevice::open(Path::new(&lo2.0)),
        "a second loop device over the image",
    );
    match FileDevice::open(Path::new(&lo.0)) {
        Err(Error::DeviceBusy { .. }) => {}
        other => panic!(
            "the same block device twice (O_EXCL, flock): {:?}",
            other.err()
        ),
    }
    drop(through_loop);
    drop((lo2, lo));
    store_on(&path, Duration::from_secs(5)).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// Leaves `path` marked in use by `owner`, as a store that crashed (or still runs
/// elsewhere) leaves it.
fn mark_in_use(path: &Path, owner: &OwnerRecord) {
    let dev = FileDevice::open(path).unwrap();
    let mut sb = format::read_superblock(&dev).unwrap();
    sb.state |= format::STATE_IN_USE;
    sb.owner = owner.nonce;
    sb.generation += 1;
    format::write_superblock(&dev, &sb).unwrap();
    format::write_owner(&dev, owner).unwrap();
    dev.flush().unwrap();
}

fn other_host(interval_ms: u32) -> OwnerRecord {
    OwnerRecord {
        interval_ms,
        nonce: 77,
        boot_id: [0xab; 16],
        pid_ns: 4026531836,
        pid: 1234,
        start_time: 99,
        host: "another-host".into(),
        ..OwnerRecord::default()
    }
}

/// Stale marks are taken over: a process of this boot that is gone and a previous boot of
/// this host at once; another machine whose heartbeat stands still after two of its
/// intervals and a second. The store says whose close was unclean.
#[test]
fn a_stale_mark_is_taken_over() {
    let _serial = serial();
    let path = image("stale");
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let dead = OwnerRecord {
        pid: dead_pid,
        nonce: 11,
        start_time: 1,
        ..OwnerRecord::here(11, 5000)
    };
    let rebooted = OwnerRecord {
        boot_id: [0x11; 16],
        nonce: 12,
        ..OwnerRecord::here(12, 5000)
    };
    for (owner, what) in [(dead, "a dead process"), (rebooted, "an earlier boot")] {
        mark_in_use(&path, &owner);
        let started = Instant::now();
        let store = store_on(&path, Duration::from_secs(5)).unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{what}: no wait"
        );
        assert_eq!(store.unclean_close(), Some(owner.nonce), "{what}");
    }
    mark_in_use(&path, &other_host(100));
    let started = Instant::now();
    let store = store_on(&path, Duration::from_millis(100)).unwrap();
    // Watched for 2 x 100 ms + 1 s, then its own claim checked as long again.
    assert!(
        started.elapsed() >= Duration::from_millis(2400),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.unclean_close(), Some(77));
    drop(store);
    std::fs::remove_file(&path).unwrap();
}

/// A live owner is refused with its name: another machine whose heartbeat moves, and a
/// running process of this machine (at once, no wait).
#[test]
fn a_live_mark_is_refused() {
    let _serial = serial();
    let path = image("live");
    let owner = other_host(100);
    mark_in_use(&path, &owner);
    let stop = Arc::new(AtomicBool::new(false));
    let beating = {
        let (path, stop, mut owner) = (path.clone(), stop.clone(), owner.clone());
        std::thread::spawn(move || {
            // The other host's heartbeat, written to the image past every lock.
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                owner.sequence += 1;
                std::os::unix::fs::FileExt::write_all_at(&f, &owner.encode(), format::OWNER_OFFSET)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    match store_on(&path, Duration::from_secs(5)) {
        Err(Error::DeviceInUse { owner, why, .. }) => {
            assert!(owner.contains("another-host"), "{owner}");
            assert!(why.contains("heartbeat"), "{why}");
        }
        other => panic!("a live owner on another host: {:?}", other.err()),
    }
    stop.store(true, Ordering::Relaxed);
    beating.join().unwrap();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let running = OwnerRecord {
        pid: sleeper.id(),
        start_time: format::process_start_time(sleeper.id()).unwrap(),
        ..OwnerRecord::here(21, 5000)
    };
    mark_in_use(&path, &running);
    let started = Instant::now();
    match store_on(&path, Duration::from_secs(5)) {
        Err(Error::DeviceInUse { owner, .. }) => {
            assert!(owner.contains(&format!("pid {}", sleeper.id())), "{owner}")
        }
        other => panic!("a running owner on this machine: {:?}", other.err()),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused without waiting"
    );
    sleeper.kill().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Killed, not yet reaped: a zombie holds no file and no lock, and owns nothing.
    assert_eq!(
        format::process_start_time(sleeper.id()),
        None,
        "a zombie is gone"
    );
    sleeper.wait().unwrap();
    assert_eq!(
        store_on(&path, Duration::from_secs(5))
            .unwrap()
            .unclean_close(),
        Some(21),
        "once its process is gone, the mark is stale"
    );
    std::fs::remove_file(&path).unwrap();
}

/// An open store beats: its owner record names this process and its sequence moves; a
/// clean close clears the mark and the record.
#[test]
fn an_open_store_beats_and_a_close_clears_its_mark() {
    let _serial = serial();
    let path = image("beat");
    let read = || {
        let f = std::fs::File::open(&path).unwrap();
        let mut b = [0u8; format::OWNER_BYTES];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, format::OWNER_OFFSET).unwrap();
        OwnerRecord::decode(&b)
    };
    let store = store_on(&path, Duration::from_millis(20)).unwrap();
    let first = read().expect("an owner record while open");
    assert_eq!(first.pid, std::process::id());
    assert_eq!(first.interval_ms, 20);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        read().unwrap().sequence > first.sequence,
        "the heartbeat moves"
    );
    drop(store);
    assert_eq!(read(), None, "a clean close clears the record");
    let dev = FileDevice::open_read_only(&path).unwrap();
    let report = extalloc::store::fsck::check(&dev).unwrap();
    assert!(!report.in_use && report.owner.is_none(), "{report:?}");
    std::fs::remove_file(&path).unwrap();
}

/// An owner whose device another opener took over (as one does after this owner's
/// heartbeat stood still: a paused process or machine) writes nothing more: its next beat
/// reads the record back, finds the new owner's, and latches the store; the commit after
/// fails with `IoLatched`, and not a byte of the image changes, the close included.
#[test]
fn an_owner_taken_over_writes_nothing_more() {
    let _serial = serial();
    let path = image("takenover");
    let store = store_on(&path, Duration::from_millis(100)).unwrap();
    let a = store
        .allocate(&extalloc::alloc::AllocRequest::new(1, 8))
        .unwrap();
    store.commit(b"before").unwrap();
    // The new owner's claim, written past every lock as another machine's would be.
    let newcomer = other_host(1);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &newcomer.encode(), format::OWNER_OFFSET).unwrap();
    f.sync_all().unwrap();
    let taken = std::fs::read(&path).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    store.free(a).unwrap_or(());
    let e = store.commit(b"after").unwrap_err();
    match &e {
        Error::IoLatched { cause, .. } => assert!(cause.contains("took the device over"), "{e}"),
        other => panic!("not latched: {other}"),
    }
    drop(store);
    assert!(
        std::fs::read(&path).unwrap() == taken,
        "the old owner wrote after the takeover"
    );
    let rec = format::read_owner(&FileDevice::open_read_only(&path).unwrap()).unwrap();
    assert_eq!(rec.map(|r| r.nonce), Some(newcomer.nonce));
    std::fs::remove_file(&path).unwrap();
}
