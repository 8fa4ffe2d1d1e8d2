//! The workload registry: every workload of `extalloc bench` and `compare` in one table,
//! [`WORKLOADS`]. The command line's workload argument (its names and their help), `bench`,
//! `compare`, the options' checks and the quick suite ([`crate::suite`]) all read it; the
//! list of workloads is written nowhere else.
//!
//! Data structures: [`Workload`] (a row: name, help, how it runs in memory and on a volume,
//! its defaults, what it accepts, its step in the quick suite), [`Shape`] (how its options
//! are read), [`Quick`] (its quick-suite step). Invariants: names are unique; the table's
//! order is the order `bench --help` lists them in. Lock order: none.

use crate::lab::volume_run::OnVolume;
use crate::lab::{self, RunOnce};
use crate::replay;

/// How a workload's options are read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Shape {
    /// `--threads` threads; `--fill` is where small-files stops.
    Threads,
    /// fallocate3: `--fill` pre-fills the device with scattered extents.
    Prefill,
    /// replay: one thread per traced task, `--trace` required, no `--device`.
    Trace,
    /// writeback: one writer per file, its own matrix of writeback contexts x affinities.
    Writeback,
}

/// A workload's step in `bench --suite quick`: what differs from the defaults.
#[derive(Clone, Copy, Debug)]
pub struct Quick {
    /// Policies compared (always with the reference policy, `extalloc`).
    pub policies: &'static str,
    pub threads: &'static [usize],
    pub device: &'static str,
    pub file: &'static str,
    pub fill: f64,
}

/// One workload: a row of [`WORKLOADS`].
#[derive(Clone, Copy)]
pub struct Workload {
    /// The name on the command line and in reports.
    pub name: &'static str,
    /// Its line in `extalloc bench --help`.
    pub help: &'static str,
    /// One run in memory (writeback: at the quick suite's parameters; `bench` and
    /// `compare` run its own matrix).
    pub run_once: RunOnce,
    /// A run on a volume over `--device`, for the workloads of files.
    pub on_volume: Option<OnVolume>,
    /// Defaults: policies, threads, device size, file size.
    pub policies: &'static str,
    pub threads: &'static str,
    pub device_size: &'static str,
    pub file_size: &'static str,
    /// Runs on a journaled store over `--synthetic` (and `--device` without `on_volume`).
    pub synthetic: bool,
    /// Plain extents, no files: the outside allocators run it too.
    pub outside: bool,
    /// `compare` runs it on the kernel's file systems.
    pub kernel: bool,
    pub shape: Shape,
    pub quick: Option<Quick>,
}

/// The defaults a row differs from.
const BASE: Workload = Workload {
    name: "",
    help: "",
    run_once: lab::fallocate2::run_once,
    on_volume: None,
    policies: "ext4-base,ext4-2025,extalloc",
    threads: "1,2,4,8",
    device_size: "16GiB",
    file_size: "4GiB",
    synthetic: false,
    outside: false,
    kernel: false,
    shape: Shape::Threads,
    quick: None,
};

/// A quick-suite step of 2 threads on 16 GiB comparing `policies` (the files' workloads).
const fn files(policies: &'static str) -> Quick {
    Quick {
        policies,
        threads: &[2],
        device: "16GiB",
        file: "4GiB",
        fill: 1.0,
    }
}

