//! An allocator for a VM image format, in memory: a guest's disk is a sparse file of 64 KiB
//! clusters, each allocated on its first write. Four guests write their disks at once,
//! cluster by cluster. Through the file layer ([`Files`]: a file per guest, its logical
//! offsets, a preallocation window that grows with its stream) each guest's disk stays in
//! a few extents; the same writes through the bare [`Allocator`] with a goal after the
//! guest's previous cluster interleave, almost one extent a cluster. A discarded range
//! frees its clusters, reusable after the next commit (the format's metadata write).
//!
//! `cargo run --release -p extalloc --example vm_image` (CI runs it).

use extalloc::{
    AllocRequest, Allocator, DataRequest, Extent, FileAlloc, Files, Geometry, Policy, Result,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Blocks of 4 KiB per cluster.
const CLUSTER: u64 = 16;
/// Clusters each guest writes (256 MiB).
const CLUSTERS: u64 = 4096;

/// Runs of device-contiguous extents in a map (1: the whole disk in one extent).
fn runs(map: &BTreeMap<u64, Extent>) -> usize {
    let mut last: Option<Extent> = None;
    let mut n = 0;
    for e in map.values() {
        if last.is_none_or(|l| l.end() != e.start) {
            n += 1;
        }
        last = Some(*e);
    }
    n
}

fn geometry() -> Result<Geometry> {
    Geometry::new(4096, 32768, 1 << 20) // 4 GiB
}

/// A guest through the file layer: its file and its clusters' extents.
type Guest = (Arc<FileAlloc>, BTreeMap<u64, Extent>);

/// The four guests through the file layer: one file each, clusters at their offsets.
fn with_files() -> Result<(Files, Vec<Guest>)> {
    let files = Files::new(Allocator::new(geometry()?, Policy::default())?);
    let mut guests: Vec<_> = (1..=4)
        .map(|id| (files.create_file(id), BTreeMap::new()))
        .collect();
    for c in 0..CLUSTERS {
        for (file, map) in guests.iter_mut() {
            let e = files.allocate_data(file, &DataRequest::new(c * CLUSTER, CLUSTER))?;
            map.insert(c, e);
        }
    }
    Ok((files, guests))
}

/// The same writes through the bare allocator, a goal after each guest's last cluster.
fn bare() -> Result<Vec<BTreeMap<u64, Extent>>> {
    let alloc = Allocator::new(geometry()?, Policy::default())?;
    let mut maps = vec![BTreeMap::new(); 4];
    for c in 0..CLUSTERS {
        for (owner, map) in maps.iter_mut().enumerate() {
            let mut req = AllocRequest::new(owner as u64 + 1, CLUSTER);
            if let Some(prev) = map.get(&c.wrapping_sub(1)) {
                req = req.goal(Extent::end(prev));
            }
            map.insert(c, alloc.allocate(&req)?);
        }
    }
    Ok(maps)
}

fn main() -> Result<()> {
    let (files, mut guests) = with_files()?;
    let bare = bare()?;
    for (i, ((_, map), b)) in guests.iter().zip(&bare).enumerate() {
        println!(
            "guest {}: {} clusters in {} extents with the file layer, {} with the bare allocator",
            i + 1,
            map.len(),
            runs(map),
            runs(b)
        );
    }
    let worst = guests.iter().map(|(_, m)| runs(m)).max().unwrap_or(0);
    assert!(
        worst <= 64,
        "each guest's disk stays in a few extents: {worst}"
    );

    // Guest 2 discards its second half; its unused preallocation goes back too.
    let (file, map) = &mut guests[1];
    let freed = files.free_data(file, CLUSTERS / 2 * CLUSTER, CLUSTERS / 2 * CLUSTER)?;
    map.retain(|&c, _| c < CLUSTERS / 2);
    let unused = files.release_prealloc(file)?;
    let released = files.allocator().commit();
    files.check()?;
    println!(
        "guest 2 discarded {} blocks in {} extents ({} preallocated blocks back); {} blocks \
         reusable after the commit; free space in {} extents",
        freed.iter().map(|e| e.len).sum::<u64>(),
        freed.len(),
        unused,
        released,
        files.allocator().free_space().free_extents
    );
    Ok(())
}
