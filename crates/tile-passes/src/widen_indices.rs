//! Pass `widen_indices`: compute index arithmetic in 64 bits wherever 32 bits could wrap.
//!
//! Requires: thread-level IR (after `lower_tile_ops`).
//! Ensures:
//! - every index into a global tensor of more than 2³¹ − 1 elements is computed in int64 in
//!   every sub-expression, the user's part (`bx * 1024 + i`) and lowering's offsets alike, and
//!   whatever its leaves are (block and thread indices, loop variables, values read from
//!   memory, scalar parameters);
//! - every int32 arithmetic node whose exact range — from the ranges of block, thread, loop
//!   and `let` variables (`Ranges`) — leaves int32 is computed in int64, and so is everything
//!   it flows into: the bounds guard `bx * 1024 + t * 8 + 8 <= 2147484648`, the source size of
//!   a `cp.async` at the edge, a `let` holding it (whose variable becomes int64);
//! - integer constants outside int32 are int64, and both sides of a comparison have one type.
//!
//! So index arithmetic on block, thread and loop indices never wraps, however the user wrote
//! it. Arithmetic on run-time values (loads, scalar parameters) keeps its type's wrapping
//! outside the indices of wide tensors. An expression in a value position (a stored value, a
//! `cp.async` size) is cast back to its original type at the top, so statements keep their
//! types. Does not: change kernels whose index arithmetic fits in 32 bits (their IR comes
//! back as it went in), or touch loop bounds.

use crate::ranges::{dtype_bounds, Ranges};
use crate::Ctx;
use std::collections::HashSet;
use tile_ir::inst::Index;
use tile_ir::{
    BinOp, ConstValue, DType, Diagnostic, Expr, Inst, Instruction, Module, Scope, Stmt, UnOp, VarId,
};

pub fn widen_indices(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let wide: HashSet<u32> = m
        .buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.scope == Scope::Global && b.max_elements(&m.vars) > i32::MAX as i128)
        .map(|(i, _)| i as u32)
        .collect();
    let mut w = Widen { wide, retyped: HashSet::new(), ranges: Ranges::of_kernel(&m) };
    m.kernel.body = w.stmts(std::mem::take(&mut m.kernel.body));
    for v in &w.retyped {
        m.vars[v.0 as usize].dtype = DType::I64;
    }
    Ok(m)
}

struct Widen {
    /// Global tensors whose flat index can exceed int32.
    wide: HashSet<u32>,
    /// `let` variables whose value became int64.
    retyped: HashSet<VarId>,
    ranges: Ranges,
}

/// The interval of `a op b`'s exact value from its operands' (None: unknown). Looser than
/// the affine ranges of `simplify` where terms cancel; it only needs to see what could pass
/// int32.
fn interval(op: BinOp, a: Option<(i128, i128)>, b: Option<(i128, i128)>) -> Option<(i128, i128)> {
    let ((al, ah), (bl, bh)) = (a?, b?);
    let corners = |f: fn(i128, i128) -> i128| {
        let c = [f(al, bl), f(al, bh), f(ah, bl), f(ah, bh)];
        (*c.iter().min().expect("four"), *c.iter().max().expect("four"))
    };
    Some(match op {
        BinOp::Add => (al + bl, ah + bh),
        BinOp::Sub => (al - bh, ah - bl),
        BinOp::Mul => corners(|x, y| x.saturating_mul(y)),
        BinOp::Min => (al.min(bl), ah.min(bh)),
        BinOp::Max => (al.max(bl), ah.max(bh)),
        BinOp::FloorDiv if bl == bh && bl > 0 => (al.div_euclid(bl), ah.div_euclid(bl)),
        BinOp::FloorMod if bl == bh && bl > 0 => (0, bl - 1),
        BinOp::Shl if bl == bh && (0..64).contains(&bl) => corners(|x, y| x.saturating_mul(1i128 << y)),
        BinOp::Shr if bl == bh && (0..64).contains(&bl) => (al >> bl, ah >> bl),
        BinOp::BitAnd if al >= 0 && bl >= 0 => (0, ah.min(bh)),
        _ => return None,
    })
}

