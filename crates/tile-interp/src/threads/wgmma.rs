//! `wgmma.mma_async` and its ordering instructions (sm_90a), over whole warpgroups.
//!
//! A shared operand is read the way the hardware reads it: the model builds the 64-bit
//! matrix descriptor the generated code builds (start = the shared address of the
//! operand's first element, `SharedLayout::offset` as codegen writes it, on a shared base
//! aligned to `Module::shared_base_align`; fields from `SharedLayout::wgmma_descriptor`;
//! `MatrixDescriptor::encode`), then *decodes* it on its own ([`Descriptor`]: start, LBO,
//! SBO and swizzle mode → the physical byte address of each element, the mode's XOR
//! applied to that address, PTX ISA "Matrix Descriptor Format" and "Shared Memory Matrix
//! Layout"). A descriptor with a wrong stride or mode reads wrong bytes, which the
//! differential check sees.
//!
//! The result is asynchronous: it is computed at issue (later wgmmas of the same group
//! chain on it) but lands in the accumulator registers only at the `wgmma_wait` that
//! retires its commit group. Until then the accumulator and A registers are the
//! wgmma's: any other access is an error, as is a write to the shared bytes it reads.
//! What the model reports (each a compiler bug, PTX ISA §9.7.15.7 and "Async Proxy"):
//! a wgmma with no `wgmma_fence` before it since its accumulator or A registers were
//! last accessed by another instruction (or none at all in the block); one that reads
//! shared bytes whose last ordinary write (store, vector store, stmatrix, landed
//! `cp.async`) its writer did not follow with `fence_proxy_async` and then a barrier;
//! bytes a TMA copy wrote (async proxy: no fence needed) that a thread of its warpgroup
//! read without waiting on the copy's mbarrier phase; wgmmas still pending at the end of
//! the block.

use super::*;

/// The fields of a `wgmma` shared-memory matrix descriptor, decoded from its 64 bits as
/// the hardware reads them (bits 13–0 start address, 29–16 leading byte offset, 45–32
/// stride byte offset, all in 16-byte units; 51–49 base offset; 63–62 swizzle mode: 0
/// none, 1 = 128-byte, 2 = 64-byte, 3 = 32-byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub start: i64,
    pub lbo: i64,
    pub sbo: i64,
    pub base_offset: u32,
    pub mode: u32,
}

impl Descriptor {
    pub fn decode(bits: u64) -> Descriptor {
        let field = |shift: u32| (((bits >> shift) & 0x3FFF) << 4) as i64;
        Descriptor {
            start: field(0),
            lbo: field(16),
            sbo: field(32),
            base_offset: ((bits >> 49) & 7) as u32,
            mode: (bits >> 62) as u32,
        }
    }

    /// Bytes of one swizzled row (the span the 16-byte chunks are permuted in): 128, 64
    /// or 32; None for mode 0 (no swizzle, the interleaved core-matrix layout).
    pub fn span(&self) -> Option<i64> {
        match self.mode {
            1 => Some(128),
            2 => Some(64),
            3 => Some(32),
            _ => None,
        }
    }

    /// The physical shared byte address of element `(mn, k)` of the operand (A: row `mn`
    /// of M; B: column `mn` of N) of `eb`-byte elements, swizzle applied. K-major: rows of
    /// K, each one span, 8-row groups `sbo` apart; MN-major: rows of M/N, each one span
    /// (`span / eb` elements), 8-row groups of K `sbo` apart, panels along M/N `lbo` apart.
    /// Swizzled modes only (mode 0 is never generated and not modelled).
    pub fn address(&self, mn: i64, k: i64, k_major: bool, eb: i64) -> i64 {
        let span = self.span().expect("a swizzled descriptor");
        let linear = if k_major {
            self.start + (mn / 8) * self.sbo + (mn % 8) * span + k * eb
        } else {
            let per_row = span / eb;
            self.start + (mn / per_row) * self.lbo + (k / 8) * self.sbo + (k % 8) * span + (mn % per_row) * eb
        };
        swizzle_address(self.mode, linear)
    }
}

