//! Pass `select_instructions`: choose, from the target's tables, how every `T.gemm` and
//! `T.copy` is carried out, and record it in the IR (`GemmOp::inst`, `CopyOp::inst`), with
//! a line in the lowering report — and the reason when a faster choice was not possible.
//!
//! Requires: tile-level IR with layouts (`infer_layouts`; a gemm's accumulator layout is its
//! atom's, from the same `gemm::plan`), before `inject_pipeline`.
//! Ensures:
//! - every gemm has a `GemmInst`: the mma atom of its dtype on the target, the warp grid,
//!   where each operand comes from; its shared operand tiles read by `ldmatrix` are swizzled
//!   (16-byte chunks XOR line % 8) when their rows allow; a gemm no instruction can run is a
//!   diagnostic at the user's line;
//! - a constant `T.unroll` loop of copies from global into shared memory directly inside a
//!   pipelined loop is unrolled into its copies first, so each can be a producer;
//! - every copy has a `CopyInst`: the producers of a pipelined loop (`inject_pipeline::
//!   producers`) take `cp.async` when their dtypes match, their pad is zero and both sides
//!   are 16-byte vectors, else they stay synchronous and the report says why; a 2-D fragment
//!   whose threads hold less than 16 contiguous bytes of a row (mma accumulators) is staged
//!   through a swizzled shared tile when shared memory allows; everything else runs on the
//!   threads.
//!
//! Does not: change layouts, statements or shapes (multi-buffering is `inject_pipeline`'s),
//! or choose reductions' instructions (they have one strategy: shuffles, then shared memory).
//!
//! It runs after `infer_layouts`, not before as DESIGN.md orders it, because a copy's choice
//! (staging) depends on the fragment's layout; a gemm's layout comes from the atom table
//! through `gemm::plan`, the same function this pass records, so the two agree.

use crate::{gemm, inject_pipeline, Ctx};
use tile_ir::simplify::{known_multiple, simplify};
use tile_ir::verify::resolve_copy;
use tile_ir::*;

pub fn select_instructions(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let body = std::mem::take(&mut m.kernel.body);
    m.kernel.body = unroll_copy_loops(&m, body, false);
    let mut s = Selector {
        target: ctx.target.clone(),
        stmatrix_epilogue: ctx.options.stmatrix_epilogue,
        wgmma: !ctx.options.mma_sync_only,
        report: Vec::new(),
        diags: Vec::new(),
        shared_used: pipelined_shared_bytes(&m),
    };
    let body = std::mem::take(&mut m.kernel.body);
    m.kernel.body = s.stmts(&mut m, body);
    if !s.diags.is_empty() {
        return Err(s.diags);
    }
    ctx.report.extend(s.report);
    Ok(m)
}

struct Selector {
    target: Target,
    /// `Options::stmatrix_epilogue`.
    stmatrix_epilogue: bool,
    /// `wgmma` allowed (not `Options::mma_sync_only`).
    wgmma: bool,
    report: Vec<String>,
    diags: Vec<Diagnostic>,
    /// Shared bytes the block will hold when lowering reaches the statement at hand:
    /// every shared tile (multi-buffered producers counted with all their stages), the
    /// staging tiles and reduction scratch chosen before it, 16 bytes of alignment each.
    shared_used: u64,
}

/// Iterations up to which a `T.unroll` loop of copies inside a pipelined loop is unrolled.
const MAX_UNROLLED_COPIES: i64 = 64;