/// Integer arithmetic that `widen_indices` may move to int64.
fn is_arith(op: BinOp) -> bool {
    !op.is_comparison() && !matches!(op, BinOp::And | BinOp::Or | BinOp::Div)
}

/// Integer types narrower than int64 that index arithmetic is written in.
fn narrow_int(dt: DType) -> bool {
    dt.is_int() && dt.bytes() < 8
}

fn to64(e: Expr) -> Expr {
    match e {
        Expr::Const { value: ConstValue::Int(v), dtype } if narrow_int(dtype) => Expr::int_of(v, DType::I64),
        other if narrow_int(other.dtype()) => Expr::cast(other, DType::I64),
        other => other,
    }
}

/// Rebuild `e` (already widened below) in int64.
fn promote(e: Expr) -> Expr {
    match e {
        Expr::Binary { op, a, b, dtype } if dtype.is_int() && is_arith(op) => {
            Expr::Binary { op, a: Box::new(to64(*a)), b: Box::new(to64(*b)), dtype: DType::I64 }
        }
        Expr::Unary { op: op @ (UnOp::Neg | UnOp::Abs), a, dtype } if narrow_int(dtype) => {
            Expr::Unary { op, a: Box::new(to64(*a)), dtype: DType::I64 }
        }
        Expr::Select { cond, a, b, dtype } if narrow_int(dtype) => {
            Expr::Select { cond, a: Box::new(to64(*a)), b: Box::new(to64(*b)), dtype: DType::I64 }
        }
        other => to64(other),
    }
}

/// Give both sides of a comparison (or the arms of a select) one type, the wider.
fn unify(e: Expr) -> Expr {
    match e {
        Expr::Binary { op, a, b, dtype }
            if op.is_comparison() && a.dtype() != b.dtype() && a.dtype().is_int() && b.dtype().is_int() =>
        {
            Expr::Binary { op, a: Box::new(to64(*a)), b: Box::new(to64(*b)), dtype }
        }
        Expr::Select { cond, a, b, .. }
            if a.dtype() != b.dtype() && a.dtype().is_int() && b.dtype().is_int() =>
        {
            Expr::Select { cond, a: Box::new(to64(*a)), b: Box::new(to64(*b)), dtype: DType::I64 }
        }
        other => other,
    }
}

impl Widen {
    /// Widen what could wrap (see the module doc); the result may be int64 where `e` was not.
    fn widen(&self, e: Expr) -> Expr {
        self.rec(e).0
    }

