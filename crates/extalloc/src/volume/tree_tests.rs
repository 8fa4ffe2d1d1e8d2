//! The file tree against a model (`BTreeMap`): random puts and removes, checkpoints at
//! random points, the durable tree walked back after each; nothing durable is ever written
//! over, and the replaced nodes are exactly those no longer reachable.

use super::*;
use crate::error::{Corrupted, Error};
use crate::volume::walk::walk;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};

/// Nodes in memory: every block written once.
#[derive(Default)]
struct MemIo {
    blocks: HashMap<u64, Vec<u8>>,
    next: u64,
    fail_reads: BTreeSet<u64>,
}

impl NodeIo for MemIo {
    fn stamp(&self) -> Option<node::Stamp> {
        Some(node::Stamp {
            value: 0x5eed,
            since: 1,
        })
    }
    fn read_raw(&mut self, block: u64) -> Result<Vec<u8>> {
        if self.fail_reads.contains(&block) {
            return Err(Error::Corrupt {
                what: Corrupted::TreeNode { block },
                detail: "a test's read error".into(),
            });
        }
        Ok(self
            .blocks
            .get(&block)
            .cloned()
            .unwrap_or_else(|| vec![0; 4096]))
    }
    fn allocate(&mut self) -> Result<u64> {
        self.next += 1;
        Ok(self.next)
    }
    fn write(&mut self, block: u64, bytes: &[u8]) -> Result<()> {
        assert!(
            self.blocks.insert(block, bytes.to_vec()).is_none(),
            "block {block} written twice"
        );
        Ok(())
    }
}

/// A body as a file entry's: the id first.
fn body(id: u64, len: usize) -> Vec<u8> {
    let mut b = id.to_le_bytes().to_vec();
    b.resize(8 + len, (id % 251) as u8);
    b
}

/// The durable tree's entries, read back by a walk that must find no damage.
fn read_back(io: &mut MemIo, t: &Tree) -> BTreeMap<u64, Vec<u8>> {
    let w = walk(io, t.root().expect("written"), 4096, t.count()).unwrap();
    assert!(w.lost.is_empty() && w.tree.is_some(), "{:?}", w.lost);
    let mut out = BTreeMap::new();
    for l in &w.leaves {
        out.append(&mut leaf_items(&l.payload).unwrap());
    }
    let mut nodes = w.nodes.clone();
    nodes.sort_unstable();
    let mut mine = t.nodes();
    mine.sort_unstable();
    assert_eq!(nodes, mine, "the walk finds the nodes the tree names");
    out
}

/// One checkpoint: settle, write; the replaced nodes are reachable no more.
fn checkpoint(io: &mut MemIo, t: &mut Tree, generation: u64, replaced: &mut Vec<NodeRef>) {
    t.settle(io, replaced).unwrap();
    let before: BTreeSet<u64> = io.blocks.keys().copied().collect();
    let written = t.write(io, generation, 0x5eed).unwrap();
    assert!(
        written.iter().all(|b| !before.contains(b)),
        "only new blocks written"
    );
    let live: BTreeSet<NodeRef> = t.nodes().into_iter().collect();
    assert!(
        replaced.iter().all(|r| !live.contains(r)),
        "a replaced node still in use"
    );
    let unique: BTreeSet<&NodeRef> = replaced.iter().collect();
    assert_eq!(unique.len(), replaced.len(), "a node replaced twice");
    replaced.clear();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn the_tree_holds_what_the_model_holds(
        ops in proptest::collection::vec((0u64..3000, 0usize..400, any::<bool>(), 0u8..40), 1..1500)
    ) {
        let mut io = MemIo::default();
        let mut t = Tree::empty(4096);
        let mut model = BTreeMap::new();
        let mut replaced = Vec::new();
        let mut generation = 1;
        checkpoint(&mut io, &mut t, generation, &mut replaced);
        for (key, len, remove, cut) in ops {
            let key = key + 1;
            if remove {
                model.remove(&key);
                t.put(&mut io, key, None, &mut replaced).unwrap();
            } else {
                model.insert(key, body(key, len));
                t.put(&mut io, key, Some(body(key, len)), &mut replaced).unwrap();
            }
            prop_assert_eq!(t.count(), model.len() as u64);
            if cut == 0 {
                generation += 1;
                checkpoint(&mut io, &mut t, generation, &mut replaced);
                prop_assert_eq!(&read_back(&mut io, &t), &model);
            }
        }
        generation += 1;
        checkpoint(&mut io, &mut t, generation, &mut replaced);
        prop_assert_eq!(&read_back(&mut io, &t), &model);
    }
}

