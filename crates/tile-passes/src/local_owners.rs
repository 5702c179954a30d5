//! Part of `infer_layouts`: which thread holds each element of a per-thread buffer
//! (`T.alloc_local`) that `T.Parallel` loops index by their variables.
//!
//! A local buffer is each thread's own: an element one thread sets in a `T.Parallel`
//! iteration is not in another thread's copy. Once the loop layouts say which thread runs
//! which iteration, the check follows the program, element by element: a read of an element
//! whose last setter ran on other threads (`loc[i] = A[i]` in one loop, `loc[127 - i]` in
//! the next; a loop of another vector width; a read outside the loops of what the loops
//! set) is an error at the read, which would otherwise return another value on the GPU
//! than in the reference interpreter (where the block's iterations share one buffer).
//!
//! Conservative where it cannot tell: an index that is not a constant once the loop
//! variables are bound (a serial loop's variable, a block index) stops the check of that
//! buffer (a write) or of that read; loops of more than 2^16 iterations are not enumerated.
//! Only buffers some `T.Parallel` loop indexes by its variables are followed: a local
//! scalar each iteration sets and reads (`tmp[0]`) is the common, correct use.

use std::collections::{BTreeMap, BTreeSet};

use tile_ir::simplify::simplify;
use tile_ir::{Diagnostic, Expr, FragmentLayout, Loc, Module, Scope, Stmt, VarId};

/// Iterations of one loop the check enumerates at most.
const MAX_POINTS: i64 = 1 << 16;

/// Who set an element last: every thread (code outside the loops), or these threads.
#[derive(Clone, Debug, PartialEq)]
enum Owner {
    All,
    Threads(BTreeSet<i64>, Loc),
}

impl Owner {
    fn holds(&self, t: i64) -> bool {
        match self {
            Owner::All => true,
            Owner::Threads(s, _) => s.contains(&t),
        }
    }
    /// The owners after either of two paths (an `if`'s branches): the union.
    fn union(&self, other: &Owner) -> Owner {
        match (self, other) {
            (Owner::Threads(a, l), Owner::Threads(b, _)) => Owner::Threads(a.union(b).copied().collect(), *l),
            _ => Owner::All,
        }
    }
}

type State = BTreeMap<(u32, i64), Owner>;

struct Check<'a> {
    m: &'a Module,
    /// the buffers followed (local, indexed by some parallel loop's variables)
    followed: BTreeSet<u32>,
    /// buffers given up on (a write the check cannot place)
    lost: BTreeSet<u32>,
    reported: BTreeSet<(u32, u32, u32, u32)>,
    diags: Vec<Diagnostic>,
}

pub(crate) fn check(m: &Module) -> Vec<Diagnostic> {
    let mut followed = BTreeSet::new();
    tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Parallel { vars, body, .. } = s {
            accesses(body, &mut |buf, idx, _| {
                let local = m.buffer(buf).scope == Scope::Local;
                if local && idx.iter().any(|e| vars.iter().any(|v| e.uses_var(*v))) {
                    followed.insert(buf.0);
                }
            });
        }
    });
    if followed.is_empty() {
        return Vec::new();
    }
    let mut c = Check { m, followed, lost: BTreeSet::new(), reported: BTreeSet::new(), diags: Vec::new() };
    let mut state = State::new();
    c.block(&m.kernel.body, &mut state);
    c.diags
}

/// Every buffer access of `body` and the statements below it: (buffer, index, is a write).
fn accesses(body: &[Stmt], f: &mut dyn FnMut(tile_ir::BufferId, &[Expr], bool)) {
    tile_ir::walk_stmts(body, &mut |s| {
        if let Stmt::Store { buf, idx, .. } | Stmt::Atomic { buf, idx, .. } = s {
            f(*buf, idx, true);
        }
        tile_ir::stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, idx, .. } = x {
                    f(*buf, idx, false);
                }
            })
        });
    });
}

