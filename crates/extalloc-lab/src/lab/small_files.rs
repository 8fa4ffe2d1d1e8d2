//! `small-files` (seed 002, test 4, after fs_mark): every thread creates files of 2 KiB (one
//! write, then close) until the device is full, or `--fill` of it is used. One op is one file.

use super::backend::LabPolicy;
use super::report::Run;
use super::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::Result;
use extalloc::{DataRequest, Error};
use std::sync::atomic::Ordering;

pub const FILE_BYTES: u64 = 2048;

pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_file_threads(
        "small-files",
        policy,
        threads,
        opts,
        Until::Done,
        |alloc, t, stop, _| {
            let blocks = FILE_BYTES.div_ceil(opts.block_bytes());
            let total = alloc.allocator().geometry().blocks_count;
            // Stop once free blocks (locality chunks count as used) fall to this.
            let floor = ((1.0 - opts.fill) * total as f64) as u64;
            let mut files = Vec::new();
            let mut n = 0u64;
            loop {
                let file = alloc.create_file((opts.seed << 48) | ((t as u64) << 32) | n);
                match alloc.allocate_data_committing(&file, &DataRequest::new(0, blocks)) {
                    Ok(e) => {
                        files.push(vec![e]);
                        // Close: unused preallocation goes back.
                        alloc.release_prealloc(&file)?;
                        n += 1;
                    }
                    Err(Error::NoSpace { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
                // A safety stop for very large devices: --seconds bounds the run.
                if n.is_multiple_of(1024) && stop.load(Ordering::Relaxed) {
                    break;
                }
                if floor > 0 && n.is_multiple_of(64) && alloc.allocator().free_blocks() <= floor {
                    break;
                }
            }
            Ok(ThreadOutput {
                ops: n,
                files,
                marks: Vec::new(),
            })
        },
    )
}

/// small-files on a journaled volume made anew on `path`: every file created, written
/// (2 KiB of data) and closed through the volume (see `volume_run`).
pub fn run_volume(on: &super::volume_run::OnDevice<'_>) -> Result<super::volume_run::VolumeRun> {
    let opts = on.opts;
    let total = opts.geometry()?.blocks_count;
    let floor = ((1.0 - opts.fill) * total as f64) as u64;
    let data = vec![0x5a_u8; FILE_BYTES as usize];
    super::volume_run::run(on, |vol, _, stop| {
        let mut n = 0u64;
        loop {
            let id = vol.create(b"")?;
            match vol.write(id, 0, &data) {
                Ok(()) => {}
                Err(Error::NoSpace { .. }) => {
                    vol.unlink(id)?;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
            vol.close_file(id)?;
            n += 1;
            let full = n.is_multiple_of(64) && floor > 0 && vol.statfs().free_blocks <= floor;
            if full || (n.is_multiple_of(1024) && stop.load(Ordering::Relaxed)) {
                break;
            }
        }
        Ok(n)
    })
}
