//! Polling `/dev/fuse` for a bounded while before a serving thread sleeps
//! (`extalloc mount --poll-us N`).
//!
//! A request through `/dev/fuse` wakes a sleeping daemon thread and its reply wakes the
//! sleeping caller. The scheduler wakes each on an idle CPU where it can, so a caller and
//! the daemon thread serving it end up on different CPUs and every round trip wakes a CPU
//! out of its idle state twice (on a virtual machine, each is an exit to the hypervisor).
//! A thread that has just answered a request and keeps reading without sleeping for a few
//! tens of microseconds takes the caller's next request on a CPU that is already awake:
//! creates, renames and unlinks ran 1.28-1.32x faster, `tar -xf` 1.27x, cold 4 KiB random
//! reads 1.25x (docs/mount.md, "Round trips"; docs/results.md, "Polling /dev/fuse").
//!
//! Polling spends a CPU nobody else wants, and no more:
//!
//! - **it gives way**: between two reads the thread yields its CPU (`sched_yield`), so
//!   any task waiting for that CPU (the caller itself, woken there, a second caller, a
//!   build) runs first (fs_mark's two writers ran 1.17x faster with it; a poll that spun
//!   without yielding made them 0.64-0.85x as fast);
//! - **one poller at a time**: only the thread holding the session's turn to read
//!   (`gate.rs`) reads at all, so it is the only one that polls; the others wait at the
//!   gate, off the kernel's wait queue;
//! - **a miss backs off**: a poll that found nothing in its window stops this thread
//!   polling for [`MISS_BACKOFF`] windows, so a mount with sparse requests spends at most
//!   about a ninth of a CPU on it;
//! - **not on busy CPUs**: a yield that kept the thread off its CPU for [`CONTENDED`] or
//!   more (another task ran) ends the poll as a miss: on a loaded machine a yielding
//!   poller waits behind other tasks while the request it polls for waits too, where a
//!   thread asleep in `poll(2)` is woken as the request comes (with the turn held by the
//!   poller, `gate.rs`, no other thread is on the connection to take it).
//!
//! The descriptor stays non-blocking for the session's life (set once, `mod.rs`): a poll is
//! a series of reads that return at once, and a thread that stops polling sleeps in
//! `poll(2)` until a request is queued (`dev::read_request`), so no read changes the
//! descriptor's flags (two `fcntl` calls each way per request before).
//!
//! Through FUSE over io_uring, the descriptor carries only forgets and interrupts, and its
//! one thread never polls ([`Poller::for_forgets`]): after a forget it waits
//! [`FORGET_PAUSE`] before reading again, so that the forgets of an unlink storm reach it
//! as the kernel's batches (`FUSE_BATCH_FORGET`, every forget queued at the read) rather
//! than one wake-up each. A forget has no reply and nobody waits for it; an interrupt
//! that comes during the pause is read at its end.
//!
//! Data structures: [`Poller`], one per serving thread (its window, when it may poll
//! again, whether it pauses after a forget, its counts). Invariant: a thread polls only
//! while it holds the session's turn to read (`gate.rs`), and pauses only after a forget
//! and only where asked ([`Poller::for_forgets`]). Lock order: none.

use super::abi;
use super::dev::{read_once, read_request, Read};
use rustix::fs::OFlags;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// After a poll that found nothing, this many windows pass before the thread polls again.
pub(super) const MISS_BACKOFF: u32 = 8;

/// A yield that kept the thread off its CPU this long gave it to another task: the CPUs
/// are contended, and the poll ends as a miss (a yield with nobody else to run returns in
/// about a microsecond).
const CONTENDED: Duration = Duration::from_micros(50);

/// How long the forget reader of a session served through io_uring waits after a forget
/// before it reads again (module documentation). An unlink storm answered at 30,000 a
/// second queues about 30 forgets meanwhile, read in one request.
pub(super) const FORGET_PAUSE: Duration = Duration::from_millis(1);

/// What one serving thread's polls did (for tests and the log).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PollCounts {
    /// Polls that took a request.
    pub hits: u64,
    /// Polls whose window ended with nothing read.
    pub misses: u64,
    /// Pauses after a forget ([`Poller::for_forgets`]).
    pub forget_pauses: u64,
}

/// One serving thread's polling state.
pub(super) struct Poller {
    window: Duration,
    /// No poll before this instant (a back-off).
    resume_at: Instant,
    /// Wait this long after a forget before the next read (zero: never).
    forget_pause: Duration,
    /// The last request read was a forget.
    after_forget: bool,
    counts: PollCounts,
}

impl Poller {
    /// A poller with this window (zero never polls).
    pub(super) fn new(window: Duration) -> Poller {
        Poller {
            window,
            resume_at: Instant::now(),
            forget_pause: Duration::ZERO,
            after_forget: false,
            counts: PollCounts::default(),
        }
    }

