//! `T.gemm` on `mma.sync`: per warp, `ldmatrix` loads the operand fragments of each k-step
//! (transposing 16-bit tiles stored the other way; 8-bit tiles that would need a transpose
//! are gathered element by element) and the atom's `mma.sync` accumulates into the
//! accumulator fragment's registers; operands may already be in registers.
//!
//! Requires: a gemm with its `GemmInst` (atom, warp grid, operand sources), fragments laid
//! out by the atom (`infer_layouts`), operand tiles swizzled where `select_instructions`
//! said so.
//! Ensures: the accumulator's registers hold `c (+)= a @ b`, registers ordered as the
//! accumulator layout says (`[mi][ni][4]`).
//! Does not: pipeline (the operand copies are `inject_pipeline`'s).

use super::super::{add, div, i32c, mul, rem, unrolled, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::*;

impl Lowerer {
    /// `T.gemm` on `mma.sync` with the warp grid and operand sources of its `GemmInst`.
    pub(in crate::lower) fn gemm_mma_sync(&mut self, op: &GemmOp, plan: &GemmInst) -> Vec<Stmt> {
        let (a, b, c, ta, tb, loc) = (op.a, op.b, op.c, op.transpose_a, op.transpose_b, op.loc);
        let clear = op.clear_accum;
        // each operand's matrix: a stage of a multi-buffered tile and the user's leading
        // indices come first, a window's start is added
        let (oa, ob) = match crate::gemm::operands(&self.m, op) {
            Ok(o) => o,
            Err(why) => {
                self.diags.push(Diagnostic::bug(format!("gemm operands: {why}")));
                return vec![];
            }
        };
        let at =
            |o: &GemmOperand, i: Expr, j: Expr| o.index(i, j).into_iter().map(simplify).collect::<Vec<_>>();
        let (mut ab, mut bb, cb) =
            (self.m.buffer(a).clone(), self.m.buffer(b).clone(), self.m.buffer(c).clone());
        ab.shape = ab.shape[ab.rank() - 2..].to_vec();
        bb.shape = bb.shape[bb.rank() - 2..].to_vec();
        let a_in_registers = plan.a == OperandSource::Registers;
        let b_in_registers = plan.b == OperandSource::Registers;
        let (m, n) = (cb.extents()[0], cb.extents()[1]);
        let k = if ta { oa.tile[0] } else { oa.tile[1] };
        let kstep = plan.atom.k;
        let (wm, wn) = (plan.warps_m, plan.warps_n);
        let (tile_m, tile_n) = (m / wm, n / wn);
        let (mi_count, ni_count) = (tile_m / plan.atom.m, tile_n / plan.atom.n);
        let sixteen_bit = ab.dtype.bytes() == 2;
        // per k-step: 4 32-bit registers of A per 16-row piece, 2 of B per 8-column piece
        let a_elems = 16 / ab.dtype.bytes() as i64;
        let b_elems = a_elems / 2;
        let a_regs = if a_in_registers {
            a
        } else {
            self.local_buffer(&format!("{}_frag", ab.name), ab.dtype, mi_count * a_elems)
        };
        let b_regs = if b_in_registers {
            b
        } else {
            self.local_buffer(&format!("{}_frag", bb.name), bb.dtype, ni_count * b_elems)
        };
        let mut out = Vec::new();
        let (s_lane, lane) = self.temp("lane", rem(self.tid(), 32));
        let (s_wm, warp_m) = self.temp("warp_m", div(div(self.tid(), 32), wn));
        let (s_wn, warp_n) = self.temp("warp_n", rem(div(self.tid(), 32), wn));
        out.extend([s_lane, s_wm, s_wn]);
        if clear {
            let s = self.m.add_var("s", VarKind::Loop, DType::I32);
            let zero = if cb.dtype.is_float() {
                Expr::Const { value: ConstValue::Float(0.0), dtype: cb.dtype }
            } else {
                Expr::int_of(0, cb.dtype)
            };
            let slots = cb.layout.as_ref().map(|l| l.slots()).unwrap_or(0);
            out.push(unrolled(
                s,
                slots,
                vec![Stmt::Store { buf: c, idx: vec![Expr::var(s, DType::I32)], value: zero, loc }],
            ));
        }
        let kk_var = self.m.add_var("kk", VarKind::Loop, DType::I32);
        let kk = Expr::var(kk_var, DType::I32);
        let mut step = Vec::new();
        // A fragments
        let mi_var = self.m.add_var("mi", VarKind::Loop, DType::I32);
        let mi = Expr::var(mi_var, DType::I32);
        let a_offset = mul(mi.clone(), i32c(a_elems));
        let m0 = add(mul(warp_m.clone(), i32c(tile_m)), mul(mi.clone(), i32c(16)));
        let a_load = if !ta {
            // rows m0 + lane % 16, 16-byte column chunk lane / 16
            let row = add(m0.clone(), rem(lane.clone(), 16));
            let col = add(mul(kk.clone(), i32c(kstep)), mul(div(lane.clone(), 16), i32c(a_elems)));
            let src_idx = at(&oa, simplify(row), simplify(col));
            vec![Stmt::inst(inst::Ldmatrix {
                atom: CopyAtom::ldmatrix(4, false),
                dst: a_regs,
                dst_offset: a_offset,
                src: a,
                src_idx,
            })]
        } else if sixteen_bit {
            let kr = add(
                add(mul(kk.clone(), i32c(16)), rem(lane.clone(), 8)),
                mul(div(lane.clone(), 16), i32c(8)),
            );
            let mc = add(m0.clone(), mul(rem(div(lane.clone(), 8), 2), i32c(8)));
            let src_idx = at(&oa, simplify(kr), simplify(mc));
            vec![Stmt::inst(inst::Ldmatrix {
                atom: CopyAtom::ldmatrix(4, true),
                dst: a_regs,
                dst_offset: a_offset,
                src: a,
                src_idx,
            })]
        } else {
            // int8 stored K x M: gather the m16n8k32 A fragment (register r, byte q)
            let mut v = Vec::new();
            for r in 0..4 {
                for q in 0..4 {
                    let row = add(add(m0.clone(), div(lane.clone(), 4)), i32c((r % 2) * 8));
                    let kc = add(mul(kk.clone(), i32c(32)), i32c((r / 2) * 16 + q));
                    let kc = add(kc, mul(rem(lane.clone(), 4), i32c(4)));
                    v.push(Stmt::Store {
                        buf: a_regs,
                        idx: vec![simplify(add(a_offset.clone(), i32c(r * 4 + q)))],
                        value: Expr::load(a, at(&oa, simplify(kc), simplify(row)), ab.dtype),
                        loc,
                    });
                }
            }
            v
        };
        if !a_in_registers {
            step.push(unrolled(mi_var, mi_count, a_load));
        }
        if !b_in_registers {
            // B fragments: with an even number of 8-column pieces, one ldmatrix.x4 loads two of
            // them (lanes 16-31 address the second), else ldmatrix.x2 per piece
            let paired = ni_count % 2 == 0 && (tb || sixteen_bit);
            if paired {
                let nj_var = self.m.add_var("nj", VarKind::Loop, DType::I32);
                let nj = Expr::var(nj_var, DType::I32);
                let b_offset = mul(nj.clone(), i32c(2 * b_elems));
                let n0 = add(mul(warp_n.clone(), i32c(tile_n)), mul(nj.clone(), i32c(16)));
                let load = if tb {
                    // stored N x K: rows n0 + (lane / 16) * 8 + lane % 8, 16-byte chunk (lane / 8) % 2
                    let row = add(add(n0, mul(div(lane.clone(), 16), i32c(8))), rem(lane.clone(), 8));
                    let col =
                        add(mul(kk.clone(), i32c(kstep)), mul(rem(div(lane.clone(), 8), 2), i32c(a_elems)));
                    let src_idx = at(&ob, simplify(row), simplify(col));
                    Stmt::inst(inst::Ldmatrix {
                        atom: CopyAtom::ldmatrix(4, false),
                        dst: b_regs,
                        dst_offset: b_offset,
                        src: b,
                        src_idx,
                    })
                } else {
                    // stored K x N: rows k = kk * 16 + lane % 16, columns n0 + (lane / 16) * 8
                    let kr = add(mul(kk.clone(), i32c(16)), rem(lane.clone(), 16));
                    let col = add(n0, mul(div(lane.clone(), 16), i32c(8)));
                    let src_idx = at(&ob, simplify(kr), simplify(col));
                    Stmt::inst(inst::Ldmatrix {
                        atom: CopyAtom::ldmatrix(4, true),
                        dst: b_regs,
                        dst_offset: b_offset,
                        src: b,
                        src_idx,
                    })
                };
                step.push(unrolled(nj_var, ni_count / 2, vec![load]));
            } else {
                let ni_var = self.m.add_var("ni", VarKind::Loop, DType::I32);
                let ni = Expr::var(ni_var, DType::I32);
                let b_offset = mul(ni.clone(), i32c(b_elems));
                let n0 = add(mul(warp_n.clone(), i32c(tile_n)), mul(ni.clone(), i32c(8)));
                let b_load = if tb {
                    // stored N x K: rows n0 + lane % 8, 16-byte chunk (lane / 8) % 2
                    let row = add(n0.clone(), rem(lane.clone(), 8));
                    let col =
                        add(mul(kk.clone(), i32c(kstep)), mul(rem(div(lane.clone(), 8), 2), i32c(a_elems)));
                    let src_idx = at(&ob, simplify(row), simplify(col));
                    vec![Stmt::inst(inst::Ldmatrix {
                        atom: CopyAtom::ldmatrix(2, false),
                        dst: b_regs,
                        dst_offset: b_offset,
                        src: b,
                        src_idx,
                    })]
                } else if sixteen_bit {
                    let kr = add(mul(kk.clone(), i32c(16)), rem(lane.clone(), 16));
                    let src_idx = at(&ob, simplify(kr), simplify(n0.clone()));
                    vec![Stmt::inst(inst::Ldmatrix {
                        atom: CopyAtom::ldmatrix(2, true),
                        dst: b_regs,
                        dst_offset: b_offset,
                        src: b,
                        src_idx,
                    })]
                } else {
                    // int8 stored K x N: gather the m16n8k32 B fragment (register r, byte q)
                    let mut v = Vec::new();
                    for r in 0..2 {
                        for q in 0..4 {
                            let kc = add(
                                add(mul(kk.clone(), i32c(32)), i32c(r * 16 + q)),
                                mul(rem(lane.clone(), 4), i32c(4)),
                            );
                            let col = add(n0.clone(), div(lane.clone(), 4));
                            v.push(Stmt::Store {
                                buf: b_regs,
                                idx: vec![simplify(add(b_offset.clone(), i32c(r * 4 + q)))],
                                value: Expr::load(b, at(&ob, simplify(kc), simplify(col)), bb.dtype),
                                loc,
                            });
                        }
                    }
                    v
                };
                step.push(unrolled(ni_var, ni_count, b_load));
            }
        }
        // the products, accumulator registers ordered [mi][ni][4]
        let mi2 = self.m.add_var("mi", VarKind::Loop, DType::I32);
        let ni2 = self.m.add_var("ni", VarKind::Loop, DType::I32);
        let (mi2e, ni2e) = (Expr::var(mi2, DType::I32), Expr::var(ni2, DType::I32));
        let mma = Stmt::inst(inst::Mma {
            atom: plan.atom,
            a: a_regs,
            // registers of piece mi: per k-step 4 32-bit registers; the A fragment holds all k-steps
            a_offset: if a_in_registers {
                simplify(add(mul(mi2e.clone(), i32c((k / kstep) * a_elems)), mul(kk.clone(), i32c(a_elems))))
            } else {
                mul(mi2e.clone(), i32c(a_elems))
            },
            b: b_regs,
            // registers of piece ni: per k-step 2 32-bit registers; the B fragment holds all k-steps
            b_offset: if b_in_registers {
                simplify(add(mul(ni2e.clone(), i32c((k / kstep) * b_elems)), mul(kk.clone(), i32c(b_elems))))
            } else {
                mul(ni2e.clone(), i32c(b_elems))
            },
            c,
            c_offset: simplify(mul(add(mul(mi2e, i32c(ni_count)), ni2e), i32c(4))),
        });
        step.push(unrolled(mi2, mi_count, vec![unrolled(ni2, ni_count, vec![mma])]));
        out.push(unrolled(kk_var, k / kstep, step));
        out
    }
}
