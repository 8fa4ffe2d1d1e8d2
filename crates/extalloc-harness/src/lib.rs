//! extalloc's crash and corruption harnesses: tests that run long enough to be commands.
//! Each takes a seed and a size and returns a verdict (a serde struct of counts that must be
//! zero, with the first failures), which `extalloc torture` prints and tests assert on.
//!
//! - [`torture`]: the store's random transactions with crashes on a fault-injecting device,
//!   checked after every recovery against a model (lost, leaked, doubly allocated blocks).
//! - [`torture_volume`]: the same for a volume's files (stale reads, lost data).
//! - [`torture_fs`]: the file system's namespace changes with crashes, every tree checked
//!   against a model after each recovery.
//! - [`corrupt`]: the corruption campaign (damages to images whose in-use blocks are known;
//!   fsck, open, allocate until full).
//! - [`torture_fs_damage`]: the damage campaign on file-system images (fsck, mount, repair).
//!
//! Depends on `extalloc` and `extalloc-fuse` only: the lab and the command line call it,
//! never the other way round.

pub mod corrupt;
pub mod torture;
pub mod torture_fs;
pub mod torture_fs_damage;
pub mod torture_volume;
