//! Pass `plan_shared_memory`: place every shared buffer in the block's dynamic shared
//! memory and check the total against the target's limit.
//!
//! Requires: thread-level IR (lowering may add scratch buffers). Ensures: every shared
//! buffer has `shared_offset`, 16-byte aligned (128 for swizzled tiles, so their bank
//! pattern holds); two buffers share bytes only when their lifetimes (the span of top-level
//! statements that use them) are separated by a `__syncthreads()`, with every `cp.async`
//! into the earlier one waited for before it — the epilogue's staging tile of a pipelined
//! GEMM reuses the operand tiles' memory (in a warp-specialized kernel the consumers'
//! statements are the top level, and the tiles the producer fills live from the role split
//! on). The total fits the target, else a diagnostic
//! naming each buffer and its bytes; the report says which buffers share bytes. Does not:
//! reuse memory inside a loop (a persistent kernel's tile loop included) or split a
//! statement's lifetime more finely than top-level statements.

use crate::Ctx;
use std::collections::BTreeSet;
use tile_ir::inst::AccessKind;
use tile_ir::{stmt_exprs, walk_stmts, BufferId, Diagnostic, Expr, Instruction, Module, Scope, Stmt};

pub const ALIGN: u64 = 16;

/// Buffers a statement (with its children) reads or writes; `async_dst` collects those
/// written by `cp.async`.
fn uses(s: &Stmt, out: &mut BTreeSet<BufferId>, async_dst: &mut BTreeSet<BufferId>) {
    walk_stmts(std::slice::from_ref(s), &mut |s| {
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    out.insert(*buf);
                }
            })
        });
        match s {
            Stmt::Store { buf, .. } | Stmt::Atomic { buf, .. } => {
                out.insert(*buf);
            }
            Stmt::Inst(i) => {
                for a in i.accesses() {
                    out.insert(a.buf);
                    if a.kind == AccessKind::Write && i.effects().asynchronous {
                        async_dst.insert(a.buf);
                    }
                }
            }
            // tile-level statements do not reach this pass; count their buffers anyway
            Stmt::Copy(op) => {
                out.extend([op.src.buf, op.dst.buf]);
            }
            Stmt::Fill { dst, .. } => {
                out.insert(dst.buf);
            }
            Stmt::Reduce(op) => {
                out.extend([op.src, op.dst]);
            }
            Stmt::Gemm(op) => {
                out.extend([op.a, op.b, op.c]);
            }
            Stmt::Print { what: tile_ir::Printed::Tile(r), .. } => {
                out.insert(r.buf);
            }
            _ => {}
        }
    });
}

/// Lifetimes `(first, last)` of the shared buffers in top-level statements, and whether
/// two of them may share memory.
struct Lifetimes {
    span: Vec<Option<(usize, usize)>>,
    async_dst: BTreeSet<BufferId>,
    syncs: Vec<usize>,
    waits_all: Vec<usize>,
}

impl Lifetimes {
    fn of(m: &Module) -> Lifetimes {
        // a warp-specialized kernel: the consumers' statements count as top-level ones; the
        // producer's tiles live from the split (its first copies may land while the
        // consumers still run the statements before the loop) to their last use
        let split = m.role_split();
        let mut units: Vec<&Stmt> = Vec::new();
        let mut producer: Option<(&[Stmt], usize)> = None;
        for (i, s) in m.kernel.body.iter().enumerate() {
            match s {
                Stmt::If { then, otherwise, .. } if Some(i) == split => {
                    producer = Some((otherwise, units.len()));
                    units.extend(then.iter());
                }
                other => units.push(other),
            }
        }
        let mut span = vec![None; m.buffers.len()];
        let mut async_dst = BTreeSet::new();
        let (mut syncs, mut waits_all) = (Vec::new(), Vec::new());
        for (i, s) in units.iter().enumerate() {
            if let Stmt::Inst(inst) = s {
                let e = inst.effects();
                if e.barrier {
                    syncs.push(i);
                }
                if e.waits_for == Some(0) {
                    waits_all.push(i);
                }
            }
            let mut used = BTreeSet::new();
            uses(s, &mut used, &mut async_dst);
            for b in used {
                let e: &mut Option<(usize, usize)> = &mut span[b.0 as usize];
                *e = Some(match *e {
                    None => (i, i),
                    Some((first, _)) => (first, i),
                });
            }
        }
        if let Some((stmts, first)) = producer {
            let mut used = BTreeSet::new();
            for s in stmts {
                uses(s, &mut used, &mut async_dst);
            }
            for b in used {
                let e: &mut Option<(usize, usize)> = &mut span[b.0 as usize];
                *e = Some(match *e {
                    None => (first, first),
                    Some((f, l)) => (f.min(first), l.max(first)),
                });
            }
        }
        Lifetimes { span, async_dst, syncs, waits_all }
    }

