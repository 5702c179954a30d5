//! Programmatic dependent launch for the kernels of one call (a prim_func of several
//! `T.Kernel`s), on targets with `griddepcontrol` (sm_90 and newer).
//!
//! A call launches its kernels in order on one stream, so each normally starts only once
//! the one before it ended and its memory is visible: the GPU idles between them for the
//! launch's latency (~0.9 µs measured on the H200 for two kernels in a CUDA graph, against
//! ~0.6 µs for one: bench/results, decode rows). With programmatic dependent launch the
//! launcher lets kernel k start while kernel k-1 still runs, and kernel k's threads execute
//! `griddepcontrol.wait` before they touch what the kernels before it produced. This pass
//! places those instructions, after the kernels are lowered:
//!
//! - a kernel's dependencies are the global memory (tensor parameters and `T.alloc_global`
//!   scratch, matched across kernels by position) that an earlier kernel of the call
//!   writes, and what an earlier kernel reads that this one writes (it must not overwrite
//!   it early); memory reached through a bound pointer or an extern call is assumed to be
//!   all of it;
//! - `griddep_wait` goes before the first statement that reaches a dependency, descending
//!   into both branches of an `if` (a warp-specialized kernel's consumers wait before their
//!   epilogue, its producers' loads of the inputs run ahead) and into a loop whose body runs
//!   a loop of its own before the dependency (a persistent kernel's tile loop: its main
//!   loops overlap the kernel before); where some path of the kernel has no such access, a
//!   wait ends the kernel, so that every kernel completes only after the ones before it
//!   (a later kernel waits for them through it);
//! - `griddep_launch` starts every kernel but the last: once all its blocks ran it, the next
//!   kernel may be scheduled (its blocks take the SMs its own leave, or free ones).
//!
//! Without the launch attribute both instructions are no-ops, so the code is correct
//! however it is launched; the launcher sets the attribute on a kernel only when an
//! earlier kernel of the same call was launched (never on the first, whose predecessor on
//! the stream is somebody else's work).

use tile_ir::inst::{AccessKind, GridDepLaunch, GridDepWait, Instruction};
use tile_ir::*;

/// A global buffer of the call, as every kernel of it names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Param(usize),
    Scratch(usize),
}

/// What a statement reaches of the call's global memory.
#[derive(Default)]
struct Uses {
    reads: Vec<Slot>,
    writes: Vec<Slot>,
    /// Memory it cannot name (a bound pointer, an extern call).
    unknown: bool,
}

impl Uses {
    fn touches(&self, deps: &Deps) -> bool {
        self.unknown || deps.all || self.reads.iter().chain(&self.writes).any(|s| deps.slots.contains(s))
    }
}

/// A kernel's dependencies on the kernels before it.
struct Deps {
    slots: Vec<Slot>,
    /// Everything (an earlier kernel reaches memory it cannot name).
    all: bool,
}

fn slot_of(m: &Module, buf: BufferId) -> Option<Slot> {
    if let Some(i) = m.params.iter().position(|p| matches!(p, Param::Tensor { buffer, .. } if *buffer == buf))
    {
        return Some(Slot::Param(i));
    }
    m.scratch.iter().position(|&b| b == buf).map(Slot::Scratch)
}

/// Record an access to `buf` when it is the call's global memory.
fn note(m: &Module, out: &mut Uses, buf: BufferId, kind: AccessKind) {
    if m.buffer(buf).scope != Scope::Global {
        return;
    }
    match slot_of(m, buf) {
        Some(s) if kind == AccessKind::Read => out.reads.push(s),
        Some(s) => out.writes.push(s),
        None => out.unknown = true,
    }
}

/// Record the loads of `e`.
fn note_loads(m: &Module, e: &Expr, out: &mut Uses) {
    e.walk(&mut |x| {
        if let Expr::Load { buf, .. } = x {
            note(m, out, *buf, AccessKind::Read);
        }
    })
}

/// The global memory `stmts` (and the statements in them) reach.
fn uses(m: &Module, stmts: &[Stmt]) -> Uses {
    let mut out = Uses::default();
    walk_stmts(stmts, &mut |s| {
        stmt_exprs(s, &mut |e| note_loads(m, e, &mut out));
        match s {
            Stmt::Store { buf, .. } => note(m, &mut out, *buf, AccessKind::Write),
            Stmt::Atomic { buf, .. } => {
                note(m, &mut out, *buf, AccessKind::Read);
                note(m, &mut out, *buf, AccessKind::Write);
            }
            Stmt::Copy(op) => {
                note(m, &mut out, op.src.buf, AccessKind::Read);
                note(m, &mut out, op.dst.buf, AccessKind::Write);
            }
            Stmt::Fill { dst, .. } => note(m, &mut out, dst.buf, AccessKind::Write),
            Stmt::Inst(Inst::CallExtern(_)) | Stmt::Inst(Inst::BindPointer(_)) => out.unknown = true,
            Stmt::Inst(i) => {
                for a in i.accesses() {
                    note(m, &mut out, a.buf, a.kind);
                }
            }
            _ => {}
        }
    });
    out
}

