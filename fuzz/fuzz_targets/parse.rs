//! Every parser of on-disk bytes on arbitrary input: superblock (and its root), group
//! descriptor, journal record, a directory's log. None may panic; a record that decodes must
//! encode back to the same bytes. A directory run (`extalloc_fuse::dir::run`) is built from
//! names the input gives and then overwritten by the input's bytes, so the fuzzer reaches
//! the chunks' checks, which random bytes alone would never pass a header for; its index
//! (`run::Index`) looks names up in the same bytes.
#![no_main]

use extalloc::disk::format::{GroupDesc, Superblock};
use extalloc::disk::journal;
use extalloc_fuse::dir::{run, runbuild, DirLog};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Superblock::decode(data);
    let _ = Superblock::decode_with_root(data);
    let group = data.first().copied().unwrap_or(0) as u64;
    let _ = GroupDesc::decode(data, group);
    if let Some(r) = journal::decode(data) {
        let again = journal::encode(r.seq, r.durable_through, &r.ops, &r.payload);
        assert_eq!(journal::decode(&again), Some(r));
    }
    let d = DirLog::parse(data);
    assert!(d.valid_bytes <= data.len() as u64);
    // A run of the names the input's first bytes give (as many distinct as there are
    // bytes, up to 1,000), its bytes then XORed with the whole input from a place the input
    // chooses.
    let n = data.first().map_or(0, |&b| usize::from(b) * 4);
    let names: std::collections::BTreeSet<Vec<u8>> =
        (0..n).map(|i| format!("name{i}").into_bytes()).collect();
    let mut log = runbuild::build(
        names.iter().map(|n| (n.as_slice(), (7, None))),
        run::Key([data.get(1).copied().unwrap_or(0); 16]),
    );
    let from = usize::from(data.get(2).copied().unwrap_or(0)) * 64;
    for (b, x) in log.iter_mut().skip(from).zip(data) {
        *b ^= x;
    }
    let d = DirLog::parse(&log);
    assert!(
        d.entries.keys().all(|k| names.contains(k)),
        "a name no run held"
    );
    // A lookup through the run's index reads the same damaged bytes: it may refuse a
    // chunk, never panic, and never find a name the run did not hold.
    let mut read = |at: u64, len: u64| {
        let (at, len) = (at as usize, len as usize);
        log.get(at..at.saturating_add(len))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "past the end".to_string())
    };
    if let Ok(Some(index)) = run::Index::open(&mut read, 0) {
        for name in names
            .iter()
            .take(8)
            .map(|n| n.as_slice())
            .chain([&b"absent"[..]])
        {
            if let Ok(Some(_)) = index.lookup(&mut read, name) {
                assert!(names.contains(name), "a name no run held");
            }
        }
    }
});
