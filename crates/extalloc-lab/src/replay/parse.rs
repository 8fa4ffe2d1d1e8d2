//! Parsing tracefs text of ext4's allocation events (format: `docs/replay.md`):
//!
//! ```text
//! <command>-<pid> [<cpu>] <flags> <timestamp>: <event>: dev 7,1 ino 13 flags HINT_DATA len 2048 lblk 0 goal 32768 ...
//! ```
//!
//! The events a replay uses are listed in [`EVENTS`]; others are ignored. A line that names
//! one of them but does not parse is malformed: counted, never a panic. A header line
//! written by `extalloc capture` (`# extalloc capture: dev 7,1; block_size 4096; ...`)
//! describes the traced file system ([`Header`]).

/// One event with where and when it was logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traced {
    /// The timestamp in nanoseconds (0 when the line has none).
    pub ns: u64,
    /// The CPU that logged it (`[001]`; 0 when the line does not say).
    pub cpu: u32,
    /// The task that logged it (0 when the line does not say and the event needs none).
    pub pid: u32,
    /// The device the event is about (`dev 7,1`).
    pub dev: (u32, u32),
    pub event: Event,
}

/// The fields a replay needs from one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `ext4_request_blocks`: a caller asks for blocks.
    Request {
        ino: u64,
        flags: Flags,
        len: u64,
        lblk: u64,
        goal: u64,
    },
    /// `ext4_allocate_blocks`: the kernel's decision.
    Allocate {
        ino: u64,
        flags: Flags,
        len: u64,
        block: u64,
        lblk: u64,
    },
    /// `ext4_free_blocks`.
    Free {
        ino: u64,
        block: u64,
        count: u64,
        metadata: bool,
    },
    /// `ext4_discard_preallocations`: the file's preallocations go back (close, truncate).
    Discard { ino: u64 },
    /// `ext4_mballoc_alloc`: the buddy allocator searched; `orig_len` is what the caller
    /// asked for, `goal_len` the request after normalisation.
    Search {
        ino: u64,
        orig_len: u64,
        goal_len: u64,
    },
    /// `ext4_mb_new_inode_pa` / `ext4_mb_new_group_pa`: a preallocation was made.
    NewPa { ino: u64, group: bool },
    /// `ext4_allocate_inode`: a new inode in directory `dir`.
    InodeCreate { ino: u64, dir: u64 },
    /// `ext4_free_inode`: the inode is gone; its number may be reused for a new file.
    InodeFree { ino: u64 },
    /// `ext4_sync_file_enter`: an fsync (or fdatasync) of the inode.
    Sync { ino: u64 },
    /// `jbd2_end_commit`: a journal transaction is durable; the blocks it freed are reusable.
    Commit,
}

impl Event {
    /// The inode the event is about, if any (a jbd2 commit is about none).
    pub fn ino_mut(&mut self) -> Option<&mut u64> {
        match self {
            Event::Request { ino, .. }
            | Event::Allocate { ino, .. }
            | Event::Free { ino, .. }
            | Event::Discard { ino, .. }
            | Event::Search { ino, .. }
            | Event::NewPa { ino, .. }
            | Event::InodeCreate { ino, .. }
            | Event::InodeFree { ino, .. }
            | Event::Sync { ino, .. } => Some(ino),
            Event::Commit => None,
        }
    }

    /// The end of the highest block the event names (for the geometry check), if it names
    /// any; `u64::MAX` when the end overflows (no device holds it).
    /// A request's goal names no block: the kernel asks for `pleft + 1`, the device's block
    /// count when a file ends at its last block, and clamps a goal outside the device to
    /// the first data block itself (`ext4_mb_initialize_context`).
    pub fn highest_block_end(&self) -> Option<u64> {
        match self {
            Event::Request { .. } => None,
            Event::Allocate { block, len, .. } => Some(block.saturating_add(*len)),
            Event::Free { block, count, .. } => Some(block.saturating_add(*count)),
            _ => None,
        }
    }
}

/// The request flags a replay looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    /// `HINT_DATA`: file data (else extent-tree or other metadata blocks).
    pub data: bool,
    /// `HINT_NOPREALLOC`: no normalisation or preallocation (fallocate).
    pub no_prealloc: bool,
}

