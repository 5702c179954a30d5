//! Parallel loops as per-thread code: each thread walks the register slots of its layout,
//! one vector chunk at a time; fragment accesses become register slots.
//!
//! Requires: a loop (or copy, fill, reduction) with a layout over its extents.
//! Ensures: code that runs each iteration on the thread the layout names, exactly once
//! (replicated layouts write from their first replica only); ragged chunks are skipped.
//! Does not: decide vector widths (`vector.rs`) or bounds (`guards.rs`).

use super::guards::and;
use super::{add, i32c, mul, substitute_stmt, ChunkBuilder, Element, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::*;

impl Lowerer {
    /// Per-thread loops over a layout's elements: `element` builds the code for one vector
    /// chunk (all lanes of the last dimension's vector digit), given each dimension's digit
    /// values (the vector digit's as 0) and the chunk's first index.
    pub(super) fn for_each_chunk(&mut self, l: &FragmentLayout, element: &mut ChunkBuilder<'_>) -> Vec<Stmt> {
        let n = l.dims.len();
        let vector = l.vector_width() > 1;
        let mut prologue = Vec::new();
        let mut values: Vec<Vec<Expr>> = Vec::new();
        let mut loops: Vec<(VarId, i64)> = Vec::new();
        for (d, ds) in l.dims.iter().enumerate() {
            let mut vs = Vec::new();
            for (k, g) in ds.iter().enumerate() {
                match g.source {
                    Source::Thread(stride) => {
                        let v = Expr::binary(
                            BinOp::FloorMod,
                            Expr::binary(BinOp::FloorDiv, self.tid(), i32c(stride)),
                            i32c(g.size),
                        );
                        let (st, e) = self.temp(&format!("t{d}"), simplify(v));
                        prologue.push(st);
                        vs.push(e);
                    }
                    Source::Slot(_) if vector && d == n - 1 && k == 0 => vs.push(i32c(0)),
                    Source::Slot(_) => {
                        let v = self.m.add_var(&format!("o{d}"), VarKind::Loop, DType::I32);
                        loops.push((v, g.size));
                        vs.push(Expr::var(v, DType::I32));
                    }
                }
            }
            values.push(vs);
        }
        let base: Vec<Expr> = l
            .dims
            .iter()
            .enumerate()
            .map(|(d, ds)| {
                let mut e = i32c(0);
                for (k, g) in ds.iter().enumerate() {
                    e = add(e, mul(values[d][k].clone(), i32c(g.step)));
                }
                simplify(e)
            })
            .collect();
        let mut body = element(self, &values, &base);
        // ragged dimensions: skip chunks past the extent
        let mut cond = None;
        for (d, first) in base.iter().enumerate() {
            if l.span(d) > l.extents[d] {
                cond = and(cond, Expr::binary(BinOp::Lt, first.clone(), i32c(l.extents[d])));
            }
        }
        if let Some(c) = cond {
            body = vec![Stmt::If { cond: c, then: body, otherwise: vec![], loc: Loc::UNKNOWN }];
        }
        for (v, size) in loops.into_iter().rev() {
            body = vec![Stmt::For {
                var: v,
                start: i32c(0),
                extent: i32c(size),
                kind: ForKind::Unroll,
                body,
                loc: Loc::UNKNOWN,
            }];
        }
        if (l.active_threads as u32) < self.m.kernel.threads {
            body = vec![Stmt::If {
                cond: Expr::binary(BinOp::Lt, self.tid(), i32c(l.active_threads)),
                then: body,
                otherwise: vec![],
                loc: Loc::UNKNOWN,
            }];
        }
        prologue.extend(body);
        prologue
    }

    /// Register slot of a fragment element whose buffer dimensions are fed by loop
    /// dimensions `dims` (the fragment's digits match the loop's, checked by infer_layouts;
    /// or, for a copy between fragments, each of its digits is a run of the loop's:
    /// `FragmentLayout::refined`).
    pub(super) fn slot(&self, buf: BufferId, dims: &[usize], el: &Element) -> Expr {
        let placed: Vec<usize> = (0..dims.len()).collect();
        self.slot_of_dims(buf, &placed, dims, el)
    }

    /// What buffer dimensions `placed`, fed by loop dimensions `dims`, add to the register
    /// slot of a fragment element.
    fn slot_of_dims(&self, buf: BufferId, placed: &[usize], dims: &[usize], el: &Element) -> Expr {
        let l = self.m.buffer(buf).layout.as_ref().expect("fragment layout");
        let mut slot = i32c(0);
        for (&k, d) in placed.iter().zip(dims) {
            let steps = el.steps.get(*d);
            for (j, g) in l.dims[k].iter().enumerate() {
                let Source::Slot(stride) = g.source else { continue };
                let value = match steps {
                    // the loop's digits inside this one: their values at their weights
                    Some(steps) if steps.len() != l.dims[k].len() || steps[j] != g.step => {
                        let mut v = i32c(0);
                        for (i, &st) in steps.iter().enumerate() {
                            if g.step <= st && st < g.step * g.size {
                                v = add(v, mul(el.values[*d][i].clone(), i32c(st / g.step)));
                            }
                        }
                        v
                    }
                    _ => el.values[*d][j].clone(),
                };
                slot = add(slot, mul(value, i32c(stride)));
            }
        }
        simplify(slot)
    }

    /// Rewrite a parallel-loop body for one element: fragment accesses become register
    /// slots, loop variables become the element's indices.
    pub(super) fn instantiate(&self, body: &[Stmt], vars: &[VarId], el: &Element) -> Vec<Stmt> {
        let m = &self.m;
        let frag_index = |buf: BufferId, idx: &[Expr]| -> Option<Vec<Expr>> {
            if m.buffer(buf).scope != Scope::Fragment {
                return None;
            }
            let l = m.buffer(buf).layout.as_ref().expect("fragment layout");
            if l.is_whole() {
                // every thread holds every element: the slot of whatever the indices are
                return Some(vec![l.slot_of(idx)]);
            }
            // infer_layouts checked the access: loop variables in order, and dimensions of
            // other indices (`lse[k, j]`, k of a T.serial loop) in each thread's registers
            let access = crate::infer_layouts::access_dims(idx, vars).expect("checked by infer_layouts");
            let (placed, dims): (Vec<usize>, Vec<usize>) =
                access.iter().enumerate().filter_map(|(k, d)| d.map(|d| (k, d))).unzip();
            let mut slot = self.slot_of_dims(buf, &placed, &dims, el);
            for (k, d) in access.iter().enumerate() {
                if d.is_none() {
                    slot = add(slot, l.dim_slot(k, &idx[k]));
                }
            }
            Some(vec![simplify(slot)])
        };
        let subst = |e: Expr| -> Expr {
            let e = e.map(&mut |x| match x {
                Expr::Load { buf, idx, dtype, loc, oob } => match frag_index(buf, &idx) {
                    Some(slot) => Expr::Load { buf, idx: slot, dtype, loc, oob },
                    None => Expr::Load { buf, idx, dtype, loc, oob },
                },
                other => other,
            });
            let mut e = e;
            for (d, v) in vars.iter().enumerate() {
                e = e.substitute(*v, &el.index[d]);
            }
            simplify(e)
        };
        let mut out = Vec::new();
        for s in body {
            out.push(match s.clone() {
                Stmt::Store { buf, idx, value, loc } => {
                    let whole = m.buffer(buf).layout.as_ref().is_some_and(|l| l.is_whole());
                    let idx = match frag_index(buf, &idx) {
                        // a whole fragment's slot is of the user's indices: the element's
                        Some(slot) if whole => slot.into_iter().map(&subst).collect(),
                        Some(slot) => slot,
                        None => idx.into_iter().map(&subst).collect(),
                    };
                    Stmt::Store { buf, idx, value: subst(value), loc }
                }
                Stmt::Atomic { mode, buf, idx, value, prev, loc } => Stmt::Atomic {
                    mode,
                    buf,
                    idx: idx.into_iter().map(&subst).collect(),
                    value: subst(value),
                    prev,
                    loc,
                },
                Stmt::If { cond, then, otherwise, loc } => Stmt::If {
                    cond: subst(cond),
                    then: self.instantiate(&then, vars, el),
                    otherwise: self.instantiate(&otherwise, vars, el),
                    loc,
                },
                Stmt::For { var, start, extent, kind, body, loc } => Stmt::For {
                    var,
                    start: subst(start),
                    extent: subst(extent),
                    kind: if matches!(kind, ForKind::Pipelined { .. }) { ForKind::Serial } else { kind },
                    body: self.instantiate(&body, vars, el),
                    loc,
                },
                Stmt::Print { what: Printed::Value(value), msg, block, loc } => {
                    self.print_element(subst(value), &msg, block.as_deref(), vars, &el.index, loc)
                }
                Stmt::DeviceAssert { cond, msg, loc } => {
                    self.assert_element(subst(cond), &msg, vars, &el.index, loc)
                }
                other => other,
            });
        }
        out
    }

    /// In a loop laid out over a replicated fragment several threads run each iteration;
    /// only the first of them may write memory that other threads see.
    pub(super) fn first_replica_writes(&self, body: &[Stmt], l: &FragmentLayout) -> Vec<Stmt> {
        if l.replicated.is_empty() {
            return body.to_vec();
        }
        let mut first = None;
        for &(threads, stride) in &l.replicated {
            let bits = Expr::binary(
                BinOp::FloorMod,
                Expr::binary(BinOp::FloorDiv, self.tid(), i32c(stride)),
                i32c(threads),
            );
            first = and(first, Expr::binary(BinOp::Eq, simplify(bits), i32c(0)));
        }
        let first = first.expect("non-empty");
        body.iter()
            .map(|s| match s {
                Stmt::Store { buf, loc, .. } | Stmt::Atomic { buf, loc, .. }
                    if matches!(
                        self.m.buffer(*buf).scope,
                        Scope::Global | Scope::Shared | Scope::Cluster
                    ) =>
                {
                    Stmt::If { cond: first.clone(), then: vec![s.clone()], otherwise: vec![], loc: *loc }
                }
                // one message per element, not one per replica
                Stmt::Print { loc, .. } | Stmt::DeviceAssert { loc, .. } => {
                    Stmt::If { cond: first.clone(), then: vec![s.clone()], otherwise: vec![], loc: *loc }
                }
                other => other.clone(),
            })
            .collect()
    }

    pub(super) fn parallel(
        &mut self,
        vars: &[VarId],
        extents: &[i64],
        body: &[Stmt],
        l: &FragmentLayout,
        loc: Loc,
    ) -> Vec<Stmt> {
        let n = vars.len();
        let width = l.vector_width();
        if l.dims.len() != n || l.shape() != extents || extents[n - 1] % width != 0 {
            self.diags.push(Diagnostic::bug(format!("layout {l} does not fit loop extents {extents:?}")));
            return vec![];
        }
        let body = self.first_replica_writes(body, l);
        let vars = vars.to_vec();
        let at = self.m.sources.short(loc).unwrap_or_default();
        let mut reported = false;
        self.for_each_chunk(l, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let mut el = element_at(values, base, lane_var, width);
            el.steps = l.dims.iter().map(|ds| ds.iter().map(|g| g.step).collect()).collect();
            let scalar_body = lw.instantiate(&body, &vars, &el);
            let scalar_body = lw.guard_globals(scalar_body);
            let scalar = if width > 1 {
                vec![Stmt::For {
                    var: lane_var,
                    start: i32c(0),
                    extent: i32c(width),
                    kind: ForKind::Unroll,
                    body: scalar_body.clone(),
                    loc,
                }]
            } else {
                scalar_body.iter().cloned().map(|s| substitute_stmt(s, lane_var, &i32c(0))).collect()
            };
            if width == 1
                || !body.iter().all(|s| matches!(s, Stmt::Store { .. } | Stmt::Atomic { prev: None, .. }))
            {
                return scalar;
            }
            let raw = lw.instantiate(&body, &vars, &el);
            match lw.vectorize(&raw, lane_var, width) {
                Some((vector, cond, desc)) => {
                    if !reported {
                        lw.report.push(format!("{at}: {desc}"));
                        reported = true;
                    }
                    match cond {
                        Some(c) => vec![Stmt::If { cond: c, then: vector, otherwise: scalar, loc }],
                        None => vector,
                    }
                }
                None => scalar,
            }
        })
    }
}

/// The element of a chunk at vector lane `lane` (a loop variable over `width` lanes).
pub(super) fn element_at(values: &[Vec<Expr>], base: &[Expr], lane: VarId, width: i64) -> Element {
    let mut values = values.to_vec();
    let mut index = base.to_vec();
    if width > 1 {
        let n = values.len();
        let lane = Expr::var(lane, DType::I32);
        values[n - 1][0] = lane.clone();
        index[n - 1] = simplify(add(base[n - 1].clone(), lane));
    }
    Element { values, index, steps: Vec::new() }
}
