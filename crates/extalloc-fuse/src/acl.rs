//! POSIX ACLs in the form the kernel hands them over (`system.posix_acl_access` and
//! `system.posix_acl_default` values), and the mode arithmetic a file system owes them
//! when the kernel enforces them (FUSE_POSIX_ACL): the mode that follows an access ACL,
//! the ACL that follows a chmod, and what a new inode inherits from its directory's
//! default ACL. The kernel checks permissions against them; the daemon keeps them.
//!
//! Data structures: [`Acl`], its entries `(tag, perm, id)`. The encoding: `version u32 (2)
//! | (tag u16 | perm u16 | id u32)*`, little endian, as `posix_acl_to_xattr` writes it.
//!
//! Invariant: an [`Acl`] from [`Acl::parse`] is valid as `posix_acl_valid` says: exactly one
//! owner, owning group and other entry, a mask when there is a named user or group (at
//! most one), entries in tag order and named ones in id order without repeats, permission
//! bits within `rwx`.
//!
//! Lock order: none (plain values).

/// The owner's entry.
pub const USER_OBJ: u16 = 0x01;
/// A named user's entry.
pub const USER: u16 = 0x02;
/// The owning group's entry.
pub const GROUP_OBJ: u16 = 0x04;
/// A named group's entry.
pub const GROUP: u16 = 0x08;
/// The mask: the most a named entry or the owning group grants.
pub const MASK: u16 = 0x10;
/// Everyone else's entry.
pub const OTHER: u16 = 0x20;
const VERSION: u32 = 2;

/// A POSIX ACL (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// `(tag, perm, id)` in tag order.
    pub entries: Vec<(u16, u16, u32)>,
}

impl Acl {
    /// Reads an ACL value; `None` when it is not a valid one.
    pub fn parse(b: &[u8]) -> Option<Acl> {
        if b.len() < 4 || !(b.len() - 4).is_multiple_of(8) {
            return None;
        }
        if u32::from_le_bytes(b[..4].try_into().ok()?) != VERSION {
            return None;
        }
        let entries = b[4..]
            .chunks_exact(8)
            .map(|e| {
                (
                    u16::from_le_bytes([e[0], e[1]]),
                    u16::from_le_bytes([e[2], e[3]]),
                    u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
                )
            })
            .collect();
        let acl = Acl { entries };
        acl.valid().then_some(acl)
    }

