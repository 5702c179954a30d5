//! Thread-level instructions: what the lowering emits below the tile ops, one payload type
//! per instruction, held by [`Stmt::Inst`](crate::Stmt::Inst).
//!
//! Every instruction implements [`Instruction`]: its expressions (for simplification,
//! substitution and verification), the buffers it reads and writes, its effects on
//! asynchronous state and barriers (what `insert_syncs`, `plan_shared_memory` and the
//! verifier reason with), and its text form, written by `text` and read back by `parse`
//! next to it (the text parser, [`crate::text`], hands a statement to every instruction in
//! turn by its first word, the mnemonic). Generic passes go through that trait and never
//! match on the variants; only the back end's emitters and the interpreter's models do.
//!
//! Adding an instruction: its atom in `target.rs` (if it is one), a payload struct here
//! with its `Instruction` impl (`text` and `parse` side by side), one line in the
//! `instructions!` list, its emitter in tile-codegen, its model in tile-interp, and the
//! lowering that makes it.

use crate::ir::{AtomicMode, AtomicOp, BufferId, Expr, MemoryOrder};
use crate::target::{CopyAtom, CopyKind, MmaAtom};

/// How an instruction reaches a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
}

/// Which elements an access touches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Index<'a> {
    /// An element (or the first of a vector) by its indices.
    Element(&'a [Expr]),
    /// Register arrays addressed by a flat element offset (mma fragments).
    Registers(&'a Expr),
}

/// One buffer access of an instruction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Access<'a> {
    pub buf: BufferId,
    pub kind: AccessKind,
    pub index: Index<'a>,
    /// Elements from the index on (a vector width, a 16-byte row).
    pub elements: i64,
}

/// What an instruction does beyond its accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Orders the block's shared memory (`__syncthreads`).
    pub barrier: bool,
    /// Its writes land later, at a wait (`cp.async`).
    pub asynchronous: bool,
    /// Closes the group of asynchronous copies issued so far.
    pub commits: bool,
    /// Waits until at most this many committed groups are in flight.
    pub waits_for: Option<u32>,
    /// Executed by a whole warp together (every lane must reach it).
    pub warp_collective: bool,
    /// Stops the kernel.
    pub traps: bool,
    /// Has an effect outside memory (a printed line).
    pub observable: bool,
    /// Orders the asynchronous tensor-core work of its warpgroup or the proxies that see
    /// shared memory (`wgmma.fence`, `commit_group`, `wait_group`, `fence.proxy.async`): no
    /// effect on values in a program that runs one statement after another.
    pub orders_tensor_core: bool,
    /// Initializes, arrives at or waits on an mbarrier (`mbarrier.*`), or commits or waits
    /// for a group of bulk stores (`cp.async.bulk.{commit,wait}_group`): orders the threads
    /// and bulk copies that use it; the barrier word is not a data access.
    pub mbarrier: bool,
    /// A bulk tensor copy (TMA): its writes land later, in the async proxy, and complete
    /// their bytes on an mbarrier; a wait on that barrier's phase makes them visible.
    pub bulk_async: bool,
    /// Leaves the innermost loop (`break`): control flow, not a data access.
    pub leaves_loop: bool,
    /// Orders this kernel after the kernels launched before it in the same call
    /// (`griddepcontrol.*`, programmatic dependent launch): nothing within the kernel.
    pub orders_grids: bool,
    /// Arrives at or waits on the thread-block cluster's barrier split in two
    /// (`barrier.cluster.arrive` / `barrier.cluster.wait`): orders the cluster's threads
    /// across the two, not the block's shared memory on its own.
    pub orders_cluster: bool,
}

impl Effects {
    /// Orders other work and does nothing else (a barrier, a commit, a wait, a tensor-core
    /// or proxy fence): placed by the passes that own ordering, a no-op for a program run one
    /// statement after another (the tile-level interpreter).
    pub fn only_orders(&self) -> bool {
        self.barrier
            || self.commits
            || self.waits_for.is_some()
            || self.orders_tensor_core
            || self.mbarrier
            || self.orders_grids
            || self.orders_cluster
    }
}

/// Names and expressions as the text IR prints them (implemented by the printer).
pub trait TextNames {
    fn buffer(&self, b: BufferId) -> String;
    fn expr(&self, e: &Expr) -> String;
    fn exprs(&self, es: &[Expr]) -> String {
        es.iter().map(|e| self.expr(e)).collect::<Vec<_>>().join(", ")
    }
}

/// What an instruction's parser reads its operands with (implemented by the text parser).
/// Each method consumes what it reads, or fails with a message that names the line.
pub trait TextReader {
    /// A buffer by its text name.
    fn buffer(&mut self) -> Result<BufferId, String>;
    fn expr(&mut self) -> Result<Expr, String>;
    /// Comma-separated expressions up to `close`, which is consumed.
    fn exprs_until(&mut self, close: &str) -> Result<Vec<Expr>, String>;
    /// The punctuation `p` (`<-`, `[`, `..`, `+=`, …).
    fn punct(&mut self, p: &str) -> Result<(), String>;
    fn is_punct(&self, p: &str) -> bool;
    /// The word `k`.
    fn keyword(&mut self, k: &str) -> Result<(), String>;
    fn int(&mut self) -> Result<i64, String>;
    /// A string literal as the printer writes it (`{:?}`), unescaped.
    fn string(&mut self) -> Result<String, String>;
    /// `message` with the line being read.
    fn error(&self, message: &str) -> String;
    /// Whether the next token is the word `k` (nothing is consumed).
    fn is_keyword(&self, k: &str) -> bool;

    /// `buf[i, j]`: an element (or the first of a vector) by its indices.
    fn element(&mut self) -> Result<(BufferId, Vec<Expr>), String> {
        let b = self.buffer()?;
        self.punct("[")?;
        Ok((b, self.exprs_until("]")?))
    }
    /// `regs[offset..]`: register arrays from a flat element offset.
    fn registers(&mut self) -> Result<(BufferId, Expr), String> {
        let b = self.buffer()?;
        self.punct("[")?;
        let offset = self.expr()?;
        self.punct("..")?;
        self.punct("]")?;
        Ok((b, offset))
    }
}

/// What every thread-level instruction tells the generic passes.
pub trait Instruction {
    /// Every expression it holds, in a fixed order (the order `map_exprs` visits them in,
    /// so a pass can give each a role from `accesses` first).
    fn exprs(&self) -> Vec<&Expr>;
    /// Rebuild with `f` applied to each expression it holds, whole (pass `|e| e.map(g)` to
    /// rewrite every node).
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self
    where
        Self: Sized;
    fn accesses(&self) -> Vec<Access<'_>>;
    fn effects(&self) -> Effects {
        Effects::default()
    }
    /// One line of text IR (without indentation).
    fn text(&self, names: &dyn TextNames) -> String;
    /// The instruction back from its text, the mnemonic `op` (the first word of `text`)
    /// already read; `None` when `op` is not this instruction's.
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>>
    where
        Self: Sized;
}

fn map_all(v: Vec<Expr>, f: &mut dyn FnMut(Expr) -> Expr) -> Vec<Expr> {
    v.into_iter().map(f).collect()
}

