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
//! - **one poller at a time** ([`MAX_POLLERS`]): the session's other serving threads
//!   sleep as before;
//! - **a miss backs off**: a poll that found nothing in its window stops this thread
//!   polling for [`MISS_BACKOFF`] windows, so a mount with sparse requests spends at most
//!   about a ninth of a CPU on it.
//!
//! Data structures: [`Poller`], one per serving thread (its window, when it may poll
//! again, its counts, and the session's count of threads polling now). Invariant: a thread
//! polls only while it holds one of the [`MAX_POLLERS`] slots of that count, and its
//! descriptor is blocking whenever it does not poll, so it sleeps in a blocking `read(2)`
//! (the kernel wakes one sleeper per request). Lock order: none (one atomic).

use super::dev::{read_once, read_request, Read};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many of a session's threads may poll at once: one CPU at most is spent polling.
const MAX_POLLERS: usize = 1;

/// After a poll that found nothing, this many windows pass before the thread polls again.
pub(super) const MISS_BACKOFF: u32 = 8;

/// What one serving thread's polls did (for tests and the log).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PollCounts {
    /// Polls that took a request.
    pub hits: u64,
    /// Polls whose window ended with nothing read.
    pub misses: u64,
}

/// One serving thread's polling state.
pub(super) struct Poller {
    window: Duration,
    /// The session's threads polling now (at most [`MAX_POLLERS`]), shared by its pollers.
    polling: Arc<AtomicUsize>,
    /// No poll before this instant (a back-off).
    resume_at: Instant,
    counts: PollCounts,
}

impl Poller {
    /// A poller with this window (zero never polls), one of those sharing `polling`.
    pub(super) fn new(window: Duration, polling: Arc<AtomicUsize>) -> Poller {
        Poller {
            window,
            polling,
            resume_at: Instant::now(),
            counts: PollCounts::default(),
        }
    }

    /// A poller that never polls.
    pub(super) fn never() -> Poller {
        Poller::new(Duration::ZERO, Arc::new(AtomicUsize::new(0)))
    }

    /// What its polls did so far.
    pub(crate) fn counts(&self) -> PollCounts {
        self.counts
    }

    /// The next request into `buf`, polling first if allowed; `Ok(None)` when the
    /// connection is gone. Leaves the descriptor blocking, whatever it returns.
    pub(super) fn read<'b>(
        &mut self,
        dev: &File,
        buf: &'b mut [u8],
    ) -> io::Result<Option<&'b [u8]>> {
        if self.window.is_zero() || Instant::now() < self.resume_at || !claim(&self.polling) {
            return read_request(dev, buf);
        }
        let polled = self.poll(dev, buf);
        release(&self.polling);
        debug_assert!(
            is_blocking(dev.as_raw_fd()),
            "a poll leaves the descriptor blocking"
        );
        match polled {
            Ok(Some(n)) => Ok(Some(&buf[..n])),
            Ok(None) => read_request(dev, buf),
            Err(e) => Err(e),
        }
    }

    /// Reads without sleeping, yielding the CPU between reads, until a request comes or
    /// the window ends (`Ok(None)`: read nothing, or the connection is gone, which the
    /// blocking read then says); a miss backs off.
    fn poll(&mut self, dev: &File, buf: &mut [u8]) -> io::Result<Option<usize>> {
        assert!(
            (1..=MAX_POLLERS).contains(&self.polling.load(Ordering::Acquire)),
            "a poll holds one of the session's polling slots"
        );
        let fd = dev.as_raw_fd();
        set_nonblocking(fd, true)?;
        let start = Instant::now();
        let got = loop {
            match read_once(fd, buf) {
                Read::Got(n) => break Ok(Some(n)),
                Read::Again if start.elapsed() < self.window => {
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                Read::Again | Read::Gone => break Ok(None),
                Read::Failed(e) => break Err(e),
            }
        };
        let blocking = set_nonblocking(fd, false);
        match got {
            Ok(Some(_)) => self.counts.hits += 1,
            Ok(None) => {
                self.counts.misses += 1;
                self.resume_at = Instant::now() + self.window * MISS_BACKOFF;
            }
            Err(_) => {}
        }
        blocking?;
        got
    }
}

