//! `Volume::shutdown`: a shutdown through a shared reference, racing a writer thread.

use super::tests::{device, geometry, pattern, BS};
use super::*;
use crate::disk::device::Crash;

/// A shutdown through a shared reference while another thread writes: every write that
/// returned before it is durable (a power cut right after loses none), every later change
/// or commit is refused with `Closed`, reads go on, and a second shutdown or a close is
/// harmless.
#[test]
fn a_shutdown_through_an_arc_keeps_what_came_before_and_refuses_what_comes_after() {
    let dev = device(9);
    let vol = Arc::new(Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap());
    let b = vol.create(b"b").unwrap();
    let writer = {
        let vol = vol.clone();
        std::thread::spawn(move || {
            let mut done = 0u64;
            loop {
                match vol.write(b, done * BS, &pattern(done, BS as usize)) {
                    Ok(()) => done += 1,
                    Err(Error::Closed) => return done,
                    Err(e) => panic!("write {done}: {e}"),
                }
            }
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(30));
    vol.shutdown().unwrap();
    let done = writer.join().unwrap();
    assert!(done > 0, "the writer ran before the shutdown");
    assert!(matches!(vol.write(b, 0, b"x"), Err(Error::Closed)));
    assert!(matches!(vol.create(b""), Err(Error::Closed)));
    assert!(matches!(vol.sync(), Err(Error::Closed)));
    assert_eq!(vol.size(b).unwrap(), done * BS, "reads go on");
    vol.shutdown().unwrap();
    let vol = Arc::try_unwrap(vol)
        .ok()
        .expect("the writer's reference is gone");
    vol.close().unwrap();
    dev.fail_writes(true);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.size(b).unwrap(), done * BS);
    for i in [0, done / 2, done - 1] {
        assert_eq!(
            vol.read(b, i * BS, BS).unwrap(),
            pattern(i, BS as usize),
            "block {i}"
        );
    }
    assert!(vol.check().unwrap().clean());
}
