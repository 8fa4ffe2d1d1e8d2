//! The trace replay on arbitrary bytes: the line parser, the capture header, the geometry
//! check and the engine. None may panic; a trace whose geometry is accepted replays on it
//! and leaves an allocator whose `check()` holds.
#![no_main]

use extalloc::{Allocator, Files, Policy};
use extalloc_lab::replay::{engine, generations, geometry, load_from};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(mut trace) = load_from(data) else {
        return;
    };
    // No README at this path: the geometry comes from the header, else 64 Ki blocks.
    let path = Path::new("/nonexistent/fuzz.trace.txt");
    let blocks = trace.header.as_ref().map_or(Some(65536), |_| None);
    let Ok(traced) = geometry::resolve(
        path,
        trace.header.as_ref(),
        &trace.events,
        blocks,
        None,
        None,
    ) else {
        return;
    };
    // Keep the device small enough to build per input.
    if traced.geometry.blocks_count > 1 << 20 || traced.geometry.groups_count() > 4096 {
        return;
    }
    let policy = Policy::parse("extalloc").expect("preset");
    let alloc = Files::new(Allocator::new(traced.geometry, policy).expect("geometry was accepted"));
    let files = engine::SharedFiles::default();
    let rules = engine::Rules::for_events(trace.events.iter());
    if generations::number_generations(&mut trace.events, &rules).is_err() {
        return;
    }
    if engine::replay_events(&alloc, trace.events.iter(), &files, rules).is_ok() {
        alloc.discard_preallocations();
        alloc.allocator().commit();
        alloc.check().expect("a replay leaves a consistent allocator");
    }
});
