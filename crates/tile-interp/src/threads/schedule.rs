//! How a block's threads take turns. A *unit* — a warpgroup (128 consecutive threads, or
//! the rest of the block when it is smaller), or the threads of one side of a diverged
//! `if` — runs on its own, its place in the kernel a stack of frames, until it reaches a
//! barrier, a wait it cannot pass, or a yield point (`wgmma_wait`, `async_wait`, an
//! `mbarrier_arrive` without `expect_tx`: another role runs right after a release — an
//! `arrive.expect_tx` is not one, the copies that complete its phase follow it, and a TMA
//! load is not one either, so a producer runs ahead until the ring is full); then the next
//! one runs. Units take turns round-robin in warpgroup order, the first warpgroup of each
//! barrier interval rotating (warpgroup `p % n` first in interval `p`), so each ordering of
//! two warpgroups occurs; the units of one warpgroup go in the order they were made (`then`
//! before `else`). A turn in which an mbarrier phase completed (or registers were given
//! back) is followed at once by turns of the units blocked on a wait: a stage released
//! before its consumer read it is refilled before that read, which then sees a phase it
//! did not wait for.
//!
//! Inside a unit the threads run in lockstep, a statement at a time, and an `if` on thread
//! coordinates runs its `then` threads before its `else` threads — unless both sides have
//! threads and statements and hold an instruction that waits for or releases other threads
//! (a barrier, an mbarrier wait or arrive, a TMA load, `setmaxnreg`): then each side
//! becomes a unit of its own (the producer and consumer roles of one warpgroup must be able
//! to wait for each other), and the unit goes on past the `if` once both are done.
//!
//! **Waits.** An `mbarrier_wait` whose phase has not completed, or a `setmaxnreg inc` the
//! register file cannot hold yet, blocks its unit (every active thread must pass, in
//! lockstep); the unit retries once some mbarrier phase completed or a budget dropped.
//!
//! **Barriers.** `sync` (`bar.sync 0`) completes when every launched thread has reached one
//! (not necessarily the same statement: warp-specialized branches each have their own);
//! threads that finished the kernel do not count as arrived — on the GPU exited warps stop
//! holding `bar.sync 0` up in practice, but code that relies on it is fragile and the
//! compiler never puts a `sync` after the role split, so it is reported. A named barrier
//! (`bar_sync id, n`) completes when `n` threads (whole warps) have reached barrier `id`;
//! two counts on one id, or more threads than the count, are errors. Barriers complete when
//! no unit can run; a completed one starts a new barrier interval (for the race checks) and
//! shares what its threads have seen of the mbarriers.
//!
//! **Deadlock.** When no unit can run and no barrier completes, the run stops with a
//! report of every waiting unit: its threads and what they wait on (the mbarrier's phase,
//! pending arrivals and transaction bytes; the barrier and its count; the registers).
//! The loop is bounded: it stops with an error after [`MAX_TURNS`] turns.
//!
//! **Clusters.** The blocks of a thread-block cluster run together, each with its own
//! barriers (`sync`, named barriers) and `cluster_sync` over all of them. The cluster
//! barrier split in two: `cluster_arrive` counts its threads towards the current phase and
//! goes on, the phase completing (a new cluster epoch) when every thread of the cluster has
//! arrived; `cluster_wait` goes on once the phase its threads arrived in has completed. A
//! thread touching a tile that cluster views reach between its arrive and its wait is an
//! error (it is ordered with no peer there), as are a wait without an arrive, a second
//! arrive before the wait, and a `cluster_sync` meeting arrivals of the split form. The clusters of
//! a persistent kernel are run in three orders: the first cluster's block 0 runs ahead of
//! the others (its units alone while any can run), the second's last block, the third's
//! blocks in turn — a block that does not wait for its peers' releases overwrites what
//! they still read in one of them.

use super::mbarrier::Wait;
use super::*;
use std::rc::Rc;

/// Turns the scheduler gives units in one block before it gives up (a safety net: a turn
/// that makes no progress only follows a change that may unblock it).
const MAX_TURNS: u64 = 50_000_000;

