//! Rename, `RENAME_NOREPLACE`, `RENAME_EXCHANGE` and `RENAME_WHITEOUT` (the namespace
//! calls' rules, `names.rs`, hold here: every check before the change, the change in one
//! atomic group of the volume, a compaction after it), and the write-back of a file
//! renamed over another first (ext4's `auto_da_alloc`).

use super::*;

impl Fs {
    /// Before a rename of a regular file over another: the source's cached data written
    /// back, its maps logged ahead of the rename, so no commit carries the rename without
    /// the data (ext4's `auto_da_alloc`: the editor's write-temporary-then-rename reads
    /// old or new content after a crash, never an empty file). Done before the namespace
    /// lock is taken: the writeback waits for the device.
    fn write_back_replacing(&self, from: (u64, &[u8]), to: (u64, &[u8])) -> FsResult<()> {
        let shelved = {
            let ns = self.ns.read();
            [from.0, to.0]
                .iter()
                .any(|&d| ns.dir(d).is_ok_and(|d| d.shelved()))
        };
        // A shelved directory answers through its run's view, else is read back
        // (`runlookup.rs`): a name not seen would not be written back. An error is the
        // rename's to report.
        let found = if shelved {
            let mut ns = self.ns_write();
            let mut entry =
                |(dir, name): (u64, &[u8])| self.entry_for_change(&mut ns, dir, name).ok();
            (entry(from).flatten(), entry(to).flatten())
        } else {
            let ns = self.ns.read();
            let entry = |(dir, name): (u64, &[u8])| {
                (ns.dir(dir).ok())
                    .filter(|d| !d.shelved())
                    .and_then(|d| d.entries.get(name))
            };
            (entry(from), entry(to))
        };
        let src = match found {
            // A kind not known yet (`Entry`) may be a file's: written back too.
            (Some(s), Some(d))
                if s.ino != d.ino
                    && s.kind.is_none_or(|k| k == Kind::File)
                    && d.kind.is_none_or(|k| k == Kind::File) =>
            {
                s.ino
            }
            _ => return Ok(()),
        };
        self.vol.write_back(src)?;
        Ok(())
    }

