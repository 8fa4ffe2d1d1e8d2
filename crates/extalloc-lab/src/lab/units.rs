//! Numbers in the lab's printed tables, each with the unit that fits it: latencies in
//! ns/µs/ms/s, rates with k/M/G, sizes in KiB/MiB/GiB/TiB, chosen per value so a 66 ms p99
//! reads as such beside a 160 ns one.
//!
//! Data structures: none (pure functions). Invariant: every text keeps three significant
//! digits (whole numbers below 1000 in the smallest unit), so no value's order of
//! magnitude is hidden by its neighbours'. Lock order: none.

/// A latency in nanoseconds: `160 ns`, `3.23 µs`, `66.2 ms`, `1.50 s`.
pub fn ns(v: u64) -> String {
    scaled(
        v as f64,
        &[(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")],
    )
}

/// A rate (per second): `950`, `22.9 k`, `16.7 M`.
pub fn rate(v: f64) -> String {
    scaled(v, &[(1.0, ""), (1e3, " k"), (1e6, " M"), (1e9, " G")])
        .trim_end()
        .to_string()
}

/// A size given in KiB: `4 KiB`, `1.00 MiB`, `16.0 GiB`.
pub fn kib(v: f64) -> String {
    let k = 1024.0;
    scaled(
        v,
        &[(1.0, "KiB"), (k, "MiB"), (k * k, "GiB"), (k * k * k, "TiB")],
    )
}

/// `min-max` of a spread in `fmt`'s units, or `-` for a single value.
pub fn spread(values: &[f64], fmt: impl Fn(f64) -> String) -> String {
    match min_max(values) {
        Some((lo, hi)) if values.len() > 1 => format!("{}-{}", fmt(lo), fmt(hi)),
        _ => "-".into(),
    }
}

/// The smallest and largest of `values` (`None` when empty).
pub fn min_max(values: &[f64]) -> Option<(f64, f64)> {
    let lo = values.iter().copied().reduce(f64::min)?;
    let hi = values.iter().copied().reduce(f64::max)?;
    Some((lo, hi))
}

/// `v` in the largest unit of `units` (ascending `(scale, suffix)`) it reaches, to three
/// significant digits; whole below the second unit.
fn scaled(v: f64, units: &[(f64, &str)]) -> String {
    let (scale, suffix) = units
        .iter()
        .rev()
        .find(|(s, _)| v.abs() >= *s * 0.9995)
        .unwrap_or(&units[0]);
    let x = v / scale;
    let sep = if suffix.is_empty() || suffix.starts_with(' ') {
        ""
    } else {
        " "
    };
    if *scale == units[0].0 {
        return format!("{x:.0}{sep}{suffix}");
    }
    let digits = if x.abs() >= 99.95 {
        0
    } else if x.abs() >= 9.995 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{sep}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_gets_its_unit() {
        assert_eq!(ns(160), "160 ns");
        assert_eq!(ns(3225), "3.23 µs");
        assert_eq!(ns(66_191_359), "66.2 ms");
        assert_eq!(ns(163_708_927), "164 ms");
        assert_eq!(ns(1_500_000_000), "1.50 s");
        assert_eq!(ns(999), "999 ns");
        assert_eq!(rate(950.0), "950");
        assert_eq!(rate(22_926.0), "22.9 k");
        assert_eq!(rate(16_739_545.0), "16.7 M");
        assert_eq!(kib(4.0), "4 KiB");
        assert_eq!(kib(1024.0), "1.00 MiB");
        assert_eq!(kib(16.0 * 1024.0 * 1024.0), "16.0 GiB");
        assert_eq!(spread(&[2.2e6, 8.6e6, 5.0e6], rate), "2.20 M-8.60 M");
        assert_eq!(spread(&[3.0], rate), "-");
        assert_eq!(min_max(&[]), None);
    }
}