/// The `if`s of `body` (by address) whose branches hold an instruction that waits for or
/// releases other threads.
pub(super) fn forking_ifs(body: &[Stmt]) -> std::collections::HashSet<usize> {
    fn synchronizes(stmts: &[Stmt]) -> bool {
        let mut found = false;
        tile_ir::walk_stmts(stmts, &mut |s| {
            found |= matches!(
                s,
                Stmt::Inst(
                    Inst::Sync(_)
                        | Inst::ClusterSync(_)
                        | Inst::ClusterArrive(_)
                        | Inst::ClusterWait(_)
                        | Inst::NamedBarrier(_)
                        | Inst::MbarrierWait(_)
                        | Inst::MbarrierArrive(_)
                        | Inst::MbarrierExpectTx(_)
                        | Inst::TmaLoad(_)
                        | Inst::SetMaxNReg(_)
                )
            )
        });
        found
    }
    let mut out = std::collections::HashSet::new();
    tile_ir::walk_stmts(body, &mut |s| {
        if let Stmt::If { then, otherwise, .. } = s {
            if synchronizes(then) || synchronizes(otherwise) {
                out.insert(s as *const Stmt as usize);
            }
        }
    });
    out
}

/// One level of a unit's place in the body.
enum Frame<'m> {
    /// Statements run by `active`, `next` the one to run.
    Block { stmts: &'m [Stmt], next: usize, active: Rc<Vec<u32>> },
    /// A loop: iteration `j` of `longest`, each thread `k` of `active` running iterations
    /// `start[k] ..+ extent[k]`.
    Loop {
        var: tile_ir::VarId,
        body: &'m [Stmt],
        start: Vec<i64>,
        extent: Vec<i64>,
        j: i64,
        active: Rc<Vec<u32>>,
    },
    /// The `else` of an `if`, for its threads once the `then` is done.
    Else { stmts: &'m [Stmt], active: Rc<Vec<u32>> },
}

/// Threads at a barrier: `sync` (id 0, every launched thread of the block), `bar_sync
/// id, count`, or `cluster_sync` (every thread of every block of the cluster). `id` is
/// the barrier's key: its id plus [`BLOCK_IDS`] times the block in the cluster (each
/// block has its own barriers), or [`CLUSTER_BARRIER`].
struct Arrival {
    id: u32,
    count: u32,
    sync: bool,
    threads: Rc<Vec<u32>>,
}

/// Keys of barriers per block of a cluster (hardware ids are 0 to 15).
const BLOCK_IDS: u32 = 64;
/// The key of `cluster_sync`.
const CLUSTER_BARRIER: u32 = u32::MAX;
/// The key of `cluster_wait` (its threads arrived before, with `cluster_arrive`).
const CLUSTER_WAIT: u32 = u32::MAX - 1;

impl Arrival {
    fn text(&self) -> String {
        if self.id == CLUSTER_BARRIER {
            "cluster_sync".into()
        } else if self.id == CLUSTER_WAIT {
            "cluster_wait".into()
        } else if self.sync {
            "sync".into()
        } else {
            format!("bar_sync {}, {}", self.id % BLOCK_IDS, self.count)
        }
    }
}

/// Why a unit stopped running.
enum Stop<'m> {
    Done,
    Barrier(Arrival),
    /// Past a yield point: others may run first.
    Yield,
    /// At a wait it cannot pass yet (the statement runs again on its next turn).
    Blocked(Wait, Rc<Vec<u32>>),
    /// At a diverged `if`: each side runs as a unit of its own.
    Fork([(&'m [Stmt], Rc<Vec<u32>>); 2]),
}

enum State {
    Ready,
    Barrier(Arrival),
    /// Blocked, as of this many mbarrier and register events.
    Blocked(Wait, Rc<Vec<u32>>, u64),
    /// Waiting for this many units it forked.
    Joining(usize),
    Done,
}

/// A unit's run: where it is, the last comment it passed (error messages name it), its
/// state, its warpgroup and age (the order of turns), and the unit that forked it.
struct Unit<'m> {
    frames: Vec<Frame<'m>>,
    context: String,
    state: State,
    group: usize,
    seq: usize,
    parent: Option<usize>,
}

/// `thread 5`, `threads 0..127`, `threads 0..31, 64..95` (inclusive), with their
/// warpgroups.
fn who(ids: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { format!("{}", ids[i]) } else { format!("{}..{}", ids[i], ids[j]) });
        i = j + 1;
    }
    let mut groups: Vec<u32> = ids.iter().map(|t| t / 128).collect();
    groups.dedup();
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    format!(
        "{} {} (warpgroup{} {})",
        if ids.len() == 1 { "thread" } else { "threads" },
        parts.join(", "),
        if groups.len() == 1 { "" } else { "s" },
        groups.join(", ")
    )
}

