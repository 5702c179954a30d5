//! `T.copy` by its chosen instruction (`CopyOp::inst`): by the threads over the anchor's
//! layout, by `cp.async` (pipelined producers), or staged through a swizzled shared tile
//! (fragments whose threads hold less than 16 contiguous bytes of a row).
//!
//! Requires: a copy with its instruction (`select_instructions`), layouts on fragments.
//! Ensures: per-thread code; a `cp.async` reads only bytes inside the tensor and zero-fills
//! the rest; staged copies are bracketed by barriers.
//! Does not: choose between them (`select_instructions` did and reported why).

use super::add;
use super::guards::{and, cmp_extent, in_range};
use super::threads::element_at;
use super::{i32c, is_zero, strip_cast, Lowerer};
use tile_ir::simplify::{known_multiple, simplify, to_affine};
use tile_ir::verify::{resolve_copy, ResolvedRegion};
use tile_ir::*;

impl Lowerer {
    pub(super) fn copy(&mut self, op: &CopyOp) -> Vec<Stmt> {
        let (src, dst, loc) = (&op.src, &op.dst, op.loc);
        let pad = op.pad.clone();
        let inst = op.inst.unwrap_or(CopyInst::Threads);
        let (s, d) = match resolve_copy(&self.m, src, dst, loc) {
            Ok(x) => x,
            Err(e) => {
                self.diags.push(e);
                return vec![];
            }
        };
        let (sb, db) = (self.m.buffer(s.buf).clone(), self.m.buffer(d.buf).clone());
        if let CopyInst::Staged { stmatrix } = inst {
            return self.staged_store(op, stmatrix);
        }
        if inst == CopyInst::StagedTma {
            return self.staged_tma_store(op);
        }
        if inst == CopyInst::Tma {
            // inject_pipeline expands TMA producers into their bulk copies
            self.diags.push(Diagnostic::bug("a TMA copy outside a warp-specialized pipeline"));
            return vec![];
        }
        if sb.scope == Scope::Local || db.scope == Scope::Local {
            self.diags
                .push(Diagnostic::error("T.copy to or from a local buffer is not supported", loc).with_help(
                "local buffers are per thread; copy into a fragment, or assign elements in a T.Parallel loop",
            ));
            return vec![];
        }
        // the side whose layout decides the thread mapping
        let anchor = if sb.scope == Scope::Fragment {
            &s
        } else if db.scope == Scope::Fragment || sb.scope == Scope::Global {
            &d
        } else {
            &s
        };
        // a fixed part of a fragment: the loop runs over the whole fragment (its layout's
        // threads and registers), the elements outside the part guarded off
        let part = |side: &ResolvedRegion, b: &Buffer| {
            b.scope == Scope::Fragment
                && (side.extents != b.extents()
                    || side.starts.iter().any(|e| simplify(e.clone()).as_int() != Some(0)))
        };
        let (s_part, d_part) = (part(&s, &sb), part(&d, &db));
        if s_part || d_part {
            return self.fragment_part_copy(op, &s, &d, s_part);
        }
        let loop_shape = anchor.shape();
        let vars: Vec<VarId> = (0..loop_shape.len())
            .map(|k| self.m.add_var(&format!("c{k}"), VarKind::Loop, DType::I32))
            .collect();
        let index_side = |r: &ResolvedRegion| -> Vec<Expr> {
            // non-unit kept dims of r consume non-unit loop dims in order
            let mut loop_dims = (0..loop_shape.len()).filter(|k| loop_shape[*k] != 1);
            (0..r.extents.len())
                .map(|d| {
                    let start = r.starts[d].clone();
                    if r.kept[d] && r.extents[d] != 1 {
                        let k = loop_dims.next().expect("copy shapes agree");
                        let v = Expr::var(vars[k], DType::I32);
                        simplify(add(start.clone(), Expr::cast(v, start.dtype())))
                    } else {
                        start
                    }
                })
                .collect()
        };
        let store = element_move(op, &sb, &db, s.buf, index_side(&s), d.buf, index_side(&d), pad);
        // each thread moves the elements it holds: the two layouts must put every element
        // on the same threads (its slot may differ: an mma accumulator into an A operand)
        let refined = match (sb.layout.as_ref(), db.layout.as_ref()) {
            (Some(a), Some(b)) if a != b => a.refined(b),
            _ => None,
        };
        let layout = match (sb.layout.as_ref(), db.layout.as_ref()) {
            _ if refined.is_some() => refined.expect("checked"),
            (Some(a), Some(b)) if a != b => {
                self.diags.push(
                    Diagnostic::error(
                        format!(
                            "layout conflict: T.copy between fragments '{}' and '{}' laid out differently",
                            sb.name, db.name
                        ),
                        loc,
                    )
                    .with_label(sb.loc, format!("'{}' is {a}", sb.name))
                    .with_label(db.loc, format!("'{}' is {b}", db.name)),
                );
                return vec![];
            }
            (Some(a), _) => a.clone(),
            (_, Some(b)) => b.clone(),
            _ => FragmentLayout::blocked(
                &loop_shape,
                self.m.kernel.threads,
                sb.dtype.bytes().min(db.dtype.bytes()),
            ),
        };
        if inst == CopyInst::CpAsync {
            return match self.async_copy(&vars, &store, &layout) {
                Ok(code) => code,
                Err(why) => {
                    let what = format!("T.copy {} -> {}", sb.name, db.name);
                    self.diags.push(Diagnostic::bug(format!(
                        "select_instructions chose cp.async for {what}, but {why}"
                    )));
                    vec![]
                }
            };
        }
        self.parallel(&vars, &loop_shape, &[store], &layout, loc)
    }

