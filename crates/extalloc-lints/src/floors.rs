//! What the assertion rule keeps between runs, beside this crate's manifest: the
//! ratcheted folders' floors (`assertion-floors.txt`: the share of state-changing
//! functions that assert may only go up) and the known offenders of the strict folders
//! (`known-offenders.txt`: a list that only shrinks).
//!
//! Data structures: none of their own (the files' lines). Invariant: an update raises a
//! floor or drops a known offender, never the other way. Locks: none.

use crate::assertions::{Offender, Summary};
use anyhow::{bail, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The floors file's folders and shares.
pub fn read_floors(path: &Path) -> Result<BTreeMap<String, f64>> {
    let mut floors = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(floors);
    };
    for l in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let mut parts = l.split_whitespace();
        match (parts.next(), parts.next().map(str::parse::<f64>)) {
            (Some(folder), Some(Ok(pct))) => {
                floors.insert(folder.to_string(), pct);
            }
            _ => bail!(
                "{}: a line that is not `FOLDER PERCENT`: {l}",
                path.display()
            ),
        }
    }
    Ok(floors)
}

/// Checks each ratcheted folder's share against its floor (messages to `say`); true when
/// one fell below. With `update` (or a folder without a floor) writes the floors.
pub fn ratchet(rows: &[(String, Summary)], path: &Path, update: bool) -> Result<bool> {
    let old = read_floors(path)?;
    let mut floors = old.clone();
    let mut failed = false;
    for (root, s) in rows {
        let now = s.share();
        match old.get(root) {
            None => {
                floors.insert(root.clone(), now);
            }
            Some(&floor) if now > floor + 0.05 => {
                if update {
                    floors.insert(root.clone(), now);
                } else {
                    println!(
                        "RATCHET {root}: {now:.1} % of state-changing functions assert, above the floor {floor:.1} %: run with --update-floors"
                    );
                }
            }
            Some(&floor) if now < floor - 0.05 => {
                println!(
                    "RATCHET {root}: {now:.1} % of state-changing functions assert, below the floor {floor:.1} %: add assertions where state changes"
                );
                failed = true;
            }
            Some(_) => {}
        }
    }
    if update || rows.iter().any(|(r, _)| !old.contains_key(r)) {
        let mut text = String::from(
            "# Floors of `extalloc-lints assertions`: per ratcheted folder, the share (%)\n\
             # of state-changing functions that assert. They may only go up.\n",
        );
        for (root, pct) in &floors {
            text += &format!("{root} {pct:.1}\n");
        }
        std::fs::write(path, text)?;
    }
    Ok(failed)
}

/// The known offenders' keys ([`Offender::key`]), one a line.
pub fn read_known(path: &Path) -> Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.trim().to_string())
        .collect())
}

/// Splits `bad` into the offenders not in `known` (new: the rule fails) and the known keys
/// no longer offending (gone: the list may drop them).
pub fn against_known(bad: &[Offender], known: &BTreeSet<String>) -> (Vec<Offender>, Vec<String>) {
    let now: BTreeSet<String> = bad.iter().map(Offender::key).collect();
    let new = bad
        .iter()
        .filter(|o| !known.contains(&o.key()))
        .cloned()
        .collect();
    let gone = known.difference(&now).cloned().collect();
    (new, gone)
}

/// Writes the known offenders still offending (the list only shrinks: a new offender is
/// never added by an update; assert in it instead).
pub fn write_known(path: &Path, known: &BTreeSet<String>, bad: &[Offender]) -> Result<()> {
    let now: BTreeSet<String> = bad.iter().map(Offender::key).collect();
    let mut text = String::from(
        "# State-changing functions of the strict folders that assert nothing, found when the\n\
         # assertion report moved from regular expressions to syn (which read `pub(super)`'s\n\
         # parentheses as the parameter list and so missed their `&mut self`). The list only\n\
         # shrinks: `extalloc-lints assertions --update-floors` drops what now asserts; a\n\
         # function not listed here fails the run.\n",
    );
    for k in known.intersection(&now) {
        text += k;
        text.push('\n');
    }
    std::fs::write(path, text)?;
    Ok(())
}