/// Copy `width` contiguous elements: one vector access on each side (up to 16 bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct VecCopy {
    pub dst: BufferId,
    pub dst_idx: Vec<Expr>,
    pub src: BufferId,
    pub src_idx: Vec<Expr>,
    pub width: u32,
}

impl Instruction for VecCopy {
    fn exprs(&self) -> Vec<&Expr> {
        self.dst_idx.iter().chain(&self.src_idx).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        VecCopy { dst_idx: map_all(self.dst_idx, f), src_idx: map_all(self.src_idx, f), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        let n = self.width as i64;
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Element(&self.src_idx),
                elements: n,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Element(&self.dst_idx),
                elements: n,
            },
        ]
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "vec{} {}[{}] <- {}[{}]",
            self.width,
            t.buffer(self.dst),
            t.exprs(&self.dst_idx),
            t.buffer(self.src),
            t.exprs(&self.src_idx)
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let width = op.strip_prefix("vec")?.parse().ok()?;
        Some((|| {
            let (dst, dst_idx) = r.element()?;
            r.punct("<-")?;
            let (src, src_idx) = r.element()?;
            Ok(VecCopy { dst, dst_idx, src, src_idx, width })
        })())
    }
}

/// An atomic on `width` contiguous elements of global `dst`, each combined with its element
/// of the register array `src` by `mode`: one vector `red` (sm_90: `.v2`/`.v4` float32,
/// `.v2`/`.v4`/`.v8` float16 and bfloat16), or packed `f16x2`/`bf16x2` pairs. Each element
/// is its own atomic; the vector only saves instructions.
#[derive(Clone, Debug, PartialEq)]
pub struct VecAtomic {
    pub mode: AtomicMode,
    pub dst: BufferId,
    pub dst_idx: Vec<Expr>,
    pub src: BufferId,
    pub src_idx: Vec<Expr>,
    pub width: u32,
}

impl Instruction for VecAtomic {
    fn exprs(&self) -> Vec<&Expr> {
        self.dst_idx.iter().chain(&self.src_idx).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        VecAtomic { dst_idx: map_all(self.dst_idx, f), src_idx: map_all(self.src_idx, f), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        let n = self.width as i64;
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Element(&self.src_idx),
                elements: n,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Element(&self.dst_idx),
                elements: n,
            },
        ]
    }
    fn text(&self, t: &dyn TextNames) -> String {
        let order = match self.mode.order {
            MemoryOrder::Relaxed => String::new(),
            o => format!(".{}", o.name()),
        };
        format!(
            "vatomic{}.{}{order} {}[{}] <- {}[{}]",
            self.width,
            self.mode.op.name(),
            t.buffer(self.dst),
            t.exprs(&self.dst_idx),
            t.buffer(self.src),
            t.exprs(&self.src_idx)
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let rest = op.strip_prefix("vatomic")?;
        let mut parts = rest.split('.');
        let width = parts.next()?.parse().ok()?;
        let op = AtomicOp::from_name(parts.next()?)?;
        let order = match parts.next() {
            Some(o) => MemoryOrder::from_name(o)?,
            None => MemoryOrder::Relaxed,
        };
        if parts.next().is_some() {
            return None;
        }
        Some((|| {
            let (dst, dst_idx) = r.element()?;
            r.punct("<-")?;
            let (src, src_idx) = r.element()?;
            Ok(VecAtomic { mode: AtomicMode { op, order }, dst, dst_idx, src, src_idx, width })
        })())
    }
}

/// `ldmatrix`: this lane gives the address of row `src_idx` of shared `src`; the warp
/// receives the atom's `count` 32-bit registers per lane, written to `dst[dst_offset..]`
/// (16-bit elements, two per register).
#[derive(Clone, Debug, PartialEq)]
pub struct Ldmatrix {
    pub atom: &'static CopyAtom,
    pub dst: BufferId,
    pub dst_offset: Expr,
    pub src: BufferId,
    pub src_idx: Vec<Expr>,
}

impl Ldmatrix {
    /// (matrices, transposed) of the atom.
    pub fn form(&self) -> (u32, bool) {
        match self.atom.kind {
            crate::target::CopyKind::Ldmatrix { count, trans } => (count, trans),
            _ => unreachable!("an ldmatrix holds an ldmatrix atom"),
        }
    }
}

impl Instruction for Ldmatrix {
    fn exprs(&self) -> Vec<&Expr> {
        std::iter::once(&self.dst_offset).chain(&self.src_idx).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        Ldmatrix { dst_offset: f(self.dst_offset), src_idx: map_all(self.src_idx, f), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        let (count, _) = self.form();
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Element(&self.src_idx),
                elements: 8,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Registers(&self.dst_offset),
                elements: 2 * count as i64,
            },
        ]
    }
    fn effects(&self) -> Effects {
        Effects { warp_collective: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "{} {}[{}..] <- {}[{}]",
            self.atom.name,
            t.buffer(self.dst),
            t.expr(&self.dst_offset),
            t.buffer(self.src),
            t.exprs(&self.src_idx)
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let atom = CopyAtom::by_name(op).filter(|a| matches!(a.kind, CopyKind::Ldmatrix { .. }))?;
        Some((|| {
            let (dst, dst_offset) = r.registers()?;
            r.punct("<-")?;
            let (src, src_idx) = r.element()?;
            Ok(Ldmatrix { atom, dst, dst_offset, src, src_idx })
        })())
    }
}

/// `stmatrix`: the inverse of [`Ldmatrix`]. The warp gives the atom's `count` 32-bit
/// registers per lane from `src[src_offset..]` (pairs of 16-bit elements); this lane gives
/// the address of row `dst_idx` of shared `dst`, which receives 16 bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmatrix {
    pub atom: &'static CopyAtom,
    pub dst: BufferId,
    pub dst_idx: Vec<Expr>,
    pub src: BufferId,
    pub src_offset: Expr,
}

impl Stmatrix {
    /// Matrices the atom stores.
    pub fn count(&self) -> u32 {
        match self.atom.kind {
            crate::target::CopyKind::Stmatrix { count, .. } => count,
            _ => unreachable!("a stmatrix holds a stmatrix atom"),
        }
    }
}

impl Instruction for Stmatrix {
    fn exprs(&self) -> Vec<&Expr> {
        self.dst_idx.iter().chain(std::iter::once(&self.src_offset)).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        Stmatrix { dst_idx: map_all(self.dst_idx, f), src_offset: f(self.src_offset), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Registers(&self.src_offset),
                elements: 2 * self.count() as i64,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Element(&self.dst_idx),
                elements: 8,
            },
        ]
    }
    fn effects(&self) -> Effects {
        Effects { warp_collective: true, ..Effects::default() }
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let atom = CopyAtom::by_name(op).filter(|a| matches!(a.kind, CopyKind::Stmatrix { .. }))?;
        Some((|| {
            let (dst, dst_idx) = r.element()?;
            r.punct("<-")?;
            let (src, src_offset) = r.registers()?;
            Ok(Stmatrix { atom, dst, dst_idx, src, src_offset })
        })())
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "{} {}[{}] <- {}[{}..]",
            self.atom.name,
            t.buffer(self.dst),
            t.exprs(&self.dst_idx),
            t.buffer(self.src),
            t.expr(&self.src_offset)
        )
    }
}

