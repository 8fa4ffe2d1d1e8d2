//! The in-use mark: who has the device open read-write, on the media, so that an opener
//! the file locks cannot see (another machine, another namespace, a device node no lock
//! reaches) finds a live owner and is refused, as ext4's multi-mount protection does.
//!
//! The mark is the superblock's `STATE_IN_USE` bit with its owner number, and the owner
//! record after the root in block 0 (`disk/format/owner.rs`): host name, boot id, pid
//! namespace, pid and start time, heartbeat interval and sequence. While a store is open on
//! a device that has a heartbeat ([`Device::heartbeat`], file and block devices: every 5 s
//! by default) a thread bumps the sequence and flushes it, after reading the record back
//! from the media: a record that is not the one this owner last wrote means another opener
//! took the device over (this owner was paused past the takeover delay), and the store
//! latches (`FenceDevice::latch_with`: nothing more is written), as ext4's MMP stops the
//! file system. Each beat gives a lease of one and a half intervals (a watcher waits two
//! and a second): a write after the lease ran out (the process was paused, its heartbeat
//! thread too) renews it first, the same check made, so a resumed owner's first write
//! cannot land on a device taken over ([`Beat`], `disk/device/fence.rs`'s `Lease`).
//!
//! [`judge`] decides, at open, about a mark found set:
//! - the owner is this process: live if a store here has that owner number open, else
//!   stale (a store of this process crashed, as the tortures make them);
//! - the owner is on this boot, in this pid namespace: live while its process runs (same
//!   pid, same start time), stale at once when it is gone;
//! - the owner's host name is this host's, on another boot: stale at once (the host
//!   rebooted since);
//! - anything else (another machine, another pid namespace, no readable record): the
//!   record is watched for two heartbeat intervals and one second (the owner's own
//!   interval, at most 60 s); if it changes the owner is live, else stale. A store that
//!   takes over a device it watched writes its claim, waits as long again and reads the
//!   record back: another opener that took it over meanwhile wins and this open is refused.
//!
//! A stale mark is taken over (the journal replay has recovered what its owner
//! committed); a live one refuses the open with [`Error::DeviceInUse`], naming the owner.
//!
//! Data structures: `LIVE`, the owner numbers of the stores open in this process, and the
//! [`InUse`] claim a store holds (its number, its heartbeat thread, its [`Beat`]: the
//! record last written and the lease's end, under the beat's own mutex, a leaf). Invariant: a number is
//! in `LIVE` exactly while its store is open; the heartbeat thread is stopped before the
//! store clears its mark. Locks: `LIVE` is a leaf, held for one look-up or change.

use crate::disk::device::{Device, FenceDevice, Lease};
use crate::disk::format::{self, OwnerRecord, Superblock, OWNER_BYTES, OWNER_OFFSET};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The owner numbers of the stores open in this process.
static LIVE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The longest heartbeat interval a watcher believes (a larger one waits this long).
const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// What [`judge`] found: the owner to take over (none: the device was not in use), and
/// whether it took watching the heartbeat (then the claim is checked once more).
pub(super) struct Verdict {
    pub previous: Option<u64>,
    pub watched: bool,
}

/// Decides about the in-use mark of `sb` (read-only): `Ok` when the device is free or its
/// owner is gone, [`Error::DeviceInUse`] when its owner is live (see the module's rules).
pub(super) fn judge(dev: &dyn Device, sb: &Superblock) -> Result<Verdict> {
    if sb.state & format::STATE_IN_USE == 0 {
        return Ok(Verdict {
            previous: None,
            watched: false,
        });
    }
    let rec = format::read_owner(dev)?;
    let live = |owner: &str, why: &str| Error::DeviceInUse {
        device: dev.name(),
        owner: owner.to_string(),
        why: why.to_string(),
    };
    let watched = match rec.as_ref().map(local_verdict) {
        Some(Local::Stale) => false,
        Some(Local::Live(why)) => return Err(live(&rec.expect("a record").describe(), why)),
        Some(Local::Unknown) | None => {
            let interval = rec
                .as_ref()
                .map_or(crate::disk::device::DEFAULT_HEARTBEAT, |r| {
                    Duration::from_millis(u64::from(r.interval_ms))
                });
            if let Some(now) = watch(dev, interval)? {
                return Err(live(&now, "its heartbeat moved while this open watched it"));
            }
            true
        }
    };
    Ok(Verdict {
        previous: Some(sb.owner),
        watched,
    })
}

