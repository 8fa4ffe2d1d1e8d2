//! The transport against requests built byte by byte: decoding (every opcode served, and
//! what is malformed), replies as the kernel reads them, listings, and a whole session
//! (handshake, requests, the end) over a socket pair standing in for `/dev/fuse`.

use super::abi::{self, InHeader, OutHeader};
use super::serve::keeps_turn;
use super::*;
use std::sync::Mutex;
use zerocopy::FromBytes;

/// A request: header (length filled in) and argument bytes.
fn request(opcode: u32, nodeid: u64, args: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = args.concat();
    let h = InHeader {
        len: (40 + body.len()) as u32,
        opcode,
        unique: 7,
        nodeid,
        uid: 1000,
        gid: 100,
        pid: 42,
        ..Default::default()
    };
    [h.as_bytes(), &body].concat()
}

#[test]
fn names_and_data_are_borrowed_from_the_request() {
    let buf = request(abi::LOOKUP, 5, &[b"hello\0"]);
    let (req, op) = request::parse(&buf).unwrap();
    assert_eq!(
        (req.unique, req.nodeid, req.uid, req.gid, req.pid),
        (7, 5, 1000, 100, 42)
    );
    assert!(matches!(op, Op::Lookup(n) if n == "hello"));

    let w = abi::WriteIn {
        offset: 4096,
        size: 3,
        write_flags: abi::WRITE_CACHE,
        ..Default::default()
    };
    let buf = request(abi::WRITE, 9, &[w.as_bytes(), b"abcXYZ"]);
    match request::parse(&buf).unwrap().1 {
        Op::Write {
            offset,
            data,
            flags,
        } => {
            assert_eq!((offset, data, flags), (4096, &b"abc"[..], abi::WRITE_CACHE))
        }
        op => panic!("{op:?}"),
    }

    let r = abi::Rename2In {
        newdir: 3,
        flags: 2,
        padding: 0,
    };
    let buf = request(abi::RENAME2, 1, &[r.as_bytes(), b"a\0b\0"]);
    assert!(matches!(request::parse(&buf).unwrap().1,
        Op::Rename { name, newdir: 3, newname, flags: 2 } if name == "a" && newname == "b"));
    let buf = request(
        abi::RENAME,
        1,
        &[abi::RenameIn { newdir: 4 }.as_bytes(), b"a\0b\0"],
    );
    assert!(matches!(
        request::parse(&buf).unwrap().1,
        Op::Rename {
            newdir: 4,
            flags: 0,
            ..
        }
    ));

    let s = abi::SetxattrIn { size: 2, flags: 1 };
    let buf = request(abi::SETXATTR, 1, &[s.as_bytes(), b"user.x\0", b"v1"]);
    assert!(matches!(request::parse(&buf).unwrap().1,
        Op::Setxattr { name, value: b"v1", flags: 1 } if name == "user.x"));

    let c = abi::CreateIn {
        flags: 2,
        mode: 0o100644,
        umask: 0o22,
        open_flags: 0,
    };
    let buf = request(abi::TMPFILE, 1, &[c.as_bytes(), b"/\0"]);
    assert!(
        matches!(request::parse(&buf).unwrap().1, Op::Tmpfile { create } if create.mode == 0o100644)
    );
    let buf = request(abi::STATX, 1, &[abi::StatxIn::default().as_bytes()]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Statx(None)));
}

/// GETATTR through an open file names it (FUSE_GETATTR_FH); without the flag, or without
/// arguments (kernels before 7.9), it names none.
#[test]
fn getattr_names_the_open_file_it_came_through() {
    let through = abi::GetattrIn {
        getattr_flags: abi::GETATTR_FH,
        dummy: 0,
        fh: 42,
    };
    let buf = request(abi::GETATTR, 1, &[through.as_bytes()]);
    assert!(matches!(
        request::parse(&buf).unwrap().1,
        Op::Getattr(Some(42))
    ));
    let plain = abi::GetattrIn {
        getattr_flags: 0,
        ..through
    };
    let buf = request(abi::GETATTR, 1, &[plain.as_bytes()]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Getattr(None)));
    let buf = request(abi::GETATTR, 1, &[]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Getattr(None)));
}

