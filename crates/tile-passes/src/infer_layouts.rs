//! Pass `infer_layouts`: give every fragment a layout and every `parallel` loop a thread
//! mapping, so that each thread finds the fragment elements it touches in its own registers.
//!
//! Requires: verified, simplified tile-level IR.
//! Ensures: every fragment buffer has a layout; every `parallel` loop has a layout over its
//! extents; every fragment access inside a parallel loop is compatible with the loop's
//! layout (the thread running an iteration holds the element), else a diagnostic naming
//! both source lines and both layouts.
//! Does not: choose instructions or vector widths (see `lower_tile_ops`).
//!
//! A `T.copy` of a fragment part at a moving position between on-chip buffers is first
//! rewritten as its element loop (`moving_part_copies`). Gemm operands and accumulators
//! take their instruction's layouts first; then every
//! fragment that scalar code (outside `T.Parallel`) reads or writes is held whole by every
//! thread (a gemm's fragment cannot be: an error at the scalar access). Propagation, in
//! program order, until nothing changes: a reduction's result takes the
//! reduced layout of its source; a parallel loop whose body indexes a laid-out fragment
//! with exactly its loop variables takes that fragment's layout, and passes it (projected)
//! to fragments indexed by a subset of them. When propagation stalls, the unassigned
//! fragment of highest rank (first used first) gets the blocked layout, and propagation
//! resumes.
//!
//! An index that mentions none of the loop's variables (`lse[k, j]` under `for k in
//! T.serial` in a loop over `j`; a constant; a block index) is the same for every thread
//! that runs an iteration, so its dimension is held whole in registers by every thread
//! that holds the other dimensions' element (`FragmentLayout::with_register_dims`); the
//! other dimensions follow the loop as above, and the lowering turns the index into a
//! register slot (`FragmentLayout::dim_slot`). A fragment whose layout spreads such a
//! dimension over the threads (a gemm accumulator's rows) is a conflict at the access.

use crate::Ctx;
use std::collections::BTreeMap;
use tile_ir::{
    stmt_exprs, walk_stmts, BufferId, Diagnostic, Expr, FragmentLayout, Module, Scope, Stmt, VarId,
};

/// How a fragment is indexed inside a parallel loop: per buffer dimension, the loop
/// dimension whose variable indexes it, or `None` for an index that mentions none of the
/// loop's variables (a constant, a `T.serial` variable, a block index: `lse[k, j]` in a loop
/// over `j`). Such a dimension must be held whole in registers by the threads that hold the
/// rest; the loop variables must appear once each, in loop order.
pub(crate) fn access_dims(idx: &[Expr], vars: &[VarId]) -> Option<Vec<Option<usize>>> {
    let mut dims = Vec::new();
    let mut last = None;
    for i in idx {
        if !vars.iter().any(|v| i.uses_var(*v)) {
            dims.push(None);
            continue;
        }
        let Expr::Var { id, .. } = i else { return None };
        let d = vars.iter().position(|v| v == id)?;
        if last.is_some_and(|last| last >= d) {
            return None; // repeated or transposed
        }
        last = Some(d);
        dims.push(Some(d));
    }
    Some(dims)
}

/// The buffer dimensions an access indexes by loop variables, and those variables' loop
/// dimensions.
fn placed_dims(dims: &[Option<usize>]) -> (Vec<usize>, Vec<usize>) {
    dims.iter().enumerate().filter_map(|(k, d)| d.map(|d| (k, d))).unzip()
}

/// The layout a loop takes from a fragment it indexes by all its variables (`lse[k, j]` in a
/// loop over `j`): the fragment's layout without the dimensions of uniform index, when the
/// fragment holds those in registers (else it decides nothing, and `compatible` reports it).
fn loop_view(fl: &FragmentLayout, dims: &[Option<usize>]) -> Option<FragmentLayout> {
    let (placed, _) = placed_dims(dims);
    if dims.iter().enumerate().any(|(k, d)| d.is_none() && !fl.in_registers(k)) {
        return None;
    }
    if placed.len() == dims.len() {
        return Some(fl.clone());
    }
    Some(fl.projected(&placed))
}

/// One fragment access in a parallel loop body: buffer, indices, where, and whether it is a store.
type Access = (BufferId, Vec<Expr>, tile_ir::Loc, bool);

/// Every fragment access in a parallel loop body, stores included.
fn fragment_accesses(m: &Module, body: &[Stmt]) -> Vec<Access> {
    let mut out = Vec::new();
    walk_stmts(body, &mut |s| {
        if let Stmt::Store { buf, idx, loc, .. } = s {
            if m.buffer(*buf).scope == Scope::Fragment {
                out.push((*buf, idx.clone(), *loc, true));
            }
        }
        let loc = s.loc();
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, idx, loc: l, .. } = x {
                    if m.buffer(*buf).scope == Scope::Fragment {
                        out.push((*buf, idx.clone(), if l.is_known() { *l } else { loc }, false));
                    }
                }
            })
        });
    });
    out
}

/// The fragments scalar code reads or writes — statements outside any `T.Parallel` loop,
/// which every thread runs (`if mask[k] != 0:`, `last[0] = ...`, the indices of a copy) —
/// each with where it is first accessed so. Every thread must hold all of such a fragment.
fn floating_fragments(m: &Module, body: &[Stmt], out: &mut BTreeMap<BufferId, tile_ir::Loc>) {
    for s in body {
        if matches!(s, Stmt::Parallel { .. }) {
            continue;
        }
        if let Stmt::Store { buf, loc, .. } = s {
            if m.buffer(*buf).scope == Scope::Fragment {
                out.entry(*buf).or_insert(*loc);
            }
        }
        let loc = s.loc();
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, loc: l, .. } = x {
                    if m.buffer(*buf).scope == Scope::Fragment {
                        out.entry(*buf).or_insert(if l.is_known() { *l } else { loc });
                    }
                }
            })
        });
        for b in s.bodies() {
            floating_fragments(m, b, out);
        }
    }
}

fn is_whole(m: &Module, b: BufferId) -> bool {
    m.buffer(b).layout.as_ref().is_some_and(|l| l.is_whole())
}

fn min_elem_bytes(m: &Module, body: &[Stmt]) -> u32 {
    let mut bytes = 4;
    let mut first = true;
    walk_stmts(body, &mut |s| {
        let mut see = |b: BufferId| {
            let buf = m.buffer(b);
            if buf.scope != Scope::Fragment {
                bytes = if first { buf.dtype.bytes() } else { bytes.min(buf.dtype.bytes()) };
                first = false;
            }
        };
        if let Stmt::Store { buf, .. } | Stmt::Atomic { buf, .. } = s {
            see(*buf);
        }
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    see(*buf);
                }
            })
        });
    });
    bytes
}

