//! A viewed directory's merge (`compact.rs`, `merge_viewed`) that stops after writing
//! part of its new run: what it wrote is cut, so the log reads back whole.

use crate::fs::dirrun_tests::{viewed, KEPT};
use crate::fs::tests::{assert_clean, contents, device, put, remount};

/// What a merge that stopped wrote after a viewed directory's log (headerless chunks) is
/// cut (`Fs::cut_merge`): the file ends where the log does again, so the log's next read
/// finds no torn tail, the store is not marked damaged, and every name stays.
#[test]
fn a_stopped_merge_leaves_nothing_after_the_log() {
    let dev = device(309);
    let (fs, d) = viewed(&dev);
    let end = fs.ns.read().dir(d).unwrap().log_bytes;
    let vol = fs.volume().uncached(d);
    assert_eq!(vol.size(d).unwrap(), end, "the file ends with its log");
    let at = end.div_ceil(4096) * 4096;
    vol.write(d, at, &[0x5a; 3 * 4096]).unwrap();
    {
        let mut ns = fs.ns.write();
        let state = (ns.nodes.get_mut(&d).and_then(|n| n.dir.as_deref_mut())).unwrap();
        fs.cut_merge(d, state, true).unwrap();
        assert_eq!(
            state.mapped_to, 0,
            "what the log had mapped ahead is unknown again"
        );
    }
    assert_eq!(vol.size(d).unwrap(), end, "cut back to the log");
    // The log read whole (as the fallback after a stopped merge reads it) finds no tail.
    let mut found = crate::fs::NamespaceReport::default();
    crate::fs::scan::read_log(vol, d, false, &mut found).unwrap();
    assert!(found.logs.is_empty(), "{:?}", found.logs);
    put(&fs, d, "after", b"a");
    fs.unmount().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    assert_eq!(contents(&fs, "d/after"), Ok(b"a".to_vec()));
    for i in (0..KEPT).step_by(37) {
        let want = i.to_string().into_bytes();
        assert_eq!(contents(&fs, &format!("d/keep{i:04}")), Ok(want));
    }
    fs.unmount().unwrap();
    assert_clean(&dev);
}
