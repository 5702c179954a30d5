//! Pass `infer_scopes`: operand tiles of `T.gemm` declared as fragments live in shared memory.
//!
//! Requires: verified tile-level IR. Ensures: every `gemm` A/B operand that is not written by
//! element stores (in a `T.Parallel` loop) has scope `shared`, so the article's GEMM —
//! operand tiles from `T.alloc_fragment`, filled by `T.copy` and consumed by `T.gemm` —
//! compiles as written. Does not: keep operands in registers (fragments computed element by
//! element stay fragments; the register-operand lowering decides their layout).

use crate::Ctx;
use std::collections::BTreeSet;
use tile_ir::{walk_stmts, BufferId, Diagnostic, Module, Scope, Stmt};

pub fn infer_scopes(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let mut operands = BTreeSet::new();
    let mut stored = BTreeSet::<BufferId>::new();
    walk_stmts(&m.kernel.body, &mut |s| match s {
        Stmt::Gemm(op) => {
            operands.insert(op.a);
            operands.insert(op.b);
        }
        Stmt::Store { buf, .. } => {
            stored.insert(*buf);
        }
        // a fragment filled from another fragment (`T.copy(acc_s, acc_s_cast)`: the
        // attention's P) is computed in registers too: it stays there, as wgmma's register A
        Stmt::Copy(op) if m.buffer(op.src.buf).scope == Scope::Fragment => {
            stored.insert(op.dst.buf);
        }
        _ => {}
    });
    for id in operands {
        if m.buffer(id).scope == Scope::Fragment && !stored.contains(&id) {
            m.buffer_mut(id).scope = Scope::Shared;
            let b = m.buffer(id);
            let at = m.sources.short(b.loc).unwrap_or_default();
            ctx.report.push(format!("{at}: gemm operand '{}' placed in shared memory", b.name));
        }
    }
    Ok(m)
}
