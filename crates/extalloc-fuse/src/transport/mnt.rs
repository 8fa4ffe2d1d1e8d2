//! Mounting and unmounting a FUSE connection: `mount(2)` with a fresh `/dev/fuse`
//! descriptor when the process may (root), else through `fusermount3`, the setuid helper
//! of the fuse3 package, which mounts and passes the descriptor back over a socket.
//!
//! Data structures: [`MountSpec`] (what to mount and with which flags) and [`Mounted`] (how
//! it was mounted, to undo it the same way). Invariant: a [`Mounted`] unmounts only the
//! mount it made: the one on its mount point whose device number is the connection's.
//! Lock order: none.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to mount: the source shown in the mount table, the subtype (`fuse.SUBTYPE`, given
/// only through `fusermount3`), the `MS_*` flags and the FUSE options (`default_permissions`, `allow_other`).
#[derive(Debug, Clone)]
pub(crate) struct MountSpec {
    pub(crate) source: String,
    pub(crate) subtype: String,
    pub(crate) flags: libc::c_ulong,
    pub(crate) options: Vec<&'static str>,
}

/// A mount this process made.
#[derive(Debug)]
pub(crate) struct Mounted {
    mountpoint: PathBuf,
    /// The mount as the mount table showed it once made (device number, source, type);
    /// `None` once unmounted.
    entry: Option<((u32, u32), String, String)>,
    /// Made through `fusermount3` (then unmounted through it too).
    helper: bool,
}

/// Mounts a new FUSE connection on `mountpoint` (canonical) and returns its device.
pub(crate) fn mount(mountpoint: &Path, spec: &MountSpec) -> io::Result<(File, Mounted)> {
    let dev = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/fuse: {e}")))?;
    let mode = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={mode:o},user_id={uid},group_id={gid}",
        dev.as_raw_fd()
    );
    for o in &spec.options {
        data.push(',');
        data.push_str(o);
    }
    let c = |s: &str| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (source, target) = (c(&spec.source)?, c_path(mountpoint)?);
    // Type `fuse`, as the mount table has always shown it (fstests checks it with
    // FSTYP=fuse); only fusermount3 mounts with the subtype (`fuse.extalloc`).
    let fstype = c("fuse")?;
    let data = c(&data)?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            spec.flags,
            data.as_ptr().cast(),
        )
    };
    let (dev, helper) = if r == 0 {
        (dev, false)
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
        drop(dev);
        (through_helper(mountpoint, spec)?, true)
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
    pub(crate) fn unmount(&mut self) -> io::Result<()> {
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
        let target = c_path(&self.mountpoint)?;
        let flags = libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW;
        // SAFETY: `target` is NUL-terminated and outlives the call.
        if unsafe { libc::umount2(target.as_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Mounts through `fusermount3` (a process that may not mount): it gets one end of a
/// socket pair in `_FUSE_COMMFD` and sends the `/dev/fuse` descriptor back on it.
fn through_helper(mountpoint: &Path, spec: &MountSpec) -> io::Result<File> {
    let mut fds = [0; 2];
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two fresh descriptors this function now owns.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // fusermount3 splits options at commas; a backslash escapes one.
    let source = spec.source.replace('\\', "\\\\").replace(',', "\\,");
    let mut opts = format!("fsname={source},subtype={}", spec.subtype);
    for (bit, set, clear) in FLAG_NAMES {
        let name = if spec.flags & bit != 0 { set } else { clear };
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
    // SAFETY: between fork and exec only fcntl runs, which is async-signal-safe; it lets
    // fusermount3 inherit its end of the socket pair (and no other thread's child does).
    unsafe {
        cmd.pre_exec(move || match libc::fcntl(inherited, libc::F_SETFD, 0) {
            -1 => Err(io::Error::last_os_error()),
            _ => Ok(()),
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
const FLAG_NAMES: [(libc::c_ulong, &str, &str); 7] = [
    (libc::MS_RDONLY, "ro", ""),
    (libc::MS_NOSUID, "nosuid", "suid"),
    (libc::MS_NODEV, "nodev", "dev"),
    (libc::MS_NOEXEC, "noexec", ""),
    (libc::MS_NOATIME, "noatime", ""),
    (libc::MS_SYNCHRONOUS, "sync", ""),
    (libc::MS_DIRSYNC, "dirsync", ""),
];

/// The descriptor sent on `sock` (`SCM_RIGHTS`).
fn receive_fd(sock: &OwnedFd) -> io::Result<File> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zero is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at `iov` and `control`, which live across the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR reads within msg_control.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    let one = std::mem::size_of::<libc::c_int>() as u32;
    // SAFETY: a non-null header lies within `control`; its data holds a descriptor when it
    // is SCM_RIGHTS at the socket level and long enough for one (checked).
    unsafe {
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            || ((*cmsg).cmsg_len as u64) < u64::from(libc::CMSG_LEN(one))
        {
            return Err(io::Error::other("fusermount3 sent no descriptor"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
        Ok(File::from_raw_fd(fd))
    }
}