/// `e` with the bound variables replaced, as a constant when that makes it one.
fn eval(e: &Expr, env: &[(VarId, i64)]) -> Option<i64> {
    let mut x = e.clone();
    for (v, k) in env {
        if x.uses_var(*v) {
            x = x.substitute(*v, &Expr::int(*k));
        }
    }
    simplify(x).as_int()
}

/// The loads of local buffers in `e` (with their indices).
fn local_loads(m: &Module, e: &Expr, out: &mut Vec<(tile_ir::BufferId, Vec<Expr>)>) {
    e.walk(&mut |x| {
        if let Expr::Load { buf, idx, .. } = x {
            if m.buffer(*buf).scope == Scope::Local {
                out.push((*buf, idx.clone()));
            }
        }
    });
}

impl Check<'_> {
    fn flat(&self, buf: tile_ir::BufferId, idx: &[i64]) -> Option<i64> {
        let ext = self.m.buffer(buf).extents();
        if ext.len() != idx.len() {
            return None;
        }
        let mut k = 0;
        for (i, n) in idx.iter().zip(&ext) {
            if *i < 0 || i >= n {
                return None;
            }
            k = k * n + i;
        }
        Some(k)
    }

    fn tracked(&self, buf: tile_ir::BufferId) -> bool {
        self.followed.contains(&buf.0) && !self.lost.contains(&buf.0)
    }

    /// Statements run by every thread (outside the parallel loops).
    fn block(&mut self, body: &[Stmt], state: &mut State) {
        for s in body {
            match s {
                Stmt::Parallel { vars, extents, body, layout, .. } => match layout {
                    Some(l) => self.parallel(vars, extents, body, l, state),
                    None => accesses(body, &mut |buf, _, write| {
                        if write {
                            self.lost.insert(buf.0);
                        }
                    }),
                },
                Stmt::For { start, extent, body, .. } => {
                    self.reads_by_all(start, &[], state, s.loc());
                    self.reads_by_all(extent, &[], state, s.loc());
                    // twice: what the body sets at its end reaches its start the next time
                    self.block(body, state);
                    self.block(body, state);
                }
                Stmt::If { cond, then, otherwise, loc } => {
                    self.reads_by_all(cond, &[], state, *loc);
                    let mut other = state.clone();
                    self.block(then, state);
                    self.block(otherwise, &mut other);
                    merge(state, &other);
                }
                Stmt::Async { body } => self.block(body, state),
                Stmt::Store { buf, idx, value, loc } | Stmt::Atomic { buf, idx, value, loc, .. } => {
                    for e in idx.iter().chain([value]) {
                        self.reads_by_all(e, &[], state, *loc);
                    }
                    if self.tracked(*buf) {
                        let at: Option<Vec<i64>> = idx.iter().map(|e| eval(e, &[])).collect();
                        match at.and_then(|at| self.flat(*buf, &at)) {
                            Some(k) => {
                                state.insert((buf.0, k), Owner::All);
                            }
                            // an element the check cannot name, set by every thread:
                            // forget what it knew of the buffer (fewer errors, never false ones)
                            None => state.retain(|(b, _), _| *b != buf.0),
                        }
                    }
                }
                other => {
                    // tile operations: a local destination is set whole by every thread
                    let dst = match other {
                        Stmt::Copy(op) => Some(op.dst.buf),
                        Stmt::Fill { dst, .. } => Some(dst.buf),
                        Stmt::Reduce(op) => Some(op.dst),
                        Stmt::Gemm(op) => Some(op.c),
                        _ => None,
                    };
                    if let Some(b) = dst {
                        state.retain(|(x, _), _| *x != b.0);
                    }
                    let loc = other.loc();
                    let mut exprs = Vec::new();
                    tile_ir::stmt_exprs(other, &mut |e| exprs.push(e.clone()));
                    for e in &exprs {
                        self.reads_by_all(e, &[], state, loc);
                    }
                }
            }
        }
    }

    /// Loads in `e`, evaluated by every thread: each element must be every thread's.
    fn reads_by_all(&mut self, e: &Expr, env: &[(VarId, i64)], state: &State, loc: Loc) {
        let mut loads = Vec::new();
        local_loads(self.m, e, &mut loads);
        for (buf, idx) in loads {
            if !self.tracked(buf) {
                continue;
            }
            let at: Option<Vec<i64>> = idx.iter().map(|x| eval(x, env)).collect();
            let Some(k) = at.as_ref().and_then(|at| self.flat(buf, at)) else { continue };
            if let Some(Owner::Threads(set, wloc)) = state.get(&(buf.0, k)) {
                let t = (0..).find(|t| !set.contains(t)).unwrap_or(0);
                self.report(buf, &at.unwrap(), t, set, *wloc, loc);
            }
        }
    }

    fn parallel(
        &mut self,
        vars: &[VarId],
        extents: &[i64],
        body: &[Stmt],
        l: &FragmentLayout,
        state: &mut State,
    ) {
        let points: i64 = extents.iter().product();
        let mut touched = BTreeSet::new();
        accesses(body, &mut |buf, _, write| {
            if write {
                touched.insert(buf.0);
            }
        });
        if points > MAX_POINTS || l.shape() != extents {
            self.lost.extend(touched);
            return;
        }
        // this loop's writes first: element -> threads that set it (definitely or maybe)
        let mut sets: BTreeMap<(u32, i64), (BTreeSet<i64>, Loc, bool)> = BTreeMap::new();
        let mut reads: Vec<(tile_ir::BufferId, Vec<i64>, i64, i64, Loc)> = Vec::new();
        let mut coord = vec![0i64; extents.len()];
        for p in 0..points {
            let mut r = p;
            for k in (0..extents.len()).rev() {
                coord[k] = r % extents[k];
                r /= extents[k];
            }
            let holders = l.holders(&coord);
            let env: Vec<(VarId, i64)> = vars.iter().copied().zip(coord.iter().copied()).collect();
            self.iteration(body, &env, true, &holders, &mut sets, &mut reads);
        }
        for (buf, at, k, t, loc) in reads {
            if !self.tracked(buf) {
                continue;
            }
            let ok = match sets.get(&(buf.0, k)) {
                Some((threads, _, _)) => threads.contains(&t),
                None => state.get(&(buf.0, k)).is_none_or(|o| o.holds(t)),
            };
            if !ok {
                let (set, wloc) = match (sets.get(&(buf.0, k)), state.get(&(buf.0, k))) {
                    (Some((s, l, _)), _) => (s.clone(), *l),
                    (None, Some(Owner::Threads(s, l))) => (s.clone(), *l),
                    _ => continue,
                };
                self.report(buf, &at, t, &set, wloc, loc);
            }
        }
        for ((b, k), (threads, loc, sure)) in sets {
            let now = Owner::Threads(threads, loc);
            let new = match (sure, state.get(&(b, k))) {
                (false, Some(before)) => before.union(&now),
                _ => now,
            };
            state.insert((b, k), new);
        }
    }

    /// One iteration of a parallel loop's body, run by `holders`.
    #[allow(clippy::type_complexity)]
    fn iteration(
        &mut self,
        body: &[Stmt],
        env: &[(VarId, i64)],
        sure: bool,
        holders: &[i64],
        sets: &mut BTreeMap<(u32, i64), (BTreeSet<i64>, Loc, bool)>,
        reads: &mut Vec<(tile_ir::BufferId, Vec<i64>, i64, i64, Loc)>,
    ) {
        let mut env = env.to_vec();
        for s in body {
            let loc = s.loc();
            // reads of this statement's own expressions (not its children's)
            if sure || !matches!(s, Stmt::If { .. }) {
                let mut exprs = Vec::new();
                tile_ir::stmt_exprs(s, &mut |e| exprs.push(e.clone()));
                for e in &exprs {
                    let mut loads = Vec::new();
                    local_loads(self.m, e, &mut loads);
                    for (buf, idx) in loads {
                        if !self.tracked(buf) {
                            continue;
                        }
                        let at: Option<Vec<i64>> = idx.iter().map(|x| eval(x, &env)).collect();
                        // a read under a condition the check cannot decide is not checked
                        if let (true, Some(at)) = (sure, at) {
                            if let Some(k) = self.flat(buf, &at) {
                                for &t in holders {
                                    reads.push((buf, at.clone(), k, t, loc));
                                }
                            }
                        }
                    }
                }
            }
            match s {
                Stmt::Store { buf, idx, .. } | Stmt::Atomic { buf, idx, .. } if self.tracked(*buf) => {
                    let at: Option<Vec<i64>> = idx.iter().map(|x| eval(x, &env)).collect();
                    match at.and_then(|at| self.flat(*buf, &at)) {
                        Some(k) => {
                            let e = sets.entry((buf.0, k)).or_insert_with(|| (BTreeSet::new(), loc, sure));
                            e.0.extend(holders.iter().copied());
                            e.1 = loc;
                            e.2 &= sure;
                        }
                        None => {
                            self.lost.insert(buf.0);
                        }
                    }
                }
                Stmt::Let { var, value } => {
                    if let Some(k) = eval(value, &env) {
                        env.push((*var, k));
                    }
                }
                Stmt::If { cond, then, otherwise, .. } => match (sure, eval(cond, &env)) {
                    (true, Some(c)) => {
                        let taken = if c != 0 { then } else { otherwise };
                        self.iteration(taken, &env, true, holders, sets, reads);
                    }
                    _ => {
                        self.iteration(then, &env, false, holders, sets, reads);
                        self.iteration(otherwise, &env, false, holders, sets, reads);
                    }
                },
                other => {
                    // a loop or anything else with a body: its variables are not bound, so
                    // its writes are placed where they can be and its reads not checked
                    for b in other.bodies() {
                        self.iteration(b, &env, false, holders, sets, reads);
                    }
                }
            }
        }
    }

    fn report(
        &mut self,
        buf: tile_ir::BufferId,
        at: &[i64],
        t: i64,
        set: &BTreeSet<i64>,
        wloc: Loc,
        loc: Loc,
    ) {
        if !self.reported.insert((buf.0, loc.source, loc.line, loc.col)) {
            return;
        }
        let name = self.m.buffer(buf).name.clone();
        let elem = at.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
        let who = threads_text(set);
        self.diags.push(
            Diagnostic::error(
                format!(
                    "'{name}' is each thread's own (a local buffer), and thread {t} reads {name}[{elem}] here, which only {who} set: the threads of a T.Parallel loop do not see each other's copies"
                ),
                loc,
            )
            .with_label(wloc, format!("{name}[{elem}] is set here, by {who}"))
            .with_help(format!(
                "allocate '{name}' with T.alloc_fragment (a tile the block's threads share: the compiler moves elements between threads where a loop needs them), or read each element only in the loop iteration that sets it"
            )),
        );
    }
}

/// "thread 3", "threads 0-31", "threads 0, 4, 8 and 3 more".
fn threads_text(set: &BTreeSet<i64>) -> String {
    let v: Vec<i64> = set.iter().copied().collect();
    match v.as_slice() {
        [] => "no thread".into(),
        [t] => format!("thread {t}"),
        _ if v.windows(2).all(|w| w[1] == w[0] + 1) => format!("threads {}-{}", v[0], v[v.len() - 1]),
        _ if v.len() <= 4 => {
            format!("threads {}", v.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "))
        }
        _ => format!("threads {}, {}, {} and {} more", v[0], v[1], v[2], v.len() - 3),
    }
}

/// `state` after either path: per element, the union of its owners (absent: unknown).
fn merge(state: &mut State, other: &State) {
    let keys: BTreeSet<(u32, i64)> = state.keys().chain(other.keys()).copied().collect();
    for k in keys {
        match (state.get(&k), other.get(&k)) {
            (Some(a), Some(b)) => {
                let u = a.union(b);
                state.insert(k, u);
            }
            _ => {
                state.remove(&k);
            }
        }
    }
}
