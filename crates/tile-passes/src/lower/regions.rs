//! The kernel's own warp roles and barriers (TileLang's explicit warp specialization):
//! `T.ws` regions — `if tid in first..first + count` — whose tile ops run on the region's
//! threads alone, numbered from 0, and whose barriers are named barriers over them; and the
//! statements on `T.alloc_barrier` barriers: initialization by one thread before the
//! kernel's first statement, arrivals and waits by every thread that runs them, expected
//! transaction bytes and TMA copies by one (`T.tma_copy`: the tile's bytes expected on the
//! barrier, then its bulk tensor copies completing there; a copy TMA cannot carry out is an
//! error naming why: its protocol — bytes completing a phase — has no thread-copy form).

use super::{i32c, named_barriers, tma, Lowerer};
use tile_ir::*;

impl Lowerer {
    /// `if tid == 0 { mbarrier_init ...; fence_mbarrier_init }; sync` for the kernel's barriers.
    pub(super) fn barrier_inits(&mut self, inits: Vec<Stmt>) -> Vec<Stmt> {
        if inits.is_empty() {
            return vec![];
        }
        let mut one = Vec::new();
        for s in inits {
            if let Stmt::Barrier(BarrierOp { kind: BarrierKind::Init { count }, bar, idx, .. }) = s {
                one.push(Stmt::inst(inst::MbarrierInit { bar, idx, count }));
            }
        }
        one.push(Stmt::inst(inst::FenceMbarrierInit));
        let first = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
        vec![
            Stmt::If { cond: first, then: one, otherwise: vec![], loc: Loc::UNKNOWN },
            Stmt::inst(inst::Sync),
        ]
    }

    /// A warp-role region: its statements lowered for its `count` threads, numbered from 0.
    pub(super) fn region(
        &mut self,
        cond: Expr,
        then: Vec<Stmt>,
        otherwise: Vec<Stmt>,
        first: u32,
        count: u32,
        loc: Loc,
    ) -> Vec<Stmt> {
        let id = match self.regions.iter().position(|r| *r == (first, count)) {
            Some(k) => k as u32 + 1,
            None => {
                self.regions.push((first, count));
                self.regions.len() as u32
            }
        };
        if id > 15 {
            self.diags.push(Diagnostic::error(
                "more than 15 distinct T.ws regions: each needs a hardware named barrier of its own (16, one the block's)",
                loc,
            ));
        }
        let saved = (self.tid, self.m.kernel.threads);
        let mut body = Vec::new();
        if first > 0 {
            let local = self.m.add_var("wtid", VarKind::Temp, DType::I32);
            body.push(Stmt::Let {
                var: local,
                value: Expr::binary(BinOp::Sub, self.tid(), i32c(first as i64)),
            });
            self.tid = local;
        }
        self.m.kernel.threads = count;
        body.extend(self.block(then));
        (self.tid, self.m.kernel.threads) = saved;
        let body = named_barriers(body, id, count);
        let otherwise = self.block(otherwise);
        let at = self.m.sources.short(loc).unwrap_or_default();
        self.report.push(format!(
            "{at}: T.ws region on threads {first}-{}: its tile ops run on its {count} threads; its barriers are named barrier {id}",
            first + count - 1
        ));
        vec![Stmt::If { cond, then: body, otherwise, loc }]
    }

    /// A statement on one of the kernel's barriers.
    pub(super) fn barrier(&mut self, op: BarrierOp) -> Vec<Stmt> {
        let BarrierOp { kind, bar, idx, loc } = op;
        if !self.target.caps.mbarrier_tx {
            self.diags.push(
                Diagnostic::error(
                    format!(
                        "barriers of T.alloc_barrier need sm_90 or newer; this kernel is compiled for {}",
                        self.target.arch
                    ),
                    loc,
                )
                .with_help("compile for cuda:sm_90a"),
            );
            return vec![];
        }
        let one = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
        let once = |then: Vec<Stmt>| Stmt::If { cond: one.clone(), then, otherwise: vec![], loc };
        match kind {
            BarrierKind::Init { .. } => {
                // top-level inits were taken out first; one inside a branch or loop
                self.diags.push(
                    Diagnostic::error("T.alloc_barrier inside a branch or loop", loc)
                        .with_help("allocate the barriers at the top of the kernel"),
                );
                vec![]
            }
            BarrierKind::Arrive => {
                vec![
                    self.comment("T.barrier_arrive", loc),
                    Stmt::inst(inst::MbarrierArrive { bar, idx, expect_tx: None, cta: None, pred: None }),
                ]
            }
            BarrierKind::Wait { parity } => {
                vec![self.comment("T.barrier_wait", loc), Stmt::inst(inst::MbarrierWait { bar, idx, parity })]
            }
            BarrierKind::ExpectTx { bytes } => match tile_ir::simplify::simplify(bytes).as_int() {
                Some(b) if (0..1 << 20).contains(&b) => {
                    vec![once(vec![Stmt::inst(inst::MbarrierExpectTx { bar, idx, bytes: b })])]
                }
                _ => {
                    self.diags.push(Diagnostic::error(
                        "the byte count of T.mbarrier_expect_tx must be a constant from 0 to 2^20 - 1",
                        loc,
                    ));
                    vec![]
                }
            },
            BarrierKind::TmaLoad { copy } => self.tma_copy(*copy, bar, idx, loc),
        }
    }

    fn tma_copy(&mut self, copy: CopyOp, bar: BufferId, idx: Expr, loc: Loc) -> Vec<Stmt> {
        let at = self.m.sources.short(loc).unwrap_or_default();
        let (sn, dn, bn) = (
            self.m.buffer(copy.src.buf).name.clone(),
            self.m.buffer(copy.dst.buf).name.clone(),
            self.m.buffer(bar).name.clone(),
        );
        match tma::fit_in_place(&self.m, &copy, &self.target) {
            Ok(plan) => match tma::loads(&mut self.m, &copy, &plan, None, bar, &idx, None) {
                Ok(loads) => {
                    let dims: Vec<String> = plan.box_dims.iter().map(|d| d.to_string()).collect();
                    self.report.push(format!(
                        "{at}: T.tma_copy {sn} -> {dn}: TMA, {}x [{}]{}, {} bytes on {bn}",
                        plan.boxes,
                        dims.join(", "),
                        if plan.swizzle > 0 { format!(", {}B swizzle", plan.swizzle) } else { String::new() },
                        plan.bytes
                    ));
                    let mut then = vec![Stmt::inst(inst::MbarrierExpectTx { bar, idx, bytes: plan.bytes })];
                    then.extend(loads);
                    let one = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
                    vec![
                        self.comment("T.tma_copy", loc),
                        Stmt::If { cond: one, then, otherwise: vec![], loc },
                    ]
                }
                Err(d) => {
                    self.diags.push(d);
                    vec![]
                }
            },
            Err(why) => {
                self.diags.push(
                    Diagnostic::error(
                        format!("T.tma_copy {sn} -> {dn}: a bulk tensor copy cannot carry it out: {why}"),
                        loc,
                    )
                    .with_help(
                        "TMA copies whole shared tiles in wgmma's swizzled layout from tensors whose \
                             rows are a multiple of 16 bytes; copy others with T.copy",
                    ),
                );
                vec![]
            }
        }
    }
}