/// One warp-wide tensor-core `mma` on register arrays: `c[c_offset..] += a[a_offset..] *
/// b[b_offset..]` with the atom's fragment layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct Mma {
    pub atom: &'static MmaAtom,
    pub a: BufferId,
    pub a_offset: Expr,
    pub b: BufferId,
    pub b_offset: Expr,
    pub c: BufferId,
    pub c_offset: Expr,
}

impl Instruction for Mma {
    fn exprs(&self) -> Vec<&Expr> {
        vec![&self.a_offset, &self.b_offset, &self.c_offset]
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        Mma { a_offset: f(self.a_offset), b_offset: f(self.b_offset), c_offset: f(self.c_offset), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        let regs =
            |buf, kind, offset, elements| Access { buf, kind, index: Index::Registers(offset), elements };
        let c = self.atom.c_layout.elements();
        vec![
            regs(self.a, AccessKind::Read, &self.a_offset, self.atom.a_layout.elements()),
            regs(self.b, AccessKind::Read, &self.b_offset, self.atom.b_layout.elements()),
            regs(self.c, AccessKind::Read, &self.c_offset, c),
            regs(self.c, AccessKind::Write, &self.c_offset, c),
        ]
    }
    fn effects(&self) -> Effects {
        Effects { warp_collective: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "{} {}[{}..] += {}[{}..] * {}[{}..]",
            self.atom.name,
            t.buffer(self.c),
            t.expr(&self.c_offset),
            t.buffer(self.a),
            t.expr(&self.a_offset),
            t.buffer(self.b),
            t.expr(&self.b_offset)
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let atom = MmaAtom::by_name(op).filter(|a| a.scope == crate::target::ThreadScope::Warp)?;
        Some((|| {
            let (c, c_offset) = r.registers()?;
            r.punct("+=")?;
            let (a, a_offset) = r.registers()?;
            r.punct("*")?;
            let (b, b_offset) = r.registers()?;
            Ok(Mma { atom, a, a_offset, b, b_offset, c, c_offset })
        })())
    }
}

/// `cp.async` of `bytes` bytes (4, 8 or 16: `.cg` for 16, `.ca` otherwise) from global to
/// shared memory: `src_bytes` of them read from `src` (0 to `bytes`; the rest zero-filled);
/// the bytes land in `dst` at the wait that completes its group (or at the thread's
/// `cp.async.mbarrier.arrive`). The lowering of copies issues 16-byte ones; a kernel's own
/// `T.ptx_cp_async` any of the three sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncCopy {
    pub dst: BufferId,
    pub dst_idx: Vec<Expr>,
    pub src: BufferId,
    pub src_idx: Vec<Expr>,
    pub src_bytes: Expr,
    pub bytes: u32,
}

impl Instruction for AsyncCopy {
    fn exprs(&self) -> Vec<&Expr> {
        self.dst_idx.iter().chain(&self.src_idx).chain(std::iter::once(&self.src_bytes)).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        AsyncCopy {
            dst_idx: map_all(self.dst_idx, f),
            src_idx: map_all(self.src_idx, f),
            src_bytes: f(self.src_bytes),
            ..self
        }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Element(&self.src_idx),
                elements: 0,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Element(&self.dst_idx),
                elements: 0,
            },
        ]
    }
    fn effects(&self) -> Effects {
        Effects { asynchronous: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "cp.async{} {}[{}] <- {}[{}] ({} bytes)",
            self.bytes,
            t.buffer(self.dst),
            t.exprs(&self.dst_idx),
            t.buffer(self.src),
            t.exprs(&self.src_idx),
            t.expr(&self.src_bytes)
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let bytes = match op {
            "cp.async16" => 16,
            "cp.async8" => 8,
            "cp.async4" => 4,
            _ => return None,
        };
        Some((|| {
            let (dst, dst_idx) = r.element()?;
            r.punct("<-")?;
            let (src, src_idx) = r.element()?;
            r.punct("(")?;
            let src_bytes = r.expr()?;
            r.keyword("bytes")?;
            r.punct(")")?;
            Ok(AsyncCopy { dst, dst_idx, src, src_idx, src_bytes, bytes })
        })())
    }
}

/// `cp.async.mbarrier.arrive.noinc` on `bar[idx]` by this thread: an arrival at the barrier
/// once every `cp.async` the thread issued before has landed (`T.cp_async_barrier_noinc`;
/// `.noinc`: the arrival is one of the phase's expected ones).
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncArrive {
    pub bar: BufferId,
    pub idx: Expr,
}

impl Instruction for AsyncArrive {
    fn exprs(&self) -> Vec<&Expr> {
        vec![&self.idx]
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        AsyncArrive { idx: f(self.idx), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { mbarrier: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!("cp.async.mbarrier_arrive {}[{}]", t.buffer(self.bar), t.expr(&self.idx))
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "cp.async.mbarrier_arrive" {
            return None;
        }
        Some((|| {
            let (bar, idx) = barrier(r)?;
            Ok(AsyncArrive { bar, idx })
        })())
    }
}

/// An instruction with no operands: its name in the text IR and what it does.
macro_rules! operandless_instruction {
    ($t:ident, $text:expr, $effects:expr) => {
        impl Instruction for $t {
            fn exprs(&self) -> Vec<&Expr> {
                vec![]
            }
            fn map_exprs(self, _: &mut dyn FnMut(Expr) -> Expr) -> Self {
                self
            }
            fn accesses(&self) -> Vec<Access<'_>> {
                vec![]
            }
            fn effects(&self) -> Effects {
                $effects
            }
            fn text(&self, _: &dyn TextNames) -> String {
                $text.into()
            }
            fn parse(op: &str, _: &mut dyn TextReader) -> Option<Result<Self, String>> {
                (op == $text).then_some(Ok($t))
            }
        }
    };
}

/// Close the group of asynchronous copies issued since the last commit.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncCommit;

operandless_instruction!(AsyncCommit, "async_commit", Effects { commits: true, ..Effects::default() });

/// Wait until at most `pending` committed groups are still in flight.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncWait {
    pub pending: u32,
}

impl Instruction for AsyncWait {
    fn exprs(&self) -> Vec<&Expr> {
        vec![]
    }
    fn map_exprs(self, _: &mut dyn FnMut(Expr) -> Expr) -> Self {
        self
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { waits_for: Some(self.pending), ..Effects::default() }
    }
    fn text(&self, _: &dyn TextNames) -> String {
        format!("async_wait {}", self.pending)
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "async_wait" {
            return None;
        }
        Some(r.int().and_then(|n| {
            let pending = u32::try_from(n).map_err(|_| r.error(&format!("bad group count {n}")))?;
            Ok(AsyncWait { pending })
        }))
    }
}

/// `__syncthreads()`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sync;

operandless_instruction!(Sync, "sync", Effects { barrier: true, ..Effects::default() });

