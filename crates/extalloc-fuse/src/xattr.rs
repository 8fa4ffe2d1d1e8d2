//! Extended attributes as the volume keeps them: inline in the inode's attribute blob when
//! they are small, else in a spill file of their own.
//!
//! Data structures:
//!
//! - [`Xattrs`]: an inode's attributes, full name (`user.x`) -> value, in name order. Its
//!   encoding ([`encode_set`]): `count u32 | (name length u8 | value length u32 | name |
//!   value)*`, little endian.
//! - The **tail** of an inode's blob (the bytes after its [`Inode`](crate::inode)'s head:
//!   64 bytes, 80 with a birth time):
//!   empty (no attributes), `1 | set` (inline, when the whole blob stays within the
//!   volume's attribute limit), or `2 | spill file id u64`.
//! - A **spill file**: a volume file whose attribute blob is [`SPILL_MAGIC`] `| version u8 |
//!   owner inode u64`, and whose data is `SPILL_MAGIC | crc32c u32 | length u32 | set` (the
//!   crc over the set), so damaged attributes are detected, never served.
//!
//! Invariant: an inode's tail names at most one spill file, whose blob names that inode as
//! its owner; a spill file no tail names is stray (a crash between removing an inode and
//! its spill file; mount removes it). A set is replaced whole: a new spill file written,
//! the inode's tail pointed at it and the old one unlinked in one atomic group of the
//! volume (`fs/xattrs.rs`), so a crash leaves the old set or the new one, never a mix.
//!
//! Limits: names are 1..=255 bytes with one of the namespaces below (the kernel checks the
//! length before asking); a value at most 64 KiB (`XATTR_SIZE_MAX`, as XFS and as fstests
//! expect of a FUSE file system; ext4 keeps one block); an inode's whole encoded set at
//! most [`MAX_SET_BYTES`] (`ENOSPC` past it, as ext4 answers when its block is full).
//!
//! Lock order: none (plain values; the namespace lock in `fs/mod.rs` guards a node's set).

use std::collections::BTreeMap;

/// An inode's extended attributes: full name -> value.
pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// First bytes of a spill file's attribute blob and of its data.
pub const SPILL_MAGIC: &[u8; 4] = b"EXXA";
const SPILL_VERSION: u8 = 1;
/// Bytes of a spill file's attribute blob.
const SPILL_BLOB_BYTES: usize = 4 + 1 + 8;
/// Bytes before the set in a spill file's data.
const SPILL_HEADER: usize = 4 + 4 + 4;
const TAIL_INLINE: u8 = 1;
const TAIL_SPILL: u8 = 2;

/// Longest name, as `XATTR_NAME_MAX`.
pub const NAME_MAX: usize = 255;
/// Largest value, as `XATTR_SIZE_MAX`.
pub const VALUE_MAX: usize = 64 << 10;
/// Largest encoded set of one inode.
pub const MAX_SET_BYTES: usize = 256 << 10;

/// The namespaces an attribute's name may start with. `system.` holds only the two POSIX
/// ACLs; any other prefix is not supported (`EOPNOTSUPP`, as ext4).
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
/// The access ACL's name.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's name.
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// Why a name cannot be an attribute's: an `errno` value.
pub fn check_name(name: &[u8]) -> Result<(), i32> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(libc::ERANGE);
    }
    if name == ACL_ACCESS || name == ACL_DEFAULT {
        return Ok(());
    }
    match NAMESPACES.iter().find(|p| name.starts_with(p)) {
        // A namespace with nothing after it names no attribute.
        Some(p) if name.len() == p.len() => Err(libc::EINVAL),
        Some(_) => Ok(()),
        None => Err(libc::EOPNOTSUPP),
    }
}

/// True for a name only a privileged caller sees in a listing (`trusted.`: ext4 lists
/// them to `CAP_SYS_ADMIN` only).
pub fn privileged(name: &[u8]) -> bool {
    name.starts_with(b"trusted.")
}

