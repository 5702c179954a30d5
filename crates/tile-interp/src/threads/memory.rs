//! Memory of the thread-level model: where an access lands (global tensors, the block's
//! shared memory at its layout's offsets, per-thread registers), with bounds and alignment
//! checks, shared-memory race tracking between barriers, and bank-conflict counting.

use super::*;

/// Who accesses shared memory, for error messages.
#[derive(Clone, Copy)]
pub(super) enum Who {
    Thread(u32),
    /// A TMA copy issued by this thread.
    Tma(u32),
    /// An `mbarrier_init` by this thread.
    Init(u32),
    /// A wgmma of this warpgroup.
    Wgmma(u32),
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Thread(t) => write!(f, "thread {t}"),
            Who::Tma(t) => write!(f, "a TMA copy by thread {t}"),
            Who::Init(t) => write!(f, "mbarrier_init by thread {t}"),
            Who::Wgmma(g) => write!(f, "a wgmma of warpgroup {g}"),
        }
    }
}

impl RaceTracker {
    /// Whether byte `a` was written by a TMA copy, awaits one, or is an mbarrier's.
    pub(super) fn needs_visibility_check(&self, a: usize) -> bool {
        self.tma_bar[a] != NOBODY || self.unwritten_tma_dst[a] || self.mbarrier[a] != NOBODY
    }
}