/// Every workload, in the order `bench --help` lists them.
pub static WORKLOADS: &[Workload] = &[
    Workload {
        name: "fallocate2",
        help: "will-it-scale fallocate2: append 8 KiB until 1 MiB, truncate, repeat (one file \
               per thread)",
        synthetic: true,
        outside: true,
        kernel: true,
        quick: Some(Quick {
            policies: "ext4-base,ext4-2025,extalloc,tlsf,first-fit",
            threads: &[1, 2],
            device: "16GiB",
            file: "1MiB",
            fill: 1.0,
        }),
        ..BASE
    },
    Workload {
        name: "fallocate3",
        help: "will-it-scale fallocate3: truncate a 70 MiB file and fallocate it again, repeat \
               (--fill pre-fills the device; a crowded device scans every group and forces \
               commits)",
        run_once: lab::fallocate3::run_once,
        threads: "1,2",
        // The size the kernel reference figures were taken on.
        device_size: "8GiB",
        synthetic: true,
        shape: Shape::Prefill,
        ..BASE
    },
    Workload {
        name: "sparse-writes",
        help: "1 KiB writes at random offsets of a large sparse file (--writes, --file-size)",
        run_once: lab::sparse_writes::run_once,
        on_volume: Some(lab::sparse_writes::run_volume),
        quick: Some(Quick {
            threads: &[1],
            ..files("extalloc:prealloc_index=list,extalloc")
        }),
        ..BASE
    },
    Workload {
        name: "random-fill",
        help: "fill a file with random 1 KiB writes (--file-size, --seq-burst)",
        run_once: lab::random_fill::run_once,
        on_volume: Some(lab::random_fill::run_volume),
        file_size: "5GiB",
        quick: Some(Quick {
            device: "4GiB",
            file: "1GiB",
            ..files("ext4-base,extalloc")
        }),
        ..BASE
    },
    Workload {
        name: "small-files",
        help: "create 2 KiB files until the device is full",
        run_once: lab::small_files::run_once,
        on_volume: Some(lab::small_files::run_volume),
        device_size: "4GiB",
        quick: Some(Quick {
            device: "1GiB",
            fill: 0.9,
            ..files("extalloc:locality_prealloc=false,extalloc")
        }),
        ..BASE
    },
    Workload {
        name: "append-vs-fallocate",
        help: "long-lived files grow by appends while large short-lived fallocates come and go",
        run_once: lab::append_vs_fallocate::run_once,
        on_volume: Some(lab::append_vs_fallocate::run_volume),
        quick: Some(files("extalloc:size_classes=false,extalloc")),
        ..BASE
    },
    Workload {
        name: "size-class-edge",
        help: "extents a hair under the size-class borders (--mix: lifetime against size)",
        run_once: lab::size_class_edge::run_once,
        on_volume: Some(lab::size_class_edge::run_volume),
        quick: Some(files("extalloc:size_classes=false,extalloc")),
        ..BASE
    },
    Workload {
        name: "frag",
        help: "every job appends 4 KiB at a time to its own file up to --file-size (--jobs)",
        run_once: lab::frag::run_once,
        on_volume: Some(lab::frag::run_volume),
        threads: "16",
        file_size: "256MiB",
        synthetic: true,
        outside: true,
        kernel: true,
        quick: Some(Quick {
            policies: "ext4-base,extalloc,tlsf,first-fit",
            threads: &[16],
            device: "16GiB",
            file: "256MiB",
            fill: 1.0,
        }),
        ..BASE
    },
    Workload {
        name: "replay",
        help: "a kernel trace (--trace), one thread per traced task",
        run_once: replay::bench::run_once,
        shape: Shape::Trace,
        quick: Some(Quick {
            threads: &[1],
            device: "4GiB",
            ..files("ext4-base,extalloc")
        }),
        ..BASE
    },
    Workload {
        name: "writeback",
        help: "seed 003's fio job on a buffered volume: --files files, each in its own \
               directory, 4 KiB writes (--pattern), fsync, sync; per --wb-contexts x \
               --wb-affinity",
        run_once: lab::writeback::run_quick,
        // Buffered writes run on a volume, which takes extalloc's policies.
        policies: "extalloc",
        // The kernel reference figures' file system.
        device_size: "10GiB",
        file_size: "256MiB",
        kernel: true,
        shape: Shape::Writeback,
        quick: Some(Quick {
            policies: "extalloc",
            threads: &[4],
            device: "2GiB",
            file: "128MiB",
            fill: 1.0,
        }),
        ..BASE
    },
];

impl Workload {
    /// The workload named `name`.
    pub fn named(name: &str) -> Option<&'static Workload> {
        WORKLOADS.iter().find(|w| w.name == name)
    }

    /// Whether `--device` runs it (on a journaled store, or on a volume).
    pub fn on_device(&self) -> bool {
        self.shape != Shape::Trace
    }
}

/// The names of the workloads `pick` keeps, in the table's order.
pub fn list(pick: impl Fn(&Workload) -> bool) -> Vec<&'static str> {
    WORKLOADS
        .iter()
        .filter(|w| pick(w))
        .map(|w| w.name)
        .collect()
}

/// The names of the workloads `pick` keeps, as prose: `a, b and c`.
pub fn names(pick: impl Fn(&Workload) -> bool) -> String {
    let names = list(pick);
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Outside allocators run plain extents only: refused for the other workloads before the
/// matrix starts (each policy checked first, as the matrix would).
pub(crate) fn refuse_outside(workload: &Workload, opts: &lab::LabOptions) -> anyhow::Result<()> {
    use lab::backend::LabPolicy;
    let policies: Vec<LabPolicy> = opts
        .policies
        .iter()
        .map(|p| LabPolicy::parse(p))
        .collect::<anyhow::Result<_>>()?;
    if let Some(outside) = policies.iter().find(|p| matches!(p, LabPolicy::Outside(_))) {
        anyhow::ensure!(
            workload.outside,
            "{} needs files and preallocation, which {} does not have; outside allocators \
             run {}",
            workload.name,
            outside.name(),
            names(|w| w.outside)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_listed() {
        for (i, w) in WORKLOADS.iter().enumerate() {
            assert!(!w.name.is_empty() && !w.help.is_empty());
            assert!(
                WORKLOADS[..i].iter().all(|o| o.name != w.name),
                "{} twice",
                w.name
            );
            assert_eq!(Workload::named(w.name).map(|n| n.name), Some(w.name));
        }
        assert_eq!(names(|w| w.synthetic), "fallocate2, fallocate3 and frag");
        assert_eq!(names(|w| w.outside), "fallocate2 and frag");
        assert_eq!(list(|w| w.kernel), ["fallocate2", "frag", "writeback"]);
    }
}