/// The loop's layout when one of its fragments decides it: a fragment every thread holds
/// whole that the loop writes (so every thread runs every iteration and keeps its copy
/// whole), else one indexed by all the loop's variables that is spread over the threads (a
/// fragment held whole is read by any iteration's thread: it decides nothing).
fn anchor_layout(m: &Module, vars: &[VarId], extents: &[i64], body: &[Stmt]) -> Option<FragmentLayout> {
    let full: Vec<usize> = (0..vars.len()).collect();
    let accesses = fragment_accesses(m, body);
    for whole_stores in [true, false] {
        for (buf, idx, _, store) in &accesses {
            let b = m.buffer(*buf);
            if whole_stores != (*store && is_whole(m, *buf)) || (!whole_stores && is_whole(m, *buf)) {
                continue;
            }
            if let (Some(l), Some(dims)) = (&b.layout, access_dims(idx, vars)) {
                let (placed, loop_dims) = placed_dims(&dims);
                let shape: Vec<i64> = placed.iter().map(|&k| b.extents()[k]).collect();
                if loop_dims == full && shape == extents {
                    if let Some(view) = loop_view(l, &dims) {
                        return Some(view);
                    }
                }
            }
        }
    }
    None
}

struct Order {
    first_use: BTreeMap<BufferId, usize>,
}

/// Give accumulator `c` the layout `l` of its gemm's instruction; a second gemm into it with
/// another layout is a conflict at its line.
fn set_accumulator(
    m: &mut Module,
    c: BufferId,
    l: FragmentLayout,
    loc: tile_ir::Loc,
    diags: &mut Vec<Diagnostic>,
) {
    match &m.buffer(c).layout {
        Some(old) if *old != l => diags.push(Diagnostic::error(
            format!(
                "layout conflict: accumulator '{}' of two T.gemm calls with different warp policies",
                m.buffer(c).name
            ),
            loc,
        )),
        _ => m.buffer_mut(c).layout = Some(l),
    }
}

