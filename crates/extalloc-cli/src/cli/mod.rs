//! The command line's own code (not the library's): each command family in a file, so
//! `main.rs` holds the arguments and the dispatch only.

pub mod commands;
pub mod compare_age;
pub mod compare_fs;
pub mod device;
pub mod fsck;
pub mod mount;
pub mod options;
pub mod output;
pub mod volume;