/// Takes a polling slot if one is free (the count never goes above [`MAX_POLLERS`], not
/// even for a moment, so a poll can assert it holds one).
fn claim(polling: &AtomicUsize) -> bool {
    polling
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_POLLERS).then_some(n + 1)
        })
        .is_ok()
}

/// Gives the slot back.
fn release(polling: &AtomicUsize) {
    let prior = polling.fetch_sub(1, Ordering::AcqRel);
    assert!(prior >= 1, "a polling slot released that was not taken");
}

/// Whether `fd` is blocking (no `O_NONBLOCK`).
fn is_blocking(fd: i32) -> bool {
    // SAFETY: F_GETFL reads the flags.
    unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK == 0 }
}

/// Sets or clears `O_NONBLOCK` on the thread's own descriptor (each serving thread reads
/// its own clone, so no other thread's reads change).
fn set_nonblocking(fd: i32, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL and F_SETFL take and return plain flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let want = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if want != flags && unsafe { libc::fcntl(fd, libc::F_SETFL, want) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::FromRawFd;

    /// A connected pair standing in for `/dev/fuse`: one message per read.
    fn pair() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into `fds`.
        let r =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(r, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: both descriptors are fresh and owned here.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    fn blocking(f: &File) -> bool {
        is_blocking(f.as_raw_fd())
    }

    #[test]
    fn a_request_within_the_window_is_taken_by_the_poll_and_the_descriptor_blocks_again() {
        let (daemon, kernel) = pair();
        let mut p = Poller::new(Duration::from_secs(5), Arc::new(AtomicUsize::new(0)));
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            (&kernel).write_all(b"request").unwrap();
            kernel
        });
        let mut buf = [0u8; 64];
        let got = p.read(&daemon, &mut buf).unwrap().map(<[u8]>::to_vec);
        assert_eq!(got.as_deref(), Some(&b"request"[..]));
        assert_eq!((p.counts().hits, p.counts().misses), (1, 0));
        assert!(blocking(&daemon), "a poll leaves the descriptor blocking");
        drop(sender.join().unwrap());
        assert_eq!(p.read(&daemon, &mut buf).unwrap(), None, "the peer is gone");
    }

    #[test]
    fn a_poll_that_misses_sleeps_for_the_request_and_backs_off() {
        let (daemon, kernel) = pair();
        let polling = Arc::new(AtomicUsize::new(0));
        let window = Duration::from_millis(50);
        let mut p = Poller::new(window, polling.clone());
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
            "the blocking read takes it"
        );
        assert_eq!((p.counts().hits, p.counts().misses), (0, 1));
        assert_eq!(polling.load(Ordering::Acquire), 0, "the slot is given back");
        assert!(blocking(&daemon), "a miss leaves the descriptor blocking");
        assert!(
            p.resume_at >= start + window * (MISS_BACKOFF + 1),
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

    #[test]
    fn only_one_thread_of_a_session_polls_at_once() {
        let polling = AtomicUsize::new(0);
        assert!(claim(&polling));
        assert!(
            !claim(&polling),
            "a second poller of the same session waits asleep"
        );
        assert_eq!(polling.load(Ordering::Acquire), 1);
        release(&polling);
        assert!(claim(&polling));
        release(&polling);
        assert_eq!(polling.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_polling_count_never_exceeds_its_slots_under_contention() {
        // Found by issue 34's table: a claim that added then took back let a poll see two
        // pollers for a moment, and its assertion ended a serving thread mid-run.
        let polling = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let polling = polling.clone();
                std::thread::spawn(move || {
                    let mut held = 0u32;
                    for _ in 0..50_000 {
                        if claim(&polling) {
                            held += 1;
                            let n = polling.load(Ordering::Acquire);
                            assert!((1..=MAX_POLLERS).contains(&n), "{n} pollers");
                            release(&polling);
                        }
                    }
                    held
                })
            })
            .collect();
        let held: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(held > 0, "some claim succeeded");
        assert_eq!(polling.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_zero_window_never_polls() {
        let (daemon, kernel) = pair();
        (&kernel).write_all(b"x").unwrap();
        let mut p = Poller::never();
        let mut buf = [0u8; 8];
        assert_eq!(p.read(&daemon, &mut buf).unwrap(), Some(&b"x"[..]));
        assert_eq!(p.counts(), PollCounts::default());
    }
}