/// The threads of the warp-role region (`T.ws`) each fragment is used in — tile ops there
/// run on those threads alone, so its layout spreads it over them; the kernel's threads for
/// the others. A fragment used in regions of different sizes is an error at its second use.
fn fragment_threads(m: &Module, diags: &mut Vec<Diagnostic>) -> BTreeMap<BufferId, u32> {
    fn walk(
        m: &Module,
        body: &[Stmt],
        threads: u32,
        out: &mut BTreeMap<BufferId, (u32, tile_ir::Loc)>,
        diags: &mut Vec<Diagnostic>,
    ) {
        for s in body {
            if let Stmt::If { cond, then, otherwise, .. } = s {
                if let Some((_, count)) = m.thread_range(cond) {
                    walk(m, then, count, out, diags);
                    walk(m, otherwise, threads, out, diags);
                    continue;
                }
            }
            let mut see = |b: BufferId, loc: tile_ir::Loc, diags: &mut Vec<Diagnostic>| {
                if m.buffer(b).scope != Scope::Fragment {
                    return;
                }
                match out.get(&b) {
                    Some(&(t, first)) if t != threads => diags.push(
                        Diagnostic::error(
                            format!(
                                "fragment '{}' is used by {threads} threads here and by {t} threads elsewhere",
                                m.buffer(b).name
                            ),
                            loc,
                        )
                        .with_label(first, format!("used by {t} threads here"))
                        .with_help("a fragment lives in the registers of one T.ws region's threads; give each region its own"),
                    ),
                    Some(_) => {}
                    None => {
                        out.insert(b, (threads, loc));
                    }
                }
            };
            let loc = s.loc();
            match s {
                Stmt::Copy(op) => {
                    see(op.src.buf, loc, diags);
                    see(op.dst.buf, loc, diags);
                }
                Stmt::Fill { dst, .. } => see(dst.buf, loc, diags),
                Stmt::Reduce(op) => {
                    see(op.src, loc, diags);
                    see(op.dst, loc, diags);
                }
                Stmt::Gemm(op) => {
                    see(op.a, loc, diags);
                    see(op.b, loc, diags);
                    see(op.c, loc, diags);
                }
                Stmt::Store { buf, .. } => see(*buf, loc, diags),
                _ => {}
            }
            let mut loads = Vec::new();
            stmt_exprs(s, &mut |e| {
                e.walk(&mut |x| {
                    if let Expr::Load { buf, .. } = x {
                        loads.push(*buf);
                    }
                })
            });
            for b in loads {
                see(b, loc, diags);
            }
            if let Stmt::Parallel { body, .. } = s {
                // the loop's own statements: their stores and loads
                let mut inner = Vec::new();
                walk_stmts(body, &mut |st| {
                    if let Stmt::Store { buf, .. } = st {
                        inner.push(*buf);
                    }
                    stmt_exprs(st, &mut |e| {
                        e.walk(&mut |x| {
                            if let Expr::Load { buf, .. } = x {
                                inner.push(*buf);
                            }
                        })
                    });
                });
                for b in inner {
                    see(b, loc, diags);
                }
                continue;
            }
            for b in s.bodies() {
                walk(m, b, threads, out, diags);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(m, &m.kernel.body, m.kernel.threads, &mut out, diags);
    out.into_iter().map(|(b, (t, _))| (b, t)).collect()
}

/// `T.copy` of a fragment part at a position that is not fixed (`T.copy(lse[k, :], row)`
/// at a `T.serial` k), between on-chip buffers (verify allows no other), as the element
/// loop it means: `for j in T.Parallel(n): row[j] = lse[k, j]` — whose uniform index the
/// layouts then hold in registers.
fn moving_part_copies(m: &mut Module, body: Vec<Stmt>) -> Result<Vec<Stmt>, Vec<Diagnostic>> {
    use tile_ir::simplify::simplify;
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        out.push(match s {
            Stmt::Copy(op) => {
                let (src, dst) =
                    tile_ir::verify::resolve_copy(m, &op.src, &op.dst, op.loc).map_err(|d| vec![d])?;
                let moving = |r: &tile_ir::verify::ResolvedRegion| {
                    let b = m.buffer(r.buf);
                    b.scope == Scope::Fragment
                        && !r.starts.iter().all(|e| simplify(e.clone()).as_int().is_some())
                };
                if !(moving(&src) || moving(&dst)) {
                    out.push(Stmt::Copy(op));
                    continue;
                }
                let shape = src.shape();
                let loop_shape: Vec<i64> = shape.iter().copied().filter(|&e| e != 1).collect();
                let loop_shape = if loop_shape.is_empty() { vec![1] } else { loop_shape };
                let vars: Vec<VarId> = (0..loop_shape.len())
                    .map(|k| m.add_var(&format!("p{k}"), tile_ir::VarKind::Loop, tile_ir::DType::I32))
                    .collect();
                let index = |r: &tile_ir::verify::ResolvedRegion| -> Vec<Expr> {
                    let mut next = vars.iter();
                    (0..r.extents.len())
                        .map(|d| {
                            let start = r.starts[d].clone();
                            if r.kept[d] && r.extents[d] != 1 {
                                let v = *next.next().expect("the copy's shapes agree");
                                let dt = start.dtype();
                                simplify(Expr::binary(
                                    tile_ir::BinOp::Add,
                                    start,
                                    Expr::cast(Expr::var(v, tile_ir::DType::I32), dt),
                                ))
                            } else {
                                start
                            }
                        })
                        .collect()
                };
                let (sb, db) = (m.buffer(src.buf).dtype, m.buffer(dst.buf).dtype);
                let value = Expr::cast(Expr::load(src.buf, index(&src), sb), db);
                Stmt::Parallel {
                    vars: vars.clone(),
                    extents: loop_shape,
                    body: vec![Stmt::Store { buf: dst.buf, idx: index(&dst), value, loc: op.loc }],
                    loc: op.loc,
                    layout: None,
                }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                Stmt::For { var, start, extent, kind, body: moving_part_copies(m, body)?, loc }
            }
            Stmt::If { cond, then, otherwise, loc } => Stmt::If {
                cond,
                then: moving_part_copies(m, then)?,
                otherwise: moving_part_copies(m, otherwise)?,
                loc,
            },
            other => other,
        });
    }
    Ok(out)
}

/// A `T.gemm` whose dtypes no tensor-core instruction takes (fp32 x fp32, mixed widths:
/// `GemmOp::on_tensor_cores`) becomes an element loop on CUDA cores, products and sums in
/// the accumulator's dtype:
///
/// ```text
/// for i, j in T.Parallel(M, N):
///     C[i, j] = 0                      # clear_accum
///     for k in T.serial(K):
///         C[i, j] += A[i, k] * B[k, j]  # A[k, i] / B[j, k] when transposed
/// ```
///
/// C takes the loop's layout; a fragment operand laid out for other threads is read through
/// its shared copy (the conversion below), once per gemm since k runs inside the loop.
fn simt_gemms(m: &mut Module, body: Vec<Stmt>, ctx: &mut Ctx) -> Result<Vec<Stmt>, Vec<Diagnostic>> {
    use tile_ir::{BinOp, DType, ForKind, GemmOp, VarKind};
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        out.push(match s {
            Stmt::Gemm(op)
                if !GemmOp::on_tensor_cores(m.buffer(op.a).dtype, m.buffer(op.b).dtype, m.buffer(op.c).dtype) =>
            {
                let loc = op.loc;
                let operand = |which| op.operand(m, which).map_err(|why| vec![Diagnostic::error(why, loc)]);
                let (a, b) = (operand(0)?, operand(1)?);
                let c = m.buffer(op.c);
                let (cdt, [cm, cn]) = (c.dtype, [c.extents()[0], c.extents()[1]]);
                let k_extent = if op.transpose_a { a.tile[0] } else { a.tile[1] };
                let (adt, bdt) = (m.buffer(op.a).dtype, m.buffer(op.b).dtype);
                let names = (m.buffer(op.a).name.clone(), m.buffer(op.b).name.clone(), c.name.clone());
                let (i, j) = (m.add_var("gi", VarKind::Loop, DType::I32), m.add_var("gj", VarKind::Loop, DType::I32));
                let k = m.add_var("gk", VarKind::Loop, DType::I32);
                let v = |x| Expr::var(x, DType::I32);
                let a_idx = if op.transpose_a { a.index(v(k), v(i)) } else { a.index(v(i), v(k)) };
                let b_idx = if op.transpose_b { b.index(v(j), v(k)) } else { b.index(v(k), v(j)) };
                let c_idx = vec![v(i), v(j)];
                let product = Expr::binary(
                    BinOp::Mul,
                    Expr::cast(Expr::load(op.a, a_idx, adt), cdt),
                    Expr::cast(Expr::load(op.b, b_idx, bdt), cdt),
                );
                let sum = Expr::binary(BinOp::Add, Expr::load(op.c, c_idx.clone(), cdt), product);
                let mut body = Vec::new();
                if op.clear_accum {
                    let zero = if cdt.is_float() {
                        Expr::Const { value: tile_ir::ConstValue::Float(0.0), dtype: cdt }
                    } else {
                        Expr::int_of(0, cdt)
                    };
                    body.push(Stmt::Store { buf: op.c, idx: c_idx.clone(), value: zero, loc });
                }
                body.push(Stmt::For {
                    var: k,
                    start: Expr::int(0),
                    extent: Expr::int(k_extent),
                    kind: ForKind::Serial,
                    body: vec![Stmt::Store { buf: op.c, idx: c_idx, value: sum, loc }],
                    loc,
                });
                let at = m.sources.short(loc).unwrap_or_default();
                ctx.report.push(format!(
                    "{at}: T.gemm of {adt} x {bdt} into {cdt} ('{}' x '{}' into '{}') runs on CUDA cores: no tensor-core instruction takes these dtypes",
                    names.0, names.1, names.2
                ));
                Stmt::Parallel { vars: vec![i, j], extents: vec![cm, cn], body, loc, layout: None }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                Stmt::For { var, start, extent, kind, body: simt_gemms(m, body, ctx)?, loc }
            }
            Stmt::If { cond, then, otherwise, loc } => Stmt::If {
                cond,
                then: simt_gemms(m, then, ctx)?,
                otherwise: simt_gemms(m, otherwise, ctx)?,
                loc,
            },
            other => other,
        });
    }
    Ok(out)
}

pub fn infer_layouts(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let body = std::mem::take(&mut m.kernel.body);
    let body = simt_gemms(&mut m, body, ctx)?;
    m.kernel.body = moving_part_copies(&mut m, body)?;
    let threads = m.kernel.threads;
    let mut region_diags = Vec::new();
    let threads_of = fragment_threads(&m, &mut region_diags);
    if !region_diags.is_empty() {
        return Err(region_diags);
    }
    let threads_for = |b: BufferId| threads_of.get(&b).copied().unwrap_or(threads);
    // first use of each fragment, in program order, for deterministic defaults
    let mut order = Order { first_use: BTreeMap::new() };
    let mut counter = 0usize;
    walk_stmts(&m.kernel.body, &mut |s| {
        counter += 1;
        let mut see = |b: BufferId| {
            order.first_use.entry(b).or_insert(counter);
        };
        match s {
            Stmt::Store { buf, .. } => see(*buf),
            Stmt::Copy(op) => {
                see(op.src.buf);
                see(op.dst.buf);
            }
            Stmt::Fill { dst, .. } => see(dst.buf),
            Stmt::Reduce(op) => {
                see(op.src);
                see(op.dst);
            }
            Stmt::Gemm(op) => {
                see(op.c);
                see(op.a);
                see(op.b);
            }
            _ => {}
        }
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    see(*buf);
                }
            })
        });
    });

    // gemm accumulators are laid out by the tensor-core instruction
    let mut diags = Vec::new();
    let mut accumulators = Vec::new();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Gemm(op) = s {
            accumulators.push((op.c, op.policy, op.loc, op.a, op.transpose_a, op.b, op.transpose_b));
        }
    });
    let mut gemms = Vec::new();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Gemm(op) = s {
            gemms.push(op.clone());
        }
    });
    let wgmma_allowed = !ctx.options.mma_sync_only;
    for (op, (c, policy, loc, a, transpose_a, b, transpose_b)) in gemms.iter().zip(accumulators) {
        let shape = m.buffer(c).extents();
        // the gemm runs on the threads of its accumulator's region
        let gemm_threads = threads_for(c);
        m.kernel.threads = gemm_threads;
        let planned = crate::gemm::plan(&m, op, &ctx.target, wgmma_allowed);
        m.kernel.threads = threads;
        // wgmma: the accumulator (and a register A) take the warpgroup layouts
        if let Ok((plan, _)) = planned {
            if plan.atom.scope == tile_ir::target::ThreadScope::Warpgroup {
                let (gm, gn) = (plan.warps_m, plan.warps_n);
                if plan.a == tile_ir::OperandSource::Registers {
                    let ae = m.buffer(a).extents();
                    m.buffer_mut(a).layout = Some(FragmentLayout::wgmma_operand_a(ae[0], ae[1], gm, gn));
                }
                let l = FragmentLayout::wgmma_accumulator(shape[0], shape[1], gm, gn);
                set_accumulator(&mut m, c, l, loc, &mut diags);
                continue;
            }
        }
        match crate::gemm::warp_grid(policy, shape[0], shape[1], gemm_threads as i64 / 32) {
            Ok((wm, wn)) => {
                // an A operand kept in registers takes the instruction's A-fragment layout
                let ab = m.buffer(a);
                if ab.scope == Scope::Fragment && !transpose_a && ab.extents().len() == 2 {
                    let kstep = 32 / ab.dtype.bytes() as i64;
                    if ab.extents()[1] % kstep == 0 && ab.extents()[0] == shape[0] {
                        let la = FragmentLayout::mma_operand_a(
                            ab.extents()[0],
                            ab.extents()[1],
                            wm,
                            wn,
                            ab.dtype.bytes(),
                        );
                        m.buffer_mut(a).layout = Some(la);
                    }
                }
                // likewise a B operand in registers, stored (K, N)
                let bb = m.buffer(b);
                if bb.scope == Scope::Fragment && !transpose_b && bb.extents().len() == 2 {
                    let kstep = 32 / bb.dtype.bytes() as i64;
                    if bb.extents()[0] % kstep == 0 && bb.extents()[1] == shape[1] {
                        let lb = FragmentLayout::mma_operand_b(
                            bb.extents()[0],
                            bb.extents()[1],
                            wm,
                            wn,
                            bb.dtype.bytes(),
                        );
                        m.buffer_mut(b).layout = Some(lb);
                    }
                }
                let l = FragmentLayout::mma_accumulator(shape[0], shape[1], wm, wn);
                set_accumulator(&mut m, c, l, loc, &mut diags);
            }
            Err(why) => diags.push(
                Diagnostic::error(format!("T.gemm into '{}': {why}", m.buffer(c).name), loc).with_help(
                    "use tile sizes that are multiples of 16 (M) and 8 (N) per warp, or another warp policy",
                ),
            ),
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }

    // fragments scalar code reads or writes: every thread holds all of them (TileLang's
    // fully replicated "floating" fragments), unless a gemm has laid them out already
    let mut floating = BTreeMap::new();
    floating_fragments(&m, &m.kernel.body, &mut floating);
    for (&b, &at) in &floating {
        match &m.buffer(b).layout {
            None => m.buffer_mut(b).layout = Some(FragmentLayout::whole(&m.buffer(b).extents(), threads_for(b))),
            Some(l) => diags.push(
                Diagnostic::error(
                    format!(
                        "fragment '{}' is read or written outside a T.Parallel loop, where every thread needs all of it, but T.gemm spreads it over the threads",
                        m.buffer(b).name
                    ),
                    at,
                )
                .with_primary_label("every thread runs this statement")
                .with_label(m.buffer(b).loc, format!("'{}' is laid out as {l}", m.buffer(b).name))
                .with_help("access its elements inside `for i, j in T.Parallel(...)`, or copy what scalar code needs into a fragment of its own first"),
            ),
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }

    loop {
        while propagate(&mut m) {}
        // a reduction's result takes its layout from the source: default the sources first
        let mut reduce_results = std::collections::BTreeSet::new();
        walk_stmts(&m.kernel.body, &mut |s| {
            if let Stmt::Reduce(op) = s {
                reduce_results.insert(op.dst);
            }
        });
        let unassigned = |b: &&tile_ir::Buffer| b.scope == Scope::Fragment && b.layout.is_none();
        let sources_left = m
            .buffers
            .iter()
            .enumerate()
            .any(|(i, b)| unassigned(&b) && !reduce_results.contains(&BufferId(i as u32)));
        let next = m
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.scope == Scope::Fragment && b.layout.is_none())
            .filter(|(i, _)| !sources_left || !reduce_results.contains(&BufferId(*i as u32)))
            .map(|(i, b)| (BufferId(i as u32), b.extents().len()))
            // a fragment with dimensions of uniform index first: its layout keeps them in
            // registers, and the loops it then lays out pass that on (a blocked fragment
            // laid out first could spread them over the threads)
            .min_by_key(|(id, rank)| {
                let uniform = uniform_dims(&m, *id).contains(&true);
                (!uniform, usize::MAX - rank, order.first_use.get(id).copied().unwrap_or(usize::MAX), id.0)
            });
        match next {
            Some((id, _)) => {
                let l = default_layout(&m, id, threads_for(id));
                m.buffer_mut(id).layout = Some(l);
            }
            None => break,
        }
    }

    // loop layouts; a fragment a loop reads in another layout goes through shared memory;
    // then the compatibility check
    let body = std::mem::take(&mut m.kernel.body);
    let body = unshift_windows(&m, body, &mut BTreeMap::new(), ctx);
    m.kernel.body = relayout_reads(&mut m, body, threads, ctx);
    let gemms = gemm_locations(&m);
    let mut body = std::mem::take(&mut m.kernel.body);
    assign_loop_layouts(&m, &gemms, &mut body, threads, &mut diags);
    m.kernel.body = body;
    // a per-thread buffer the loops index by their variables: each read on the thread
    // that set the element (local_owners.rs)
    if diags.is_empty() {
        diags.extend(crate::local_owners::check(&m));
    }
    if diags.is_empty() {
        diags.extend(thread_arrays_fit(&m));
    }
    for b in &m.buffers {
        if let Some(l) = &b.layout {
            ctx.report.push(format!("layout of {}: {l}", b.name));
        }
    }
    if diags.is_empty() {
        Ok(m)
    } else {
        Err(diags)
    }
}