impl<'m> Machine<'m> {
    /// Run the kernel body once for the current block.
    pub(super) fn run_block(&mut self) -> Result<(), Diagnostic> {
        let body: &'m [Stmt] = &self.m.kernel.body;
        let threads = self.threads as u32;
        let groups = threads.div_ceil(128) as usize;
        let mut units: Vec<Option<Unit<'m>>> = (0..groups as u32)
            .map(|g| {
                Some(Unit {
                    frames: vec![Frame::Block {
                        stmts: body,
                        next: 0,
                        active: Rc::new((128 * g..(128 * g + 128).min(threads)).collect()),
                    }],
                    context: String::new(),
                    state: State::Ready,
                    group: g as usize,
                    seq: g as usize,
                    parent: None,
                })
            })
            .collect();
        let mut seq = groups;
        let mut interval = 0;
        let mut turns = 0u64;
        // threads that finished the kernel
        let mut finished: Vec<u32> = Vec::new();
        loop {
            let events = self.mbar.events;
            let mut order: Vec<usize> = (0..units.len())
                .filter(|&i| match units[i].as_ref().map(|u| &u.state) {
                    Some(State::Ready) => true,
                    Some(State::Blocked(_, _, at)) => *at != events,
                    _ => false,
                })
                .collect();
            // a cluster whose `lead` block runs ahead: its units alone while any can run
            if let Some(lead) = self.lead {
                let block_of = |i: &usize| units[*i].as_ref().map_or(0, |u| u.group * 128 / self.cta_threads);
                if order.iter().any(|i| block_of(i) == lead) {
                    order.retain(|i| block_of(i) == lead);
                }
            }
            if !order.is_empty() {
                let key = |u: &Unit| ((u.group + groups - interval % groups) % groups, u.seq);
                order.sort_by_key(|&i| key(units[i].as_ref().expect("a live unit")));
                let mut queue: std::collections::VecDeque<usize> = order.into();
                while let Some(i) = queue.pop_front() {
                    let before = self.mbar.events;
                    let runnable = match units[i].as_ref().map(|u| &u.state) {
                        Some(State::Ready) => true,
                        Some(State::Blocked(_, _, at)) => *at != before,
                        _ => false,
                    };
                    if !runnable {
                        continue;
                    }
                    turns += 1;
                    if turns > MAX_TURNS {
                        return Err(self.err(format!(
                            "the scheduler gave up after {MAX_TURNS} turns without the block finishing"
                        )));
                    }
                    let u = units[i].as_mut().expect("a live unit");
                    std::mem::swap(&mut self.context, &mut u.context);
                    let stop = self.run_unit(&mut u.frames);
                    std::mem::swap(&mut self.context, &mut u.context);
                    // (an error was written with the unit's context)
                    let stop = stop?;
                    let u = units[i].as_mut().expect("a live unit");
                    match stop {
                        Stop::Done => match u.parent {
                            None => {
                                if self.remote_since_cluster_sync {
                                    let u = units[i].as_ref().expect("a live unit");
                                    let g = u.group as u32;
                                    let ids: Vec<u32> = (128 * g..(128 * g + 128).min(threads)).collect();
                                    self.context = u.context.clone();
                                    return Err(self.err(format!(
                                        "{} finish the kernel while the cluster's blocks may still use each other's shared memory (remote arrivals or multicast since the last cluster_sync): a cluster_sync must come before a block exits",
                                        who(&ids)
                                    )));
                                }
                                let u = units[i].as_mut().expect("a live unit");
                                u.state = State::Done;
                                let g = u.group as u32;
                                finished.extend(128 * g..(128 * g + 128).min(threads));
                            }
                            Some(p) => {
                                // a unit whose forks are all done goes on past its `if`
                                units[i] = None;
                                let parent = units[p].as_mut().expect("a live parent");
                                let State::Joining(n) = &mut parent.state else {
                                    unreachable!("a joining parent")
                                };
                                *n -= 1;
                                if *n == 0 {
                                    parent.state = State::Ready;
                                }
                            }
                        },
                        Stop::Barrier(a) => {
                            let other = units.iter().flatten().find_map(|u| match &u.state {
                                State::Barrier(b) if b.id == a.id && b.count != a.count => Some(b.text()),
                                _ => None,
                            });
                            if let Some(other) = other {
                                let u = units[i].as_ref().expect("a live unit");
                                self.context = u.context.clone();
                                return Err(self.err(format!(
                                    "{} reach {} while other threads wait at {other}: one barrier id, two thread counts",
                                    who(&a.threads),
                                    a.text()
                                )));
                            }
                            units[i].as_mut().expect("a live unit").state = State::Barrier(a);
                        }
                        Stop::Yield => u.state = State::Ready,
                        Stop::Blocked(w, active) => u.state = State::Blocked(w, active, self.mbar.events),
                        Stop::Fork(sides) => {
                            let (group, context) = (u.group, u.context.clone());
                            u.state = State::Joining(2);
                            for (stmts, active) in sides {
                                units.push(Some(Unit {
                                    frames: vec![Frame::Block { stmts, next: 0, active }],
                                    context: context.clone(),
                                    state: State::Ready,
                                    group,
                                    seq,
                                    parent: Some(i),
                                }));
                                seq += 1;
                            }
                        }
                    }
                    if self.mbar.events != before {
                        // a phase completed or registers were given back: the units blocked
                        // on them run first (a stage released early is refilled before its
                        // reader reads it)
                        let now = self.mbar.events;
                        let mut woken: Vec<usize> = (0..units.len())
                            .filter(|&w| {
                                matches!(units[w].as_ref().map(|u| &u.state), Some(State::Blocked(_, _, at)) if *at != now)
                            })
                            .collect();
                        woken.sort_by_key(|&w| key(units[w].as_ref().expect("a live unit")));
                        for w in woken.into_iter().rev() {
                            queue.push_front(w);
                        }
                    }
                }
                continue;
            }
            if units.iter().flatten().all(|u| matches!(u.state, State::Done)) {
                if let Some((id, (count, threads))) = self.named_arrivals.iter().next() {
                    return Err(self.err(format!(
                        "the block finished with {} of {count} threads arrived at named barrier {} (bar_arrive) and nobody waiting for the rest",
                        threads.len(),
                        id % BLOCK_IDS
                    )));
                }
                return Ok(());
            }
            // no unit can run: complete the barriers whose threads are all there
            let mut ids: Vec<u32> = units
                .iter()
                .flatten()
                .filter_map(|u| match &u.state {
                    State::Barrier(a) => Some(a.id),
                    _ => None,
                })
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let mut released = false;
            let mut waited = false;
            for id in ids {
                if id == CLUSTER_WAIT {
                    // on once the phase each thread arrived in has completed (every thread of
                    // the cluster arrived): not a barrier of the block's shared memory
                    for u in units.iter_mut().flatten() {
                        if let State::Barrier(a) = &u.state {
                            let phase = self.cluster_phase;
                            if a.id == CLUSTER_WAIT
                                && a.threads
                                    .iter()
                                    .all(|&t| self.cluster_pending[t as usize].is_some_and(|p| p < phase))
                            {
                                for &t in a.threads.iter() {
                                    self.cluster_pending[t as usize] = None;
                                }
                                u.state = State::Ready;
                                waited = true;
                            }
                        }
                    }
                    continue;
                }
                let at: Vec<usize> = (0..units.len())
                    .filter(|&i| matches!(units[i].as_ref().map(|u| &u.state), Some(State::Barrier(a)) if a.id == id))
                    .collect();
                let mut arrived: Vec<u32> = Vec::new();
                let mut count = 0;
                for &i in &at {
                    if let Some(State::Barrier(a)) = units[i].as_ref().map(|u| &u.state) {
                        arrived.extend(a.threads.iter());
                        count = a.count;
                    }
                }
                // threads that passed it with bar.arrive count too
                if let Some((c, threads)) = self.named_arrivals.get(&id) {
                    if *c != count {
                        return Err(self.err(format!(
                            "named barrier {}: bar_arrive counted to {c}, bar_sync to {count}: one barrier id, two thread counts",
                            id % BLOCK_IDS
                        )));
                    }
                    arrived.extend(threads.iter());
                }
                arrived.sort_unstable();
                if arrived.len() > count as usize {
                    let u = units[at[0]].as_ref().expect("a live unit");
                    let State::Barrier(a) = &u.state else { unreachable!() };
                    let text = a.text();
                    self.context = u.context.clone();
                    return Err(self.err(format!(
                        "{} reach {text}: more threads than its count (two groups of threads share barrier {}?)",
                        who(&arrived),
                        id % BLOCK_IDS
                    )));
                }
                if arrived.len() == count as usize {
                    released = true;
                    if id == CLUSTER_BARRIER {
                        if self.cluster_arrived > 0 {
                            return Err(self.err(format!(
                                "cluster_sync completes while {} threads have arrived with cluster_arrive and not waited: one phase of the cluster barrier, two ways to reach it",
                                self.cluster_arrived
                            )));
                        }
                        self.cluster_epoch += 1;
                        self.remote_since_cluster_sync = false;
                    }
                    self.named_arrivals.remove(&id);
                    self.mbar.share(&arrived);
                    for i in at {
                        units[i].as_mut().expect("a live unit").state = State::Ready;
                    }
                }
            }
            if released {
                self.epoch += 1;
                interval += 1;
                continue;
            }
            if waited {
                continue;
            }
            return Err(self.deadlock(&units, &finished));
        }
    }

