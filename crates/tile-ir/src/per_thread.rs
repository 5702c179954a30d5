//! Which tile-level statements run on every thread rather than once per block.
//!
//! Outside `parallel` loops a tile-level statement runs once per block (a store there is
//! made by one thread). A kernel that reads the thread index (`T.get_thread_binding`)
//! outside a warp-role condition writes SIMT code, as in CUDA: such a statement runs on
//! every thread of the block (of its warp-role region), each with its own values. This
//! module finds them: a value is *per thread* when it reads the thread index, a loop
//! variable of a per-thread loop, or a register buffer (`local`/`fragment`) that a
//! per-thread statement writes (a `T.alloc_var` set from the thread index, the old value of
//! a per-thread atomic); a statement is per thread when its own expressions (an `if`'s
//! condition, a loop's bounds, a store's index or value) are, and everything under a
//! per-thread statement is. Warp-role conditions (`Module::thread_range`) select threads
//! without making their branches per thread.
//!
//! Used by `verify` (tile ops and `parallel` loops may not depend on per-thread values),
//! `insert_syncs` (no barrier inside a per-thread statement: its threads may diverge),
//! `lower_tile_ops` (no thread-0 guard on a per-thread store) and the interpreter (a
//! per-thread statement runs once per thread).

use crate::inst::Instruction;
use crate::ir::*;
use crate::types::Scope;
use std::collections::BTreeSet;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerThread {
    /// The thread index variable, if the kernel reads it.
    pub tid: Option<VarId>,
    /// Loop variables of per-thread loops (and thread-level lets of per-thread values).
    pub vars: BTreeSet<VarId>,
    /// Register buffers per-thread statements write: each thread holds its own values.
    pub bufs: BTreeSet<BufferId>,
}

impl PerThread {
    /// The analysis of `m`'s kernel body.
    pub fn of(m: &Module) -> PerThread {
        let tid = m.vars.iter().position(|v| v.kind == VarKind::ThreadIdx).map(|i| VarId(i as u32));
        let mut pt = PerThread { tid, ..PerThread::default() };
        if tid.is_none() {
            return pt;
        }
        loop {
            let before = (pt.vars.len(), pt.bufs.len());
            pt.scan(m, &m.kernel.body, false);
            if (pt.vars.len(), pt.bufs.len()) == before {
                return pt;
            }
        }
    }

    /// Does the kernel have any per-thread statement?
    pub fn any(&self, m: &Module) -> bool {
        self.tid.is_some() && {
            let mut found = false;
            walk_stmts(&m.kernel.body, &mut |s| found |= self.head(m, s));
            found
        }
    }

    /// Does `e` hold a value of each thread's own?
    pub fn expr(&self, e: &Expr) -> bool {
        let mut found = false;
        e.walk(&mut |x| match x {
            Expr::Var { id, .. } => found |= Some(*id) == self.tid || self.vars.contains(id),
            Expr::Load { buf, .. } => found |= self.bufs.contains(buf),
            _ => {}
        });
        found
    }

    /// Is `s` (outside `parallel` loops) a per-thread statement by its own expressions: a
    /// store's or atomic's index or value, an `if`'s condition (not a warp-role one), a
    /// loop's bounds, a let's value, a print's or assert's operands? Everything under such
    /// a statement runs per thread too.
    pub fn head(&self, m: &Module, s: &Stmt) -> bool {
        self.head_of(m, s, false)
    }

    /// [`PerThread::head`] of the user's program as written (`verify`): a condition on the
    /// thread index around a tile op is per thread there too (and an error), where after
    /// the passes such a condition is the compiler's own.
    pub fn head_as_written(&self, m: &Module, s: &Stmt) -> bool {
        self.head_of(m, s, true)
    }

