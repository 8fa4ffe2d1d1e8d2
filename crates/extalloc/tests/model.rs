//! Model-based test: random allocate / free / commit sequences against a trivially correct
//! reference model (one state per block), for every preset and a few variants. After every
//! step: no block is handed out twice, freed blocks return only after a commit, free and
//! pending counts match, a failed call changed nothing, and `check()` passes.

use extalloc::{AllocRequest, Allocator, Error, Extent, Geometry, Policy};
use proptest::prelude::*;

const GROUP_BLOCKS: u64 = 64;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        file: u64,
        len: u64,
        min_frac: u8,
        goal: Option<u64>,
    },
    FreeHeld {
        pick: usize,
        from: u8,
        len: u8,
    },
    FreeAny {
        start: u64,
        len: u64,
    },
    Commit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u64..4, 1u64..=72, 0u8..=4, prop::option::of(0u64..420)).prop_map(|(file, len, min_frac, goal)| Op::Alloc { file, len, min_frac, goal }),
        3 => (any::<usize>(), any::<u8>(), any::<u8>()).prop_map(|(pick, from, len)| Op::FreeHeld { pick, from, len }),
        1 => (0u64..420, 0u64..80).prop_map(|(start, len)| Op::FreeAny { start, len }),
        1 => Just(Op::Commit),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum B {
    Free,
    Used,
    Pending,
}

struct Model {
    blocks: Vec<B>,
    held: Vec<Extent>,
}

impl Model {
    fn count(&self, s: B) -> u64 {
        self.blocks.iter().filter(|&&b| b == s).count() as u64
    }
    fn commit(&mut self) -> u64 {
        let mut n = 0;
        for b in &mut self.blocks {
            if *b == B::Pending {
                *b = B::Free;
                n += 1;
            }
        }
        n
    }
    /// Longest free run inside one group.
    fn longest_run_in_group(&self) -> u64 {
        let mut best = 0;
        for chunk in self.blocks.chunks(GROUP_BLOCKS as usize) {
            let mut run = 0;
            for &b in chunk {
                run = if b == B::Free { run + 1 } else { 0 };
                best = best.max(run);
            }
        }
        best
    }
    /// The error a free of `e` must give, if any (the allocator checks group by group,
    /// pending before unallocated).
    fn free_error(&self, e: Extent) -> Option<Error> {
        let mut at = e.start;
        while at < e.end() {
            let group_end = (at / GROUP_BLOCKS + 1) * GROUP_BLOCKS;
            let end = group_end.min(e.end());
            let piece = &self.blocks[at as usize..end as usize];
            if piece.contains(&B::Pending) {
                return Some(Error::DoubleFree {
                    start: at,
                    len: end - at,
                });
            }
            if piece.contains(&B::Free) {
                return Some(Error::NotAllocated {
                    start: at,
                    len: end - at,
                });
            }
            at = end;
        }
        None
    }
}

