//! Vector accesses: contiguous, aligned global and shared accesses of a chunk become
//! loads and stores of up to 16 bytes, taken only when the whole chunk is in bounds; the
//! atomics of a tile `T.atomic_add` become vector atomics where the target has them
//! (`Target::atomic_vector_width`).
//!
//! Requires: one chunk's statements (element stores), instantiated with a lane variable.
//! Ensures: the vector form, the condition under which it runs, a line for the report.
//! Does not: handle the ragged edge (the scalar path does).

use super::guards::{and, cmp_extent, in_range};
use super::{add, i32c, Lowerer};
use tile_ir::simplify::{known_multiple, simplify, to_affine};
use tile_ir::*;

/// The vector form of a chunk: code, the condition under which it runs, a report line.
pub(super) type VectorChunk = (Vec<Stmt>, Option<Expr>, String);

impl Lowerer {
    /// Vector form of one chunk: contiguous global/shared accesses become vector loads and
    /// stores of up to 16 bytes. Returns the code, the condition under which the whole chunk
    /// is in bounds (None: always), and a line for the report.
    pub(super) fn vectorize(&mut self, body: &[Stmt], lane: VarId, width: i64) -> Option<VectorChunk> {
        struct Access {
            key: String,
            buf: BufferId,
            idx0: Vec<Expr>,
            w: i64,
            temp: BufferId,
            /// A store that is an atomic of this mode.
            atomic: Option<AtomicMode>,
        }
        let mut loads: Vec<Access> = Vec::new();
        let mut stores: Vec<Access> = Vec::new();
        let mut cond: Option<Expr> = None;
        let zero = i32c(0);
        // can `buf[idx]` (idx depending on the lane) be read as vectors of w lanes (w up to
        // `widest`)?
        let vector_width =
            |m: &Module, buf: BufferId, idx: &[Expr], widest: i64| -> Option<(Vec<Expr>, i64)> {
                let b = m.buffer(buf);
                if !matches!(b.scope, Scope::Global | Scope::Shared | Scope::Cluster) {
                    return None;
                }
                // a cluster view's vectors are its tile's, in the peer's shared memory
                let tile_bytes = match (b.scope, b.alias_of) {
                    (Scope::Cluster, Some(root)) => Some(m.buffer(root).bytes()),
                    (Scope::Shared, _) => Some(b.bytes()),
                    _ => None,
                };
                let n = idx.len();
                if idx[..n - 1].iter().any(|i| i.uses_var(lane)) {
                    return None;
                }
                let last = to_affine(&idx[n - 1]);
                let lane_key = format!("{:?}", Expr::var(lane, DType::I32));
                let coeff = last.terms.get(&lane_key).map(|(c, _)| *c).unwrap_or(0);
                let rest_uses_lane = last.terms.iter().any(|(k, (_, e))| *k != lane_key && e.uses_var(lane));
                if coeff != 1 || rest_uses_lane {
                    return None;
                }
                let idx0: Vec<Expr> =
                    idx.iter().map(|i| simplify(i.clone().substitute(lane, &zero))).collect();
                let strides = m.stride_multiples(buf);
                // a vector is 2, 4, 8 or 16 bytes: the widest power of two that divides the chunk
                let mut w = 1;
                while w * 2 <= width.min(widest) && width % (w * 2) == 0 {
                    w *= 2;
                }
                while w > 1
                    && (w * b.dtype.bytes() as i64 > 16
                        || !known_multiple(&idx0[n - 1], w)
                        || strides[..n - 1].iter().any(|s| s % w != 0)
                        || (tile_bytes.is_some_and(|t| t % 16 != 0) && w * (b.dtype.bytes() as i64) > 4))
                {
                    w /= 2;
                }
                (w > 1).then_some((idx0, w))
            };
        // collect vectorizable loads
        let mut candidates: Vec<(String, BufferId, Vec<Expr>)> = Vec::new();
        for s in body {
            let (Stmt::Store { idx, value, .. } | Stmt::Atomic { idx, value, prev: None, .. }) = s else {
                return None;
            };
            for e in idx.iter().chain(std::iter::once(value)) {
                e.walk(&mut |x| {
                    if let Expr::Load { buf, idx, .. } = x {
                        candidates.push((format!("{:?}", (buf, idx)), *buf, idx.clone()));
                    }
                });
            }
        }
        for (key, buf, idx) in candidates {
            if loads.iter().any(|a| a.key == key) {
                continue;
            }
            if let Some((idx0, w)) = vector_width(&self.m, buf, &idx, width) {
                let dt = self.m.buffer(buf).dtype;
                let name = format!("{}_v", self.m.buffer(buf).name);
                let temp = self.local_buffer(&name, dt, width);
                loads.push(Access { key, buf, idx0, w, temp, atomic: None });
            }
        }
        for s in body {
            let (buf, idx, atomic, widest) = match s {
                Stmt::Store { buf, idx, .. } => (*buf, idx, None, width),
                Stmt::Atomic { mode, buf, idx, .. } => {
                    // vector atomics exist on global memory only
                    let b = self.m.buffer(*buf);
                    let widest = match b.scope {
                        Scope::Global => self.target.atomic_vector_width(*mode, b.dtype) as i64,
                        _ => 1,
                    };
                    (*buf, idx, Some(*mode), widest)
                }
                _ => continue,
            };
            if let Some((idx0, w)) = vector_width(&self.m, buf, idx, widest) {
                let dt = self.m.buffer(buf).dtype;
                let name = format!("{}_out", self.m.buffer(buf).name);
                let temp = self.local_buffer(&name, dt, width);
                stores.push(Access { key: format!("{:?}", (buf, idx)), buf, idx0, w, temp, atomic });
            }
        }
        if loads.is_empty() && stores.is_empty() {
            return None;
        }
        // the chunk takes the vector path only when every vector access is fully in bounds
        for a in loads.iter().chain(stores.iter()) {
            let b = self.m.buffer(a.buf);
            if b.scope != Scope::Global {
                continue;
            }
            let n = a.idx0.len();
            for d in 0..n - 1 {
                cond = and(cond, in_range(&self.m, &a.idx0[d], a.buf, d, &|e| self.non_negative(e)));
            }
            let last = &a.idx0[n - 1];
            let dt = last.dtype();
            if !self.non_negative(last) {
                cond = and(cond, Expr::binary(BinOp::Ge, last.clone(), Expr::int_of(0, dt)));
            }
            cond = and(
                cond,
                cmp_extent(
                    &self.m,
                    BinOp::Le,
                    simplify(add(last.clone(), Expr::int_of(width, dt))),
                    a.buf,
                    n - 1,
                ),
            );
        }
        let mut out = Vec::new();
        let vec_copies = |a: &Access, load: bool| -> Vec<Stmt> {
            let n = a.idx0.len();
            (0..width / a.w)
                .map(|k| {
                    let mut idx = a.idx0.clone();
                    idx[n - 1] = simplify(add(idx[n - 1].clone(), Expr::int_of(k * a.w, idx[n - 1].dtype())));
                    if load {
                        Stmt::inst(inst::VecCopy {
                            dst: a.temp,
                            dst_idx: vec![i32c(k * a.w)],
                            src: a.buf,
                            src_idx: idx,
                            width: a.w as u32,
                        })
                    } else if let Some(mode) = a.atomic {
                        Stmt::inst(inst::VecAtomic {
                            mode,
                            dst: a.buf,
                            dst_idx: idx,
                            src: a.temp,
                            src_idx: vec![i32c(k * a.w)],
                            width: a.w as u32,
                        })
                    } else {
                        Stmt::inst(inst::VecCopy {
                            dst: a.buf,
                            dst_idx: idx,
                            src: a.temp,
                            src_idx: vec![i32c(k * a.w)],
                            width: a.w as u32,
                        })
                    }
                })
                .collect()
        };
        for a in &loads {
            out.extend(vec_copies(a, true));
        }
        let lane_e = Expr::var(lane, DType::I32);
        let replace = |e: Expr| -> Expr {
            e.map(&mut |x| match x {
                Expr::Load { buf, idx, dtype, loc, oob } => {
                    let key = format!("{:?}", (&buf, &idx));
                    match loads.iter().find(|a| a.key == key) {
                        Some(a) => Expr::load(a.temp, vec![lane_e.clone()], dtype),
                        None => Expr::Load { buf, idx, dtype, loc, oob },
                    }
                }
                other => other,
            })
        };
        let mut lane_body = Vec::new();
        for s in body {
            let (buf, idx, value, loc) = match s.clone() {
                Stmt::Store { buf, idx, value, loc } | Stmt::Atomic { buf, idx, value, loc, .. } => {
                    (buf, idx, value, loc)
                }
                _ => unreachable!("checked above"),
            };
            let key = format!("{:?}", (&buf, &idx));
            let value = replace(value);
            match (stores.iter().find(|a| a.key == key), s) {
                (Some(a), _) => {
                    lane_body.push(Stmt::Store { buf: a.temp, idx: vec![lane_e.clone()], value, loc })
                }
                (None, Stmt::Atomic { mode, prev, .. }) => {
                    lane_body.push(Stmt::Atomic { mode: *mode, buf, idx, value, prev: *prev, loc })
                }
                (None, _) => lane_body.push(Stmt::Store { buf, idx, value, loc }),
            }
        }
        let lane_body = self.guard_globals(lane_body);
        out.push(Stmt::For {
            var: lane,
            start: i32c(0),
            extent: i32c(width),
            kind: ForKind::Unroll,
            body: lane_body,
            loc: Loc::UNKNOWN,
        });
        for a in &stores {
            out.extend(vec_copies(a, false));
        }
        let describe = |a: &Access| {
            format!(
                "{}{} x{} ({} bytes)",
                a.atomic.map(|m| format!("{} ", m.text())).unwrap_or_default(),
                self.m.buffer(a.buf).name,
                a.w,
                a.w * self.m.buffer(a.buf).dtype.bytes() as i64
            )
        };
        let desc = format!(
            "vector loads [{}], vector stores [{}]",
            loads.iter().map(describe).collect::<Vec<_>>().join(", "),
            stores.iter().map(describe).collect::<Vec<_>>().join(", ")
        );
        Some((out, cond.map(simplify), desc))
    }
}