#[test]
fn one_change_in_a_large_tree_writes_one_path() {
    let mut io = MemIo::default();
    let mut t = Tree::empty(4096);
    let mut replaced = Vec::new();
    for id in 1..=100_000u64 {
        t.put(&mut io, id, Some(body(id, 100)), &mut replaced)
            .unwrap();
    }
    checkpoint(&mut io, &mut t, 1, &mut replaced);
    assert!(t.height() >= 1);
    let blocks = io.blocks.len();
    t.put(&mut io, 50_000, Some(body(50_000, 120)), &mut replaced)
        .unwrap();
    checkpoint(&mut io, &mut t, 2, &mut replaced);
    let path = usize::from(t.height()) + 1;
    assert_eq!(io.blocks.len() - blocks, path, "a leaf and its parents");
    t.put(&mut io, 200_000, Some(body(200_000, 10)), &mut replaced)
        .unwrap();
    t.put(&mut io, 50_001, None, &mut replaced).unwrap();
    checkpoint(&mut io, &mut t, 3, &mut replaced);
    assert!(io.blocks.len() - blocks <= 3 * path + 2);
    let back = read_back(&mut io, &t);
    assert_eq!(back.len(), 100_000);
    assert!(back.contains_key(&200_000) && !back.contains_key(&50_001));
}

#[test]
fn removing_everything_leaves_one_empty_leaf_and_a_walk_survives_damage() {
    let mut io = MemIo::default();
    let mut t = Tree::empty(4096);
    let mut replaced = Vec::new();
    for id in 1..=5000u64 {
        t.put(&mut io, id, Some(body(id, 50)), &mut replaced)
            .unwrap();
    }
    checkpoint(&mut io, &mut t, 1, &mut replaced);
    // A damaged leaf: its frames still read (their own crcs), the tree is not taken.
    let leaf = *t.nodes().last().unwrap();
    io.blocks.get_mut(&leaf.block).unwrap()[20] ^= 0xff;
    let w = walk(&mut io, t.root().unwrap(), 4096, t.count()).unwrap();
    assert!(w.tree.is_none() && w.lost.is_empty());
    let bad: Vec<_> = w.leaves.iter().filter(|l| !l.checked).collect();
    assert_eq!(bad.len(), 1);
    assert!(
        !leaf_items(&bad[0].payload).unwrap().is_empty(),
        "its frames survive"
    );
    // An internal node that cannot be read: what is under it is lost, the rest reads.
    if t.height() >= 2 {
        let inner = t.nodes()[1];
        io.fail_reads.insert(inner.block);
        let w = walk(&mut io, t.root().unwrap(), 4096, t.count()).unwrap();
        assert_eq!(w.lost.len(), 1);
        io.fail_reads.clear();
    }
    io.blocks.get_mut(&leaf.block).unwrap()[20] ^= 0xff;
    for id in 1..=5000u64 {
        t.put(&mut io, id, None, &mut replaced).unwrap();
    }
    checkpoint(&mut io, &mut t, 2, &mut replaced);
    assert_eq!((t.count(), t.height(), t.nodes().len()), (0, 0, 1));
    assert!(read_back(&mut io, &t).is_empty());
}

/// A real file entry's body: its map inline, or in a segment if `long`, or pending.
fn file_entry(id: u64, long: bool, pending: bool) -> Vec<u8> {
    use crate::volume::record::{MapRef, SegRef};
    let map = match long {
        true => MapRef::Segment(SegRef {
            seg: crate::geometry::Extent::new(1000 + id, 1),
            offset: 0,
            len: 64,
            crc: 0,
            extents: 5,
            blocks: 5,
        }),
        false => MapRef::Inline(Vec::new()),
    };
    let attr = match pending {
        true => crate::volume::publish::PENDING.to_vec(),
        false => format!("file {id}").into_bytes(),
    };
    crate::volume::table::file_body(&crate::volume::table::TableFile {
        id,
        size: 0,
        attr,
        placement: None,
        map,
    })
}

