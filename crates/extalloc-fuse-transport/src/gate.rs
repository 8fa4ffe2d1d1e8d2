//! The turn to read `/dev/fuse`: a session's serving threads take turns, one at a time
//! reading (polling, then sleeping in `poll(2)`: `poll.rs`) while the others wait here.
//!
//! Why: every thread asleep on the connection is on the kernel's wait queue of its
//! requests, and with a poller reading beside them (`poll.rs`) a request woke a sleeper
//! that found nothing (the poller had taken it) and went back to sleep, and the poller's
//! reads contended for the queue's spin lock with the kernel queueing the next request.
//! With a turn, one thread at a time is in the kernel's read path. The thread holding it
//! keeps it across the requests it serves without waiting on anything outside the daemon
//! (lookups, attributes, namespace changes: `keeps_turn` in `serve.rs`), so a caller's
//! stream of them is read and answered by one thread that no other thread's wake-up
//! interrupts (a switch costs more than such a request's work here); before a request
//! that may wait (a read, a write, an fsync) it passes the turn on, waking a waiting
//! thread, which reads the next requests while it waits. So no request that may wait keeps
//! the next one from being read, and a handler waiting for the kernel (a notification)
//! cannot stall the session.
//!
//! Data structures: [`Gate`], shared by a session's threads: whether the turn is taken,
//! how many threads wait for it, whether the session has ended; a condition variable the
//! waiting threads sleep on. [`Turn`], held by the thread whose turn it is, given back
//! when dropped (also when its read fails or panics).
//!
//! Invariant: at most one [`Turn`] exists at a time; a thread waits only while the turn is
//! taken and the gate open; once closed (the connection is gone), no turn is given again
//! and every waiting thread is woken to end. Lock order: the gate's mutex is a leaf,
//! never held across a read or a request.

use std::sync::{Condvar, Mutex, MutexGuard};

/// The gate's state, under its mutex.
#[derive(Debug, Default)]
struct State {
    /// A thread holds the turn.
    taken: bool,
    /// Threads waiting for it.
    waiting: usize,
    /// The session has ended: no more turns.
    closed: bool,
}

/// The turn to read a session's connection.
#[derive(Debug, Default)]
pub(super) struct Gate {
    state: Mutex<State>,
    turn: Condvar,
}

/// The turn, held by one thread; dropping it passes it on.
#[must_use = "the turn passes on when dropped"]
pub(super) struct Turn<'g> {
    gate: &'g Gate,
}

impl Gate {
    /// An open gate, its turn free.
    pub(super) fn new() -> Gate {
        Gate::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A thread that panicked while holding the mutex left the state whole (each change
        // under it is one assignment).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the turn; `None` once the gate is closed.
    pub(super) fn enter(&self) -> Option<Turn<'_>> {
        let mut s = self.lock();
        while s.taken && !s.closed {
            s.waiting += 1;
            s = self.turn.wait(s).unwrap_or_else(|e| e.into_inner());
            assert!(s.waiting >= 1, "a waiting thread is counted");
            s.waiting -= 1;
        }
        if s.closed {
            return None;
        }
        s.taken = true;
        Some(Turn { gate: self })
    }

    /// Ends the session's turns: every waiting thread and every later `enter` gets `None`.
    pub(super) fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        let waiting = s.waiting;
        drop(s);
        if waiting > 0 {
            self.turn.notify_all();
        }
        debug_assert!(self.is_closed(), "a closed gate stays closed");
    }

    /// Whether the gate is closed.
    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Gives the turn back, waking one waiting thread if there is one (no system call
    /// when none waits).
    fn leave(&self) {
        let mut s = self.lock();
        assert!(s.taken, "the turn is given back by the thread holding it");
        s.taken = false;
        let waiting = s.waiting;
        drop(s);
        if waiting > 0 {
            self.turn.notify_one();
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.gate.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_turn_at_a_time_and_each_waiting_thread_gets_one() {
        let gate = Arc::new(Gate::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (gate, inside) = (gate.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let turn = gate.enter().expect("open");
                        assert_eq!(inside.fetch_add(1, Ordering::AcqRel), 0, "alone");
                        inside.fetch_sub(1, Ordering::AcqRel);
                        drop(turn);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = gate.lock();
        assert!(!s.taken && s.waiting == 0, "{s:?}");
    }

    #[test]
    fn closing_wakes_the_waiting_threads_and_refuses_later_turns() {
        let gate = Arc::new(Gate::new());
        let turn = gate.enter().expect("open");
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.enter().is_none())
        };
        while gate.lock().waiting == 0 {
            std::thread::yield_now();
        }
        gate.close();
        assert!(waiter.join().unwrap(), "the waiting thread ends");
        drop(turn);
        assert!(gate.enter().is_none(), "no turn after the close");
    }
}
