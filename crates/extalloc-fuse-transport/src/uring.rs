//! FUSE over io_uring (`extalloc mount`, wherever the kernel offers it): requests come through
//! io_uring commands on the `/dev/fuse` descriptor instead of `read(2)`, and each reply is
//! committed with the same command that fetches the next request: one system call submits
//! a pass's replies, and a thread whose completion queue is then empty waits in another
//! (Linux 6.14 and later, with `/sys/module/fuse/parameters/enable_uring` set before the
//! mount). FORGET, INTERRUPT and notifications stay on the descriptor (`mod.rs`).
//!
//! Data structures: one [`Queue`] per possible CPU (the kernel queues a request on the
//! queue of the CPU its caller runs on, and switches to the rings only once every queue
//! has an entry), each an io_uring of 128-byte submission entries owned by one thread
//! pinned to that CPU, and `depth` entries [`Ent`]: a 288-byte header buffer (the request's
//! header, its opcode's structure, the entry's commit id and payload size) and a payload
//! buffer (names, data, and the reply), registered once and reused; [`Slot`], the entry a
//! reply is written into.
//!
//! Invariant: every request that arrives through an entry is committed exactly once
//! (`COMMIT_AND_FETCH`), which parks the entry for the next request; a queue ends when
//! every one of its entries has come back with the connection's end (`ENOTCONN`,
//! `ECONNABORTED`). The queues are built before `FUSE_INIT` is answered and the flag is
//! asked for only if all were built, since a kernel promised the rings waits for all of
//! them (`mod.rs`).
//!
//! Lock order: none (a queue and its entries belong to its thread; a slot's buffers to the
//! request being answered).

use super::abi::{self, InHeader, RingEntInOut};
use super::handler::{dispatch, Handler};
use super::reply::{out_header, Put, Sink};
use super::{request, Reply};
use io_uring::{cqueue, opcode, squeue::Entry128, types, IoUring};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use zerocopy::{FromBytes, IntoBytes};

/// `FUSE_IO_URING_CMD_REGISTER`: an entry's buffers handed over, to fetch a request.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: a reply committed, the next request fetched.
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// One entry's buffers. Boxed: the kernel holds their addresses for the connection's life.
struct Ent {
    header: Box<[u8; abi::RING_HEADER]>,
    payload: Box<[u8]>,
    iov: Box<[rustix::io_uring::iovec; 2]>,
}

/// One CPU's ring and its entries.
pub(crate) struct Queue {
    qid: u16,
    fd: RawFd,
    ring: IoUring<Entry128, cqueue::Entry>,
    ents: Vec<Ent>,
}

// SAFETY: the iovecs' raw pointers point into the entry's own boxed buffers, which move
// with the queue to the one thread that uses it.
unsafe impl Send for Queue {}

/// One queue per possible CPU, each with `depth` entries of `payload` bytes.
pub(crate) fn build(dev: &File, payload: usize, depth: usize) -> io::Result<Vec<Queue>> {
    let n = possible_cpus()?;
    (0..n)
        .map(|qid| Queue::new(dev, qid as u16, payload, depth))
        .collect()
}

/// CPUs that may ever exist (`/sys/devices/system/cpu/possible`: "0-1", "0-3,8-11").
fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let last = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .ok_or_else(|| io::Error::other(format!("possible CPUs unreadable: {text:?}")))?;
    Ok(last + 1)
}

impl Queue {
    fn new(dev: &File, qid: u16, payload: usize, depth: usize) -> io::Result<Queue> {
        assert!(
            depth > 0 && payload >= 8192,
            "depth {depth}, payload {payload}"
        );
        let ring = IoUring::<Entry128, cqueue::Entry>::builder()
            .setup_cqsize(2 * depth as u32)
            .build(depth as u32)?;
        let ents = (0..depth)
            .map(|_| {
                let mut header = Box::new([0u8; abi::RING_HEADER]);
                let mut payload = vec![0u8; payload].into_boxed_slice();
                let iov = Box::new([
                    rustix::io_uring::iovec {
                        iov_base: header.as_mut_ptr().cast(),
                        iov_len: header.len(),
                    },
                    rustix::io_uring::iovec {
                        iov_base: payload.as_mut_ptr().cast(),
                        iov_len: payload.len(),
                    },
                ]);
                Ent {
                    header,
                    payload,
                    iov,
                }
            })
            .collect();
        Ok(Queue {
            qid,
            fd: dev.as_raw_fd(),
            ring,
            ents,
        })
    }

