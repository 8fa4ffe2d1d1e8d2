//! `sparse-writes` (seed 002, test 1): 1 KiB writes at random offsets of one large sparse
//! file per thread; a write that lands in an unallocated block allocates it through the
//! file's preallocations. The file's PA count grows with the run, so the per-tenth
//! throughput (`progress` in the JSON) shows how the PA lookup cost grows with it.

use super::backend::LabPolicy;
use super::report::Run;
use super::{run_file_threads, LabOptions, Marks, ThreadOutput, Until};
use anyhow::Result;
use extalloc::DataRequest;
use rand::{Rng, SeedableRng};

/// Bytes per write.
pub const WRITE_BYTES: u64 = 1024;

pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_file_threads(
        "sparse-writes",
        policy,
        threads,
        opts,
        Until::Done,
        |alloc, t, _stop, started| {
            let block_bytes = opts.block_bytes();
            let file = alloc.create_file((opts.seed << 32) | t as u64);
            alloc.set_file_size(&file, opts.file_bytes / block_bytes)?;
            let writes =
                opts.writes / threads as u64 + u64::from((t as u64) < opts.writes % threads as u64);
            let units = (opts.file_bytes / WRITE_BYTES).max(1);
            let mut rng =
                rand::rngs::StdRng::seed_from_u64(opts.seed.wrapping_mul(0x9e37_79b9) ^ t as u64);
            let mut marks = Marks::new(writes, started);
            for i in 0..writes {
                let block = rng.gen_range(0..units) * WRITE_BYTES / block_bytes;
                if !file.is_mapped(block) {
                    alloc.allocate_data_committing(&file, &DataRequest::new(block, 1))?;
                }
                marks.tick(i + 1);
            }
            ThreadOutput::close_file(alloc, &file, writes, marks)
        },
    )
}

/// sparse-writes on a journaled volume made anew on `path`: each thread's file created,
/// sized, then written 1 KiB at a time at the same random offsets (with data) through the
/// volume (see `volume_run`).
pub fn run_volume(on: &super::volume_run::OnDevice<'_>) -> Result<super::volume_run::VolumeRun> {
    let (threads, opts) = (on.threads, on.opts);
    let data = vec![0xa5_u8; WRITE_BYTES as usize];
    super::volume_run::run(on, |vol, t, _| {
        let id = vol.create(b"")?;
        vol.truncate(id, opts.file_bytes)?;
        let writes =
            opts.writes / threads as u64 + u64::from((t as u64) < opts.writes % threads as u64);
        let units = (opts.file_bytes / WRITE_BYTES).max(1);
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(opts.seed.wrapping_mul(0x9e37_79b9) ^ t as u64);
        for _ in 0..writes {
            vol.write(id, rng.gen_range(0..units) * WRITE_BYTES, &data)?;
        }
        vol.close_file(id)?;
        Ok(writes)
    })
}
