//! The lab at a tiny size, so it never rots: every workload runs, prints its table and writes
//! a JSON report with every field of the schema, and the figures that define the workload
//! (writes done, files made, data written) come out as the workload says.
#![cfg(feature = "lab")] // the lab's commands: the binary's default feature

use serde_json::Value;
use std::process::Command;

/// Runs `extalloc bench` with `args` plus a JSON path on a device of 4096-block groups (64 MiB
/// unless `args` says) and returns the parsed report, after checking the table has one row
/// per run.
#[allow(clippy::too_many_lines, reason = "a test scenario, read top to bottom")]
fn bench(name: &str, args: &[&str]) -> Value {
    let dir = std::env::temp_dir().join(format!("extalloc-smoke-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .arg("bench")
        .args(args)
        .args(if args.contains(&"--device-size") {
            &[][..]
        } else {
            &["--device-size", "64MiB"][..]
        })
        .args(["--group-blocks", "4096"])
        .args(["--commit-ms", "5", "--seconds", "0.1", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    // Above the tables: any warning (a busy machine) and the verdict, each a paragraph.
    let at = text.find("| policy").expect("a table");
    let (preamble, table) = text.split_at(at);
    assert!(preamble.contains("**Verdict**: "), "{name}: {text}");
    assert!(
        preamble
            .split("\n\n")
            .filter(|p| !p.is_empty())
            .all(|p| p.starts_with("**Verdict**: ") || p.starts_with("> warning: ")),
        "{name}: {preamble}"
    );
    // Two tables (throughput; layout and free space), and a third (the crowded-device
    // path) when a run forced commits or loaded bitmaps: one row per run in each.
    let rows = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| policy"))
        .count();
    let n = report["runs"].as_array().unwrap().len();
    let tables = if table.contains("| allocs/MiB |") {
        // The writeback workload: one table of its own.
        1
    } else if table.contains("| groups considered /alloc |") {
        3
    } else {
        2
    };
    assert_eq!(rows, tables * n, "{table}");
    assert_eq!(
        table.lines().filter(|l| l.is_empty()).count(),
        tables - 1,
        "{table}"
    );
    assert_eq!(report["schema"], "extalloc-bench/1");
    // The fields added for a reader: the reference, the verdict (as printed), every
    // repetition's extents per file (3 by default), the machine's load.
    assert!(report["reference"].is_string(), "{name}");
    let verdict = report["verdict"]["text"].as_str().unwrap();
    assert!(preamble.contains(verdict), "{name}: {verdict}");
    let repeats = report["extents_per_file_repeats"].as_array().unwrap();
    assert_eq!(repeats.len(), n, "{name}");
    let wanted = args
        .iter()
        .position(|a| *a == "--repeat")
        .map_or(3, |i| args[i + 1].parse().unwrap());
    for cell in repeats {
        assert_eq!(
            cell["values"].as_array().unwrap().len(),
            wanted,
            "{name}: {cell}"
        );
    }
    if std::path::Path::new("/proc/loadavg").exists() {
        assert!(report["machine"]["busy"].is_boolean(), "{name}");
    }
    for run in report["runs"].as_array().unwrap() {
        assert!(run["ops"].as_u64().unwrap() > 0, "{name}: {run}");
        assert!(run["ops_per_sec"].as_f64().unwrap() > 0.0, "{name}");
        for key in ["p50", "p95", "p99", "max"] {
            assert!(
                run["latency_ns"][key].as_u64().unwrap() > 0,
                "{name}: {key}"
            );
        }
        for key in [
            "files",
            "extents_per_file",
            "avg_extent_kib",
            "layout_score",
        ] {
            assert!(run["layout"][key].is_number(), "{name}: layout {key}");
        }
        for key in [
            "free_blocks",
            "free_extents",
            "avg_free_extent_kib",
            "largest_free_extent_kib",
            "fragmented_groups",
            "frag_pct_mean",
        ] {
            assert!(run["free_space"][key].is_number(), "{name}: {key}");
        }
        assert!(run["free_space"]["histogram"].is_array(), "{name}");
        for key in ["groups_scanned", "trylock_skips", "lock_waits"] {
            assert!(run["counters"][key].is_u64(), "{name}: counters {key}");
        }
    }
    report
}

fn runs(report: &Value) -> &Vec<Value> {
    report["runs"].as_array().unwrap()
}

#[test]
fn sparse_writes_reports_ten_tenths() {
    let r = bench(
        "sparse",
        &[
            "sparse-writes",
            "--threads",
            "1,2",
            "--writes",
            "3000",
            "--file-size",
            "16MiB",
            "--policy",
            "extalloc,extalloc:prealloc_index=list",
            "--repeat",
            "1",
        ],
    );
    assert_eq!(r["workload"], "sparse-writes");
    assert_eq!(runs(&r).len(), 4);
    // One run each: no spread, and the verdict claims no lead beyond noise.
    assert_eq!(r["verdict"]["within_noise"], serde_json::Value::Null);
    let verdict = r["verdict"]["text"].as_str().unwrap();
    assert!(
        verdict.contains("median of 1") && verdict.contains("no spread"),
        "{verdict}"
    );
    for run in runs(&r) {
        assert_eq!(run["ops"], 3000, "every write is one op");
        let progress = run["progress"].as_array().unwrap();
        assert_eq!(progress.len(), 10);
        for (i, p) in progress.iter().enumerate() {
            let done = p["done"].as_f64().unwrap();
            assert!((done - (i + 1) as f64 / 10.0).abs() < 1e-9, "{p}");
            assert!(p["ops_per_sec"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
}

/// The writeback workload: a run per contexts x affinity, each carrying its own fields;
/// every byte written once, nothing preallocated left, the cache within its limit (plus a
/// write piece per writer), sequential files in at most two extents.
#[test]
fn writeback_runs_every_context_and_affinity() {
    let r = bench(
        "writeback",
        &[
            "writeback",
            "--files",
            "3",
            "--file-size",
            "4MiB",
            "--wb-contexts",
            "1,2",
            "--wb-affinity",
            "group,none",
            "--dirty-limit",
            "4MiB",
        ],
    );
    assert_eq!(r["workload"], "writeback");
    assert_eq!(runs(&r).len(), 4);
    for run in runs(&r) {
        assert_eq!(run["ops"], 3 * 1024, "{run}");
        assert!(run["mib_per_sec"].as_f64().unwrap() > 0.0);
        assert!([1, 2].contains(&run["wb_contexts"].as_u64().unwrap()));
        assert!(["group", "none"].contains(&run["wb_affinity"].as_str().unwrap()));
        assert_eq!(run["dirty_limit_bytes"], 4 << 20);
        assert!(run["dirty_peak_bytes"].as_u64().unwrap() <= (4 << 20) + 3 * (1 << 20));
        assert_eq!(run["prealloc_left_blocks"], 0);
        assert!(run["allocations_per_mib"].as_f64().unwrap() > 0.0);
        assert!(run["context_lock_waits"].is_array());
    }
    let seq = bench(
        "writeback-seq",
        &[
            "writeback",
            "--files",
            "2",
            "--file-size",
            "8MiB",
            "--pattern",
            "seq",
            "--wb-contexts",
            "2",
            "--wb-affinity",
            "group",
        ],
    );
    let run = &runs(&seq)[0];
    assert!(
        run["layout"]["extents_per_file"].as_f64().unwrap() <= 2.0,
        "{run}"
    );
}

#[test]
fn random_fill_writes_every_kib_once() {
    for burst in ["1", "4"] {
        let r = bench(
            "fill",
            &[
                "random-fill",
                "--threads",
                "1,2",
                "--file-size",
                "8MiB",
                "--seq-burst",
                burst,
                "--policy",
                "ext4-base,extalloc",
            ],
        );
        for run in runs(&r) {
            assert_eq!(run["ops"], 8 * 1024, "one op per KiB of the file");
            // Every block of the file is mapped when the fill ends.
            let layout = &run["layout"];
            let files = layout["files"].as_f64().unwrap();
            let kib = layout["extents_per_file"].as_f64().unwrap()
                * layout["avg_extent_kib"].as_f64().unwrap()
                * files;
            assert!((kib - 8.0 * 1024.0).abs() < 1.0, "{run}");
        }
    }
}

#[test]
fn small_files_fill_the_device() {
    let r = bench(
        "small",
        &[
            "small-files",
            "--threads",
            "1,2",
            "--policy",
            "extalloc,extalloc:locality_prealloc=false",
        ],
    );
    for run in runs(&r) {
        // 2 KiB files in 4 KiB blocks: one block each, until none is left.
        assert_eq!(run["ops"], 16 * 1024, "{run}");
        assert_eq!(run["free_space"]["free_blocks"], 0);
    }
    let r = bench(
        "small-fill",
        &["small-files", "--threads", "2", "--fill", "0.5"],
    );
    for run in runs(&r) {
        // Half the blocks, give or take the two shards' locality chunks (512 blocks each,
        // counted as used) and the 64 files between checks.
        let files = run["ops"].as_u64().unwrap();
        assert!((8 * 1024 - 1200..=8 * 1024 + 128).contains(&files), "{run}");
        let free = run["free_space"]["free_blocks"].as_u64().unwrap();
        assert_eq!(free + files, 16 * 1024, "discarded chunks are free again");
    }
}

#[test]
fn frag_runs_every_allocator() {
    let r = bench(
        "frag",
        &[
            "frag",
            "--jobs",
            "4",
            "--file-size",
            "4MiB",
            "--policy",
            "extalloc,ext4-base,tlsf,first-fit",
        ],
    );
    assert_eq!(r["workload"], "frag");
    for run in runs(&r) {
        assert_eq!(run["threads"], 4);
        assert_eq!(run["ops"], 4 * 1024, "{run}");
        assert_eq!(run["layout"]["files"], 4);
        // Every file holds 4 MiB: extents x average extent = 4096 KiB.
        let kib = run["layout"]["extents_per_file"].as_f64().unwrap()
            * run["layout"]["avg_extent_kib"].as_f64().unwrap();
        assert!((kib - 4096.0).abs() < 1.0, "{run}");
        assert_eq!(run["free_space"]["free_blocks"], 16 * 1024 - 4 * 1024);
    }
}

#[test]
fn fallocate2_runs_outside_allocators() {
    let r = bench(
        "f2-outside",
        &[
            "fallocate2",
            "--threads",
            "1,2",
            "--policy",
            "tlsf,first-fit",
        ],
    );
    let names: Vec<_> = runs(&r).iter().map(|r| r["policy"].clone()).collect();
    assert_eq!(names, ["tlsf", "tlsf", "first-fit", "first-fit"]);
}

/// With and without size classes, at 1 and 2 threads, on a device with room for both.
const SIZE_CLASSES_AB: [&str; 6] = [
    "--device-size",
    "512MiB",
    "--threads",
    "1,2",
    "--policy",
    "extalloc,extalloc:size_classes=false",
];

#[test]
fn append_vs_fallocate_keeps_two_files_per_thread() {
    let r = bench(
        "avf",
        &[&["append-vs-fallocate"][..], &SIZE_CLASSES_AB].concat(),
    );
    for run in runs(&r) {
        let threads = run["threads"].as_u64().unwrap();
        assert_eq!(run["layout"]["files"], 2 * threads, "{run}");
        // A quarter of the device in 64 KiB appends, plus one fallocate per eight appends.
        let appends = 128 * 1024 / 4 / 16 / threads * threads;
        assert_eq!(run["ops"], appends + appends / 8, "{run}");
        assert!(run["free_space"]["frag_pct_mean"].is_number());
    }
}

#[test]
fn size_class_edge_runs_with_and_without_mix() {
    for mix in [false, true] {
        let mut args = [&["size-class-edge"][..], &SIZE_CLASSES_AB].concat();
        if mix {
            args.push("--mix");
        }
        let r = bench("edge", &args);
        assert_eq!(r["params"]["mix"], mix);
        for run in runs(&r) {
            assert!(run["layout"]["extents_per_file"].as_f64().unwrap() >= 1.0);
        }
    }
}

#[test]
fn bad_options_fail_clearly() {
    let err = refused(&[
        "fallocate2",
        "--policy",
        "extalloc:bogus=1",
        "--seconds",
        "0.01",
    ]);
    assert!(
        err.contains("unknown policy key 'bogus'") && err.contains("optimize_scan"),
        "{err}"
    );
    let err = refused(&["fallocate2", "--device-size", "12 parsecs"]);
    assert!(err.contains("unknown unit"), "{err}");
}

/// Runs `extalloc bench` with `args`, expects it to fail, and returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn workload_options_are_checked() {
    let err = refused(&["small-files", "--fill", "1.5"]);
    assert!(err.contains("--fill"), "{err}");
    let err = refused(&[
        "append-vs-fallocate",
        "--threads",
        "4",
        "--device-size",
        "256MiB",
    ]);
    assert!(err.contains("at least 1024 MiB"), "{err}");
    let err = refused(&["random-fill", "--seq-burst", "0"]);
    assert!(err.contains("--seq-burst"), "{err}");
    let err = refused(&["sparse-writes", "--policy", "extalloc,tlsf"]);
    assert!(err.contains("tlsf does not have"), "{err}");
    let err = refused(&["--suite", "quick", "frag"]);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = refused(&["frag", "--jobs", "16", "--device-size", "1GiB"]);
    assert!(err.contains("do not fit"), "{err}");
    let err = refused(&["writeback", "--files", "12", "--device-size", "1GiB"]);
    assert!(err.contains("do not fit"), "{err}");
    let err = refused(&["writeback", "--pattern", "zigzag"]);
    assert!(err.contains("random or seq"), "{err}");
    let err = refused(&["writeback", "--wb-affinity", "group,diagonal"]);
    assert!(err.contains("one of group, file, none"), "{err}");
    let err = refused(&["writeback", "--files", "0"]);
    assert!(err.contains("--files"), "{err}");
    let err = refused(&["frag", "--file-size", "0"]);
    assert!(
        err.contains("--file-size must be at least one block"),
        "{err}"
    );
    // Output paths are checked before the run, not after it: the run would take 5 s.
    let started = std::time::Instant::now();
    let err = refused(&[
        "fallocate2",
        "--seconds",
        "5",
        "--json",
        "/nonexistent-extalloc-dir/r.json",
    ]);
    assert!(
        err.contains("the directory /nonexistent-extalloc-dir does not exist"),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "refused only after running"
    );
    let err = refused(&["fallocate2", "--json", "/"]);
    assert!(err.contains("is a directory"), "{err}");
}

/// Runs `extalloc compare` with `args` and a JSON path; returns the report, or `None`
/// (saying why) when this machine cannot run the kernel side: compare must then name the
/// reason (root, a tool, loop devices), never fail silently.
fn compare(name: &str, args: &[&str]) -> Option<Value> {
    let dir = std::env::temp_dir().join(format!("extalloc-cmp-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("c.json");
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .arg("compare")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        assert!(
            err.contains("needs root") || err.contains("not installed") || err.contains("losetup"),
            "{err}"
        );
        eprintln!("skipped the kernel run: {}", err.trim());
        return None;
    }
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    Some(report)
}

#[test]
fn compare_runs_on_kernel_ext4() {
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(["compare", "sparse-writes", "--fs", "ext4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bench workload only"), "{err}");

    let Some(report) = compare(
        "frag",
        &[
            "frag",
            "--fs",
            "ext4",
            "--jobs",
            "2",
            "--file-size",
            "4MiB",
            "--device-size",
            "256MiB",
            "--policy",
            "extalloc",
        ],
    ) else {
        return;
    };
    let kernel = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == "kernel-ext4")
        .expect("a kernel-ext4 run");
    assert_eq!(kernel["ops"], 2 * 1024);
    assert_eq!(kernel["layout"]["files"], 2);
    let kib = kernel["layout"]["extents_per_file"].as_f64().unwrap()
        * kernel["layout"]["avg_extent_kib"].as_f64().unwrap();
    assert!(
        (kib - 4096.0).abs() < 1.0,
        "FIEMAP sees each 4 MiB file: {kernel}"
    );
    assert!(kernel["free_space"]["free_extents"].as_u64().unwrap() >= 1);
    assert!(kernel["free_space"]["fragmented_groups"].is_u64());
}

/// The writeback job on kernel ext4 through fio beside extalloc's buffered volume: each
/// file's data seen by FIEMAP, fio's latency read, no cache counters for the kernel.
#[test]
fn compare_writeback_runs_fio_on_kernel_ext4() {
    let Some(report) = compare(
        "writeback",
        &[
            "writeback",
            "--fs",
            "ext4",
            "--files",
            "2",
            "--file-size",
            "4MiB",
            "--device-size",
            "256MiB",
            "--wb-contexts",
            "2",
            "--wb-affinity",
            "group",
        ],
    ) else {
        return;
    };
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{report}");
    let kernel = runs.iter().find(|r| r["policy"] == "kernel-ext4").unwrap();
    assert_eq!(kernel["wb_affinity"], "kernel");
    assert!(kernel["mib_per_sec"].as_f64().unwrap() > 0.0);
    assert!(
        kernel["latency_ns"]["p50"].as_u64().unwrap() > 0,
        "{kernel}"
    );
    assert!(kernel.get("dirty_limit_bytes").is_none(), "{kernel}");
    let kib = kernel["layout"]["extents_per_file"].as_f64().unwrap()
        * kernel["layout"]["avg_extent_kib"].as_f64().unwrap();
    assert!(
        (kib - 4096.0).abs() < 1.0,
        "FIEMAP sees each 4 MiB file: {kernel}"
    );
    let ours = runs.iter().find(|r| r["policy"] == "extalloc").unwrap();
    assert_eq!(ours["wb_contexts"], 2);
    assert!(ours["dirty_limit_bytes"].is_u64());
}

/// fallocate3 on a journaled file device after a half fill: every run allocates, the timed
/// phase loads bitmaps it starts without, and the run's invariant check passes (the bench
/// fails otherwise). The memory device runs it too.
#[test]
fn fallocate3_runs_on_a_file_device() {
    let device = std::env::temp_dir().join(format!("extalloc-f3-{}.img", std::process::id()));
    let d = device.to_str().unwrap();
    let r = bench(
        "f3-device",
        &[
            "fallocate3",
            "--device-size",
            "1GiB",
            "--fill",
            "0.5",
            "--device",
            d,
            "--threads",
            "1,2",
            "--policy",
            "extalloc,extalloc:optimize_scan=false:prefetch_groups=0",
        ],
    );
    for run in runs(&r) {
        let c = &run["counters"];
        assert!(run["ops"].as_u64().unwrap() > 0, "{run}");
        assert!(c["allocs"].as_u64().unwrap() > 0, "{run}");
        assert!(c["bitmaps_loaded"].as_u64().unwrap() > 0, "{run}");
        assert!(c["groups_considered"].as_u64().unwrap() > 0, "{run}");
    }
    let _ = std::fs::remove_file(&device);
    let r = bench(
        "f3-memory",
        &["fallocate3", "--device-size", "512MiB", "--threads", "1"],
    );
    assert!(runs(&r)[0]["ops"].as_u64().unwrap() > 0);
}

#[test]
fn device_and_fill_options_are_checked() {
    let text = refused(&["fallocate3", "--fill", "1"]);
    assert!(text.contains("fallocate3 --fill"), "{text}");
    let text = refused(&["replay", "--device", "/tmp/x.img"]);
    assert!(
        text.contains("--device runs fallocate2 and fallocate3 on a journaled store"),
        "{text}"
    );
    let text = refused(&[
        "sparse-writes",
        "--device",
        "/tmp/x.img",
        "--policy",
        "tlsf",
    ]);
    assert!(text.contains("extalloc policies only"), "{text}");
    let text = refused(&["fallocate2", "--device", "/tmp/x.img", "--policy", "tlsf"]);
    assert!(text.contains("extalloc policies only"), "{text}");
}

/// The quick suite piped to a file, as `... | tee out.md` would: every workload's table,
/// verdict and spreads and the summary reach stdout (a hidden progress bar must not swallow
/// them), nothing is skipped (the replay's trace is in the repository), and progress stays
/// off stdout, as a plain line per run on stderr (not a terminal here).
#[test]
fn the_quick_suite_prints_every_table_through_a_pipe() {
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        // Tenth-of-a-second runs, as `bench` above: what is checked is what is printed,
        // not the figures (30 runs of 3 repetitions: half-second runs took 45 s).
        .args(["bench", "--suite", "quick", "--seconds", "0.1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps = extalloc_lab::suite::quick();
    assert!(steps.len() >= 8, "the suite has its workloads");
    for workload in steps.iter().map(|s| s.workload).chain(["Summary"]) {
        assert!(
            stdout.contains(&format!("## {workload}\n")),
            "no {workload} table in:\n{stdout}"
        );
    }
    assert!(!stdout.contains("skipped"), "{stdout}");
    assert!(
        stdout.contains("| replay | extalloc |"),
        "the replay runs: {stdout}"
    );
    // Three repetitions by default: a verdict per workload, in its section and in the
    // summary, and every ratio against the same reference policy.
    assert_eq!(
        stdout.matches("**Verdict**: ").count(),
        steps.len(),
        "{stdout}"
    );
    let summary = &stdout[stdout.find("## Summary\n").unwrap()..];
    for s in &steps {
        let line = format!("- **{}**: ", s.workload);
        assert!(
            summary.contains(&line),
            "no verdict for {}: {summary}",
            s.workload
        );
    }
    assert!(summary.contains("median of 3"), "{summary}");
    assert_eq!(
        stdout.matches("vs extalloc (reference)").count(),
        steps.len(),
        "each throughput table (writeback has none) and the summary: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let progress = stderr
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" (repeat ") && l.contains(" ops/s"))
        .count();
    assert!(
        progress >= 3 * steps.len(),
        "progress lines on stderr: {stderr}"
    );
    assert!(
        stderr.contains("[1/30] fallocate2 ext4-base x1 (repeat 1/3) ... "),
        "{stderr}"
    );
}

/// A synthetic device 70 % full: fallocate3 runs on it through the store, finds room in
/// its small holes without searching every group, and the device's fill shows in the free
/// space; a workload it does not run, and a fill out of range, are refused.
#[test]
fn synthetic_devices_run_fallocate3_and_refuse_misuse() {
    let r = bench(
        "synthetic",
        &[
            "fallocate3",
            "--synthetic",
            "--device-size",
            "1GiB",
            "--fill",
            "0.7",
            "--threads",
            "1",
            "--policy",
            "extalloc",
        ],
    );
    let run = &r["runs"][0];
    assert!(run["ops"].as_u64().unwrap() > 0, "{run}");
    let c = &run["counters"];
    let scanned = c["groups_scanned"].as_f64().unwrap() / c["allocs"].as_f64().unwrap();
    assert!(scanned < 4.0, "groups searched per allocation: {scanned}");
    let free = run["free_space"]["free_blocks"].as_f64().unwrap();
    assert!(
        free < 0.4 * 262144.0,
        "the device was 70 % full: {free} blocks free"
    );
    for bad in [
        &["small-files", "--synthetic"][..],
        &["fallocate2", "--synthetic", "--fill", "0.99"][..],
        &["fallocate2", "--synthetic", "--free-extent-kib", "8-4"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
            .arg("bench")
            .args(bad)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--synthetic") || err.contains("--free-extent-kib"),
            "{err}"
        );
    }
}