    /// The poller of the one thread reading a descriptor that carries only forgets and
    /// interrupts (FUSE over io_uring): it never polls, and waits `pause` after each forget
    /// so that the next ones come in a batch.
    pub(super) fn for_forgets(pause: Duration) -> Poller {
        Poller {
            forget_pause: pause,
            ..Poller::never()
        }
    }

    /// A poller that never polls.
    pub(super) fn never() -> Poller {
        Poller::new(Duration::ZERO)
    }

    /// What its polls did so far.
    pub(crate) fn counts(&self) -> PollCounts {
        self.counts
    }

    /// The next request into `buf`, polling first if allowed; `Ok(None)` when the
    /// connection is gone. The caller holds the session's turn to read (`gate.rs`).
    pub(super) fn read<'b>(
        &mut self,
        dev: &File,
        buf: &'b mut [u8],
    ) -> io::Result<Option<&'b [u8]>> {
        if self.after_forget {
            debug_assert!(!self.forget_pause.is_zero(), "a pause only where asked");
            self.counts.forget_pauses += 1;
            std::thread::sleep(self.forget_pause);
        }
        let got = if self.window.is_zero() || Instant::now() < self.resume_at {
            read_request(dev, buf)
        } else {
            match self.poll(dev, buf) {
                Ok(Some(n)) => Ok(Some(&buf[..n])),
                Ok(None) => read_request(dev, buf),
                Err(e) => Err(e),
            }
        };
        self.after_forget =
            !self.forget_pause.is_zero() && matches!(&got, Ok(Some(msg)) if is_forget(msg));
        got
    }

    /// Reads without sleeping, yielding the CPU between reads, until a request comes or
    /// the window ends (`Ok(None)`: read nothing, or the connection is gone, which the
    /// sleeping read then says); a miss backs off.
    fn poll(&mut self, dev: &File, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let fd = dev.as_fd();
        // A debug assertion: the check is an `fcntl` system call, which in release builds
        // cost one per request read (`strace -c` of an unlink storm: 4.8 an entry).
        debug_assert!(
            !is_blocking(fd),
            "a poll reads a non-blocking descriptor (set once for the session)"
        );
        let start = Instant::now();
        let got = loop {
            match read_once(fd, buf) {
                Read::Got(n) => break Ok(Some(n)),
                Read::Again if start.elapsed() < self.window => {
                    let before = Instant::now();
                    rustix::thread::sched_yield();
                    // Another task ran meanwhile: the CPUs are contended, and a thread that
                    // yields waits behind that task for its next read, where one asleep is
                    // woken as the request comes. Stop polling and back off.
                    if before.elapsed() >= CONTENDED {
                        break Ok(None);
                    }
                }
                Read::Again | Read::Gone => break Ok(None),
                Read::Failed(e) => break Err(e),
            }
        };
        match got {
            Ok(Some(_)) => self.counts.hits += 1,
            Ok(None) => {
                self.counts.misses += 1;
                self.resume_at = Instant::now() + self.window * MISS_BACKOFF;
            }
            Err(_) => {}
        }
        got
    }
}

/// Whether `msg` is a forget (`FUSE_FORGET` or `FUSE_BATCH_FORGET`), by its header's
/// opcode.
fn is_forget(msg: &[u8]) -> bool {
    use zerocopy::FromBytes;
    abi::InHeader::read_from_prefix(msg)
        .is_ok_and(|(h, _)| h.opcode == abi::FORGET || h.opcode == abi::BATCH_FORGET)
}

/// Whether `fd` is blocking (no `O_NONBLOCK`); an fd whose flags cannot be read counts as
/// blocking (the checks that ask want it non-blocking).
fn is_blocking(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_getfl(fd).map_or(true, |f| !f.contains(OFlags::NONBLOCK))
}

