//! Bounds handling of global accesses: every load past a tensor's edge reads its pad value
//! (zero by default), every store past it is dropped.
//!
//! Requires: thread-level statements whose indices are final (after instantiation).
//! Ensures: each global `Load` is a `select(in bounds, load, pad)`, each global store sits
//! in an `if (in bounds)`; conditions that are true by construction are left out.
//! Does not: prove anything from ranges (the final `simplify` folds what ranges decide).

use super::{i32c, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::*;

pub(super) fn and(a: Option<Expr>, b: Expr) -> Option<Expr> {
    // flatten b and skip conjuncts that are already there (guards repeat across accesses)
    if let Expr::Binary { op: BinOp::And, a: x, b: y, .. } = b {
        return and(and(a, *x), *y);
    }
    if b.as_int() == Some(1) {
        return a;
    }
    let Some(a) = a else { return Some(b) };
    let key = format!("{b:?}");
    let mut present = false;
    let mut stack = vec![&a];
    while let Some(e) = stack.pop() {
        if format!("{e:?}") == key {
            present = true;
            break;
        }
        if let Expr::Binary { op: BinOp::And, a: x, b: y, .. } = e {
            stack.push(x);
            stack.push(y);
        }
    }
    Some(if present { a } else { Expr::binary(BinOp::And, a, b) })
}

/// `e <op> extent of dimension d of buf`, compared in the wider of the two integer types (a
/// symbolic size never narrows).
pub(super) fn cmp_extent(m: &Module, op: BinOp, e: Expr, buf: BufferId, d: usize) -> Expr {
    let dt = e.dtype();
    let wide = match m.buffer(buf).shape[d] {
        Dim::Size(v) if m.var(v).dtype == DType::I64 => DType::I64,
        Dim::Fixed(n) if n > i32::MAX as i64 => DType::I64,
        _ => dt,
    };
    Expr::binary(op, Expr::cast(e, wide), m.extent_expr(buf, d, wide))
}

/// `0 <= i < extent` for an index of any integer type into dimension `d` of `buf` (fixed or
/// a symbolic size); the lower bound is left out when `i` cannot be negative.
pub(super) fn in_range(
    m: &Module,
    i: &Expr,
    buf: BufferId,
    d: usize,
    non_negative: &dyn Fn(&Expr) -> bool,
) -> Expr {
    let dt = i.dtype();
    let c = simplify(i.clone()).as_int();
    let hi = match m.buffer(buf).shape[d] {
        Dim::Fixed(n) => {
            if let Some(c) = c {
                return Expr::bool(c >= 0 && c < n);
            }
            Expr::binary(BinOp::Lt, i.clone(), Expr::int_of(n, dt))
        }
        Dim::Size(_) => {
            if c.is_some_and(|c| c < 0) {
                return Expr::bool(false);
            }
            cmp_extent(m, BinOp::Lt, i.clone(), buf, d)
        }
    };
    if c.is_some() {
        return hi;
    }
    if non_negative(i) {
        return hi;
    }
    let lo = Expr::binary(BinOp::Ge, i.clone(), Expr::int_of(0, dt));
    Expr::binary(BinOp::And, lo, hi)
}

impl Lowerer {
    /// Is `e` non-negative for every value its variables can take?
    pub(super) fn non_negative(&self, e: &Expr) -> bool {
        tile_ir::simplify::non_negative(e, &|id| {
            id.0 >= self.user_vars
                || self.non_negative_vars.contains(&id)
                || matches!(
                    self.m.var(id).kind,
                    VarKind::BlockIdx(_)
                        | VarKind::LaunchIdx(_)
                        | VarKind::LaunchDim(_)
                        | VarKind::ThreadIdx
                        | VarKind::Size { .. }
                )
        })
    }

    /// Bounds-check every global access of thread-level statements: loads past the edge
    /// read their `oob` value (zero by default), stores past it are dropped.
    pub(super) fn guard_globals(&self, body: Vec<Stmt>) -> Vec<Stmt> {
        let guard_expr = |e: Expr| self.guard_loads(e);
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::Store { buf, idx, value, loc } => {
                    let value = guard_expr(value);
                    let idx: Vec<Expr> = idx.into_iter().map(guard_expr).collect();
                    out.push(self.guard_store(Stmt::Store { buf, idx, value, loc }));
                }
                Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
                    let value = guard_expr(value);
                    let idx: Vec<Expr> = idx.into_iter().map(guard_expr).collect();
                    out.push(self.guard_store(Stmt::Atomic { mode, buf, idx, value, prev, loc }));
                }
                Stmt::If { cond, then, otherwise, loc } => out.push(Stmt::If {
                    cond: guard_expr(cond),
                    then: self.guard_globals(then),
                    otherwise: self.guard_globals(otherwise),
                    loc,
                }),
                Stmt::For { var, start, extent, kind, body, loc } => out.push(Stmt::For {
                    var,
                    start: guard_expr(start),
                    extent: guard_expr(extent),
                    kind,
                    body: self.guard_globals(body),
                    loc,
                }),
                Stmt::Let { var, value } => out.push(Stmt::Let { var, value: guard_expr(value) }),
                Stmt::Inst(Inst::Printf(p)) => {
                    let args = p.args.into_iter().map(guard_expr).collect();
                    out.push(Stmt::inst(inst::Printf { format: p.format, args }))
                }
                other => out.push(other),
            }
        }
        out
    }

    /// `e` with every global load bounds-checked: past the edge it reads its `oob` value
    /// (zero by default).
    pub(super) fn guard_loads(&self, e: Expr) -> Expr {
        let m = &self.m;
        let non_negative = |e: &Expr| self.non_negative(e);
        e.map(&mut |x| match x {
            Expr::Load { buf, idx, dtype, loc, oob } if m.buffer(buf).scope == Scope::Global => {
                let mut cond = None;
                for (d, i) in idx.iter().enumerate() {
                    cond = and(cond, in_range(m, i, buf, d, &non_negative));
                }
                let fallback = match oob {
                    Some(o) => Expr::cast(*o, dtype),
                    None => {
                        if dtype.is_float() {
                            Expr::Const { value: ConstValue::Float(0.0), dtype }
                        } else {
                            Expr::int_of(0, dtype)
                        }
                    }
                };
                let load = Expr::Load { buf, idx, dtype, loc, oob: None };
                match cond.map(simplify) {
                    Some(c) if c.as_int() == Some(1) => load,
                    Some(c) => Expr::select(c, load, fallback),
                    None => load,
                }
            }
            other => other,
        })
    }

    pub(super) fn guard_store(&self, s: Stmt) -> Stmt {
        let (Stmt::Store { buf, idx, loc, .. } | Stmt::Atomic { buf, idx, loc, .. }) = &s else {
            return s;
        };
        let b = self.m.buffer(*buf);
        if b.scope != Scope::Global {
            return s;
        }
        let mut cond = None;
        for (d, i) in idx.iter().enumerate() {
            cond = and(cond, in_range(&self.m, i, *buf, d, &|e| self.non_negative(e)));
        }
        // an atomic past the edge is dropped; its old value reads as 0 (as in the interpreter)
        let otherwise = match &s {
            Stmt::Atomic { prev: Some(p), loc, .. } => {
                let dt = self.m.buffer(*p).dtype;
                vec![Stmt::Store { buf: *p, idx: vec![i32c(0)], value: Expr::cast(i32c(0), dt), loc: *loc }]
            }
            _ => vec![],
        };
        match cond.map(simplify) {
            Some(c) if c.as_int() == Some(1) => s,
            Some(c) => {
                let loc = *loc;
                Stmt::If { cond: c, then: vec![s], otherwise, loc }
            }
            None => s,
        }
    }
}