/// `barrier.cluster.arrive.release` + `barrier.cluster.wait.acquire`: every thread of
/// every block of the thread-block cluster arrives before any goes on (a block's own
/// threads included: it orders the block's shared memory as `sync` does). After the
/// barriers' init (peers arrive on them and multicast into this block) and before a block
/// exits (its shared memory must outlive the peers' remote arrivals).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSync;

operandless_instruction!(ClusterSync, "cluster_sync", Effects { barrier: true, ..Effects::default() });

/// `barrier.cluster.arrive.release`: the first half of a `cluster_sync`, without waiting —
/// the executing threads' earlier memory accesses are released to the cluster. A thread
/// arrives once before each [`ClusterWait`]. Placed at the start of a kernel whose blocks
/// reach each other's shared memory, with its wait just before the first reach: every block
/// has started by then, and the barrier's latency is hidden by what runs between.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterArrive;

operandless_instruction!(
    ClusterArrive,
    "cluster_arrive",
    Effects { orders_cluster: true, ..Effects::default() }
);

/// `barrier.cluster.wait.acquire`: waits until every thread of every block of the cluster
/// has arrived ([`ClusterArrive`]); what they did before arriving is visible after it. What
/// a thread does between its arrive and its wait is ordered with nothing of its peers.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterWait;

operandless_instruction!(ClusterWait, "cluster_wait", Effects { orders_cluster: true, ..Effects::default() });

/// `__syncwarp()`: the lanes of the warp meet, their memory accesses before it ordered
/// before those after (an elected lane then releases the warp's reads of a stage).
#[derive(Clone, Debug, PartialEq)]
pub struct SyncWarp;

operandless_instruction!(
    SyncWarp,
    "sync_warp",
    Effects { warp_collective: true, orders_tensor_core: true, ..Effects::default() }
);

/// CUDA `printf(format, args...)`. `format` holds the C conversions (`%d`, `%lld`, `%u`, `%llu`,
/// `%g`, `%%`) matching the args' dtypes (see [`crate::ir::printf_conversion`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Printf {
    pub format: String,
    pub args: Vec<Expr>,
}

