//! Hopper's synchronization beyond `bar.sync 0`: mbarriers (`mbarrier.init`, `arrive`,
//! `arrive.expect_tx`, `try_wait.parity`, and the transaction bytes TMA copies complete on
//! them), named barriers (`bar.sync id, n`: checked here, gathered by the scheduler) and
//! `setmaxnreg` (a per-warpgroup register budget).
//!
//! **An mbarrier** is a word of a shared `int64` buffer, known to the model once a thread
//! initializes it: `init count` starts phase 0 with `count` arrivals pending and 0
//! transaction bytes; an `arrive` (per arriving thread) takes one arrival, `expect_tx B`
//! first adds B bytes; a TMA copy's bytes take that many off (`complete_tx`). When no
//! arrival and no byte is pending the phase completes: the phase number goes up and the
//! arrivals are expected again. `wait parity P` returns once the phase of parity P is
//! complete, i.e. when the current phase's parity is not P (on a fresh barrier a wait for
//! parity 1 returns at once, one for parity 0 blocks until phase 0 completes); a wait that
//! cannot return blocks its unit (schedule.rs), which retries once some mbarrier or
//! register budget has changed.
//!
//! **Visibility.** Each thread records, per mbarrier, how many of its phases it has seen
//! complete (at its last successful wait). The bytes a TMA copy writes are tagged with the
//! phase they complete; a thread (or a wgmma's warpgroup) that accesses them must have seen
//! that phase. Arrivals release and waits acquire what the arriving threads had seen, and a
//! completed `bar.sync` shares it among its threads, so an elected thread's wait followed
//! by a barrier covers the others.
//!
//! **Errors**: an mbarrier operation on a word no `mbarrier_init` initialized, one
//! initialized twice (PTX: undefined without `mbarrier.inval`), one used by another thread
//! with no barrier since its init, a TMA copy completing on a barrier whose init no
//! `fence_mbarrier_init` followed, more arrivals than a phase expects, a transaction count
//! below zero, an ordinary access to a barrier's word; `setmaxnreg` outside a whole
//! warpgroup, with a count off [24, 256] or not a multiple of 8, an `inc` below or a `dec`
//! above the current budget; a named barrier that is not over whole warps.

use super::*;

/// The register file of an SM, shared by the block's warpgroups (`setmaxnreg`).
pub(super) const REGISTER_FILE: u32 = 65536;

pub(super) struct Mbarrier {
    /// `full_bar[1]`.
    name: String,
    expected: u32,
    pending: u32,
    tx: i64,
    /// Phases completed (the current phase's number).
    completed: u32,
    init_thread: u32,
    init_epoch: u32,
    /// `cluster_sync`s completed before the init: another block of the cluster may use
    /// the barrier only after one more (it does not see this block's barriers otherwise).
    init_cluster_epoch: u32,
    /// The initializer's `fence_mbarrier_init` count at the init.
    init_fences: u32,
    /// The most each slot's phases were seen by the threads arriving in the current phase,
    /// and by those of the phases already completed (what a wait acquires).
    release: Vec<u32>,
    published: Vec<u32>,
    /// Per thread: the `fence_proxy_async`s it had run when it last arrived in the current
    /// phase, and in the phases completed (what a wait acquires of the async proxy's view).
    fence_release: Vec<u32>,
    fence_published: Vec<u32>,
    /// Per thread: how many mbarrier arrivals it had made (this one included) when it last
    /// arrived in the current phase, and in the phases completed (what a wait acquires of
    /// its ordinary shared-memory accesses: those before that arrival).
    arrive_release: Vec<u32>,
    arrive_published: Vec<u32>,
}

/// Why a unit cannot go on (schedule.rs retries it when `MbarrierState::events` changes).
#[derive(Clone)]
pub(super) enum Wait {
    Mbarrier { slot: usize, parity: i64 },
    Registers { group: usize, regs: u32 },
}

