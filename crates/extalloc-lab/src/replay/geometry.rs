//! The traced file system's geometry: where it comes from, and the check that every block
//! the trace names lies inside it before anything is replayed.
//!
//! Sources, first found wins for each field: the command line (`--blocks`,
//! `--group-blocks`), the trace's own `# extalloc capture:` header, the README next to the
//! trace ("block count 1,048,576, 32,768 blocks per group", as the kernel traces' READMEs and the
//! corpus in `traces/` describe theirs). Without a block count the replay stops and says what
//! to pass.

use super::parse::{Header, Traced};
use anyhow::{bail, Result};
use extalloc::Geometry;
use std::path::Path;

/// The geometry a replay runs on, and where each figure came from.
#[derive(Debug, Clone)]
pub struct TracedGeometry {
    pub geometry: Geometry,
    /// E.g. "the trace's capture header" or "README.md next to the trace".
    pub source: String,
    /// CPUs of the traced machine (header), else the highest CPU a line names plus one.
    pub cpus: u32,
}

/// What the README next to the trace says: `(blocks, group_blocks, block_size)`.
pub fn from_readme(trace: &Path) -> Option<(Option<u64>, Option<u64>, Option<u32>)> {
    let text = std::fs::read_to_string(trace.parent()?.join("README.md")).ok()?;
    let lower = text.to_ascii_lowercase();
    let digits = |s: &str| -> Option<u64> {
        let d: String = s.chars().filter(char::is_ascii_digit).collect();
        d.parse().ok()
    };
    let number_after = |key: &str| -> Option<u64> {
        let at = lower.find(key)? + key.len();
        let rest = lower[at..].trim_start_matches([' ', ':']);
        digits(
            &rest[..rest
                .find(|c: char| !(c.is_ascii_digit() || c == ','))
                .unwrap_or(rest.len())],
        )
    };
    let number_before = |key: &str| -> Option<u64> {
        let at = lower.find(key)?;
        let head = lower[..at].trim_end();
        let from = head
            .rfind(|c: char| !(c.is_ascii_digit() || c == ','))
            .map_or(0, |i| i + 1);
        digits(&head[from..])
    };
    let blocks = number_after("block count");
    let group = number_after("blocks per group:").or_else(|| number_before("blocks per group"));
    let block_size = number_after("block size")
        .and_then(|b| u32::try_from(b).ok())
        .filter(|b| b.is_power_of_two());
    (blocks.is_some() || group.is_some()).then_some((blocks, group, block_size))
}

/// Settles the geometry from the command line, the trace's header and its README.
pub fn resolve(
    trace_path: &Path,
    header: Option<&Header>,
    events: &[Traced],
    blocks: Option<u64>,
    group_blocks: Option<u64>,
    block_size: Option<u32>,
) -> Result<TracedGeometry> {
    let readme = from_readme(trace_path);
    let mut sources = Vec::new();
    let mut pick = |cli: Option<u64>, head: Option<u64>, read: Option<u64>, what: &str| {
        if cli.is_some() {
            sources.push(format!("{what} from the command line"));
            cli
        } else if head.is_some() {
            sources.push(format!("{what} from the trace's capture header"));
            head
        } else if read.is_some() {
            sources.push(format!("{what} from README.md next to the trace"));
            read
        } else {
            None
        }
    };
    let blocks = pick(
        blocks,
        header.and_then(|h| h.blocks),
        readme.and_then(|r| r.0),
        "block count",
    );
    let group_blocks = pick(
        group_blocks,
        header.and_then(|h| h.group_blocks),
        readme.and_then(|r| r.1),
        "blocks per group",
    );
    let block_size = pick(
        block_size.map(u64::from),
        header.and_then(|h| h.block_size).map(u64::from),
        readme.and_then(|r| r.2).map(u64::from),
        "block size",
    );
    let highest = highest_block_end(events);
    let Some(blocks) = blocks else {
        bail!(
            "{}: the trace does not say its geometry (no '# extalloc capture' header with \
             'blocks', no README.md next to it saying 'block count'); its blocks reach {}: \
             pass --blocks N (at least {}) and --group-blocks of the traced file system \
             (dumpe2fs -h: 'Block count', 'Blocks per group')",
            trace_path.display(),
            highest.saturating_sub(1),
            highest
        );
    };
    let group_blocks = group_blocks.unwrap_or(32768);
    let block_size = block_size.map_or(Ok(4096), u32::try_from)?;
    let geometry = match Geometry::new(block_size, group_blocks, blocks) {
        Ok(g) => g,
        Err(e) => bail!(
            "{}: the traced geometry ({blocks} blocks of {block_size} bytes, {group_blocks} \
             per group; {}) cannot be replayed: {e}",
            trace_path.display(),
            sources.join(", ")
        ),
    };
    let source = sources.join(", ");
    check(trace_path, &geometry, &source, highest)?;
    let cpus = header.and_then(|h| h.cpus).unwrap_or_else(|| {
        events
            .iter()
            .map(|t| t.cpu)
            .max()
            .map_or(1, |c| c.saturating_add(1))
    });
    Ok(TracedGeometry {
        geometry,
        source,
        cpus,
    })
}