/// Whether an open takes a device marked in use over at once: its owner record (`rec`)
/// names an owner this machine knows is gone (this boot, its process no longer running,
/// or this process with no store holding it). False when the owner may be live or only a
/// watch of its heartbeat can tell (an open then waits up to two heartbeats and a
/// second: [`judge`]).
pub(crate) fn owner_gone(rec: Option<&OwnerRecord>) -> bool {
    matches!(rec.map(local_verdict), Some(Local::Stale))
}

/// What this machine alone can tell about an owner.
enum Local {
    Live(&'static str),
    Stale,
    Unknown,
}

fn local_verdict(rec: &OwnerRecord) -> Local {
    let boot = format::boot_id();
    let known = |id: &[u8; 16]| *id != [0; 16];
    if known(&boot) && rec.boot_id == boot {
        let ns = format::pid_namespace();
        if ns == 0 || rec.pid_ns != ns {
            return Local::Unknown;
        }
        if rec.pid == std::process::id() {
            return if LIVE.lock().contains(&rec.nonce) {
                Local::Live("a store of this process has it open")
            } else {
                Local::Stale
            };
        }
        return match format::process_start_time(rec.pid) {
            None => Local::Stale,
            Some(t) if rec.start_time != 0 && t != rec.start_time => Local::Stale,
            Some(_) => Local::Live("its process is running on this machine"),
        };
    }
    let same_host = !rec.host.is_empty() && rec.host == format::host_name();
    if known(&boot) && known(&rec.boot_id) && same_host {
        return Local::Stale;
    }
    Local::Unknown
}

/// How long a watcher waits for a heartbeat of `interval`: two of them and a second.
fn patience(interval: Duration) -> Duration {
    2 * interval.min(MAX_INTERVAL) + Duration::from_secs(1)
}

/// Watches the owner record for [`patience`]: the owner (described) if it changed, `None`
/// if it stood still. Reads from the media (the system's cached copy dropped first).
fn watch(dev: &dyn Device, interval: Duration) -> Result<Option<String>> {
    let first = read_raw(dev)?;
    let deadline = Instant::now() + patience(interval);
    let step = interval.clamp(Duration::from_millis(10), Duration::from_secs(1));
    while Instant::now() < deadline {
        std::thread::sleep(step.min(deadline.saturating_duration_since(Instant::now())));
        dev.drop_cache()?;
        let now = read_raw(dev)?;
        if now != first {
            return Ok(Some(OwnerRecord::decode(&now).map_or_else(
                || "an owner whose record is unreadable".to_string(),
                |r| r.describe(),
            )));
        }
    }
    Ok(None)
}

fn read_raw(dev: &dyn Device) -> Result<[u8; OWNER_BYTES]> {
    let mut b = [0u8; OWNER_BYTES];
    dev.read_at(&mut b, OWNER_OFFSET)?;
    Ok(b)
}

/// A store's claim on its device: its owner number (in `LIVE`), its heartbeat thread and
/// its lease (the beat both share).
pub(super) struct InUse {
    nonce: u64,
    heartbeat: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    beat: Option<Arc<Beat>>,
}

impl InUse {
    /// Marks `dev` in use by this process: the superblock's state and owner number, and
    /// the owner record, flushed; then the heartbeat, if the device has one, and its lease
    /// on `latch` (every write through it after the lease ran out renews it first). After
    /// a watched takeover (`verdict.watched`) it waits and reads the record back: another
    /// opener's claim there refuses this open (its own claim is left to the winner).
    pub(super) fn take(
        dev: &Arc<dyn Device>,
        latch: &Arc<FenceDevice>,
        sb: &mut Superblock,
        verdict: &Verdict,
    ) -> Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut nonce = nanos ^ (u64::from(std::process::id()) << 32) ^ sb.generation;
        // Unique among this process's claims by construction: two opens in one clock tick
        // (a test's power loss and reopen), or whose times and generations XOR alike, drew
        // the same number before and the second claim was taken for the first's.
        let mut live = LIVE.lock();
        while nonce == 0 || live.contains(&nonce) {
            nonce = nonce.wrapping_add(1);
        }
        live.push(nonce);
        debug_assert_eq!(
            live.iter().filter(|&&n| n == nonce).count(),
            1,
            "one claim a nonce"
        );
        drop(live);
        let interval = dev.heartbeat();
        let ms = interval.map_or(0, |i| i.as_millis().min(u128::from(u32::MAX)) as u32);
        let rec = OwnerRecord::here(nonce, ms);
        let mut claim = InUse {
            nonce,
            heartbeat: None,
            beat: None,
        };
        sb.owner = nonce;
        sb.state |= format::STATE_IN_USE;
        if verdict.previous.is_some() {
            sb.state |= format::STATE_UNCHECKED; // until the caller checked (`mark_checked`)
        }
        sb.generation += 1;
        format::write_superblock(dev.as_ref(), sb)?;
        format::write_owner(dev.as_ref(), &rec)?;
        dev.flush()?;
        if let Some(interval) = interval {
            // The beats go to the device under the latch: they are the lease's own writes.
            let beat = Arc::new(Beat::new(latch.inner(), rec, interval));
            latch.set_lease(beat.clone());
            claim.heartbeat = Some(start_heartbeat(beat.clone(), latch.clone())?);
            claim.beat = Some(beat);
        }
        // A device without a heartbeat is this process's alone (memory, a view of another
        // device whose writes stay in memory): no other opener can claim it meanwhile.
        if verdict.watched && interval.is_some() {
            claim.check_still_ours(dev.as_ref(), interval)?;
        }
        Ok(claim)
    }