pub(super) struct MbarrierState {
    bars: Vec<Mbarrier>,
    by_offset: std::collections::HashMap<usize, usize>,
    /// Per thread, per barrier slot: the phases it has seen complete.
    observed: Vec<Vec<u32>>,
    /// Per thread: `fence_mbarrier_init`s run.
    init_fences: Vec<u32>,
    /// Per thread, per writing thread: how many of the writer's `fence_proxy_async`s it
    /// has acquired through mbarrier phases (the writer fenced, then arrived, and this
    /// thread waited for that phase): writes before them are visible to its async proxy.
    fences_acquired: Vec<Vec<u32>>,
    /// Per thread: the mbarrier arrivals it has made.
    arrivals: Vec<u32>,
    /// Per thread, per other thread: how many of the other's arrivals it has acquired
    /// through mbarrier phases (the other arrived, this thread waited for that phase): the
    /// other's shared-memory accesses before them are ordered before this thread's now.
    arrivals_acquired: Vec<Vec<u32>>,
    /// Per thread: `arrivals_acquired` at its last `fence_proxy_async` (the other threads'
    /// writes before those arrivals are visible to its async-proxy work after the fence).
    fenced_arrivals: Vec<Vec<u32>>,
    /// Per warpgroup: its per-thread register budget, and its threads.
    regs: Vec<u32>,
    group_threads: Vec<u32>,
    /// Warpgroups per block (each block of a cluster has its own register file).
    cta_groups: usize,
    /// Bumped whenever a phase completes or a budget drops: a blocked wait may go on.
    pub(super) events: u64,
}

impl MbarrierState {
    pub(super) fn new(threads: usize, cta_threads: usize) -> MbarrierState {
        let groups = threads.div_ceil(128);
        let mut s = MbarrierState {
            bars: vec![],
            by_offset: Default::default(),
            observed: vec![vec![]; threads],
            init_fences: vec![0; threads],
            fences_acquired: vec![vec![]; threads],
            arrivals: vec![0; threads],
            arrivals_acquired: vec![vec![]; threads],
            fenced_arrivals: vec![vec![]; threads],
            regs: vec![0; groups],
            group_threads: (0..groups).map(|g| (threads - 128 * g).min(128) as u32).collect(),
            cta_groups: cta_threads.div_ceil(128).max(1),
            events: 0,
        };
        s.reset();
        s
    }

    pub(super) fn reset(&mut self) {
        self.bars.clear();
        self.by_offset.clear();
        for o in &mut self.observed {
            o.clear();
        }
        self.init_fences.fill(0);
        for f in &mut self.fences_acquired {
            f.clear();
        }
        self.arrivals.fill(0);
        for a in &mut self.arrivals_acquired {
            a.clear();
        }
        for a in &mut self.fenced_arrivals {
            a.clear();
        }
        // the launch budget: the register file split evenly, in units of 8, at most 255
        let threads: u32 = self.group_threads.iter().take(self.cta_groups).sum();
        let start = (REGISTER_FILE / threads.max(1) / 8 * 8).min(255);
        self.regs.fill(start);
        self.events = 0;
    }

    /// The registers the block was launched with: its threads times the launch budget.
    /// `setmaxnreg.inc` takes only registers other warps released with `dec` (PTX: a
    /// per-CTA pool), so the budgets can never sum past this — not the 65536 of the SM when
    /// the launch budget leaves some unused (640 threads start at 96: 61440).
    pub(super) fn pool(&self) -> u32 {
        let threads: u32 = self.group_threads.iter().take(self.cta_groups).sum();
        (REGISTER_FILE / threads.max(1) / 8 * 8).min(255) * threads
    }

    pub(super) fn name(&self, slot: usize) -> &str {
        &self.bars[slot].name
    }

    /// The arrivals thread `t` made so far (what its accesses are tagged with).
    pub(super) fn arrivals(&self, t: u32) -> u32 {
        self.arrivals[t as usize]
    }

    /// Is an access `other` made after `seq` of its arrivals ordered before thread `t` now
    /// (`t` acquired a later arrival of `other`'s through an mbarrier phase)?
    pub(super) fn ordered_after(&self, t: u32, other: u32, seq: u32) -> bool {
        self.arrivals_acquired[t as usize].get(other as usize).is_some_and(|&a| a > seq)
    }