    /// `T.copy` of a fixed part of a fragment (`acc_o[:valid, :]`, either side): a loop over
    /// the whole fragment in its layout, each element inside the part moved to (or from) the
    /// other side at its offset in the part, the others skipped.
    fn fragment_part_copy(
        &mut self,
        op: &CopyOp,
        s: &ResolvedRegion,
        d: &ResolvedRegion,
        src_is_part: bool,
    ) -> Vec<Stmt> {
        let loc = op.loc;
        let (frag, other) = if src_is_part { (s, d) } else { (d, s) };
        let fb = self.m.buffer(frag.buf).clone();
        let Some(layout) = fb.layout.clone() else {
            self.diags.push(Diagnostic::bug(format!("fragment '{}' without a layout", fb.name)));
            return vec![];
        };
        let shape = fb.extents();
        let vars: Vec<VarId> =
            (0..shape.len()).map(|k| self.m.add_var(&format!("c{k}"), VarKind::Loop, DType::I32)).collect();
        let starts: Vec<i64> =
            frag.starts.iter().map(|e| simplify(e.clone()).as_int().unwrap_or(0)).collect();
        let mut guard: Option<Expr> = None;
        let mut offsets = Vec::new(); // per non-unit kept fragment dim: c - start
        for (k, &v) in vars.iter().enumerate() {
            let c = Expr::var(v, DType::I32);
            let (lo, n) = (starts[k], frag.extents[k]);
            if lo > 0 || n < shape[k] {
                let inside = Expr::binary(
                    BinOp::And,
                    Expr::binary(BinOp::Ge, c.clone(), Expr::int(lo)),
                    Expr::binary(BinOp::Lt, c.clone(), Expr::int(lo + n)),
                );
                guard = Some(match guard {
                    Some(g) => Expr::binary(BinOp::And, g, inside),
                    None => inside,
                });
            }
            if frag.kept[k] && n != 1 {
                offsets.push(simplify(Expr::binary(BinOp::Sub, c, Expr::int(lo))));
            }
        }
        let frag_idx: Vec<Expr> = vars.iter().map(|v| Expr::var(*v, DType::I32)).collect();
        let mut offsets = offsets.into_iter();
        let other_idx: Vec<Expr> = (0..other.extents.len())
            .map(|k| {
                let start = other.starts[k].clone();
                if other.kept[k] && other.extents[k] != 1 {
                    match offsets.next() {
                        Some(o) => simplify(add(start.clone(), Expr::cast(o, start.dtype()))),
                        None => start,
                    }
                } else {
                    start
                }
            })
            .collect();
        let (sb, db) = (self.m.buffer(s.buf).clone(), self.m.buffer(d.buf).clone());
        let (src_idx, dst_idx) = if src_is_part { (frag_idx, other_idx) } else { (other_idx, frag_idx) };
        let store = element_move(op, &sb, &db, s.buf, src_idx, d.buf, dst_idx, op.pad.clone());
        let body = match guard {
            Some(cond) => Stmt::If { cond, then: vec![store], otherwise: vec![], loc },
            None => store,
        };
        self.parallel(&vars, &shape, &[body], &layout, loc)
    }