    /// After a watched takeover: waits as a watcher would, then reads the record back.
    fn check_still_ours(&self, dev: &dyn Device, interval: Option<Duration>) -> Result<()> {
        std::thread::sleep(patience(interval.unwrap_or(Duration::ZERO)));
        dev.drop_cache()?;
        match format::read_owner(dev)? {
            Some(r) if r.nonce == self.nonce => Ok(()),
            other => Err(Error::DeviceInUse {
                device: dev.name(),
                owner: other.map_or_else(|| "an unknown owner".into(), |r| r.describe()),
                why: "it took the device over while this open did, after the last owner's \
                      heartbeat stopped"
                    .into(),
            }),
        }
    }

    /// Whether the heartbeat thread runs.
    pub(super) fn beating(&self) -> bool {
        self.heartbeat.is_some()
    }

    /// Stops the heartbeat and ends the lease (before the store clears its mark): no beat
    /// is written after this returns.
    pub(super) fn stop(&mut self) {
        if let Some(beat) = &self.beat {
            beat.end();
        }
        if let Some((stop, thread)) = self.heartbeat.take() {
            drop(stop);
            let _ = thread.join();
        }
        // What the caller relies on: no beat is written after this returns.
        debug_assert!(!self.beating(), "the heartbeat stopped");
    }

    /// Tests: the heartbeat thread stops as a paused process's would (its lease runs out;
    /// nothing renews it until the next write).
    #[cfg(test)]
    pub(super) fn pause(&mut self) {
        if let Some((stop, thread)) = self.heartbeat.take() {
            drop(stop);
            let _ = thread.join();
        }
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.stop();
        debug_assert!(self.heartbeat.is_none(), "a beat after the claim ends");
        let mut live = LIVE.lock();
        debug_assert!(
            live.contains(&self.nonce),
            "claim {:#x} not live",
            self.nonce
        );
        live.retain(|&n| n != self.nonce);
    }
}

/// The owner record's heartbeat and the lease it gives (see [`Lease`]): the record this
/// owner last wrote, and until when no other opener can have taken the device over (a
/// watcher waits two intervals and a second before it takes over; the lease runs one and
/// a half).
struct Beat {
    /// The device under the latch (the beats must not go through the lease they renew).
    dev: Arc<dyn Device>,
    rec: Mutex<OwnerRecord>,
    /// Nanoseconds after `epoch` until which the lease holds; `u64::MAX` once ended.
    until: AtomicU64,
    epoch: Instant,
}

impl Beat {
    fn new(dev: Arc<dyn Device>, rec: OwnerRecord, interval: Duration) -> Beat {
        let beat = Beat {
            dev,
            rec: Mutex::new(rec),
            until: AtomicU64::new(0),
            epoch: Instant::now(),
        };
        beat.extend(interval);
        beat
    }

    /// The lease holds one and a half `interval`s from now.
    fn extend(&self, interval: Duration) {
        debug_assert!(!interval.is_zero(), "a lease of no time");
        let until = self.epoch.elapsed() + interval + interval / 2;
        let _ = self.until.fetch_update(Relaxed, Relaxed, |u| {
            (u != u64::MAX).then_some(until.as_nanos() as u64)
        });
    }

