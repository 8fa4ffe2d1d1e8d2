//! Parsing tracefs text of ext4's allocation events (see `../shared/traces/README.md`):
//!
//! ```text
//! <command>-<pid> [<cpu>] <flags> <timestamp>: <event>: dev 7,1 ino 13 flags HINT_DATA len 2048 lblk 0 goal 32768 ...
//! ```
//!
//! Only `ext4_request_blocks`, `ext4_allocate_blocks`, `ext4_free_blocks` and
//! `ext4_discard_preallocations` matter here; other events are ignored. A line that names one
//! of those events but does not parse is malformed: counted, never a panic.

/// The fields a replay needs from one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Request {
        pid: u32,
        dev: (u32, u32),
        ino: u64,
        flags: Flags,
        len: u64,
        lblk: u64,
        goal: u64,
    },
    Allocate {
        pid: u32,
        dev: (u32, u32),
        ino: u64,
        flags: Flags,
        len: u64,
        block: u64,
        lblk: u64,
    },
    Free {
        /// The freeing task (0 when the line does not say).
        pid: u32,
        dev: (u32, u32),
        ino: u64,
        block: u64,
        count: u64,
        metadata: bool,
    },
    Discard {
        pid: u32,
        dev: (u32, u32),
        ino: u64,
    },
}

impl Event {
    /// The task that logged the event.
    pub fn pid(&self) -> u32 {
        match self {
            Event::Request { pid, .. }
            | Event::Allocate { pid, .. }
            | Event::Free { pid, .. }
            | Event::Discard { pid, .. } => *pid,
        }
    }

    pub fn dev(&self) -> (u32, u32) {
        match self {
            Event::Request { dev, .. }
            | Event::Allocate { dev, .. }
            | Event::Free { dev, .. }
            | Event::Discard { dev, .. } => *dev,
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

/// What a line is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Event(Event),
    /// Blank, a comment, or an event a replay does not use.
    Ignored,
    /// One of the replayed events, but not in the expected format.
    Malformed(String),
}

const EVENTS: [&str; 4] = [
    "ext4_request_blocks",
    "ext4_allocate_blocks",
    "ext4_free_blocks",
    "ext4_discard_preallocations",
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
    match parse_event(event, head, rest) {
        Some(e) => Line::Event(e),
        None => Line::Malformed(line.to_string()),
    }
}

/// `fio-1234 [001] ..... 12.3` -> 1234 (the task name may itself contain '-').
fn parse_pid(head: &str) -> Option<u32> {
    let task = head.trim_start().split(" [").next()?;
    task.trim_end().rsplit_once('-')?.1.parse().ok()
}

fn parse_event(event: &str, head: &str, rest: &str) -> Option<Event> {
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
    let ino = num("ino")?;
    // `flags` may be empty: then the next token is the next key.
    let flags = match get("flags") {
        Some(v) if !matches!(v, "len" | "count" | "block") => Flags::parse(v),
        _ => Flags::default(),
    };
    Some(match event {
        "ext4_request_blocks" => Event::Request {
            pid: parse_pid(head)?,
            dev,
            ino,
            flags,
            len: num("len")?,
            lblk: num("lblk")?,
            goal: num("goal")?,
        },
        "ext4_allocate_blocks" => Event::Allocate {
            pid: parse_pid(head)?,
            dev,
            ino,
            flags,
            len: num("len")?,
            block: num("block")?,
            lblk: num("lblk")?,
        },
        "ext4_free_blocks" => Event::Free {
            pid: parse_pid(head).unwrap_or(0),
            dev,
            ino,
            block: num("block")?,
            count: num("count")?,
            metadata: get("flags").is_some_and(|f| f.split('|').any(|x| x == "METADATA")),
        },
        "ext4_discard_preallocations" => Event::Discard {
            pid: parse_pid(head).unwrap_or(0),
            dev,
            ino,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines copied from ../shared/traces.
    const REQUEST: &str = "    kworker/u8:3-5327    [000] .....  4898.381905: ext4_request_blocks: dev 7,1 ino 13 flags HINT_DATA|DELALLOC_RESV|USE_RESV len 2048 lblk 2048 goal 10791 lleft 2047 lright 2048 pleft 10790 pright 0 ";
    const ALLOCATE: &str = "    kworker/u8:3-5327    [000] .....  4898.381939: ext4_allocate_blocks: dev 7,1 ino 13 flags HINT_DATA|DELALLOC_RESV|USE_RESV len 2048 block 10791 lblk 2048 goal 10791 lleft 2047 lright 2048 pleft 10790 pright 0";
    const DISCARD: &str = "           <...>-9463    [001] .....  4897.337510: ext4_discard_preallocations: dev 7,1 ino 12 len: 0";
    const MBALLOC: &str = "    kworker/u8:3-5327    [000] .....  4898.375559: ext4_mballoc_alloc: dev 7,1 inode 13 orig 1/0/2048@0 goal 0/-1/2048@0 result 0/8743/2048@0 blks 4 grps 1 cr CR_GOAL_LEN_SLOW flags HINT_DATA tail 551 broken 2048";

    #[test]
    fn lines_from_the_traces() {
        assert_eq!(
            parse_line(REQUEST),
            Line::Event(Event::Request {
                pid: 5327,
                dev: (7, 1),
                ino: 13,
                flags: Flags {
                    data: true,
                    no_prealloc: false
                },
                len: 2048,
                lblk: 2048,
                goal: 10791
            })
        );
        assert!(matches!(
            parse_line(ALLOCATE),
            Line::Event(Event::Allocate {
                block: 10791,
                len: 2048,
                ..
            })
        ));
        assert_eq!(
            parse_line(DISCARD),
            Line::Event(Event::Discard {
                pid: 9463,
                dev: (7, 1),
                ino: 12
            })
        );
        assert_eq!(parse_line(MBALLOC), Line::Ignored);
        let meta = "fio-9470 [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino 14 flags  len 1 lblk 0 goal 100 lleft 0 lright 0 pleft 0 pright 0";
        assert!(matches!(
            parse_line(meta),
            Line::Event(Event::Request {
                flags: Flags { data: false, .. },
                len: 1,
                ..
            })
        ));
        let free = "kworker/1:2-77 [001] ..... 3.0: ext4_free_blocks: dev 7,1 ino 13 mode 0100644 block 9000 count 1 flags METADATA|FORGET";
        assert!(matches!(
            parse_line(free),
            Line::Event(Event::Free {
                block: 9000,
                count: 1,
                metadata: true,
                ..
            })
        ));
    }

    #[test]
    fn malformed_lines_are_reported_not_fatal() {
        for bad in [
            "fio-1 [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino x flags HINT_DATA len 1",
            "fio-1 [000] ..... 1.0: ext4_allocate_blocks: dev seven ino 1",
            "no-pid [000] ..... 1.0: ext4_request_blocks: dev 7,1 ino 1 flags  len 1 lblk 0 goal 0",
            "x: ext4_free_blocks: ",
        ] {
            assert!(matches!(parse_line(bad), Line::Malformed(_)), "{bad}");
        }
        assert_eq!(parse_line(""), Line::Ignored);
        assert_eq!(parse_line("# tracer: nop"), Line::Ignored);
        assert_eq!(parse_line("garbage \u{0} \u{fffd}"), Line::Ignored);
    }
}
