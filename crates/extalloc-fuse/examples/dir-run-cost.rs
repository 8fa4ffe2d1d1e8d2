//! What a large directory's compaction writes and costs, as a run (`dir/run.rs`) and as a
//! reset and an add per entry: bytes, the time to build each, and the time to replay each
//! into entries (what a directory's first use after a mount does), for N entries of
//! 8-byte names made in an order that is not theirs (the median of 5 rounds each).
//!
//!     cargo run --release -p extalloc-fuse --example dir-run-cost [N ...]
//!
//! Default N: 10,000, 100,000 and 1,000,000. One line per N on stdout.

use extalloc_fuse::dir::{compacted, run, runbuild, DirLog};
use std::time::Instant;

/// The median of 5 timings of `f`, in milliseconds, and its last result.
fn median<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[2], last.expect("five rounds"))
}

fn main() {
    let parsed: Result<Vec<u64>, _> = std::env::args().skip(1).map(|a| a.parse()).collect();
    let counts = match parsed {
        Ok(v) if !v.is_empty() => v,
        Ok(_) => vec![10_000, 100_000, 1_000_000],
        Err(e) => {
            eprintln!("dir-run-cost: an entry count is a number: {e}");
            std::process::exit(2);
        }
    };
    let key = run::Key::random().expect("getrandom");
    for n in counts {
        // Made in an order that is not the names' (as a directory's names seldom are): a
        // permutation of 0..n, the multiplier odd and not a multiple of 5.
        let names: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("f{:07}", i * 2_654_435_761 % n).into_bytes())
            .collect();
        let entries = || {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_slice(), (i as u64, None)))
        };
        let (run_ms, r) = median(|| runbuild::build(entries(), key));
        let (log_ms, l) = median(|| compacted(entries().collect::<Vec<_>>().into_iter()));
        let (run_parse, rp) = median(|| DirLog::parse(&r));
        let (log_parse, lp) = median(|| DirLog::parse(&l));
        assert!(
            rp.entries == lp.entries && rp.entries.len() as u64 == n,
            "both give the entries"
        );
        println!(
            "{n} entries: run {} KiB built in {run_ms:.1} ms, replayed in {run_parse:.1} ms; \
             reset and adds {} KiB built in {log_ms:.1} ms, replayed in {log_parse:.1} ms",
            r.len() >> 10,
            l.len() >> 10
        );
    }
}
