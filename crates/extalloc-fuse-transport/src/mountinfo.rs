//! The kernel's table of mounts as this process sees it (`/proc/self/mountinfo`): which
//! device a FUSE mount serves (its source, `extalloc mount` puts the device's path there)
//! and which FUSE connection it is (its device number names
//! `/sys/fs/fuse/connections/N`). Reading it sends no request to any file system, so the
//! daemon can read its own entry before it serves.
//!
//! Data structures: [`MountEntry`], one parsed line. Invariant: paths are unescaped
//! (`\040` is a space), so they compare equal to the paths the caller has.
//!
//! Lock order: none.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's device number, major and minor (a FUSE mount's names its connection).
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// The mount's own options (`rw,nosuid,relatime`, ...; not the file system's).
    pub options: String,
    /// The file system type (`fuse`, `fuse.NAME`, `ext4`, ...).
    pub fstype: String,
    /// The source (for `extalloc mount`, the device's path).
    pub source: String,
    /// The file system's options (`rw,sync,user_id=0,...`: the superblock's flags first).
    pub super_options: String,
}

impl MountEntry {
    /// The FUSE connection's number: its directory in `/sys/fs/fuse/connections` (the
    /// kernel's own encoding of the device number).
    pub fn connection(&self) -> u32 {
        (self.dev.0 << 20) | self.dev.1
    }

    /// Whether this is a FUSE mount.
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.")
    }
}

/// The mount on top at `mountpoint` (the last one mounted there), if any.
pub fn find(mountpoint: &Path) -> std::io::Result<Option<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(find_in(&text, mountpoint))
}

/// Where the FUSE mounts whose source is `device` (`extalloc mount` puts the device's path
/// there) are mounted, as this process sees them: for a message that says why a device is
/// busy. Paths compare after `canonicalize`; an unreadable table gives none.
pub fn mounted_from(device: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    mounted_from_in(&text, device)
}

/// [`mounted_from`] in a mountinfo text.
pub fn mounted_from_in(mountinfo: &str, device: &Path) -> Vec<PathBuf> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let want = canonical(device);
    mountinfo
        .lines()
        .filter_map(parse)
        .filter(|e| e.is_fuse() && canonical(Path::new(&e.source)) == want)
        .map(|e| e.mountpoint)
        .collect()
}

/// [`find`] in a mountinfo text.
pub fn find_in(mountinfo: &str, mountpoint: &Path) -> Option<MountEntry> {
    mountinfo
        .lines()
        .rev()
        .filter_map(parse)
        .find(|e| e.mountpoint == mountpoint)
}

/// Parses `ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [FIELDS...] - TYPE SOURCE ...`.
fn parse(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let mut l = left.split(' ');
    let (major, minor) = l.nth(2)?.split_once(':')?;
    let mountpoint = PathBuf::from(OsString::from_vec(unescape(l.nth(1)?)));
    let options = l.next()?.to_string();
    let mut r = right.split(' ');
    let text = |f: &str| String::from_utf8_lossy(&unescape(f)).into_owned();
    let fstype = text(r.next()?);
    let source = text(r.next()?);
    let super_options = r.next().unwrap_or("").to_string();
    Some(MountEntry {
        dev: (major.parse().ok()?, minor.parse().ok()?),
        mountpoint,
        options,
        fstype,
        source,
        super_options,
    })
}

/// Undoes the kernel's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134`
/// backslash), to the path's bytes.
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
                out.push(d.iter().fold(0u8, |v, c| (v << 3) | (c - b'0')));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_found_by_its_fuse_mounts_source() {
        let text = "36 25 0:52 / /mnt/a rw,relatime - fuse /img/v.img rw,user_id=0\n\
                    37 25 8:1 / /mnt/b rw - ext4 /img/v.img rw\n\
                    38 25 0:53 / /mnt/c\\040d rw - fuse.x /img/v.img rw\n\
                    39 25 0:54 / /mnt/e rw - fuse /img/w.img rw\n";
        let got = mounted_from_in(text, Path::new("/img/v.img"));
        assert_eq!(got, [PathBuf::from("/mnt/a"), PathBuf::from("/mnt/c d")]);
        assert!(mounted_from_in(text, Path::new("/img/none.img")).is_empty());
    }

    #[test]
    fn a_fuse_line_gives_its_device_source_and_connection() {
        let line = "66 45 0:39 / /var/tmp/a\\040b/mnt rw,relatime shared:7 - fuse \
                    /var/tmp/fs\\040x.img rw,user_id=0,group_id=0";
        let e = parse(line).unwrap();
        assert_eq!(e.dev, (0, 39));
        assert_eq!(e.connection(), 39);
        assert_eq!(e.mountpoint, Path::new("/var/tmp/a b/mnt"));
        assert_eq!(e.source, "/var/tmp/fs x.img");
        assert!(e.is_fuse());
        assert_eq!(e.super_options, "rw,user_id=0,group_id=0");
        let e = parse("1 0 259:3 / / rw - ext4 /dev/nvme0n1p3 rw").unwrap();
        assert_eq!(e.connection(), (259 << 20) | 3);
        assert!(!e.is_fuse());
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn the_root_is_found_in_this_process_table() {
        let root = find(Path::new("/")).unwrap().expect("/ is mounted");
        assert!(!root.fstype.is_empty());
    }
}
