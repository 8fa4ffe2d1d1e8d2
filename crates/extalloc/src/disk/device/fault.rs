//! A device that keeps writes volatile until `flush` and can crash.
//!
//! The wrapped device holds what is durable. Writes since the last flush are kept in order
//! and overlaid on reads (the running system sees its own writes). `crash` decides, from a
//! seed, what of them reached the media: each is kept or dropped independently, and one of
//! the kept ones may be torn (only a prefix of its 512-byte sectors written). After a crash
//! the volatile writes are gone, as after a power loss; the device goes on working.
//!
//! **Linux's semantics of a failed flush** ([`FaultDevice::fail_flushes`]): when a flush
//! fails, Linux marks the dirty pages clean and reports the error once ("fsyncgate"): the
//! bytes stay in the page cache for reads until evicted, never reach the media, and the
//! next `fsync` returns `Ok`. Here a failed flush moves the unflushed writes to a
//! *forgotten* list: reads still see them, no later flush writes them, a crash drops them;
//! the next flush that is not made to fail succeeds. A program that retries a failed flush
//! and believes it loses data on this device as it would on Linux. Reads can be made to fail
//! too ([`FaultDevice::fail_reads`]).
//!
//! Data structure: the wrapped device (the durable state) and, under one lock, the ordered
//! list of unflushed writes, the forgotten writes, the failure switches, the crash rng and
//! the advice ([`Device::will_need`]) given, for tests of who advises what. Invariant: the
//! wrapped device changes only at `flush` (all pending writes, in order) or `crash` (the
//! survivors); forgotten writes never reach it.
//!
//! Locks: `state` -> the wrapped device's own lock; nothing else.

use super::contract::{check_range, Device, SECTOR_BYTES};
use crate::error::{Error, IoSource, Result};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};

/// What a crash does to the writes that were not flushed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crash {
    /// None of them survives.
    DropAll,
    /// All of them survive (the cache happened to be written back).
    KeepAll,
    /// Each survives with this probability; one survivor may be torn.
    Random {
        /// Probability that each write survives, 0 to 1 (clamped).
        keep: f64,
        /// Tear one survivor picked at random: only a prefix of its 512-byte sectors
        /// (possibly none) is written.
        tear: bool,
    },
}

struct State {
    /// Unflushed writes, in order: (offset, data).
    pending: Vec<(u64, Vec<u8>)>,
    /// Writes a failed flush dropped (Linux's semantics): read back until a crash, never
    /// written to the wrapped device. Overlaid on reads before `pending`.
    forgotten: Vec<(u64, Vec<u8>)>,
    /// Flushes left to fail, each dropping the unflushed writes (Linux's semantics).
    flush_failures: u64,
    /// Reads fail while set.
    failing_reads: bool,
    /// Byte ranges whose reads fail (bad sectors), whatever `failing_reads` says.
    bad: Vec<std::ops::Range<u64>>,
    failing: bool,
    /// Writes (and flushes) left before `failing` turns on by itself.
    fail_after: Option<u64>,
    rng: rand::rngs::StdRng,
    crashes: u64,
    /// Advice given, in order: (offset, len).
    advised: Vec<(u64, u64)>,
    /// Bytes of the writes accepted.
    written: u64,
}

impl State {
    /// Counts one write or flush against `fail_after`.
    fn tick(&mut self) {
        if let Some(n) = self.fail_after {
            if n == 0 {
                self.failing = true;
                self.fail_after = None;
            } else {
                self.fail_after = Some(n - 1);
            }
        }
    }
}

/// A [`Device`] for crash tests: writes stay volatile until `flush`, `crash` keeps some of
/// them (per [`Crash`]), and writes can be made to fail.
pub struct FaultDevice<D: Device> {
    inner: D,
    state: Mutex<State>,
}

/// What a crash did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unflushed writes at the crash.
    pub pending: usize,
    /// How many of them reached the device.
    pub kept: usize,
    /// Whether one of the kept writes was torn.
    pub torn: bool,
}