    /// A fragment stored to global memory through a swizzled shared tile, so that the global
    /// writes are 16-byte vectors along rows (coalesced); `select_instructions` chose it
    /// (mma accumulators hold pairs of a row per thread) and checked the shared memory.
    pub(super) fn staged_store(&mut self, op: &CopyOp, stmatrix: Option<&'static CopyAtom>) -> Vec<Stmt> {
        let (sb, db) = (self.m.buffer(op.src.buf).clone(), self.m.buffer(op.dst.buf).clone());
        let stage = self.m.add_buffer(Buffer {
            name: format!("{}_stage", sb.name),
            scope: Scope::Shared,
            dtype: db.dtype,
            shape: sb.shape.clone(),
            loc: op.loc,
            layout: None,
            shared_offset: None,
            alias_of: None,
            panel: None,
            swizzle: Some(Swizzle::chunks_of_rows(sb.extents()[1] * db.dtype.bytes() as i64)),
        });
        let whole = Region { buf: stage, dims: vec![], loc: op.loc };
        let threads = |src: Region, dst: Region, pad: Option<Expr>| CopyOp {
            src,
            dst,
            pad,
            loc: op.loc,
            inst: Some(CopyInst::Threads),
            atomic: None,
        };
        let mut code = vec![Stmt::inst(inst::Sync)];
        match stmatrix {
            Some(atom) => code.extend(self.stmatrix_store(op.src.buf, stage, atom)),
            None => code.extend(self.copy(&threads(op.src.clone(), whole.clone(), None))),
        }
        code.push(Stmt::inst(inst::Sync));
        code.extend(self.copy(&threads(whole, op.dst.clone(), op.pad.clone())));
        code
    }