impl Flags {
    fn parse(s: &str) -> Self {
        let mut f = Flags::default();
        for name in s.split('|') {
            match name {
                "HINT_DATA" => f.data = true,
                "HINT_NOPREALLOC" => f.no_prealloc = true,
                _ => {}
            }
        }
        f
    }
}

/// What a trace's `# extalloc capture:` header says of the traced file system.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub dev: Option<(u32, u32)>,
    pub block_size: Option<u32>,
    pub blocks: Option<u64>,
    pub group_blocks: Option<u64>,
    pub cpus: Option<u32>,
    /// Blocks used before the workload (the file system's metadata), `(start, len)`;
    /// empty when the header does not say (`reserved.rs`).
    pub reserved: Vec<(u64, u64)>,
    /// The `reserved` field's value when it did not parse (a replay refuses the trace).
    pub reserved_malformed: Option<String>,
}

/// Parses a capture header line; `None` for any other line.
pub fn parse_header(line: &str) -> Option<Header> {
    let rest = line.trim().strip_prefix("# extalloc capture:")?;
    let mut h = Header::default();
    for field in rest.split(';') {
        let mut it = field.split_whitespace();
        let (Some(key), Some(value)) = (it.next(), it.next()) else {
            continue;
        };
        match key {
            "dev" => {
                h.dev = value
                    .split_once(',')
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            }
            "block_size" => h.block_size = value.parse().ok(),
            "blocks" => h.blocks = value.parse().ok(),
            "group_blocks" => h.group_blocks = value.parse().ok(),
            "cpus" => h.cpus = value.parse().ok(),
            "reserved" => match super::reserved::parse(value) {
                Some(r) => h.reserved = r,
                None => h.reserved_malformed = Some(value.to_owned()),
            },
            // The command comes last and may hold anything.
            "command:" => break,
            _ => {}
        }
    }
    Some(h)
}

/// What a line is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Event(Traced),
    /// Blank, a comment, or an event a replay does not use.
    Ignored,
    /// One of the replayed events, but not in the expected format.
    Malformed(String),
}

/// The events a replay reads.
pub const EVENTS: [&str; 13] = [
    "ext4_request_blocks",
    "ext4_allocate_blocks",
    "ext4_free_blocks",
    "ext4_discard_preallocations",
    "ext4_mballoc_alloc",
    "ext4_mballoc_prealloc",
    "ext4_mb_new_inode_pa",
    "ext4_mb_new_group_pa",
    "ext4_allocate_inode",
    "ext4_free_inode",
    "ext4_sync_file_enter",
    "jbd2_start_commit",
    "jbd2_end_commit",
];

/// Parses one line.
pub fn parse_line(line: &str) -> Line {
    let line = line.trim_end();
    if line.trim_start().starts_with('#') || line.trim().is_empty() {
        return Line::Ignored;
    }
    // The event name sits between ": " separators after the timestamp.
    let Some((event, at, rest)) = EVENTS.iter().find_map(|e| {
        let tag = format!(" {e}:");
        let at = line.find(&tag)?;
        let rest = &line[at + tag.len()..];
        (rest.is_empty() || rest.starts_with(' ')).then_some((*e, at, rest))
    }) else {
        return Line::Ignored;
    };
    let head = &line[..at];
    let pid = parse_pid(head);
    match parse_event(event, rest) {
        Some(Some((_, event))) if pid.is_none() && event.needs_pid() => {
            Line::Malformed(line.to_string())
        }
        Some(Some((dev, event))) => Line::Event(Traced {
            ns: parse_ns(head).unwrap_or(0),
            cpu: parse_cpu(head).unwrap_or(0),
            pid: pid.unwrap_or(0),
            dev,
            event,
        }),
        Some(None) => Line::Ignored,
        None => Line::Malformed(line.to_string()),
    }
}

/// `fio-1234 [001] ..... 12.3` -> 1234 (the task name may itself contain '-').
fn parse_pid(head: &str) -> Option<u32> {
    let task = head.trim_start().split(" [").next()?;
    task.trim_end().rsplit_once('-')?.1.parse().ok()
}

