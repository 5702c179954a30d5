//! Statements that run on every thread (`tile_ir::per_thread`: they read the thread index):
//! lowered as written, each thread with its own values — no thread-0 guard on their stores
//! and atomics (each thread makes its own), bounds checks on their global accesses, prints
//! and asserts per thread.

use super::Lowerer;
use tile_ir::*;

impl Lowerer {
    pub(super) fn lower_per_thread(&mut self, body: Vec<Stmt>) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in body {
            let s = self.scalar_fragment_slots(s);
            match s {
                Stmt::Store { .. } | Stmt::Atomic { .. } => out.extend(self.guard_globals(vec![s])),
                Stmt::If { cond, then, otherwise, loc } => {
                    let then = self.lower_per_thread(then);
                    let otherwise = self.lower_per_thread(otherwise);
                    out.push(Stmt::If { cond: self.guard_loads(cond), then, otherwise, loc });
                }
                Stmt::For { var, start, extent, kind, body, loc } => {
                    let kind = match kind {
                        ForKind::Pipelined { .. } => ForKind::Serial,
                        k => k,
                    };
                    let body = self.lower_per_thread(body);
                    let (start, extent) = (self.guard_loads(start), self.guard_loads(extent));
                    out.push(Stmt::For { var, start, extent, kind, body, loc });
                }
                Stmt::Print { what: Printed::Value(v), msg, block, loc } => {
                    let tid = self.m.thread_idx();
                    let p = self.print_element(v, &msg, block.as_deref(), &[tid], &[self.tid()], loc);
                    out.extend(self.guard_globals(vec![p]));
                }
                Stmt::DeviceAssert { cond, msg, loc } => {
                    let tid = self.m.thread_idx();
                    let a = self.assert_element(cond, &msg, &[tid], &[self.tid()], loc);
                    out.extend(self.guard_globals(vec![a]));
                }
                // a kernel's own cp.async: the loads in its addresses are bounds-checked
                Stmt::Inst(i) => out.push(Stmt::Inst(i.map_exprs(&mut |x| self.guard_loads(x)))),
                other => out.push(other),
            }
        }
        out
    }
}