    /// The report of a block in which no unit can run.
    fn deadlock(&mut self, units: &[Option<Unit<'m>>], finished: &[u32]) -> Diagnostic {
        let mut lines = Vec::new();
        let mut synced: Vec<u32> = Vec::new();
        let mut context = None;
        for u in units.iter().flatten() {
            let line = match &u.state {
                State::Barrier(a) if a.sync => {
                    synced.extend(a.threads.iter());
                    format!("{} wait at sync", who(&a.threads))
                }
                State::Barrier(a) => {
                    let arrived: usize = units
                        .iter()
                        .flatten()
                        .map(|v| match &v.state {
                            State::Barrier(b) if b.id == a.id => b.threads.len(),
                            _ => 0,
                        })
                        .sum::<usize>()
                        + self.named_arrivals.get(&a.id).map_or(0, |(_, t)| t.len());
                    let arrived = if a.id == CLUSTER_WAIT { self.cluster_arrived } else { arrived };
                    format!(
                        "{} wait at {} ({arrived} of {} threads arrived)",
                        who(&a.threads),
                        a.text(),
                        a.count
                    )
                }
                State::Blocked(w, active, _) => format!("{} {}", who(active), self.mbar.describe(w)),
                _ => continue,
            };
            context.get_or_insert_with(|| u.context.clone());
            lines.push(line);
        }
        synced.sort_unstable();
        let head = if synced.is_empty() {
            "deadlock: no thread can go on".to_string()
        } else {
            format!(
                "deadlock: barrier reached by threads {} of {} (the others never arrive)",
                ranges(&synced),
                self.threads
            )
        };
        if !finished.is_empty() {
            let mut f = finished.to_vec();
            f.sort_unstable();
            lines.push(format!("{} finished the kernel", who(&f)));
        }
        self.context = context.unwrap_or_default();
        self.err(format!("{head}:\n  {}", lines.join("\n  ")))
    }

    /// The key of barrier `id` of the block of `active` (one block's threads: a unit).
    fn barrier_key(&self, active: &[u32], id: u32) -> u32 {
        id + BLOCK_IDS * active.first().map_or(0, |&t| t / self.cta_threads as u32)
    }

    /// Run one unit from where it is to its next barrier, wait, yield point or end.
    fn run_unit(&mut self, frames: &mut Vec<Frame<'m>>) -> Result<Stop<'m>, Diagnostic> {
        loop {
            let (s, active) = match frames.last_mut() {
                None => return Ok(Stop::Done),
                Some(Frame::Block { stmts, next, active }) if *next < stmts.len() && !active.is_empty() => {
                    *next += 1;
                    (&stmts[*next - 1], active.clone())
                }
                Some(_) => {
                    self.end_frame(frames);
                    continue;
                }
            };
            // a wait that cannot pass runs again on the unit's next turn
            let again = |frames: &mut Vec<Frame<'m>>| {
                if let Some(Frame::Block { next, .. }) = frames.last_mut() {
                    *next -= 1;
                }
            };
            match s {
                Stmt::For { var, start, extent, body, .. } => {
                    let start = self.eval(start, &active)?.iter().map(|v| v.as_i64()).collect();
                    let extent = self.eval(extent, &active)?.iter().map(|v| v.as_i64()).collect();
                    frames.push(Frame::Loop { var: *var, body, start, extent, j: -1, active });
                    self.next_iteration(frames);
                }
                Stmt::If { cond, then, otherwise, .. } => {
                    let c = self.eval(cond, &active)?;
                    let (mut yes, mut no) = (Vec::new(), Vec::new());
                    for (&t, v) in active.iter().zip(&c) {
                        if v.as_i64() != 0 {
                            yes.push(t)
                        } else {
                            no.push(t)
                        }
                    }
                    let diverged =
                        !yes.is_empty() && !no.is_empty() && !then.is_empty() && !otherwise.is_empty();
                    if diverged && self.forking_ifs.contains(&(s as *const Stmt as usize)) {
                        return Ok(Stop::Fork([(then, Rc::new(yes)), (otherwise, Rc::new(no))]));
                    }
                    frames.push(Frame::Else { stmts: otherwise, active: Rc::new(no) });
                    frames.push(Frame::Block { stmts: then, next: 0, active: Rc::new(yes) });
                }
                Stmt::Inst(Inst::LoopBreak(_)) => Self::break_loop(frames, &active),
                Stmt::Inst(Inst::Sync(_)) => {
                    let count = self.cta_threads as u32;
                    let id = self.barrier_key(&active, 0);
                    return Ok(Stop::Barrier(Arrival { id, count, sync: true, threads: active }));
                }
                Stmt::Inst(Inst::ClusterArrive(_)) => self.cluster_arrive(&active)?,
                Stmt::Inst(Inst::ClusterWait(_)) => {
                    if let Some(t) = active.iter().find(|&&t| self.cluster_pending[t as usize].is_none()) {
                        return Err(self.err(format!(
                            "thread {t} reaches cluster_wait without a cluster_arrive before it"
                        )));
                    }
                    let phase = self.cluster_phase;
                    if active.iter().all(|&t| self.cluster_pending[t as usize].is_some_and(|p| p < phase)) {
                        for &t in active.iter() {
                            self.cluster_pending[t as usize] = None;
                        }
                    } else {
                        let count = self.threads as u32;
                        return Ok(Stop::Barrier(Arrival {
                            id: CLUSTER_WAIT,
                            count,
                            sync: false,
                            threads: active,
                        }));
                    }
                }
                Stmt::Inst(Inst::ClusterSync(_)) => {
                    if let Some(t) = active.iter().find(|&&t| self.cluster_pending[t as usize].is_some()) {
                        return Err(self.err(format!(
                            "thread {t} reaches cluster_sync after a cluster_arrive it has not waited for"
                        )));
                    }
                    let count = self.threads as u32;
                    return Ok(Stop::Barrier(Arrival {
                        id: CLUSTER_BARRIER,
                        count,
                        sync: true,
                        threads: active,
                    }));
                }
                Stmt::Inst(Inst::NamedBarrier(b)) if b.arrive => {
                    // bar.arrive: counted towards the barrier, and on without waiting
                    self.check_named_barrier(&active, b)?;
                    let key = self.barrier_key(&active, b.id);
                    let (count, threads) = self.named_arrivals.entry(key).or_insert((b.threads, Vec::new()));
                    threads.extend(active.iter());
                    let (count, arrived) = (*count, threads.len());
                    if count != b.threads {
                        return Err(self.err(format!(
                            "bar_arrive {}, {}: barrier {} already has arrivals counting to {count}: one barrier id, two thread counts",
                            b.id, b.threads, b.id
                        )));
                    }
                    if arrived > count as usize {
                        return Err(self.err(format!(
                            "bar_arrive {}, {}: {arrived} threads arrived at barrier {} before it completed, more than its count",
                            b.id, b.threads, b.id
                        )));
                    }
                    return Ok(Stop::Yield);
                }
                Stmt::Inst(Inst::NamedBarrier(b)) => {
                    self.check_named_barrier(&active, b)?;
                    return Ok(Stop::Barrier(Arrival {
                        id: self.barrier_key(&active, b.id),
                        count: b.threads,
                        sync: false,
                        threads: active,
                    }));
                }
                Stmt::Inst(Inst::MbarrierWait(w)) => {
                    if let Some(wait) = self.mbarrier_wait(&active, w)? {
                        again(frames);
                        return Ok(Stop::Blocked(wait, active));
                    }
                }
                Stmt::Inst(Inst::SetMaxNReg(r)) => {
                    if let Some(wait) = self.setmaxnreg(&active, r)? {
                        again(frames);
                        return Ok(Stop::Blocked(wait, active));
                    }
                }
                // an arrive releases what others may wait for; one with expect_tx is not a
                // yield point (the copies that complete its phase follow it)
                Stmt::Inst(Inst::MbarrierArrive(inst::MbarrierArrive { expect_tx: None, .. }))
                | Stmt::Inst(Inst::WgmmaWait(_) | Inst::AsyncWait(_)) => {
                    self.stmt(s, &active)?;
                    return Ok(Stop::Yield);
                }
                _ => self.stmt(s, &active)?,
            }
        }
    }

    /// `break` by `threads`: they leave every frame up to and including the innermost loop's
    /// (the others go on where they are).
    /// `cluster_arrive` by `active`: counted towards the cluster barrier's current phase, on
    /// without waiting; the phase completes when every thread of the cluster has arrived.
    fn cluster_arrive(&mut self, active: &[u32]) -> Result<(), Diagnostic> {
        if let Some(&t) = active.iter().find(|&&t| self.cluster_pending[t as usize].is_some()) {
            return Err(
                self.err(format!("thread {t} reaches cluster_arrive twice without a cluster_wait between"))
            );
        }
        for &t in active {
            self.cluster_pending[t as usize] = Some(self.cluster_phase);
        }
        self.cluster_arrived += active.len();
        if self.cluster_arrived == self.threads {
            // what every thread did before arriving is visible past its wait
            self.cluster_phase += 1;
            self.cluster_arrived = 0;
            self.cluster_epoch += 1;
            self.remote_since_cluster_sync = false;
        }
        Ok(())
    }

    fn break_loop(frames: &mut [Frame<'m>], threads: &[u32]) {
        let keep = |a: &Rc<Vec<u32>>| {
            Rc::new(a.iter().copied().filter(|t| !threads.contains(t)).collect::<Vec<_>>())
        };
        for f in frames.iter_mut().rev() {
            match f {
                Frame::Block { active, .. } | Frame::Else { active, .. } => *active = keep(active),
                Frame::Loop { active, start, extent, .. } => {
                    let stays: Vec<bool> = active.iter().map(|t| !threads.contains(t)).collect();
                    let mut k = 0;
                    start.retain(|_| (stays[k], k += 1).0);
                    k = 0;
                    extent.retain(|_| (stays[k], k += 1).0);
                    *active = keep(active);
                    return;
                }
            }
        }
    }

    /// The top frame is done: a block returns to its loop (next iteration) or `if` (its
    /// `else`); a loop past its last iteration and an `else` are done too.
    fn end_frame(&mut self, frames: &mut Vec<Frame<'m>>) {
        match frames.pop() {
            Some(Frame::Block { .. }) => match frames.last_mut() {
                Some(Frame::Loop { .. }) => self.next_iteration(frames),
                Some(Frame::Else { stmts, active }) => {
                    let (stmts, active) = (*stmts, active.clone());
                    *frames.last_mut().expect("the else") = Frame::Block { stmts, next: 0, active };
                }
                _ => {}
            },
            Some(Frame::Else { .. } | Frame::Loop { .. }) | None => {}
        }
    }

    /// Start the next iteration of the loop on top: bind its variable for the threads that
    /// run it and push its body, or pop the loop when no thread has more.
    fn next_iteration(&mut self, frames: &mut Vec<Frame<'m>>) {
        let Some(Frame::Loop { var, body, start, extent, j, active }) = frames.last_mut() else {
            unreachable!("a loop on top")
        };
        *j += 1;
        let (var, body, j) = (*var, *body, *j);
        let now: Rc<Vec<u32>> = if extent.iter().all(|&e| j < e) {
            active.clone()
        } else {
            Rc::new(active.iter().zip(extent.iter()).filter(|(_, &e)| j < e).map(|(&t, _)| t).collect())
        };
        if now.is_empty() {
            // past the last iteration: the block holding the loop goes on
            frames.pop();
            return;
        }
        let values: Vec<Val> = active
            .iter()
            .zip(extent.iter().zip(start.iter()))
            .filter(|(_, (&e, _))| j < e)
            .map(|(_, (_, &s))| Val::I(s + j))
            .collect();
        self.bind(var, &now, &values);
        frames.push(Frame::Block { stmts: body, next: 0, active: now });
    }
}
