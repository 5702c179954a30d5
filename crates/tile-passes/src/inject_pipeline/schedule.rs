//! Manual schedules of pipelined loops (`T.Pipelined(n, stage=[...], order=[...])`,
//! `ForKind::Pipelined::schedule`): a modulo schedule of the loop's consumer statements.
//!
//! A consumer statement of stage `c` (its stage less the smallest consumer stage) runs
//! iteration `i - c` at step `i`; within a step the statements run by `order` (ties in
//! source order). The loop becomes a prologue of `S` steps (the largest `c`), a steady
//! state of `n - S` steps without guards, and an epilogue of `S` steps; a statement runs
//! iteration `L` only where `0 ≤ L < n`, so any trip count (0 included) runs every
//! statement of every iteration exactly once.
//!
//! A schedule changes no result: `plan` checks that every pair of consumers that share a
//! buffer (one writing it) keeps the order of the source loop — within an iteration and
//! across the `S` following ones — and refuses the schedule at the user's line otherwise.
//! The pipeline's ring tiles are exempt: the ring's barriers version them by iteration.
//!
//! In the steady state a `wgmma` gemm returns with its group in flight
//! (`GemmInst::deferred`) and `place_waits` puts the `wgmma.wait_group` that retires it
//! before the first later statement that touches its accumulator or writes its operands,
//! the release of a ring stage after the wait that retires the wgmmas reading it: so the
//! softmax of one K/V tile overlaps the tensor core's gemms of another (FlashAttention-3's
//! intra-warpgroup overlap) when the schedule puts them in that order.

use std::collections::BTreeSet;
use tile_ir::simplify::simplify;
use tile_ir::*;

/// A consumer statement's place: its stage offset and its position in a step.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub stage: u32,
    pub order: i32,
}

/// The checked schedule of a loop's consumers (in source order).
pub(super) struct Plan {
    pub places: Vec<Place>,
    /// The consumers' indices in the order a step runs them.
    pub emit: Vec<usize>,
    /// The largest stage offset: the steps of the prologue and of the epilogue.
    pub span: u32,
}

/// Every buffer a statement (children included) reads and writes, any scope; an
/// accumulating gemm or reduction reads its destination too.
pub(super) fn effects(s: &Stmt) -> (BTreeSet<BufferId>, BTreeSet<BufferId>) {
    let mut reads = BTreeSet::new();
    let mut writes = BTreeSet::new();
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        match st {
            Stmt::Store { buf, .. } => {
                writes.insert(*buf);
            }
            Stmt::Atomic { buf, prev, .. } => {
                reads.insert(*buf);
                writes.insert(*buf);
                writes.extend(prev.iter().copied());
            }
            Stmt::Copy(op) => {
                reads.insert(op.src.buf);
                writes.insert(op.dst.buf);
                if op.atomic.is_some() {
                    reads.insert(op.dst.buf);
                }
            }
            Stmt::Fill { dst, .. } => {
                writes.insert(dst.buf);
            }
            Stmt::Reduce(op) => {
                reads.insert(op.src);
                writes.insert(op.dst);
                if !op.clear {
                    reads.insert(op.dst);
                }
            }
            Stmt::Gemm(op) => {
                reads.extend([op.a, op.b]);
                writes.insert(op.c);
                if !op.clear_accum {
                    reads.insert(op.c);
                }
            }
            Stmt::Inst(i) => {
                for a in i.accesses() {
                    match a.kind {
                        inst::AccessKind::Read => reads.insert(a.buf),
                        inst::AccessKind::Write => writes.insert(a.buf),
                    };
                }
            }
            Stmt::Print { what: Printed::Tile(r), .. } => {
                reads.insert(r.buf);
            }
            _ => {}
        }
        stmt_exprs(st, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    reads.insert(*buf);
                }
            })
        });
    });
    (reads, writes)
}

