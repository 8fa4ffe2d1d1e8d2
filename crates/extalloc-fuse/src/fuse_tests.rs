//! The FUSE handler's replies that never reach the kernel (`fuse.rs`): what the file
//! system counted for them (lookups, opens, listers) is undone, since no forget or release
//! will come. Sockets stand in for `/dev/fuse`: a closed peer is a dropped request.

use crate::fs::tests::{device, fresh, mkdir, put};
use crate::fs::ROOT;
use crate::fuse::FuseFs;
use extalloc_fuse_transport::{CreateIn, Handler, Op, Reply, Request};
use std::ffi::OsStr;
use std::fs::File;
use std::sync::Arc;

/// A connected pair of sequenced-packet sockets: one write is one read, as on
/// `/dev/fuse`.
fn pair() -> (File, File) {
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    let flags = SocketFlags::CLOEXEC;
    let (a, b) = socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, flags, None).unwrap();
    (File::from(a), File::from(b))
}

/// A reply that cannot be sent: the other end of its socket is closed, as the kernel
/// has dropped an interrupted request.
fn lost() -> File {
    pair().0
}

fn request(nodeid: u64) -> Request {
    Request {
        unique: 9,
        opcode: 0,
        nodeid,
        uid: 0,
        gid: 0,
        pid: 1,
    }
}

/// What the file system counted for a reply that never reached the kernel is undone:
/// a lookup's and a made name's lookup, an open's open count, an opendir's lister, a
/// create's lookup and open, `readdirplus`'s lookups. The kernel would never send the
/// forget or release that undoes them otherwise.
#[test]
fn replies_that_never_arrive_undo_what_they_counted() {
    let dev = device(91);
    let fs = Arc::new(fresh(&dev));
    let d = mkdir(&fs, ROOT, "d");
    let f = put(&fs, d, "f", b"data");
    let dir = std::env::temp_dir();
    let fuse = FuseFs::new(fs.clone(), &dir);
    let lookups = |ino| fs.ns.read().nodes.get(&ino).map_or(0, |n| n.lookups.get());
    let opens = |ino| fs.ns.read().nodes.get(&ino).map_or(0, |n| n.open);
    let listers = || fs.ns.read().dir(d).unwrap().entries.listers();
    let (l0, o0) = (lookups(f), opens(f));
    let out = lost();
    fuse.serve(
        &request(d),
        Op::Lookup(OsStr::new("f")),
        Reply::new(&out, 1),
    );
    assert_eq!(lookups(f), l0, "an undelivered lookup");
    fuse.serve(
        &request(f),
        Op::Open {
            flags: libc::O_RDONLY,
        },
        Reply::new(&out, 2),
    );
    assert_eq!(opens(f), o0, "an undelivered open");
    fuse.serve(&request(d), Op::Opendir, Reply::new(&out, 3));
    assert_eq!(listers(), 0, "an undelivered opendir");
    let create = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o100644,
        umask: 0,
        open_flags: 0,
    };
    let name = OsStr::new("made");
    fuse.serve(
        &request(d),
        Op::Create { name, create },
        Reply::new(&out, 4),
    );
    let made = fs.lookup(d, b"made").unwrap().ino;
    assert_eq!(
        (lookups(made), opens(made)),
        (1, 0),
        "only the lookup just made"
    );
    // readdirplus through a handle whose open did reach the kernel.
    let fh = fs.opendir(d).unwrap();
    let before = (lookups(f), lookups(made));
    let list = || Op::Readdir {
        fh,
        offset: 0,
        size: 4096,
        plus: true,
    };
    fuse.serve(&request(d), list(), Reply::new(&out, 5));
    assert_eq!(
        (lookups(f), lookups(made)),
        before,
        "an undelivered listing"
    );
    // The same listing delivered counts a lookup of each.
    let (a, _b) = pair();
    fuse.serve(&request(d), list(), Reply::new(&a, 6));
    assert_eq!((lookups(f), lookups(made)), (before.0 + 1, before.1 + 1));
    fs.releasedir(fh);
    fs.check_namespace().unwrap();
}
