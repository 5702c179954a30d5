//! `T.reduce_*`: each thread folds its registers, then warp shuffles (`shfl.xor`) combine
//! across the lanes that hold a row, then shared memory across warps.
//!
//! Requires: source and destination fragments whose layouts agree (the destination's is
//! the source's reduced layout), or a destination every thread holds whole (scalar code
//! reads it): then the threads that reduced each element store it to shared memory and
//! every thread loads it back.
//! Ensures: every holder of a result element holds the reduction (replicas agree);
//! fp16/bf16 accumulate in float32.
//! Does not: use `redux.sync` (32-bit integer reductions could, on sm_80+).

use super::threads::element_at;
use super::{i32c, substitute_stmt, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::*;

pub(super) fn identity(kind: ReduceKind, dt: DType) -> Expr {
    let f = |v: f64| Expr::Const { value: ConstValue::Float(v), dtype: dt };
    let i = |v: i64| Expr::int_of(v, dt);
    match (kind, dt.is_float()) {
        (ReduceKind::Sum | ReduceKind::AbsMax, true) => f(0.0),
        (ReduceKind::Sum | ReduceKind::AbsMax, false) => i(0),
        (ReduceKind::Max, true) => f(f64::NEG_INFINITY),
        (ReduceKind::Min, true) => f(f64::INFINITY),
        // the type's least and greatest values (a uint64's greatest held as its bits, -1)
        (ReduceKind::Max, false) => i(match dt {
            DType::I8 => i8::MIN as i64,
            DType::I16 => i16::MIN as i64,
            DType::I32 => i32::MIN as i64,
            DType::I64 => i64::MIN,
            _ => 0,
        }),
        (ReduceKind::Min, false) => i(match dt {
            DType::I8 => i8::MAX as i64,
            DType::U8 => u8::MAX as i64,
            DType::I16 => i16::MAX as i64,
            DType::U16 => u16::MAX as i64,
            DType::I32 => i32::MAX as i64,
            DType::U32 => u32::MAX as i64,
            DType::U64 => u64::MAX as i64,
            _ => i64::MAX,
        }),
    }
}

pub(super) fn combine(kind: ReduceKind, acc: Expr, x: Expr) -> Expr {
    match kind {
        ReduceKind::Sum => Expr::binary(BinOp::Add, acc, x),
        ReduceKind::Max | ReduceKind::AbsMax => Expr::binary(BinOp::Max, acc, x),
        ReduceKind::Min => Expr::binary(BinOp::Min, acc, x),
    }
}

impl Lowerer {
    pub(super) fn reduce(&mut self, op: &ReduceOp) -> Vec<Stmt> {
        let ReduceOp { kind, src, dst, dim, clear, loc } = *op;
        let sb = self.m.buffer(src).clone();
        let db = self.m.buffer(dst).clone();
        let (Some(sl), Some(dl)) = (sb.layout.clone(), db.layout.clone()) else {
            self.diags.push(Diagnostic::bug("reduction operands without layouts"));
            return vec![];
        };
        let expect = sl.reduced(dim);
        // a result every thread holds whole (read by code outside T.Parallel) of a source
        // on fewer threads: the threads that reduced it hand it to all through shared memory
        let broadcast = expect != dl && dl.is_whole() && expect.shape() == dl.shape() && dl.slots() <= 1024;
        if expect != dl && !broadcast {
            self.diags.push(
                Diagnostic::error(
                    format!("layout conflict: '{}' cannot hold the reduction of '{}'", db.name, sb.name),
                    loc,
                )
                .with_label(db.loc, format!("'{}' is {dl}", db.name))
                .with_label(sb.loc, format!("reducing '{}' ({sl}) over dim {dim} needs {expect}", sb.name))
                .with_help("give the result its own fragment, first written by this reduction"),
            );
            return vec![];
        }
        let acc_dt = if sb.dtype.is_float() && sb.dtype.bytes() < 4 { DType::F32 } else { sb.dtype };
        let dst_slots = dl.slots();
        let partial = self.local_buffer(&format!("{}_red", db.name), acc_dt, dst_slots);
        let reduced_threads = sl.thread_digits(dim);
        let mut out = vec![Stmt::For {
            var: self.m.add_var("s", VarKind::Loop, DType::I32),
            start: i32c(0),
            extent: i32c(dst_slots),
            kind: ForKind::Unroll,
            body: vec![],
            loc,
        }];
        // initialise partials to the identity (threads holding nothing keep it)
        if let Stmt::For { var, body, .. } = &mut out[0] {
            *body = vec![Stmt::Store {
                buf: partial,
                idx: vec![Expr::var(*var, DType::I32)],
                value: identity(kind, acc_dt),
                loc,
            }];
        }
        // fold this thread's elements: a parallel walk over the source layout
        let keep: Vec<usize> = (0..sl.dims.len()).filter(|d| *d != dim).collect();
        let n = sl.dims.len();
        let width = sl.vector_width();
        let body = self.for_each_chunk(&sl, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let el = element_at(values, base, lane_var, width);
            let src_slot = lw.slot(src, &(0..n).collect::<Vec<_>>(), &el);
            let dst_slot =
                if db.extents() == [1] && keep.is_empty() { i32c(0) } else { lw.slot(dst, &keep, &el) };
            let mut x = Expr::cast(Expr::load(src, vec![src_slot], sb.dtype), acc_dt);
            if kind == ReduceKind::AbsMax {
                x = Expr::unary(UnOp::Abs, x);
            }
            let cur = Expr::load(partial, vec![dst_slot.clone()], acc_dt);
            let st = Stmt::Store { buf: partial, idx: vec![dst_slot], value: combine(kind, cur, x), loc };
            if width > 1 {
                vec![Stmt::For {
                    var: lane_var,
                    start: i32c(0),
                    extent: i32c(width),
                    kind: ForKind::Unroll,
                    body: vec![st],
                    loc,
                }]
            } else {
                vec![substitute_stmt(st, lane_var, &i32c(0))]
            }
        });
        out.extend(body);
        // across threads: shuffles within a warp, shared memory across warps
        let mut warp_masks = Vec::new();
        let mut block_masks = Vec::new();
        for &(size, stride) in &reduced_threads {
            let mut k = 1;
            while k < size {
                let mask = stride * k;
                if mask < 32 {
                    warp_masks.push(mask as u32);
                } else {
                    block_masks.push(mask);
                }
                k *= 2;
            }
        }
        let slot_var = self.m.add_var("s", VarKind::Loop, DType::I32);
        let slot = Expr::var(slot_var, DType::I32);
        if !warp_masks.is_empty() {
            let mut st = Vec::new();
            for mask in &warp_masks {
                let cur = Expr::load(partial, vec![slot.clone()], acc_dt);
                let other = Expr::ShflXor { a: Box::new(cur.clone()), mask: *mask, dtype: acc_dt };
                st.push(Stmt::Store {
                    buf: partial,
                    idx: vec![slot.clone()],
                    value: combine(kind, cur, other),
                    loc,
                });
            }
            out.push(Stmt::For {
                var: slot_var,
                start: i32c(0),
                extent: i32c(dst_slots),
                kind: ForKind::Unroll,
                body: st,
                loc,
            });
            self.report.push(format!(
                "{}: reduce_{} over {} threads: warp shuffles (xor {:?})",
                self.m.sources.short(loc).unwrap_or_default(),
                kind.name(),
                reduced_threads.iter().map(|(size, _)| size).product::<i64>(),
                warp_masks
            ));
        }
        if !block_masks.is_empty() {
            let active = sl.active_threads;
            // after the shuffles, threads that differ only in the shuffled bits hold the same
            // partial: one of them stores it, at its thread index with those bits removed
            let lane_bits: Vec<u32> = warp_masks.iter().map(|m| m.trailing_zeros()).collect();
            let distinct = warp_masks.iter().all(|m| m.is_power_of_two())
                && lane_bits.iter().collect::<std::collections::BTreeSet<_>>().len() == lane_bits.len();
            let lane_bits = if distinct { lane_bits } else { Vec::new() };
            let lanes_mask: i64 = lane_bits.iter().map(|b| 1i64 << b).sum();
            // runs of consecutive removed bits [lo, hi), highest first
            let mut runs: Vec<(i64, i64)> = Vec::new();
            let mut sorted = lane_bits.clone();
            sorted.sort_unstable();
            for b in sorted {
                match runs.last_mut() {
                    Some(run) if run.1 == b as i64 => run.1 += 1,
                    _ => runs.push((b as i64, b as i64 + 1)),
                }
            }
            runs.reverse();
            let compact = |e: Expr| {
                runs.iter().fold(e, |x, &(lo, hi)| {
                    let high = Expr::binary(BinOp::Shr, x.clone(), i32c(hi));
                    if lo == 0 {
                        return simplify(high);
                    }
                    let high = Expr::binary(BinOp::Shl, high, i32c(lo));
                    let low = Expr::binary(BinOp::BitAnd, x, i32c((1i64 << lo) - 1));
                    simplify(Expr::binary(BinOp::BitOr, high, low))
                })
            };
            let slots_per_row = active >> lane_bits.len();
            let scratch =
                self.shared_scratch(format!("{}_xwarp", db.name), acc_dt, &[dst_slots, slots_per_row], loc);
            let is_active = Expr::binary(BinOp::Lt, self.tid(), i32c(active));
            let stores = if lanes_mask == 0 {
                is_active.clone()
            } else {
                let first_lane = Expr::binary(
                    BinOp::Eq,
                    Expr::binary(BinOp::BitAnd, self.tid(), i32c(lanes_mask)),
                    i32c(0),
                );
                Expr::binary(BinOp::And, is_active.clone(), first_lane)
            };
            let s1 = self.m.add_var("s", VarKind::Loop, DType::I32);
            let s1e = Expr::var(s1, DType::I32);
            out.push(Stmt::inst(inst::Sync));
            out.push(Stmt::If {
                cond: stores,
                then: vec![Stmt::For {
                    var: s1,
                    start: i32c(0),
                    extent: i32c(dst_slots),
                    kind: ForKind::Unroll,
                    body: vec![Stmt::Store {
                        buf: scratch,
                        idx: vec![s1e.clone(), compact(self.tid())],
                        value: Expr::load(partial, vec![s1e.clone()], acc_dt),
                        loc,
                    }],
                    loc,
                }],
                otherwise: vec![],
                loc,
            });
            out.push(Stmt::inst(inst::Sync));
            // combine the partials of every thread that differs only in the cross-warp bits
            let all_bits: i64 = block_masks.iter().sum();
            let base = Expr::binary(BinOp::BitAnd, self.tid(), i32c(!all_bits));
            let s2 = self.m.add_var("s", VarKind::Loop, DType::I32);
            let s2e = Expr::var(s2, DType::I32);
            let mut fold = identity(kind, acc_dt);
            for subset in 0..(1i64 << block_masks.len()) {
                let offset: i64 = block_masks
                    .iter()
                    .enumerate()
                    .filter(|(b, _)| subset >> b & 1 == 1)
                    .map(|(_, m)| m)
                    .sum();
                let member = compact(simplify(Expr::binary(BinOp::BitOr, base.clone(), i32c(offset))));
                fold = combine(kind, fold, Expr::load(scratch, vec![s2e.clone(), member], acc_dt));
            }
            out.push(Stmt::If {
                cond: is_active,
                then: vec![Stmt::For {
                    var: s2,
                    start: i32c(0),
                    extent: i32c(dst_slots),
                    kind: ForKind::Unroll,
                    body: vec![Stmt::Store { buf: partial, idx: vec![s2e], value: fold, loc }],
                    loc,
                }],
                otherwise: vec![],
                loc,
            });
            out.push(Stmt::inst(inst::Sync));
            self.report.push(format!(
                "{}: reduce_{} across warps through shared memory ({} bytes)",
                self.m.sources.short(loc).unwrap_or_default(),
                kind.name(),
                dst_slots * slots_per_row * acc_dt.bytes() as i64
            ));
        }
        if broadcast {
            // each element from the first thread that holds its reduction, to every thread
            let shape = dl.shape();
            let n = dl.slots();
            let scratch = self.shared_scratch(format!("{}_bcast", db.name), acc_dt, &[n], loc);
            let mut put = Vec::new();
            let mut get = Vec::new();
            for e in 0..n {
                let mut coord = vec![0i64; shape.len()];
                let mut r = e;
                for k in (0..shape.len()).rev() {
                    coord[k] = r % shape[k];
                    r /= shape[k];
                }
                let (holder, _) = expect.locate(&coord);
                let (_, slot) = dl.locate(&coord);
                put.push(Stmt::If {
                    cond: Expr::binary(BinOp::Eq, self.tid(), i32c(holder)),
                    then: vec![Stmt::Store {
                        buf: scratch,
                        idx: vec![i32c(e)],
                        value: Expr::load(partial, vec![i32c(slot)], acc_dt),
                        loc,
                    }],
                    otherwise: vec![],
                    loc,
                });
                get.push(Stmt::Store {
                    buf: partial,
                    idx: vec![i32c(slot)],
                    value: Expr::load(scratch, vec![i32c(e)], acc_dt),
                    loc,
                });
            }
            out.push(Stmt::inst(inst::Sync));
            out.extend(put);
            out.push(Stmt::inst(inst::Sync));
            out.extend(get);
            out.push(Stmt::inst(inst::Sync));
            self.report.push(format!(
                "{}: reduce_{}: '{}' is read by every thread, '{}' reduced on {} of them: the result goes to all through shared memory ({} bytes)",
                self.m.sources.short(loc).unwrap_or_default(),
                kind.name(),
                db.name,
                sb.name,
                sl.active_threads,
                n * acc_dt.bytes() as i64
            ));
        }
        // write the result
        let s3 = self.m.add_var("s", VarKind::Loop, DType::I32);
        let s3e = Expr::var(s3, DType::I32);
        let result = Expr::load(partial, vec![s3e.clone()], acc_dt);
        let value = if clear {
            Expr::cast(result, db.dtype)
        } else {
            let old = Expr::cast(Expr::load(dst, vec![s3e.clone()], db.dtype), acc_dt);
            Expr::cast(combine(kind, old, result), db.dtype)
        };
        out.push(Stmt::For {
            var: s3,
            start: i32c(0),
            extent: i32c(dst_slots),
            kind: ForKind::Unroll,
            body: vec![Stmt::Store { buf: dst, idx: vec![s3e], value, loc }],
            loc,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_identities_are_the_type_bounds() {
        let held = |kind, dt| identity(kind, dt).as_int();
        assert_eq!(held(ReduceKind::Max, DType::U16), Some(0));
        assert_eq!(held(ReduceKind::Min, DType::U16), Some(u16::MAX as i64));
        assert_eq!(held(ReduceKind::Max, DType::U64), Some(0));
        // uint64's greatest value, held as its bit pattern
        assert_eq!(held(ReduceKind::Min, DType::U64), Some(-1));
        assert_eq!(held(ReduceKind::Min, DType::I64), Some(i64::MAX));
        assert_eq!(held(ReduceKind::Sum, DType::U64), Some(0));
    }
}