/// The swizzle of a mode on a physical shared address: the 16-byte chunk index inside a
/// span XORs the 128-byte line index (128B: bits 6–4 ^= bits 9–7; 64B: bits 5–4 ^= bits
/// 8–7; 32B: bit 4 ^= bit 7).
pub fn swizzle_address(mode: u32, address: i64) -> i64 {
    let mask = match mode {
        1 => 7,
        2 => 3,
        3 => 1,
        _ => 0,
    };
    address ^ (((address >> 7) & mask) << 4)
}

/// Per local buffer that a wgmma uses as accumulator or A operand, per thread byte: how
/// many pending wgmmas write or read it, whether another instruction accessed it since the
/// warpgroup's last `wgmma_fence`, and the newest pending value (what a later wgmma of the
/// same chain reads).
pub(super) struct RegisterTracker {
    pending_writes: Vec<u16>,
    pending_reads: Vec<u16>,
    touched: Vec<bool>,
    shadow: Vec<u8>,
}

impl RegisterTracker {
    pub(super) fn new(bytes: usize) -> RegisterTracker {
        RegisterTracker {
            pending_writes: vec![0; bytes],
            pending_reads: vec![0; bytes],
            touched: vec![false; bytes],
            shadow: vec![0; bytes],
        }
    }
    pub(super) fn reset(&mut self) {
        self.pending_writes.fill(0);
        self.pending_reads.fill(0);
        self.touched.fill(false);
    }
}

/// One issued wgmma, until its group retires.
pub(super) struct PendingWgmma {
    c: BufferId,
    /// Per thread: the first byte of its accumulator registers and their new bytes.
    results: Vec<(u32, usize, Vec<u8>)>,
    /// The register A operand: its buffer and, per thread, the first of its 16 bytes.
    a_registers: Option<(BufferId, Vec<(u32, usize)>)>,
    /// Shared bytes it reads.
    shared: Vec<usize>,
}

/// One warpgroup's wgmma state: whether it ran a `wgmma_fence` yet, the wgmmas issued
/// since the last commit, and the committed groups, oldest first.
#[derive(Default)]
pub(super) struct WarpgroupState {
    fenced: bool,
    open: Vec<PendingWgmma>,
    groups: std::collections::VecDeque<Vec<PendingWgmma>>,
}

impl WarpgroupState {
    fn pending(&self) -> usize {
        self.open.len() + self.groups.iter().map(Vec::len).sum::<usize>()
    }
}

/// Bytes of the register A operand per thread: 8 16-bit elements.
const A_REGISTER_BYTES: usize = 16;