    /// A global→shared copy as one 16-byte `cp.async` per vector chunk, reading only the
    /// bytes inside the tensor and zero-filling the rest. Err says why it cannot be.
    pub(super) fn async_copy(
        &mut self,
        vars: &[VarId],
        store: &Stmt,
        l: &FragmentLayout,
    ) -> Result<Vec<Stmt>, String> {
        let Stmt::Store { buf: dst, value, .. } = store else { return Err("not a plain copy".into()) };
        let Expr::Load { buf: src, oob, .. } = strip_cast(value) else {
            return Err("not a plain copy".into());
        };
        let (sb, db) = (self.m.buffer(*src).clone(), self.m.buffer(*dst).clone());
        if sb.dtype != db.dtype {
            return Err(format!("it converts {} to {}", sb.dtype, db.dtype));
        }
        if oob.as_ref().is_some_and(|p| !is_zero(p)) {
            return Err("its pad value is not 0 (cp.async can only zero-fill)".into());
        }
        let width = l.vector_width();
        let eb = sb.dtype.bytes() as i64;
        if width * eb != 16 {
            return Err(format!(
                "the tile's rows do not split into 16-byte vectors ({width} elements of {eb} bytes)"
            ));
        }
        let mut failure = None;
        let (dst, src) = (*dst, *src);
        let code = self.for_each_chunk(l, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let el = element_at(values, base, lane_var, width);
            let Some(Stmt::Store { idx: dst_idx, value, .. }) = lw.instantiate(std::slice::from_ref(store), vars, &el).pop() else {
                failure = Some("internal: copy body".to_string());
                return vec![];
            };
            let Expr::Load { idx: src_idx, .. } = strip_cast(&value).clone() else {
                failure = Some("internal: copy body".to_string());
                return vec![];
            };
            let zero = i32c(0);
            let at_lane0 = |idx: &[Expr]| idx.iter().map(|i| simplify(i.clone().substitute(lane_var, &zero))).collect::<Vec<_>>();
            for (buf, idx) in [(src, &src_idx), (dst, &dst_idx)] {
                let b = lw.m.buffer(buf);
                let n = idx.len();
                let last = to_affine(&idx[n - 1]);
                let lane_key = format!("{:?}", Expr::var(lane_var, DType::I32));
                let contiguous = last.terms.get(&lane_key).map(|(c, _)| *c) == Some(1)
                    && idx[..n - 1].iter().all(|i| !i.uses_var(lane_var));
                let first = at_lane0(idx);
                let aligned = known_multiple(&first[n - 1], width)
                    && lw.m.stride_multiples(buf)[..n - 1].iter().all(|s| s % width == 0);
                if !contiguous || !aligned {
                    if let Some(hint) = lw.m.size_alignment_hint(buf, width).filter(|_| contiguous) {
                        failure = Some(hint);
                        return vec![];
                    }
                    failure = Some(format!("'{}' is not read/written in aligned 16-byte vectors (a row length not a multiple of {width}?)", b.name));
                    return vec![];
                }
            }
            let (s0, d0) = (at_lane0(&src_idx), at_lane0(&dst_idx));
            let n = s0.len();
            // per dimension, whether the chunk's index is inside the tensor
            let mut inside: Vec<Expr> = (0..n - 1)
                .map(|d| in_range(&lw.m, &s0[d], src, d, &|e| lw.non_negative(e)))
                .collect();
            let last = s0[n - 1].clone();
            let mut last_inside = None;
            if !lw.non_negative(&last) {
                last_inside = and(last_inside, Expr::binary(BinOp::Ge, last.clone(), Expr::int_of(0, last.dtype())));
            }
            // in the wider of the index's and the size's types
            let lt = cmp_extent(&lw.m, BinOp::Lt, last.clone(), src, n - 1);
            let Expr::Binary { a: last_w, b: extent, .. } = lt.clone() else { unreachable!("a comparison") };
            let (last, extent) = (*last_w, *extent);
            inside.push(and(last_inside, lt).expect("a condition"));
            let valid = simplify(inside.iter().cloned().fold(None, and).expect("at least one condition"));
            let remaining = Expr::binary(BinOp::Min, Expr::binary(BinOp::Sub, extent, last.clone()), Expr::int_of(width, last.dtype()));
            let bytes = Expr::cast(Expr::binary(BinOp::Mul, remaining, Expr::int_of(eb, last.dtype())), DType::I32);
            let src_bytes = simplify(Expr::select(valid.clone(), bytes, i32c(0)));
            // A safe address even when nothing is read: each dimension falls back to 0 on its
            // own condition, so that an index inside its dimension (a column running with the
            // K loop) stays an affine expression the C compiler strength-reduces, whatever
            // the other dimensions (a row past M) do.
            let safe: Vec<Expr> = s0
                .iter()
                .zip(&inside)
                .map(|(i, c)| simplify(Expr::select(simplify(c.clone()), i.clone(), Expr::int_of(0, i.dtype()))))
                .collect();
            vec![Stmt::inst(inst::AsyncCopy { dst, dst_idx: d0, src, src_idx: safe, src_bytes, bytes: 16 })]
        });
        match failure {
            Some(why) => Err(why),
            None => Ok(self.hoist_global_loads(code)),
        }
    }

    /// The values a copy's chunks read from global memory for their addresses (a block
    /// table's page, `K[table[b, n // page], ...]`) that no chunk or thread variable of the
    /// copy changes, loaded once before its chunks: each `cp.async` is a volatile asm with a
    /// memory clobber, so the C compiler would load them again for every chunk, one after
    /// another on the copy's path. Every thread ran such a load before too (chunk 0 of
    /// thread 0 always runs), at the same index: no read is added.
    fn hoist_global_loads(&mut self, code: Vec<Stmt>) -> Vec<Stmt> {
        let mut bound = std::collections::HashSet::new();
        walk_stmts(&code, &mut |s| match s {
            Stmt::Let { var, .. } | Stmt::For { var, .. } => {
                bound.insert(*var);
            }
            Stmt::Parallel { vars, .. } => bound.extend(vars.iter().copied()),
            _ => {}
        });
        let mut loads: Vec<Expr> = Vec::new();
        walk_stmts(&code, &mut |s| {
            stmt_exprs(s, &mut |e| {
                e.walk(&mut |x| {
                    let Expr::Load { buf, .. } = x else { return };
                    let mut free = self.m.buffer(*buf).scope == Scope::Global;
                    x.walk(&mut |y| free &= !matches!(y, Expr::Var { id, .. } if bound.contains(id)));
                    if free && !loads.contains(x) {
                        loads.push(x.clone());
                    }
                })
            })
        });
        // the outermost ones (a load inside another's index goes with it)
        let contains = |e: &Expr, part: &Expr| {
            let mut found = false;
            e.walk(&mut |y| found |= y == part);
            found
        };
        let outer: Vec<Expr> =
            loads.iter().filter(|l| !loads.iter().any(|m| m != *l && contains(m, l))).cloned().collect();
        if outer.is_empty() {
            return code;
        }
        let mut lets = Vec::new();
        let mut names = Vec::new();
        for load in outer {
            let Expr::Load { buf, .. } = &load else { unreachable!("a load") };
            let name = format!("{}_at", self.m.buffer(*buf).name);
            let (st, var) = self.temp(&name, load.clone());
            lets.push(st);
            names.push((load, var));
        }
        let code = code
            .into_iter()
            .map(|s| {
                map_stmt_exprs(s, &mut |e| match names.iter().find(|(l, _)| *l == e) {
                    Some((_, var)) => var.clone(),
                    None => e,
                })
            })
            .collect::<Vec<_>>();
        lets.extend(code);
        lets
    }
}

/// One element of copy `op`: `dst[dst_idx] = src[src_idx]` converted to the destination's
/// dtype (`pad` read past a global tensor's edge), or, for a tile atomic, that element
/// combined atomically (vectors where the hardware has them: `vector.rs`).
#[allow(clippy::too_many_arguments)]
fn element_move(
    op: &CopyOp,
    sb: &Buffer,
    db: &Buffer,
    src: BufferId,
    src_idx: Vec<Expr>,
    dst: BufferId,
    dst_idx: Vec<Expr>,
    pad: Option<Expr>,
) -> Stmt {
    let loc = op.loc;
    let pad = pad.map(|p| Box::new(Expr::cast(p, sb.dtype)));
    let load = Expr::Load { buf: src, idx: src_idx, dtype: sb.dtype, loc, oob: pad };
    let value = Expr::cast(load, db.dtype);
    match op.atomic {
        Some(mode) => Stmt::Atomic { mode, buf: dst, idx: dst_idx, value, prev: None, loc },
        None => Stmt::Store { buf: dst, idx: dst_idx, value, loc },
    }
}
