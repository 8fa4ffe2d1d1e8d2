//! The command line's contract with scripts: `fsck`'s exit codes (e2fsck's), a closed
//! stdout ending a command quietly, `put`/`get`/`rm` refusing a file system, `rm`, and
//! `fsck --repair`'s progress through a scan of the device.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("extalloc-clitest-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mkfs(img: &Path) {
    let out = run(&[
        "mkfs",
        img.to_str().unwrap(),
        "--size",
        "64MiB",
        "--journal-size",
        "1MiB",
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

/// 0 on a clean device, 4 when it finds damage, 8 when it cannot check: a missing file, a
/// device open for writing elsewhere, something that is not an extalloc device. Before,
/// all of them exited 1.
#[test]
fn fsck_exits_with_e2fscks_codes() {
    let dir = scratch("fsck");
    let img = dir.join("vol.img");
    let d = img.to_str().unwrap();
    mkfs(&img);
    let code = |args: &[&str]| {
        let out = run(args);
        (out.status.code(), text(&out))
    };
    assert_eq!(code(&["fsck", d]).0, Some(0), "clean");
    let (c, t) = code(&["fsck", dir.join("missing.img").to_str().unwrap()]);
    assert_eq!(c, Some(8), "a missing file: {t}");
    assert!(t.contains("missing.img"), "{t}");
    let writer = extalloc::disk::device::FileDevice::open(&img).unwrap();
    let (c, t) = code(&["fsck", d]);
    assert_eq!(c, Some(8), "a device open for writing: {t}");
    assert!(t.contains("in use"), "{t}");
    drop(writer);
    std::fs::write(dir.join("junk.img"), vec![7u8; 1 << 16]).unwrap();
    let (c, t) = code(&["fsck", dir.join("junk.img").to_str().unwrap()]);
    assert_eq!(c, Some(8), "not an extalloc device: {t}");
    // Damage group 0's descriptor (1 superblock + 256 journal blocks before the table).
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0xff; 4], (1 + 256) * 4096 + 1).unwrap();
    let (c, t) = code(&["fsck", d]);
    assert_eq!(c, Some(4), "damage found: {t}");
    assert!(t.contains("problem: "), "{t}");
    assert_eq!(
        code(&["fsck", d, "--json"]).0,
        Some(4),
        "the same with --json"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `extalloc ls IMG | head` and the like: a command whose stdout is a closed pipe ends at
/// its first write, quietly (no panic, no message), killed by SIGPIPE as `ls` would be.
/// Before, `println!` panicked with "failed printing to stdout: Broken pipe".
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let dir = scratch("pipe");
    let img = dir.join("vol.img");
    let d = img.to_str().unwrap();
    mkfs(&img);
    for args in [
        vec!["ls", d],
        vec!["fsck", d],
        vec!["info", d],
        vec!["policies"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_extalloc"))
            .args(&args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "{args:?} said: {stderr}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(13), "{args:?}: {:?}", out.status);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A volume made into a file system (as `extalloc mount` makes it, here without FUSE):
/// `put` and `rm` refuse it with a message saying to mount it, and change nothing (fsck
/// stays clean and the file system still mounts). Before, `put` was accepted and the file
/// system no longer mounted ("volume file 2 holds no inode"). `get` only reads: it copies a
/// regular file out by its path or by the inode number `ls` shows, and refuses a
/// directory or a name that is not there by name (it refused every file system before).
/// `ls` of the file system `put_and_rm_refuse_a_file_system_and_get_reads_it_by_path`
/// makes: it walks the tree a directory at a time, giving every path, its kind and the
/// file's size.
fn ls_walks_the_tree(d: &str) {
    let out = run(&["ls", d, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows: Vec<(String, String, u64)> = (listed.as_array().unwrap().iter())
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("name"), s("kind"), r["size"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str()), ("/", "dir"));
    assert_eq!((rows[1].0.as_str(), rows[1].1.as_str()), ("/sub", "dir"));
    assert_eq!(
        rows[2],
        ("/sub/hello.txt".to_string(), "file".to_string(), 300_000)
    );
}

#[test]
fn put_and_rm_refuse_a_file_system_and_get_reads_it_by_path() {
    use extalloc::disk::device::{Device, FileDevice};
    use extalloc_fuse::fs::{names::NewNode, Caller, ROOT};
    let dir = scratch("fs");
    let img = dir.join("fs.img");
    let d = img.to_str().unwrap();
    mkfs(&img);
    let mount = || {
        let dev: std::sync::Arc<dyn Device> = std::sync::Arc::new(FileDevice::open(&img).unwrap());
        let vol = extalloc::volume::Volume::open(dev, extalloc::Policy::default()).unwrap();
        extalloc_fuse::fs::Fs::mount(vol, Default::default())
    };
    let (fs, report) = mount().unwrap();
    assert!(report.created);
    let me = Caller { uid: 0, gid: 0 };
    let new_dir = NewNode {
        kind: extalloc_fuse::inode::Kind::Dir,
        ..NewNode::file(0o755, 0)
    };
    let sub = fs.make(ROOT, b"sub", new_dir, me).unwrap().ino;
    let (a, _) = fs
        .create(sub, b"hello.txt", 0o644, 0, libc::O_WRONLY, me)
        .unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    fs.write(a.ino, 0, &body, false).unwrap();
    fs.release(a.ino).unwrap();
    fs.unmount().unwrap();
    let host = dir.join("host.txt");
    std::fs::write(&host, b"not an inode").unwrap();
    for args in [vec!["put", d, host.to_str().unwrap()], vec!["rm", d, "1"]] {
        let out = run(&args);
        let t = text(&out);
        assert!(!out.status.success(), "{args:?} accepted: {t}");
        assert!(
            t.contains("holds a file system") && t.contains("extalloc mount"),
            "{t}"
        );
    }
    let ino = a.ino.to_string();
    for name in ["/sub/hello.txt", "sub/hello.txt", ino.as_str()] {
        let out_file = dir.join("out");
        let out = run(&["get", d, name, out_file.to_str().unwrap()]);
        assert!(out.status.success(), "get {name}: {}", text(&out));
        assert!(
            std::fs::read(&out_file).unwrap() == body,
            "get {name}: other bytes"
        );
        std::fs::remove_file(&out_file).unwrap();
    }
    let refused = dir.join("refused");
    for (name, says) in [
        ("/sub", "is a dir, not a regular file"),
        ("/sub/none", "no regular file /sub/none"),
        ("999", "no regular file 999"),
    ] {
        let out = run(&["get", d, name, refused.to_str().unwrap()]);
        let t = text(&out);
        assert!(!out.status.success() && t.contains(says), "get {name}: {t}");
    }
    assert!(!refused.exists(), "nothing written by a refused get");
    ls_walks_the_tree(d);
    let out = run(&["fsck", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (fs, report) = mount().expect("the file system still mounts");
    assert!(
        !report.created && report.repaired.clean(),
        "{:?}",
        report.repaired
    );
    fs.unmount().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rm` removes a plain volume's file by id: it is gone from `ls`, its blocks are free
/// again (fsck clean, nothing leaked), the other file is intact; an unknown id is refused.
#[test]
fn rm_removes_a_file_by_id() {
    let dir = scratch("rm");
    let img = dir.join("vol.img");
    let d = img.to_str().unwrap();
    mkfs(&img);
    let free_blocks = || {
        let out = run(&["fsck", d, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["files"]["leaked"], 0, "{r}");
        r["free_blocks"].as_u64().unwrap()
    };
    let before = free_blocks();
    for (name, len) in [("a.bin", 1 << 20), ("b.bin", 4096)] {
        let h = dir.join(name);
        std::fs::write(&h, vec![5u8; len]).unwrap();
        let out = run(&["put", d, h.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = run(&["rm", d, "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["ls", d, "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["name"], "b.bin");
    let back = dir.join("b.out");
    assert!(run(&["get", d, "2", back.to_str().unwrap()])
        .status
        .success());
    assert_eq!(std::fs::read(&back).unwrap(), vec![5u8; 4096]);
    let after = free_blocks();
    assert!(
        before - after < 256,
        "the 1 MiB file's 256 blocks are free again: {before} -> {after}"
    );
    let out = run(&["rm", d, "9"]);
    assert!(
        !out.status.success() && text(&out).contains("no file 9"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn put_by_key_replaces_and_get_and_rm_take_names() {
    let dir = scratch("keys");
    let img = dir.join("vol.img");
    let d = img.to_str().unwrap();
    mkfs(&img);
    let h = dir.join("host");
    let put = |bytes: &[u8], key: &str| {
        std::fs::write(&h, bytes).unwrap();
        let out = run(&["put", d, h.to_str().unwrap(), "--key", key]);
        assert!(out.status.success(), "{}", text(&out));
        text(&out).trim().parse::<u64>().unwrap()
    };
    let first = put(b"draft", "report");
    let second = put(b"final", "report");
    assert_ne!(first, second, "a replacement is a new file");
    let numeric = put(b"named 7", "7");
    let out = run(&["ls", d, "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed.as_array().unwrap().len(),
        2,
        "the draft is gone: {listed}"
    );
    let back = dir.join("back");
    let get = |args: &[&str]| {
        let mut all = vec!["get", d];
        all.extend_from_slice(args);
        let out = run(&all);
        assert!(out.status.success(), "{}", text(&out));
        std::fs::read(&back).unwrap()
    };
    let b = back.to_str().unwrap();
    assert_eq!(get(&["report", b]), b"final");
    assert_eq!(get(&[&second.to_string(), b]), b"final");
    assert_eq!(get(&["7", b, "--key"]), b"named 7");
    assert_eq!(get(&[&numeric.to_string(), b]), b"named 7");
    let out = run(&["get", d, "nothing", b]);
    assert!(
        !out.status.success() && text(&out).contains("no file named \"nothing\""),
        "{}",
        text(&out)
    );
    let out = run(&["rm", d, "report"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["get", d, "report", b]);
    assert!(!out.status.success(), "removed by name: {}", text(&out));
    // Two unkeyed puts of one name: a name with two files, and a note says which is taken.
    std::fs::write(dir.join("twice"), b"x").unwrap();
    let twice = dir.join("twice");
    for _ in 0..2 {
        assert!(run(&["put", d, twice.to_str().unwrap()]).status.success());
    }
    let out = run(&["get", d, "twice", b]);
    let t = text(&out);
    assert!(
        out.status.success()
            && t.contains("2 files are named \"twice\"")
            && t.contains("copying the newest"),
        "{t}"
    );
    let out = run(&["rm", d, "twice"]);
    let t = text(&out);
    assert!(
        !out.status.success() && t.contains("name the one to remove by its id"),
        "an ambiguous removal is refused: {t}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn policies_shows_each_presets_value_and_what_a_key_reproduces() {
    let out = run(&["policies"]);
    assert!(out.status.success());
    let t = text(&out);
    let row = |key: &str| {
        t.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no row for {key}: {t}"))
            .split_whitespace()
            .take(5)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("zombie_groups"),
        "zombie_groups false false true ext4-base"
    );
    assert_eq!(
        row("free_list"),
        "free_list per-group global global ext4-2025"
    );
    assert_eq!(
        row("max_scan_extents"),
        "max_scan_extents 200 200 200 tuning"
    );
}

/// A repair whose file tree lost its root scans the device for the tree's leaves, and
/// says how far it has gone on stderr, a line per tenth, ending at 100 %. On the file
/// system of `tests/fixtures/fs-root6`, brought forward first: its tree is one leaf with
/// no older copy of its eight entries left on the device, so with that leaf zeroed the
/// scan finds none and the repair refuses (exit 4; scans that find the leaves:
/// `volume/nodescan_tests.rs`).
#[test]
fn a_repair_says_how_far_its_scan_of_the_device_has_gone() {
    let d = scratch("scan-progress");
    let img = d.join("fs.img");
    let p = img.to_str().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fs-root6.img.gz");
    let out = Command::new("gzip").arg("-dc").arg(&src).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", src.display());
    std::fs::write(&img, out.stdout).unwrap();
    let out = run(&["fsck", "--repair", p]);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", text(&out));
    // The volume root follows the superblock (`docs/format.md`): magic, version, then
    // the tree's root block.
    let mut bytes = std::fs::read(&img).unwrap();
    let at = bytes[..512].windows(4).position(|w| w == b"XVRT").unwrap();
    assert_eq!(bytes[at + 4], 7, "brought forward");
    let root = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()) as usize;
    bytes[root * 4096..(root + 1) * 4096].fill(0);
    std::fs::write(&img, bytes).unwrap();
    let out = run(&["fsck", "--repair", p]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(said.contains("no file holds an inode"), "{said}");
    // A line per tenth of the used blocks, one saying they left entries missing (the
    // root's only copy lost: no file left), then a line per tenth of the rest.
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("scanning the"))
        .collect();
    let grew = (lines.iter())
        .position(|l| l.contains("the used blocks left entries missing"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        grew >= 1 && lines.len() >= grew + 5,
        "a line per tenth: {said}"
    );
    assert!(lines[grew - 1].contains(": 100 % ("), "{said}");
    assert!(
        lines
            .last()
            .unwrap()
            .contains(": 100 % (8192 of 8192 blocks)"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(d);
}
