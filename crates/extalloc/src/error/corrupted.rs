//! [`Corrupted`]: what [`Error::Corrupt`](super::Error::Corrupt) found damaged, as a value a
//! caller can match (the group, the journal record, the block it names), printed as the
//! error's message has always named it.
//!
//! Data structures: one enum, a variant per structure with its coordinates. Invariant: the
//! `Display` of each variant is the name the message gives it (`descriptor of group 3`),
//! so a message reads the same whether it was made from a string or from this. Locks: none.

use std::fmt;

/// The on-disk structure (or the part of one) that failed its checksum or said something
/// impossible: the `what` of [`Error::Corrupt`](super::Error::Corrupt).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corrupted {
    /// The superblock (the primary, or the backup read in its place).
    Superblock,
    /// The caller's root record kept in the superblock.
    SuperblockRoot,
    /// A group's descriptor.
    Descriptor {
        /// The group.
        group: u64,
    },
    /// A group's bitmap.
    Bitmap {
        /// The group.
        group: u64,
    },
    /// A group as a whole: its descriptor and bitmap disagree, or it is held used since it
    /// failed its checks, or a change found its blocks in the wrong state.
    Group {
        /// The group.
        group: u64,
    },
    /// A record of the journal.
    JournalRecord {
        /// Its sequence number.
        seq: u64,
    },
    /// The volume's own metadata in a record or a table (an entry, a change, a frame).
    VolumeMetadata,
    /// The volume's root record (which file table or tree is the current one).
    VolumeRoot,
    /// The volume's file table of the older format, at the area the root names.
    FileTable {
        /// The area's first block.
        start: u64,
        /// The area's length in blocks.
        len: u64,
        /// The head of its index chain (0: none).
        head: u64,
    },
    /// An index block of the older file table's area.
    TableIndex {
        /// Its block.
        block: u64,
    },
    /// The volume's file tree, from the root at `root_block`.
    FileTree {
        /// Its root node's block.
        root_block: u64,
    },
    /// A node of the volume's file tree.
    TreeNode {
        /// Its block.
        block: u64,
    },
    /// A volume file (its extent map, adopted at open).
    File {
        /// The file's id.
        id: u64,
    },
    /// A volume file's extent map, in the map segment (or first run) at `segment`.
    FileMap {
        /// The file's id.
        id: u64,
        /// The first block of the segment.
        segment: u64,
    },
    /// Something of the kinds above, found while replaying a journal record.
    InJournalRecord {
        /// What was damaged.
        what: Box<Corrupted>,
        /// The record's sequence number.
        seq: u64,
    },
}

impl fmt::Display for Corrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corrupted::Superblock => f.write_str("superblock"),
            Corrupted::SuperblockRoot => f.write_str("superblock root"),
            Corrupted::Descriptor { group } => write!(f, "descriptor of group {group}"),
            Corrupted::Bitmap { group } => write!(f, "bitmap of group {group}"),
            Corrupted::Group { group } => write!(f, "group {group}"),
            Corrupted::JournalRecord { seq } => write!(f, "journal record {seq}"),
            Corrupted::VolumeMetadata => f.write_str("volume metadata"),
            Corrupted::VolumeRoot => f.write_str("volume root"),
            // As the message gave the area (the root's reference to it) before.
            Corrupted::FileTable { start, len, head } => write!(
                f,
                "volume file table at SideRef {{ extent: Extent {{ start: {start}, len: {len} }}, \
                 head: {head} }}"
            ),
            Corrupted::TableIndex { block } => write!(f, "volume table index block {block}"),
            Corrupted::FileTree { root_block } => {
                write!(f, "volume file tree at block {root_block}")
            }
            Corrupted::TreeNode { block } => {
                write!(f, "volume file tree node at block {block}")
            }
            Corrupted::File { id } => write!(f, "volume file {id}"),
            Corrupted::FileMap { id, segment } => write!(
                f,
                "the map of volume file {id} in the map segment at block {segment}"
            ),
            Corrupted::InJournalRecord { what, seq } => {
                write!(f, "{what} in journal record {seq}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each part is named as the messages named it when `what` was a string.
    #[test]
    fn parts_print_as_the_messages_named_them() {
        let cases = [
            (Corrupted::Superblock, "superblock"),
            (Corrupted::Descriptor { group: 3 }, "descriptor of group 3"),
            (Corrupted::Bitmap { group: 2 }, "bitmap of group 2"),
            (Corrupted::JournalRecord { seq: 9 }, "journal record 9"),
            (
                Corrupted::FileTable {
                    start: 40,
                    len: 8,
                    head: 0,
                },
                "volume file table at SideRef { extent: Extent { start: 40, len: 8 }, head: 0 }",
            ),
            (
                Corrupted::InJournalRecord {
                    what: Box::new(Corrupted::TreeNode { block: 7 }),
                    seq: 12,
                },
                "volume file tree node at block 7 in journal record 12",
            ),
        ];
        for (what, text) in cases {
            assert_eq!(what.to_string(), text);
        }
    }
}