    /// Moves `name` of `parent` to `newname` of `newparent` (`flags`: [`RENAME_NOREPLACE`],
    /// [`RENAME_EXCHANGE`], [`RENAME_WHITEOUT`], whose whiteout `who` owns; the kernel
    /// checks that `who` may make device nodes). One atomic change: after a crash both
    /// names are as before or as after, never missing. `RENAME_EXCHANGE` with either other
    /// flag is `EINVAL`.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
        who: Caller,
    ) -> FsResult<()> {
        self.live()?;
        check_name(name)?;
        check_name(newname)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || (flags & RENAME_EXCHANGE != 0 && flags != RENAME_EXCHANGE)
        {
            return err(libc::EINVAL);
        }
        if flags == 0 {
            self.write_back_replacing((parent, name), (newparent, newname))?;
        }
        let mut ns = self.ns_write();
        // Large shelved directories answer through their runs' views and take the
        // change through them, staying shelved (`runlookup.rs`).
        let src = self.load_looked_up(&mut ns, parent, name)?;
        let dst = match self.entry_for_change(&mut ns, newparent, newname)? {
            Some(_) => Some(self.load_looked_up(&mut ns, newparent, newname)?),
            None => None,
        };
        // The source and what it replaces leave their directories; the target's gains.
        for (ino, append_too) in [(src, true), (parent, true), (newparent, dst.is_some())] {
            flags::check(&ns, ino, append_too)?;
        }
        if let Some(d) = dst {
            flags::check(&ns, d, true)?;
        }
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Errno(libc::ENOENT))?;
            return self.exchange(&mut ns, (parent, name, src), (newparent, newname, dst));
        }
        if dst.is_some() && flags & RENAME_NOREPLACE != 0 {
            return err(libc::EEXIST);
        }
        if dst == Some(src) {
            return Ok(()); // two names of one inode: nothing to do (POSIX)
        }
        check_move(&ns, src, newparent, dst)?;
        let whiteout = flags & RENAME_WHITEOUT != 0;
        let new_bytes = record_bytes(newname) * if dst.is_some() { 2 } else { 1 };
        let old_bytes = record_bytes(name) * if whiteout { 2 } else { 1 };
        self.reserve(
            &mut ns,
            &[(newparent, new_bytes), (parent, old_bytes)],
            None,
        )?;
        let chunks = spill_chunks(&ns, dst)
            + if whiteout {
                MOVE_CHUNKS + WHITEOUT_CHUNKS
            } else {
                RENAME_CHUNKS
            };
        let group = self.group(chunks)?;
        self.move_entry(&mut ns, (parent, name, src), (newparent, newname, dst))?;
        if whiteout {
            let inode = Inode::new(Kind::CharDevice, 0, who.uid, who.gid, 0);
            let ino = self.vol.volume().create_placed(&inode.encode(), parent)?;
            let kind = Some(Kind::CharDevice);
            self.append(&mut ns, parent, name, Some(Entry { ino, kind }))?;
            ns.add_new(ino, Node::plain(inode));
        }
        group.finish();
        self.compact_due(&mut ns, &[parent, newparent])?;
        // The source read back for the rename, if nothing holds it, leaves memory again.
        self.reap(&mut ns, src)?;
        match dst {
            Some(d) => self.reap(&mut ns, d),
            None => Ok(()),
        }
    }

    /// Inside a group: moves `src` from `(parent, name)` to `(newparent, newname)`,
    /// replacing `dst` there.
    fn move_entry(
        &self,
        ns: &mut Ns,
        (parent, name, src): (u64, &[u8], u64),
        (newparent, newname, dst): (u64, &[u8], Option<u64>),
    ) -> FsResult<()> {
        if let Some(d) = dst {
            self.remove_name(ns, newparent, newname, d)?;
        }
        let entry = ns.entry_of(src)?;
        self.append(ns, newparent, newname, Some(entry))?;
        self.append(ns, parent, name, None)?;
        // A rename onto its own name is answered before the group (as the kernel's).
        debug_assert!(
            (ns.entry_known(newparent, newname)).is_none_or(|e| e == Ok(src)),
            "the new name names the source"
        );
        debug_assert!(
            (ns.entry_known(parent, name)).is_none_or(|e| e.is_err()),
            "the old name is gone"
        );
        if ns.node(src)?.dir.is_some() && parent != newparent {
            ns.node_mut(parent)?.inode.nlink -= 1;
            ns.node_mut(newparent)?.inode.nlink += 1;
            if let Some(d) = ns.node_mut(src)?.dir.as_mut() {
                d.parent = newparent;
            }
        }
        for p in [parent, newparent] {
            touch(&mut ns.node_mut(p)?.inode);
            self.persist(ns, p)?;
        }
        ns.node_mut(src)?.inode.ctime = Time::now();
        self.persist(ns, src)
    }

    /// `RENAME_EXCHANGE`: the two names swap inodes, in one atomic change.
    fn exchange(
        &self,
        ns: &mut Ns,
        (p1, n1, i1): (u64, &[u8], u64),
        (p2, n2, i2): (u64, &[u8], u64),
    ) -> FsResult<()> {
        if i1 == i2 {
            return Ok(());
        }
        let (d1, d2) = (ns.node(i1)?.dir.is_some(), ns.node(i2)?.dir.is_some());
        if (d1 && is_within(ns, p2, i1)?) || (d2 && is_within(ns, p1, i2)?) {
            return err(libc::EINVAL);
        }
        let appends = [(p1, 2 * record_bytes(n1)), (p2, 2 * record_bytes(n2))];
        self.reserve(ns, &appends, None)?;
        let group = self.group(RENAME_CHUNKS)?;
        for (p, n, i) in [(p1, n1, i2), (p2, n2, i1)] {
            let entry = ns.entry_of(i)?;
            self.append(ns, p, n, None)?;
            self.append(ns, p, n, Some(entry))?;
        }
        for (i, is_dir, from, to) in [(i1, d1, p1, p2), (i2, d2, p2, p1)] {
            if is_dir && from != to {
                ns.node_mut(from)?.inode.nlink -= 1;
                ns.node_mut(to)?.inode.nlink += 1;
                if let Some(d) = ns.node_mut(i)?.dir.as_mut() {
                    d.parent = to;
                }
            }
            ns.node_mut(i)?.inode.ctime = Time::now();
            self.persist(ns, i)?;
        }
        for p in [p1, p2] {
            touch(&mut ns.node_mut(p)?.inode);
            self.persist(ns, p)?;
        }
        group.finish();
        debug_assert!(
            (ns.entry_known(p1, n1)).is_none_or(|e| e == Ok(i2))
                && (ns.entry_known(p2, n2)).is_none_or(|e| e == Ok(i1)),
            "the names swapped inodes"
        );
        self.compact_due(ns, &[p1, p2])
    }
}

/// Is `ino` `dir` itself or below it?
fn is_within(ns: &Ns, mut ino: u64, dir: u64) -> FsResult<bool> {
    loop {
        if ino == dir {
            return Ok(true);
        }
        if ino == ROOT {
            return Ok(false);
        }
        ino = ns.dir(ino)?.parent;
    }
}

/// May `src` move into `newparent`, replacing `dst`: not into itself (`EINVAL`), a
/// directory only over an empty directory (`ENOTDIR`, `ENOTEMPTY`), a non-directory only
/// over a non-directory (`EISDIR`).
fn check_move(ns: &Ns, src: u64, newparent: u64, dst: Option<u64>) -> FsResult<()> {
    let src_is_dir = ns.node(src)?.dir.is_some();
    if src_is_dir && is_within(ns, newparent, src)? {
        return err(libc::EINVAL);
    }
    if let Some(d) = dst {
        match (src_is_dir, &ns.node(d)?.dir) {
            (true, None) => return err(libc::ENOTDIR),
            (false, Some(_)) => return err(libc::EISDIR),
            (true, Some(dd)) if !dd.is_empty() => return err(libc::ENOTEMPTY),
            _ => {}
        }
    }
    Ok(())
}