/// Makes `fd` non-blocking for good (a serving thread's descriptor, once, before it
/// serves: `mod.rs`).
pub(super) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    if !flags.contains(OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    }
    debug_assert!(!is_blocking(fd), "the descriptor is non-blocking");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A connected pair standing in for `/dev/fuse`: one message per read; the daemon's
    /// end non-blocking, as a session's descriptors are.
    fn pair() -> (File, File) {
        let (daemon, kernel) = crate::tests::seqpacket_pair();
        set_nonblocking(daemon.as_fd()).unwrap();
        (daemon, kernel)
    }

    fn blocking(f: &File) -> bool {
        is_blocking(f.as_fd())
    }

    #[test]
    fn a_request_within_the_window_is_taken_by_the_poll_without_flipping_the_descriptor() {
        let (daemon, kernel) = pair();
        let mut p = Poller::new(Duration::from_secs(5));
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            (&kernel).write_all(b"request").unwrap();
            kernel
        });
        let mut buf = [0u8; 64];
        let got = p.read(&daemon, &mut buf).unwrap().map(<[u8]>::to_vec);
        assert_eq!(got.as_deref(), Some(&b"request"[..]));
        // A hit, or on busy CPUs a poll ended by a contended yield and the request slept for.
        assert_eq!(p.counts().hits + p.counts().misses, 1, "{:?}", p.counts());
        assert!(!blocking(&daemon), "the descriptor stays non-blocking");
        drop(sender.join().unwrap());
        assert_eq!(p.read(&daemon, &mut buf).unwrap(), None, "the peer is gone");
    }

    #[test]
    fn a_poll_that_misses_sleeps_for_the_request_and_backs_off() {
        let (daemon, kernel) = pair();
        let window = Duration::from_millis(50);
        let mut p = Poller::new(window);
        let start = Instant::now();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            (&kernel).write_all(b"late").unwrap();
            (&kernel).write_all(b"next").unwrap();
            kernel
        });
        let mut buf = [0u8; 64];
        let got = p.read(&daemon, &mut buf).unwrap().map(<[u8]>::to_vec);
        assert_eq!(
            got.as_deref(),
            Some(&b"late"[..]),
            "the sleeping read takes it"
        );
        assert_eq!((p.counts().hits, p.counts().misses), (0, 1));
        assert!(
            !blocking(&daemon),
            "a miss leaves the descriptor non-blocking"
        );
        assert!(
            p.resume_at >= start + window * MISS_BACKOFF,
            "a miss backs off for {MISS_BACKOFF} windows"
        );
        let got = p.read(&daemon, &mut buf).unwrap().map(<[u8]>::to_vec);
        assert_eq!(got.as_deref(), Some(&b"next"[..]));
        // Within the back-off (450 ms from the start; the request came at 300 ms) the read
        // sleeps, here finding the request at once, without polling, unless this thread
        // was descheduled past it.
        let polls = p.counts().hits + p.counts().misses;
        assert!(
            polls == 1 || Instant::now() >= p.resume_at,
            "{:?}",
            p.counts()
        );
        drop(sender.join().unwrap());
    }

    /// A request header with `opcode`, as the kernel writes it.
    fn header(opcode: u32) -> Vec<u8> {
        use zerocopy::{FromZeros, IntoBytes};
        let mut h = abi::InHeader::new_zeroed();
        h.opcode = opcode;
        h.len = h.as_bytes().len() as u32;
        h.as_bytes().to_vec()
    }

    #[test]
    fn the_forget_reader_pauses_after_a_forget_and_only_then() {
        let (daemon, kernel) = pair();
        let pause = Duration::from_millis(100);
        let mut p = Poller::for_forgets(pause);
        let mut buf = [0u8; 128];
        for op in [
            abi::FORGET,
            abi::BATCH_FORGET,
            abi::INTERRUPT,
            abi::INTERRUPT,
        ] {
            (&kernel).write_all(&header(op)).unwrap();
        }
        let opcode = |m: &[u8]| {
            <abi::InHeader as zerocopy::FromBytes>::read_from_prefix(m)
                .unwrap()
                .0
                .opcode
        };
        let got = p.read(&daemon, &mut buf).unwrap().map(opcode);
        assert_eq!((got, p.counts().forget_pauses), (Some(abi::FORGET), 0));
        let start = Instant::now();
        let got = p.read(&daemon, &mut buf).unwrap().map(opcode);
        assert_eq!(got, Some(abi::BATCH_FORGET));
        assert!(start.elapsed() >= pause, "read only after the pause");
        let got = p.read(&daemon, &mut buf).unwrap().map(opcode);
        assert_eq!((got, p.counts().forget_pauses), (Some(abi::INTERRUPT), 2));
        // An interrupt is no forget: the next read comes at once.
        let got = p.read(&daemon, &mut buf).unwrap().map(opcode);
        assert_eq!((got, p.counts().forget_pauses), (Some(abi::INTERRUPT), 2));
        assert_eq!(
            (p.counts().hits, p.counts().misses),
            (0, 0),
            "it never polls"
        );
    }

    #[test]
    fn a_zero_window_never_polls() {
        let (daemon, kernel) = pair();
        (&kernel).write_all(b"x").unwrap();
        (&kernel).write_all(&header(abi::FORGET)).unwrap();
        (&kernel).write_all(b"y").unwrap();
        let mut p = Poller::never();
        let mut buf = [0u8; 64];
        assert_eq!(p.read(&daemon, &mut buf).unwrap(), Some(&b"x"[..]));
        assert!(p.read(&daemon, &mut buf).unwrap().is_some());
        assert_eq!(p.read(&daemon, &mut buf).unwrap(), Some(&b"y"[..]));
        assert_eq!(
            p.counts(),
            PollCounts::default(),
            "and never pauses after a forget"
        );
    }

    #[test]
    fn a_sleeping_read_of_a_non_blocking_descriptor_waits_for_the_request() {
        let (daemon, kernel) = pair();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            (&kernel).write_all(b"later").unwrap();
            kernel
        });
        let mut buf = [0u8; 8];
        let got = read_request(&daemon, &mut buf).unwrap().map(<[u8]>::to_vec);
        assert_eq!(got.as_deref(), Some(&b"later"[..]));
        drop(sender.join().unwrap());
        assert_eq!(read_request(&daemon, &mut buf).unwrap(), None);
    }
}