    fn head_of(&self, m: &Module, s: &Stmt, as_written: bool) -> bool {
        let plain = |body: &[Stmt]| as_written || !holds_tile_ops(body);
        if self.tid.is_none() {
            return false;
        }
        match s {
            Stmt::Store { idx, value, .. } | Stmt::Atomic { idx, value, .. } => {
                self.expr(value) || idx.iter().any(|i| self.expr(i))
            }
            Stmt::If { cond, then, otherwise, .. } => {
                m.thread_range(cond).is_none() && self.expr(cond) && plain(then) && plain(otherwise)
            }
            // a loop some of whose threads may leave it on their own is per thread too
            Stmt::For { start, extent, body, .. } => {
                (self.expr(start) || self.expr(extent) || self.breaks_apart(m, body, false)) && plain(body)
            }
            Stmt::Let { value, .. } => self.expr(value),
            Stmt::Print { what: Printed::Value(v), .. } => self.expr(v),
            Stmt::DeviceAssert { cond, .. } => self.expr(cond),
            // a kernel's own cp.async from addresses of the thread index
            Stmt::Inst(i @ crate::inst::Inst::AsyncCopy(_)) => i.exprs().into_iter().any(|e| self.expr(e)),
            // a T.call_extern with operands of the thread's own (it runs on every thread
            // anyway, as in CUDA; this marks what it writes as per thread)
            Stmt::Inst(i @ crate::inst::Inst::BindPointer(_)) => i.exprs().into_iter().any(|e| self.expr(e)),
            Stmt::Inst(i @ crate::inst::Inst::CallExtern(_)) => {
                i.exprs().into_iter().any(|e| self.expr(e))
                    || i.accesses()
                        .iter()
                        .any(|a| a.kind == crate::inst::AccessKind::Read && self.bufs.contains(&a.buf))
            }
            _ => false,
        }
    }

    /// Does `body` (a loop's) hold a `break` under a per-thread condition (its own, not a
    /// nested loop's)?
    fn breaks_apart(&self, m: &Module, body: &[Stmt], under: bool) -> bool {
        body.iter().any(|s| match s {
            Stmt::Inst(crate::inst::Inst::LoopBreak(_)) => under,
            Stmt::If { cond, then, otherwise, .. } => {
                let u = under || (m.thread_range(cond).is_none() && self.expr(cond));
                self.breaks_apart(m, then, u) || self.breaks_apart(m, otherwise, u)
            }
            _ => false,
        })
    }

    fn scan(&mut self, m: &Module, body: &[Stmt], under: bool) {
        for s in body {
            let here = under || self.head(m, s);
            match s {
                Stmt::Store { buf, .. }
                    if here && matches!(m.buffer(*buf).scope, Scope::Local | Scope::Fragment) =>
                {
                    self.bufs.insert(*buf);
                }
                Stmt::Atomic { prev: Some(p), .. } if here => {
                    self.bufs.insert(*p);
                }
                Stmt::Inst(i @ crate::inst::Inst::CallExtern(_)) if here => {
                    for a in i.accesses() {
                        if a.kind == crate::inst::AccessKind::Write
                            && matches!(m.buffer(a.buf).scope, Scope::Local | Scope::Fragment)
                        {
                            self.bufs.insert(a.buf);
                        }
                    }
                }
                Stmt::Let { var, .. } if here => {
                    self.vars.insert(*var);
                }
                Stmt::For { var, body, .. } => {
                    if here {
                        self.vars.insert(*var);
                    }
                    self.scan(m, body, here);
                }
                Stmt::If { then, otherwise, .. } => {
                    self.scan(m, then, here);
                    self.scan(m, otherwise, here);
                }
                Stmt::Async { body } => self.scan(m, body, here),
                _ => {}
            }
        }
    }
}

/// Does `body` hold a tile op (or what the compiler makes of one: its pipeline's issued
/// copies, its barriers)? A user's per-thread statement cannot (`verify`), so a condition
/// on the thread index around one is the compiler's own (a role split, the thread that
/// issues a TMA copy), not per-thread code.
fn holds_tile_ops(body: &[Stmt]) -> bool {
    let mut found = false;
    walk_stmts(body, &mut |s| {
        found |= matches!(
            s,
            Stmt::Copy(_)
                | Stmt::Fill { .. }
                | Stmt::Reduce(_)
                | Stmt::Gemm(_)
                | Stmt::Parallel { .. }
                | Stmt::Barrier(_)
                | Stmt::Async { .. }
        )
    });
    found
}