/// The layout of a fragment nothing else decides: blocked, except that dimensions some
/// parallel loop indexes by a value not of its variables (`lse[k, j]` under `for k in
/// T.serial`) are held whole in registers, the blocked layout spreading the others.
fn default_layout(m: &Module, b: BufferId, threads: u32) -> FragmentLayout {
    let buf = m.buffer(b);
    let extents = buf.extents();
    let in_registers = uniform_dims(m, b);
    let placed: Vec<usize> = (0..extents.len()).filter(|&k| !in_registers[k]).collect();
    let elem_bytes = access_elem_bytes(m, b);
    if placed.len() == extents.len() {
        return FragmentLayout::blocked(&extents, threads, elem_bytes);
    }
    if placed.is_empty() {
        return FragmentLayout::whole(&extents, threads);
    }
    let shape: Vec<i64> = placed.iter().map(|&k| extents[k]).collect();
    FragmentLayout::blocked(&shape, threads, elem_bytes).with_register_dims(&extents, &placed)
}

/// The element width a blocked layout of fragment `b` groups its runs by: the narrowest of
/// its own dtype and of the memory the parallel loops that use it by all their variables
/// read or write (`acc[i, j] += W[.., k + j] * x[..]`: a float32 fragment fed by float16
/// loads takes runs of 8, so those loads are 16 bytes wide, not 8).
fn access_elem_bytes(m: &Module, b: BufferId) -> u32 {
    let mut bytes = m.buffer(b).dtype.bytes();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Parallel { vars, body, .. } = s {
            let spread = fragment_accesses(m, body).into_iter().any(|(access, idx, _, _)| {
                access == b
                    && access_dims(&idx, vars)
                        .is_some_and(|d| d.len() == vars.len() && d.iter().all(Option::is_some))
            });
            if spread {
                bytes = bytes.min(min_elem_bytes(m, body));
            }
        }
    });
    bytes
}