/// `... [001] ...` -> 1.
fn parse_cpu(head: &str) -> Option<u32> {
    let at = head.find(" [")? + 2;
    let end = at + head[at..].find(']')?;
    head[at..end].trim().parse().ok()
}

/// The last token of the head, `4898.381905:` -> nanoseconds.
fn parse_ns(head: &str) -> Option<u64> {
    let t = head.split_whitespace().last()?.strip_suffix(':')?;
    let (secs, frac) = t.split_once('.').unwrap_or((t, ""));
    let secs: u64 = secs.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// `17/3/2@0` -> (group 17, start 3, len 2, logical 0); the start may be -1.
fn parse_triple(s: &str) -> Option<(u64, i64, u64, u64)> {
    let (gsl, logical) = s.split_once('@')?;
    let mut it = gsl.split('/');
    let g = it.next()?.parse().ok()?;
    let start = it.next()?.parse().ok()?;
    let len = it.next()?.parse().ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((g, start, len, logical.parse().ok()?))
}

/// The device and the event. `None`: malformed. `Some(None)`: well formed but of no use
/// (a jbd2 start of commit).
fn parse_event(event: &str, rest: &str) -> Option<Option<((u32, u32), Event)>> {
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    let get = |key: &str| -> Option<&str> {
        tokens
            .iter()
            .position(|t| *t == key || t.strip_suffix(':') == Some(key))
            .and_then(|i| tokens.get(i + 1).copied())
    };
    let num = |key: &str| -> Option<u64> { get(key)?.parse().ok() };
    let dev = {
        let (a, b) = get("dev")?.split_once(',')?;
        (a.parse().ok()?, b.parse().ok()?)
    };
    if event.starts_with("jbd2_") {
        // jbd2 prints its tid_t (unsigned) through an `int` field with `%d`: a file system
        // past 2^31 commits logs negative transaction numbers.
        get("transaction")?.parse::<i64>().ok()?;
        return Some(match event {
            "jbd2_end_commit" => Some((dev, Event::Commit)),
            _ => None,
        });
    }
    let ino = num("ino").or_else(|| num("inode"))?;
    // `flags` may be empty: then the next token is the next key.
    let flags = match get("flags") {
        Some(v) if !matches!(v, "len" | "count" | "block" | "tail") => Flags::parse(v),
        _ => Flags::default(),
    };
    let event = match event {
        "ext4_request_blocks" => Event::Request {
            ino,
            flags,
            len: num("len")?,
            lblk: num("lblk")?,
            goal: num("goal")?,
        },
        "ext4_allocate_blocks" => Event::Allocate {
            ino,
            flags,
            len: num("len")?,
            block: num("block")?,
            lblk: num("lblk")?,
        },
        "ext4_free_blocks" => Event::Free {
            ino,
            block: num("block")?,
            count: num("count")?,
            metadata: get("flags").is_some_and(|f| f.split('|').any(|x| x == "METADATA")),
        },
        "ext4_discard_preallocations" => Event::Discard { ino },
        "ext4_mballoc_alloc" => Event::Search {
            ino,
            orig_len: parse_triple(get("orig")?)?.2,
            goal_len: parse_triple(get("goal")?)?.2,
        },
        "ext4_mballoc_prealloc" => {
            parse_triple(get("orig")?)?;
            return Some(None);
        }
        "ext4_mb_new_inode_pa" | "ext4_mb_new_group_pa" => {
            num("pstart")?;
            num("len")?;
            Event::NewPa {
                ino,
                group: event == "ext4_mb_new_group_pa",
            }
        }
        "ext4_allocate_inode" => Event::InodeCreate {
            ino,
            dir: num("dir")?,
        },
        "ext4_free_inode" => Event::InodeFree { ino },
        "ext4_sync_file_enter" => Event::Sync { ino },
        _ => return None,
    };
    Some(Some((dev, event)))
}

impl Event {
    /// Events whose task matters (a request and the decision and search events that follow
    /// it on the same task): a line of one without a task is malformed.
    fn needs_pid(&self) -> bool {
        matches!(
            self,
            Event::Request { .. }
                | Event::Allocate { .. }
                | Event::Search { .. }
                | Event::NewPa { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Lines copied from kernel ext4 traces (tracefs text).
    const REQUEST: &str = "    kworker/u8:3-5327    [000] .....  4898.381905: ext4_request_blocks: dev 7,1 ino 13 flags HINT_DATA|DELALLOC_RESV|USE_RESV len 2048 lblk 2048 goal 10791 lleft 2047 lright 2048 pleft 10790 pright 0 ";
    const ALLOCATE: &str = "    kworker/u8:3-5327    [000] .....  4898.381939: ext4_allocate_blocks: dev 7,1 ino 13 flags HINT_DATA|DELALLOC_RESV|USE_RESV len 2048 block 10791 lblk 2048 goal 10791 lleft 2047 lright 2048 pleft 10790 pright 0";
    const DISCARD: &str = "           <...>-9463    [001] .....  4897.337510: ext4_discard_preallocations: dev 7,1 ino 12 len: 0";
    const MBALLOC: &str = "    kworker/u8:3-5327    [000] .....  4898.375559: ext4_mballoc_alloc: dev 7,1 inode 13 orig 1/0/2048@0 goal 0/-1/2048@0 result 0/8743/2048@0 blks 4 grps 1 cr CR_GOAL_LEN_SLOW flags HINT_DATA tail 551 broken 2048";

    fn event(line: &str) -> Event {
        match parse_line(line) {
            Line::Event(t) => t.event,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn lines_from_the_traces() {
        let Line::Event(t) = parse_line(REQUEST) else {
            panic!("parses")
        };
        assert_eq!(t.ns, 4_898_381_905_000);
        assert_eq!((t.cpu, t.pid, t.dev), (0, 5327, (7, 1)));
        assert_eq!(
            t.event,
            Event::Request {
                ino: 13,
                flags: Flags {
                    data: true,
                    no_prealloc: false
                },
                len: 2048,
                lblk: 2048,
                goal: 10791
            }
        );
        assert!(matches!(
            event(ALLOCATE),
            Event::Allocate {
                block: 10791,
                len: 2048,
                ..
            }
        ));
        assert_eq!(event(DISCARD), Event::Discard { ino: 12 });
        assert_eq!(
            event(MBALLOC),
            Event::Search {
                ino: 13,
                orig_len: 2048,
                goal_len: 2048
            }
        );
        let meta = "fio-9470 [001] ..... 1.0: ext4_request_blocks: dev 7,1 ino 14 flags  len 1 lblk 0 goal 100 lleft 0 lright 0 pleft 0 pright 0";
        let Line::Event(t) = parse_line(meta) else {
            panic!("parses")
        };
        assert_eq!((t.cpu, t.ns), (1, 1_000_000_000));
        assert!(matches!(
            t.event,
            Event::Request {
                flags: Flags { data: false, .. },
                len: 1,
                ..
            }
        ));
        let free = "kworker/1:2-77 [001] ..... 3.0: ext4_free_blocks: dev 7,1 ino 13 mode 0100644 block 9000 count 1 flags METADATA|FORGET";
        assert!(matches!(
            event(free),
            Event::Free {
                block: 9000,
                count: 1,
                metadata: true,
                ..
            }
        ));
    }

    /// Lines of the events only `extalloc capture` records, as this kernel prints them.
    #[test]
    fn capture_only_events() {
        let commit = "jbd2/loop0-8-612 [000] ..... 10.5: jbd2_end_commit: dev 7,1 transaction 42 sync 0 head 40";
        let Line::Event(t) = parse_line(commit) else {
            panic!("parses")
        };
        assert_eq!((t.pid, t.dev, t.event), (612, (7, 1), Event::Commit));
        // A tid past 2^31, as the kernel's `%d` of its `int` field prints it.
        let wrapped = "jbd2/sda1-8-377 [001] ..... 11.0: jbd2_end_commit: dev 8,1 transaction -2147483611 sync 0 head -2147483613";
        assert_eq!(event(wrapped), Event::Commit);
        let start =
            "jbd2/loop0-8-612 [000] ..... 10.4: jbd2_start_commit: dev 7,1 transaction 42 sync 0";
        assert_eq!(parse_line(start), Line::Ignored);
        let sync =
            "fio-7 [001] ..... 2.0: ext4_sync_file_enter: dev 7,1 ino 12 parent 2 datasync 0 ";
        assert_eq!(event(sync), Event::Sync { ino: 12 });
        let create = "cp-9 [000] ..... 2.0: ext4_allocate_inode: dev 7,1 ino 15 dir 2 mode 0100644";
        assert_eq!(event(create), Event::InodeCreate { ino: 15, dir: 2 });
        let gone = "rm-9 [000] ..... 2.0: ext4_free_inode: dev 7,1 ino 15 mode 0100644 uid 0 gid 0 blocks 8";
        assert!(matches!(event(gone), Event::InodeFree { ino: 15, .. }));
        let pa = "cp-9 [000] ..... 2.0: ext4_mb_new_group_pa: dev 7,1 ino 15 pstart 1000 len 512 lstart 1000";
        assert!(matches!(event(pa), Event::NewPa { group: true, .. }));
        let served = "cp-9 [000] ..... 2.0: ext4_mballoc_prealloc: dev 7,1 inode 15 orig 0/0/1@0 result 0/1000/1@0";
        assert_eq!(parse_line(served), Line::Ignored);
    }

    #[test]
    fn capture_header() {
        let h = parse_header("# extalloc capture: dev 7,3; block_size 4096; blocks 2097152; group_blocks 32768; first_block 0; cpus 2; command: sh -c a; b").unwrap();
        assert_eq!(
            h,
            Header {
                dev: Some((7, 3)),
                block_size: Some(4096),
                blocks: Some(2_097_152),
                group_blocks: Some(32768),
                cpus: Some(2),
                ..Header::default()
            }
        );
        let h = parse_header(
            "# extalloc capture: dev 7,0; blocks 64; reserved 0+10,30+4; cpus 2; command: x",
        )
        .unwrap();
        assert_eq!(h.reserved, [(0, 10), (30, 4)]);
        let h = parse_header("# extalloc capture: dev 7,0; reserved 0-10; command: x").unwrap();
        assert_eq!(
            (h.reserved.len(), h.reserved_malformed.as_deref()),
            (0, Some("0-10"))
        );
        // The header of older captures names only the device.
        let old = parse_header("# extalloc capture: dev 7,1; command: fallocate -l 4M f").unwrap();
        assert_eq!(old.dev, Some((7, 1)));
        assert_eq!(old.blocks, None);
        assert_eq!(parse_header("# tracer: nop"), None);
    }

    #[test]
    fn malformed_lines_are_reported_not_fatal() {
        for bad in [
            "fio-1 [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino x flags HINT_DATA len 1",
            "fio-1 [000] ..... 1.0: ext4_allocate_blocks: dev seven ino 1",
            "no-pid [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino 1 flags  len 1 lblk 0 goal 0",
            "x: ext4_free_blocks: ",
            "j-1 [000] ..... 1.0: jbd2_end_commit: dev 7,1 transaction x",
            "f-1 [000] ..... 1.0: ext4_mballoc_alloc: dev 7,1 inode 3 orig 1/2@0 goal 1/2/3@0",
        ] {
            assert!(matches!(parse_line(bad), Line::Malformed(_)), "{bad}");
        }
        assert_eq!(parse_line(""), Line::Ignored);
        assert_eq!(parse_line("# tracer: nop"), Line::Ignored);
        assert_eq!(parse_line("garbage \u{0} \u{fffd}"), Line::Ignored);
    }

    proptest! {
        /// Random lines, and random mutations of real ones, never panic.
        #[test]
        fn random_lines_never_panic(line in ".{0,200}") {
            let _ = parse_line(&line);
            let _ = parse_header(&line);
        }

        #[test]
        fn mutated_lines_never_panic(
            which in 0usize..4,
            at in 0usize..300,
            junk in "[ -~]{0,12}",
        ) {
            let base = [REQUEST, ALLOCATE, DISCARD, MBALLOC][which];
            let at = at.min(base.len());
            let mut line = base[..at].to_string();
            line.push_str(&junk);
            line.push_str(&base[at..]);
            let _ = parse_line(&line);
            let cut = &base[..at];
            let _ = parse_line(cut);
        }
    }
}