/// Check the schedule of the loop body's consumers (`consumers`: their positions in the
/// body and the statements; `ring`: the tiles the pipeline versions per iteration). The
/// error is the user's: it names the statements and the buffer.
pub(super) fn plan(
    m: &Module,
    schedule: &Schedule,
    body_len: usize,
    consumers: &[(usize, &Stmt)],
    ring: &BTreeSet<BufferId>,
    loc: Loc,
) -> Result<Plan, Diagnostic> {
    let line = |l: Loc| m.sources.short(l).unwrap_or_else(|| "?".to_string());
    if schedule.stage.len() != body_len {
        return Err(Diagnostic::error(
            format!(
                "T.Pipelined: stage= and order= give {} entries, the loop body has {body_len} statements",
                schedule.stage.len()
            ),
            loc,
        ));
    }
    if consumers.is_empty() {
        return Ok(Plan { places: vec![], emit: vec![], span: 0 });
    }
    // a copy from global into shared left to the pipeline (stage -1) where there is none
    // (a serial loop) runs in the first stage
    let is_load = |s: &Stmt| {
        matches!(s, Stmt::Copy(op) if m.buffer(op.src.buf).scope == Scope::Global
            && m.buffer(op.dst.buf).scope == Scope::Shared)
    };
    for &(k, s) in consumers {
        if schedule.stage[k] < 0 && !is_load(s) {
            return Err(Diagnostic::error(
                format!(
                    "T.Pipelined: the statement at {} has stage {}: only the copies the pipeline runs ahead (global into a shared tile) may be left to it",
                    line(s.loc()),
                    schedule.stage[k]
                ),
                loc,
            )
            .with_help("give it a stage of 0 or more"));
        }
    }
    let low = consumers.iter().map(|&(k, _)| schedule.stage[k].max(0)).min().unwrap_or(0);
    let places: Vec<Place> = consumers
        .iter()
        .map(|&(k, _)| Place { stage: (schedule.stage[k].max(low) - low) as u32, order: schedule.order[k] })
        .collect();
    let span = places.iter().map(|p| p.stage).max().unwrap_or(0);
    let mut emit: Vec<usize> = (0..consumers.len()).collect();
    emit.sort_by_key(|&g| (places[g].order, g));
    let pos: Vec<usize> = {
        let mut p = vec![0; emit.len()];
        for (at, &g) in emit.iter().enumerate() {
            p[g] = at;
        }
        p
    };
    // x's instance of iteration i runs at step i + stage, position pos: y's of iteration
    // i + d must come after it wherever they share a buffer (d = 0: y after x in source)
    let runs_before = |x: usize, y: usize, d: i64| {
        let (sx, sy) = (places[x].stage as i64, places[y].stage as i64 + d);
        sx < sy || (sx == sy && pos[x] < pos[y])
    };
    let fx: Vec<_> = consumers.iter().map(|(_, s)| effects(s)).collect();
    let shared_buffer = |x: usize, y: usize| -> Option<BufferId> {
        let (rx, wx) = &fx[x];
        let (ry, wy) = &fx[y];
        wx.iter()
            .find(|b| ry.contains(b) || wy.contains(b))
            .or_else(|| rx.iter().find(|b| wy.contains(b)))
            .copied()
            .filter(|b| !ring.contains(b))
    };
    let n = consumers.len();
    for x in 0..n {
        for y in 0..n {
            // pairs of one iteration (x before y in the source), then across iterations
            for d in 0..=span as i64 {
                if d == 0 && x >= y {
                    continue;
                }
                if runs_before(x, y, d) {
                    continue;
                }
                let Some(b) = shared_buffer(x, y) else { continue };
                let name = &m.buffer(b).name;
                let (lx, ly) = (line(consumers[x].1.loc()), line(consumers[y].1.loc()));
                let when = match d {
                    0 => "of the same iteration".to_string(),
                    1 => "of the next iteration".to_string(),
                    d => format!("of {d} iterations later"),
                };
                return Err(Diagnostic::error(
                    format!(
                        "T.Pipelined: this stage=/order= runs the statement at {ly} {when} before the one at {lx}, but both use '{name}' (one writes it): the schedule would change the result"
                    ),
                    consumers[y].1.loc(),
                )
                .with_label(consumers[x].1.loc(), "must run first")
                .with_label(loc, "the schedule")
                .with_help("give the later statement a larger stage, or the same stage and a larger order"));
            }
        }
    }
    Ok(Plan { places, emit, span })
}

/// A piece of a scheduled step: a consumer statement of stage offset `stage`, or the
/// release of tiles `tiles` once no gemm in flight reads them: ring tiles of the ring stage
/// their readers of offset `stage` used, or a once-per-tile tile outside the ring.
#[allow(clippy::large_enum_variant)] // short-lived, one per scheduled statement
pub(super) enum Item {
    Stmt { s: Stmt, stage: u32 },
    Release { stage: u32, tiles: Vec<BufferId>, body: Vec<Stmt> },
}