/// A `T.unroll` loop of constant bounds directly in a pipelined loop's body whose body is
/// only copies from global into shared memory (a tile of KV pages, a copy per page) becomes
/// those copies, one per iteration with the variable a number, so that each can run ahead as
/// a producer (`inject_pipeline::producers`); elsewhere loops stay as written.
fn unroll_copy_loops(m: &Module, body: Vec<Stmt>, in_pipeline: bool) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::For { var, start, extent, kind: ForKind::Unroll, body, loc } => {
                let bounds = (start.as_int(), extent.as_int());
                let copies_only = body.iter().all(|c| {
                    matches!(c, Stmt::Copy(CopyOp { src, dst, atomic: None, .. })
                        if m.buffer(src.buf).scope == Scope::Global && m.buffer(dst.buf).scope == Scope::Shared)
                });
                match bounds {
                    (Some(first), Some(n))
                        if in_pipeline
                            && copies_only
                            && !body.is_empty()
                            && (0..=MAX_UNROLLED_COPIES).contains(&n) =>
                    {
                        let dtype = m.var(var).dtype;
                        for i in first..first + n {
                            for c in &body {
                                out.push(map_stmt_exprs(c.clone(), &mut |e| match e {
                                    Expr::Var { id, .. } if id == var => Expr::int_of(i, dtype),
                                    other => simplify(other),
                                }));
                            }
                        }
                    }
                    _ => {
                        let body = unroll_copy_loops(m, body, false);
                        out.push(Stmt::For { var, start, extent, kind: ForKind::Unroll, body, loc });
                    }
                }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let pipelined = matches!(kind, ForKind::Pipelined { .. });
                let body = unroll_copy_loops(m, body, pipelined);
                out.push(Stmt::For { var, start, extent, kind, body, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => out.push(Stmt::If {
                cond,
                then: unroll_copy_loops(m, then, false),
                otherwise: unroll_copy_loops(m, otherwise, false),
                loc,
            }),
            other => out.push(other),
        }
    }
    out
}

/// Shared bytes of every shared buffer, producer tiles of pipelined loops with their stages.
fn pipelined_shared_bytes(m: &Module) -> u64 {
    let mut stages_of = std::collections::BTreeMap::new();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::For { kind: ForKind::Pipelined { stages, .. }, body, .. } = s {
            if *stages >= 2 {
                for k in inject_pipeline::producers(m, body) {
                    if let Stmt::Copy(op) = &body[k] {
                        stages_of.insert(op.dst.buf, *stages as u64);
                    }
                }
            }
        }
    });
    m.buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.scope == Scope::Shared)
        .map(|(i, b)| b.bytes() as u64 * stages_of.get(&BufferId(i as u32)).copied().unwrap_or(1) + 16)
        .sum()
}

impl Selector {
    fn stmts(&mut self, m: &mut Module, body: Vec<Stmt>) -> Vec<Stmt> {
        body.into_iter().map(|s| self.stmt(m, s)).collect()
    }

    fn stmt(&mut self, m: &mut Module, s: Stmt) -> Stmt {
        match s {
            Stmt::For { var, start, extent, kind: kind @ ForKind::Pipelined { stages, .. }, body, loc } => {
                let producers =
                    if stages >= 2 { inject_pipeline::producers(m, &body) } else { Default::default() };
                let body = body
                    .into_iter()
                    .enumerate()
                    .map(|(k, st)| match st {
                        Stmt::Copy(op) if producers.contains(&k) => Stmt::Copy(self.producer(m, op)),
                        other => self.stmt(m, other),
                    })
                    .collect();
                Stmt::For { var, start, extent, kind, body, loc }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let body = self.stmts(m, body);
                Stmt::For { var, start, extent, kind, body, loc }
            }
            Stmt::If { cond, then, otherwise, loc } => {
                // a warp-role region's tile ops run on its threads alone
                let threads = m.kernel.threads;
                if let Some((_, count)) = m.thread_range(&cond) {
                    m.kernel.threads = count;
                }
                let then = self.stmts(m, then);
                m.kernel.threads = threads;
                let otherwise = self.stmts(m, otherwise);
                Stmt::If { cond, then, otherwise, loc }
            }
            Stmt::Copy(op) => Stmt::Copy(self.copy(m, op)),
            Stmt::Gemm(op) => Stmt::Gemm(self.gemm(m, op)),
            Stmt::Reduce(op) => {
                self.shared_used += reduction_scratch(m, &op).map(|b| b + 16).unwrap_or(0);
                Stmt::Reduce(op)
            }
            other => other,
        }
    }

    fn at(m: &Module, loc: Loc) -> String {
        m.sources.short(loc).unwrap_or_default()
    }

    /// A pipeline producer: `cp.async` where it can be.
    fn producer(&mut self, m: &Module, mut op: CopyOp) -> CopyOp {
        let (sn, dn) = (&m.buffer(op.src.buf).name, &m.buffer(op.dst.buf).name);
        let at = Self::at(m, op.loc);
        match cp_async_fit(m, &op, m.kernel.threads) {
            Ok(()) => {
                self.report
                    .push(format!("{at}: T.copy {sn} -> {dn}: cp.async 16 bytes, zero-filled past the edge"));
                op.inst = Some(CopyInst::CpAsync);
            }
            Err(why) => {
                self.report.push(format!("{at}: T.copy {sn} -> {dn} is synchronous, not cp.async: {why}"));
                op.inst = Some(CopyInst::Threads);
            }
        }
        op
    }