#[test]
fn short_or_unterminated_arguments_are_malformed_and_unknown_opcodes_unknown() {
    // A name without its NUL.
    let buf = request(abi::LOOKUP, 1, &[b"hello"]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Malformed));
    // A write that says more bytes than it carries.
    let w = abi::WriteIn {
        size: 10,
        ..Default::default()
    };
    let buf = request(abi::WRITE, 1, &[w.as_bytes(), b"abc"]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Malformed));
    // A structure cut short.
    let buf = request(abi::SETATTR, 1, &[&[0u8; 20]]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Malformed));
    // A batch forget that lists fewer nodes than its count.
    let b = abi::BatchForgetIn { count: 3, dummy: 0 };
    let one = abi::ForgetOne {
        nodeid: 2,
        nlookup: 1,
    };
    let buf = request(abi::BATCH_FORGET, 0, &[b.as_bytes(), one.as_bytes()]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::Malformed));
    let b = abi::BatchForgetIn { count: 1, dummy: 0 };
    let buf = request(abi::BATCH_FORGET, 0, &[b.as_bytes(), one.as_bytes()]);
    assert!(matches!(request::parse(&buf).unwrap().1, Op::BatchForget(v) if v.len() == 1));
    // Opcodes not served: the kernel learns ENOSYS.
    for opcode in [31, 34, 37, 40, 46, 48, 4096, 9999] {
        let buf = request(opcode, 1, &[]);
        assert!(
            matches!(request::parse(&buf).unwrap().1, Op::Unknown),
            "{opcode}"
        );
    }
    // A header whose length is not what was read, or no header at all.
    let mut buf = request(abi::GETATTR, 1, &[]);
    buf.push(0);
    assert!(request::parse(&buf).is_none());
    assert!(request::parse(&buf[..30]).is_none());
}

#[test]
fn setattr_says_what_it_changes_and_times_before_1970_stay_negative() {
    let s = abi::SetattrIn {
        valid: abi::FATTR_MODE
            | abi::FATTR_SIZE
            | abi::FATTR_ATIME
            | abi::FATTR_MTIME
            | abi::FATTR_MTIME_NOW
            | abi::FATTR_CTIME,
        mode: 0o100600,
        size: 77,
        atime: (-5i64) as u64,
        atimensec: 9,
        ctime: 10,
        ctimensec: 1,
        uid: 123,
        ..Default::default()
    };
    let buf = request(abi::SETATTR, 1, &[s.as_bytes()]);
    let Op::Setattr(set) = request::parse(&buf).unwrap().1 else {
        panic!()
    };
    assert_eq!(set.mode, Some(0o100600));
    assert_eq!(set.size, Some(77));
    assert_eq!(set.uid, None, "FATTR_UID not set: the field is not read");
    assert_eq!(set.atime, Some(TimeOrNow::At(-5, 9)));
    assert_eq!(set.mtime, Some(TimeOrNow::Now));
    assert_eq!(set.ctime, Some((10, 1)));
}

#[test]
fn a_listing_is_padded_to_eight_bytes_and_stops_whole_when_full() {
    let mut d = DirBuf::new(64);
    assert!(!d.add(2, 1, 4, b"abc", None)); // 24 + 3 -> 32
    assert!(!d.add(3, 2, 8, b"defghijk", None)); // 24 + 8 -> 32
    assert!(
        d.add(4, 3, 8, b"x", None),
        "a third does not fit in 64 bytes"
    );
    // READDIRPLUS: the entry before each name; 128 + 24 + 1 padded to 160.
    let mut plus = DirBuf::new(160);
    let e = DirBuf::entry(
        std::time::Duration::from_secs(1),
        &Attr {
            ino: 9,
            ..Default::default()
        },
    );
    assert!(!plus.add(9, 1, 8, b"f", Some(&e)));
    assert!(plus.add(10, 2, 8, b"g", Some(&e)), "160 bytes hold one");
    let mut bytes = Vec::new();
    let (a, b) = seqpacket_pair();
    d.send(Reply::new(&a, 3));
    bytes.extend(read_message(&b));
    let h = OutHeader::read_from_prefix(&bytes).unwrap().0;
    assert_eq!((h.len, h.error, h.unique), (16 + 64, 0, 3));
    let first = abi::Dirent::read_from_prefix(&bytes[16..]).unwrap().0;
    assert_eq!(
        (first.ino, first.off, first.namelen, first.kind),
        (2, 1, 3, 4)
    );
    assert_eq!(&bytes[16 + 24..16 + 27], b"abc");
    assert_eq!(&bytes[16 + 27..16 + 32], &[0; 5], "padding is zero");
    let second = abi::Dirent::read_from_prefix(&bytes[16 + 32..]).unwrap().0;
    assert_eq!((second.ino, second.namelen), (3, 8));
}

