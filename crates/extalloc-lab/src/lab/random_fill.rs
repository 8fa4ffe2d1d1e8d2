//! `random-fill` (seed 002, tests 2 and 3): each thread fills its file (`--file-size` split
//! between the threads) with 1 KiB writes in random order; with `--seq-burst N`, N sequential
//! writes before each jump. Every offset is written once; a write to an unallocated block
//! allocates it.

use super::backend::LabPolicy;
use super::report::Run;
use super::{run_file_threads, LabOptions, Marks, ThreadOutput, Until};
use anyhow::Result;
use extalloc::DataRequest;
use rand::seq::SliceRandom;
use rand::SeedableRng;

pub const WRITE_BYTES: u64 = 1024;

pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_file_threads(
        "random-fill",
        policy,
        threads,
        opts,
        Until::Done,
        |alloc, t, _stop, started| {
            let block_bytes = opts.block_bytes();
            let file_bytes = opts.file_bytes / threads as u64;
            let file = alloc.create_file((opts.seed << 32) | t as u64);
            alloc.set_file_size(&file, file_bytes / block_bytes)?;
            let (burst, order) = write_order(opts, file_bytes, t)?;
            let writes = order.len() as u64 * burst;
            let mut marks = Marks::new(writes, started);
            let mut done = 0;
            for b in order {
                for j in 0..burst {
                    let block = (u64::from(b) * burst + j) * WRITE_BYTES / block_bytes;
                    if !file.is_mapped(block) {
                        alloc.allocate_data_committing(&file, &DataRequest::new(block, 1))?;
                    }
                    done += 1;
                    marks.tick(done);
                }
            }
            ThreadOutput::close_file(alloc, &file, writes, marks)
        },
    )
}

/// random-fill on a journaled volume made anew on `path`: each thread's file filled with
/// the same 1 KiB writes in the same order, with data, through the volume (see
/// `volume_run`).
pub fn run_volume(on: &super::volume_run::OnDevice<'_>) -> Result<super::volume_run::VolumeRun> {
    let (threads, opts) = (on.threads, on.opts);
    let data = vec![0x3c_u8; WRITE_BYTES as usize];
    super::volume_run::run(on, |vol, t, _| {
        let file_bytes = opts.file_bytes / threads as u64;
        let id = vol.create(b"")?;
        vol.truncate(id, file_bytes)?;
        let (burst, order) = write_order(opts, file_bytes, t)?;
        let writes = order.len() as u64 * burst;
        for b in order {
            for j in 0..burst {
                vol.write(id, (u64::from(b) * burst + j) * WRITE_BYTES, &data)?;
            }
        }
        vol.close_file(id)?;
        Ok(writes)
    })
}

/// Thread `t`'s writes of a `file_bytes` file: the burst length and the bursts in their
/// shuffled order (burst `b` writes units `b * burst ..`).
fn write_order(opts: &LabOptions, file_bytes: u64, t: usize) -> Result<(u64, Vec<u32>)> {
    let burst = opts.seq_burst.max(1);
    let bursts = (file_bytes / WRITE_BYTES / burst).max(1);
    anyhow::ensure!(
        bursts <= u32::MAX as u64,
        "--file-size too large for random-fill"
    );
    let mut order: Vec<u32> = (0..bursts as u32).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(
        opts.seed ^ (t as u64) << 20,
    ));
    Ok((burst, order))
}
