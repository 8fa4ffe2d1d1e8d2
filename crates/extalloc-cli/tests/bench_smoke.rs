//! The lab at a tiny size, so it never rots: `extalloc bench fallocate2` runs every preset,
//! prints its table and writes a JSON report with every field of the schema.

use std::process::Command;

#[test]
fn fallocate2_runs_and_reports() {
    let dir = std::env::temp_dir().join(format!("extalloc-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("f2.json");
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args([
            "bench",
            "fallocate2",
            "--threads",
            "1,2",
            "--seconds",
            "0.1",
            "--device-size",
            "256MiB",
        ])
        .args(["--group-blocks", "4096", "--commit-ms", "10", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| ext")).count(),
        6,
        "{table}"
    );
    assert!(table.contains("| ext4-base | 2 |"));

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["schema"], "extalloc-bench/1");
    assert_eq!(report["workload"], "fallocate2");
    assert_eq!(report["device"]["groups"], 16);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    for run in runs {
        assert!(run["ops"].as_u64().unwrap() > 0, "{run}");
        assert!(run["ops_per_sec"].as_f64().unwrap() > 0.0);
        for key in ["p50", "p95", "p99", "max"] {
            assert!(
                run["latency_ns"][key].as_u64().unwrap() > 0,
                "latency {key}"
            );
        }
        for key in [
            "files",
            "extents_per_file",
            "avg_extent_kib",
            "layout_score",
        ] {
            assert!(run["layout"][key].is_number(), "layout {key}");
        }
        for key in [
            "free_blocks",
            "free_extents",
            "avg_free_extent_kib",
            "largest_free_extent_kib",
            "fragmented_groups",
            "frag_pct_mean",
        ] {
            assert!(run["free_space"][key].is_number(), "free_space {key}");
        }
        assert!(!run["free_space"]["histogram"]
            .as_array()
            .unwrap()
            .is_empty());
        for key in ["groups_scanned", "trylock_skips", "lock_waits"] {
            assert!(run["counters"][key].is_u64(), "counters {key}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_options_fail_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args([
            "bench",
            "fallocate2",
            "--policy",
            "extalloc:bogus=1",
            "--seconds",
            "0.01",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown policy key 'bogus'") && err.contains("optimize_scan"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(["bench", "fallocate2", "--device-size", "12 parsecs"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
}