/// The scheduled loop's three parts.
pub(super) struct Expanded {
    pub prologue: Vec<Stmt>,
    /// The steady state's loop body (`for step in 0..max(n - S, 0)`), with the loop.
    pub steady: Vec<Stmt>,
    pub step: VarId,
    pub extent: Expr,
    pub epilogue: Vec<Stmt>,
}

impl Expanded {
    /// The statements: prologue, the steady loop, epilogue.
    pub fn stmts(self, loc: Loc) -> Vec<Stmt> {
        let mut out = self.prologue;
        out.push(Stmt::For {
            var: self.step,
            start: Expr::int(0),
            extent: self.extent,
            kind: ForKind::Serial,
            body: self.steady,
            loc,
        });
        out.extend(self.epilogue);
        out
    }
}

/// The scheduled loop: `group(m, g, L, steady)` gives consumer `g`'s pieces for its
/// iteration `L` (an i32 expression counted from 0); in the steady state `place_waits`
/// orders them with the wgmma waits.
pub(super) fn expand(
    m: &mut Module,
    plan: &Plan,
    n: &Expr,
    loc: Loc,
    ring: &BTreeSet<BufferId>,
    group: &mut dyn FnMut(&mut Module, usize, Expr, bool) -> Vec<Item>,
) -> Expanded {
    let span = plan.span as i64;
    let bin = Expr::binary;
    let flat = |items: Vec<Item>| -> Vec<Stmt> {
        items
            .into_iter()
            .flat_map(|it| match it {
                Item::Stmt { s, .. } => vec![s],
                Item::Release { body, .. } => body,
            })
            .collect()
    };
    let guarded = |l: &Expr, body: Vec<Stmt>| Stmt::If {
        cond: simplify(bin(BinOp::Lt, l.clone(), n.clone())),
        then: body,
        otherwise: vec![],
        loc,
    };
    let mut out = Vec::new();
    let mut prologue = Vec::new();
    // prologue: steps 0..S, each consumer of offset ≤ step on iteration step - offset
    for p in 0..span {
        for &g in &plan.emit {
            let c = plan.places[g].stage as i64;
            if c > p {
                continue;
            }
            let l = Expr::int(p - c);
            let body = flat(group(m, g, l.clone(), false));
            prologue.push(guarded(&l, body));
        }
    }
    // steady state: steps S..n
    let j = m.add_var("step", VarKind::Loop, DType::I32);
    let mut items = Vec::new();
    for &g in &plan.emit {
        let c = plan.places[g].stage as i64;
        let l = simplify(bin(BinOp::Add, Expr::var(j, DType::I32), Expr::int(span - c)));
        items.extend(group(m, g, l, true));
    }
    let steady = place_waits(m, items, ring);
    let extent = simplify(bin(BinOp::Max, bin(BinOp::Sub, n.clone(), Expr::int(span)), Expr::int(0)));
    // epilogue: steps max(n, S) + e, each consumer of offset > e
    let base = simplify(bin(BinOp::Max, n.clone(), Expr::int(span)));
    for e in 0..span {
        for &g in &plan.emit {
            let c = plan.places[g].stage as i64;
            if c <= e {
                continue;
            }
            let l = simplify(bin(BinOp::Add, base.clone(), Expr::int(e - c)));
            let body = flat(group(m, g, l.clone(), false));
            out.push(guarded(&l, body));
        }
    }
    Expanded { prologue, steady, step: j, extent, epilogue: out }
}

/// A deferred wgmma gemm in flight: its accumulator, its register A operand, its shared
/// operands, and the stage offset whose ring tiles it reads (and which tiles).
struct InFlight {
    acc: BufferId,
    a_regs: Option<BufferId>,
    shared: Vec<BufferId>,
    ring: Option<u32>,
}

impl InFlight {
    /// Does this gemm still read `tiles`: ring tiles of stage offset `stage`, or tiles
    /// outside the ring (a once-per-tile tile such as Q: any instance reads the one copy)?
    fn reads(&self, stage: u32, tiles: &[BufferId], ring: &BTreeSet<BufferId>) -> bool {
        let outside = tiles.iter().any(|t| !ring.contains(t));
        (outside || self.ring == Some(stage)) && self.shared.iter().any(|b| tiles.contains(b))
    }
}

