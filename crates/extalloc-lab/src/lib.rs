//! extalloc's allocation lab: workloads run against policies and outside allocators
//! ([`lab`]), one registry of them ([`workload`]), the quick suite ([`suite`]), trace replay
//! and capture ([`replay`]), the comparison with the kernel's file systems ([`compare`]),
//! and what the `extalloc` commands of the lab do once their arguments are read
//! (`command`: tables, JSON reports, charts; with the default feature `charts` only, as
//! are the chart writers, so a build without it needs neither plotters nor fontconfig);
//! [`api`] runs a workload or a replay for a program (the Python package, which builds
//! without `charts`) and returns the report.
//!
//! Modules depend one way: `command` -> `api` -> `suite` -> `workload` -> `replay` ->
//! `compare` -> `lab`; `lab` imports none of the others. The fuzz targets reach the trace parser through
//! [`replay`].

pub mod api;
#[cfg(feature = "charts")]
pub mod command;
pub mod compare;
pub mod lab;
pub mod replay;
pub mod suite;
pub mod workload;
