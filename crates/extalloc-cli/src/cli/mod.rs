//! The command line's own code, each command family in a file, so `main.rs` holds the
//! arguments and the dispatch only: the admin commands ([`device`]: `mkfs`, `info`;
//! [`fsck`]; [`volume`]: `put`, `get`, `rm`, `ls`; [`mount`]: `mount`, `umount`;
//! [`policies`]), which need the library, the FUSE crate and the harnesses only; the
//! arguments of the lab's commands read into its options (the feature `lab`: `options` for
//! `bench` and `compare`, `commands` for `replay` and `open-bench`, `compare_fs` and
//! `compare_age` for `compare-fs`), the harnesses' verdicts ([`torture`]) and how errors
//! and a closed stdout end a command ([`output`]). The lab's work is `extalloc-lab`'s, the
//! torture's `extalloc-harness`'s.

#[cfg(feature = "lab")]
pub mod commands;
#[cfg(feature = "lab")]
pub mod compare_age;
#[cfg(feature = "lab")]
pub mod compare_fs;
pub mod device;
pub mod fsck;
pub mod mount;
#[cfg(feature = "lab")]
pub mod options;
pub mod output;
pub mod policies;
pub mod torture;
pub mod volume;
