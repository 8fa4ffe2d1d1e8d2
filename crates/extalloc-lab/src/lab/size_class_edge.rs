//! `size-class-edge` (seed 004's regressions): files written in extents a hair under the
//! size-class borders (124 KiB and 8 MiB - 4 KiB), 8 extents each, fallocate-style (goal =
//! the file's last block). Half the files are short-lived: freed once four newer files
//! exist. By default lifetime is independent of size; with `--mix` the lifetime hint is
//! passed and runs against the scheme's assumption that size predicts lifetime (the small
//! files are the long-lived ones). The run writes files until the long-lived ones would hold
//! half the device. One op is one extent allocation.

use super::backend::LabPolicy;
use super::report::Run;
use super::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::Result;
use extalloc::{AllocRequest, Extent, Lifetime};
use std::collections::VecDeque;

const EXTENTS_PER_FILE: u64 = 8;
const SHORT_LIVED_KEPT: usize = 4;

pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_file_threads(
        "size-class-edge",
        policy,
        threads,
        opts,
        Until::Done,
        |alloc, t, _stop, _| {
            let block_bytes = opts.block_bytes();
            let small = ((128 << 10) - block_bytes) / block_bytes;
            let medium = ((8 << 20) - block_bytes) / block_bytes;
            let avg_file_blocks = EXTENTS_PER_FILE * (small + medium) / 2;
            // Half the files are long-lived: stop when they would fill half the device.
            let files_total = (opts.device_bytes / block_bytes / 2 / (avg_file_blocks / 2)).max(2)
                / threads as u64;
            let mut kept: Vec<Vec<Extent>> = Vec::new();
            let mut short: VecDeque<Vec<Extent>> = VecDeque::new();
            let mut ops = 0;
            for k in 0..files_total {
                let is_small = k % 2 == 0;
                let chunk = if is_small { small } else { medium };
                let long = if opts.mix { is_small } else { (k / 2) % 2 == 0 };
                let hint = match (opts.mix, long) {
                    (false, _) => Lifetime::Unknown,
                    (true, true) => Lifetime::Long,
                    (true, false) => Lifetime::Short,
                };
                let id = (opts.seed << 40) | ((t as u64) << 32) | k;
                let mut extents: Vec<Extent> = Vec::new();
                for i in 0..EXTENTS_PER_FILE {
                    let mut left = chunk;
                    while left > 0 {
                        let mut req = AllocRequest::new(id, left)
                            .logical(i * chunk + chunk - left)
                            .lifetime(hint);
                        if let Some(last) = extents
                            .last()
                            .filter(|e| e.end() < alloc.allocator().geometry().blocks_count)
                        {
                            req = req.goal(last.end());
                        }
                        let e = alloc.allocate_committing(&req)?;
                        left -= e.len;
                        ops += 1;
                        match extents.last_mut() {
                            Some(last) if last.end() == e.start => last.len += e.len,
                            _ => extents.push(e),
                        }
                    }
                }
                if long {
                    kept.push(extents);
                } else {
                    short.push_back(extents);
                    if short.len() > SHORT_LIVED_KEPT {
                        for e in short.pop_front().expect("non-empty") {
                            alloc.allocator().free(e)?;
                        }
                    }
                }
            }
            for extents in short {
                for e in extents {
                    alloc.allocator().free(e)?;
                }
            }
            Ok(ThreadOutput {
                ops,
                files: kept,
                marks: Vec::new(),
            })
        },
    )
}

/// The same files on a volume over a file device (`bench size-class-edge --device`): each
/// of a file's 8 extents is a `fallocate` of its length at the end of the file (mapped in
/// one request, goal after the file's last extent), with the lifetime hint as in memory;
/// each file is closed once written; short-lived files are unlinked once four newer exist,
/// and those left at the end too. One op is one fallocate (in memory, one allocation: the
/// same unless one splits).
pub fn run_volume(on: &super::volume_run::OnDevice<'_>) -> Result<super::volume_run::VolumeRun> {
    let (threads, opts) = (on.threads, on.opts);
    let block_bytes = opts.block_bytes();
    let small = ((128 << 10) - block_bytes) / block_bytes;
    let medium = ((8 << 20) - block_bytes) / block_bytes;
    let avg_file_blocks = EXTENTS_PER_FILE * (small + medium) / 2;
    let files_total =
        (opts.device_bytes / block_bytes / 2 / (avg_file_blocks / 2)).max(2) / threads as u64;
    super::volume_run::run(on, |vol, _, _| {
        let mut short: VecDeque<u64> = VecDeque::new();
        let mut ops = 0;
        for k in 0..files_total {
            let is_small = k % 2 == 0;
            let chunk = if is_small { small } else { medium } * block_bytes;
            let long = if opts.mix { is_small } else { (k / 2) % 2 == 0 };
            let id = vol.create(b"")?;
            if opts.mix {
                vol.set_lifetime(
                    id,
                    if long {
                        Lifetime::Long
                    } else {
                        Lifetime::Short
                    },
                )?;
            }
            for i in 0..EXTENTS_PER_FILE {
                let mode = extalloc::volume::Fallocate::Allocate;
                vol.fallocate(id, mode, i * chunk, chunk)?;
                ops += 1;
            }
            // Written whole: closed, as a program closes a file it has written (its
            // preallocation goes back; in memory no allocation holds one).
            vol.close_file(id)?;
            if !long {
                short.push_back(id);
                if short.len() > SHORT_LIVED_KEPT {
                    vol.unlink(short.pop_front().expect("non-empty"))?;
                }
            }
        }
        for id in short {
            vol.unlink(id)?;
        }
        Ok(ops)
    })
}