    /// `a` is dead, with every thread past its last use, before `b`'s first use.
    fn before(&self, a: BufferId, b: BufferId) -> bool {
        let (Some((_, last)), Some((first, _))) = (self.span[a.0 as usize], self.span[b.0 as usize]) else {
            return false;
        };
        let Some(&sync) = self.syncs.iter().find(|&&s| s > last && s < first) else {
            return false;
        };
        !self.async_dst.contains(&a) || self.waits_all.iter().any(|&w| w > last && w < sync)
    }

    fn disjoint(&self, a: BufferId, b: BufferId) -> bool {
        self.before(a, b) || self.before(b, a)
    }
}

pub fn plan_shared_memory(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let lifetimes = Lifetimes::of(&m);
    // first fit, in declaration order: the lowest aligned offset that overlaps no placed
    // buffer whose lifetime overlaps this one's
    let mut placed: Vec<(BufferId, u64, u64)> = Vec::new();
    let mut total = 0u64;
    let shared: Vec<BufferId> =
        (0..m.buffers.len() as u32).map(BufferId).filter(|b| m.buffer(*b).scope == Scope::Shared).collect();
    for id in shared {
        let b = m.buffer(id);
        // 128 bytes keep the XOR pattern on the banks; wgmma's layouts, which the hardware
        // swizzles on physical addresses, start on the swizzle's period
        let align = b.shared_align().max(ALIGN);
        let size = b.bytes() as u64;
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|(other, _, _)| !lifetimes.disjoint(*other, id))
            .map(|&(_, start, end)| (start, end))
            .collect();
        busy.sort();
        let mut offset = 0u64;
        for (start, end) in busy {
            if offset + size <= start {
                break;
            }
            offset = offset.max(end.div_ceil(align) * align);
        }
        m.buffer_mut(id).shared_offset = Some(offset);
        placed.push((id, offset, offset + size));
        total = total.max(offset + size);
    }
    // which buffers share bytes (their lifetimes do not overlap), for the report
    let mut shares = Vec::new();
    for (i, &(a, s0, e0)) in placed.iter().enumerate() {
        for &(b, s1, e1) in &placed[..i] {
            if s0 < e1 && s1 < e0 {
                shares.push(format!("'{}' with '{}'", m.buffer(a).name, m.buffer(b).name));
            }
        }
    }
    // a base aligned above 16 bytes is made by rounding up at run time: room for it
    let base_align = m.shared_base_align();
    let total = total.div_ceil(ALIGN) * ALIGN + base_align.saturating_sub(16);
    if total > ctx.target.limits.shared_bytes {
        let list: Vec<String> = m
            .buffers
            .iter()
            .filter(|b| b.scope == Scope::Shared)
            .map(|b| format!("'{}' {:?} {}: {} bytes", b.name, b.extents(), b.dtype, b.bytes()))
            .collect();
        let first =
            m.buffers.iter().find(|b| b.scope == Scope::Shared).map(|b| b.loc).unwrap_or(m.kernel.loc);
        return Err(vec![Diagnostic::error(
            format!(
                "the kernel needs {total} bytes of shared memory, above the {} bytes a block may use on {}: {}",
                ctx.target.limits.shared_bytes,
                ctx.target.arch,
                list.join("; ")
            ),
            first,
        )
        .with_help("use smaller tiles (block_M, block_N, block_K) or fewer pipeline stages")]);
    }
    if shares.is_empty() {
        ctx.report.push(format!("shared memory: {total} bytes"));
    } else {
        ctx.report.push(format!(
            "shared memory: {total} bytes; buffers whose lifetimes do not overlap share bytes: {}",
            shares.join(", ")
        ));
    }
    Ok(m)
}
