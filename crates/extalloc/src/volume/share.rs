//! The superuser's share of the device, as ext4's reserved blocks: a space check made for
//! an unprivileged caller leaves [`Statfs::root_reserved_blocks`](crate::store::Statfs)
//! free, so what such a caller can still write is what `statfs`'s available figure
//! (`f_bavail`) says; one made for the superuser, or for the volume's owner (every call
//! that names no [`Privilege`]), may take those blocks too. The room kept for the volume's
//! own metadata (`room.rs`) is left out for everyone.
//!
//! Which calls ask: a buffered write's reservation ([`Buffered::write_for`]) and an
//! allocating `fallocate` ([`Volume::fallocate_for`]), the calls through which data takes
//! space. The reservation is checked under the lock that grants it (`delalloc.rs`), so
//! racing unprivileged writers cannot pass it together.
//!
//! [`Buffered::write_for`]: crate::writeback::Buffered::write_for
//!
//! Data structures: [`Privilege`]. Invariant: the blocks kept from a caller are 0 for
//! [`Privilege::Superuser`] and the store's superuser share for [`Privilege::User`].
//! Locks: none (the share is an atomic of the store's).

use super::state::Volume;

/// Whose call a space check serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Privilege {
    /// The superuser, or the volume's owner: may take the blocks kept for the superuser.
    #[default]
    Superuser,
    /// An unprivileged caller: leaves the superuser's share free (ext4's reserved blocks,
    /// which a user without `CAP_SYS_RESOURCE` cannot take).
    User,
}

impl Volume {
    /// Blocks a space check for `who` keeps out of what it may take: the superuser's
    /// share for [`Privilege::User`], none for [`Privilege::Superuser`].
    pub(super) fn kept_from(&self, who: Privilege) -> u64 {
        let kept = match who {
            Privilege::Superuser => 0,
            Privilege::User => self.store.free_pending_root_blocks().2,
        };
        debug_assert!(
            who == Privilege::User || kept == 0,
            "the superuser keeps nothing"
        );
        kept
    }
}