/// Place waits in `stmts` before the statements that reach a dependency; returns whether
/// every path through `stmts` ran a wait (so the statements after it need none).
fn place_waits(m: &Module, stmts: &mut Vec<Stmt>, deps: &Deps) -> bool {
    let mut i = 0;
    while i < stmts.len() {
        let one = std::slice::from_ref(&stmts[i]);
        if !uses(m, one).touches(deps) {
            i += 1;
            continue;
        }
        let descend = match &stmts[i] {
            Stmt::If { cond, .. } => !expr_touches(m, cond, deps),
            Stmt::For { start, extent, body, .. } => {
                !expr_touches(m, start, deps)
                    && !expr_touches(m, extent, deps)
                    && body
                        .iter()
                        .take_while(|s| !uses(m, std::slice::from_ref(*s)).touches(deps))
                        .any(|s| matches!(s, Stmt::For { .. }))
            }
            _ => false,
        };
        if !descend {
            stmts.insert(i, Stmt::inst(GridDepWait));
            return true;
        }
        match &mut stmts[i] {
            Stmt::If { then, otherwise, .. } => {
                let a = place_waits(m, then, deps);
                let b = place_waits(m, otherwise, deps);
                if a && b {
                    return true;
                }
            }
            Stmt::For { body, .. } => {
                // a loop that may run no iteration waits for nothing: go on after it
                place_waits(m, body, deps);
            }
            _ => unreachable!(),
        }
        i += 1;
    }
    false
}

fn expr_touches(m: &Module, e: &Expr, deps: &Deps) -> bool {
    let mut out = Uses::default();
    note_loads(m, e, &mut out);
    out.touches(deps)
}

/// Place `griddep_wait` and `griddep_launch` in the kernels of one call (see the module
/// doc), with a line in each kernel's report; nothing for a call of one kernel or a target
/// without `griddepcontrol`.
pub fn place(kernels: &mut [(Module, Vec<String>)], target: &Target) {
    if kernels.len() < 2 || target.sm < 90 {
        return;
    }
    let all_uses: Vec<Uses> = kernels.iter().map(|(m, _)| uses(m, &m.kernel.body)).collect();
    let last = kernels.len() - 1;
    for (k, (m, report)) in kernels.iter_mut().enumerate() {
        if k < last {
            m.kernel.body.insert(0, Stmt::inst(GridDepLaunch));
        }
        if k == 0 {
            continue;
        }
        let earlier = &all_uses[..k];
        let mine = &all_uses[k];
        let mut slots: Vec<Slot> = earlier.iter().flat_map(|u| u.writes.iter().copied()).collect();
        // what an earlier kernel reads and this one writes: not overwritten before it is read
        slots.extend(mine.writes.iter().filter(|s| earlier.iter().any(|u| u.reads.contains(s))));
        slots.sort();
        slots.dedup();
        let deps = Deps { slots, all: earlier.iter().any(|u| u.unknown) };
        let names: Vec<String> = deps
            .slots
            .iter()
            .filter(|s| mine.reads.contains(s) || mine.writes.contains(s))
            .map(|s| {
                let buf = match *s {
                    Slot::Param(i) => match &m.params[i] {
                        Param::Tensor { buffer, .. } => *buffer,
                        Param::Scalar { .. } => unreachable!("a slot is a tensor"),
                    },
                    Slot::Scratch(i) => m.scratch[i],
                };
                format!("'{}'", m.buffer(buf).name)
            })
            .collect();
        let start = usize::from(k < last);
        let mut body = m.kernel.body.split_off(start);
        let waited = place_waits(m, &mut body, &deps);
        if !waited {
            body.push(Stmt::inst(GridDepWait));
        }
        m.kernel.body.extend(body);
        let what = if deps.all || mine.unknown {
            "waits for the kernels before it (griddepcontrol.wait) before it reaches memory it cannot \
             name (a bound pointer or an extern call)"
                .to_string()
        } else if names.is_empty() {
            "touches nothing the kernels before it write or read, and waits for them \
             (griddepcontrol.wait) only as it ends"
                .to_string()
        } else {
            format!(
                "waits for the kernels before it (griddepcontrol.wait) before its first access to {}",
                names.join(", ")
            )
        };
        report.push(format!("programmatic dependent launch: starts while the kernel before it runs; {what}"));
    }
}
