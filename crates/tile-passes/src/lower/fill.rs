//! `T.fill` / `T.clear`: registers slot by slot, shared and global tiles by the threads in
//! the blocked layout.
//!
//! Requires: a fill of a whole fragment or local buffer, or of any shared/global region.
//! Ensures: every element of the region written once.
//! Does not: vectorize register fills (the C compiler does).

use super::{add, i32c, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::verify::resolve_region;
use tile_ir::*;

impl Lowerer {
    pub(super) fn fill(&mut self, dst: &Region, value: Expr, loc: Loc) -> Vec<Stmt> {
        let r = match resolve_region(&self.m, dst, None) {
            Ok(r) => r,
            Err(e) => {
                self.diags.push(e);
                return vec![];
            }
        };
        let b = self.m.buffer(r.buf).clone();
        let value = Expr::cast(value, b.dtype);
        match b.scope {
            Scope::Fragment | Scope::Local => {
                let whole = r.extents == b.extents()
                    && r.starts.iter().all(|e| simplify(e.clone()).as_int() == Some(0));
                if !whole {
                    self.diags.push(Diagnostic::error(
                        format!(
                            "T.fill of part of {} '{}' is not supported; fill it whole",
                            b.scope.name(),
                            b.name
                        ),
                        loc,
                    ));
                    return vec![];
                }
                let slots = match &b.layout {
                    Some(l) => l.slots(),
                    None => b.num_elements(),
                };
                let v = self.m.add_var("s", VarKind::Loop, DType::I32);
                let flat = if b.scope == Scope::Fragment || b.rank() == 1 {
                    vec![Expr::var(v, DType::I32)]
                } else {
                    // a multi-dimensional local buffer: unflatten
                    let strides = b.strides();
                    strides
                        .iter()
                        .zip(b.extents())
                        .map(|(s, e)| {
                            Expr::binary(
                                BinOp::FloorMod,
                                Expr::binary(BinOp::FloorDiv, Expr::var(v, DType::I32), i32c(*s)),
                                i32c(e),
                            )
                        })
                        .collect()
                };
                vec![Stmt::For {
                    var: v,
                    start: i32c(0),
                    extent: i32c(slots),
                    kind: ForKind::Unroll,
                    body: vec![Stmt::Store { buf: r.buf, idx: flat, value, loc }],
                    loc,
                }]
            }
            Scope::Shared | Scope::Global | Scope::Cluster => {
                let shape = r.shape();
                let vars: Vec<VarId> = (0..shape.len())
                    .map(|k| self.m.add_var(&format!("f{k}"), VarKind::Loop, DType::I32))
                    .collect();
                let mut k = 0;
                let idx: Vec<Expr> = (0..r.extents.len())
                    .map(|d| {
                        if r.kept[d] {
                            let v = Expr::var(vars[k], DType::I32);
                            k += 1;
                            let start = r.starts[d].clone();
                            simplify(add(start.clone(), Expr::cast(v, start.dtype())))
                        } else {
                            r.starts[d].clone()
                        }
                    })
                    .collect();
                let layout = FragmentLayout::blocked(&shape, self.m.kernel.threads, b.dtype.bytes());
                let store = Stmt::Store { buf: r.buf, idx, value, loc };
                self.parallel(&vars, &shape, &[store], &layout, loc)
            }
        }
    }
}