impl Instruction for Printf {
    fn exprs(&self) -> Vec<&Expr> {
        self.args.iter().collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        Printf { args: map_all(self.args, f), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { observable: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        let args: Vec<String> = self.args.iter().map(|a| format!(", {}", t.expr(a))).collect();
        format!("printf({:?}{})", self.format, args.concat())
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "printf" {
            return None;
        }
        Some((|| {
            r.punct("(")?;
            let format = r.string()?;
            let mut args = Vec::new();
            while r.is_punct(",") {
                r.punct(",")?;
                args.push(r.expr()?);
            }
            r.punct(")")?;
            Ok(Printf { format, args })
        })())
    }
}

/// One operand of a [`CallExtern`].
#[derive(Clone, Debug, PartialEq)]
pub enum ExternArg {
    /// A value of its dtype (the C type of the dtype).
    Value(Expr),
    /// The address of `buf[idx]` (`T.access_ptr`, `T.address_of`): the function may read
    /// and/or write `elements` elements from there. `ctype`: the pointer type the function
    /// declares for it (`"half*"`, from the `T.import_source` prototype), which the address is
    /// cast to; None passes a pointer to the element's own storage type.
    Address { buf: BufferId, idx: Vec<Expr>, elements: i64, read: bool, write: bool, ctype: Option<String> },
    /// A C string literal.
    Str(String),
}

/// A call of a device function (or macro) the compiler does not know (`T.call_extern`):
/// the user's code from `T.import_source`, or a CUDA builtin. Each thread that runs it calls
/// it once; its value, if any, is stored to `result`. Only its addresses are known to touch
/// memory, as the access modes say.
#[derive(Clone, Debug, PartialEq)]
pub struct CallExtern {
    pub name: String,
    pub args: Vec<ExternArg>,
    pub result: Option<(BufferId, Vec<Expr>)>,
}

impl Instruction for CallExtern {
    fn exprs(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        for a in &self.args {
            match a {
                ExternArg::Value(e) => out.push(e),
                ExternArg::Address { idx, .. } => out.extend(idx.iter()),
                ExternArg::Str(_) => {}
            }
        }
        if let Some((_, idx)) = &self.result {
            out.extend(idx.iter());
        }
        out
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        let args = self
            .args
            .into_iter()
            .map(|a| match a {
                ExternArg::Value(e) => ExternArg::Value(f(e)),
                ExternArg::Address { buf, idx, elements, read, write, ctype } => {
                    ExternArg::Address { buf, idx: map_all(idx, f), elements, read, write, ctype }
                }
                s @ ExternArg::Str(_) => s,
            })
            .collect();
        let result = self.result.map(|(b, idx)| (b, map_all(idx, f)));
        CallExtern { name: self.name, args, result }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        let mut out = Vec::new();
        for a in &self.args {
            if let ExternArg::Address { buf, idx, elements, read, write, .. } = a {
                for (on, kind) in [(*read, AccessKind::Read), (*write, AccessKind::Write)] {
                    if on {
                        out.push(Access { buf: *buf, kind, index: Index::Element(idx), elements: *elements });
                    }
                }
            }
        }
        if let Some((buf, idx)) = &self.result {
            out.push(Access { buf: *buf, kind: AccessKind::Write, index: Index::Element(idx), elements: 0 });
        }
        out
    }
    fn effects(&self) -> Effects {
        Effects { observable: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| match a {
                ExternArg::Value(e) => format!("value {}", t.expr(e)),
                ExternArg::Address { buf, idx, elements, read, write, ctype } => {
                    let mode = match (read, write) {
                        (true, true) => "rw",
                        (false, true) => "w",
                        _ => "r",
                    };
                    let cast = ctype.as_ref().map(|c| format!(" as {c:?}")).unwrap_or_default();
                    format!("ptr {mode} {elements} {}[{}]{cast}", t.buffer(*buf), t.exprs(idx))
                }
                ExternArg::Str(s) => format!("str {s:?}"),
            })
            .collect();
        let result = match &self.result {
            Some((b, idx)) => format!(" -> {}[{}]", t.buffer(*b), t.exprs(idx)),
            None => String::new(),
        };
        format!("call_extern {:?}({}){result}", self.name, args.join(", "))
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "call_extern" {
            return None;
        }
        Some((|| {
            let name = r.string()?;
            r.punct("(")?;
            let mut args = Vec::new();
            while !r.is_punct(")") {
                if r.is_keyword("value") {
                    r.keyword("value")?;
                    args.push(ExternArg::Value(r.expr()?));
                } else if r.is_keyword("str") {
                    r.keyword("str")?;
                    args.push(ExternArg::Str(r.string()?));
                } else {
                    r.keyword("ptr")?;
                    let (read, write) = if r.is_keyword("rw") {
                        (true, true)
                    } else if r.is_keyword("w") {
                        (false, true)
                    } else {
                        (true, false)
                    };
                    r.keyword(if read && write {
                        "rw"
                    } else if write {
                        "w"
                    } else {
                        "r"
                    })?;
                    let elements = r.int()?;
                    let (buf, idx) = r.element()?;
                    let ctype = if r.is_keyword("as") {
                        r.keyword("as")?;
                        Some(r.string()?)
                    } else {
                        None
                    };
                    args.push(ExternArg::Address { buf, idx, elements, read, write, ctype });
                }
                if r.is_punct(",") {
                    r.punct(",")?;
                }
            }
            r.punct(")")?;
            let result = if r.is_punct("->") {
                r.punct("->")?;
                Some(r.element()?)
            } else {
                None
            };
            Ok(CallExtern { name, args, result })
        })())
    }
}

/// `T.make_tensor(address, shape, dtype)`: from here on the global buffer `buf` (neither a
/// parameter nor scratch: `Module::is_pointer`) is the memory at `addr`, a 64-bit address
/// the kernel read (a table of tensors' addresses, TileLang's `T.ptr`). Every thread that
/// runs it sets its own pointer, as a C pointer variable would be.
#[derive(Clone, Debug, PartialEq)]
pub struct BindPointer {
    pub buf: BufferId,
    pub addr: Expr,
}

impl Instruction for BindPointer {
    fn exprs(&self) -> Vec<&Expr> {
        vec![&self.addr]
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        BindPointer { buf: self.buf, addr: f(self.addr) }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { observable: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!("bind_pointer {} <- {}", t.buffer(self.buf), t.expr(&self.addr))
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "bind_pointer" {
            return None;
        }
        Some((|| {
            let buf = r.buffer()?;
            r.punct("<-")?;
            Ok(BindPointer { buf, addr: r.expr()? })
        })())
    }
}

/// `break`: the threads that run it leave the innermost (serial) loop (`T.loop_break()`, a
/// Python `break` in the kernel body).
#[derive(Clone, Debug, PartialEq)]
pub struct LoopBreak;

operandless_instruction!(LoopBreak, "break", Effects { leaves_loop: true, ..Effects::default() });

/// `griddepcontrol.wait`: the thread waits until the kernels launched before this one in
/// the same call completed and their memory is visible. A no-op unless the kernel was
/// launched as a programmatic dependent (KernelInfo `dependent_launch`), which lets it start
/// before they end: placed by `tile_passes::grid_dependence` before its first access to
/// memory an earlier kernel of the call writes (or reads, where this one writes it).
#[derive(Clone, Debug, PartialEq)]
pub struct GridDepWait;

operandless_instruction!(GridDepWait, "griddep_wait", Effects { orders_grids: true, ..Effects::default() });

/// `griddepcontrol.launch_dependents`: once every block of this kernel ran it (or exited),
/// the next kernel of the call, launched as a programmatic dependent, may start.
#[derive(Clone, Debug, PartialEq)]
pub struct GridDepLaunch;

operandless_instruction!(
    GridDepLaunch,
    "griddep_launch",
    Effects { orders_grids: true, ..Effects::default() }
);

/// `__trap()`: stops the kernel with an error.
#[derive(Clone, Debug, PartialEq)]
pub struct Trap;

operandless_instruction!(Trap, "trap", Effects { traps: true, observable: true, ..Effects::default() });

/// The A operand of a `wgmma`: a shared tile through a descriptor (its first element), or
/// registers (the register-A form).
#[derive(Clone, Debug, PartialEq)]
pub enum WgmmaA {
    Shared { idx: Vec<Expr>, k_major: bool },
    Registers { offset: Expr },
}

/// One warpgroup-wide `wgmma.mma_async.m64nNk16`: `c[c_offset..] (= or +=) a · b` for one
/// 64-row atom, `n` columns and one k-step of 16, B (and A unless in registers) read from
/// shared tiles through matrix descriptors whose fields come from the tiles' layouts
/// (`SharedLayout::wgmma_descriptor`) and whose start is the operand's first element.
/// `scale_d` 0 ignores the old accumulator. Asynchronous: the accumulator is defined at the
/// `wgmma_wait` that retires its group.
#[derive(Clone, Debug, PartialEq)]
pub struct Wgmma {
    pub atom: &'static MmaAtom,
    pub n: i64,
    pub a: BufferId,
    pub a_from: WgmmaA,
    pub b: BufferId,
    pub b_idx: Vec<Expr>,
    /// B stored (N, K), contiguous along K; else (K, N), contiguous along N.
    pub b_k_major: bool,
    pub c: BufferId,
    pub c_offset: Expr,
    pub scale_d: Expr,
}

impl Instruction for Wgmma {
    fn exprs(&self) -> Vec<&Expr> {
        let mut v = Vec::new();
        match &self.a_from {
            WgmmaA::Shared { idx, .. } => v.extend(idx.iter()),
            WgmmaA::Registers { offset } => v.push(offset),
        }
        v.extend(self.b_idx.iter());
        v.push(&self.c_offset);
        v.push(&self.scale_d);
        v
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        let a_from = match self.a_from {
            WgmmaA::Shared { idx, k_major } => {
                WgmmaA::Shared { idx: idx.into_iter().map(&mut *f).collect(), k_major }
            }
            WgmmaA::Registers { offset } => WgmmaA::Registers { offset: f(offset) },
        };
        let b_idx = self.b_idx.into_iter().map(&mut *f).collect();
        let c_offset = f(self.c_offset);
        let scale_d = f(self.scale_d);
        Wgmma { a_from, b_idx, c_offset, scale_d, ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        let c = self.n / 2;
        let mut v = vec![match &self.a_from {
            WgmmaA::Shared { idx, .. } => {
                Access { buf: self.a, kind: AccessKind::Read, index: Index::Element(idx), elements: 1 }
            }
            WgmmaA::Registers { offset } => {
                Access { buf: self.a, kind: AccessKind::Read, index: Index::Registers(offset), elements: 8 }
            }
        }];
        v.push(Access {
            buf: self.b,
            kind: AccessKind::Read,
            index: Index::Element(&self.b_idx),
            elements: 1,
        });
        v.push(Access {
            buf: self.c,
            kind: AccessKind::Read,
            index: Index::Registers(&self.c_offset),
            elements: c,
        });
        v.push(Access {
            buf: self.c,
            kind: AccessKind::Write,
            index: Index::Registers(&self.c_offset),
            elements: c,
        });
        v
    }
    fn effects(&self) -> Effects {
        Effects { warp_collective: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        let major = |k: bool| if k { "k_major" } else { "mn_major" };
        let a = match &self.a_from {
            WgmmaA::Shared { idx, k_major } => {
                format!("{}[{}] {}", t.buffer(self.a), t.exprs(idx), major(*k_major))
            }
            WgmmaA::Registers { offset } => format!("{}[{}..]", t.buffer(self.a), t.expr(offset)),
        };
        format!(
            "{} n={} {}[{}..] += {} * {}[{}] {} scale_d={}",
            self.atom.name,
            self.n,
            t.buffer(self.c),
            t.expr(&self.c_offset),
            a,
            t.buffer(self.b),
            t.exprs(&self.b_idx),
            major(self.b_k_major),
            t.expr(&self.scale_d)
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        let atom = MmaAtom::by_name(op).filter(|a| a.scope == crate::target::ThreadScope::Warpgroup)?;
        Some((|| {
            r.keyword("n")?;
            r.punct("=")?;
            let n = r.int()?;
            let (c, c_offset) = r.registers()?;
            r.punct("+=")?;
            let a = r.buffer()?;
            r.punct("[")?;
            let first = r.expr()?;
            let a_from = if r.is_punct("..") {
                r.punct("..")?;
                r.punct("]")?;
                WgmmaA::Registers { offset: first }
            } else {
                let mut idx = vec![first];
                if r.is_punct(",") {
                    r.punct(",")?;
                    idx.extend(r.exprs_until("]")?);
                } else {
                    r.punct("]")?;
                }
                WgmmaA::Shared { idx, k_major: major(r)? }
            };
            r.punct("*")?;
            let (b, b_idx) = r.element()?;
            let b_k_major = major(r)?;
            r.keyword("scale_d")?;
            r.punct("=")?;
            let scale_d = r.expr()?;
            Ok(Wgmma { atom, n, a, a_from, b, b_idx, b_k_major, c, c_offset, scale_d })
        })())
    }
}

fn major(r: &mut dyn TextReader) -> Result<bool, String> {
    if r.keyword("k_major").is_ok() {
        return Ok(true);
    }
    r.keyword("mn_major").map(|_| false)
}

/// `wgmma.fence.sync.aligned`: orders the warpgroup's register accesses before the wgmmas
/// that follow (needed before the first, and after registers they read were written).
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaFence;

/// `wgmma.commit_group.sync.aligned`: the wgmmas issued since the last commit form a group.
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaCommit;

/// `fence.proxy.async.shared::cta`: shared-memory writes of ordinary stores (and
/// `cp.async`) become visible to the async proxy (`wgmma`'s reads).
#[derive(Clone, Debug, PartialEq)]
pub struct FenceProxyAsync;

/// `mbarrier.init.shared::cta.b64 [bar[idx]], count`: phase 0, `count` arrivals expected.
#[derive(Clone, Debug, PartialEq)]
pub struct MbarrierInit {
    pub bar: BufferId,
    pub idx: Expr,
    pub count: u32,
}

impl Instruction for MbarrierInit {
    fn exprs(&self) -> Vec<&Expr> {
        vec![&self.idx]
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        MbarrierInit { idx: f(self.idx), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { mbarrier: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!("mbarrier_init {}[{}], {}", t.buffer(self.bar), t.expr(&self.idx), self.count)
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "mbarrier_init" {
            return None;
        }
        Some((|| {
            let (bar, idx) = barrier(r)?;
            r.punct(",")?;
            let n = r.int()?;
            let count = u32::try_from(n).map_err(|_| r.error(&format!("bad arrival count {n}")))?;
            Ok(MbarrierInit { bar, idx, count })
        })())
    }
}

/// `bar[idx]` of an mbarrier instruction.
fn barrier(r: &mut dyn TextReader) -> Result<(BufferId, Expr), String> {
    let bar = r.buffer()?;
    r.punct("[")?;
    let idx = r.expr()?;
    r.punct("]")?;
    Ok((bar, idx))
}

/// `mbarrier.arrive` on `bar[idx]` by this thread — with `expect_tx`, first adding that
/// many bytes the phase waits for (`mbarrier.arrive.expect_tx`, the producer's arrival
/// before its bulk copies).
#[derive(Clone, Debug, PartialEq)]
pub struct MbarrierArrive {
    pub bar: BufferId,
    pub idx: Expr,
    pub expect_tx: Option<i64>,
    /// The block of the thread-block cluster (its rank) whose barrier at the same shared
    /// offset takes the arrival (`mapa` + `mbarrier.arrive.release.cluster.shared::cluster`:
    /// a consumer releasing a stage that a peer's multicast copies fill); None: this
    /// block's own.
    pub cta: Option<Expr>,
    /// Only the threads where this holds arrive: a predicate of the instruction, not a
    /// branch (one lane of a warp releasing a stage inside a wgmma loop, whose warpgroup
    /// stays converged). None: every thread that runs it.
    pub pred: Option<Expr>,
}

impl Instruction for MbarrierArrive {
    fn exprs(&self) -> Vec<&Expr> {
        std::iter::once(&self.idx).chain(self.cta.as_ref()).chain(self.pred.as_ref()).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        MbarrierArrive { idx: f(self.idx), cta: self.cta.map(&mut *f), pred: self.pred.map(&mut *f), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { mbarrier: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        let tx = self.expect_tx.map(|b| format!(" expect_tx {b}")).unwrap_or_default();
        let cta = self.cta.as_ref().map(|c| format!(" cta {}", t.expr(c))).unwrap_or_default();
        let pred = self.pred.as_ref().map(|p| format!(" where {}", t.expr(p))).unwrap_or_default();
        format!("mbarrier_arrive {}[{}]{tx}{cta}{pred}", t.buffer(self.bar), t.expr(&self.idx))
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "mbarrier_arrive" {
            return None;
        }
        Some((|| {
            let (bar, idx) = barrier(r)?;
            let expect_tx = if r.keyword("expect_tx").is_ok() { Some(r.int()?) } else { None };
            let cta = if r.keyword("cta").is_ok() { Some(r.expr()?) } else { None };
            let pred = if r.keyword("where").is_ok() { Some(r.expr()?) } else { None };
            Ok(MbarrierArrive { bar, idx, expect_tx, cta, pred })
        })())
    }
}

/// `mbarrier.expect_tx` on `bar[idx]` by this thread: `bytes` more transaction bytes the
/// current phase waits for, without an arrival (`T.tma_copy` / `T.mbarrier_expect_tx` of a
/// kernel's own barriers; its threads arrive themselves).
#[derive(Clone, Debug, PartialEq)]
pub struct MbarrierExpectTx {
    pub bar: BufferId,
    pub idx: Expr,
    pub bytes: i64,
}

impl Instruction for MbarrierExpectTx {
    fn exprs(&self) -> Vec<&Expr> {
        vec![&self.idx]
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        MbarrierExpectTx { idx: f(self.idx), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { mbarrier: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!("mbarrier_expect_tx {}[{}] {}", t.buffer(self.bar), t.expr(&self.idx), self.bytes)
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "mbarrier_expect_tx" {
            return None;
        }
        Some((|| {
            let (bar, idx) = barrier(r)?;
            Ok(MbarrierExpectTx { bar, idx, bytes: r.int()? })
        })())
    }
}

/// Wait until the phase of `bar[idx]` whose parity is `parity` (0 or 1) has completed
/// (`mbarrier.try_wait.parity` in a loop). Acquires what the arrivals released and the
/// bulk copies that completed on the phase.
#[derive(Clone, Debug, PartialEq)]
pub struct MbarrierWait {
    pub bar: BufferId,
    pub idx: Expr,
    pub parity: Expr,
}

impl Instruction for MbarrierWait {
    fn exprs(&self) -> Vec<&Expr> {
        vec![&self.idx, &self.parity]
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        let idx = f(self.idx);
        MbarrierWait { idx, parity: f(self.parity), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { mbarrier: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!("mbarrier_wait {}[{}] parity {}", t.buffer(self.bar), t.expr(&self.idx), t.expr(&self.parity))
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "mbarrier_wait" {
            return None;
        }
        Some((|| {
            let (bar, idx) = barrier(r)?;
            r.keyword("parity")?;
            let parity = r.expr()?;
            Ok(MbarrierWait { bar, idx, parity })
        })())
    }
}

/// One bulk tensor copy (`cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::
/// complete_tx::bytes`), issued by one thread: the box of tensor map `map` (of tensor
/// `src`) whose first element is `src[coords]` (outermost first, as the tensor's indices;
/// the hardware takes them innermost first) lands in shared `dst` from `dst[dst_idx]` on,
/// `bytes` of it, elements past the tensor's edge as zero, swizzled as the map says; the
/// bytes complete on the mbarrier `bar[bar_idx]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaLoad {
    pub map: u32,
    pub src: BufferId,
    pub coords: Vec<Expr>,
    pub dst: BufferId,
    pub dst_idx: Vec<Expr>,
    pub bar: BufferId,
    pub bar_idx: Expr,
    pub bytes: i64,
    /// `.multicast::cluster` with this `ctaMask`: the box lands at the same shared offset
    /// in every block of the cluster the mask names, completing its bytes on each one's
    /// barrier at `bar`'s offset. None: this block only.
    pub multicast: Option<u32>,
}

impl Instruction for TmaLoad {
    fn exprs(&self) -> Vec<&Expr> {
        self.coords.iter().chain(&self.dst_idx).chain(std::iter::once(&self.bar_idx)).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        let coords = map_all(self.coords, f);
        let dst_idx = map_all(self.dst_idx, f);
        TmaLoad { coords, dst_idx, bar_idx: f(self.bar_idx), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Element(&self.coords),
                elements: 0,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Element(&self.dst_idx),
                elements: 0,
            },
        ]
    }
    fn effects(&self) -> Effects {
        Effects { bulk_async: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "tma_load map{} {}[{}] <- {}[{}] on {}[{}] ({} bytes){}",
            self.map,
            t.buffer(self.dst),
            t.exprs(&self.dst_idx),
            t.buffer(self.src),
            t.exprs(&self.coords),
            t.buffer(self.bar),
            t.expr(&self.bar_idx),
            self.bytes,
            self.multicast.map(|mask| format!(" multicast {mask}")).unwrap_or_default()
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "tma_load" {
            return None;
        }
        Some((|| {
            let map = map_number(r)?;
            let (dst, dst_idx) = r.element()?;
            r.punct("<-")?;
            let (src, coords) = r.element()?;
            r.keyword("on")?;
            let (bar, bar_idx) = barrier(r)?;
            r.punct("(")?;
            let bytes = r.int()?;
            r.keyword("bytes")?;
            r.punct(")")?;
            let multicast = if r.keyword("multicast").is_ok() {
                let mask = r.int()?;
                Some(
                    u32::try_from(mask)
                        .ok()
                        .filter(|m| (1..1 << 16).contains(m))
                        .ok_or_else(|| r.error(&format!("bad multicast mask {mask} (1 to 16 bits)")))?,
                )
            } else {
                None
            };
            Ok(TmaLoad { map, src, coords, dst, dst_idx, bar, bar_idx, bytes, multicast })
        })())
    }
}

/// One bulk tensor store (`cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group`),
/// issued by one thread: the box of tensor map `map` (of tensor `dst`) whose first element
/// is `dst[coords]` (outermost first) is written from shared `src` (from `src[src_idx]` on,
/// `bytes` of it, swizzled as the map says); elements past the tensor's edge are not
/// written. It reads shared memory in the async proxy (the generic writes before it need
/// `fence.proxy.async` and a barrier) and belongs to the bulk group the next `bulk_commit`
/// closes: `bulk_wait read` says when its shared bytes may be written again.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaStore {
    pub map: u32,
    pub src: BufferId,
    pub src_idx: Vec<Expr>,
    pub dst: BufferId,
    pub coords: Vec<Expr>,
    pub bytes: i64,
}

impl Instruction for TmaStore {
    fn exprs(&self) -> Vec<&Expr> {
        self.src_idx.iter().chain(&self.coords).collect()
    }
    fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
        let src_idx = map_all(self.src_idx, f);
        TmaStore { src_idx, coords: map_all(self.coords, f), ..self }
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![
            Access {
                buf: self.src,
                kind: AccessKind::Read,
                index: Index::Element(&self.src_idx),
                elements: 0,
            },
            Access {
                buf: self.dst,
                kind: AccessKind::Write,
                index: Index::Element(&self.coords),
                elements: 0,
            },
        ]
    }
    fn effects(&self) -> Effects {
        Effects { bulk_async: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        format!(
            "tma_store map{} {}[{}] <- {}[{}] ({} bytes)",
            self.map,
            t.buffer(self.dst),
            t.exprs(&self.coords),
            t.buffer(self.src),
            t.exprs(&self.src_idx),
            self.bytes
        )
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "tma_store" {
            return None;
        }
        Some((|| {
            let map = map_number(r)?;
            let (dst, coords) = r.element()?;
            r.punct("<-")?;
            let (src, src_idx) = r.element()?;
            r.punct("(")?;
            let bytes = r.int()?;
            r.keyword("bytes")?;
            r.punct(")")?;
            Ok(TmaStore { map, src, src_idx, dst, coords, bytes })
        })())
    }
}

/// `cp.async.bulk.commit_group`: this thread's bulk stores since the last commit form a
/// group.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkCommit;

operandless_instruction!(BulkCommit, "bulk_commit", Effects { mbarrier: true, ..Effects::default() });

/// `cp.async.bulk.wait_group{.read} pending`: until at most `pending` of this thread's
/// bulk groups are in flight — with `read`, only until their shared bytes have been read
/// (the tile may be written again), else until their global writes are done.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkWait {
    pub read: bool,
    pub pending: u32,
}

impl Instruction for BulkWait {
    fn exprs(&self) -> Vec<&Expr> {
        vec![]
    }
    fn map_exprs(self, _: &mut dyn FnMut(Expr) -> Expr) -> Self {
        self
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { mbarrier: true, ..Effects::default() }
    }
    fn text(&self, _: &dyn TextNames) -> String {
        format!("bulk_wait{} {}", if self.read { " read" } else { "" }, self.pending)
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "bulk_wait" {
            return None;
        }
        Some((|| {
            let read = r.keyword("read").is_ok();
            let n = r.int()?;
            let pending = u32::try_from(n).map_err(|_| r.error(&format!("bad group count {n}")))?;
            Ok(BulkWait { read, pending })
        })())
    }
}

/// `mapN`: a tensor map by its number.
fn map_number(r: &mut dyn TextReader) -> Result<u32, String> {
    for k in 0..64u32 {
        if r.keyword(&format!("map{k}")).is_ok() {
            return Ok(k);
        }
    }
    Err(r.error("expected a tensor map (map0, map1, ...)"))
}

/// `setmaxnreg.{inc,dec}.sync.aligned.u32 regs`: the warpgroup's per-thread register
/// budget from here on (the producers give registers back, the consumers take them).
#[derive(Clone, Debug, PartialEq)]
pub struct SetMaxNReg {
    pub inc: bool,
    pub regs: u32,
}

impl Instruction for SetMaxNReg {
    fn exprs(&self) -> Vec<&Expr> {
        vec![]
    }
    fn map_exprs(self, _: &mut dyn FnMut(Expr) -> Expr) -> Self {
        self
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { warp_collective: true, ..Effects::default() }
    }
    fn text(&self, _: &dyn TextNames) -> String {
        format!("setmaxnreg {} {}", if self.inc { "inc" } else { "dec" }, self.regs)
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "setmaxnreg" {
            return None;
        }
        Some((|| {
            let inc = if r.keyword("inc").is_ok() {
                true
            } else {
                r.keyword("dec")?;
                false
            };
            let n = r.int()?;
            let regs = u32::try_from(n).map_err(|_| r.error(&format!("bad register count {n}")))?;
            Ok(SetMaxNReg { inc, regs })
        })())
    }
}

/// `bar.sync id, threads`: a barrier among `threads` threads (whole warps) that use the
/// same `id` — the consumers of a warp-specialized kernel, without its producers. With
/// `arrive` (`bar.arrive`), the threads count towards the barrier and go on without waiting
/// (a ping-pong consumer handing the tensor cores to the other).
#[derive(Clone, Debug, PartialEq)]
pub struct NamedBarrier {
    pub id: u32,
    pub threads: u32,
    pub arrive: bool,
}

impl Instruction for NamedBarrier {
    fn exprs(&self) -> Vec<&Expr> {
        vec![]
    }
    fn map_exprs(self, _: &mut dyn FnMut(Expr) -> Expr) -> Self {
        self
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { barrier: !self.arrive, ..Effects::default() }
    }
    fn text(&self, _: &dyn TextNames) -> String {
        format!("{} {}, {}", if self.arrive { "bar_arrive" } else { "bar_sync" }, self.id, self.threads)
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "bar_sync" && op != "bar_arrive" {
            return None;
        }
        let arrive = op == "bar_arrive";
        Some((|| {
            let id = r.int()?;
            r.punct(",")?;
            let threads = r.int()?;
            let bad = || r.error(&format!("bad named barrier {id}, {threads}"));
            Ok(NamedBarrier {
                id: u32::try_from(id).map_err(|_| bad())?,
                threads: u32::try_from(threads).map_err(|_| bad())?,
                arrive,
            })
        })())
    }
}

/// `fence.mbarrier_init.release.cluster`: makes the barriers' initialization visible to
/// the async proxy (the bulk copies that complete on them), before the block's barrier.
#[derive(Clone, Debug, PartialEq)]
pub struct FenceMbarrierInit;

macro_rules! ordering_instruction {
    ($t:ident, $text:expr) => {
        operandless_instruction!(
            $t,
            $text,
            Effects { orders_tensor_core: true, warp_collective: true, ..Effects::default() }
        );
    };
}
ordering_instruction!(WgmmaFence, "wgmma_fence");
ordering_instruction!(WgmmaCommit, "wgmma_commit");
ordering_instruction!(FenceProxyAsync, "fence_proxy_async");
ordering_instruction!(FenceMbarrierInit, "fence_mbarrier_init");

/// `wgmma.wait_group.sync.aligned pending`: waits until at most `pending` of the
/// warpgroup's committed groups are in flight; the accumulators `acc` (whose registers the
/// retired wgmmas wrote) are defined from here on. `boundary`: the register work since the
/// last wgmma ends a basic block before the wait, which ptxas would otherwise hoist above
/// that work (set by `inject_pipeline` where the consumer warpgroups take turns).
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaWait {
    pub pending: u32,
    pub acc: Vec<BufferId>,
    pub boundary: bool,
}

impl Instruction for WgmmaWait {
    fn exprs(&self) -> Vec<&Expr> {
        vec![]
    }
    fn map_exprs(self, _: &mut dyn FnMut(Expr) -> Expr) -> Self {
        self
    }
    fn accesses(&self) -> Vec<Access<'_>> {
        vec![]
    }
    fn effects(&self) -> Effects {
        Effects { orders_tensor_core: true, warp_collective: true, ..Effects::default() }
    }
    fn text(&self, t: &dyn TextNames) -> String {
        let acc: Vec<String> = self.acc.iter().map(|b| t.buffer(*b)).collect();
        let boundary = if self.boundary { " boundary" } else { "" };
        format!("wgmma_wait {} [{}]{boundary}", self.pending, acc.join(", "))
    }
    fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
        if op != "wgmma_wait" {
            return None;
        }
        Some((|| {
            let n = r.int()?;
            let pending = u32::try_from(n).map_err(|_| r.error(&format!("bad group count {n}")))?;
            r.punct("[")?;
            let mut acc = Vec::new();
            while !r.is_punct("]") {
                acc.push(r.buffer()?);
                if r.is_punct(",") {
                    r.punct(",")?;
                }
            }
            r.punct("]")?;
            let boundary = r.is_keyword("boundary");
            if boundary {
                r.keyword("boundary")?;
            }
            Ok(WgmmaWait { pending, acc, boundary })
        })())
    }
}

macro_rules! instructions {
    ($($variant:ident),* $(,)?) => {
        /// A thread-level instruction (see the module doc).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Inst {
            $($variant($variant)),*
        }

        impl Instruction for Inst {
            fn exprs(&self) -> Vec<&Expr> {
                match self { $(Inst::$variant(i) => i.exprs()),* }
            }
            fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Self {
                match self { $(Inst::$variant(i) => Inst::$variant(i.map_exprs(f))),* }
            }
            fn accesses(&self) -> Vec<Access<'_>> {
                match self { $(Inst::$variant(i) => i.accesses()),* }
            }
            fn effects(&self) -> Effects {
                match self { $(Inst::$variant(i) => i.effects()),* }
            }
            fn text(&self, names: &dyn TextNames) -> String {
                match self { $(Inst::$variant(i) => i.text(names)),* }
            }
            /// Each instruction's parser in turn, by the mnemonic.
            fn parse(op: &str, r: &mut dyn TextReader) -> Option<Result<Self, String>> {
                $(
                    if let Some(i) = $variant::parse(op, r) {
                        return Some(i.map(Inst::$variant));
                    }
                )*
                None
            }
        }

        $(
            impl From<$variant> for Inst {
                fn from(i: $variant) -> Inst {
                    Inst::$variant(i)
                }
            }
        )*
    };
}

instructions!(
    VecCopy,
    VecAtomic,
    Ldmatrix,
    Stmatrix,
    Mma,
    Wgmma,
    WgmmaFence,
    WgmmaCommit,
    WgmmaWait,
    FenceProxyAsync,
    FenceMbarrierInit,
    MbarrierInit,
    MbarrierArrive,
    MbarrierExpectTx,
    MbarrierWait,
    TmaLoad,
    TmaStore,
    BulkCommit,
    BulkWait,
    SetMaxNReg,
    NamedBarrier,
    AsyncCopy,
    AsyncArrive,
    AsyncCommit,
    AsyncWait,
    Sync,
    ClusterSync,
    ClusterArrive,
    ClusterWait,
    SyncWarp,
    Printf,
    CallExtern,
    BindPointer,
    Trap,
    LoopBreak,
    GridDepWait,
    GridDepLaunch
);