impl Machine<'_> {
    pub(super) fn space(&self, buf: BufferId) -> Space {
        match self.m.buffer(buf).scope {
            Scope::Global => Space::Global,
            Scope::Shared | Scope::Cluster => Space::Shared,
            _ => Space::Local,
        }
    }

    /// The bytes an access by thread `t` indexes into (offsets from [`Machine::addresses`]).
    pub(super) fn bytes(&self, buf: BufferId, t: u32) -> &[u8] {
        let b = self.m.buffer(buf);
        match self.space(buf) {
            Space::Global => &self.global[buf.0 as usize],
            Space::Shared => &self.smem,
            Space::Local => {
                let size = b.bytes() as usize;
                &self.local[buf.0 as usize][t as usize * size..(t as usize + 1) * size]
            }
        }
    }

    pub(super) fn bytes_mut(&mut self, buf: BufferId, t: u32) -> &mut [u8] {
        let b = self.m.buffer(buf);
        match self.space(buf) {
            Space::Global => &mut self.global[buf.0 as usize],
            Space::Shared => &mut self.smem,
            Space::Local => {
                let size = b.bytes() as usize;
                &mut self.local[buf.0 as usize][t as usize * size..(t as usize + 1) * size]
            }
        }
    }

    /// Byte offsets of `buf[idx]` for each active thread: into the tensor (global), the
    /// block's shared memory (planned offset, swizzle applied) or the thread's copy of a
    /// local buffer. Checks every index against its dimension, that `width` elements fit,
    /// and that a vector access is aligned to its size.
    pub(super) fn addresses(
        &mut self,
        buf: BufferId,
        idx: &[Expr],
        active: &[u32],
        width: usize,
        what: &str,
    ) -> Result<Vec<usize>, Diagnostic> {
        let b = self.m.buffer(buf);
        if idx.len() != b.extents().len() {
            return Err(self.err(format!("'{}' indexed with {} indices", b.name, idx.len())));
        }
        if b.scope == Scope::Cluster || self.view_roots[buf.0 as usize] {
            // between its cluster_arrive and cluster_wait a thread is ordered with no peer
            if let Some(&t) = active.iter().find(|&&t| self.cluster_pending[t as usize].is_some()) {
                return Err(self.err(format!(
                    "{what} by thread {t} of '{}', a tile the cluster's blocks reach, between its cluster_arrive and cluster_wait (ordered with no peer)",
                    b.name
                )));
            }
        }
        if let (Scope::Cluster, Some(root)) = (b.scope, b.alias_of) {
            // the root tile's element in block `rank` of the cluster
            let ranks = self.eval(&idx[0], active)?;
            let here = self.addresses(root, &idx[1..], active, width, what)?;
            let mut out = Vec::with_capacity(here.len());
            for (k, a) in here.into_iter().enumerate() {
                let q = ranks[k].as_i64();
                if !(0..self.cluster as i64).contains(&q) {
                    return Err(self.err(format!(
                        "{what} by thread {}: block {q} of a cluster of {} ('{}')",
                        active[k], self.cluster, b.name
                    )));
                }
                self.remote_since_cluster_sync = true;
                out.push(a - self.cta_base(active[k]) + q as usize * self.cta_smem);
            }
            return Ok(out);
        }
        let strides = b.strides();
        let mut flat = vec![0i64; active.len()];
        for (d, e) in idx.iter().enumerate() {
            let col = self.eval(e, active)?;
            for (k, v) in col.iter().enumerate() {
                let i = v.as_i64();
                if i < 0 || i >= b.extents()[d] {
                    let scope = if b.scope == Scope::Global {
                        "out of the bounds of tensor"
                    } else {
                        "out of range in"
                    };
                    return Err(self.err(format!(
                        "{what} by thread {}: index {i} of dimension {d} is {scope} '{}' (shape {:?})",
                        active[k],
                        b.name,
                        b.extents()
                    )));
                }
                flat[k] += i * strides[d];
            }
        }
        let eb = b.dtype.bytes() as i64;
        let vec_bytes = width as i64 * eb;
        // a swizzled tile: the element offsets the generated code computes, from the one
        // definition of its layout
        let swizzled = if b.swizzle.is_some() {
            let key = idx.as_ptr() as usize;
            let offset = match self.swizzled.get(&key) {
                Some(e) => e.clone(),
                None => {
                    let e = SharedLayout::of(b).offset(idx);
                    self.swizzled.insert(key, e.clone());
                    e
                }
            };
            Some(self.eval(&offset, active)?.iter().map(|v| v.as_i64()).collect::<Vec<_>>())
        } else {
            None
        };
        let mut out = Vec::with_capacity(active.len());
        for (k, &f) in flat.iter().enumerate() {
            if f + width as i64 > b.num_elements() {
                return Err(self.err(format!(
                    "{what} by thread {}: {width} elements from element {f} run past the end of '{}' ({} elements)",
                    active[k],
                    b.name,
                    b.num_elements()
                )));
            }
            let mut byte = f * eb;
            if let Some(offsets) = &swizzled {
                byte = offsets[k] * eb;
            }
            if let Some(off) = b.shared_offset {
                byte += off as i64 + self.cta_base(active[k]) as i64;
            }
            // global tensors are 16-byte aligned (KernelInfo's "align"), local arrays too
            if width > 1 && byte % vec_bytes != 0 {
                return Err(self.err(format!(
                    "{what} by thread {}: a {vec_bytes}-byte access to '{}' at byte {byte} is not aligned",
                    active[k], b.name
                )));
            }
            out.push(byte as usize);
        }
        Ok(out)
    }

    pub(super) fn race(&self, kind: &str, t: u32, other: u32, byte: usize) -> Diagnostic {
        let who = if other == SEVERAL { "other threads".to_string() } else { format!("thread {other}") };
        self.err(format!("shared-memory race ({kind}): thread {t} and {who} touch shared byte {byte} with no barrier between"))
    }

    /// Accesses of a byte from two blocks of the cluster, one of them a write, need a
    /// `cluster_sync` between them (distributed shared memory; checked where the kernel has
    /// cluster views).
    fn track_cluster(&mut self, t: u32, at: usize, len: usize, write: bool) -> Result<(), Diagnostic> {
        if !self.dsmem {
            return Ok(());
        }
        let block = t as usize / self.cta_threads;
        let epoch = self.cluster_epoch + 1;
        for a in at..at + len {
            let r = &mut self.races;
            let other_wrote = r.x_write_epoch[a] == epoch && r.x_write_block[a] as usize != block;
            let others_read =
                write && r.x_read_epoch[a] == epoch && r.x_read_blocks[a] & !(1u16 << block) != 0;
            if other_wrote || others_read {
                let (kind, other) = if other_wrote {
                    (
                        if write { "write after write" } else { "read after write" },
                        r.x_write_block[a] as usize,
                    )
                } else {
                    ("write after read", r.x_read_blocks[a].trailing_zeros() as usize)
                };
                return Err(self.err(format!(
                    "shared-memory race across the cluster ({kind}): thread {t} of block {block} and block {other} touch byte {} of block {}'s shared memory with no cluster_sync between",
                    a % self.cta_smem,
                    a / self.cta_smem
                )));
            }
            if write {
                r.x_write_epoch[a] = epoch;
                r.x_write_block[a] = block as u8;
                r.x_read_epoch[a] = 0;
                r.x_read_blocks[a] = 0;
            } else if r.x_read_epoch[a] == epoch {
                r.x_read_blocks[a] |= 1 << block;
            } else {
                r.x_read_epoch[a] = epoch;
                r.x_read_blocks[a] = 1 << block;
            }
        }
        Ok(())
    }

    pub(super) fn track_read(&mut self, t: u32, at: usize, len: usize) -> Result<(), Diagnostic> {
        self.track_cluster(t, at, len, false)?;
        let seq = self.mbar.arrivals(t);
        let carr = self.cluster_arrivals(t);
        for a in at..at + len {
            if self.races.in_flight[a] > 0 {
                return Err(self.err(format!(
                    "thread {t} reads shared byte {a} while a cp.async into it is in flight (missing async_wait)"
                )));
            }
            if self.races.needs_visibility_check(a) {
                self.check_mbarrier_visibility(Who::Thread(t), "reads", std::slice::from_ref(&t), a)?;
            }
            if self.unordered_write(t, a) {
                return Err(self.race("read after write", t, self.races.writer[a], a));
            }
            if self.races.read_epoch[a] == self.epoch && self.races.reader[a] != t {
                self.races.reader[a] = SEVERAL;
                self.races.read_seq[a] = self.races.read_seq[a].max(seq);
                self.races.read_carr[a] = self.races.read_carr[a].max(carr);
                self.races.readers_lo[a] = self.races.readers_lo[a].min(t);
                self.races.readers_hi[a] = self.races.readers_hi[a].max(t);
            } else {
                self.races.read_epoch[a] = self.epoch;
                self.races.reader[a] = t;
                self.races.read_seq[a] = seq;
                self.races.read_carr[a] = carr;
                self.races.readers_lo[a] = t;
                self.races.readers_hi[a] = t;
            }
        }
        Ok(())
    }

    /// Did another thread write shared byte `a` since the last barrier, with no mbarrier
    /// phase ordering that write before thread `t` now?
    fn unordered_write(&self, t: u32, a: usize) -> bool {
        let w = self.races.writer[a];
        self.races.write_epoch[a] == self.epoch
            && w != t
            && !self.mbar.ordered_after(t, w, self.races.write_seq[a])
            && self.races.write_carr[a] >= self.cluster_waits(t)
    }

    /// The cluster barrier phases thread `t` has arrived at (`cluster_arrive`; each thread
    /// arrives once per phase): what it does now is ordered before the wait of any later
    /// phase.
    pub(super) fn cluster_arrivals(&self, t: u32) -> u32 {
        self.cluster_pending[t as usize].map_or(self.cluster_phase, |p| p + 1)
    }

    /// The cluster barrier phases thread `t` has waited for (`cluster_wait`): what any
    /// thread did before arriving at one of them is ordered before what `t` does now.
    pub(super) fn cluster_waits(&self, t: u32) -> u32 {
        self.cluster_pending[t as usize].unwrap_or(self.cluster_phase)
    }

    /// Did other threads read shared byte `a` since the last barrier, with no mbarrier phase
    /// ordering those reads before thread `t` now? (Several readers: each of the lowest to
    /// the highest must have arrived after its read, counted from the most arrivals any had.)
    fn unordered_read(&self, t: u32, a: usize) -> bool {
        let r = self.races.reader[a];
        if self.races.read_epoch[a] != self.epoch || r == t || self.races.read_carr[a] < self.cluster_waits(t)
        {
            return false;
        }
        let seq = self.races.read_seq[a];
        if r == SEVERAL {
            let (lo, hi) = (self.races.readers_lo[a], self.races.readers_hi[a]);
            !(lo..=hi).all(|o| o == t || self.mbar.ordered_after(t, o, seq))
        } else {
            !self.mbar.ordered_after(t, r, seq)
        }
    }

    /// What any write to shared byte `a` must respect, whichever proxy makes it: no
    /// `cp.async` in flight into it, no pending wgmma reading it, not a live mbarrier's word.
    pub(super) fn check_overwrite(&self, who: Who, a: usize) -> Result<(), Diagnostic> {
        if self.races.in_flight[a] > 0 {
            return Err(
                self.err(format!("{who} writes shared byte {a} while a cp.async into it is in flight"))
            );
        }
        if self.races.bulk_reads[a] > 0 {
            return Err(self.err(format!(
                "{who} writes shared byte {a} while a TMA store that reads it is pending (no bulk_wait read retired its group)"
            )));
        }
        if self.races.wgmma_reads[a] > 0 {
            return Err(self.err(format!(
                "{who} writes shared byte {a} while a wgmma that reads it is pending (no wgmma_wait retired its group)"
            )));
        }
        if self.races.mbarrier[a] != NOBODY {
            return Err(self.err(format!(
                "{who} writes shared byte {a}, part of the mbarrier {} (only mbarrier instructions may touch it)",
                self.mbar.name(self.races.mbarrier[a] as usize)
            )));
        }
        Ok(())
    }

    /// A byte a TMA copy wrote may only be accessed by threads that waited on the phase of
    /// the mbarrier that copy completes on (`readers`: the thread, or a wgmma's warpgroup,
    /// each of which must have); a byte of a TMA destination that nothing has written yet
    /// may not be read (a wait that returned before its copy was issued).
    pub(super) fn check_mbarrier_visibility(
        &self,
        who: Who,
        how: &str,
        readers: &[u32],
        a: usize,
    ) -> Result<(), Diagnostic> {
        if self.races.mbarrier[a] != NOBODY {
            return Err(self.err(format!(
                "{who} {how} shared byte {a}, part of the mbarrier {} (only mbarrier instructions may touch it)",
                self.mbar.name(self.races.mbarrier[a] as usize)
            )));
        }
        if how == "reads" && self.races.unwritten_tma_dst[a] {
            let b = self.buffer_at(a);
            return Err(self.err(format!(
                "{who} reads bytes of {b} (shared byte {a}) before any TMA copy wrote them (a wait that returned too early: its parity?)"
            )));
        }
        let slot = self.races.tma_bar[a];
        if slot != NOBODY {
            let need = self.races.tma_phase[a];
            if let Some(&t) = readers.iter().find(|&&t| self.mbar.observed(t, slot as usize) < need) {
                let bar = self.mbar.name(slot as usize);
                let buf = &self.m.buffers[self.races.tma_buf[a] as usize].name;
                let seen = self.mbar.observed(t, slot as usize);
                return Err(self.err(format!(
                    "{who} {how} bytes of {buf} that a TMA copy on {bar} wrote, without waiting for that phase (shared byte {a}; the copy completes phase {} of {bar}, thread {t} has seen {seen} phase(s) complete)",
                    need - 1
                )));
            }
        }
        Ok(())
    }

    /// The name of the shared buffer (a TMA destination first) that holds byte `a`.
    fn buffer_at(&self, a: usize) -> String {
        let a = if self.cta_smem > 0 { a % self.cta_smem } else { a };
        let holds = |b: &&tile_ir::Buffer| {
            b.scope == Scope::Shared
                && b.shared_offset.is_some_and(|o| (o as usize..o as usize + b.bytes() as usize).contains(&a))
        };
        let dst = self.tma_destinations.iter().map(|d| self.m.buffer(*d)).find(|b| holds(b));
        dst.or_else(|| self.m.buffers.iter().find(holds))
            .map_or_else(|| "shared memory".into(), |b| b.name.clone())
    }

    pub(super) fn check_write(&self, t: u32, at: usize, len: usize) -> Result<(), Diagnostic> {
        for a in at..at + len {
            self.check_overwrite(Who::Thread(t), a)?;
            if self.races.tma_bar[a] != NOBODY {
                self.check_mbarrier_visibility(Who::Thread(t), "overwrites", std::slice::from_ref(&t), a)?;
            }
            if self.unordered_write(t, a) {
                return Err(self.race("write after write", t, self.races.writer[a], a));
            }
            if self.unordered_read(t, a) {
                return Err(self.race("write after read", t, self.races.reader[a], a));
            }
        }
        Ok(())
    }

    pub(super) fn track_write(&mut self, t: u32, at: usize, len: usize) -> Result<(), Diagnostic> {
        self.track_cluster(t, at, len, true)?;
        self.check_write(t, at, len)?;
        let fences = self.proxy_fences[t as usize].len() as u32;
        let seq = self.mbar.arrivals(t);
        let carr = self.cluster_arrivals(t);
        for a in at..at + len {
            self.races.write_epoch[a] = self.epoch;
            self.races.writer[a] = t;
            self.races.write_seq[a] = seq;
            self.races.write_carr[a] = carr;
            self.races.fence_mark[a] = fences;
            // an ordinary write replaces what a TMA copy wrote
            self.races.tma_bar[a] = NOBODY;
            self.races.unwritten_tma_dst[a] = false;
        }
        Ok(())
    }

    /// Count the wavefronts a shared access of `bytes` per lane needs, per warp.
    pub(super) fn count_banks(&mut self, what: &str, active: &[u32], addrs: &[usize], bytes: usize) {
        let mut k = 0;
        while k < active.len() {
            let warp = active[k] / 32;
            let mut end = k;
            while end < active.len() && active[end] / 32 == warp {
                end += 1;
            }
            // lanes are served in phases of 128 bytes: 32 lanes of ≤4 bytes, 16 of 8, 8 of 16
            let per_phase = (128 / bytes.max(4)).max(1);
            let (mut wavefronts, mut ideal) = (0u64, 0u64);
            for phase in addrs[k..end].chunks(per_phase) {
                let mut words: Vec<usize> = Vec::new();
                for &a in phase {
                    for w in (a / 4)..(a + bytes).div_ceil(4) {
                        words.push(w);
                    }
                }
                words.sort_unstable();
                words.dedup();
                let mut per_bank = [0u64; 32];
                for w in &words {
                    per_bank[w % 32] += 1;
                }
                wavefronts += per_bank.iter().copied().max().unwrap_or(0).max(1);
                ideal += (words.len() as u64).div_ceil(32).max(1);
            }
            let e = self
                .banks
                .entry(what.to_string())
                .or_insert_with(|| BankConflicts { what: what.to_string(), ..Default::default() });
            e.requests += 1;
            e.wavefronts += wavefronts;
            e.ideal += ideal;
            k = end;
        }
    }
}
