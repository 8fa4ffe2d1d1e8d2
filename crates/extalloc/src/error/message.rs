//! Parts of [`Error`](enum@super::Error)'s messages that depend on the values they carry,
//! so one variant reads true in each of its cases.

/// The head of a `NoSpace` message: what was asked and why it did not fit. A shortfall
/// in the count of free blocks ("only 3 free") is told apart from free space too broken
/// up to hold the least run accepted ("40 free, none in a run of 8"): the remedies differ
/// (room made, against space kept whole).
pub(super) fn no_space_head(requested: u64, min_len: u64, free_blocks: u64) -> String {
    let asked = if min_len == requested {
        format!("{requested} blocks requested")
    } else {
        format!("{requested} blocks requested (at least {min_len})")
    };
    if free_blocks < min_len {
        format!("{asked}, only {free_blocks} free")
    } else {
        format!("{asked}, {free_blocks} free, none in a run of {min_len}")
    }
}

#[cfg(test)]
mod tests {
    use super::no_space_head;

    #[test]
    fn a_count_short_and_a_run_short_read_apart() {
        assert_eq!(
            no_space_head(5000, 5000, 3496),
            "5000 blocks requested, only 3496 free"
        );
        assert_eq!(
            no_space_head(64, 8, 40),
            "64 blocks requested (at least 8), 40 free, none in a run of 8"
        );
        assert_eq!(
            no_space_head(64, 8, 3),
            "64 blocks requested (at least 8), only 3 free"
        );
    }
}