    fn copy(&mut self, m: &Module, mut op: CopyOp) -> CopyOp {
        op.inst = Some(CopyInst::Threads);
        if op.atomic.is_some() {
            // a tile atomic updates global memory in place: by the threads that hold the
            // values, vector atomics where the hardware has them (`lower/vector.rs`)
            return op;
        }
        if let Some(stage_bytes) = staged_bytes(m, &op) {
            if self.shared_used + stage_bytes <= self.target.limits.shared_bytes {
                let (sn, dn) = (&m.buffer(op.src.buf).name, &m.buffer(op.dst.buf).name);
                let fits = stmatrix_for(m, &op, &self.target);
                let stmatrix = fits.filter(|_| self.stmatrix_epilogue);
                let by = match (fits, stmatrix) {
                    (_, Some(a)) => format!(", written by {a}"),
                    (Some(a), None) => {
                        format!(", written by the threads: {a} measured slower for mma.sync accumulators")
                    }
                    _ => String::new(),
                };
                self.report.push(format!(
                    "{}: T.copy {sn} -> {dn} staged through shared memory ({stage_bytes} bytes, swizzled{by}) for 16-byte stores",
                    Self::at(m, op.loc)
                ));
                self.shared_used += stage_bytes + 16;
                op.inst = Some(CopyInst::Staged { stmatrix });
            }
        }
        op
    }

    fn gemm(&mut self, m: &mut Module, mut op: GemmOp) -> GemmOp {
        let loc = op.loc;
        let (plan, not_wgmma) = match gemm::plan(m, &op, &self.target, self.wgmma) {
            Ok(p) => p,
            Err(why) => {
                self.diags.push(Diagnostic::error(format!("T.gemm: {why}"), loc));
                return op;
            }
        };
        let (ab, bb, cb) = (m.buffer(op.a).clone(), m.buffer(op.b).clone(), m.buffer(op.c).clone());
        // A or B may live in registers (a fragment written element by element) in the mma
        // operand layout infer_layouts gave it
        if plan.a == OperandSource::Registers && (op.transpose_a || ab.layout.is_none()) {
            self.diags.push(
                Diagnostic::error("T.gemm with a transposed A operand in registers is not supported", loc)
                    .with_help("keep A in registers as an (M, K) fragment, or copy it into a shared tile"),
            );
            return op;
        }
        if plan.b == OperandSource::Registers && (op.transpose_b || bb.layout.is_none()) {
            self.diags.push(
                Diagnostic::error("T.gemm with a transposed B operand in registers is not supported", loc)
                    .with_help("keep B in registers as a (K, N) fragment, or copy it into a shared tile"),
            );
            return op;
        }
        let shared_or_registers = |b: &Buffer| matches!(b.scope, Scope::Shared | Scope::Fragment);
        if !shared_or_registers(&ab) || !shared_or_registers(&bb) {
            self.diags.push(Diagnostic::bug("gemm operands are neither shared tiles nor fragments"));
            return op;
        }
        let (oa, _) = match gemm::operands(m, &op) {
            Ok(o) => o,
            Err(why) => {
                self.diags.push(Diagnostic::error(format!("T.gemm: {why}"), loc));
                return op;
            }
        };
        let (ae, be, ce) = (ab.extents(), bb.extents(), cb.extents());
        let tile_a = &oa.tile[..];
        let (mm, n) = (ce[0], ce[1]);
        let k = if op.transpose_a { tile_a[0] } else { tile_a[1] };
        let kstep = plan.atom.k;
        if k % kstep != 0 {
            self.diags.push(
                Diagnostic::error(
                    format!("T.gemm: K={k} is not a multiple of {kstep}, the K of one {} tensor-core step", ab.dtype),
                    loc,
                )
                .with_help(format!(
                    "use block_K a multiple of {kstep}; a ragged K is handled by the copies (they pad with zeros)"
                )),
            );
            return op;
        }
        if plan.atom.scope == target::ThreadScope::Warpgroup {
            self.wgmma_report(m, &op, &plan, (mm, n, k));
            op.inst = Some(plan);
            return op;
        }
        // swizzle the operand tiles so ldmatrix reads 8 rows from 8 distinct bank groups (the
        // whole buffer's rows: a view reads part of them)
        for (id, tile) in [(op.a, &ae[ae.len() - 2..]), (op.b, &be[be.len() - 2..])] {
            let buf = m.buffer(id);
            if buf.scope != Scope::Shared {
                continue;
            }
            let row_bytes = tile[1] * buf.dtype.bytes() as i64;
            let power_of_two = row_bytes >= 16 && row_bytes & (row_bytes - 1) == 0;
            let tile_bytes = tile[0] * row_bytes;
            if power_of_two && tile_bytes % 128 == 0 && buf.swizzle.is_none() {
                self.report.push(format!(
                    "{}: shared tile '{}' swizzled (16-byte chunks XOR line % 8)",
                    Self::at(m, buf.loc),
                    buf.name
                ));
                m.buffer_mut(id).swizzle = Some(Swizzle::chunks_of_rows(row_bytes));
            }
        }
        let (a_reg, b_reg) = (plan.a == OperandSource::Registers, plan.b == OperandSource::Registers);
        let how = if a_reg && b_reg {
            "A and B from registers"
        } else if b_reg {
            "A by ldmatrix, B from registers"
        } else if a_reg {
            "A from registers, B by ldmatrix"
        } else if plan.a != OperandSource::Gather && plan.b != OperandSource::Gather {
            "ldmatrix"
        } else {
            "ldmatrix and element gathers"
        };
        let why = not_wgmma.map(|w| format!("; not wgmma: {w}")).unwrap_or_default();
        self.report.push(format!(
            "{}: T.gemm {mm}x{n}x{k} {}: mma.sync.M{}N{}K{}, {}x{} warps of {}x{}, operands by {how}{why}",
            Self::at(m, loc),
            ab.dtype,
            plan.atom.m,
            plan.atom.n,
            plan.atom.k,
            plan.warps_m,
            plan.warps_n,
            mm / plan.warps_m,
            n / plan.warps_n,
        ));
        op.inst = Some(plan);
        op
    }

