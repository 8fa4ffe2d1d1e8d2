//! The cache's map of files: a closed file with nothing cached leaves it (`contexts.rs`,
//! `Shared::forget_clean` and `sweep_clean`), and what callers see does not change.

use super::tests::{buffered, device, fill, BS};
use super::*;

/// The cache keeps no entry for a closed file once nothing of it is cached: a file closed
/// clean leaves at its close, one closed dirty when its writeback ends; a file still open
/// stays. What a later call sees is unchanged: sizes and bytes read back through the
/// volume, and a write after the close makes the entry again.
#[test]
fn closed_clean_files_leave_the_cache() {
    let dev = device(16384, 3);
    let b = buffered(&dev, 4096, WritebackOptions::default());
    let entries = |b: &Buffered| b.shared.files.lock().len();
    let empty = b.create(b"").unwrap();
    b.close_file(empty).unwrap();
    assert_eq!(entries(&b), 0, "an empty file closed leaves nothing");
    let files: Vec<u64> = (0..20)
        .map(|i| {
            let f = b.create(b"").unwrap();
            b.write(f, 0, &fill(i as u8, 3 * BS as usize + 100))
                .unwrap();
            f
        })
        .collect();
    let open = files[0];
    for &f in &files[1..] {
        b.close_file(f).unwrap();
    }
    b.sync().unwrap();
    // The workers' last trips may end just after the sync returns.
    for _ in 0..200 {
        if entries(&b) <= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(entries(&b) <= 1, "{} entries left", entries(&b));
    for (i, &f) in files.iter().enumerate() {
        assert_eq!(b.size(f).unwrap(), 3 * BS + 100);
        assert_eq!(b.read(f, 0, BS).unwrap(), fill(i as u8, BS as usize));
    }
    b.write(files[1], 3 * BS + 100, b"more").unwrap();
    assert_eq!(b.size(files[1]).unwrap(), 3 * BS + 104);
    b.close_file(open).unwrap();
    b.close_file(files[1]).unwrap();
    b.sync().unwrap();
    assert_eq!(b.read(files[1], 3 * BS + 100, 4).unwrap(), b"more");
}