impl<D: Device> FaultDevice<D> {
    /// Wraps `inner`, which holds the durable state; `seed` drives every random choice of
    /// `crash`.
    pub fn new(inner: D, seed: u64) -> Self {
        FaultDevice {
            inner,
            state: Mutex::new(State {
                pending: Vec::new(),
                forgotten: Vec::new(),
                flush_failures: 0,
                failing_reads: false,
                bad: Vec::new(),
                failing: false,
                fail_after: None,
                rng: rand::rngs::StdRng::seed_from_u64(seed),
                crashes: 0,
                advised: Vec::new(),
                written: 0,
            }),
        }
    }

    /// From now on every write (and flush) fails with an I/O error, or works again (which
    /// also cancels a pending `fail_after`).
    pub fn fail_writes(&self, failing: bool) {
        let mut st = self.state.lock();
        st.failing = failing;
        if !failing {
            st.fail_after = None;
        }
    }

    /// Lets `n` more writes or flushes through, then fails every one (a crash in the middle
    /// of whatever is being written).
    pub fn fail_after(&self, n: u64) {
        self.state.lock().fail_after = Some(n);
    }

    /// The next `n` flushes fail as a flush fails on Linux: each drops the writes not yet
    /// flushed (reads still see them until a crash; no later flush writes them) and reports
    /// the error once; the flush after them succeeds. Writes go on working.
    pub fn fail_flushes(&self, n: u64) {
        self.state.lock().flush_failures = n;
    }

    /// Failed flushes [`FaultDevice::fail_flushes`] asked for that have not happened yet.
    pub fn flush_failures_left(&self) -> u64 {
        self.state.lock().flush_failures
    }

    /// From now on every read fails with an I/O error, or works again.
    pub fn fail_reads(&self, failing: bool) {
        self.state.lock().failing_reads = failing;
    }

    /// From now on a read that touches `bytes` fails with an I/O error, as a read of a bad
    /// sector does on Linux (`EIO`; the other reads work). For tests of code that must
    /// fail, not guess, when a read fails.
    pub fn fail_reads_in(&self, bytes: std::ops::Range<u64>) {
        self.state.lock().bad.push(bytes);
    }

    /// From now on the reads [`FaultDevice::fail_reads_in`] made fail work again: an error
    /// that passed, as a retried read of a weak sector may.
    pub fn heal_reads(&self) {
        self.state.lock().bad.clear();
    }

    /// Writes a failed flush dropped (still read back, never durable).
    pub fn forgotten_writes(&self) -> usize {
        self.state.lock().forgotten.len()
    }

    /// Bytes of every write accepted since the device was made (a figure for tests of
    /// what an operation writes).
    pub fn bytes_written(&self) -> u64 {
        self.state.lock().written
    }