/// The end of the highest block any event names.
pub fn highest_block_end(events: &[Traced]) -> u64 {
    events
        .iter()
        .filter_map(|t| t.event.highest_block_end())
        .max()
        .unwrap_or(0)
}

/// Refuses a geometry that does not hold every block of the trace.
pub fn check(trace_path: &Path, geometry: &Geometry, source: &str, highest: u64) -> Result<()> {
    if highest <= geometry.blocks_count {
        return Ok(());
    }
    let groups = highest.div_ceil(geometry.group_blocks);
    bail!(
        "{}: the trace names block {} but the device it describes has {} blocks ({source}): \
         it was taken on a larger file system. Pass the traced geometry, e.g. --blocks {} \
         --group-blocks {} (at least {} groups; dumpe2fs -h of the traced device says it)",
        trace_path.display(),
        highest - 1,
        geometry.blocks_count,
        groups.saturating_mul(geometry.group_blocks),
        geometry.group_blocks,
        groups
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::parse::Event;

    fn alloc_at(block: u64, len: u64) -> Traced {
        Traced {
            ns: 0,
            cpu: 3,
            pid: 1,
            dev: (7, 1),
            event: Event::Allocate {
                ino: 12,
                flags: Default::default(),
                len,
                block,
                lblk: 0,
            },
        }
    }

    /// A file ending at the device's last block makes the kernel ask for the block count
    /// as its goal (and clamp it): a trace of a full device replays at its true geometry.
    #[test]
    fn a_goal_at_the_block_count_names_no_block() {
        let dir = std::env::temp_dir().join(format!("extalloc-goal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.trace.txt");
        let request = Traced {
            event: Event::Request {
                ino: 12,
                flags: Default::default(),
                len: 8,
                lblk: 0,
                goal: 2_097_152,
            },
            ..alloc_at(0, 1)
        };
        let events = [alloc_at(2_097_144, 8), request];
        let g = resolve(&trace, None, &events, Some(2_097_152), None, None).unwrap();
        assert_eq!(g.geometry.blocks_count, 2_097_152);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn blocks_past_the_described_device_are_refused_with_the_fix() {
        let dir = std::env::temp_dir().join(format!("extalloc-geo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.trace.txt");
        std::fs::write(
            dir.join("README.md"),
            "- block size 4096 bytes, block count 1,048,576, 32,768 blocks per group\n",
        )
        .unwrap();
        let events = [alloc_at(2_000_000, 8)];
        let err = resolve(&trace, None, &events, None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("names block 2000007"), "{err}");
        assert!(err.contains("has 1048576 blocks"), "{err}");
        assert!(
            err.contains("--blocks 2031616 --group-blocks 32768"),
            "{err}"
        );
        assert!(err.contains("README.md next to the trace"), "{err}");
        // The command line wins, and then the trace fits.
        let g = resolve(&trace, None, &events, Some(2_031_616), None, None).unwrap();
        assert_eq!(g.geometry.blocks_count, 2_031_616);
        assert_eq!(g.cpus, 4, "the highest traced CPU plus one");
        // The header wins over the README.
        let header = Header {
            blocks: Some(4_194_304),
            group_blocks: Some(32768),
            block_size: Some(4096),
            cpus: Some(2),
            ..Header::default()
        };
        let g = resolve(&trace, Some(&header), &events, None, None, None).unwrap();
        assert_eq!(g.geometry.blocks_count, 4_194_304);
        assert_eq!(g.cpus, 2);
        assert!(g.source.contains("capture header"), "{}", g.source);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_description_says_what_to_pass() {
        let trace = Path::new("/nonexistent-dir/t.trace.txt");
        let err = resolve(trace, None, &[alloc_at(100, 1)], None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pass --blocks N (at least 101)"), "{err}");
        let err = resolve(trace, None, &[], Some(5), Some(0), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be replayed"), "{err}");
    }

    #[test]
    fn readme_figures() {
        let dir = std::env::temp_dir().join(format!("extalloc-readme-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("README.md"),
            "Block count: 262144\nBlocks per group: 8192\nBlock size: 1024\n",
        )
        .unwrap();
        assert_eq!(
            from_readme(&dir.join("x.gz")),
            Some((Some(262_144), Some(8192), Some(1024)))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
