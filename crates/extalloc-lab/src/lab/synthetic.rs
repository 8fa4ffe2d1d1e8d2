//! A synthetic device's fill for `--synthetic` runs (`LabOptions::synthetic`), and the
//! device it makes (`extalloc::disk::device::SyntheticDevice`). Re-exported by `mod.rs`
//! as `lab::Synthetic`; `backend.rs` and `open_bench.rs` open it.
//!
//! Data structures: [`Synthetic`], the fill (fraction in use, free runs' sizes).
//! Invariant: the same fill, geometry and seed make the same device. Lock order: none.

use anyhow::Result;
use extalloc::Geometry;

/// A synthetic device's fill for `--synthetic` runs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Synthetic {
    /// Fraction of each group in use.
    pub fill: f64,
    /// Free runs' sizes in KiB, log-uniform between the two.
    pub free_extent_kib: (u64, u64),
}

impl Synthetic {
    /// The device: `geometry`, a journal of `journal_blocks`, generated from `seed`.
    pub fn device(
        &self,
        geometry: Geometry,
        journal_blocks: u64,
        seed: u64,
    ) -> Result<std::sync::Arc<dyn extalloc::disk::device::Device>> {
        let kib_blocks = |k: u64| (k * 1024 / u64::from(geometry.block_size)).max(1);
        let spec = extalloc::disk::device::SyntheticSpec {
            geometry,
            journal_blocks,
            fill: self.fill,
            free_extent_blocks: (
                kib_blocks(self.free_extent_kib.0),
                kib_blocks(self.free_extent_kib.1),
            ),
            seed,
        };
        Ok(std::sync::Arc::new(
            extalloc::disk::device::SyntheticDevice::new(&spec)?,
        ))
    }
}