/// True when `set` fits in `inode`'s blob beside the inode's head (inline, no spill
/// file): an inode with a birth time has a longer head, so a little less room.
pub fn fits_inline(inode: &crate::inode::Inode, set: &Xattrs) -> bool {
    inode.head_bytes() + 1 + set_bytes(set) <= extalloc::volume::MAX_ATTR_BYTES
}

/// Bytes `set` takes encoded.
pub fn set_bytes(set: &Xattrs) -> usize {
    4 + set
        .iter()
        .map(|(n, v)| 1 + 4 + n.len() + v.len())
        .sum::<usize>()
}

/// The encoding of `set` (see the module documentation).
pub fn encode_set(set: &Xattrs) -> Vec<u8> {
    let mut out = Vec::with_capacity(set_bytes(set));
    out.extend_from_slice(&(set.len() as u32).to_le_bytes());
    for (name, value) in set {
        assert!(
            !name.is_empty() && name.len() <= NAME_MAX && value.len() <= VALUE_MAX,
            "an attribute within the limits checked before it was set"
        );
        out.push(name.len() as u8);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(value);
    }
    debug_assert_eq!(out.len(), set_bytes(set));
    out
}

/// Reads a set; `None` when the bytes are not one (cut short, trailing bytes, names out of
/// order or twice, a value over the limit).
pub fn decode_set(b: &[u8]) -> Option<Xattrs> {
    let count = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let mut at = 4;
    let mut set = Xattrs::new();
    for _ in 0..count {
        let nlen = *b.get(at)? as usize;
        let vlen = u32::from_le_bytes(b.get(at + 1..at + 5)?.try_into().ok()?) as usize;
        at += 5;
        if nlen == 0 || vlen > VALUE_MAX {
            return None;
        }
        let name = b.get(at..at + nlen)?.to_vec();
        let value = b.get(at + nlen..at + nlen + vlen)?.to_vec();
        at += nlen + vlen;
        if set.last_key_value().is_some_and(|(last, _)| *last >= name) {
            return None;
        }
        set.insert(name, value);
    }
    (at == b.len()).then_some(set)
}

/// Where an inode's attributes are, as its blob's tail says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// No attributes.
    None,
    /// In the blob.
    Inline(Xattrs),
    /// In this spill file.
    Spill(u64),
}

impl Tail {
    /// The bytes after the inode in its blob.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Tail::None => Vec::new(),
            Tail::Inline(set) => {
                let mut out = vec![TAIL_INLINE];
                out.extend_from_slice(&encode_set(set));
                out
            }
            Tail::Spill(id) => {
                let mut out = vec![TAIL_SPILL];
                out.extend_from_slice(&id.to_le_bytes());
                out
            }
        }
    }

    /// Reads a blob's tail; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<Tail> {
        match b.split_first() {
            None => Some(Tail::None),
            Some((&TAIL_INLINE, set)) => decode_set(set).map(Tail::Inline),
            Some((&TAIL_SPILL, id)) => Some(Tail::Spill(u64::from_le_bytes(id.try_into().ok()?))),
            Some(_) => None,
        }
    }
}

/// The attribute blob of a spill file owned by inode `owner`.
pub fn spill_blob(owner: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(SPILL_BLOB_BYTES);
    out.extend_from_slice(SPILL_MAGIC);
    out.push(SPILL_VERSION);
    out.extend_from_slice(&owner.to_le_bytes());
    out
}

/// The owner a spill file's attribute blob names; `None` when the blob is not a spill
/// file's.
pub fn spill_owner(blob: &[u8]) -> Option<u64> {
    if blob.len() != SPILL_BLOB_BYTES || &blob[..4] != SPILL_MAGIC || blob[4] != SPILL_VERSION {
        return None;
    }
    Some(u64::from_le_bytes(blob[5..].try_into().ok()?))
}