    /// The value the kernel reads back.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in &self.entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    fn valid(&self) -> bool {
        let count = |t: u16| self.entries.iter().filter(|e| e.0 == t).count();
        let named = count(USER) + count(GROUP);
        let ordered = self.entries.windows(2).all(|w| {
            let (a, b) = (w[0], w[1]);
            a.0 < b.0 || (a.0 == b.0 && matches!(a.0, USER | GROUP) && a.2 < b.2)
        });
        let known = self
            .entries
            .iter()
            .all(|e| matches!(e.0, USER_OBJ | USER | GROUP_OBJ | GROUP | MASK | OTHER) && e.1 <= 7);
        known
            && ordered
            && count(USER_OBJ) == 1
            && count(GROUP_OBJ) == 1
            && count(OTHER) == 1
            && if named > 0 {
                count(MASK) == 1
            } else {
                count(MASK) <= 1
            }
    }

    fn perm(&self, tag: u16) -> Option<u16> {
        self.entries.iter().find(|e| e.0 == tag).map(|e| e.1)
    }

    /// The permission bits (`0o777`) the ACL gives the mode: the owner's, the mask's (the
    /// owning group's when there is no mask), and other's.
    pub fn mode_bits(&self) -> u16 {
        let p = |t| self.perm(t).expect("a valid ACL has the entry");
        let group = self.perm(MASK).unwrap_or_else(|| p(GROUP_OBJ));
        (p(USER_OBJ) << 6) | (group << 3) | p(OTHER)
    }

    /// True when the mode says all it says (only the three base entries), so it need not
    /// be kept (`posix_acl_equiv_mode`).
    pub fn is_minimal(&self) -> bool {
        self.entries.len() == 3
    }

    /// The ACL after a chmod to `perm` (`posix_acl_chmod`): the owner's, the mask's (the
    /// owning group's when there is no mask) and other's entries take the mode's bits.
    pub fn chmod(&mut self, perm: u16) {
        let has_mask = self.perm(MASK).is_some();
        for e in &mut self.entries {
            match e.0 {
                USER_OBJ => e.1 = (perm >> 6) & 7,
                MASK => e.1 = (perm >> 3) & 7,
                GROUP_OBJ if !has_mask => e.1 = (perm >> 3) & 7,
                OTHER => e.1 = perm & 7,
                _ => {}
            }
        }
    }

    /// A new inode's access ACL from its directory's default ACL and the mode it was asked
    /// for (`posix_acl_create_masq`): each base entry keeps only what the mode allows, and
    /// the mode keeps only what the entries allow. Returns the mode's new `0o777` bits.
    pub fn create_masq(&mut self, mode: u16) -> u16 {
        let has_mask = self.perm(MASK).is_some();
        let mut out = mode & 0o777;
        for e in &mut self.entries {
            let (shift, applies) = match e.0 {
                USER_OBJ => (6, true),
                MASK => (3, true),
                GROUP_OBJ => (3, !has_mask),
                OTHER => (0, true),
                _ => (0, false),
            };
            if applies {
                e.1 &= (mode >> shift) & 7;
                out = (out & !(7 << shift)) | (e.1 << shift);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl {
            entries: entries.to_vec(),
        }
    }

    const U: u32 = u32::MAX;

    #[test]
    fn valid_acls_read_back_and_invalid_ones_are_refused() {
        let a = acl(&[
            (USER_OBJ, 7, U),
            (USER, 5, 1000),
            (GROUP_OBJ, 5, U),
            (MASK, 5, U),
            (OTHER, 0, U),
        ]);
        assert_eq!(Acl::parse(&a.encode()), Some(a.clone()));
        let no_mask = acl(&[
            (USER_OBJ, 7, U),
            (USER, 5, 1000),
            (GROUP_OBJ, 5, U),
            (OTHER, 0, U),
        ]);
        assert_eq!(
            Acl::parse(&no_mask.encode()),
            None,
            "a named entry needs a mask"
        );
        let unordered = acl(&[(GROUP_OBJ, 5, U), (USER_OBJ, 7, U), (OTHER, 0, U)]);
        assert_eq!(Acl::parse(&unordered.encode()), None);
        let twice = acl(&[
            (USER_OBJ, 7, U),
            (USER, 5, 9),
            (USER, 4, 9),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]);
        assert_eq!(Acl::parse(&twice.encode()), None, "one user named twice");
        assert_eq!(Acl::parse(b"\x02\0\0\0\x01"), None, "cut short");
        assert_eq!(Acl::parse(b"\x01\0\0\0"), None, "version 1");
        let minimal = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
        assert!(Acl::parse(&minimal.encode()).unwrap().is_minimal());
        assert_eq!(minimal.mode_bits(), 0o644);
        let with_mask = acl(&[
            (USER_OBJ, 6, U),
            (GROUP_OBJ, 4, U),
            (MASK, 6, U),
            (OTHER, 0, U),
        ]);
        assert!(
            Acl::parse(&with_mask.encode()).is_some(),
            "a mask alone is allowed"
        );
    }

    #[test]
    fn the_mode_follows_the_mask_and_chmod_follows_the_mode() {
        let mut a = acl(&[
            (USER_OBJ, 7, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, U),
            (MASK, 6, U),
            (OTHER, 1, U),
        ]);
        assert_eq!(a.mode_bits(), 0o761);
        a.chmod(0o640);
        assert_eq!(
            a.entries,
            vec![
                (USER_OBJ, 6, U),
                (USER, 7, 1000),
                (GROUP_OBJ, 5, U),
                (MASK, 4, U),
                (OTHER, 0, U)
            ]
        );
        assert_eq!(a.mode_bits(), 0o640);
    }

    #[test]
    fn a_new_inode_takes_what_both_the_mode_and_the_default_allow() {
        let mut a = acl(&[
            (USER_OBJ, 7, U),
            (GROUP, 7, 50),
            (GROUP_OBJ, 7, U),
            (MASK, 7, U),
            (OTHER, 5, U),
        ]);
        assert_eq!(a.create_masq(0o666), 0o664);
        assert_eq!(
            a.entries,
            vec![
                (USER_OBJ, 6, U),
                (GROUP, 7, 50),
                (GROUP_OBJ, 7, U),
                (MASK, 6, U),
                (OTHER, 4, U)
            ]
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Some(a) = Acl::parse(&b) {
                prop_assert_eq!(a.encode(), b);
                let _ = a.mode_bits();
            }
        }
    }
}
