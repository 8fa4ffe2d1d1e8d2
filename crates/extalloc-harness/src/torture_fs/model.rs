//! One thread's model of its directory, and the trees the file system reads back.
//!
//! Data structures: [`Model`] (the tree as the thread's operations left it, inode kinds,
//! file data, what a sync made durable, the states of the round); a [`Tree`] is a
//! directory -> name -> inode map. Invariant: `states` holds the tree after each operation
//! of the round, and `tree` is its last. Lock order: none (each thread owns its model).

use extalloc_fuse::fs::{Errno, Fs};
use extalloc_fuse::inode::Kind;
use std::collections::{BTreeMap, HashMap};

/// A thread's tree: directory -> name -> inode.
pub(super) type Tree = BTreeMap<u64, BTreeMap<Vec<u8>, u64>>;

/// An inode's extended attributes: name -> value.
pub(super) type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// The inode of an entry whose make failed with the device: any inode, or none.
pub(super) const ANY: u64 = u64::MAX;

/// One thread's model.
#[derive(Debug, Clone)]
pub(super) struct Model {
    /// The thread's own directory.
    pub(super) top: u64,
    pub(super) tree: Tree,
    pub(super) kinds: HashMap<u64, Kind>,
    /// What a file holds, as written.
    pub(super) data: HashMap<u64, Vec<u8>>,
    /// Files whose data a sync of this thread made durable, with that data.
    pub(super) synced: HashMap<u64, Vec<u8>>,
    /// Each file's and directory's extended attributes, as set (absent: none).
    pub(super) xattrs: HashMap<u64, Xattrs>,
    /// Inodes whose attributes a sync of this thread made durable, with that set.
    pub(super) xsynced: HashMap<u64, Xattrs>,
    /// The tree after each operation of the round (the first: at its start).
    pub(super) states: Vec<Tree>,
    /// States up to this index are durable (a successful sync started after them).
    pub(super) durable: usize,
    /// Files unlinked while open and still open, with what they hold (`ops::unlink_open`):
    /// no name reaches them; the round's crash finds those not closed yet still open.
    pub(super) held: Vec<(u64, Vec<u8>)>,
}

impl Model {
    pub(super) fn new(top: u64) -> Model {
        let mut tree = Tree::new();
        tree.insert(top, BTreeMap::new());
        Model {
            top,
            tree,
            kinds: HashMap::from([(top, Kind::Dir)]),
            data: HashMap::new(),
            synced: HashMap::new(),
            xattrs: HashMap::new(),
            xsynced: HashMap::new(),
            states: Vec::new(),
            durable: 0,
            held: Vec::new(),
        }
    }

    pub(super) fn dirs(&self) -> Vec<u64> {
        self.tree.keys().copied().collect()
    }

    /// Every (directory, name, inode) of the tree.
    pub(super) fn entries(&self) -> Vec<(u64, Vec<u8>, u64)> {
        self.tree
            .iter()
            .flat_map(|(&d, e)| e.iter().map(move |(n, &i)| (d, n.clone(), i)))
            .collect()
    }

    /// Is `ino` the directory `top` or below it?
    pub(super) fn below(&self, ino: u64, top: u64) -> bool {
        ino == top
            || self
                .tree
                .get(&top)
                .is_some_and(|e| e.values().any(|&c| self.below(ino, c)))
    }

    pub(super) fn names_of(&self, ino: u64) -> usize {
        self.tree
            .values()
            .map(|e| e.values().filter(|&&i| i == ino).count())
            .sum()
    }

    /// Drops what no name refers to any more.
    pub(super) fn forget_unnamed(&mut self, ino: u64) {
        if self.names_of(ino) == 0 {
            self.kinds.remove(&ino);
            self.data.remove(&ino);
            self.synced.remove(&ino);
            self.xattrs.remove(&ino);
            self.xsynced.remove(&ino);
            self.tree.remove(&ino);
        }
    }
}

/// Is `tree` the state `s`? An entry of `s` naming [`ANY`] (a make the failing device cut
/// short) may be missing from `tree` or name any inode there (an empty directory too).
pub(super) fn same(s: &Tree, tree: &Tree) -> bool {
    let mut s = s.clone();
    for (dir, entries) in s.clone() {
        for (name, ino) in entries {
            if ino != ANY {
                continue;
            }
            let slot = s.get_mut(&dir).expect("listed");
            match tree.get(&dir).and_then(|e| e.get(&name)) {
                Some(&got) => {
                    slot.insert(name, got);
                    if tree.get(&got).is_some_and(|e| e.is_empty()) {
                        s.insert(got, BTreeMap::new());
                    }
                }
                None => {
                    slot.remove(&name);
                }
            }
        }
    }
    &s == tree
}

/// What `tree` has that `s` has not (+) and the other way round (-).
pub(super) fn diff(s: &Tree, tree: &Tree) -> String {
    let flat = |t: &Tree| -> std::collections::BTreeSet<(u64, String, u64)> {
        t.iter()
            .flat_map(|(&d, e)| {
                e.iter()
                    .map(move |(n, &i)| (d, String::from_utf8_lossy(n).into_owned(), i))
            })
            .collect()
    };
    let (a, b) = (flat(s), flat(tree));
    let plus: Vec<_> = b.difference(&a).collect();
    let minus: Vec<_> = a.difference(&b).collect();
    format!("read back +{plus:?} -{minus:?}")
}

/// `ino`'s extended attributes as the file system lists them.
pub(super) fn read_xattrs(fs: &Fs, ino: u64) -> Result<Xattrs, Errno> {
    let mut set = Xattrs::new();
    for name in fs.listxattr(ino, || true)?.split(|&b| b == 0) {
        if !name.is_empty() {
            set.insert(name.to_vec(), fs.getxattr(ino, name)?);
        }
    }
    Ok(set)
}

/// The tree below `top` as the file system lists it.
pub(super) fn read_tree(fs: &Fs, top: u64) -> Result<Tree, Errno> {
    let mut tree = Tree::new();
    let mut todo = vec![top];
    while let Some(dir) = todo.pop() {
        let fh = fs.opendir(dir)?;
        let mut entries = BTreeMap::new();
        let mut kinds = Vec::new();
        // With attributes, as the kernel lists: a directory the mount has not read yet
        // comes back through its name (a plain listing may not know its kind).
        fs.readdirplus(fh, 0, |name, a, _| {
            if name != b"." && name != b".." {
                entries.insert(name.to_vec(), a.ino);
                kinds.push((a.ino, a.inode.kind));
            }
            false
        })?;
        fs.releasedir(fh);
        // The listing counted a kernel reference to each entry; a kernel lets them go.
        for &(ino, _) in &kinds {
            fs.forget(ino, 1);
        }
        todo.extend(
            kinds
                .iter()
                .filter(|(_, k)| *k == Kind::Dir)
                .map(|(i, _)| *i),
        );
        tree.insert(dir, entries);
    }
    Ok(tree)
}
