//! Volumes made by earlier releases (`tests/fixtures/`): root version 2 (made by abfd344:
//! each table area one extent), version 3 (made by ab13385: table areas in pieces) and
//! version 4 (made by 0d2cc41: the file tree, without what its leaves hold) and version 5
//! (made by 5ea3a40: the root says what the leaves hold, the internal nodes carry no
//! marks; `fs-root5` holds a map outside the tree) and version 6 (made by afe0a16: marks,
//! no stamp; `fs-root6` as `fs-root5`) open, read and check clean with today's build, and
//! the first write brings them forward to version 7 with nothing lost.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_extalloc"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "extalloc {args:?}: {text}");
    text
}

/// The fixture `name`, unpacked into a scratch directory (gzip, which every Linux has).
fn unpack(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("extalloc-upgrade-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.img.gz"));
    let out = Command::new("gzip").arg("-dc").arg(&src).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", src.display());
    let img = dir.join(format!("{name}.img"));
    std::fs::write(&img, out.stdout).unwrap();
    (dir, img)
}

/// The volume root's version, from the superblock's block (the root follows the
/// superblock at byte 128, `docs/format.md`).
fn root_version(img: &Path) -> u32 {
    let b = std::fs::read(img).unwrap();
    let at = b[..512]
        .windows(4)
        .position(|w| w == b"XVRT")
        .expect("a volume root");
    u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap())
}

fn big() -> Vec<u8> {
    (0..300_000u32)
        .map(|i| ((i * 7 + i / 4096) % 251) as u8)
        .collect()
}

fn small() -> Vec<u8> {
    (0..5000u32).map(|i| ((i * 13 + 5) % 251) as u8).collect()
}

#[test]
fn volumes_of_versions_2_to_6_read_and_are_brought_forward_by_their_first_write() {
    for v in [2, 3, 4, 5, 6] {
        volume_brought_forward(v);
    }
}

fn volume_brought_forward(v: u32) {
    let (dir, img) = unpack(&format!("volume-root{v}"));
    let p = img.to_str().unwrap();
    assert_eq!(root_version(&img), v);
    assert!(ok(&["fsck", p]).contains("0 leaked"));
    let listing = ok(&["ls", p]);
    assert!(
        listing.contains("small.bin") && listing.contains("big.bin"),
        "{listing}"
    );
    let out = dir.join("big.out");
    ok(&["get", p, "2", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), big());
    assert_eq!(root_version(&img), v, "reading writes nothing");
    // A write checkpoints: the root is version 7, every file still there.
    let third = dir.join("third.bin");
    std::fs::write(&third, b"made by today's build").unwrap();
    ok(&["put", p, third.to_str().unwrap()]);
    assert_eq!(root_version(&img), 7);
    ok(&["get", p, "1", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), small());
    ok(&["get", p, "2", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), big());
    assert!(ok(&["fsck", p]).contains("0 leaked"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn file_systems_of_versions_2_to_6_check_clean_and_repair_forward() {
    for v in [2, 3, 4, 5, 6] {
        file_system_brought_forward(v);
    }
}

fn file_system_brought_forward(v: u32) {
    let (dir, img) = unpack(&format!("fs-root{v}"));
    let p = img.to_str().unwrap();
    assert_eq!(root_version(&img), v);
    // fs-root5 and fs-root6 have one more file, `sparse`, its map in a segment.
    let counts = match v {
        5 | 6 => "3 directories, 4 files, 1 symbolic links",
        _ => "3 directories, 3 files, 1 symbolic links",
    };
    let fsck = ok(&["fsck", p]);
    assert!(fsck.contains(counts), "{fsck}");
    let listing = ok(&["ls", p]);
    for path in ["/dir/sub/b", "/dir/a", "/link", "/hello"] {
        assert!(listing.contains(path), "{path} in {listing}");
    }
    assert_eq!(listing.contains("/sparse"), v >= 5, "{listing}");
    // The repair's checkpoint writes version 7 (nothing to repair: exit 0 or 1).
    let out = run(&["fsck", "--repair", p]);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{out:?}");
    assert_eq!(root_version(&img), 7);
    let fsck = ok(&["fsck", p]);
    assert!(fsck.contains(counts), "{fsck}");
    assert_eq!(ok(&["ls", p]), listing);
    // And again, through the open that reads only the marked leaves.
    let fsck = ok(&["fsck", p]);
    assert!(
        fsck.contains(counts) && fsck.contains(" 0 leaked"),
        "{fsck}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