/// Per dimension of fragment `b`, whether some parallel loop indexes it by a value that
/// mentions none of its variables.
fn uniform_dims(m: &Module, b: BufferId) -> Vec<bool> {
    let mut in_registers = vec![false; m.buffer(b).extents().len()];
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Parallel { vars, body, .. } = s {
            for (access, idx, _, _) in fragment_accesses(m, body) {
                if access != b {
                    continue;
                }
                for (k, d) in access_dims(&idx, vars).unwrap_or_default().iter().enumerate() {
                    in_registers[k] |= d.is_none();
                }
            }
        }
    });
    in_registers
}

/// Where a `T.gemm` lays out each fragment it uses (accumulator or register operand), the
/// first such gemm: the second line of a conflict with that layout.
fn gemm_locations(m: &Module) -> BTreeMap<BufferId, tile_ir::Loc> {
    let mut at = BTreeMap::new();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Gemm(op) = s {
            for b in [op.a, op.b, op.c] {
                at.entry(b).or_insert(op.loc);
            }
        }
    });
    at
}

/// One round of propagation; true when some fragment got a layout.
fn propagate(m: &mut Module) -> bool {
    let mut assign: Vec<(BufferId, FragmentLayout)> = Vec::new();
    walk_stmts(&m.kernel.body, &mut |s| match s {
        Stmt::Reduce(op) => {
            if let (Some(l), None) = (&m.buffer(op.src).layout, &m.buffer(op.dst).layout) {
                let r = l.reduced(op.dim);
                assign.push((op.dst, r));
            }
        }
        Stmt::Parallel { vars, extents, body, .. } => {
            if let Some(l) = anchor_layout(m, vars, extents, body) {
                for (buf, idx, _, _) in fragment_accesses(m, body) {
                    if m.buffer(buf).layout.is_some() {
                        continue;
                    }
                    if let Some(dims) = access_dims(&idx, vars) {
                        let (placed, loop_dims) = placed_dims(&dims);
                        let extents = m.buffer(buf).extents();
                        let p = l.projected(&loop_dims);
                        let shape: Vec<i64> = placed.iter().map(|&k| extents[k]).collect();
                        if loop_dims.is_empty() || p.shape() == shape {
                            // dimensions of uniform index (`lse[k, j]`) in each thread's registers
                            let p = if placed.len() == extents.len() {
                                p
                            } else {
                                p.with_register_dims(&extents, &placed)
                            };
                            assign.push((buf, p));
                        }
                    }
                }
            }
        }
        _ => {}
    });
    let mut changed = false;
    for (b, l) in assign {
        if m.buffer(b).layout.is_none() {
            m.buffer_mut(b).layout = Some(l);
            changed = true;
        }
    }
    changed
}

/// A loop that indexes a laid-out fragment with only some of its variables (`Y[i, j] =
/// acc[i]`) and no fragment with all of them: the fragment's threads run the loop, each over
/// all values of the other variables (held in registers, at most 256 per dimension); threads
/// that hold replicas of an element compute it too, and only the first of them writes.
fn expanded_layout(m: &Module, vars: &[VarId], extents: &[i64], body: &[Stmt]) -> Option<FragmentLayout> {
    for (buf, idx, _, _) in fragment_accesses(m, body) {
        let b = m.buffer(buf);
        if is_whole(m, buf) {
            continue; // read by any thread: it decides nothing
        }
        let (Some(fl), Some(access)) = (&b.layout, access_dims(&idx, vars)) else { continue };
        let Some(fl) = loop_view(fl, &access) else { continue };
        let (_, dims) = placed_dims(&access);
        if dims.is_empty()
            || dims.len() == vars.len()
            || dims.iter().enumerate().any(|(k, d)| fl.extents[k] != extents[*d])
        {
            continue;
        }
        if (0..vars.len()).any(|d| !dims.contains(&d) && extents[d] > 256) {
            continue;
        }
        let mut layout = FragmentLayout {
            extents: extents.to_vec(),
            dims: Vec::new(),
            replicated: fl.replicated.clone(),
            active_threads: fl.active_threads,
        };
        for (d, extent) in extents.iter().enumerate() {
            match dims.iter().position(|x| *x == d) {
                Some(k) => layout.dims.push(fl.dims[k].clone()),
                None if *extent > 1 => layout.dims.push(vec![tile_ir::Digit {
                    size: *extent,
                    step: 1,
                    source: tile_ir::Source::Slot(0),
                }]),
                None => layout.dims.push(vec![]),
            }
        }
        layout.renumber_slots();
        return Some(layout);
    }
    None
}