    /// The store is closing: the lease no longer asks for renewals.
    fn end(&self) {
        self.until.store(u64::MAX, Relaxed);
    }

    /// One beat: the record read back from the media must be the one this owner last
    /// wrote (else another opener took the device over: [`Error::DeviceInUse`]); then the
    /// next sequence is written and flushed and the lease extended. Returns how long the
    /// write and flush took.
    fn beat(&self) -> Result<Duration> {
        let mut rec = self.rec.lock();
        self.dev.drop_cache()?;
        match format::read_owner(self.dev.as_ref())? {
            Some(r) if r.nonce == rec.nonce && r.sequence == rec.sequence => {}
            other => {
                return Err(Error::DeviceInUse {
                    device: self.dev.name(),
                    owner: other.map_or_else(|| "an unknown owner".into(), |r| r.describe()),
                    why: "it took the device over while this owner's heartbeat was stopped \
                          (a paused process or machine): this store writes nothing more"
                        .into(),
                });
            }
        }
        rec.sequence += 1;
        let started = Instant::now();
        format::write_owner(self.dev.as_ref(), &rec)?;
        self.dev.flush()?;
        let took = started.elapsed();
        self.extend(Duration::from_millis(u64::from(rec.interval_ms)));
        debug_assert!(!self.expired(), "a beat renews the lease");
        Ok(took)
    }
}

impl Lease for Beat {
    fn expired(&self) -> bool {
        (self.epoch.elapsed().as_nanos() as u64) > self.until.load(Relaxed)
    }

    fn renew(&self) -> Result<()> {
        // Another thread may have renewed it while this one waited for the record.
        match self.expired() {
            true => self.beat().map(|_| ()),
            false => Ok(()),
        }
    }
}

/// Starts the thread that beats every `base` (or twice as long as the last beat's write
/// and flush took, if longer: a slow device must not look dead), until its sender is
/// dropped. A beat that finds the device taken over, or whose read, write or flush fails,
/// latches `latch` and ends the thread.
fn start_heartbeat(
    beat: Arc<Beat>,
    latch: Arc<FenceDevice>,
) -> Result<(mpsc::Sender<()>, JoinHandle<()>)> {
    let base = Duration::from_millis(u64::from(beat.rec.lock().interval_ms));
    debug_assert!(base > Duration::ZERO, "a heartbeat needs an interval");
    let (stop, stopped) = mpsc::channel::<()>();
    let name = beat.dev.name();
    let thread = std::thread::Builder::new()
        .name("extalloc-heartbeat".into())
        .spawn(move || {
            let mut interval = base;
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                match beat.beat() {
                    Ok(took) => {
                        interval = base.max(2 * took).min(MAX_INTERVAL);
                        beat.rec.lock().interval_ms = interval.as_millis() as u32;
                    }
                    // Taken over, or a failed read, write or flush of the record: the
                    // flush is the whole device's (`fdatasync`), so Linux may have
                    // forgotten the store's own pages with it. Never retried and believed.
                    Err(e) => {
                        latch.latch_with(e.to_string());
                        return;
                    }
                }
            }
        })
        .map_err(|e| Error::Io {
            device: name,
            op: "spawn the heartbeat thread",
            offset: 0,
            source: crate::error::IoSource::new(e),
        })?;
    Ok((stop, thread))
}

/// The devices (by the address of the object) a store has open in this process: a second
/// open of the same device object, which no file lock sees (a memory device, or a file
/// device handed to two stores), is refused with [`Error::DeviceBusy`].
static OPEN_DEVICES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A store's claim on its device object, given up when the store is dropped.
pub(super) struct OpenClaim(usize);

impl OpenClaim {
    pub(super) fn take(dev: &Arc<dyn Device>) -> Result<Self> {
        let id = Arc::as_ptr(dev) as *const () as usize;
        let mut open = OPEN_DEVICES.lock();
        if open.contains(&id) {
            return Err(Error::DeviceBusy {
                device: format!("object at {id:#x} (already open by a store in this process)"),
                wanted: "write",
            });
        }
        open.push(id);
        debug_assert_eq!(open.iter().filter(|&&o| o == id).count(), 1);
        Ok(OpenClaim(id))
    }
}

impl Drop for OpenClaim {
    fn drop(&mut self) {
        let mut open = OPEN_DEVICES.lock();
        debug_assert!(open.contains(&self.0), "a device claim not registered");
        open.retain(|&id| id != self.0);
    }
}
