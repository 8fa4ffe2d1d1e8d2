//! `extalloc policies`: the library's presets and policy keys, printed as a table (an
//! admin command: it needs the library only, not the lab).
//!
//! Data structures: none of its own. Invariant: every key [`extalloc::Policy::keys`] lists
//! is printed with each preset's value. Locks: none.

/// `extalloc policies`: the presets, and the keys a spec may set with each preset's value
/// and which design the key's other values reproduce ([`extalloc::KeyGroup`]).
pub fn print_policies() {
    use extalloc::Policy;
    println!(
        "presets: {} (extalloc is the default: the design extalloc runs)",
        extalloc::PRESETS.join(", ")
    );
    println!("keys (spec: preset:key=value:key=value; lists: spec,spec):");
    let presets: Vec<Policy> = ["extalloc", "ext4-2025", "ext4-base"]
        .iter()
        .map(|p| Policy::preset(p).expect("a preset"))
        .collect();
    println!(
        "  {:<26} {:<10} {:<10} {:<10} {:<10} takes",
        "key", "extalloc", "ext4-2025", "ext4-base", "group"
    );
    for (key, values) in Policy::keys() {
        let v: Vec<String> = presets
            .iter()
            .map(|p| p.value(key).expect("a key"))
            .collect();
        let group = Policy::key_group(key).expect("a key").name();
        println!(
            "  {key:<26} {:<10} {:<10} {:<10} {group:<10} {values}",
            v[0], v[1], v[2]
        );
    }
    println!(
        "groups: tuning = a knob of extalloc's design; ext4-2025 = where extalloc departs \
         from ext4 as of its 2025 series; ext4-base = what that series changed (the values \
         of ext4 before it). The last two exist for the lab's comparisons."
    );
}