/// A guarded parallel loop that reads a window of a fragment some rows on
/// (`for i, j in T.Parallel(32, D): if i < 16: s[i, j] = acc[i + 16 * k, j]`, TileLang's
/// sparse MLA backward storing half its accumulator at a time, `k` a serial loop's variable)
/// runs over the fragment's own rows instead (`if i >= 16 * k && i - 16 * k < 16: s[i - 16 *
/// k, j] = acc[i, j]`): the same iterations do the same work, and the loop takes the
/// fragment's layout — no copy through shared memory. Only when the shift does not depend on
/// the loop's own variables, is never negative, and the guard keeps the shifted row inside
/// the fragment (`i < K` with `K + max shift <= extent`, the loop's extent the fragment's),
/// and no other fragment access in the loop reads that loop variable.
fn unshift_windows(
    m: &Module,
    body: Vec<Stmt>,
    ranges: &mut BTreeMap<VarId, (i64, i64)>,
    ctx: &mut Ctx,
) -> Vec<Stmt> {
    use tile_ir::simplify::simplify;
    use tile_ir::BinOp;
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        match s {
            Stmt::Parallel { vars, extents, body: inner, loc, layout } => {
                let found = window_shift(m, &vars, &extents, &inner, ranges);
                let Some((j, shift_by, buf)) = found else {
                    out.push(Stmt::Parallel { vars, extents, body: inner, loc, layout });
                    continue;
                };
                let v = vars[j];
                let Some(Stmt::If { cond, then, otherwise, loc: iloc }) = inner.into_iter().next() else {
                    unreachable!("window_shift checked the guard")
                };
                // applied at every node of an expression: only the variable changes
                let mut shift = |x: Expr| match x {
                    Expr::Var { id, dtype } if id == v => {
                        Expr::binary(BinOp::Sub, Expr::Var { id, dtype }, shift_by.clone())
                    }
                    other => other,
                };
                let dtype = shift_by.dtype();
                let cond = Expr::binary(
                    BinOp::And,
                    Expr::binary(BinOp::Ge, Expr::var(v, dtype), shift_by.clone()),
                    simplify(cond.map(&mut shift)),
                );
                let then: Vec<Stmt> = then
                    .into_iter()
                    .map(|st| tile_ir::map_stmt_exprs(tile_ir::map_stmt_exprs(st, &mut shift), &mut simplify))
                    .collect();
                let at = m.sources.short(loc).unwrap_or_default();
                ctx.report.push(format!(
                    "{at}: this T.Parallel loop reads a window of '{}' some rows on: it runs over the fragment's own rows (no copy)",
                    m.buffer(buf).name
                ));
                let inner = vec![Stmt::If { cond, then, otherwise, loc: iloc }];
                out.push(Stmt::Parallel { vars, extents, body: inner, loc, layout });
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let known = match (start.as_int(), extent.as_int()) {
                    (Some(a), Some(n)) if n > 0 => Some((a, a + n - 1)),
                    _ => None,
                };
                let before = known.and_then(|r| ranges.insert(var, r));
                let body = unshift_windows(m, body, ranges, ctx);
                match before {
                    Some(r) => {
                        ranges.insert(var, r);
                    }
                    None => {
                        ranges.remove(&var);
                    }
                }
                out.push(Stmt::For { var, start, extent, kind, body, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let then = unshift_windows(m, then, ranges, ctx);
                let otherwise = unshift_windows(m, otherwise, ranges, ctx);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.push(other),
        }
    }
    out
}

/// The range of an affine expression of the variables `ranges` bounds (None: another atom).
fn affine_range(e: &Expr, ranges: &BTreeMap<VarId, (i64, i64)>) -> Option<(i64, i64)> {
    let a = tile_ir::simplify::to_affine(e);
    let (mut lo, mut hi) = (a.constant, a.constant);
    for (c, atom) in a.terms.values() {
        let Expr::Var { id, .. } = atom else {
            return None;
        };
        let (l, h) = *ranges.get(id)?;
        let (x, y) = (c * l, c * h);
        lo += x.min(y);
        hi += x.max(y);
    }
    Some((lo, hi))
}

/// `(loop variable index j, shift, fragment)` when `body` is one `if` whose condition has a
/// conjunct `v_j < K`, and every fragment access that reads a loop variable is a read of one
/// laid-out fragment at `v_j + shift` in a dimension of extent `extent_j` (the others by
/// loop variables alone), the shift free of the loop's variables with a range in
/// `[0, extent_j - K]`, not always 0.
fn window_shift(
    m: &Module,
    vars: &[VarId],
    extents: &[i64],
    body: &[Stmt],
    ranges: &BTreeMap<VarId, (i64, i64)>,
) -> Option<(usize, Expr, BufferId)> {
    use tile_ir::BinOp;
    let [Stmt::If { cond, otherwise, .. }] = body else {
        return None;
    };
    if !otherwise.is_empty() {
        return None;
    }
    let reads_loop = |e: &Expr| vars.iter().any(|v| e.uses_var(*v));
    let mut found: Option<(usize, Expr, BufferId)> = None;
    for (buf, idx, _, store) in fragment_accesses(m, body) {
        if !idx.iter().any(reads_loop) {
            continue;
        }
        let b = m.buffer(buf);
        if store || b.layout.is_none() {
            return None;
        }
        // exactly one dimension `v + shift`; the others the loop's variables or free of them
        let mut shifted = None;
        for (k, e) in idx.iter().enumerate() {
            match e {
                Expr::Binary { op: BinOp::Add, a, b: other, .. } => {
                    let (var, by) = match (a.as_ref(), other.as_ref()) {
                        (Expr::Var { id, .. }, by) if vars.contains(id) => (*id, by),
                        (by, Expr::Var { id, .. }) if vars.contains(id) => (*id, by),
                        _ => return None,
                    };
                    let j = vars.iter().position(|v| *v == var)?;
                    if reads_loop(by) || shifted.is_some() || b.extents().get(k) != Some(&extents[j]) {
                        return None;
                    }
                    shifted = Some((j, by.clone()));
                }
                Expr::Var { .. } => {}
                other if !reads_loop(other) => {}
                _ => return None,
            }
        }
        let (j, by) = shifted?;
        match &found {
            None => found = Some((j, by, buf)),
            Some(f) if f.0 == j && f.1 == by && f.2 == buf => {}
            Some(_) => return None,
        }
    }
    let (j, by, buf) = found?;
    let (lo, hi) = affine_range(&by, ranges)?;
    if lo < 0 || hi == 0 {
        return None;
    }
    // the guard keeps v + shift inside the fragment: a conjunct v < K with K + hi <= extent
    fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
        match e {
            Expr::Binary { op: BinOp::And, a, b, .. } => {
                conjuncts(a, out);
                conjuncts(b, out);
            }
            other => out.push(other),
        }
    }
    let mut parts = Vec::new();
    conjuncts(cond, &mut parts);
    let bounded = parts.iter().any(|p| match p {
        Expr::Binary { op: BinOp::Lt, a, b, .. } => {
            matches!(a.as_ref(), Expr::Var { id, .. } if *id == vars[j])
                && b.as_int().is_some_and(|k| k + hi <= extents[j])
        }
        _ => false,
    });
    bounded.then_some((j, by, buf))
}

/// The layout a parallel loop takes (`assign_loop_layouts`' rule).
fn loop_layout(m: &Module, vars: &[VarId], extents: &[i64], body: &[Stmt], threads: u32) -> FragmentLayout {
    anchor_layout(m, vars, extents, body)
        .or_else(|| expanded_layout(m, vars, extents, body))
        .unwrap_or_else(|| FragmentLayout::blocked(extents, threads, min_elem_bytes(m, body)))
}

/// A parallel loop that reads a laid-out fragment its threads do not hold as they need it
/// (`o[i, j] += p[i, j] * scale[i]`, `scale` laid out by another loop over other threads)
/// reads a copy in the loop's own layout instead, made through a shared tile just before
/// the loop (`T.copy(scale, scale_shared); T.copy(scale_shared, scale_for_loop)`; the
/// barriers come from `insert_syncs`) — Triton's layout conversion. A read by other
/// indices (transposed `x[j, i]`, shifted `acc[i + 16, j]`) reads the shared tile itself.
/// Writes stay errors. The copies and the loop sit in one `if true` so that a
/// scheduled pipelined body keeps its statement count; the report names each conversion.
fn relayout_reads(m: &mut Module, body: Vec<Stmt>, threads: u32, ctx: &mut Ctx) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        match s {
            Stmt::Parallel { vars, extents, body: inner, loc, layout } => {
                let l = loop_layout(m, &vars, &extents, &inner, threads);
                let mut converts: Vec<(BufferId, BufferId, BufferId)> = Vec::new();
                let stored: Vec<BufferId> =
                    fragment_accesses(m, &inner).into_iter().filter(|a| a.3).map(|a| a.0).collect();
                for (buf, idx, _, store) in fragment_accesses(m, &inner) {
                    if store || stored.contains(&buf) || converts.iter().any(|c| c.0 == buf) {
                        continue;
                    }
                    if compatible(m, buf, &idx, false, &vars, &l).is_ok() {
                        continue;
                    }
                    let b = m.buffer(buf).clone();
                    if b.layout.is_none() || b.fixed_shape().is_none() {
                        continue;
                    }
                    // read by the loop variables in order: a fragment in the loop's layout;
                    // else (transposed, shifted: `x[j, i]`, `acc[i + 16, j]`) the shared tile
                    let in_loop = access_dims(&idx, &vars).and_then(|dims| {
                        let (placed, loop_dims) = placed_dims(&dims);
                        let p = l.projected(&loop_dims);
                        (placed.len() == b.extents().len() && p.shape() == b.extents()).then_some(p)
                    });
                    let shared = m.add_buffer(tile_ir::Buffer {
                        name: format!("{}_relayout", b.name),
                        scope: Scope::Shared,
                        layout: None,
                        ..b.clone()
                    });
                    let copy = match in_loop {
                        Some(p) => m.add_buffer(tile_ir::Buffer {
                            name: format!("{}_in_loop", b.name),
                            layout: Some(p),
                            ..b.clone()
                        }),
                        None => shared,
                    };
                    let at = m.sources.short(loc).unwrap_or_default();
                    ctx.report.push(format!(
                        "{at}: this T.Parallel loop reads '{}' laid out for other threads: it reads {} ('{}')",
                        b.name,
                        if copy == shared { "a copy in shared memory" } else { "a copy made through shared memory" },
                        m.buffer(shared).name
                    ));
                    converts.push((buf, shared, copy));
                }
                if converts.is_empty() {
                    out.push(Stmt::Parallel { vars, extents, body: inner, loc, layout });
                    continue;
                }
                let copy = |src: BufferId, dst: BufferId| whole_copy(src, dst, loc);
                let mut then = Vec::new();
                for &(buf, shared, c) in &converts {
                    then.push(copy(buf, shared));
                    if c != shared {
                        then.push(copy(shared, c));
                    }
                }
                let inner: Vec<Stmt> = inner
                    .into_iter()
                    .map(|st| {
                        tile_ir::map_stmt_exprs(st, &mut |e| match e {
                            Expr::Load { buf, idx, dtype, loc, oob } => {
                                let buf = converts.iter().find(|c| c.0 == buf).map_or(buf, |c| c.2);
                                Expr::Load { buf, idx, dtype, loc, oob }
                            }
                            other => other,
                        })
                    })
                    .collect();
                then.push(Stmt::Parallel { vars, extents, body: inner, loc, layout });
                out.push(Stmt::If { cond: Expr::bool(true), then, otherwise: vec![], loc });
            }
            Stmt::Copy(op) if fragments_apart(m, &op) => {
                // a copy between fragments whose layouts put an element on other threads (an
                // accumulator split over warps by columns into an A operand each warp holds
                // whole): through a shared tile of the destination's type
                let (src, dst) = (m.buffer(op.src.buf).clone(), m.buffer(op.dst.buf).clone());
                let shared = m.add_buffer(tile_ir::Buffer {
                    name: format!("{}_relayout", src.name),
                    scope: Scope::Shared,
                    dtype: dst.dtype,
                    layout: None,
                    ..src.clone()
                });
                let at = m.sources.short(op.loc).unwrap_or_default();
                ctx.report.push(format!(
                    "{at}: T.copy from '{}' to '{}', laid out over other threads, goes through shared memory ('{}')",
                    src.name,
                    dst.name,
                    m.buffer(shared).name
                ));
                let loc = op.loc;
                let then = vec![whole_copy(op.src.buf, shared, loc), whole_copy(shared, op.dst.buf, loc)];
                out.push(Stmt::If { cond: Expr::bool(true), then, otherwise: vec![], loc });
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let body = relayout_reads(m, body, threads, ctx);
                out.push(Stmt::For { var, start, extent, kind, body, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let inner = m.thread_range(&cond).map_or(threads, |(_, count)| count);
                let then = relayout_reads(m, then, inner, ctx);
                let otherwise = relayout_reads(m, otherwise, threads, ctx);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.push(other),
        }
    }
    out
}

/// `T.copy(src, dst)` of whole buffers.
fn whole_copy(src: BufferId, dst: BufferId, loc: tile_ir::Loc) -> Stmt {
    let whole = |b: BufferId| tile_ir::Region { buf: b, dims: vec![], loc };
    Stmt::Copy(tile_ir::CopyOp { src: whole(src), dst: whole(dst), pad: None, loc, inst: None, atomic: None })
}

/// A whole-tile copy between two laid-out fragments that put some element on other threads
/// (the lowering moves each element within its thread, so it cannot carry it out).
fn fragments_apart(m: &Module, op: &tile_ir::CopyOp) -> bool {
    let (s, d) = (m.buffer(op.src.buf), m.buffer(op.dst.buf));
    if op.atomic.is_some() || !op.src.dims.is_empty() || !op.dst.dims.is_empty() {
        return false;
    }
    if s.scope != Scope::Fragment || d.scope != Scope::Fragment || s.fixed_shape() != d.fixed_shape() {
        return false;
    }
    match (&s.layout, &d.layout) {
        (Some(a), Some(b)) => a != b && a.refined(b).is_none(),
        _ => false,
    }
}

fn assign_loop_layouts(
    m: &Module,
    gemms: &BTreeMap<BufferId, tile_ir::Loc>,
    body: &mut [Stmt],
    threads: u32,
    diags: &mut Vec<Diagnostic>,
) {
    for s in body.iter_mut() {
        match s {
            Stmt::Parallel { vars, extents, body, loc, layout } => {
                let l = loop_layout(m, vars, extents, body, threads);
                for (buf, idx, aloc, store) in fragment_accesses(m, body) {
                    if let Err(why) = compatible(m, buf, &idx, store, vars, &l) {
                        let b = m.buffer(buf);
                        let mut d = Diagnostic::error(
                            format!("layout conflict on fragment '{}': {why}", b.name),
                            aloc,
                        )
                        .with_primary_label(format!("'{}' accessed here", b.name))
                        .with_label(*loc, format!("this T.Parallel loop runs as {l}"))
                        .with_label(
                            b.loc,
                            format!("'{}' is laid out as {}", b.name, b.layout.as_ref().unwrap()),
                        );
                        if let Some(&gemm) = gemms.get(&buf) {
                            d = d.with_label(
                                gemm,
                                format!("this T.gemm lays '{}' out over the threads", b.name),
                            );
                        }
                        diags.push(d.with_help("index a fragment with the loop variables in order (frag[i, j] inside T.Parallel(M, N)), or stage the data through shared memory"));
                    }
                }
                *layout = Some(l);
            }
            Stmt::For { body, .. } => assign_loop_layouts(m, gemms, body, threads, diags),
            Stmt::If { cond, then, otherwise, .. } => {
                // a warp-role region's loops run on its threads
                let inner = m.thread_range(cond).map_or(threads, |(_, count)| count);
                assign_loop_layouts(m, gemms, then, inner, diags);
                assign_loop_layouts(m, gemms, otherwise, threads, diags);
            }
            _ => {}
        }
    }
}

/// Does the thread that runs iteration (vars) of a loop laid out as `l` hold `buf[idx]`?
fn compatible(
    m: &Module,
    buf: BufferId,
    idx: &[Expr],
    store: bool,
    vars: &[VarId],
    l: &FragmentLayout,
) -> Result<(), String> {
    let b = m.buffer(buf);
    let fl = b.layout.as_ref().expect("every fragment has a layout by now");
    if fl.is_whole() && fl.active_threads >= l.active_threads {
        // every thread holds every element: any index reads; a write must reach every copy
        if store && !(l.is_whole() && l.active_threads == fl.active_threads) {
            return Err("every thread holds all of it (scalar code outside T.Parallel reads or writes it), so every thread must run each iteration that writes it, but this loop spreads its iterations over the threads".into());
        }
        return Ok(());
    }
    let Some(access) = access_dims(idx, vars) else {
        return Err(
            "its indices must be distinct loop variables of the enclosing T.Parallel, in loop order".into()
        );
    };
    // an index the same for every iteration's thread reads that thread's registers only
    for (k, d) in access.iter().enumerate() {
        if d.is_none() && !fl.in_registers(k) {
            return Err(format!(
                "its dimension {k} is indexed by a value that is not a variable of this loop (a constant or a T.serial variable), so each thread needs all of that dimension, but its layout spreads that dimension over the threads"
            ));
        }
    }
    if fl.active_threads != l.active_threads {
        return Err(format!("it spans {} threads, the loop {}", fl.active_threads, l.active_threads));
    }
    let (placed, dims) = placed_dims(&access);
    for (&k, d) in placed.iter().zip(&dims) {
        if fl.extents[k] != l.extents[*d] || !FragmentLayout::same_placement(&fl.dims[k], &l.dims[*d]) {
            return Err(format!("its dimension {k} is spread differently from loop dimension {d}"));
        }
    }
    for d in 0..l.dims.len() {
        if dims.contains(&d) {
            continue;
        }
        for digit in l.thread_digits(d) {
            if !fl.replicated.contains(&digit) {
                return Err(format!(
                    "threads along loop dimension {d} need its elements but do not hold them"
                ));
            }
        }
    }
    Ok(())
}

/// 32-bit words of one thread's arrays past which a kernel is refused: eight times the 255
/// registers a thread has. Such arrays live in local memory, and NVRTC compiles the
/// unrolled code over them for minutes (a 1024x1024 float32 fragment over 128 threads,
/// 8192 words: 578 s), so a tile too large for the block is an error at its line rather
/// than a compile that seems to hang. Below it, `kernel.report()` gives each fragment's
/// registers and the autotuner passes over configs above 255.
pub const MAX_THREAD_ARRAY_WORDS: i64 = 2048;

/// The kernel's fragments and per-thread buffers, by their registers per thread, fit under
/// [`MAX_THREAD_ARRAY_WORDS`]; else an error at the largest one.
fn thread_arrays_fit(m: &Module) -> Vec<Diagnostic> {
    let mut arrays: Vec<(i64, &tile_ir::Buffer)> = m
        .buffers
        .iter()
        .filter_map(|b| {
            let elements = match (b.scope, &b.layout) {
                (Scope::Fragment, Some(l)) => l.slots(),
                (Scope::Local, _) => b.fixed_shape()?.iter().product(),
                _ => return None,
            };
            Some(((elements * b.dtype.bytes() as i64 + 3) / 4, b))
        })
        .collect();
    let words: i64 = arrays.iter().map(|(w, _)| w).sum();
    if words <= MAX_THREAD_ARRAY_WORDS {
        return Vec::new();
    }
    arrays.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
    let (_, largest) = arrays[0];
    let listed: Vec<String> = arrays.iter().take(4).map(|(w, b)| format!("'{}' {w}", b.name)).collect();
    vec![Diagnostic::error(
        format!(
            "each thread's arrays need {words} 32-bit registers ({}), over {MAX_THREAD_ARRAY_WORDS}: a thread \
             has 255 registers, and arrays this large would live in local memory (NVRTC takes minutes to \
             compile such code)",
            listed.join(", ")
        ),
        largest.loc,
    )
    .with_primary_label(format!("'{}' holds {} of them", largest.name, arrays[0].0))
    .with_help("use smaller tiles, more threads (T.Kernel(..., threads=)), or a shared-memory tile (T.alloc_shared) for data the threads need not keep in registers")]
}
