//! Keyed lookups at scale: `N` 100-byte blobs under keys `key-0 ..` on a 2 GiB file
//! device (by [`Volume::put`], or by [`Volume::put_keyed`] with `keyed`), a checkpoint,
//! then 200 [`Volume::get_keyed`] of random keys, each checked. Prints the puts' time, the
//! first lookup's (which builds the volume's key index) and the median of the others.
//!
//! `cargo run --release -p extalloc --example keyed_lookups -- [N] [keyed]` (N 100000 by
//! default; the figures of docs/results.md, "Keyed lookups").

use extalloc::volume::Volume;
use std::time::Instant;

fn main() -> extalloc::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(100_000, |a| a.parse().expect("N: a number of blobs"));
    let keyed = args.next().is_some_and(|a| a == "keyed");
    let path = std::env::temp_dir().join(format!("extalloc-keyed-{}.img", std::process::id()));
    let vol = Volume::mkfs_file(&path, 2 << 30)?;
    let t = Instant::now();
    for i in 0..n {
        let (key, blob) = (format!("key-{i}").into_bytes(), [i as u8; 100]);
        match keyed {
            true => vol.put_keyed(&key, &blob)?,
            false => vol.put(&key, &blob)?,
        };
    }
    vol.checkpoint()?;
    let puts = t.elapsed().as_secs_f64();
    let mut times = Vec::new();
    let mut x = 12345u64;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (x >> 33) % n;
        let t = Instant::now();
        let got = vol.get_keyed(format!("key-{i}").as_bytes())?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(got, Some(vec![i as u8; 100]), "key-{i}'s blob");
    }
    let first = times[0];
    let mut rest = times[1..].to_vec();
    rest.sort_by(f64::total_cmp);
    println!(
        "{n} blobs ({}): puts {puts:.1} s; get_keyed first {first:.0} us, median of the next {} {:.1} us",
        if keyed { "put_keyed" } else { "put" },
        rest.len(),
        rest[rest.len() / 2]
    );
    vol.close()?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}