    /// `e` widened, with the interval its exact value lies in where the leaves' ranges say
    /// (computed bottom-up with the expression, so the pass is linear in its size).
    fn rec(&self, e: Expr) -> (Expr, Option<(i128, i128)>) {
        let fits = |r: Option<(i128, i128)>| matches!(r, Some((lo, hi)) if lo >= i32::MIN as i128 && hi <= i32::MAX as i128);
        match e {
            Expr::Const { value: ConstValue::Int(v), dtype } => {
                let out = if narrow_int(dtype) && (v < i32::MIN as i64 || v > i32::MAX as i64) {
                    Expr::int_of(v, DType::I64)
                } else {
                    Expr::Const { value: ConstValue::Int(v), dtype }
                };
                (out, Some((v as i128, v as i128)))
            }
            Expr::Var { id, dtype } => {
                let dtype = if self.retyped.contains(&id) { DType::I64 } else { dtype };
                let range = self.ranges.vars.get(&id).map(|&(lo, hi)| (lo as i128, hi as i128));
                (Expr::Var { id, dtype }, range)
            }
            Expr::Load { buf, idx, dtype, loc, oob } => {
                let idx: Vec<Expr> = idx.into_iter().map(|i| self.rec(i).0).collect();
                let idx =
                    if self.wide.contains(&buf.0) { idx.into_iter().map(force64).collect() } else { idx };
                let oob = oob.map(|o| Box::new(self.rec(*o).0));
                (Expr::Load { buf, idx, dtype, loc, oob }, None)
            }
            Expr::Binary { op, a, b, dtype } => {
                let ((a, ra), (b, rb)) = (self.rec(*a), self.rec(*b));
                let range = interval(op, ra, rb);
                let node = Expr::Binary { op, a: Box::new(a), b: Box::new(b), dtype };
                let node = if dtype == DType::I32 && is_arith(op) {
                    let Expr::Binary { a, b, .. } = &node else { unreachable!() };
                    let mixed = a.dtype() == DType::I64 || b.dtype() == DType::I64;
                    if mixed || (range.is_some() && !fits(range)) {
                        promote(node)
                    } else {
                        node
                    }
                } else {
                    unify(node)
                };
                (node, range)
            }
            Expr::Unary { op, a, dtype } => {
                let (a, ra) = self.rec(*a);
                let range = match (op, ra) {
                    (UnOp::Neg, Some((lo, hi))) => Some((-hi, -lo)),
                    (UnOp::Abs, Some((lo, hi))) => Some((
                        if lo <= 0 && hi >= 0 { 0 } else { lo.abs().min(hi.abs()) },
                        lo.abs().max(hi.abs()),
                    )),
                    _ => None,
                };
                let widened = a.dtype() == DType::I64 || (range.is_some() && !fits(range));
                let node = Expr::Unary { op, a: Box::new(a), dtype };
                let node = if dtype == DType::I32 && matches!(op, UnOp::Neg | UnOp::Abs) && widened {
                    promote(node)
                } else {
                    node
                };
                (node, range)
            }
            Expr::Cast { a, dtype } => {
                let (a, ra) = self.rec(*a);
                let keeps = dtype.is_int() && a.dtype().is_int();
                let range = ra.filter(|&(lo, hi)| {
                    keeps && dtype_bounds(dtype).is_some_and(|(tl, th)| lo >= tl as i128 && hi <= th as i128)
                });
                (Expr::Cast { a: Box::new(a), dtype }, range)
            }
            Expr::Select { cond, a, b, dtype } => {
                let cond = self.rec(*cond).0;
                let ((a, ra), (b, rb)) = (self.rec(*a), self.rec(*b));
                let range = ra.zip(rb).map(|(x, y)| (x.0.min(y.0), x.1.max(y.1)));
                (unify(Expr::Select { cond: Box::new(cond), a: Box::new(a), b: Box::new(b), dtype }), range)
            }
            Expr::ShflXor { a, mask, dtype } => {
                (Expr::ShflXor { a: Box::new(self.rec(*a).0), mask, dtype }, None)
            }
            other => (other, None),
        }
    }

    /// An expression in a value position: widened inside, its own type at the top.
    fn value(&self, e: Expr) -> Expr {
        let dtype = e.dtype();
        let w = self.widen(e);
        if w.dtype() == dtype {
            w
        } else {
            Expr::cast(w, dtype)
        }
    }

    /// The indices of an access to `buf`.
    fn index(&self, buf: u32, idx: Vec<Expr>) -> Vec<Expr> {
        if self.wide.contains(&buf) {
            idx.into_iter().map(|e| force64(self.widen(e))).collect()
        } else {
            idx.into_iter().map(|e| self.widen(e)).collect()
        }
    }

    /// An instruction's expressions by their role: indices of its accesses (int64 all the way
    /// down for wide tensors), everything else a value.
    fn inst(&self, i: Inst) -> Inst {
        #[derive(Clone, Copy)]
        enum Role {
            WideIndex,
            Index,
            Value,
        }
        let roles: Vec<Role> = {
            let accesses = i.accesses();
            i.exprs()
                .into_iter()
                .map(|e| {
                    let access = accesses.iter().find(|a| match a.index {
                        Index::Element(idx) => idx.iter().any(|x| std::ptr::eq(x, e)),
                        Index::Registers(_) => false,
                    });
                    match access {
                        Some(a) if self.wide.contains(&a.buf.0) => Role::WideIndex,
                        Some(_) => Role::Index,
                        None => Role::Value,
                    }
                })
                .collect()
        };
        let mut k = 0;
        i.map_exprs(&mut |e| {
            let role = roles[k];
            k += 1;
            match role {
                Role::WideIndex => force64(self.widen(e)),
                Role::Index => self.widen(e),
                Role::Value => self.value(e),
            }
        })
    }

    fn stmts(&mut self, v: Vec<Stmt>) -> Vec<Stmt> {
        v.into_iter().map(|s| self.stmt(s)).collect()
    }