    /// Thread `t` runs `fence_proxy_async`: what it acquired so far becomes visible to its
    /// async proxy.
    pub(super) fn fence_acquired(&mut self, t: u32) {
        self.fenced_arrivals[t as usize] = self.arrivals_acquired[t as usize].clone();
    }

    /// Did thread `t` fence after acquiring an arrival `other` made after `seq` of them?
    pub(super) fn fenced_after(&self, t: u32, other: u32, seq: u32) -> bool {
        self.fenced_arrivals[t as usize].get(other as usize).is_some_and(|&a| a > seq)
    }

    /// The `fence_proxy_async`s of `writer` that thread `t` acquired through mbarriers.
    pub(super) fn fences_acquired(&self, t: u32, writer: u32) -> u32 {
        self.fences_acquired[t as usize].get(writer as usize).copied().unwrap_or(0)
    }

    pub(super) fn observed(&self, t: u32, slot: usize) -> u32 {
        self.observed[t as usize].get(slot).copied().unwrap_or(0)
    }

    fn observe(&mut self, t: u32, seen: &[u32]) {
        let o = &mut self.observed[t as usize];
        if o.len() < seen.len() {
            o.resize(seen.len(), 0);
        }
        for (mine, &s) in o.iter_mut().zip(seen) {
            *mine = (*mine).max(s);
        }
    }

    /// A completed barrier orders its threads: each sees what any of them had seen.
    pub(super) fn share(&mut self, threads: &[u32]) {
        let mut seen = vec![0u32; self.bars.len()];
        for &t in threads {
            for (s, &o) in seen.iter_mut().zip(&self.observed[t as usize]) {
                *s = (*s).max(o);
            }
        }
        for &t in threads {
            self.observe(t, &seen);
        }
    }

    fn complete_phase(&mut self, slot: usize) {
        let b = &mut self.bars[slot];
        b.completed += 1;
        b.pending = b.expected;
        let release = std::mem::take(&mut b.release);
        if b.published.len() < release.len() {
            b.published.resize(release.len(), 0);
        }
        for (p, r) in b.published.iter_mut().zip(&release) {
            *p = (*p).max(*r);
        }
        b.release = release;
        if b.fence_published.len() < b.fence_release.len() {
            b.fence_published.resize(b.fence_release.len(), 0);
        }
        for (p, r) in b.fence_published.iter_mut().zip(&b.fence_release) {
            *p = (*p).max(*r);
        }
        if b.arrive_published.len() < b.arrive_release.len() {
            b.arrive_published.resize(b.arrive_release.len(), 0);
        }
        for (p, r) in b.arrive_published.iter_mut().zip(&b.arrive_release) {
            *p = (*p).max(*r);
        }
        self.events += 1;
    }

    /// The state of a barrier for a deadlock report.
    pub(super) fn describe(&self, w: &Wait) -> String {
        match *w {
            Wait::Mbarrier { slot, parity } => {
                let b = &self.bars[slot];
                format!(
                    "wait on {} for parity {parity} (it is in phase {}, parity {}: {} of {} arrivals and {} transaction bytes pending)",
                    b.name,
                    b.completed,
                    b.completed & 1,
                    b.pending,
                    b.expected,
                    b.tx
                )
            }
            Wait::Registers { group, regs } => {
                let others: u32 = (0..self.regs.len())
                    .filter(|&g| g != group && g / self.cta_groups == group / self.cta_groups)
                    .map(|g| self.regs[g] * self.group_threads[g])
                    .sum();
                let budgets: Vec<String> =
                    self.regs.iter().enumerate().map(|(g, r)| format!("warpgroup {g}: {r}")).collect();
                format!(
                    "wait in setmaxnreg inc {regs}: it needs {} registers and the other warpgroups hold {others} of the {} the block was launched with (budgets per thread: {})",
                    regs * self.group_threads[group],
                    self.pool(),
                    budgets.join(", ")
                )
            }
        }
    }
}

