//! Access times: when a read or a listing updates an inode's atime, and how the mount
//! learns which rule applies.
//!
//! FUSE marks every inode `S_NOATIME` in the kernel, so the kernel never updates atime
//! itself and never tells the daemon the mount's atime flags: the daemon reads them from
//! the mount's line in `/proc/self/mountinfo` ([`mount_atime`]) and applies the rule to the
//! reads and listings that reach it (`Fs::accessed`). Rules as ext4's: `relatime` (the
//! default) updates when atime is not after mtime or ctime, or is 24 hours old;
//! `strictatime` always; `noatime` never; `nodiratime` never for directories; a read-only
//! mount (`ro`, a bind remount included) never, as the kernel's `touch_atime`.
//!
//! Two clocks: the times the daemon sets (a create's three, an atime) are from the
//! system's fine clock, but under FUSE's writeback cache the kernel sets mtime and ctime of
//! a write itself from its coarse clock (`CLOCK_REALTIME_COARSE`, a tick behind: 4 ms at
//! HZ=250, measured) and sends them to the daemon. A file written just after its create
//! then has an mtime before its atime, and relatime would never update it on the first read
//! (generic/003, measured). So relatime counts an atime less than [`COARSE_SLACK_NANOS`]
//! after mtime or ctime as not after them; the cost is an extra update for a read that
//! comes within that time after a write.
//!
//! Data structures: [`AtimeMode`] and its one-byte code in `Fs::atime_mode` (an atomic,
//! so a refresh never waits for a reader).
//!
//! Invariant: an atime changed here is marked `attr_dirty` and written with the other
//! in-memory times (fsync, release, unmount).
//!
//! Lock order: `ns` only (read to decide, written to update).

use super::core::{Fs, FsResult};
use crate::inode::{Kind, Time};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

/// How reads update atime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtimeMode {
    /// The rule for files (and directories unless `nodiratime`).
    pub rule: AtimeRule,
    /// Directories' atime is never updated.
    pub nodiratime: bool,
}

/// The rule of [`AtimeMode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtimeRule {
    /// Update when atime is not after mtime or ctime, or is a day old (the default).
    Relatime,
    /// Update at every access.
    Strict,
    /// Never update.
    NoAtime,
}

/// A day: relatime updates an atime older than this.
const RELATIME_SECS: i64 = 24 * 60 * 60;

/// How far the kernel's coarse clock may lag the fine one: a tick at the lowest `HZ`
/// (100). Relatime treats an atime at most this much after mtime or ctime as not after
/// them (see the module documentation).
pub const COARSE_SLACK_NANOS: i128 = 10_000_000;

impl Default for AtimeMode {
    fn default() -> Self {
        AtimeMode {
            rule: AtimeRule::Relatime,
            nodiratime: false,
        }
    }
}

impl AtimeMode {
    /// The one-byte code kept in `Fs::atime_mode`.
    pub(crate) fn code(self) -> u8 {
        let rule = match self.rule {
            AtimeRule::Relatime => 0,
            AtimeRule::Strict => 1,
            AtimeRule::NoAtime => 2,
        };
        rule | (u8::from(self.nodiratime) << 2)
    }

    /// The mode of a code made by [`AtimeMode::code`].
    pub(crate) fn from_code(c: u8) -> AtimeMode {
        let rule = match c & 3 {
            1 => AtimeRule::Strict,
            2 => AtimeRule::NoAtime,
            _ => AtimeRule::Relatime,
        };
        AtimeMode {
            rule,
            nodiratime: c & 4 != 0,
        }
    }

