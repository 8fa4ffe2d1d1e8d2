//! `extalloc mkfs` and `extalloc info` on a file: the layout is reported, a damaged primary
//! superblock falls back to the backup, and what is not an extalloc device is refused.

use std::process::Command;

fn extalloc(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A device that is not there: one line naming the file, the operation and the operating
/// system's reason, the reason once (the library's message quotes its source).
#[test]
fn a_missing_device_is_named_with_its_reason_once() {
    let (ok, text) = extalloc(&["info", "/nonexistent-extalloc-dir/dev.img"]);
    assert!(!ok, "{text}");
    assert!(text.contains("/nonexistent-extalloc-dir/dev.img"), "{text}");
    assert!(text.contains("open"), "{text}");
    assert_eq!(
        text.matches("No such file or directory").count(),
        1,
        "{text}"
    );
}

/// A block size that is not one (0, 3000, 128 KiB) is refused with a message naming the
/// option, before the file is made (0 used to panic dividing by it).
#[test]
fn a_bad_block_size_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("extalloc-bs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("d.img");
    for bs in ["0", "3000", "131072"] {
        let p = img.to_str().unwrap();
        let (ok, text) = extalloc(&["mkfs", p, "--size", "64MiB", "--block-size", bs]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("--block-size") && !text.contains("panicked"),
            "{text}"
        );
        assert!(!img.exists(), "nothing made");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mkfs_then_info() {
    let path = std::env::temp_dir().join(format!("extalloc-mkfs-{}.img", std::process::id()));
    let p = path.to_str().unwrap();
    let (ok, text) = extalloc(&[
        "mkfs",
        p,
        "--size",
        "256MiB",
        "--group-blocks",
        "8192",
        "--journal-size",
        "4MiB",
    ]);
    assert!(ok, "{text}");
    assert!(
        text.contains("65536 blocks of 4096 bytes, 8 groups"),
        "{text}"
    );
    let (ok, text) = extalloc(&["fsck", p]);
    assert!(ok && text.contains("0 records to replay"), "{text}");
    let (ok, text) = extalloc(&["info", p]);
    assert!(ok, "{text}");
    // 1 superblock + 1024 journal + 1 descriptor + 8 bitmap blocks, the backup, and the
    // volume's file tree (one empty leaf; mkfs's close changes nothing, so it writes no
    // node): the summary from the descriptors, and with --groups from every checked group.
    assert!(
        text.contains("8 groups, 64500 free blocks (7 groups never written), 0 corrupt"),
        "{text}"
    );
    let (ok, text) = extalloc(&["info", p, "--groups"]);
    assert!(
        ok && text.contains("8 groups, 64500 free blocks, 0 corrupt groups"),
        "{text}"
    );
    assert!(text.contains("group 7: "), "{text}");
    // Damage the primary superblock: the backup is read.
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"scribble", 30).unwrap();
    let (ok, text) = extalloc(&["info", p]);
    assert!(ok && text.contains("64500 free blocks"), "{text}");
    // Damage a descriptor (mkfs writes no bitmap: its groups start uninitialised): that
    // group alone is reported corrupt.
    f.write_all_at(&[0xff; 4], (1 + 1024) * 4096 + 3 * 32 + 1)
        .unwrap();
    let (ok, text) = extalloc(&["info", p]);
    assert!(ok && text.contains("1 corrupt descriptor "), "{text}");
    let (ok, text) = extalloc(&["info", p, "--groups"]);
    assert!(
        ok && text.contains("group 3: corrupt descriptor of group 3"),
        "{text}"
    );
    assert!(text.contains("1 corrupt group\n"), "{text}");
    std::fs::remove_file(&path).unwrap();

    let junk = std::env::temp_dir().join(format!("extalloc-junk-{}.img", std::process::id()));
    std::fs::write(&junk, vec![7u8; 1 << 16]).unwrap();
    let (ok, text) = extalloc(&["info", junk.to_str().unwrap()]);
    assert!(!ok && text.contains("not an extalloc device"), "{text}");
    std::fs::remove_file(&junk).unwrap();
}

#[test]
#[cfg(feature = "lab")] // the lab's commands
fn commit_bench_reports_each_thread_count() {
    let path = std::env::temp_dir().join(format!("extalloc-commit-{}.img", std::process::id()));
    let (ok, text) = extalloc(&[
        "commit-bench",
        path.to_str().unwrap(),
        "--threads",
        "1,2",
        "--seconds",
        "0.2",
    ]);
    assert!(ok, "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("| 1 |") || l.starts_with("| 2 |"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(!path.exists(), "the file is removed afterwards");
}

/// Handles committing only their payload run and report; `--payload-only` without a store
/// mode, and both store modes at once, are refused naming the flags, creating nothing.
#[test]
#[cfg(feature = "lab")] // the lab's commands
fn commit_bench_payload_only_needs_a_store_mode() {
    let path = std::env::temp_dir().join(format!("extalloc-po-{}.img", std::process::id()));
    let p = path.to_str().unwrap();
    let common = ["commit-bench", p, "--threads", "1", "--seconds", "0.2"];
    let (ok, text) = extalloc(&[&common[..], &["--handles", "--payload-only"]].concat());
    assert!(ok, "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("| 1 |")).count(),
        1,
        "{text}"
    );
    let (ok, text) = extalloc(&[&common[..], &["--payload-only"]].concat());
    assert!(!ok && text.contains("--handles|--shared"), "{text}");
    let (ok, text) = extalloc(&[&common[..], &["--handles", "--shared"]].concat());
    assert!(!ok && text.contains("cannot be used with"), "{text}");
    assert!(!path.exists(), "nothing is left behind");
}

/// Runs `extalloc torture ARGS --json` (which must succeed) and returns its report.
fn torture_json(name: &str, args: &[&str]) -> serde_json::Value {
    let json = std::env::temp_dir().join(format!(
        "extalloc-torture-{}-{name}.json",
        std::process::id()
    ));
    let mut all = vec!["torture"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let (ok, text) = extalloc(&all);
    assert!(ok, "torture {args:?}: {text}");
    let out = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    out
}

/// Seed 3 checkpoints often; seed 2 (even) ten times less, so full journals checkpoint
/// inside commits and reopens replay what follows.
#[test]
fn torture_survives_hundreds_of_crashes() {
    for seed in ["2", "3"] {
        let out = torture_json(
            &format!("crashes-{seed}"),
            &["--crashes", "200", "--seed", seed, "--threads", "2"],
        );
        assert_eq!(out["crashes"], 200);
        assert_eq!(out["recovered"], 200);
        for key in ["lost", "leaked", "double_allocated"] {
            assert_eq!(out[key], 0, "seed {seed}: {key}: {out}");
        }
        assert!(out["commits"].as_u64().unwrap() > 200);
        // Seeds 2 and 3 run with discard notices.
        assert!(
            out["discards_acknowledged"].as_u64().unwrap() > 100,
            "{out}"
        );
    }
}

/// The volume torture, a few hundred crashes at 1 and 2 threads (the lab runs 10,000),
/// written directly (seed 2) and through the buffered cache (seed 1, odd): nothing lost,
/// leaked, doubly allocated, no stale byte read, no file with wrong data; flushes that
/// fail as Linux's and reads that fail were met, and no failed flush was believed.
#[test]
fn volume_torture_survives_hundreds_of_crashes() {
    for (seed, threads) in [("1", "2"), ("2", "1")] {
        let out = torture_json(
            &format!("volume-{seed}"),
            &[
                "--volume",
                "--crashes",
                "150",
                "--seed",
                seed,
                "--threads",
                threads,
            ],
        );
        assert_eq!(out["recovered"], 150, "{out}");
        assert_eq!(out["buffered"], seed == "1", "{out}");
        for key in [
            "lost",
            "leaked",
            "double_allocated",
            "stale_reads",
            "data_mismatches",
            "swallowed_flush_errors",
            "believed_retries",
        ] {
            assert_eq!(out[key], 0, "seed {seed}: {key}: {out}");
        }
        assert!(out["files_checked"].as_u64().unwrap() > 500, "{out}");
        assert!(out["failed_flushes"].as_u64().unwrap() > 5, "{out}");
        assert!(out["read_faults"].as_u64().unwrap() > 20, "{out}");
    }
}

/// The corruption campaign, a few hundred damages (the lab runs thousands: README): every
/// counter but the damages is zero, and each kind of region was hit.
#[test]
fn corruption_campaign_finds_no_miss() {
    let out = torture_json("corrupt", &["--corrupt", "300", "--seed", "11"]);
    assert_eq!(out["damages"], 300);
    for key in ["panics", "hangs", "fsck_missed", "handed_in_use"] {
        assert_eq!(out[key], 0, "{key}: {out}");
    }
    for region in [
        "superblock",
        "backup",
        "journal",
        "descriptors",
        "bitmaps",
        "truncate",
    ] {
        assert!(
            out["damages_by_region"][region].as_u64().unwrap() > 0,
            "{region} never hit: {out}"
        );
    }
    assert!(out["images_mid_checkpoint"].as_u64().unwrap() > 0);
}

/// The file-system damage campaign, 120 damages (the lab runs thousands: docs/results.md):
/// every damage counted, nothing that must be zero is not (after the mount, and after the
/// repair and the mount), every metadata kind damaged (directory runs among them, one
/// damaged block of a run costing at most a chunk's names), files found again in
/// /lost+found, and the images of every sort built. (The campaign refusing to run, or an
/// image not holding its ground truth, fails `torture_json`.)
#[test]
fn fs_damage_campaign_loses_no_file_it_did_not_hit() {
    let out = torture_json("fs-damage", &["--fs-damage", "120", "--seed", "7"]);
    assert_eq!(out["damages"], 120, "{out}");
    assert_eq!(out["total"]["damages"], 120, "{out}");
    for key in ["panics", "hangs"] {
        assert_eq!(out[key], 0, "{key}: {out}");
    }
    for key in [
        "mount_lost",
        "mount_handed_twice",
        "intact_lost",
        "fsck_dirty_after_repair",
        "handed_twice",
    ] {
        assert_eq!(out["total"][key], 0, "{key}: {out}");
    }
    for kind in [
        "primary_superblock",
        "backup_superblock",
        "descriptors",
        "bitmaps",
        "file_table",
        "map_segments",
        "journal_records",
        "dir_logs",
        "dir_runs",
        "symlink_targets",
    ] {
        let n = out["kinds"][kind]["damages"].as_u64();
        assert!(n.is_some_and(|n| n > 0), "{kind} never damaged: {out}");
    }
    // One damaged block of a run costs at most one entry chunk's names (214 of one byte;
    // a header, index or filter chunk costs none).
    let most = out["kinds"]["dir_runs"]["most_lost_found"]
        .as_u64()
        .unwrap();
    assert!(
        most <= 214,
        "{most} names lost to one block of a run: {out}"
    );
    assert!(out["total"]["detected"].as_u64().unwrap() > 0, "{out}");
    assert!(
        out["total"]["mount_lost_found"].as_u64().unwrap() > 0,
        "{out}"
    );
    for key in ["images_mid_checkpoint", "images_journal_tail", "long_maps"] {
        assert!(out[key].as_u64().unwrap() > 0, "{key}: {out}");
    }
}

/// mkfs checks everything before it touches the target: bad sizes and journal sizes are
/// refused and leave no file; a file with data and an extalloc device are kept unless
/// --force; fsck and info work on a read-only image (that they never write is tested on
/// `FileDevice::open_read_only` in the library: as root a mode bit stops no write).
#[test]
fn mkfs_touches_nothing_on_bad_input_and_asks_before_overwriting() {
    let dir = std::env::temp_dir().join(format!("extalloc-mkfs-safe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fresh = dir.join("fresh.img");
    let f = fresh.to_str().unwrap();
    for (args, says) in [
        (
            &["--size", "1KiB"][..],
            "needs --size 640K at least: 1024 bytes",
        ),
        (&["--size", "0"][..], "needs --size 640K at least: 0 bytes"),
        (
            &["--size", "8K"][..],
            "needs --size 640K at least: 8192 bytes",
        ),
        (
            &["--size", "64MiB", "--journal-size", "0"][..],
            "at least 2 blocks",
        ),
        (
            &["--size", "64MiB", "--journal-size", "1KiB"][..],
            "at least 2 blocks",
        ),
        (
            &["--size", "64MiB", "--journal-size", "64MiB"][..],
            "cannot hold",
        ),
    ] {
        let (ok, text) = extalloc(&[&["mkfs", f][..], args].concat());
        assert!(!ok, "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(!fresh.exists(), "{args:?} left a file behind");
    }
    // A device too small for a volume's journal names the least --size that works, and
    // that size does (the next block down does not).
    let (ok, text) = extalloc(&["mkfs", f, "--size", "100K"]);
    assert!(!ok, "{text}");
    let least = text
        .split("needs --size ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap_or_else(|| panic!("no least size in: {text}"));
    assert!(!fresh.exists(), "100K left a file behind");
    let (ok, text) = extalloc(&["mkfs", f, "--size", least]);
    assert!(ok, "--size {least}: {text}");
    assert!(text.contains(", 1 group, "), "one group, said so: {text}");
    std::fs::remove_file(&fresh).unwrap();
    let kib: u64 = least.trim_end_matches('K').parse().expect("a size in KiB");
    let (ok, text) = extalloc(&["mkfs", f, "--size", &format!("{}K", kib - 4)]);
    assert!(
        !ok && text.contains(&format!("needs --size {least} ")),
        "{text}"
    );
    assert!(!fresh.exists());
    // A file of holes only (`truncate -s`): nothing to lose, made at its own size.
    let sparse = dir.join("sparse.img");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let (ok, text) = extalloc(&["mkfs", sparse.to_str().unwrap()]);
    assert!(ok, "{text}");
    // A file with data: refused and intact, then overwritten with --force.
    let data = dir.join("data.txt");
    let d = data.to_str().unwrap();
    std::fs::write(&data, b"precious bytes").unwrap();
    let make = ["--size", "64MiB", "--journal-size", "1MiB"];
    let (ok, text) = extalloc(&[&["mkfs", d][..], &make].concat());
    assert!(!ok && text.contains("holds data (14 bytes)"), "{text}");
    assert_eq!(std::fs::read(&data).unwrap(), b"precious bytes");
    let (ok, text) = extalloc(&[&["mkfs", d, "--force"][..], &make].concat());
    assert!(ok, "{text}");
    // An extalloc device: refused, then remade with --force.
    let (ok, text) = extalloc(&[&["mkfs", d][..], &make].concat());
    assert!(!ok && text.contains("already an extalloc device"), "{text}");
    // A read-only image: fsck and info still work.
    let mut perms = std::fs::metadata(&data).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&data, perms).unwrap();
    let (ok, text) = extalloc(&["fsck", d]);
    assert!(ok && text.contains("0 records to replay"), "{text}");
    let (ok, text) = extalloc(&["info", d]);
    assert!(ok, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A volume through the command line: files put in come out byte for byte, `ls` and
/// `info --files` list them, `fsck --json` counts them with nothing leaked, and bad ids or
/// host files are refused by name.
#[test]
fn put_get_ls_and_fsck_a_volume() {
    let dir = std::env::temp_dir().join(format!("extalloc-vol-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("vol.img");
    let d = img.to_str().unwrap();
    let (ok, text) = extalloc(&["mkfs", d, "--size", "128MiB", "--journal-size", "2MiB"]);
    assert!(ok, "{text}");
    let big: Vec<u8> = (0..2_500_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let host = [("big.bin", big), ("small.txt", b"hello, volume\n".to_vec())];
    let mut ids = Vec::new();
    for (name, bytes) in &host {
        let h = dir.join(name);
        std::fs::write(&h, bytes).unwrap();
        let (ok, text) = extalloc(&["put", d, h.to_str().unwrap()]);
        assert!(ok, "{text}");
        ids.push(text.trim().to_string());
    }
    assert_eq!(ids, ["1", "2"]);
    for ((_, bytes), id) in host.iter().zip(&ids) {
        let out = dir.join(format!("out-{id}"));
        let (ok, text) = extalloc(&["get", d, id, out.to_str().unwrap()]);
        assert!(ok, "{text}");
        assert!(std::fs::read(&out).unwrap() == *bytes, "file {id} differs");
    }
    let (ok, text) = extalloc(&["ls", d, "--json"]);
    assert!(ok, "{text}");
    let listed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(listed[0]["size"], 2_500_000);
    assert_eq!(listed[0]["extents"], 1, "{listed}");
    assert_eq!(listed[1]["name"], "small.txt");
    let (ok, text) = extalloc(&["info", d, "--files"]);
    assert!(ok && text.contains("files: 2, 2500014 bytes"), "{text}");
    let (ok, text) = extalloc(&["fsck", d, "--json"]);
    assert!(ok, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["files"]["files"], 2);
    for key in ["mapped_free", "mapped_twice", "leaked"] {
        assert_eq!(report["files"][key], 0, "{key}: {report}");
    }
    let (ok, text) = extalloc(&["get", d, "7", dir.join("x").to_str().unwrap()]);
    assert!(!ok && text.contains("no file 7"), "{text}");
    assert!(!dir.join("x").exists(), "nothing made for a missing file");
    let (ok, text) = extalloc(&["put", d, dir.join("missing").to_str().unwrap()]);
    assert!(!ok && text.contains("missing"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `extalloc bench WORKLOAD --device IMG ARGS` (extalloc's policy): the result row of
/// `threads` threads, split into cells; the device file must be gone afterwards.
#[cfg(feature = "lab")] // the lab's commands
fn volume_row(workload: &str, img: &std::path::Path, threads: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec![
        "bench",
        workload,
        "--device",
        img.to_str().unwrap(),
        "--policy",
        "extalloc",
        "--threads",
        threads,
    ];
    all.extend_from_slice(args);
    let (ok, text) = extalloc(&all);
    assert!(ok, "{workload}: {text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("| extalloc | {threads} |")))
        .unwrap_or_else(|| panic!("{workload}: no result row: {text}"));
    assert!(!img.exists(), "the device file is removed afterwards");
    row.split('|').map(|c| c.trim().to_string()).collect()
}

/// `bench append-vs-fallocate --device`, `size-class-edge --device` and `frag --device`
/// run on a volume: every table row has both sides, the files left are the long-lived ones
/// (in a handful of extents each), and the device file goes afterwards.
#[test]
#[cfg(feature = "lab")] // the lab's commands
fn append_vs_fallocate_size_class_edge_and_frag_run_on_a_volume() {
    let img = std::env::temp_dir().join(format!("extalloc-avf-{}.img", std::process::id()));
    for workload in ["append-vs-fallocate", "size-class-edge", "frag"] {
        let cells = volume_row(workload, &img, "1", &["--device-size", "1GiB"]);
        let volume_ops: f64 = cells[4].parse().unwrap();
        let extents: f64 = cells[7].parse().unwrap();
        assert!(volume_ops > 0.0, "{workload}: {cells:?}");
        assert!((1.0..=32.0).contains(&extents), "{workload}: {cells:?}");
    }
}

/// `bench small-files --device` runs on a volume: every file one extent, as in memory.
#[test]
#[cfg(feature = "lab")] // the lab's commands
fn small_files_run_on_a_volume() {
    let img = std::env::temp_dir().join(format!("extalloc-sf-{}.img", std::process::id()));
    let args = ["--device-size", "256MiB", "--fill", "0.05"];
    let cells = volume_row("small-files", &img, "1", &args);
    assert_eq!(
        (cells[6].as_str(), cells[7].as_str()),
        ("1.00", "1.00"),
        "{cells:?}"
    );
    // sparse-writes: the same writes make the same extents as in memory.
    let args = [
        "--device-size",
        "512MiB",
        "--file-size",
        "64MiB",
        "--writes",
        "5000",
    ];
    let cells = volume_row("sparse-writes", &img, "1", &args);
    assert_eq!(
        cells[6], cells[7],
        "extents per file, memory and volume: {cells:?}"
    );
    // At 2 threads the two files' windows race for neighbouring blocks, on the volume in
    // another order than in memory from run to run (about one run in three leaves one file
    // one extent more: 2,002.50 against 2,003.00 per file). Within one extent per file.
    let cells = volume_row("sparse-writes", &img, "2", &args);
    let (memory, volume): (f64, f64) = (cells[6].parse().unwrap(), cells[7].parse().unwrap());
    assert!(
        memory > 1000.0 && (volume - memory).abs() <= 1.0,
        "extents per file, memory and volume: {cells:?}"
    );
}

/// The namespace torture, a few hundred crashes at 2 and 3 threads (the lab runs 10,000):
/// every tree read back is one its thread may be in, no link count wrong, no named inode
/// reaped, synced data intact, the namespace check clean; and the operations really ran
/// into failing writes and orphans (the crashes fell inside changes).
#[test]
fn namespace_torture_survives_hundreds_of_crashes() {
    for (seed, threads) in [("1", "2"), ("2", "3")] {
        let out = torture_json(
            &format!("fs-{seed}"),
            &[
                "--fs",
                "--crashes",
                "150",
                "--seed",
                seed,
                "--threads",
                threads,
            ],
        );
        assert_eq!(out["crashes"], 150, "{out}");
        assert_eq!(
            out["trees_checked"],
            150 * threads.parse::<u64>().unwrap(),
            "{out}"
        );
        for key in [
            "names_lost",
            "wrong_link_counts",
            "unnamed",
            "bad_entries",
            "data_mismatches",
            "fsck_dirty",
            "unexpected_errors",
        ] {
            assert_eq!(out[key], 0, "seed {seed}: {key}: {out}");
        }
        assert!(out["operations"].as_u64().unwrap() > 150 * 10, "{out}");
        assert!(out["files_checked"].as_u64().unwrap() > 1000, "{out}");
        assert!(out["failed_flushes"].as_u64().unwrap() > 5, "{out}");
    }
}

/// Without --journal-size the journal is scaled to the device (ext4's steps, at most an
/// eighth of it), so a small device can be made at all: 16 MiB used to be refused with the
/// 64 MiB default.
#[test]
fn mkfs_scales_the_journal_to_the_device() {
    let dir = std::env::temp_dir().join(format!("extalloc-mkfs-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (size, journal) in [
        ("16MiB", "journal 512 blocks"),
        ("128MiB", "journal 1024 blocks"),
        ("1GiB", "journal 4096 blocks"),
        ("2GiB", "journal 8192 blocks"),
        ("4GiB", "journal 16384 blocks"),
    ] {
        let img = dir.join(format!("{size}.img"));
        let (ok, text) = extalloc(&["mkfs", img.to_str().unwrap(), "--size", size]);
        assert!(ok && text.contains(journal), "{size}: {text}");
        let (ok, text) = extalloc(&["fsck", img.to_str().unwrap()]);
        assert!(ok, "{size}: fsck: {text}");
        std::fs::remove_file(&img).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
