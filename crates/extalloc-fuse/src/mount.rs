//! `extalloc mount`: open a device's volume, mount its file system through FUSE, serve it
//! until `umount` or a signal, then unmount cleanly.
//!
//! Data structures: [`MountOptions`]; the served [`Fs`] is shared between the session's
//! threads and this function, which gets it back whole once the session ends.
//!
//! Invariant: the volume is opened before the mount point is touched (so a busy or foreign
//! device never leaves a mount behind) and closed only after the session has stopped (no
//! request can reach a closed volume). The store's lock on the device makes a second mount
//! of the same device fail.
//!
//! Lock order: none here.

use crate::fs::{Fs, MountReport};
use crate::fuse::FuseFs;
use extalloc::alloc::Policy;
use extalloc::disk::device::FileDevice;
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use fuser::{Config, MountOption, Session, SessionACL};
use std::path::PathBuf;
use std::sync::Arc;

/// What to mount and how.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// The extalloc device (a file or block device made by `extalloc mkfs`).
    pub device: PathBuf,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Threads serving kernel requests.
    pub threads: usize,
    /// The dirty cache and writeback contexts.
    pub writeback: WritebackOptions,
    /// The allocation policy.
    pub policy: Policy,
}

/// Opens the device, mounts, calls `ready` once the file system is served, and serves it
/// until it is unmounted (`umount`, `fusermount3 -u`, or SIGTERM, SIGINT or SIGHUP to
/// this process); then writes everything back and closes the volume.
pub fn serve(opts: &MountOptions, ready: impl FnOnce(&MountReport)) -> Result<(), String> {
    let dev_name = opts.device.display().to_string();
    if !opts.mountpoint.is_dir() {
        return Err(format!(
            "mount point {} is not a directory",
            opts.mountpoint.display()
        ));
    }
    let dev = FileDevice::open(&opts.device).map_err(|e| device_error(&dev_name, e))?;
    let vol =
        Volume::open(Arc::new(dev), opts.policy.clone()).map_err(|e| device_error(&dev_name, e))?;
    let (fs, report) = Fs::mount(vol, opts.writeback).map_err(|e| format!("{dev_name}: {e}"))?;
    let fs = Arc::new(fs);
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName(dev_name.clone()),
        MountOption::Subtype("extalloc".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
        MountOption::Suid,
        MountOption::Dev,
    ];
    cfg.acl = SessionACL::All;
    cfg.n_threads = Some(opts.threads.max(1));
    let mut session = match Session::new(
        FuseFs::new(fs.clone(), &opts.mountpoint),
        &opts.mountpoint,
        &cfg,
    ) {
        Ok(s) => s,
        Err(e) => {
            let _ = close(fs);
            return Err(format!(
                "cannot mount {dev_name} on {}: {e} (is /dev/fuse there, and are you root or \
                 is fusermount3 installed?)",
                opts.mountpoint.display()
            ));
        }
    };
    let mut unmounter = session.unmount_callable();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("cannot catch signals: {e}"))?;
    std::thread::Builder::new()
        .name("extalloc-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                if let Err(e) = unmounter.unmount() {
                    eprintln!("extalloc mount: cannot unmount: {e}");
                }
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    ready(&report);
    let served = session.run();
    let closed = close(fs);
    served.map_err(|e| format!("the FUSE session failed: {e}"))?;
    closed
}

/// Closes the file system once the session has let go of it.
fn close(fs: Arc<Fs>) -> Result<(), String> {
    match Arc::try_unwrap(fs) {
        Ok(fs) => fs.unmount(),
        Err(fs) => {
            // A session thread still holds it: write everything back at least.
            fs.sync().map_err(|e| format!("cannot sync: {e}"))?;
            Err(
                "the file system is still in use after the session ended; synced, not closed"
                    .into(),
            )
        }
    }
}

/// A device that cannot be opened, said so that the user knows what to do.
fn device_error(dev: &str, e: extalloc::Error) -> String {
    match e {
        extalloc::Error::DeviceBusy { .. } => format!(
            "{dev} is in use by another process (already mounted? `grep extalloc \
             /proc/mounts`): {e}"
        ),
        extalloc::Error::NotExtalloc(_) => format!(
            "{dev} is not an extalloc device: make one with `extalloc mkfs {dev} --size \
             SIZE` ({e})"
        ),
        other => format!("{dev}: {other}"),
    }
}