    /// Statements in a nested scope: the ranges it learns stay inside.
    fn scoped(&mut self, ranges: Ranges, v: Vec<Stmt>) -> Vec<Stmt> {
        let outer = std::mem::replace(&mut self.ranges, ranges);
        let out = self.stmts(v);
        self.ranges = outer;
        out
    }

    fn stmt(&mut self, s: Stmt) -> Stmt {
        match s {
            Stmt::Store { buf, idx, value, loc } => {
                Stmt::Store { idx: self.index(buf.0, idx), value: self.value(value), buf, loc }
            }
            Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
                Stmt::Atomic { mode, idx: self.index(buf.0, idx), value: self.value(value), buf, prev, loc }
            }
            Stmt::Inst(i) => Stmt::Inst(self.inst(i)),
            Stmt::Let { var, value } => {
                let value = self.widen(value);
                if value.dtype() == DType::I64 && !self.retyped.contains(&var) {
                    // the variable is declared from its value's type (codegen) and read as int64
                    // from here on
                    self.retyped.insert(var);
                }
                if let Some((lo, hi)) = self.ranges.range(&value) {
                    self.ranges.set(var, lo, hi);
                }
                Stmt::Let { var, value }
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let cond = self.widen(cond);
                let mut inner = self.ranges.clone();
                inner.assume(&cond);
                let then = self.scoped(inner, then);
                let otherwise = self.scoped(self.ranges.clone(), otherwise);
                Stmt::If { cond, then, otherwise, loc }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let mut inner = self.ranges.clone();
                if let (Some(s), Some(n)) = (start.as_int(), extent.as_int()) {
                    if n > 0 {
                        inner.set(var, s, s + n - 1);
                    }
                }
                let body = self.scoped(inner, body);
                Stmt::For { var, start, extent, kind, body, loc }
            }
            Stmt::Parallel { vars, extents, body, loc, layout } => {
                let body = self.scoped(self.ranges.clone(), body);
                Stmt::Parallel { vars, extents, body, loc, layout }
            }
            Stmt::Async { body } => {
                let body = self.scoped(self.ranges.clone(), body);
                Stmt::Async { body }
            }
            Stmt::DeviceAssert { cond, msg, loc } => Stmt::DeviceAssert { cond: self.widen(cond), msg, loc },
            // tile-level statements do not remain after lowering; the rest hold no expression
            other => other,
        }
    }
}