/// The steady state's pieces in order, with a `wgmma_wait` before the first statement that
/// touches a pending gemm's accumulator (or writes its operands; a wgmma into the same
/// accumulator chains without one), retiring the gemms up to the newest such; a ring stage's
/// release after its readers retired; everything retired at the end of the step.
fn place_waits(m: &Module, items: Vec<Item>, ring: &BTreeSet<BufferId>) -> Vec<Stmt> {
    let mut pending: Vec<InFlight> = Vec::new();
    let mut held: Vec<(u32, Vec<BufferId>, Vec<Stmt>)> = Vec::new();
    let mut out = Vec::new();
    fn retire(
        upto: usize,
        pending: &mut Vec<InFlight>,
        held: &mut Vec<(u32, Vec<BufferId>, Vec<Stmt>)>,
        out: &mut Vec<Stmt>,
        ring: &BTreeSet<BufferId>,
    ) {
        let left = (pending.len() - 1 - upto) as u32;
        let mut acc = Vec::new();
        for p in pending.drain(..=upto) {
            if !acc.contains(&p.acc) {
                acc.push(p.acc);
            }
        }
        out.push(Stmt::inst(inst::WgmmaWait { pending: left, acc, boundary: false }));
        let mut keep = Vec::new();
        for (stage, tiles, body) in held.drain(..) {
            if pending.iter().any(|p| p.reads(stage, &tiles, ring)) {
                keep.push((stage, tiles, body));
            } else {
                out.extend(body);
            }
        }
        *held = keep;
    }
    for item in items {
        match item {
            Item::Release { stage, tiles, body } => {
                if pending.iter().any(|p| p.reads(stage, &tiles, ring)) {
                    held.push((stage, tiles, body));
                } else {
                    out.extend(body);
                }
            }
            Item::Stmt { s, stage } => {
                let deferred = match &s {
                    Stmt::Gemm(op) if op.inst.is_some_and(|i| i.deferred) => Some(InFlight {
                        acc: op.c,
                        a_regs: (m.buffer(op.a).scope != Scope::Shared).then_some(op.a),
                        shared: [op.a, op.b]
                            .into_iter()
                            .filter(|b| m.buffer(*b).scope == Scope::Shared)
                            .collect(),
                        ring: (ring.contains(&op.a) || ring.contains(&op.b)).then_some(stage),
                    }),
                    _ => None,
                };
                let conflict = match &deferred {
                    Some(g) => {
                        pending.iter().rposition(|p| g.a_regs == Some(p.acc) || p.a_regs == Some(g.acc))
                    }
                    None => {
                        let (reads, writes) = effects(&s);
                        pending.iter().rposition(|p| {
                            reads.contains(&p.acc)
                                || writes.contains(&p.acc)
                                || p.a_regs.is_some_and(|a| writes.contains(&a))
                                || p.shared.iter().any(|b| writes.contains(b))
                        })
                    }
                };
                if let Some(q) = conflict {
                    retire(q, &mut pending, &mut held, &mut out, ring);
                }
                out.push(s);
                pending.extend(deferred);
            }
        }
    }
    if !pending.is_empty() {
        let last = pending.len() - 1;
        retire(last, &mut pending, &mut held, &mut out, ring);
    }
    for (_, _, body) in held {
        out.extend(body);
    }
    out
}

/// `s` for the loop variable's value `value`.
pub(super) fn at_iteration(s: Stmt, var: VarId, value: &Expr) -> Stmt {
    map_stmt_exprs(s, &mut |e| match e {
        Expr::Var { id, .. } if id == var => value.clone(),
        other => other,
    })
}

/// The report's line for a schedule: each consumer's stage and the order of a step.
pub(super) fn describe(m: &Module, plan: &Plan, consumers: &[(usize, &Stmt)], at: &str) -> String {
    let line = |s: &Stmt| {
        m.sources
            .short(s.loc())
            .map(|l| l.rsplit(':').next().unwrap_or("?").to_string())
            .unwrap_or("?".into())
    };
    let steps: Vec<String> = plan
        .emit
        .iter()
        .map(|&g| format!("line {} (iteration i-{})", line(consumers[g].1), plan.places[g].stage))
        .collect();
    if plan.span == 0 {
        format!("{at}: T.Pipelined(order=...): the statements of an iteration run as {}", steps.join(", "))
    } else {
        format!(
            "{at}: T.Pipelined(stage=, order=): step i runs {}; {} step(s) of prologue and of epilogue",
            steps.join(", "),
            plan.span
        )
    }
}
