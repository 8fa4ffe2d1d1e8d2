//! Access times: when a read or a listing updates an inode's atime, and how the mount
//! learns which rule applies.
//!
//! FUSE marks every inode `S_NOATIME` in the kernel, so the kernel never updates atime
//! itself and never tells the daemon the mount's atime flags: the daemon reads them from
//! the mount's line in `/proc/self/mountinfo` ([`mount_atime`]) and applies the rule to the
//! reads and listings that reach it ([`Fs::accessed`]). Rules as ext4's: `relatime` (the
//! default) updates when atime is not after mtime or ctime, or is 24 hours old;
//! `strictatime` always; `noatime` never; `nodiratime` never for directories.
//!
//! Data structures: [`AtimeMode`] and its one-byte code in `Fs::atime_mode` (an atomic,
//! so a refresh never waits for a reader).
//!
//! Invariant: an atime changed here is marked `attr_dirty` and written with the other
//! in-memory times (fsync, release, unmount).
//!
//! Lock order: `ns` only (read to decide, written to update).

use super::{Fs, FsResult};
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
    /// sixth field): no `relatime` nor `noatime` means `strictatime`.
    pub fn from_options(opts: &str) -> AtimeMode {
        let has = |o: &str| opts.split(',').any(|x| x == o);
        let rule = if has("noatime") {
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
        match self.rule {
            AtimeRule::NoAtime => false,
            AtimeRule::Strict => key(atime) != key(now),
            AtimeRule::Relatime => {
                key(atime) <= key(mtime)
                    || key(atime) <= key(ctime)
                    || now.secs - atime.secs >= RELATIME_SECS
            }
        }
    }
}

/// The atime mode of the mount at `mountpoint` in a mountinfo text (the last mount there,
/// which is the one visible); `None` if nothing is mounted there.
pub fn mount_atime(mountinfo: &str, mountpoint: &Path) -> Option<AtimeMode> {
    let want = mountpoint.as_os_str().as_encoded_bytes();
    mountinfo.lines().rev().find_map(|line| {
        let mut f = line.split(' ');
        let (point, opts) = (f.nth(4)?, f.next()?);
        (unescape(point) == want).then(|| AtimeMode::from_options(opts))
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
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

    /// `ino` was read (or listed): its atime is now if the mode says so, written later
    /// with the other in-memory times.
    pub(crate) fn accessed(&self, ino: u64) -> FsResult<()> {
        let mode = self.atime_mode();
        let now = Time::now();
        let wants =
            |i: &crate::inode::Inode| mode.wants_update(i.kind, i.atime, i.mtime, i.ctime, now);
        if !wants(&self.ns.read().node(ino)?.inode) {
            return Ok(());
        }
        let mut ns = self.ns.write();
        let n = ns.node_mut(ino)?;
        if wants(&n.inode) {
            n.inode.atime = now;
            n.attr_dirty = true;
        }
        Ok(())
    }
}