    /// A `wgmma` gemm: its shared operands take wgmma's canonical layouts (panels of one
    /// swizzle span), and the report says how each operand is read.
    fn wgmma_report(&mut self, m: &mut Module, op: &GemmOp, plan: &GemmInst, (mm, n, k): (i64, i64, i64)) {
        let mut how = Vec::new();
        for (id, k_major, name) in [(op.a, !op.transpose_a, "A"), (op.b, op.transpose_b, "B")] {
            let buf = m.buffer(id);
            if buf.scope != Scope::Shared {
                how.push(format!("{name} from registers"));
                continue;
            }
            let e = buf.extents();
            let layout =
                SharedLayout::wgmma(&e[e.len() - 2..], buf.dtype).expect("gemm::plan checked the layout");
            let span = layout.panel.unwrap_or(0) * buf.dtype.bytes() as i64;
            how.push(format!(
                "{name} by descriptor ({}, {span}-byte swizzle)",
                if k_major {
                    "K-major"
                } else if name == "A" {
                    "M-major"
                } else {
                    "N-major"
                }
            ));
            if buf.panel.is_none() {
                self.report.push(format!(
                    "{}: shared tile '{}' in wgmma's layout: panels of {span}-byte rows, swizzled",
                    Self::at(m, buf.loc),
                    buf.name
                ));
            }
            let b = m.buffer_mut(id);
            b.panel = layout.panel;
            b.swizzle = layout.swizzle;
        }
        let ab = m.buffer(op.a);
        self.report.push(format!(
            "{}: T.gemm {mm}x{n}x{k} {}: wgmma.m64n{}k16, {}x{} warpgroups of {}x{}, {}",
            Self::at(m, op.loc),
            ab.dtype,
            plan.n,
            plan.warps_m,
            plan.warps_n,
            mm / plan.warps_m,
            n / plan.warps_n,
            how.join(", ")
        ));
    }
}