impl Machine<'_> {
    /// The shared byte offset of the mbarrier word `bar[idx]` for each active thread.
    pub(super) fn mbarrier_words(
        &mut self,
        bar: BufferId,
        idx: &Expr,
        active: &[u32],
        what: &str,
    ) -> Result<Vec<usize>, Diagnostic> {
        let b = self.m.buffer(bar);
        if b.scope != Scope::Shared || b.dtype != DType::I64 {
            return Err(self.err(format!(
                "{what} on '{}', a {} {} buffer (mbarriers are words of a shared int64 buffer)",
                b.name,
                b.scope.name(),
                b.dtype
            )));
        }
        self.addresses(bar, std::slice::from_ref(idx), active, 1, what)
    }

    /// `full_bar[1]`: the buffer and element of the word at shared byte `at`.
    fn word_name(&self, bar: BufferId, at: usize) -> String {
        let b = self.m.buffer(bar);
        let block = if self.cluster > 1 {
            format!(" of block {} of the cluster", at / self.cta_smem)
        } else {
            String::new()
        };
        let at = if self.cluster > 1 { at % self.cta_smem } else { at };
        let i = (at - b.shared_offset.expect("a placed shared buffer") as usize) / 8;
        format!("{}[{i}]{block}", b.name)
    }

    /// The slot of the initialized mbarrier at `at`, used by thread `t`.
    pub(super) fn live_mbarrier(
        &self,
        bar: BufferId,
        at: usize,
        t: u32,
        what: &str,
    ) -> Result<usize, Diagnostic> {
        let Some(&slot) = self.mbar.by_offset.get(&at) else {
            return Err(self.err(format!(
                "{what} by thread {t} on {}, which no mbarrier_init initialized",
                self.word_name(bar, at)
            )));
        };
        let b = &self.mbar.bars[slot];
        if t != b.init_thread && self.epoch == b.init_epoch {
            return Err(self.err(format!(
                "{what} by thread {t} on {}, which thread {} initialized with no barrier since (the init is not visible to other threads)",
                b.name, b.init_thread
            )));
        }
        let (home, own) = (at / self.cta_smem.max(1), self.cta_base(t) / self.cta_smem.max(1));
        if self.cluster > 1 && home != own && self.cluster_epoch == b.init_cluster_epoch {
            return Err(self.err(format!(
                "{what} by thread {t} of block {own} of the cluster on {}, initialized with no cluster_sync since (a peer's barriers are not visible without one)",
                b.name
            )));
        }
        Ok(slot)
    }

    pub(super) fn mbarrier_init(&mut self, active: &[u32], i: &inst::MbarrierInit) -> Result<(), Diagnostic> {
        let words = self.mbarrier_words(i.bar, &i.idx, active, "mbarrier_init")?;
        for (&t, &at) in active.iter().zip(&words) {
            let name = self.word_name(i.bar, at);
            if let Some(&slot) = self.mbar.by_offset.get(&at) {
                return Err(self.err(format!(
                    "mbarrier_init by thread {t} on {name}, which thread {} already initialized (an mbarrier is initialized once: re-initializing a live one is undefined)",
                    self.mbar.bars[slot].init_thread
                )));
            }
            if !(1..1 << 20).contains(&i.count) {
                return Err(
                    self.err(format!("mbarrier_init {name} with {} arrivals (1 to 2^20 - 1)", i.count))
                );
            }
            for a in at..at + 8 {
                self.check_overwrite(memory::Who::Init(t), a)?;
                if self.races.write_epoch[a] == self.epoch && self.races.writer[a] != t {
                    return Err(self.race("mbarrier_init after write", t, self.races.writer[a], a));
                }
                if self.races.read_epoch[a] == self.epoch && self.races.reader[a] != t {
                    return Err(self.race("mbarrier_init after read", t, self.races.reader[a], a));
                }
            }
            let slot = self.mbar.bars.len();
            self.mbar.bars.push(Mbarrier {
                name,
                expected: i.count,
                pending: i.count,
                tx: 0,
                completed: 0,
                init_thread: t,
                init_epoch: self.epoch,
                init_cluster_epoch: self.cluster_epoch,
                init_fences: self.mbar.init_fences[t as usize],
                release: vec![],
                published: vec![],
                fence_release: vec![],
                fence_published: vec![],
                arrive_release: vec![],
                arrive_published: vec![],
            });
            self.mbar.by_offset.insert(at, slot);
            self.races.mbarrier[at..at + 8].fill(slot as u32);
        }
        Ok(())
    }

    pub(super) fn fence_mbarrier_init(&mut self, active: &[u32]) {
        for &t in active {
            self.mbar.init_fences[t as usize] += 1;
        }
    }

    pub(super) fn mbarrier_arrive(
        &mut self,
        active: &[u32],
        i: &inst::MbarrierArrive,
    ) -> Result<(), Diagnostic> {
        // a predicated arrive: only the threads where it holds
        let chosen: Vec<u32>;
        let active = match &i.pred {
            Some(p) => {
                let holds = self.eval(p, active)?;
                chosen =
                    active.iter().zip(&holds).filter(|(_, v)| v.as_i64() != 0).map(|(&t, _)| t).collect();
                &chosen[..]
            }
            None => active,
        };
        let mut words = self.mbarrier_words(i.bar, &i.idx, active, "mbarrier_arrive")?;
        if let Some(cta) = &i.cta {
            // the word at the same offset in block `cta` of the cluster
            let ranks = self.eval(cta, active)?;
            for (k, &t) in active.iter().enumerate() {
                let q = ranks[k].as_i64();
                if i.expect_tx.is_some() || !(0..self.cluster as i64).contains(&q) {
                    return Err(self.err(format!(
                        "mbarrier_arrive by thread {t} on block {q} of a cluster of {} (a remote arrive has no expect_tx)",
                        self.cluster
                    )));
                }
                words[k] = words[k] - self.cta_base(t) + q as usize * self.cta_smem;
                self.remote_since_cluster_sync |= q as usize * self.cta_smem != self.cta_base(t);
            }
        }
        // with clusters a peer's multicast may complete bytes before this block expects them
        let low = if self.cluster > 1 { -(1 << 20) + 1 } else { 0 };
        for (&t, &at) in active.iter().zip(&words) {
            let slot = self.live_mbarrier(i.bar, at, t, "mbarrier_arrive")?;
            let b = &self.mbar.bars[slot];
            let tx = b.tx + i.expect_tx.unwrap_or(0);
            if i.expect_tx.is_some_and(|bytes| bytes < 0) || !(low..1 << 20).contains(&tx) {
                return Err(self.err(format!(
                    "mbarrier_arrive by thread {t} on {} expects {} transaction bytes on top of {} (the count is 0 to 2^20 - 1)",
                    b.name,
                    i.expect_tx.unwrap_or(0),
                    b.tx
                )));
            }
            if b.pending == 0 {
                return Err(self.err(format!(
                    "mbarrier_arrive by thread {t} on {}: phase {} already has its {} arrivals (it waits for {} transaction bytes)",
                    b.name, b.completed, b.expected, b.tx
                )));
            }
            let fences = self.proxy_fences[t as usize].len() as u32;
            let b = &mut self.mbar.bars[slot];
            b.tx = tx;
            b.pending -= 1;
            if b.fence_release.len() <= t as usize {
                b.fence_release.resize(t as usize + 1, 0);
            }
            b.fence_release[t as usize] = b.fence_release[t as usize].max(fences);
            // what the thread acquired of others' arrivals goes on with its own (orders are
            // transitive: a consumer that waits for another consumer's arrival sees what that
            // one acquired from the producer)
            self.mbar.arrivals[t as usize] += 1;
            let acquired = &self.mbar.arrivals_acquired[t as usize];
            let n = acquired.len().max(t as usize + 1);
            if b.arrive_release.len() < n {
                b.arrive_release.resize(n, 0);
            }
            for (r, &a) in b.arrive_release.iter_mut().zip(acquired) {
                *r = (*r).max(a);
            }
            b.arrive_release[t as usize] = self.mbar.arrivals[t as usize];
            // release what this thread has seen to the phase's waiters
            let seen = &self.mbar.observed[t as usize];
            if b.release.len() < seen.len() {
                b.release.resize(seen.len(), 0);
            }
            for (r, &s) in b.release.iter_mut().zip(seen) {
                *r = (*r).max(s);
            }
            if b.pending == 0 && b.tx == 0 {
                self.mbar.complete_phase(slot);
            }
        }
        Ok(())
    }

    pub(super) fn mbarrier_expect_tx(
        &mut self,
        active: &[u32],
        i: &inst::MbarrierExpectTx,
    ) -> Result<(), Diagnostic> {
        let words = self.mbarrier_words(i.bar, &i.idx, active, "mbarrier_expect_tx")?;
        for (&t, &at) in active.iter().zip(&words) {
            let slot = self.live_mbarrier(i.bar, at, t, "mbarrier_expect_tx")?;
            let b = &self.mbar.bars[slot];
            let tx = b.tx + i.bytes;
            if i.bytes < 0 || !(0..1 << 20).contains(&tx) {
                return Err(self.err(format!(
                    "mbarrier_expect_tx by thread {t} on {} expects {} transaction bytes on top of {} (the count is 0 to 2^20 - 1)",
                    b.name, i.bytes, b.tx
                )));
            }
            if b.pending == 0 && b.tx == 0 {
                return Err(self.err(format!(
                    "mbarrier_expect_tx by thread {t} on {}: phase {} has completed already",
                    b.name, b.completed
                )));
            }
            self.mbar.bars[slot].tx = tx;
        }
        Ok(())
    }

    /// `bytes` of a TMA copy issued by thread `t` land on the barrier in `slot`.
    pub(super) fn complete_tx(&mut self, slot: usize, bytes: i64, t: u32) -> Result<(), Diagnostic> {
        let b = &self.mbar.bars[slot];
        if self.mbar.init_fences[b.init_thread as usize] <= b.init_fences {
            return Err(self.err(format!(
                "a TMA copy by thread {t} completes on {}, whose mbarrier_init (by thread {}) no fence_mbarrier_init followed (the async proxy may not see the init)",
                b.name, b.init_thread
            )));
        }
        // (in a cluster a peer's multicast may land before this block's expect_tx: PTX
        // counts transactions down to -(2^20 - 1))
        let low = if self.cluster > 1 { -(1 << 20) + 1 } else { 0 };
        if b.tx - bytes < low {
            return Err(self.err(format!(
                "transaction count of {} below zero: a TMA copy by thread {t} completes {bytes} bytes in phase {}, which expects {} more (mbarrier_arrive expect_tx too small, or the copy before its arrive)",
                b.name, b.completed, b.tx
            )));
        }
        let b = &mut self.mbar.bars[slot];
        b.tx -= bytes;
        if b.pending == 0 && b.tx == 0 {
            self.mbar.complete_phase(slot);
        }
        Ok(())
    }

    /// The phase a TMA copy completing on `slot` now belongs to, as a count of completed
    /// phases a reader must have seen.
    pub(super) fn phase_to_see(&self, slot: usize) -> u32 {
        self.mbar.bars[slot].completed + 1
    }

    /// `mbarrier_wait`: None when every active thread's phase has completed (each then
    /// acquires what the phase released), else what the unit waits for.
    pub(super) fn mbarrier_wait(
        &mut self,
        active: &[u32],
        w: &inst::MbarrierWait,
    ) -> Result<Option<Wait>, Diagnostic> {
        let words = self.mbarrier_words(w.bar, &w.idx, active, "mbarrier_wait")?;
        let parity = self.eval(&w.parity, active)?;
        let mut slots = Vec::with_capacity(active.len());
        for (k, (&t, &at)) in active.iter().zip(&words).enumerate() {
            let slot = self.live_mbarrier(w.bar, at, t, "mbarrier_wait")?;
            let p = parity[k].as_i64();
            if p != 0 && p != 1 {
                return Err(self.err(format!(
                    "mbarrier_wait by thread {t} on {} for parity {p} (0 or 1)",
                    self.mbar.name(slot)
                )));
            }
            if (self.mbar.bars[slot].completed & 1) as i64 == p {
                return Ok(Some(Wait::Mbarrier { slot, parity: p }));
            }
            slots.push(slot);
        }
        for (&t, &slot) in active.iter().zip(&slots) {
            let b = &self.mbar.bars[slot];
            let mut seen = b.published.clone();
            if seen.len() <= slot {
                seen.resize(slot + 1, 0);
            }
            seen[slot] = seen[slot].max(b.completed);
            let fenced = b.fence_published.clone();
            let arrived = b.arrive_published.clone();
            self.mbar.observe(t, &seen);
            let acquired = &mut self.mbar.arrivals_acquired[t as usize];
            if acquired.len() < arrived.len() {
                acquired.resize(arrived.len(), 0);
            }
            for (a, r) in acquired.iter_mut().zip(&arrived) {
                *a = (*a).max(*r);
            }
            let acquired = &mut self.mbar.fences_acquired[t as usize];
            if acquired.len() < fenced.len() {
                acquired.resize(fenced.len(), 0);
            }
            for (a, f) in acquired.iter_mut().zip(&fenced) {
                *a = (*a).max(*f);
            }
        }
        Ok(None)
    }

    /// `setmaxnreg`: None when done, else the budget an `inc` waits for (registers other
    /// warpgroups have not given back yet).
    pub(super) fn setmaxnreg(
        &mut self,
        active: &[u32],
        s: &inst::SetMaxNReg,
    ) -> Result<Option<Wait>, Diagnostic> {
        let what = format!("setmaxnreg {} {}", if s.inc { "inc" } else { "dec" }, s.regs);
        self.full_warpgroups(active, &what)?;
        if !(24..=256).contains(&s.regs) || !s.regs.is_multiple_of(8) {
            return Err(self.err(format!("{what}: the count must be a multiple of 8 in [24, 256]")));
        }
        for group in active.chunks(128) {
            let g = group[0] as usize / 128;
            let cur = self.mbar.regs[g];
            if s.inc && s.regs < cur {
                return Err(self.err(format!(
                    "{what} by warpgroup {g}, whose budget is {cur} registers per thread (inc may not lower it)"
                )));
            }
            if !s.inc && s.regs > cur {
                return Err(self.err(format!(
                    "{what} by warpgroup {g}, whose budget is {cur} registers per thread (dec may not raise it)"
                )));
            }
            if s.inc {
                // the registers of this warpgroup's block
                let cta = self.mbar.cta_groups;
                let total: u32 = (0..self.mbar.regs.len())
                    .filter(|h| h / cta == g / cta)
                    .map(|h| if h == g { s.regs } else { self.mbar.regs[h] } * self.mbar.group_threads[h])
                    .sum();
                if total > self.mbar.pool() {
                    return Ok(Some(Wait::Registers { group: g, regs: s.regs }));
                }
            }
            self.mbar.regs[g] = s.regs;
            if !s.inc {
                self.mbar.events += 1;
            }
        }
        Ok(None)
    }

    /// `bar.sync id, threads`: counted in whole warps, of at most the launched threads.
    pub(super) fn check_named_barrier(
        &self,
        active: &[u32],
        b: &inst::NamedBarrier,
    ) -> Result<(), Diagnostic> {
        let what = format!("bar_sync {}, {}", b.id, b.threads);
        if b.id > 15 {
            return Err(self.err(format!("{what}: barrier ids are 0 to 15")));
        }
        if b.threads == 0 || !b.threads.is_multiple_of(32) || b.threads as usize > self.cta_threads {
            return Err(self.err(format!(
                "{what}: the count must be a non-zero multiple of 32 of at most the {} launched threads",
                self.cta_threads
            )));
        }
        self.full_warps(active, &what)
    }
}