    /// Unflushed writes.
    pub fn pending_writes(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// Loses power: applies the surviving unflushed writes (per `how`) to the durable
    /// device and forgets the rest. Writes work again afterwards.
    pub fn crash(&self, how: Crash) -> Result<CrashReport> {
        let mut st = self.state.lock();
        st.crashes += 1;
        st.failing = false;
        st.fail_after = None;
        st.flush_failures = 0;
        st.failing_reads = false;
        st.forgotten.clear();
        let pending = std::mem::take(&mut st.pending);
        let mut report = CrashReport {
            pending: pending.len(),
            ..CrashReport::default()
        };
        let (keep, tear) = match how {
            Crash::DropAll => (0.0, false),
            Crash::KeepAll => (1.0, false),
            Crash::Random { keep, tear } => (keep.clamp(0.0, 1.0), tear),
        };
        let kept: Vec<(u64, Vec<u8>)> = pending
            .into_iter()
            .filter(|_| keep >= 1.0 || (keep > 0.0 && st.rng.gen_bool(keep)))
            .collect();
        let torn = if tear && !kept.is_empty() {
            Some(st.rng.gen_range(0..kept.len()))
        } else {
            None
        };
        for (i, (offset, data)) in kept.iter().enumerate() {
            let mut data: &[u8] = data;
            if torn == Some(i) {
                // A prefix of whole sectors, counted from the write's start (fewer than all).
                let sectors = (data.len() as u64).div_ceil(SECTOR_BYTES);
                let prefix = st.rng.gen_range(0..sectors.max(1)) * SECTOR_BYTES;
                data = &data[..(prefix as usize).min(data.len())];
                report.torn = true;
            }
            self.inner.write_at(data, *offset)?;
        }
        report.kept = kept.len();
        self.inner.flush()?;
        Ok(report)
    }

    /// Crashes so far.
    pub fn crashes(&self) -> u64 {
        self.state.lock().crashes
    }

    /// The advice ([`Device::will_need`]) given so far, in order: (offset, len).
    pub fn advised(&self) -> Vec<(u64, u64)> {
        self.state.lock().advised.clone()
    }

    /// The wrapped device: the durable state, without the unflushed writes.
    pub fn into_inner(self) -> D {
        self.inner
    }
}

impl<D: Device> Device for FaultDevice<D> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        let st = self.state.lock();
        let end = offset + buf.len() as u64;
        let bad = |r: &std::ops::Range<u64>| r.start < end && offset < r.end;
        if st.failing_reads || st.bad.iter().any(bad) {
            return Err(injected("read", offset));
        }
        self.inner.read_at(buf, offset)?;
        for (w_off, data) in st.forgotten.iter().chain(&st.pending) {
            let w_end = w_off + data.len() as u64;
            let (a, b) = (offset.max(*w_off), end.min(w_end));
            if a < b {
                buf[(a - offset) as usize..(b - offset) as usize]
                    .copy_from_slice(&data[(a - w_off) as usize..(b - w_off) as usize]);
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        let mut st = self.state.lock();
        st.tick();
        if st.failing {
            return Err(injected("write", offset));
        }
        st.pending.push((offset, buf.to_vec()));
        st.written += buf.len() as u64;
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        if st.failing {
            return Err(injected("flush", 0));
        }
        if st.flush_failures > 0 {
            // Linux: the dirty pages are marked clean and the error is reported once.
            st.flush_failures -= 1;
            let dropped = std::mem::take(&mut st.pending);
            st.forgotten.extend(dropped);
            debug_assert!(
                st.pending.is_empty(),
                "a failed flush leaves nothing to flush"
            );
            return Err(injected("flush", 0));
        }
        for (offset, data) in std::mem::take(&mut st.pending) {
            self.inner.write_at(&data, offset)?;
        }
        self.inner.flush()
    }

    /// Recorded ([`FaultDevice::advised`]) and passed on; never fails by injection (it
    /// writes nothing).
    fn will_need(&self, offset: u64, len: u64) -> Result<bool> {
        check_range(offset, len as usize, self.size())?;
        self.state.lock().advised.push((offset, len));
        self.inner.will_need(offset, len)
    }
}

/// The error an injected failure of `op` at `offset` returns.
fn injected(op: &'static str, offset: u64) -> Error {
    Error::Io {
        device: "fault-injecting device".into(),
        op,
        offset,
        source: IoSource::new(std::io::Error::other(format!("injected {op} failure"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::device::MemDevice;
    use proptest::prelude::*;

    fn read(d: &dyn Device, offset: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        d.read_at(&mut v, offset).unwrap();
        v
    }

    #[test]
    fn unflushed_writes_are_lost_in_a_crash_and_flushed_ones_are_not() {
        let d = FaultDevice::new(MemDevice::new(1 << 20), 7);
        d.write_at(&[1; 4096], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[2; 4096], 0).unwrap();
        d.write_at(&[3; 100], 8192).unwrap();
        assert_eq!(read(&d, 0, 4), [2; 4], "the system sees its own writes");
        let r = d.crash(Crash::DropAll).unwrap();
        assert_eq!((r.pending, r.kept), (2, 0));
        assert_eq!(read(&d, 0, 4096), vec![1; 4096]);
        assert_eq!(read(&d, 8192, 100), vec![0; 100]);
        d.write_at(&[4; 10], 0).unwrap();
        assert_eq!(d.crash(Crash::KeepAll).unwrap().kept, 1);
        assert_eq!(read(&d, 0, 10), vec![4; 10]);
    }

    #[test]
    fn a_torn_write_keeps_a_prefix_of_sectors() {
        for seed in 0..20 {
            let d = FaultDevice::new(MemDevice::new(1 << 20), seed);
            d.write_at(&[9; 8 * 512], 4096).unwrap();
            let r = d
                .crash(Crash::Random {
                    keep: 1.0,
                    tear: true,
                })
                .unwrap();
            assert!(r.torn);
            let after = read(&d, 4096, 8 * 512);
            let written = after.iter().take_while(|&&b| b == 9).count();
            assert_eq!(written % 512, 0, "whole sectors");
            assert!(written < 8 * 512, "a torn write is not whole");
            assert!(after[written..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn failing_writes_change_nothing() {
        let d = FaultDevice::new(MemDevice::new(1 << 20), 1);
        d.fail_writes(true);
        assert!(matches!(d.write_at(&[5; 8], 0), Err(Error::Io { .. })));
        assert!(matches!(d.flush(), Err(Error::Io { .. })));
        assert_eq!(d.pending_writes(), 0);
        d.fail_writes(false);
        d.write_at(&[5; 8], 0).unwrap();
        d.flush().unwrap();
        assert_eq!(read(&d, 0, 8), [5; 8]);
    }

    #[test]
    fn a_failed_flush_forgets_the_writes_as_linux_does() {
        let d = FaultDevice::new(MemDevice::new(1 << 20), 1);
        d.write_at(&[1; 4096], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[2; 4096], 0).unwrap();
        d.fail_flushes(1);
        assert!(matches!(d.flush(), Err(Error::Io { .. })), "reported once");
        assert_eq!((d.pending_writes(), d.forgotten_writes()), (0, 1));
        assert_eq!(read(&d, 0, 4), [2; 4], "the page cache still holds them");
        d.flush().expect("the retry is believed, as on Linux");
        d.crash(Crash::KeepAll).unwrap();
        assert_eq!(read(&d, 0, 4096), vec![1; 4096], "never written");
        assert_eq!(d.forgotten_writes(), 0);
    }

    #[test]
    fn failing_reads_fail_until_turned_off() {
        let d = FaultDevice::new(MemDevice::new(1 << 20), 1);
        d.fail_reads(true);
        let mut b = [0u8; 8];
        assert!(matches!(d.read_at(&mut b, 0), Err(Error::Io { .. })));
        d.write_at(&[3; 8], 0).unwrap();
        d.fail_reads(false);
        assert_eq!(read(&d, 0, 8), [3; 8]);
    }

    proptest! {
        /// Against a model of durable bytes plus ordered pending writes: reads see the
        /// pending writes; a crash keeping all or none leaves exactly the model.
        #[test]
        fn follows_the_model(ops in prop::collection::vec((0u8..4, 0u64..4000, 1usize..300, any::<u8>()), 1..60)) {
            let d = FaultDevice::new(MemDevice::new(8192), 3);
            let mut durable = vec![0u8; 8192];
            let mut pending: Vec<(u64, Vec<u8>)> = Vec::new();
            for (kind, off, len, byte) in ops {
                match kind {
                    0 | 1 => {
                        let data = vec![byte; len];
                        d.write_at(&data, off).unwrap();
                        pending.push((off, data));
                    }
                    2 => {
                        d.flush().unwrap();
                        for (o, data) in pending.drain(..) {
                            durable[o as usize..o as usize + data.len()].copy_from_slice(&data);
                        }
                    }
                    _ => {
                        let keep = byte % 2 == 0;
                        d.crash(if keep { Crash::KeepAll } else { Crash::DropAll }).unwrap();
                        for (o, data) in pending.drain(..) {
                            if keep {
                                durable[o as usize..o as usize + data.len()].copy_from_slice(&data);
                            }
                        }
                    }
                }
                let mut view = durable.clone();
                for (o, data) in &pending {
                    view[*o as usize..*o as usize + data.len()].copy_from_slice(data);
                }
                prop_assert_eq!(read(&d, 0, 8192), view);
            }
        }
    }
}