    /// The command for entry `i`: REGISTER (its two buffers) or COMMIT_AND_FETCH of
    /// `commit_id`.
    fn sqe(&self, i: usize, cmd_op: u32, commit_id: u64) -> Entry128 {
        let req = abi::RingCmdReq {
            flags: 0,
            commit_id,
            qid: self.qid,
            padding: [0; 6],
        };
        let mut cmd = [0u8; 80];
        cmd[..req.as_bytes().len()].copy_from_slice(req.as_bytes());
        let mut b = opcode::UringCmd80::new(types::Fd(self.fd), cmd_op).cmd(cmd);
        if cmd_op == CMD_REGISTER {
            b = b.addr(Some(self.ents[i].iov.as_ptr() as u64));
        }
        let sqe = b.build().user_data(i as u64);
        match cmd_op {
            // The kernel wants the two iovecs' count in the entry's `len`, which the
            // crate's UringCmd80 (io-uring 0.7) has no setter for.
            CMD_REGISTER => with_len(sqe, 2),
            _ => sqe,
        }
    }

    fn push(&mut self, sqe: Entry128) -> io::Result<()> {
        // SAFETY: the buffers the command names live in `self.ents`, boxed, as long as the
        // ring (dropped with the queue after its last completion).
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    /// Pins the thread to the queue's CPU, registers the entries, then serves until the
    /// connection ends. If the kernel refuses every entry's registration (the rings were
    /// turned off for the connection: it then queues every request on the descriptor),
    /// the thread reads requests from its own clone of `dev` instead, so the mount keeps
    /// its threads.
    pub(crate) fn run<H: Handler>(mut self, handler: &H, dev: &File) -> io::Result<()> {
        pin_to(self.qid as usize);
        for i in 0..self.ents.len() {
            let sqe = self.sqe(i, CMD_REGISTER, 0);
            self.push(sqe)?;
        }
        let mut scratch = vec![0u8; self.ents[0].payload.len() + abi::RING_HEADER];
        let mut done = Vec::with_capacity(self.ents.len());
        let (mut live, mut served, mut refused) = (self.ents.len(), false, None);
        while live > 0 {
            // The replies go first, on their own: the kernel (without full preemption)
            // switches to a caller that a reply woke on this CPU only on the way back to
            // user space, and that caller's next request then waits in the completion
            // queue when this thread looks, so it does not sleep for it. Only an empty
            // queue is waited on.
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let wait = if self.ring.completion().is_empty() {
                self.ring.submit_and_wait(1)
            } else {
                Ok(0)
            };
            match wait {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data() as usize, c.result())),
            );
            for &(i, res) in &done {
                match -res {
                    0 => {
                        served = true;
                        let commit_id = self.serve(i, handler, &mut scratch);
                        let sqe = self.sqe(i, CMD_COMMIT_AND_FETCH, commit_id);
                        self.push(sqe)?;
                    }
                    libc::EAGAIN | libc::EINTR => {
                        let sqe = self.sqe(i, CMD_REGISTER, 0);
                        self.push(sqe)?;
                    }
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED => live -= 1,
                    e => {
                        live -= 1;
                        refused = Some(io::Error::from_raw_os_error(e));
                    }
                }
            }
        }
        match refused {
            Some(e) if !served => {
                log::warn!(
                    "FUSE io_uring queue {}: the kernel refused its entries ({e}); its thread \
                     reads /dev/fuse instead",
                    self.qid
                );
                drop(self.ring);
                let clone = super::dev::clone_dev(dev)?;
                super::serve::serve_loop(
                    &clone,
                    handler,
                    &mut vec![0; super::dev::buf_len()],
                    &mut super::poll::Poller::never(),
                    &super::gate::Gate::new(),
                )
            }
            Some(e) => {
                log::error!("FUSE io_uring queue {}: an entry failed: {e}", self.qid);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Serves the request entry `i` holds; returns its commit id.
    fn serve<H: Handler>(&mut self, i: usize, handler: &H, scratch: &mut [u8]) -> u64 {
        let ent = &mut self.ents[i];
        let (h, _) = InHeader::read_from_prefix(&ent.header[..]).expect("288 bytes hold it");
        let (io, _) = RingEntInOut::read_from_prefix(&ent.header[abi::RING_ENT_IN_OUT..])
            .expect("288 bytes hold it");
        // The request as /dev/fuse would have carried it: header, the opcode's structure
        // (at most 128 bytes), the payload.
        let size = std::mem::size_of::<InHeader>();
        let payload = io.payload_sz as usize;
        let op_len = (h.len as usize).checked_sub(size + payload);
        let slot = Slot {
            header: RefCell::new(&mut ent.header[..]),
            payload: RefCell::new(&mut ent.payload[..]),
        };
        let fits =
            op_len.filter(|&n| n <= abi::RING_OP_IN && payload <= slot.payload.borrow().len());
        let Some(op_len) = fits else {
            log::error!(
                "a FUSE io_uring request of bad sizes (opcode {}): EIO",
                h.opcode
            );
            Reply::to(Sink::Ring(&slot), h.unique).error(libc::EIO);
            return io.commit_id;
        };
        {
            let head = slot.header.borrow();
            let body = slot.payload.borrow();
            scratch[..size].copy_from_slice(&head[..size]);
            scratch[size..size + op_len]
                .copy_from_slice(&head[abi::RING_OP..abi::RING_OP + op_len]);
            scratch[size + op_len..h.len as usize].copy_from_slice(&body[..payload]);
        }
        match request::parse(&scratch[..h.len as usize]) {
            Some((req, op)) => {
                dispatch(handler, &req, op, Reply::to(Sink::Ring(&slot), req.unique))
            }
            None => Reply::to(Sink::Ring(&slot), h.unique).error(libc::EIO),
        }
        io.commit_id
    }
}

/// The entry a reply goes into: the out header where the request's header was, the body
/// at the start of the payload buffer, its size in the entry's `payload_sz`.
pub(crate) struct Slot<'b> {
    header: RefCell<&'b mut [u8]>,
    payload: RefCell<&'b mut [u8]>,
}

impl Put for Slot<'_> {
    fn put(&self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        let mut body = self.payload.borrow_mut();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (error, total) = if error != 0 {
            (error, 0)
        } else if total > body.len() {
            log::error!("a FUSE reply of {total} bytes exceeds the io_uring payload: EIO");
            (-libc::EIO, 0)
        } else {
            let mut at = 0;
            for p in parts {
                body[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            (error, at)
        };
        let mut head = self.header.borrow_mut();
        let out = out_header(unique, error, &[&body[..total]]);
        head[..out.as_bytes().len()].copy_from_slice(out.as_bytes());
        let sz = abi::RING_ENT_IN_OUT + abi::RING_PAYLOAD_SZ;
        head[sz..sz + 4].copy_from_slice(&(total as u32).to_ne_bytes());
        Ok(())
    }
}

/// The kernel's 128-byte submission entry as rustix defines it (`io_uring_sqe`, field by
/// field, then the 64 bytes of the command's tail): what `Entry128` holds, with names.
#[repr(C)]
#[derive(Clone, Copy)]
struct Sqe128 {
    sqe: rustix::io_uring::io_uring_sqe,
    tail: [u8; 64],
}

const _: () = assert!(
    std::mem::size_of::<Sqe128>() == 128
        && std::mem::size_of::<Entry128>() == 128
        && std::mem::align_of::<Sqe128>() == std::mem::align_of::<Entry128>()
);

/// `sqe` with its `len` field set, through rustix's definition of the entry (no byte
/// offsets of ours).
fn with_len(sqe: Entry128, len: u32) -> Entry128 {
    assert_eq!(
        sqe.get_opcode(),
        rustix::io_uring::IoringOp::UringCmd as u32,
        "an io_uring command"
    );
    // SAFETY: Entry128 is #[repr(C)] over the kernel's submission entry and its 64-byte
    // tail, as Sqe128 is (same size and alignment, asserted above); every field of
    // rustix's entry is plain data or a union of plain data, except `opcode`, an enum whose
    // byte here is IORING_OP_URING_CMD (asserted above), one of its values.
    let mut raw: Sqe128 = unsafe { std::mem::transmute::<Entry128, Sqe128>(sqe) };
    raw.sqe.len.len = len;
    // SAFETY: the same bytes back, every bit pattern valid for Entry128 (the crate's
    // bindgen structs of plain integers and unions).
    unsafe { std::mem::transmute::<Sqe128, Entry128>(raw) }
}

/// Keeps the calling thread on `cpu` (where the kernel queues the requests of its callers);
/// a refusal only costs speed.
fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if rustix::thread::sched_setaffinity(None, &set).is_err() {
        log::warn!("cannot pin the FUSE io_uring queue thread to CPU {cpu}");
    }
}
