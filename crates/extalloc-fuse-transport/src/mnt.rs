//! Mounting and unmounting a FUSE connection: `mount(2)` with a fresh `/dev/fuse`
//! descriptor when the process may (root), else through `fusermount3`, the setuid helper
//! of the fuse3 package, which mounts and passes the descriptor back over a socket.
//!
//! Data structures: [`MountSpec`] (what to mount and with which flags) and [`Mounted`] (how
//! it was mounted, to undo it the same way). Invariant: a [`Mounted`] unmounts only the
//! mount it made: the one on its mount point whose device number is the connection's.
//! Lock order: none.

use rustix::io::{Errno, FdFlags};
use rustix::mount::{MountFlags, UnmountFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketFlags, SocketType,
};
use std::ffi::CString;
use std::fs::File;
use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to mount: the source shown in the mount table, the subtype (`fuse.SUBTYPE`, given
/// only through `fusermount3`), the `MS_*` flags and the FUSE options (`default_permissions`, `allow_other`).
#[derive(Debug, Clone)]
pub struct MountSpec {
    /// The source the mount table shows (`extalloc mount`: the device's path).
    pub source: String,
    /// The subtype: the mount shows as `fuse.SUBTYPE` (through `fusermount3` only).
    pub subtype: String,
    /// The `MS_*` flags (read-only, `nosuid`, ...).
    pub flags: MountFlags,
    /// The FUSE options beside the connection's own (`default_permissions`, `allow_other`).
    pub options: Vec<&'static str>,
}

/// A mount this process made.
#[derive(Debug)]
pub struct Mounted {
    mountpoint: PathBuf,
    /// The mount as the mount table showed it once made (device number, source, type);
    /// `None` once unmounted.
    entry: Option<((u32, u32), String, String)>,
    /// Made through `fusermount3` (then unmounted through it too).
    helper: bool,
}

/// Mounts a new FUSE connection on `mountpoint` (canonical) and returns its device.
pub fn mount(mountpoint: &Path, spec: &MountSpec) -> io::Result<(File, Mounted)> {
    let dev = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/fuse: {e}")))?;
    // The mount point's file type bits (`S_IFMT`), as the kernel wants `rootmode`.
    let mode = rustix::fs::FileType::from_raw_mode(std::fs::metadata(mountpoint)?.mode());
    let mode = mode.as_raw_mode();
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    let mut data = format!(
        "fd={},rootmode={mode:o},user_id={},group_id={}",
        dev.as_raw_fd(),
        uid.as_raw(),
        gid.as_raw()
    );
    for o in &spec.options {
        data.push(',');
        data.push_str(o);
    }
    let data = CString::new(data).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // Type `fuse`, as the mount table has always shown it (fstests checks it with
    // FSTYP=fuse); only fusermount3 mounts with the subtype (`fuse.extalloc`).
    let made = rustix::mount::mount(
        spec.source.as_str(),
        mountpoint,
        "fuse",
        spec.flags,
        data.as_c_str(),
    );
    let (dev, helper) = match made {
        Ok(()) => (dev, false),
        Err(Errno::PERM) => {
            drop(dev);
            (through_helper(mountpoint, spec)?, true)
        }
        Err(e) => return Err(e.into()),
    };
    let mut mounted = Mounted {
        mountpoint: mountpoint.to_path_buf(),
        entry: None,
        helper,
    };
    // From the mount table, not a stat: the mount answers nothing before FUSE_INIT.
    match crate::mountinfo::find(mountpoint) {
        Ok(Some(m)) => mounted.entry = Some((m.dev, m.source, m.fstype)),
        found => {
            let _ = mounted.detach();
            return Err(match found {
                Err(e) => e,
                _ => io::Error::other("the new mount is not in /proc/self/mountinfo"),
            });
        }
    }
    Ok((dev, mounted))
}

impl Mounted {
    /// Unmounts (lazily: open files keep it alive) if the mount on the mount point is
    /// still this one; nothing if it is gone already.
    pub fn unmount(&mut self) -> io::Result<()> {
        let Some(made) = self.entry.take() else {
            return Ok(());
        };
        // The same device number, source and type: a mount made on the same point since
        // (its anonymous device number may be the freed one) has another source or type.
        let ours = crate::mountinfo::find(&self.mountpoint)?
            .is_some_and(|m| (m.dev, m.source, m.fstype) == made);
        match ours {
            true => self.detach(),
            false => Ok(()),
        }
    }

    /// Unmounts the mount point lazily, without following a symbolic link to it.
    fn detach(&self) -> io::Result<()> {
        if self.helper {
            let out = Command::new("fusermount3")
                .args(["-u", "-q", "-z", "--"])
                .arg(&self.mountpoint)
                .output()?;
            if !out.status.success() {
                return Err(io::Error::other(format!(
                    "fusermount3 -u {}: {}",
                    self.mountpoint.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            return Ok(());
        }
        let flags = UnmountFlags::DETACH | UnmountFlags::NOFOLLOW;
        Ok(rustix::mount::unmount(&self.mountpoint, flags)?)
    }
}

/// Mounts through `fusermount3` (a process that may not mount): it gets one end of a
/// socket pair in `_FUSE_COMMFD` and sends the `/dev/fuse` descriptor back on it.
fn through_helper(mountpoint: &Path, spec: &MountSpec) -> io::Result<File> {
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // fusermount3 splits options at commas; a backslash escapes one.
    let source = spec.source.replace('\\', "\\\\").replace(',', "\\,");
    let mut opts = format!("fsname={source},subtype={}", spec.subtype);
    for (bit, set, clear) in FLAG_NAMES {
        let name = if spec.flags.contains(bit) { set } else { clear };
        if !name.is_empty() {
            opts.push(',');
            opts.push_str(name);
        }
    }
    for o in &spec.options {
        opts.push(',');
        opts.push_str(o);
    }
    let inherited = theirs.as_raw_fd();
    let mut cmd = Command::new("fusermount3");
    cmd.env("_FUSE_COMMFD", inherited.to_string())
        .args(["-o", &opts, "--"])
        .arg(mountpoint);
    // SAFETY: between fork and exec only fcntl runs (rustix's raw system call, which
    // allocates nothing: async-signal-safe); it lets fusermount3 inherit its end of the
    // socket pair (and no other thread's child does). `inherited` stays open in the child
    // until its exec: `theirs` is dropped only after the child is reaped.
    unsafe {
        cmd.pre_exec(move || {
            let fd = BorrowedFd::borrow_raw(inherited);
            Ok(rustix::io::fcntl_setfd(fd, FdFlags::empty())?)
        });
    }
    let out = cmd
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("fusermount3: {e}")))?;
    drop(theirs);
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "fusermount3: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    receive_fd(&ours).inspect_err(|_| {
        // Mounted, but the descriptor is lost: a dead mount otherwise.
        let _ = Command::new("fusermount3")
            .args(["-u", "-q", "-z", "--"])
            .arg(mountpoint)
            .status();
    })
}

/// The `MS_*` flags fusermount3 takes by name: set, clear ("" for its default). It
/// mounts nosuid,nodev unless told `suid`/`dev` (which it takes from root only).
const FLAG_NAMES: [(MountFlags, &str, &str); 7] = [
    (MountFlags::RDONLY, "ro", ""),
    (MountFlags::NOSUID, "nosuid", "suid"),
    (MountFlags::NODEV, "nodev", "dev"),
    (MountFlags::NOEXEC, "noexec", ""),
    (MountFlags::NOATIME, "noatime", ""),
    (MountFlags::SYNCHRONOUS, "sync", ""),
    (MountFlags::DIRSYNC, "dirsync", ""),
];

/// The descriptor sent on `sock` (`SCM_RIGHTS`), received close-on-exec.
fn receive_fd(sock: &OwnedFd) -> io::Result<File> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let received = control.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    received
        .map(File::from)
        .ok_or_else(|| io::Error::other("fusermount3 sent no descriptor"))
}