#[allow(clippy::too_many_lines, reason = "a test scenario, read top to bottom")]
fn run(spec: &str, blocks_count: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let geometry = Geometry::new(4096, GROUP_BLOCKS, blocks_count).unwrap();
    let alloc = Allocator::new(geometry, Policy::parse(spec).unwrap()).unwrap();
    let mut model = Model {
        blocks: vec![B::Free; blocks_count as usize],
        held: Vec::new(),
    };
    for op in ops {
        let before = (alloc.free_blocks(), alloc.pending_free_blocks());
        match op {
            Op::Alloc {
                file,
                len,
                min_frac,
                goal,
            } => {
                let min_len = (len * u64::from(min_frac) / 4).max(1);
                let mut req = AllocRequest::new(file, len)
                    .min_len(min_len)
                    .logical(file * 8);
                if let Some(g) = goal {
                    req = req.goal(g);
                }
                let forced_before = alloc.stats().forced_commits;
                // The model owns the commits: it asks the core to commit pending frees
                // before it reports no space.
                let result = alloc.allocate_committing(&req);
                let forced = alloc.stats().forced_commits - forced_before;
                if len > GROUP_BLOCKS {
                    prop_assert!(
                        matches!(result, Err(Error::ExtentTooLong { .. })),
                        "{result:?}"
                    );
                } else if goal.is_some_and(|g| g >= blocks_count) {
                    prop_assert!(
                        matches!(result, Err(Error::OutOfRange { .. })),
                        "{result:?}"
                    );
                } else {
                    if forced > 0 {
                        prop_assert!(
                            model.count(B::Pending) > 0,
                            "forced a commit with nothing pending"
                        );
                        model.commit();
                    }
                    match result {
                        Ok(e) => {
                            prop_assert!(
                                e.len >= min_len && e.len <= len,
                                "{e:?} for {len} (min {min_len})"
                            );
                            prop_assert_eq!(
                                e.start / GROUP_BLOCKS,
                                (e.end() - 1) / GROUP_BLOCKS,
                                "extent crosses groups"
                            );
                            for b in e.start..e.end() {
                                prop_assert_eq!(
                                    model.blocks[b as usize],
                                    B::Free,
                                    "block {} handed out while {:?}",
                                    b,
                                    model.blocks[b as usize]
                                );
                                model.blocks[b as usize] = B::Used;
                            }
                            model.held.push(e);
                        }
                        Err(Error::NoSpace {
                            pending_blocks,
                            reserved_blocks,
                            ..
                        }) => {
                            prop_assert_eq!(
                                model.count(B::Pending),
                                0,
                                "no space while frees pending"
                            );
                            prop_assert_eq!((pending_blocks, reserved_blocks), (0, 0));
                            prop_assert!(
                                model.longest_run_in_group() < min_len,
                                "no space but a run of {} exists",
                                model.longest_run_in_group()
                            );
                        }
                        Err(other) => prop_assert!(false, "unexpected error {other:?}"),
                    }
                }
            }
            Op::FreeHeld { pick, from, len } => {
                if model.held.is_empty() {
                    continue;
                }
                let i = pick % model.held.len();
                let e = model.held[i];
                let from = u64::from(from) % e.len;
                let len = (u64::from(len) % (e.len - from)) + 1;
                let part = Extent::new(e.start + from, len);
                alloc
                    .free(part)
                    .map_err(|err| TestCaseError::fail(format!("free {part:?}: {err}")))?;
                for b in part.start..part.end() {
                    model.blocks[b as usize] = B::Pending;
                }
                model.held.swap_remove(i);
                if from > 0 {
                    model.held.push(Extent::new(e.start, from));
                }
                if from + len < e.len {
                    model.held.push(Extent::new(part.end(), e.len - from - len));
                }
            }
            Op::FreeAny { start, len } => {
                let e = Extent::new(start, len);
                let result = alloc.free(e);
                let expected = if len == 0 {
                    Some(Error::ZeroLength)
                } else if start + len > blocks_count {
                    Some(Error::OutOfRange {
                        start,
                        len,
                        device_blocks: blocks_count,
                    })
                } else {
                    model.free_error(e)
                };
                match expected {
                    Some(err) => {
                        prop_assert_eq!(result, Err(err));
                        prop_assert_eq!(
                            (alloc.free_blocks(), alloc.pending_free_blocks()),
                            before,
                            "failed free changed state"
                        );
                    }
                    None => {
                        prop_assert_eq!(result, Ok(()));
                        for b in start..start + len {
                            model.blocks[b as usize] = B::Pending;
                        }
                        // The freed blocks leave whatever held extents they were part of.
                        let mut held = Vec::new();
                        for h in model.held.drain(..) {
                            let (hs, he) = (h.start, h.end());
                            if he <= start || hs >= start + len {
                                held.push(h);
                                continue;
                            }
                            if hs < start {
                                held.push(Extent::new(hs, start - hs));
                            }
                            if he > start + len {
                                held.push(Extent::new(start + len, he - start - len));
                            }
                        }
                        model.held = held;
                    }
                }
            }
            Op::Commit => {
                let expected = model.commit();
                prop_assert_eq!(alloc.commit(), expected);
            }
        }
        alloc
            .check()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(alloc.free_blocks(), model.count(B::Free));
        prop_assert_eq!(alloc.pending_free_blocks(), model.count(B::Pending));
        // The accounting equation, term by term against the model: no preallocations
        // here, so every used block is allocated or pending.
        prop_assert_eq!(alloc.allocated_blocks(), model.count(B::Used));
        prop_assert_eq!(alloc.reserved_blocks(), 0);
    }
    Ok(())
}

const SPECS: [&str; 6] = [
    "ext4-base",
    "ext4-2025",
    "extalloc",
    "ext4-2025:optimize_scan=false",
    "extalloc:trylock=false:stream_goals=1:first_free_hint=false",
    "ext4-base:merge_before_insert=true:free_list=per-group",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_matches_the_model(blocks_count in 193u64..400, ops in prop::collection::vec(op(), 1..250)) {
        for spec in SPECS {
            run(spec, blocks_count, ops.clone())?;
        }
    }
}
