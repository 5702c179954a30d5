//! Pass `version_edges`: a kernel with symbolic sizes runs its blocks that lie wholly inside
//! the tensors without bounds checks.
//!
//! Requires: thread-level IR (after `lower_tile_ops`), before `widen_indices` (guards are
//! still in the index's own type) and before the last `simplify`, which proves the guards.
//! Ensures: when some bounds guard compares a block-uniform part plus a bounded per-thread
//! part against a symbolic size (`by * 128 + t0 + o0 * 16 < M`, `t0 < 8`, `o0 < 8`), the
//! body becomes `if (every such guard holds for every thread) { body } else { body }` —
//! the condition, block-uniform, is the guards at their largest per-thread part
//! (`by * 128 + 127 < M`). The last `simplify` assumes it in the first branch, which then
//! runs guard-free (as a kernel of fixed shape whose tiles divide it does), and only the
//! blocks at the edge take the second. `let`s that bind block indices (`rasterize`) stay
//! first, outside the `if`.
//! Does not: version kernels without symbolic sizes (their CUDA is unchanged), or guards
//! whose per-thread part has no bound (a loop over a symbolic trip count: those stay).
//! The body is emitted twice: about twice the code, the cost of one kernel for every size.

use crate::ranges::Ranges;
use crate::Ctx;
use std::collections::BTreeMap;
use tile_ir::simplify::{simplify, to_affine};
use tile_ir::*;

/// At most this many distinct conditions make up the fast path's test.
const MAX_CONDITIONS: usize = 8;

pub fn version_edges(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    if m.sizes().is_empty() {
        return Ok(m);
    }
    let mut finder = Finder { m: &m, ranges: Ranges::of_kernel(&m), found: BTreeMap::new() };
    finder.stmts(&m.kernel.body);
    let conditions: Vec<Expr> = finder.found.into_values().collect();
    if conditions.is_empty() || conditions.len() > MAX_CONDITIONS {
        return Ok(m);
    }
    let cond = conditions.into_iter().reduce(|a, b| Expr::binary(BinOp::And, a, b)).expect("one");
    let mut body = std::mem::take(&mut m.kernel.body);
    let lets = body.iter().take_while(|s| matches!(s, Stmt::Let { .. } | Stmt::Comment(_))).count();
    let rest = body.split_off(lets);
    body.push(Stmt::Comment(
        "blocks inside every tensor run without bounds checks; blocks at an edge take the else branch".into(),
    ));
    body.push(Stmt::If { cond, then: rest.clone(), otherwise: rest, loc: Loc::UNKNOWN });
    m.kernel.body = body;
    Ok(m)
}

struct Finder<'a> {
    m: &'a Module,
    ranges: Ranges,
    /// The block-uniform conditions, by their text (deterministic order, no repeats).
    found: BTreeMap<String, Expr>,
}

impl Finder<'_> {
    /// Is `id` the same for every thread of a block and every iteration (a block index, a
    /// size, a scalar parameter)?
    fn uniform(&self, id: VarId) -> bool {
        matches!(
            self.m.var(id).kind,
            VarKind::BlockIdx(_) | VarKind::LaunchIdx(_) | VarKind::Size { .. } | VarKind::Param
        )
    }

    fn has_size(&self, e: &Expr) -> bool {
        let mut found = false;
        e.walk(&mut |x| {
            if let Expr::Var { id, .. } = x {
                found |= matches!(self.m.var(*id).kind, VarKind::Size { .. });
            }
        });
        found
    }

    fn all_uniform(&self, e: &Expr) -> bool {
        let mut ok = true;
        e.walk(&mut |x| match x {
            Expr::Var { id, .. } => ok &= self.uniform(*id),
            Expr::Load { .. } => ok = false,
            _ => {}
        });
        ok
    }

    /// `x < bound` (or `<=`): the block-uniform condition that it holds for every thread,
    /// when `x` is a uniform part plus a part whose range is known.
    fn consider(&mut self, op: BinOp, x: &Expr, bound: &Expr) {
        if !self.has_size(bound) || !self.all_uniform(bound) || !x.dtype().is_int() {
            return;
        }
        let affine = to_affine(x);
        let (mut uniform, mut rest) = (Vec::new(), Vec::new());
        for (c, atom) in affine.terms.values() {
            let term = Expr::binary(BinOp::Mul, atom.clone(), Expr::int_of(*c, x.dtype()));
            if self.all_uniform(atom) {
                uniform.push(term);
            } else {
                rest.push(term);
            }
        }
        if uniform.is_empty() {
            return;
        }
        let dt = x.dtype();
        let rest_hi = match rest.into_iter().reduce(|a, b| Expr::binary(BinOp::Add, a, b)) {
            None => 0,
            Some(r) => match self.ranges.range(&simplify(r)) {
                Some((_, hi)) => hi,
                None => return,
            },
        };
        let largest = uniform
            .into_iter()
            .fold(Expr::int_of(affine.constant + rest_hi, dt), |a, b| Expr::binary(BinOp::Add, a, b));
        let cond = simplify(Expr::binary(op, largest, bound.clone()));
        self.found.entry(format!("{cond:?}")).or_insert(cond);
    }

    fn stmts(&mut self, body: &[Stmt]) {
        for s in body {
            let mut comparisons = Vec::new();
            stmt_exprs(s, &mut |e| {
                e.walk(&mut |x| {
                    if let Expr::Binary { op, a, b, .. } = x {
                        match op {
                            BinOp::Lt | BinOp::Le => comparisons.push((*op, (**a).clone(), (**b).clone())),
                            BinOp::Gt => comparisons.push((BinOp::Lt, (**b).clone(), (**a).clone())),
                            BinOp::Ge => comparisons.push((BinOp::Le, (**b).clone(), (**a).clone())),
                            _ => {}
                        }
                    }
                })
            });
            for (op, x, bound) in comparisons {
                self.consider(op, &x, &bound);
            }
            match s {
                Stmt::For { var, start, extent, body, .. } => {
                    let saved = self.ranges.clone();
                    if let (Some(a), Some(n)) = (start.as_int(), extent.as_int()) {
                        if n > 0 {
                            self.ranges.set(*var, a, a + n - 1);
                        }
                    }
                    self.stmts(body);
                    self.ranges = saved;
                }
                Stmt::Let { var, value } => {
                    if let Some((lo, hi)) = self.ranges.range(value) {
                        self.ranges.set(*var, lo, hi);
                    }
                }
                other => {
                    for b in other.bodies() {
                        let saved = self.ranges.clone();
                        self.stmts(b);
                        self.ranges = saved;
                    }
                }
            }
        }
    }
}
