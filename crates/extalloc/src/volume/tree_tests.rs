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
    let written = t.write(io, generation).unwrap();
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
