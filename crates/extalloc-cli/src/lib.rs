//! The library behind the `extalloc` command: the lab (workloads, outside allocators,
//! reports and charts), the comparison with the kernel's file systems, trace replay and
//! capture, the crash torture and the corruption campaign. `main.rs` is the command line over it; the fuzz targets
//! reach the parsers through it.

pub mod compare;
pub mod corrupt;
pub mod lab;
pub mod replay;
pub mod torture;
pub mod torture_fs;
pub mod torture_fs_damage;
pub mod torture_volume;