/// `e` with every integer sub-expression in int64 (an index into a wide tensor).
fn force64(e: Expr) -> Expr {
    e.map(&mut |x| match x {
        Expr::Binary { op, .. } if op.is_comparison() => unify(x),
        Expr::Binary { op: BinOp::And | BinOp::Or, .. } => x,
        Expr::Cast { .. }
        | Expr::Var { .. }
        | Expr::Load { .. }
        | Expr::Const { .. }
        | Expr::ShflXor { .. } => to64(x),
        other => promote(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_ir::{Buffer, Kernel, Level, Loc, Var, VarKind};

    fn module(n: i64) -> (Module, VarId, VarId) {
        let buffer = Buffer {
            name: "A".into(),
            scope: Scope::Global,
            shape: vec![tile_ir::Dim::Fixed(n)],
            dtype: DType::F16,
            loc: Loc::UNKNOWN,
            layout: None,
            shared_offset: None,
            alias_of: None,
            panel: None,
            swizzle: None,
        };
        let vars = vec![
            Var { name: "bx".into(), kind: VarKind::BlockIdx(0), dtype: DType::I32 },
            Var { name: "tid".into(), kind: VarKind::ThreadIdx, dtype: DType::I32 },
        ];
        let m = Module {
            name: "k".into(),
            sources: Default::default(),
            params: vec![],
            scratch: vec![],
            buffers: vec![buffer],
            vars,
            kernel: Kernel {
                grid: vec![Expr::int((n + 1023) / 1024)],
                threads: 128,
                body: vec![],
                loc: Loc::UNKNOWN,
                raster: None,
                roles: None,
                tensor_maps: vec![],
                reg_budget: None,
                extern_sources: vec![],
                user_threads: None,
                cluster: None,
            },
            level: Level::Thread,
            schedules: vec![],
        };
        (m, VarId(0), VarId(1))
    }

    fn i32v(v: VarId) -> Expr {
        Expr::var(v, DType::I32)
    }

    /// `bx * 1024 + tid * 8`
    fn index(bx: VarId, tid: VarId) -> Expr {
        Expr::binary(
            BinOp::Add,
            Expr::binary(BinOp::Mul, i32v(bx), Expr::int(1024)),
            Expr::binary(BinOp::Mul, i32v(tid), Expr::int(8)),
        )
    }

    fn run(m: Module) -> Module {
        let mut ctx = Ctx::new(crate::Target::default_gpu(), Default::default());
        widen_indices(m, &mut ctx).unwrap()
    }

    #[test]
    fn a_narrow_kernel_is_unchanged() {
        let (mut m, bx, tid) = module(1 << 20);
        let guard = Expr::binary(BinOp::Lt, index(bx, tid), Expr::int(1 << 20));
        m.kernel.body = vec![Stmt::If {
            cond: guard,
            then: vec![Stmt::Store {
                buf: tile_ir::BufferId(0),
                idx: vec![index(bx, tid)],
                value: Expr::Const { value: ConstValue::Float(0.0), dtype: DType::F16 },
                loc: Loc::UNKNOWN,
            }],
            otherwise: vec![],
            loc: Loc::UNKNOWN,
        }];
        let before = m.clone();
        assert_eq!(run(m), before);
    }

    #[test]
    fn a_wide_index_and_its_guard_are_int64_all_the_way_down() {
        let n = (1i64 << 31) + 1000;
        let (mut m, bx, tid) = module(n);
        let guard = Expr::binary(BinOp::Lt, index(bx, tid), Expr::int(n));
        m.kernel.body = vec![
            Stmt::Let { var: tid, value: i32v(tid) },
            Stmt::If {
                cond: guard,
                then: vec![Stmt::Store {
                    buf: tile_ir::BufferId(0),
                    idx: vec![index(bx, tid)],
                    value: Expr::Const { value: ConstValue::Float(0.0), dtype: DType::F16 },
                    loc: Loc::UNKNOWN,
                }],
                otherwise: vec![],
                loc: Loc::UNKNOWN,
            },
        ];
        let out = run(m);
        let Stmt::If { cond, then, .. } = &out.kernel.body[1] else { panic!() };
        let Stmt::Store { idx, .. } = &then[0] else { panic!() };
        // the index: every node int64
        idx[0].walk(&mut |x| {
            if let Expr::Binary { a, b, dtype, .. } = x {
                assert_eq!((a.dtype(), b.dtype(), *dtype), (DType::I64, DType::I64, DType::I64), "{x:?}");
            }
        });
        // the guard: compared in int64, and bx * 1024 (which passes 2^31) computed in int64;
        // tid * 8 (below 1024) may stay int32 under its cast
        let Expr::Binary { a: sum, b: bound, .. } = cond else { panic!() };
        assert_eq!((sum.dtype(), bound.dtype()), (DType::I64, DType::I64));
        let Expr::Binary { a: product, .. } = &**sum else { panic!() };
        assert_eq!(product.dtype(), DType::I64, "{product:?}");
    }

    #[test]
    fn exact_ranges_past_int32_widen_what_they_flow_into() {
        // bx * 2^21 over a grid of 2048 blocks reaches 2^32: the sum and the comparison are int64
        let (mut m, bx, _) = module(1 << 20);
        m.kernel.grid = vec![Expr::int(2048)];
        let big = Expr::binary(BinOp::Mul, i32v(bx), Expr::int(1 << 21));
        let cond = Expr::binary(BinOp::Lt, Expr::binary(BinOp::Add, big, Expr::int(5)), Expr::int(1 << 20));
        m.kernel.body = vec![Stmt::DeviceAssert { cond, msg: String::new(), loc: Loc::UNKNOWN }];
        let out = run(m);
        let Stmt::DeviceAssert { cond, .. } = &out.kernel.body[0] else { panic!() };
        let Expr::Binary { a, b, .. } = cond else { panic!() };
        assert_eq!((a.dtype(), b.dtype()), (DType::I64, DType::I64));
    }
}
