//! Group commit: [`Journal::commit`] and the flush it runs or waits for.
//!
//! Data structures: the journal's `FlushState` under its `flush` mutex (what is durable,
//! the flushes under way, who waits, the last batch) and `flushed`, the condition variable
//! committers wait on; `avg_flush_ns`, a moving average of a flush's duration.
//!
//! Invariant: `durable` only grows, and only to the last record appended before a flush
//! that succeeded started; a flush writes the mirror of the records it covers first
//! (`write_mirror`). Several flushes run at once only where a flush costs less than waiting
//! for one (`flush_is_free`): each still covers what was appended before it started.
//!
//! Locks: `flush` and `writer` are never held together; the device's flush runs under
//! neither.

use super::debug_check_mirror;
use super::record::{append_mirror, HEADER};
use super::{Journal, WriterState};
use crate::error::Result;
use std::sync::atomic::Ordering::Relaxed;

/// A flush that takes less on average than this (in nanoseconds) costs less than sleeping
/// until another committer's ends (`flush_is_free`).
const FREE_FLUSH_NS: u64 = 4_000;

/// Ends a flush that panicked: its count off the flushes under way, its waiters woken (they
/// flush themselves or see the error), so the panic surfaces instead of a hang.
struct Unwinding<'a>(&'a Journal);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        debug_assert!(
            std::thread::panicking(),
            "defused on every path but a panic"
        );
        self.0.flushing.fetch_sub(1, Relaxed);
        let mut f = self.0.flush.lock();
        f.running = f.running.saturating_sub(1);
        drop(f);
        self.0.flushed.notify_all();
    }
}

thread_local! {
    /// The sequence number this thread last committed (for the batching estimate).
    static LAST_COMMIT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Journal {
    /// Returns once record `seq` is durable. Committers that arrive while a flush runs wait
    /// for it, and the next flush covers all of them; where a flush costs less than that
    /// wait (`flush_is_free`), they flush alongside it instead.
    pub fn commit(&self, seq: u64) -> Result<()> {
        let mine = LAST_COMMIT.with(|c| c.replace(seq));
        let mut f = self.flush.lock();
        loop {
            if f.durable >= seq {
                return Ok(());
            }
            if f.running == 0 || self.flush_is_free() {
                break;
            }
            f.waiters += 1;
            self.flushed.wait(&mut f);
            f.waiters -= 1;
        }
        f.running += 1;
        // The committers the last flush released are likely to commit again at once, and
        // those waiting now already have: wait briefly for them to append, so this flush
        // covers all of them instead of half (jbd2 batches the same way).
        // This thread's previous commit may be one of the last batch: do not count it twice.
        let in_last = u64::from(mine > f.last_from && mine <= f.durable);
        let expect = (f.last_batch + f.waiters + 1).saturating_sub(in_last);
        let durable = f.durable;
        drop(f);
        self.flushing.fetch_add(1, Relaxed);
        // A panic from here to the accounting below must not leave `running` raised: the
        // committers waiting for this flush would wait for ever, a hang in place of the
        // panic (seen once in a test run, the panic itself unseen).
        let unwinding = Unwinding(self);
        self.gather(durable, expect);
        // Everything appended before this point is covered by this flush, and by the
        // mirror written now if the last of them did not write one.
        let (upto, mirrored) = {
            let mut w = self.writer.lock();
            let upto = w.next_seq - 1;
            // What is durable now, not when this flush began: appends made meanwhile have
            // pruned the writer's record list (`WriterState::span`) against a newer value,
            // and a span asked with the older one would start before what is kept (the
            // mirror still right, the span's invariant not). Records up to it are on the
            // device, so a later value only leaves out what needs no mirror.
            let now = self.durable_seq.load(std::sync::atomic::Ordering::Acquire);
            debug_assert!(now >= durable, "durable only grows");
            (upto, self.write_mirror(&mut w, upto, now))
        };
        let started = std::time::Instant::now();
        let result = mirrored.and_then(|()| self.dev.flush());
        self.flushing.fetch_sub(1, Relaxed);
        std::mem::forget(unwinding);
        let took = started.elapsed().as_nanos() as u64;
        // Average flush time (a moving average over about 8 flushes).
        let avg = self.avg_flush_ns.load(Relaxed);
        self.avg_flush_ns.store(
            if avg == 0 {
                took
            } else {
                avg - avg / 8 + took / 8
            },
            Relaxed,
        );
        let mut f = self.flush.lock();
        debug_assert!(f.running > 0, "a flush ended that never started");
        f.running -= 1;
        f.flushes += 1;
        if result.is_ok() {
            f.last_batch = upto.saturating_sub(f.durable);
            f.last_from = f.durable;
            f.durable = f.durable.max(upto);
            // Monotone, and never past what was appended before the flush started.
            debug_assert!(self.durable_seq.load(Relaxed) <= f.durable && upto >= seq);
            self.durable_seq
                .store(f.durable, std::sync::atomic::Ordering::Release);
        }
        self.flushed.notify_all();
        result
    }

    /// Whether a flush costs less than waiting for another committer's (a sleep on the
    /// condition variable and a wake-up, several microseconds): on such a device (memory,
    /// `/dev/shm`) a committer that finds a flush under way flushes alongside it instead.
    /// Each flush covers what was appended before it started, so `durable` only grows.
    pub(super) fn flush_is_free(&self) -> bool {
        let avg = self.avg_flush_ns.load(Relaxed);
        avg != 0 && avg < FREE_FLUSH_NS
    }

    /// Writes, after the head, a mirror of the records up to `upto` that no record up to
    /// `durable` vouches for, unless the newest mirror covers them already.
    fn write_mirror(&self, w: &mut WriterState, upto: u64, durable: u64) -> Result<()> {
        if w.mirrored >= upto || upto <= durable {
            return Ok(());
        }
        let head = w.head;
        let (span_start, span) = w.span(self.area, head, durable);
        let mut out = Vec::with_capacity(HEADER + span.len());
        append_mirror(&mut out, upto, span_start, span, 0);
        let at = WriterState::mirror_at(self.area, head, 0);
        debug_check_mirror(&out, upto, span_start, &[]);
        // Past the head, before the tail (or the area's end).
        let end = if w.wrapped { w.tail } else { self.area.len };
        debug_assert!(at + out.len() as u64 <= end, "a mirror past {end}");
        self.dev.write_at(&out, self.area.start + at)?;
        w.mirrored = upto;
        Ok(())
    }

    /// The batching wait before a flush: yields until `expect` records wait after `durable`,
    /// for at most half the average flush time, and stops early once no record arrived for
    /// a tenth of it. On a device whose flush costs nothing, this costs nothing.
    fn gather(&self, durable: u64, expect: u64) {
        let avg = self.avg_flush_ns.load(Relaxed);
        if avg < 20_000 || expect <= 1 {
            return;
        }
        let limit = std::time::Duration::from_nanos(avg / 2);
        let quiet = std::time::Duration::from_nanos(avg / 10);
        let started = std::time::Instant::now();
        let mut seen = self.appended.load(Relaxed);
        let mut last_change = started;
        while seen.saturating_sub(1).saturating_sub(durable) < expect {
            let now = std::time::Instant::now();
            if now - started >= limit || now - last_change >= quiet {
                break;
            }
            std::thread::yield_now();
            let next = self.appended.load(Relaxed);
            if next != seen {
                seen = next;
                last_change = std::time::Instant::now();
            }
        }
    }
}