impl Machine<'_> {
    /// The warpgroup-collective instructions need all 128 threads of each warpgroup they
    /// touch (`.sync.aligned`).
    pub(super) fn full_warpgroups(&self, active: &[u32], what: &str) -> Result<(), Diagnostic> {
        let mut count = std::collections::BTreeMap::<u32, u32>::new();
        for &t in active {
            *count.entry(t / 128).or_default() += 1;
        }
        if let Some((g, c)) = count.iter().find(|(g, c)| **c != 128 || (**g + 1) * 128 > self.threads as u32)
        {
            return Err(self.err(format!(
                "{what} run by {c} threads of warpgroup {g} (it needs all 128 of its threads)"
            )));
        }
        Ok(())
    }

    /// An access by another instruction than a wgmma to `len` register bytes of thread
    /// `t`'s copy of `buf` from byte `at`: an error while a pending wgmma owns them; it
    /// asks for a `wgmma_fence` before the next wgmma that uses them.
    pub(super) fn touch_registers(
        &mut self,
        buf: BufferId,
        t: u32,
        at: usize,
        len: usize,
        write: bool,
    ) -> Result<(), Diagnostic> {
        let size = self.m.buffer(buf).bytes() as usize;
        let Some(r) = self.registers[buf.0 as usize].as_mut() else { return Ok(()) };
        let from = t as usize * size + at;
        let busy = (from..from + len).find(|&i| r.pending_writes[i] > 0 || r.pending_reads[i] > 0);
        r.touched[from..from + len].fill(true);
        if let Some(i) = busy {
            let b = self.m.buffer(buf);
            let element = (i - t as usize * size) / b.dtype.bytes() as usize;
            let how = if write { "writes" } else { "reads" };
            return Err(self.err(format!(
                "thread {t} {how} element {element} of '{}' while a wgmma that uses it is pending (no wgmma_wait retired its group)",
                b.name
            )));
        }
        Ok(())
    }

    pub(super) fn wgmma_fence(&mut self, active: &[u32]) -> Result<(), Diagnostic> {
        self.full_warpgroups(active, "wgmma_fence")?;
        for &t in active {
            self.warpgroups[t as usize / 128].fenced = true;
            for (b, r) in self.registers.iter_mut().enumerate() {
                if let Some(r) = r {
                    let size = self.m.buffers[b].bytes() as usize;
                    r.touched[t as usize * size..(t as usize + 1) * size].fill(false);
                }
            }
        }
        Ok(())
    }

    pub(super) fn wgmma_commit(&mut self, active: &[u32]) -> Result<(), Diagnostic> {
        self.full_warpgroups(active, "wgmma_commit")?;
        for group in active.chunks(128) {
            let wg = &mut self.warpgroups[group[0] as usize / 128];
            let issued = std::mem::take(&mut wg.open);
            wg.groups.push_back(issued);
        }
        Ok(())
    }

    /// `wgmma.wait_group pending`: retire all but the newest `pending` committed groups of
    /// each warpgroup: their results land in the registers, which (and the shared bytes
    /// they read) are free again.
    pub(super) fn wgmma_wait(&mut self, active: &[u32], w: &inst::WgmmaWait) -> Result<(), Diagnostic> {
        self.full_warpgroups(active, "wgmma_wait")?;
        for group in active.chunks(128) {
            let g = group[0] as usize / 128;
            while self.warpgroups[g].groups.len() > w.pending as usize {
                let retired = self.warpgroups[g].groups.pop_front().expect("a group");
                for p in retired {
                    self.retire(p, w)?;
                }
            }
        }
        Ok(())
    }

    fn retire(&mut self, p: PendingWgmma, w: &inst::WgmmaWait) -> Result<(), Diagnostic> {
        if !w.acc.contains(&p.c) {
            // codegen fences only the registers the wait names: the C compiler could move
            // reads of the others above it
            return Err(self.err(format!(
                "wgmma_wait {} retires a wgmma writing '{}', which its accumulator list does not name",
                w.pending,
                self.m.buffer(p.c).name
            )));
        }
        let size = self.m.buffer(p.c).bytes() as usize;
        for (t, at, bytes) in &p.results {
            let from = *t as usize * size + at;
            let r = self.registers[p.c.0 as usize].as_mut().expect("a tracked accumulator");
            for c in &mut r.pending_writes[from..from + bytes.len()] {
                *c -= 1;
            }
            self.bytes_mut(p.c, *t)[*at..*at + bytes.len()].copy_from_slice(bytes);
        }
        if let Some((a, regs)) = &p.a_registers {
            let size = self.m.buffer(*a).bytes() as usize;
            let r = self.registers[a.0 as usize].as_mut().expect("a tracked A operand");
            for (t, at) in regs {
                let from = *t as usize * size + at;
                for c in &mut r.pending_reads[from..from + A_REGISTER_BYTES] {
                    *c -= 1;
                }
            }
        }
        for &a in &p.shared {
            self.races.wgmma_reads[a] -= 1;
        }
        Ok(())
    }

    /// Wgmmas left pending at the end of a block.
    pub(super) fn end_block_wgmma(&self) -> Result<(), Diagnostic> {
        for (g, wg) in self.warpgroups.iter().enumerate() {
            let n = wg.pending();
            if n > 0 {
                return Err(self.err(format!(
                    "{n} wgmma(s) of warpgroup {g} still pending at the end of the kernel (no wgmma_wait 0 after the last commit{})",
                    if wg.open.is_empty() { "" } else { ", or never committed" }
                )));
            }
        }
        Ok(())
    }

    /// `fence.proxy.async`: the executing threads' earlier shared-memory writes become
    /// visible to the async proxy after the next barrier; so do, to their own async-proxy
    /// work (their wgmmas), the writes of other threads they acquired through mbarriers.
    pub(super) fn fence_proxy_async(&mut self, active: &[u32]) {
        for &t in active {
            self.proxy_fences[t as usize].push(self.epoch);
            self.mbar.fence_acquired(t);
        }
    }

    /// The descriptor the generated code builds for the shared operand of `buf` whose first
    /// element is at byte `first` of its block's shared memory (a block of a cluster has its own window).
    fn descriptor(&self, buf: BufferId, first: usize, k_major: bool) -> Result<u64, Diagnostic> {
        let b = self.m.buffer(buf);
        let fields = SharedLayout::of(b)
            .wgmma_descriptor(k_major)
            .map_err(|e| self.err(format!("wgmma operand '{}': {e}", b.name)))?;
        let address = self.smem_base + first as i64;
        if address % 16 != 0 {
            return Err(self.err(format!(
                "wgmma operand '{}': descriptor start address {address} is not 16-byte aligned",
                b.name
            )));
        }
        let bits = fields.encode(address);
        Ok(match self.descriptor_fault {
            Some(fault) => fault(bits),
            None => bits,
        })
    }

    /// Read a `rows × k` operand of `buf`'s type (`rows` along M or N) through a
    /// descriptor for the warpgroup `group`, as `[row][k]` values; the shared bytes read are
    /// appended to `read`.
    #[allow(clippy::too_many_arguments)]
    fn read_operand(
        &mut self,
        group: &[u32],
        bits: u64,
        buf: BufferId,
        rows: i64,
        k: i64,
        k_major: bool,
        read: &mut Vec<usize>,
    ) -> Result<Vec<f64>, Diagnostic> {
        let b = self.m.buffer(buf);
        let (dt, eb) = (b.dtype, b.dtype.bytes() as i64);
        let d = Descriptor::decode(bits);
        if d.span().is_none() || d.base_offset != 0 {
            return Err(self.err(format!(
                "wgmma operand '{}': descriptor {bits:#018x} (swizzle mode {}, base offset {}) is not a form the model reads",
                b.name, d.mode, d.base_offset
            )));
        }
        let lo = b.shared_offset.expect("a placed shared buffer") as i64 + self.cta_base(group[0]) as i64;
        let hi = lo + b.bytes();
        let mut out = vec![0.0; (rows * k) as usize];
        for row in 0..rows {
            for kk in 0..k {
                let at = d.address(row, kk, k_major, eb) - self.smem_base + self.cta_base(group[0]) as i64;
                if at < lo || at + eb > hi {
                    return Err(self.err(format!(
                        "wgmma reads element ({row}, {kk}) of operand '{}' at shared byte {at}, outside it (bytes {lo}..{hi}); descriptor {bits:#018x}",
                        b.name
                    )));
                }
                let at = at as usize;
                self.track_async_read(group, at, eb as usize)?;
                read.extend(at..at + eb as usize);
                out[(row * k + kk) as usize] = read_val(&self.smem[at..at + eb as usize], dt).as_f64();
            }
        }
        Ok(out)
    }

    /// A read of shared bytes by a wgmma of the warpgroup `group` (the async proxy): no
    /// `cp.async` may be in flight into them, their last ordinary write must have been
    /// followed, by its writer, with `fence_proxy_async` and then a barrier, and bytes a TMA
    /// copy wrote (async proxy too: no fence needed) need a wait on its mbarrier phase by
    /// every thread of the warpgroup.
    fn track_async_read(&mut self, group: &[u32], at: usize, len: usize) -> Result<(), Diagnostic> {
        for a in at..at + len {
            if self.races.in_flight[a] > 0 {
                return Err(self.err(format!(
                    "a wgmma reads shared byte {a} while a cp.async into it is in flight (missing async_wait)"
                )));
            }
            if self.races.needs_visibility_check(a) {
                self.check_mbarrier_visibility(memory::Who::Wgmma(group[0] / 128), "reads", group, a)?;
            }
            let writer = self.races.writer[a];
            // each reader acquired the write through an mbarrier, then fenced
            let fenced_by_readers = writer != NOBODY
                && group
                    .iter()
                    .all(|&r| r == writer || self.mbar.fenced_after(r, writer, self.races.write_seq[a]));
            if writer != NOBODY && !fenced_by_readers {
                let fences = &self.proxy_fences[writer as usize];
                match fences.get(self.races.fence_mark[a] as usize) {
                    None => {
                        return Err(self.err(format!(
                            "a wgmma reads shared byte {a}, which thread {writer} wrote with no fence_proxy_async after it (the async proxy may not see the write)"
                        )))
                    }
                    // fenced, then a barrier, or an mbarrier phase the writer arrived at
                    // after its fence and every reader waited for
                    Some(&e)
                        if e >= self.epoch
                            && !group
                                .iter()
                                .all(|&r| self.mbar.fences_acquired(r, writer) > self.races.fence_mark[a]) =>
                    {
                        return Err(self.err(format!(
                            "a wgmma reads shared byte {a}, which thread {writer} wrote and fenced (fence_proxy_async) with no barrier since"
                        )))
                    }
                    Some(_) => {}
                }
            }
            // read by the whole warpgroup: an ordinary write before the next barrier races
            let seq = group.iter().map(|&r| self.mbar.arrivals(r)).max().unwrap_or(0);
            let carr = group.iter().map(|&r| self.cluster_arrivals(r)).max().unwrap_or(0);
            let (lo, hi) = (group[0], group[group.len() - 1]);
            if self.races.read_epoch[a] == self.epoch && self.races.reader[a] != NOBODY {
                self.races.read_seq[a] = self.races.read_seq[a].max(seq);
                self.races.read_carr[a] = self.races.read_carr[a].max(carr);
                self.races.readers_lo[a] = self.races.readers_lo[a].min(lo);
                self.races.readers_hi[a] = self.races.readers_hi[a].max(hi);
            } else {
                self.races.read_seq[a] = seq;
                self.races.read_carr[a] = carr;
                self.races.readers_lo[a] = lo;
                self.races.readers_hi[a] = hi;
            }
            self.races.read_epoch[a] = self.epoch;
            self.races.reader[a] = SEVERAL;
        }
        Ok(())
    }

    /// Check that `values` (one per thread of `group`) agree: the warpgroup issues one
    /// instruction.
    fn uniform_in(&self, group: &[u32], values: &[i64], what: &str) -> Result<i64, Diagnostic> {
        if let Some(k) = values.iter().position(|v| *v != values[0]) {
            return Err(self.err(format!(
                "wgmma: {what} differs across warpgroup {} ({} for thread {}, {} for thread {})",
                group[0] / 128,
                values[0],
                group[0],
                values[k],
                group[k]
            )));
        }
        Ok(values[0])
    }

    /// Registers a wgmma uses may not have been accessed by another instruction since the
    /// warpgroup's last `wgmma_fence`, nor be written by a pending wgmma unless it is the
    /// accumulator it chains on.
    fn check_wgmma_registers(
        &self,
        buf: BufferId,
        t: u32,
        at: usize,
        len: usize,
        accumulator: bool,
    ) -> Result<(), Diagnostic> {
        let b = self.m.buffer(buf);
        let size = b.bytes() as usize;
        let r = self.registers[buf.0 as usize].as_ref().expect("a tracked register array");
        let from = t as usize * size + at;
        for i in from..from + len {
            let element = (i - t as usize * size) / b.dtype.bytes() as usize;
            if r.touched[i] {
                return Err(self.err(format!(
                    "a wgmma uses element {element} of '{}' of thread {t}, accessed by another instruction since the last wgmma_fence",
                    b.name
                )));
            }
            if !accumulator && r.pending_writes[i] > 0 {
                return Err(self.err(format!(
                    "a wgmma reads element {element} of '{}' of thread {t} as A while a wgmma writing it is pending",
                    b.name
                )));
            }
            if accumulator && r.pending_reads[i] > 0 {
                return Err(self.err(format!(
                    "a wgmma writes element {element} of '{}' of thread {t} while a pending wgmma reads it as A",
                    b.name
                )));
            }
        }
        Ok(())
    }

    /// One `wgmma.mma_async.m64nNk16` per warpgroup of `active`: D (64 × n, fp32) = A · B
    /// (+ D unless scale-d is 0), A from shared memory through a descriptor or from
    /// registers, B through a descriptor; the result lands at the wait that retires it.
    pub(super) fn wgmma(&mut self, active: &[u32], w: &inst::Wgmma) -> Result<(), Diagnostic> {
        self.full_warpgroups(active, "wgmma")?;
        let m = self.m;
        let atom = w.atom;
        let (adt, bdt, cdt) = (m.buffer(w.a).dtype, m.buffer(w.b).dtype, m.buffer(w.c).dtype);
        if (adt, bdt, cdt) != (atom.a, atom.b, atom.acc) || cdt != DType::F32 || adt.bytes() != 2 {
            return Err(self.err(format!("{atom} on {adt} x {bdt} -> {cdt} operands")));
        }
        if !atom.allows_n(w.n) {
            return Err(self.err(format!("{atom} with n = {}", w.n)));
        }
        if self.space(w.b) != Space::Shared {
            return Err(self.err(format!("wgmma B operand '{}' is not in shared memory", m.buffer(w.b).name)));
        }
        let (n, k) = (w.n, atom.k);
        let c_bytes = (n / 2) as usize * 4;
        let b_first = self.addresses(w.b, &w.b_idx, active, 1, "wgmma B")?;
        let c_first = self.register_offsets(w.c, &w.c_offset, active, c_bytes, "wgmma C")?;
        let scale = self.eval(&w.scale_d, active)?;
        let a_first = match &w.a_from {
            inst::WgmmaA::Shared { idx, .. } => {
                if self.space(w.a) != Space::Shared {
                    return Err(
                        self.err(format!("wgmma A operand '{}' is not in shared memory", m.buffer(w.a).name))
                    );
                }
                self.addresses(w.a, idx, active, 1, "wgmma A")?
            }
            inst::WgmmaA::Registers { offset } => {
                self.register_offsets(w.a, offset, active, A_REGISTER_BYTES, "wgmma A")?
            }
        };
        for (gi, group) in active.chunks(128).enumerate() {
            let span = gi * 128..(gi + 1) * 128;
            let g = group[0] as usize / 128;
            if !self.warpgroups[g].fenced {
                return Err(self.err(format!("a wgmma of warpgroup {g} with no wgmma_fence before it")));
            }
            let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
            let scale_d = self.uniform_in(
                group,
                &scale[span.clone()].iter().map(|v| v.as_i64()).collect::<Vec<_>>(),
                "scale-d",
            )?;
            self.uniform_in(group, &as_i64(&c_first[span.clone()]), "the accumulator's registers")?;
            let b_at = self.uniform_in(group, &as_i64(&b_first[span.clone()]), "the B descriptor")? as usize;
            let mut shared = Vec::new();
            // descriptors hold the block's own shared addresses (each block of a cluster
            // has its window): built from the offset in the block, read back at its base
            let base = self.cta_base(group[0]);
            let b_bits = self.descriptor(w.b, b_at - base, w.b_k_major)?;
            // B as [n][k]
            let bm = self.read_operand(group, b_bits, w.b, n, k, w.b_k_major, &mut shared)?;
            let mut a_registers = None;
            let am = match &w.a_from {
                inst::WgmmaA::Shared { k_major, .. } => {
                    let a_at = self.uniform_in(group, &as_i64(&a_first[span.clone()]), "the A descriptor")?;
                    let a_bits = self.descriptor(w.a, a_at as usize - base, *k_major)?;
                    self.read_operand(group, a_bits, w.a, 64, k, *k_major, &mut shared)?
                }
                inst::WgmmaA::Registers { .. } => {
                    self.uniform_in(group, &as_i64(&a_first[span.clone()]), "the A registers")?;
                    let mut am = vec![0.0; (64 * k) as usize];
                    let mut regs = Vec::with_capacity(128);
                    for (j, &t) in group.iter().enumerate() {
                        let at = a_first[gi * 128 + j];
                        self.check_wgmma_registers(w.a, t, at, A_REGISTER_BYTES, false)?;
                        let (wi, l) = ((t as i64 % 128) / 32, t as i64 % 32);
                        for i in 0..8i64 {
                            let row = 16 * wi + l / 4 + 8 * ((i >> 1) & 1);
                            let col = 8 * (i >> 2) + 2 * (l % 4) + (i & 1);
                            let e = at + 2 * i as usize;
                            am[(row * k + col) as usize] =
                                read_val(&self.bytes(w.a, t)[e..e + 2], adt).as_f64();
                        }
                        regs.push((t, at));
                    }
                    a_registers = Some((w.a, regs));
                    am
                }
            };
            // D, register by register: thread t (warp wi, lane l), register i holds row
            // 16 wi + l / 4 + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 (l % 4) + (i & 1)
            let size = m.buffer(w.c).bytes() as usize;
            let mut results = Vec::with_capacity(128);
            for (j, &t) in group.iter().enumerate() {
                let at = c_first[gi * 128 + j];
                self.check_wgmma_registers(w.c, t, at, c_bytes, true)?;
                let (wi, l) = ((t as i64 % 128) / 32, t as i64 % 32);
                let mut out = vec![0u8; c_bytes];
                let r = self.registers[w.c.0 as usize].as_ref().expect("a tracked accumulator");
                for i in 0..n / 2 {
                    let row = 16 * wi + l / 4 + 8 * ((i >> 1) & 1);
                    let col = 8 * (i >> 2) + 2 * (l % 4) + (i & 1);
                    let sum: f64 =
                        (0..k).map(|kk| am[(row * k + kk) as usize] * bm[(col * k + kk) as usize]).sum();
                    let reg = at + 4 * i as usize;
                    let old = if scale_d == 0 {
                        0.0
                    } else {
                        // a pending wgmma of the chain: its result, else the register
                        let from = t as usize * size + reg;
                        let bytes = if r.pending_writes[from] > 0 {
                            &r.shadow[from..from + 4]
                        } else {
                            &self.bytes(w.c, t)[reg..reg + 4]
                        };
                        read_val(bytes, DType::F32).as_f64()
                    };
                    // fp32 accumulation: the exact sum, rounded once
                    write_val(
                        &mut out[4 * i as usize..4 * i as usize + 4],
                        DType::F32,
                        Val::F((old + sum) as f32 as f64),
                    );
                }
                results.push((t, at, out));
            }
            // the wgmma owns its registers and shared bytes until its group retires
            let r = self.registers[w.c.0 as usize].as_mut().expect("a tracked accumulator");
            for (t, at, out) in &results {
                let from = *t as usize * size + at;
                r.shadow[from..from + out.len()].copy_from_slice(out);
                for c in &mut r.pending_writes[from..from + out.len()] {
                    *c += 1;
                }
            }
            if let Some((a, regs)) = &a_registers {
                let size = m.buffer(*a).bytes() as usize;
                let r = self.registers[a.0 as usize].as_mut().expect("a tracked A operand");
                for (t, at) in regs {
                    let from = *t as usize * size + at;
                    for c in &mut r.pending_reads[from..from + A_REGISTER_BYTES] {
                        *c += 1;
                    }
                }
            }
            for &a in &shared {
                self.races.wgmma_reads[a] += 1;
            }
            self.warpgroups[g].open.push(PendingWgmma { c: w.c, results, a_registers, shared });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_ir::simplify::simplify;

    /// The decoded descriptor of every wgmma layout (spans of 128, 64 and 32 bytes, both
    /// majors, one and several panels, stages) reads each element of a 64 × 16 or 16 × N
    /// operand where `SharedLayout::offset` put it, from every k-step and 64-row (or N)
    /// start the lowering uses.
    #[test]
    fn descriptors_decode_to_the_layout_offsets() {
        let base = 4096i64; // the shared base, on every swizzle period
        let mut checked = 0;
        for dtype in [DType::F16, DType::BF16] {
            // (tile shape, k_major): K-major tiles are (MN, K), MN-major (K, MN)
            for (shape, k_major) in [
                (vec![2i64, 128, 64], true), // 128-byte span
                (vec![128, 32], true),       // 64-byte span
                (vec![2, 64, 16], true),     // 32-byte span
                (vec![64, 128], true),       // 128-byte span, two panels along K
                (vec![3, 32, 128], false),   // 128-byte span, two panels along N
                (vec![16, 64], false),       // 128-byte span, one panel
                (vec![2, 32, 32], false),    // 64-byte span
                (vec![16, 48], false),       // 32-byte span, three panels
                (vec![32, 256], false),      // four panels
            ] {
                let l = SharedLayout::wgmma(&shape, dtype).expect("a wgmma layout");
                let d = l.wgmma_descriptor(k_major).unwrap();
                let n = shape.len();
                let eb = dtype.bytes() as i64;
                let (rows, cols) = (shape[n - 2], shape[n - 1]);
                let (mn_extent, k_extent) = if k_major { (rows, cols) } else { (cols, rows) };
                let stages = if n == 3 { shape[0] } else { 1 };
                let offset = |stage: i64, mn: i64, k: i64| {
                    let mut idx: Vec<Expr> = if n == 3 { vec![Expr::int(stage)] } else { vec![] };
                    if k_major {
                        idx.extend([Expr::int(mn), Expr::int(k)]);
                    } else {
                        idx.extend([Expr::int(k), Expr::int(mn)]);
                    }
                    simplify(l.offset(&idx)).as_int().unwrap() * eb
                };
                // operands along MN: the whole tile (a B of N = its width, across panels or
                // 8-row groups) and each 64-row piece (an A, a narrower B)
                let mut windows = vec![(0, mn_extent)];
                windows.extend((0..mn_extent - 63).step_by(64).map(|s| (s, 64)));
                for stage in 0..stages {
                    for &(mn0, operand_mn) in &windows {
                        for k0 in (0..k_extent).step_by(16) {
                            let start = base + offset(stage, mn0, k0);
                            let desc = Descriptor::decode(d.encode(start));
                            assert_eq!((desc.lbo, desc.sbo, desc.start), (d.lbo, d.sbo, start));
                            for mn in 0..operand_mn {
                                for k in 0..16 {
                                    let want = base + offset(stage, mn0 + mn, k0 + k);
                                    let got = desc.address(mn, k, k_major, eb);
                                    assert_eq!(got, want, "{shape:?} {dtype} k_major={k_major} stage {stage} ({mn0}+{mn}, {k0}+{k})");
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    /// A stride one 16-byte unit off, or another swizzle mode, moves some element.
    #[test]
    fn a_wrong_field_moves_elements() {
        let l = SharedLayout::wgmma(&[32, 128], DType::F16).unwrap();
        let d = l.wgmma_descriptor(false).unwrap();
        let bits = d.encode(1024);
        let good = Descriptor::decode(bits);
        let addresses = |d: &Descriptor| -> Vec<i64> {
            (0..128)
                .flat_map(|mn| (0..16).map(move |k| (mn, k)))
                .map(|(mn, k)| d.address(mn, k, false, 2))
                .collect()
        };
        let want = addresses(&good);
        for (what, bad) in [
            ("lbo + 16", bits + (1 << 16)),
            ("sbo + 16", bits + (1 << 32)),
            ("64-byte mode", (bits & !(3 << 62)) | (2 << 62)),
            ("32-byte mode", (bits & !(3 << 62)) | (3 << 62)),
        ] {
            assert_ne!(addresses(&Descriptor::decode(bad)), want, "{what}");
        }
        // the XOR of each mode, on its own
        assert_eq!(swizzle_address(1, 0x380 + 0x10), 0x380 + 0x60);
        assert_eq!(swizzle_address(2, 0x180 + 0x10), 0x180 + 0x20);
        assert_eq!(swizzle_address(3, 0x80 + 0x10), 0x80);
        assert_eq!(swizzle_address(0, 0x390), 0x390);
    }
}