/// A spill file's data for `set`.
pub fn spill_data(set: &Xattrs) -> Vec<u8> {
    let body = encode_set(set);
    let mut out = Vec::with_capacity(SPILL_HEADER + body.len());
    out.extend_from_slice(SPILL_MAGIC);
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads a spill file's data; `None` when it is damaged (magic, length or crc wrong).
pub fn read_spill(b: &[u8]) -> Option<Xattrs> {
    if b.len() < SPILL_HEADER || &b[..4] != SPILL_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(b[4..8].try_into().ok()?);
    let len = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
    let body = b.get(SPILL_HEADER..SPILL_HEADER + len)?;
    if b.len() != SPILL_HEADER + len || crc32c::crc32c(body) != crc {
        return None;
    }
    decode_set(body)
}

/// The listing `listxattr` answers: every name with a NUL after it, in name order, the
/// privileged ones only for a privileged caller.
pub fn listing(set: &Xattrs, privileged_caller: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for name in set.keys() {
        if privileged(name) && !privileged_caller {
            continue;
        }
        out.extend_from_slice(name);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_set() -> impl Strategy<Value = Xattrs> {
        proptest::collection::btree_map(
            proptest::collection::vec(1u8..=255, 1..40),
            proptest::collection::vec(any::<u8>(), 0..300),
            0..12,
        )
    }

    proptest! {
        #[test]
        fn a_set_reads_back_as_written(set in any_set()) {
            prop_assert_eq!(decode_set(&encode_set(&set)), Some(set.clone()));
            prop_assert_eq!(read_spill(&spill_data(&set)), Some(set.clone()));
            let inline = Tail::Inline(set);
            prop_assert_eq!(Tail::decode(&inline.encode()), Some(inline));
        }

        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_set(&b);
            let _ = read_spill(&b);
            let _ = Tail::decode(&b);
            let _ = spill_owner(&b);
        }

        #[test]
        fn a_damaged_spill_is_refused(set in any_set(), at in any::<prop::sample::Index>(),
                bit in 0u8..8) {
            let mut d = spill_data(&set);
            let i = at.index(d.len());
            d[i] ^= 1 << bit;
            prop_assert_eq!(read_spill(&d), None);
        }
    }

    #[test]
    fn names_follow_linux() {
        assert_eq!(check_name(b"user.a"), Ok(()));
        assert_eq!(check_name(b"trusted.b"), Ok(()));
        assert_eq!(check_name(b"security.selinux"), Ok(()));
        assert_eq!(check_name(ACL_ACCESS), Ok(()));
        assert_eq!(check_name(ACL_DEFAULT), Ok(()));
        assert_eq!(check_name(b"user."), Err(libc::EINVAL));
        assert_eq!(check_name(b"system.other"), Err(libc::EOPNOTSUPP));
        assert_eq!(check_name(b"foo.bar"), Err(libc::EOPNOTSUPP));
        assert_eq!(check_name(b""), Err(libc::ERANGE));
        let long = [b"user.".as_slice(), &[b'x'; 251]].concat();
        assert_eq!(check_name(&long), Err(libc::ERANGE));
    }

    #[test]
    fn spill_blobs_name_their_owner() {
        assert_eq!(spill_owner(&spill_blob(42)), Some(42));
        assert_eq!(spill_owner(b"EXFS...."), None);
        let mut b = spill_blob(7);
        b[4] = 9;
        assert_eq!(spill_owner(&b), None, "unknown version");
    }

    #[test]
    fn listings_hide_trusted_names_from_users() {
        let set: Xattrs = [
            (b"user.a".to_vec(), vec![1]),
            (b"trusted.t".to_vec(), vec![]),
        ]
        .into_iter()
        .collect();
        assert_eq!(listing(&set, true), b"trusted.t\0user.a\0");
        assert_eq!(listing(&set, false), b"user.a\0");
    }
}