#[test]
fn init_takes_only_what_the_kernel_offers() {
    let mut init = Init {
        offered: abi::WRITEBACK_CACHE | abi::POSIX_ACL,
        wanted: 0,
        max_write: 4096,
    };
    assert_eq!(
        init.want(abi::POSIX_ACL | abi::DONT_MASK),
        Err(abi::DONT_MASK)
    );
    assert_eq!(init.wanted, 0, "nothing of a refused ask is taken");
    assert_eq!(init.want(abi::WRITEBACK_CACHE), Ok(()));
    assert_eq!(init.wanted, abi::WRITEBACK_CACHE);
}

/// A connected pair of sequenced-packet sockets: one write is one read, as on /dev/fuse.
pub(super) fn seqpacket_pair() -> (File, File) {
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    let flags = SocketFlags::CLOEXEC;
    let (a, b) = socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, flags, None).unwrap();
    (File::from(a), File::from(b))
}

fn read_message(f: &File) -> Vec<u8> {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 16];
    let n = (&*f).read(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn replies_are_one_message_each_and_an_unanswered_request_gets_eio() {
    let (a, b) = seqpacket_pair();
    Reply::new(&a, 11).error(libc::ENOENT);
    let m = read_message(&b);
    let h = OutHeader::read_from_prefix(&m).unwrap().0;
    assert_eq!(
        (h.len as usize, h.error, h.unique),
        (m.len(), -libc::ENOENT, 11)
    );

    let attr = Attr {
        ino: 5,
        size: 10,
        mode: 0o100644,
        ..Default::default()
    };
    Reply::new(&a, 12).created(
        std::time::Duration::new(2, 5),
        &attr,
        99,
        abi::FOPEN_KEEP_CACHE,
    );
    let m = read_message(&b);
    assert_eq!(m.len(), 16 + 128 + 16);
    let e = abi::EntryOut::read_from_prefix(&m[16..]).unwrap().0;
    assert_eq!(
        (e.nodeid, e.entry_valid, e.attr_valid_nsec, e.attr.size),
        (5, 2, 5, 10)
    );
    let o = abi::OpenOut::read_from_prefix(&m[16 + 128..]).unwrap().0;
    assert_eq!((o.fh, o.open_flags), (99, abi::FOPEN_KEEP_CACHE));

    drop(Reply::new(&a, 13));
    let m = read_message(&b);
    let h = OutHeader::read_from_prefix(&m).unwrap().0;
    assert_eq!((h.error, h.unique), (-libc::EIO, 13));
}

/// Records what it is asked.
#[derive(Default)]
struct Recorder {
    forgotten: Mutex<Vec<(u64, u64)>>,
}

impl Handler for Recorder {
    fn init(&self, init: &mut Init) {
        let _ = init.want(abi::WRITEBACK_CACHE);
        init.set_max_write(1 << 20);
    }
    fn forget(&self, ino: u64, nlookup: u64) {
        self.forgotten.lock().unwrap().push((ino, nlookup));
    }
    fn serve(&self, req: &Request, op: Op<'_>, reply: Reply<'_>) {
        match op {
            Op::Getattr(_) => reply.attr(
                std::time::Duration::ZERO,
                &Attr {
                    ino: req.nodeid,
                    ..Default::default()
                },
            ),
            _ => reply.error(libc::EPERM),
        }
    }
}

#[test]
fn a_session_answers_init_then_each_request_and_ends_with_the_connection() {
    let (daemon, kernel) = seqpacket_pair();
    let send = |bytes: Vec<u8>| {
        use std::io::Write;
        (&kernel).write_all(&bytes).unwrap();
    };
    let init = abi::InitIn {
        major: 7,
        minor: 45,
        max_readahead: 1 << 17,
        flags: (abi::WRITEBACK_CACHE | abi::ASYNC_READ | abi::INIT_EXT | abi::MAX_PAGES) as u32,
        flags2: (abi::ALLOW_IDMAP >> 32) as u32,
        ..Default::default()
    };
    send(request(abi::INIT, 0, &[init.as_bytes()]));
    send(request(abi::GETATTR, 5, &[&[0u8; 16]]));
    send(request(
        abi::FORGET,
        5,
        &[abi::ForgetIn { nlookup: 3 }.as_bytes()],
    ));
    send(request(abi::LOOKUP, 1, &[b"no-nul"]));
    send(request(46, 1, &[])); // LSEEK: not served
    send(request(abi::UNLINK, 1, &[b"x\0"]));
    let handler = Recorder::default();
    let t = std::thread::spawn(move || {
        let mut buf = vec![0; buf_len()];
        let rings = handshake(&daemon, &handler, &mut buf, None).unwrap();
        assert!(rings.is_empty(), "no io_uring asked for");
        serve_loop(
            &daemon,
            &handler,
            &mut buf,
            &mut Poller::never(),
            &Gate::new(),
        )
        .unwrap();
        handler
    });
    let m = read_message(&kernel);
    let out = abi::InitOut::read_from_prefix(&m[16..]).unwrap().0;
    assert_eq!(
        (out.major, out.minor, out.max_write, out.max_pages),
        (7, abi::KERNEL_MINOR, 1 << 20, 256)
    );
    let flags = u64::from(out.flags) | u64::from(out.flags2) << 32;
    assert_eq!(
        flags,
        abi::WRITEBACK_CACHE | abi::ASYNC_READ | abi::INIT_EXT | abi::MAX_PAGES
    );
    let errors: Vec<i32> = (0..4)
        .map(|_| {
            OutHeader::read_from_prefix(&read_message(&kernel))
                .unwrap()
                .0
                .error
        })
        .collect();
    // GETATTR answered, FORGET not at all, the malformed LOOKUP EIO, LSEEK ENOSYS, UNLINK
    // the handler's.
    assert_eq!(errors, [0, -libc::EIO, -libc::ENOSYS, -libc::EPERM]);
    // The kernel's end closes: the session ends.
    rustix::net::shutdown(&kernel, rustix::net::Shutdown::Both).unwrap();
    let handler = t.join().unwrap();
    assert_eq!(*handler.forgotten.lock().unwrap(), [(5, 3)]);
}

#[test]
fn every_served_opcode_decodes_to_its_request() {
    use abi::*;
    let served = [
        INIT,
        LOOKUP,
        FORGET,
        GETATTR,
        SETATTR,
        READLINK,
        SYMLINK,
        MKNOD,
        MKDIR,
        UNLINK,
        RMDIR,
        RENAME,
        LINK,
        OPEN,
        READ,
        WRITE,
        STATFS,
        RELEASE,
        FSYNC,
        SETXATTR,
        GETXATTR,
        LISTXATTR,
        REMOVEXATTR,
        FLUSH,
        OPENDIR,
        READDIR,
        RELEASEDIR,
        FSYNCDIR,
        CREATE,
        INTERRUPT,
        DESTROY,
        IOCTL,
        NOTIFY_REPLY,
        BATCH_FORGET,
        FALLOCATE,
        READDIRPLUS,
        RENAME2,
        COPY_FILE_RANGE,
        TMPFILE,
        STATX,
    ];
    // Zeroed structures (a write of 0 bytes, a batch of 0 nodes) and two names: enough for
    // any of them.
    let args = [&[0u8; 128][..], b"a\0b\0"].concat();
    for opcode in served {
        let buf = request(opcode, 1, &[&args]);
        let op = request::parse(&buf).unwrap().1;
        assert!(
            !matches!(op, Op::Unknown | Op::Malformed),
            "opcode {opcode}: {op:?}"
        );
    }
}

#[test]
fn an_old_kernels_short_init_is_read_and_refused_by_version() {
    let short = [7u32, 34, 1 << 17, 1];
    let buf = request(abi::INIT, 0, &[short.as_bytes()]);
    let Op::Init(i) = request::parse(&buf).unwrap().1 else {
        panic!()
    };
    assert_eq!((i.major, i.minor, i.flags, i.flags2), (7, 34, 1, 0));
    let (daemon, kernel) = seqpacket_pair();
    {
        use std::io::Write;
        (&kernel).write_all(&buf).unwrap();
    }
    let mut b = vec![0; buf_len()];
    let Err(e) = handshake(&daemon, &Recorder::default(), &mut b, None) else {
        panic!("a kernel older than 7.36 is refused")
    };
    assert!(e.to_string().contains("7.36"), "{e}");
    let h = OutHeader::read_from_prefix(&read_message(&kernel))
        .unwrap()
        .0;
    assert_eq!(h.error, -libc::EPROTO);
}

proptest::proptest! {
    /// The decoder is the one part of the transport that reads bytes it did not write:
    /// any request, of any opcode (every one from 0 to 60, and beyond), with any argument
    /// bytes and any extension length, decodes to an operation or to `Malformed`, never
    /// panics, and never reads past its buffer (the fuzz target `fuse_request` runs the
    /// same on arbitrary buffers: `cd fuzz && cargo +nightly fuzz run fuse_request`).
    #[test]
    fn the_decoder_takes_any_bytes(
        opcode in proptest::prop_oneof![0u32..64, proptest::prelude::any::<u32>()],
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        extlen in 0u16..64,
        cut in 0usize..8,
    ) {
        let mut buf = request(opcode, 1, &[&body]);
        buf[36..38].copy_from_slice(&extlen.to_le_bytes());
        let _ = request::parse(&buf);
        // A buffer shorter than its header says is refused, not read past.
        let short = &buf[..buf.len().saturating_sub(cut + 1)];
        proptest::prop_assert!(request::parse(short).is_none());
    }
}

#[test]
fn namespace_requests_keep_the_turn_and_requests_that_may_wait_pass_it_on() {
    let name = std::ffi::OsStr::new("x");
    for op in [
        Op::Lookup(name),
        Op::Unlink(name),
        Op::Getattr(None),
        Op::Release,
    ] {
        assert!(keeps_turn(&op), "{op:?}");
    }
    let write = Op::Write {
        offset: 0,
        data: b"x",
        flags: 0,
    };
    for op in [write, Op::Fsync, Op::Fsyncdir, Op::Flush, Op::Destroy] {
        assert!(!keeps_turn(&op), "{op:?}");
    }
}

/// An open's reply says whether it reached the kernel: an interrupted request (the send
/// finds it gone, `ENOENT`) or a failed send is `false`, so the handle can be released,
/// since no release will come for it.
#[test]
fn an_open_reply_says_whether_it_reached_the_kernel() {
    struct Gone(i32);
    impl super::reply::Put for Gone {
        fn put(&self, _: u64, _: i32, _: &[&[u8]]) -> std::io::Result<()> {
            match self.0 {
                0 => Ok(()),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        }
    }
    for (errno, reached) in [(0, true), (libc::ENOENT, false), (libc::EIO, false)] {
        let put = Gone(errno);
        let reply = Reply::to(super::reply::Sink::Ring(&put), 7);
        assert_eq!(reply.opened(3, 0), reached, "send error {errno}");
    }
    let (a, _b) = seqpacket_pair();
    assert!(Reply::new(&a, 8).opened(4, 0), "sent on the descriptor");
}
