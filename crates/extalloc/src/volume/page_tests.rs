//! A listing in pages (`page.rs`) against the whole listing: every page size, files in
//! memory beside files only the tree holds, removals and creates between pages.

use super::tests::{device, geometry};
use super::*;

/// Every file through pages of `max`, with the pages' own promises checked on the way.
fn paged(vol: &Volume, max: usize) -> Vec<(FileInfo, Vec<u8>)> {
    let mut out: Vec<(FileInfo, Vec<u8>)> = Vec::new();
    let mut after = None;
    loop {
        let page = vol.list_page(after, max).unwrap();
        assert!(
            page.files.len() <= max,
            "{} files in a page of {max}",
            page.files.len()
        );
        if let (Some(a), Some((f, _))) = (after, page.files.first()) {
            assert!(f.id > a, "page after {a} starts at {}", f.id);
        }
        out.extend(page.files);
        match page.next {
            None => return out,
            Some(n) => {
                assert!(
                    after.is_none_or(|a| n > a),
                    "the listing moves on ({after:?} -> {n})"
                );
                after = Some(n);
            }
        }
    }
}

/// Files in memory, files evicted to the tree (a cache of a few files) and pending ones:
/// every page size lists exactly what the whole listing does, in order.
#[test]
fn pages_list_what_the_whole_listing_does() {
    let dev = device(41);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let mut ids: Vec<u64> = (0..300u64)
        .map(|i| vol.create(format!("blob {i}").as_bytes()).unwrap())
        .collect();
    vol.write(ids[7], 0, &[7u8; 5000]).unwrap();
    vol.set_file_cache(5);
    vol.checkpoint().unwrap();
    // Some files back in memory, some changed since the checkpoint, one removed.
    for &id in ids.iter().step_by(37) {
        vol.size(id).unwrap();
    }
    vol.set_attr(ids[100], b"renamed").unwrap();
    vol.unlink(ids[200]).unwrap();
    ids.remove(200);
    ids.push(vol.create(b"late").unwrap());
    let whole = vol.try_list_with_attrs().unwrap();
    assert_eq!(whole.iter().map(|(f, _)| f.id).collect::<Vec<_>>(), ids);
    for max in [1, 2, 5, 6, 64, 299, 300, 301, 10_000] {
        assert_eq!(paged(&vol, max), whole, "pages of {max}");
    }
    assert_eq!(vol.list_page(Some(u64::MAX), 4).unwrap().next, None);
    assert!(vol
        .list_page(Some(*ids.last().unwrap()), 4)
        .unwrap()
        .files
        .is_empty());
    vol.close().unwrap();
}

/// Removals and creates between pages: a file removed before its page comes is not
/// listed, one made during the listing comes after every id listed before it, and no id
/// is listed twice.
#[test]
fn changes_between_pages_list_each_file_once() {
    let dev = device(43);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let ids: Vec<u64> = (0..120u64)
        .map(|i| vol.create(&i.to_le_bytes()).unwrap())
        .collect();
    vol.set_file_cache(3);
    vol.checkpoint().unwrap();
    let (mut seen, mut after, mut made) = (Vec::new(), None, Vec::new());
    loop {
        let page = vol.list_page(after, 16).unwrap();
        seen.extend(page.files.iter().map(|(f, _)| f.id));
        let Some(n) = page.next else { break };
        after = Some(n);
        // Remove a file the listing has not reached, make a new one.
        if let Some(&ahead) = ids.iter().find(|&&id| id > n + 8) {
            vol.unlink(ahead).unwrap();
        }
        made.push(vol.create(b"new").unwrap());
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "each id once, in order"
    );
    let now: Vec<u64> = vol.try_list().unwrap().iter().map(|f| f.id).collect();
    assert_eq!(
        seen, now,
        "what a listing that ends with no change left sees"
    );
    assert!(
        made.iter().all(|id| seen.contains(id)),
        "the files made during it"
    );
    vol.close().unwrap();
}

/// A page of no files is refused, naming the setting, and nothing is read.
#[test]
fn a_page_of_nothing_is_refused() {
    let dev = device(47);
    let vol = Volume::mkfs(dev, &geometry(), 64, Policy::default()).unwrap();
    let err = vol.list_page(None, 0).unwrap_err();
    assert!(matches!(err, Error::InvalidSetting { .. }), "{err}");
    assert!(err.to_string().contains("listing page size"), "{err}");
    vol.close().unwrap();
}
