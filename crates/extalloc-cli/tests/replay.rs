//! `extalloc replay` on cuts of the kernel traces (extalloc-lab's tests/fixtures/traces): every policy
//! replays them, `check()` holds (the command checks after each policy and fails otherwise),
//! and the report has a run per policy plus the kernel's.
#![cfg(feature = "lab")] // the lab's commands: the binary's default feature

use serde_json::Value;
use std::process::Command;

fn replay(trace: &str, extra: &[&str]) -> (Value, String) {
    let path = format!(
        "{}/../extalloc-lab/tests/fixtures/traces/{trace}",
        env!("CARGO_MANIFEST_DIR")
    );
    // Tests run at once and may replay the same trace: a file of its own per call.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = std::env::temp_dir().join(format!(
        "extalloc-replay-{}-{call}-{trace}.json",
        std::process::id()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args([
            "replay",
            &path,
            "--blocks",
            "1048576",
            "--group-blocks",
            "32768",
            "--json",
        ])
        .arg(&json)
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{trace}: {err}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    (report, err)
}

#[test]
fn every_trace_replays_through_every_preset() {
    for (trace, requests) in [
        ("ext4_fio_randwrite_4x256M.trace.txt.gz", 150),
        ("ext4_fio_falloc_8x64M.head10k.trace.txt.gz", 3330),
        (
            "ext4_fio_randwrite_fsync256_4x256M.head10k.trace.txt.gz",
            3288,
        ),
    ] {
        let (r, _) = replay(trace, &[]);
        let runs = r["runs"].as_array().unwrap();
        let names: Vec<&str> = runs.iter().map(|x| x["policy"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["ext4-base", "ext4-2025", "extalloc", "kernel"],
            "{trace}"
        );
        for run in runs {
            // Every ext4_allocate_blocks of the cut is one replayed request.
            assert_eq!(run["ops"], requests, "{trace}");
            assert!(run["layout"]["files"].as_u64().unwrap() >= 1, "{trace}");
        }
        // The same blocks end up allocated on both sides (nothing freed but metadata).
        let used = |i: usize| 1048576 - runs[i]["free_space"]["free_blocks"].as_u64().unwrap();
        assert_eq!(
            used(2),
            used(3),
            "{trace}: extalloc and the kernel hold as many blocks"
        );
    }
}

#[test]
fn the_whole_small_trace_matches_the_readme() {
    // Trace (c): the kernel left 4 files in 19 extents (4.75 per file).
    let (r, _) = replay(
        "ext4_fio_randwrite_4x256M.trace.txt.gz",
        &["--policy", "extalloc"],
    );
    let kernel = &r["runs"][1];
    assert_eq!(kernel["policy"], "kernel");
    assert_eq!(kernel["layout"]["files"], 4);
    assert_eq!(kernel["layout"]["extents_per_file"], 4.75);
}

/// A 16 MiB device of 4 MiB groups, replayed through extalloc only.
const SMALL_DEVICE: [&str; 6] = [
    "--blocks",
    "4096",
    "--group-blocks",
    "1024",
    "--policy",
    "extalloc",
];

#[test]
fn malformed_and_unknown_lines_are_counted() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("extalloc-bad-trace-{}.txt", std::process::id()));
    std::fs::write(
        &path,
        "# tracer: nop\n\
         fio-1 [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino 12 flags HINT_DATA len 1 lblk 0 goal 0 lleft 0 lright 0 pleft 0 pright 0\n\
         fio-1 [000] ..... 1.1: ext4_allocate_blocks: dev 7,1 ino 12 flags HINT_DATA len 1 block 500 lblk 0 goal 0 lleft 0 lright 0 pleft 0 pright 0\n\
         fio-1 [000] ..... 1.2: ext4_request_blocks: dev 7,1 ino zz\n\
         fio-1 [000] ..... 1.3: ext4_something_new: dev 7,1 whatever\n\
         kw-2 [001] ..... 1.4: ext4_free_blocks: dev 7,1 ino 12 mode 0100644 block 3000 count 3 flags METADATA\n\
         \u{fffd}\u{0} binary junk\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(["replay"])
        .arg(&path)
        .args(SMALL_DEVICE)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 malformed lines"), "{err}");
    assert!(err.contains("ino zz"), "the malformed line is shown: {err}");
    assert!(
        err.contains("1 frees of blocks the trace never allocated"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(["replay", "/nonexistent/trace.gz"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("opening /nonexistent/trace.gz"));
}

#[test]
fn data_frees_punch_the_same_logical_blocks() {
    let path =
        std::env::temp_dir().join(format!("extalloc-punch-trace-{}.txt", std::process::id()));
    std::fs::write(
        &path,
        "fio-1 [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino 12 flags HINT_DATA|HINT_NOPREALLOC len 8 lblk 0 goal 0 lleft 0 lright 0 pleft 0 pright 0\n\
         fio-1 [000] ..... 1.1: ext4_allocate_blocks: dev 7,1 ino 12 flags HINT_DATA|HINT_NOPREALLOC len 8 block 1000 lblk 0 goal 0 lleft 0 lright 0 pleft 0 pright 0\n\
         kw-2 [001] ..... 1.2: ext4_free_blocks: dev 7,1 ino 12 mode 0100644 block 1002 count 2 flags 1ST_CLUSTER\n",
    )
    .unwrap();
    let json = std::env::temp_dir().join(format!("extalloc-punch-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .arg("replay")
        .arg(&path)
        .args(SMALL_DEVICE)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("never allocated"), "{err}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    for run in r["runs"].as_array().unwrap() {
        // 8 blocks allocated, 2 freed in the middle: 6 held, in 2 extents.
        assert_eq!(run["free_space"]["free_blocks"], 4096 - 6, "{run}");
        assert_eq!(run["layout"]["extents_per_file"], 2.0, "{run}");
    }
}

/// A trace taken on a larger file system than its README describes is refused before
/// anything is replayed, with the geometry to pass; with it, the replay runs.
#[test]
fn a_trace_past_its_described_device_is_refused_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("extalloc-big-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("README.md"),
        "block size 4096 bytes, block count 4,096, 1,024 blocks per group\n",
    )
    .unwrap();
    let path = dir.join("big.trace.txt");
    std::fs::write(
        &path,
        "fio-1 [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino 12 flags HINT_DATA len 8 lblk 0 goal 0 lleft 0 lright 0 pleft 0 pright 0\n\
         fio-1 [000] ..... 1.1: ext4_allocate_blocks: dev 7,1 ino 12 flags HINT_DATA len 8 block 70000 lblk 0 goal 0 lleft 0 lright 0 pleft 0 pright 0\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_extalloc"))
            .arg("replay")
            .arg(&path)
            .args(["--policy", "extalloc"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("names block 70007"), "{err}");
    assert!(err.contains("--blocks 70656 --group-blocks 1024"), "{err}");
    let out = run(&["--blocks", "70656"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