/// The ids of the entries in the leaves a walk of the marked leaves reads.
fn marked_ids(io: &mut MemIo, t: &Tree) -> (usize, BTreeSet<u64>) {
    let w = crate::volume::walk::walk_marked(io, t.root().unwrap(), 4096, t.count()).unwrap();
    assert!(w.tree.is_some(), "a whole tree");
    let mut ids = BTreeSet::new();
    for l in &w.leaves {
        ids.extend(leaf_items(&l.payload).unwrap().into_keys());
    }
    (w.leaves.len(), ids)
}

/// Each internal node written again with no marks on its children: a tree as a root
/// older than marks left it.
fn wipe_marks(io: &mut MemIo, t: &Tree) {
    for at in t.nodes() {
        let d = node::decode(&io.blocks[&at.block], at).unwrap();
        if d.level == 0 {
            continue;
        }
        let mut kids = node::decode_children(&d, at.generation).unwrap();
        kids.iter_mut().for_each(|k| k.marks = 0);
        let payload = node::encode_children(&kids);
        let bytes = node::encode(4096, (d.level, d.count), &payload, at, d.stamp);
        io.blocks.insert(at.block, bytes);
    }
}

/// Marks follow the entries through checkpoints (a long map or a pending file marks its
/// leaf and every node above it; removing it clears them), a walk of the marked leaves
/// reads only the leaves that hold one, and a tree whose internal nodes lost their marks
/// (an older root's) is found stale by the full walk and marked whole by its next write.
#[test]
fn marks_follow_the_entries_and_lead_a_walk_to_their_leaves() {
    let mut io = MemIo::default();
    let mut t = Tree::empty(4096);
    let mut replaced = Vec::new();
    for id in 1..=600 {
        t.put(
            &mut io,
            id,
            Some(file_entry(id, id == 300, id == 450)),
            &mut replaced,
        )
        .unwrap();
    }
    checkpoint(&mut io, &mut t, 1, &mut replaced);
    assert!(t.height() >= 1, "several leaves");
    assert_eq!(t.root_marks(), node::MARK_MAPS | node::MARK_PENDING);
    let (leaves, ids) = marked_ids(&mut io, &t);
    assert_eq!(leaves, 2, "the two marked leaves, of {}", t.nodes().len());
    assert!(ids.contains(&300) && ids.contains(&450) && ids.len() < 300);
    // The long map moves inline; the pending file is removed.
    t.put(
        &mut io,
        300,
        Some(file_entry(300, false, false)),
        &mut replaced,
    )
    .unwrap();
    t.put(&mut io, 450, None, &mut replaced).unwrap();
    checkpoint(&mut io, &mut t, 2, &mut replaced);
    assert_eq!(t.root_marks(), 0);
    assert_eq!(marked_ids(&mut io, &t).0, 0, "no leaf read");
    // An older root's tree: one long map, internal nodes without marks.
    t.put(
        &mut io,
        10,
        Some(file_entry(10, true, false)),
        &mut replaced,
    )
    .unwrap();
    checkpoint(&mut io, &mut t, 3, &mut replaced);
    wipe_marks(&mut io, &t);
    let w = walk(&mut io, t.root().unwrap(), 4096, t.count()).unwrap();
    let mut old = w.tree.expect("whole");
    assert!(old.stale_marks(), "the full walk finds the marks short");
    assert_eq!(old.root_marks(), node::MARK_MAPS, "found from the leaves");
    let internal = internal_of(&old);
    let before: BTreeSet<NodeRef> = old.nodes().into_iter().collect();
    checkpoint(&mut io, &mut old, 4, &mut Vec::new());
    assert!(!old.stale_marks());
    let after: BTreeSet<NodeRef> = old.nodes().into_iter().collect();
    assert_eq!(
        after.difference(&before).count(),
        internal,
        "every internal node rewritten"
    );
    let (n, ids) = marked_ids(&mut io, &old);
    assert!(n == 1 && ids.contains(&10), "{n} leaves: {ids:?}");
}

fn internal_of(t: &Tree) -> usize {
    let mut n = 0;
    let mut stack = vec![&t.root];
    while let Some(s) = stack.pop() {
        if let Some(Mem::Internal { children, .. }) = s.mem.as_deref() {
            n += 1;
            stack.extend(children.iter());
        }
    }
    n
}
