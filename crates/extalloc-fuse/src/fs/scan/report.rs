//! What a namespace check found, or mount repaired ([`NamespaceReport`]), and its one-line
//! summary.
//!
//! Data structures: [`NamespaceReport`]. Invariant: `clean()` is true exactly when every
//! list is empty. Lock order: none (a plain value).

/// What a namespace check found (or mount repaired).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceReport {
    /// Directories.
    pub dirs: u64,
    /// Regular files.
    pub files: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Fifos, sockets and device nodes.
    pub others: u64,
    /// Inodes no directory names (removed at mount).
    pub orphans: Vec<u64>,
    /// Inodes no name refers to whose link count says they have names: not what a crash
    /// leaves (every namespace change is atomic, and an inode's last name goes with its
    /// link count), so damage (a directory log cut short, a record lost), or a bug. Never
    /// removed: mount links them into `/lost+found` (see `lost_found`).
    pub unnamed: Vec<u64>,
    /// Inodes mount linked into `/lost+found` as `#INODE`, with their data (a directory
    /// brings what it holds).
    pub lost_found: Vec<u64>,
    /// Volume files whose attribute blob is not an inode (damage): mount refuses them, and
    /// `fsck --repair` gives each a new inode.
    pub damaged_inodes: Vec<u64>,
    /// Entries naming nothing, or a directory a second time (dropped at mount).
    pub bad_entries: Vec<String>,
    /// Link counts that disagreed with the names found (set at mount).
    pub link_counts: Vec<String>,
    /// Directory logs with a torn tail or a record that contradicts the log (cut at mount).
    pub logs: Vec<String>,
    /// Spill files of extended attributes no inode names (removed at mount).
    pub stray_xattrs: Vec<u64>,
    /// Inodes whose extended attributes are damaged, with why: mount refuses them, and
    /// `fsck --repair` drops those attributes.
    pub damaged_xattrs: Vec<(u64, String)>,
}

impl NamespaceReport {
    /// Counts one inode reached, by its kind.
    pub(crate) fn count(&mut self, kind: crate::inode::Kind) {
        use crate::inode::Kind;
        match kind {
            Kind::Dir => self.dirs += 1,
            Kind::File => self.files += 1,
            Kind::Symlink => self.symlinks += 1,
            _ => self.others += 1,
        }
    }

    /// Nothing to repair.
    pub fn clean(&self) -> bool {
        self.orphans.is_empty()
            && self.unnamed.is_empty()
            && self.damaged_inodes.is_empty()
            && self.lost_found.is_empty()
            && self.bad_entries.is_empty()
            && self.link_counts.is_empty()
            && self.logs.is_empty()
            && self.stray_xattrs.is_empty()
            && self.damaged_xattrs.is_empty()
    }

    /// A one-line summary of the repairs.
    pub fn summary(&self) -> String {
        format!(
            "{} orphans, {} damaged inodes, {} unnamed inodes{}, {} bad entries, {} wrong link \
             counts, {} damaged directory logs, {} stray and {} damaged extended attribute \
             sets",
            self.orphans.len(),
            self.damaged_inodes.len(),
            self.unnamed.len(),
            match self.lost_found.len() {
                0 => String::new(),
                n => format!(" ({n} linked into /lost+found)"),
            },
            self.bad_entries.len(),
            self.link_counts.len(),
            self.logs.len(),
            self.stray_xattrs.len(),
            self.damaged_xattrs.len()
        )
    }
}