/// Why a pipelined global → shared copy cannot be one 16-byte `cp.async` per thread and
/// chunk (the lowering's blocked layout over the destination tile), or Ok.
fn cp_async_fit(m: &Module, op: &CopyOp, threads: u32) -> Result<(), String> {
    let (s, d) = resolve_copy(m, &op.src, &op.dst, op.loc).map_err(|e| e.message)?;
    let (sb, db) = (m.buffer(s.buf), m.buffer(d.buf));
    if sb.dtype != db.dtype {
        return Err(format!("it converts {} to {}", sb.dtype, db.dtype));
    }
    let zero_pad = |p: &Expr| match simplify(p.clone()) {
        Expr::Const { value: ConstValue::Int(0), .. } => true,
        Expr::Const { value: ConstValue::Float(f), .. } => f == 0.0 && f.is_sign_positive(),
        _ => false,
    };
    if op.pad.as_ref().is_some_and(|p| !zero_pad(p)) {
        return Err("its pad value is not 0 (cp.async can only zero-fill)".into());
    }
    let layout = FragmentLayout::blocked(&d.shape(), threads, sb.dtype.bytes().min(db.dtype.bytes()));
    let width = layout.vector_width();
    let eb = sb.dtype.bytes() as i64;
    if width * eb != 16 {
        return Err(format!(
            "the tile's rows do not split into 16-byte vectors ({width} elements of {eb} bytes)"
        ));
    }
    for (b, r) in [(sb, &s), (db, &d)] {
        let n = b.rank();
        // the vector runs along the last dimension, from an aligned start
        let contiguous = r.kept[n - 1] && r.extents[n - 1] != 1;
        let aligned = known_multiple(&simplify(r.starts[n - 1].clone()), width)
            && m.stride_multiples(r.buf)[..n - 1].iter().all(|s| s % width == 0);
        if !contiguous || !aligned {
            if let Some(hint) = m.size_alignment_hint(r.buf, width).filter(|_| contiguous) {
                return Err(hint);
            }
            return Err(format!(
                "'{}' is not read/written in aligned 16-byte vectors (a row length not a multiple of {width}?)",
                b.name
            ));
        }
    }
    Ok(())
}

/// The bytes of the shared tile a fragment → global copy is staged through, when it should
/// be: a whole 2-D fragment whose threads hold less than 16 contiguous bytes of a row, with
/// rows a power of two of at least 16 bytes (so the tile swizzles).
fn staged_bytes(m: &Module, op: &CopyOp) -> Option<u64> {
    let (sb, db) = (m.buffer(op.src.buf), m.buffer(op.dst.buf));
    let layout = sb.layout.as_ref()?;
    if sb.scope != Scope::Fragment || db.scope != Scope::Global || sb.rank() != 2 || !op.src.dims.is_empty() {
        return None;
    }
    let eb = db.dtype.bytes() as i64;
    let row_bytes = sb.extents()[1] * eb;
    if layout.vector_width() * eb >= 16 || row_bytes < 16 || row_bytes & (row_bytes - 1) != 0 {
        return None;
    }
    Some((sb.num_elements() * eb) as u64)
}

/// The `stmatrix` atom that writes a staged copy's tile, where one can: the target has it,
/// the tile holds 16-bit elements, and the fragment is an mma accumulator (whose per-lane
/// pairs are exactly an 8 × 8 b16 matrix's registers): x4 when each warp holds an even
/// number of 8-column pieces (two pieces per instruction), else x2.
fn stmatrix_for(m: &Module, op: &CopyOp, target: &Target) -> Option<&'static CopyAtom> {
    let (sb, db) = (m.buffer(op.src.buf), m.buffer(op.dst.buf));
    if !target.caps.stmatrix || db.dtype.bytes() != 2 {
        return None;
    }
    let warps = m.kernel.threads as i64 / target.limits.warp_size as i64;
    let (_, wn) = gemm::accumulator_warp_grid(sb.layout.as_ref()?, &sb.extents(), warps)?;
    let pieces = sb.extents()[1] / wn / 8;
    Some(CopyAtom::stmatrix(if pieces % 2 == 0 { 4 } else { 2 }))
}

/// The shared scratch a reduction across warps takes (lower/reduce.rs), if it takes any.
fn reduction_scratch(m: &Module, op: &ReduceOp) -> Option<u64> {
    let (sb, db) = (m.buffer(op.src), m.buffer(op.dst));
    let (sl, dl) = (sb.layout.as_ref()?, db.layout.as_ref()?);
    // the butterfly's masks stride * 1, 2, 4, … below size: those of 32 or more cross warps
    let masks = sl.thread_digits(op.dim).into_iter().flat_map(|(size, stride)| {
        std::iter::successors(Some(1i64), |k| Some(k * 2))
            .take_while(move |k| *k < size)
            .map(move |k| stride * k)
    });
    let across_warps = masks.into_iter().any(|mask| mask >= 32);
    let acc = if sb.dtype.is_float() && sb.dtype.bytes() < 4 { DType::F32 } else { sb.dtype };
    across_warps.then(|| (dl.slots() * sl.active_threads * acc.bytes() as i64) as u64)
}