    /// The mode of a mount's per-mount options (`rw,nosuid,relatime`, as mountinfo's
    /// sixth field): no `relatime` nor `noatime` means `strictatime`; `ro` means
    /// `noatime` (a read-only mount never updates atime, whatever its atime flag).
    pub fn from_options(opts: &str) -> AtimeMode {
        let has = |o: &str| opts.split(',').any(|x| x == o);
        let rule = if has("noatime") || has("ro") {
            AtimeRule::NoAtime
        } else if has("relatime") {
            AtimeRule::Relatime
        } else {
            AtimeRule::Strict
        };
        AtimeMode {
            rule,
            nodiratime: has("nodiratime"),
        }
    }

    /// Does an access at `now` update an inode of `kind` with these times?
    pub fn wants_update(
        self,
        kind: Kind,
        atime: Time,
        mtime: Time,
        ctime: Time,
        now: Time,
    ) -> bool {
        if kind == Kind::Dir && self.nodiratime {
            return false;
        }
        let key = |t: Time| (t.secs, t.nanos);
        let nanos = |t: Time| i128::from(t.secs) * 1_000_000_000 + i128::from(t.nanos);
        let not_after = |t: Time| nanos(atime) <= nanos(t) + COARSE_SLACK_NANOS;
        match self.rule {
            AtimeRule::NoAtime => false,
            AtimeRule::Strict => key(atime) != key(now),
            AtimeRule::Relatime => {
                not_after(mtime) || not_after(ctime) || now.secs - atime.secs >= RELATIME_SECS
            }
        }
    }
}

/// The atime mode of the mount at `mountpoint` in a mountinfo text (the last mount there,
/// which is the one visible); `None` if nothing is mounted there.
pub fn mount_atime(mountinfo: &str, mountpoint: &Path) -> Option<AtimeMode> {
    crate::mountinfo::find_in(mountinfo, mountpoint).map(|e| AtimeMode::from_options(&e.options))
}

impl Fs {
    /// Sets the atime mode (the FUSE layer reads it from the mount's flags).
    pub fn set_atime_mode(&self, mode: AtimeMode) {
        self.atime_mode.store(mode.code(), Relaxed);
    }

    /// The atime mode in force.
    pub fn atime_mode(&self) -> AtimeMode {
        AtimeMode::from_code(self.atime_mode.load(Relaxed))
    }

    /// Whether an access of `ino` now would leave its atime as it is (the mount's atime
    /// mode, the file's `NOATIME` flag). A read the kernel serves from its page cache never
    /// reaches the daemon, so an open may keep that cache (`FOPEN_KEEP_CACHE`) only when so:
    /// otherwise the first read after the open would not set the atime it should (fstests
    /// generic/003). False for an inode that is gone.
    pub fn access_keeps_atime(&self, ino: u64) -> bool {
        let _pin = self.ensure_loaded(&[ino]); // `ondemand.rs`: missing reads as false
        let mode = self.atime_mode();
        let ns = self.ns.read();
        ns.node(ino).is_ok_and(|n| {
            let i = &n.inode;
            i.flags & super::flags::NOATIME != 0
                || !mode.wants_update(i.kind, i.atime, i.mtime, i.ctime, Time::now())
        })
    }

    /// `ino` was read (or listed): its atime is now if the mode says so, written later
    /// with the other in-memory times; the kernel's cached attributes are then dropped.
    pub(crate) fn accessed(&self, ino: u64) -> FsResult<()> {
        let mode = self.atime_mode();
        let now = Time::now();
        let wants = |i: &crate::inode::Inode| {
            i.flags & super::flags::NOATIME == 0
                && mode.wants_update(i.kind, i.atime, i.mtime, i.ctime, now)
        };
        if !wants(&self.ns.read().node(ino)?.inode) {
            return Ok(());
        }
        let changed = {
            let mut ns = self.ns_write();
            let n = ns.node_mut(ino)?;
            let changed = wants(&n.inode);
            if changed {
                n.inode.atime = now;
                ns.times_dirty(ino)?;
            }
            changed
        };
        if changed {
            // The kernel holds the old atime for as long as its attribute timeout.
            self.attrs_changed(ino);
        }
        Ok(())
    }
}
