//! Thread-level execution: runs a lowered module (the output of `lower_tile_ops`) on the
//! CPU with a model of a block's threads, so CI can check the lowering without a GPU.
//!
//! **Model.** Blocks run one after another (`bx` fastest). In a block, all `threads`
//! threads run *in lockstep, a statement at a time*: every active thread finishes a
//! statement before any starts the next. Control flow in lowered code is uniform except
//! `if`s on thread coordinates, which split the active threads (`then` first, then `else`).
//! Each expression is evaluated as a column, one value per active thread, with the
//! scalar semantics of the tile-level interpreter (`num.rs`), which mirror the generated
//! CUDA. `select`, `and` and `or` evaluate only the operands C would, so guarded loads
//! are only made by the threads whose guard holds.
//!
//! **Memory** is bytes, as on the GPU: global tensors are the arguments' bytes; shared
//! buffers live at their planned `shared_offset` in one array of the block's shared
//! memory, at the offsets of their layout (`SharedLayout::offset`, as the generated code); `local` buffers (register
//! arrays, fragments included) are per thread. Shared and local memory start filled with
//! 0xFF (NaN as floats) so reads of never-written bytes show in the results.
//!
//! **Warp-collective operations** (`shfl_xor`, `ldmatrix`, `mma.sync`) need all 32 lanes of
//! the warp active; they are evaluated over whole warps with the PTX fragment layouts.
//!
//! **Barriers and races.** `sync` must be reached by every thread of the block, else the
//! run stops with a deadlock report. Between barriers, a shared-memory byte written by one
//! thread and read or written by another is a race (reported), as is any access to bytes
//! with a `cp.async` in flight. `cp.async` data lands in shared memory only when an
//! `async_wait` (`cp.async.wait_group N`: all but the newest N committed groups of *this
//! thread*) completes its group.
//!
//! **Errors** (a compiler bug the differential check should catch): a global access out
//! of the tensor's bounds, any on-chip index out of range, a vector access (`VecCopy`,
//! 16-byte `cp.async`, `ldmatrix` rows) that is not aligned to its size.

use crate::num::{self, OpError, Val};
use crate::Arg;
use tile_ir::{
    inst, BinOp, BufferId, DType, Diagnostic, Expr, Inst, Loc, MmaAtom, Module, Param, Scope, SharedLayout,
    Stmt,
};
use tile_ir::{Level, UnOp, VarKind};

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Run only these blocks `(bx, by, bz)` (others are skipped); all blocks when `None`.
    pub blocks: Option<Vec<[i64; 3]>>,
}

/// What a run observed.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub blocks_run: usize,
    /// Shared-memory bank conflicts per instruction kind, summed over the run.
    pub bank_conflicts: Vec<BankConflicts>,
}

/// Shared-memory wavefronts of one kind of access (4-byte banks, 32 banks per cycle; a
/// warp's request needs as many wavefronts as the most distinct 4-byte words one bank
/// is asked for, counted per 128-byte phase for wide accesses).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BankConflicts {
    /// `ldmatrix A_shared`, `store acc_xwarp`, …
    pub what: String,
    /// Warp-level requests.
    pub requests: u64,
    /// Wavefronts they needed (equal to `ideal` when conflict-free).
    pub wavefronts: u64,
    /// Wavefronts they would need without conflicts.
    pub ideal: u64,
}

/// Run a thread-level module over the whole grid.
pub fn run(m: &Module, args: &mut [Arg]) -> Result<(), Diagnostic> {
    run_with(m, args, &Options::default()).map(|_| ())
}

/// Run a thread-level module over the blocks `opts` names. Tensor arguments are updated in
/// place, also when an error stops the run.
pub fn run_with(m: &Module, args: &mut [Arg], opts: &Options) -> Result<Report, Diagnostic> {
    if m.level != Level::Thread {
        return Err(error("the thread-level interpreter runs lowered modules; this one is tile level"));
    }
    if args.len() != m.params.len() {
        return Err(error(format!("'{}' takes {} arguments, got {}", m.name, m.params.len(), args.len())));
    }
    let mut machine = Machine::new(m)?;
    for (p, a) in m.params.iter().zip(args.iter()) {
        match (p, a) {
            (Param::Tensor { name, buffer }, Arg::Tensor(bytes)) => {
                let want = m.buffer(*buffer).bytes() as usize;
                if bytes.len() != want {
                    return Err(error(format!(
                        "argument '{name}': expected {want} bytes, got {}",
                        bytes.len()
                    )));
                }
                machine.global[buffer.0 as usize] = bytes.clone();
            }
            (Param::Scalar { name, var }, a) => {
                let v = crate::scalar_arg(name, m.var(*var).dtype, a)?;
                machine.uniform[var.0 as usize] = Some(v);
            }
            (Param::Tensor { name, .. }, _) => {
                return Err(error(format!("argument '{name}': expected a tensor")));
            }
        }
    }
    let result = machine.run_grid(opts);
    for (p, a) in m.params.iter().zip(args.iter_mut()) {
        if let (Param::Tensor { buffer, .. }, Arg::Tensor(bytes)) = (p, a) {
            bytes.copy_from_slice(&machine.global[buffer.0 as usize]);
        }
    }
    result?;
    let mut bank_conflicts: Vec<BankConflicts> = machine.banks.into_values().collect();
    bank_conflicts.sort_by(|a, b| a.what.cmp(&b.what));
    Ok(Report { blocks_run: machine.blocks_run, bank_conflicts })
}

fn error(msg: impl Into<String>) -> Diagnostic {
    Diagnostic::error(msg, Loc::UNKNOWN)
}

fn read_val(bytes: &[u8], dt: DType) -> Val {
    let b = |n: usize| -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..n].copy_from_slice(&bytes[..n]);
        out
    };
    match dt {
        DType::Bool => Val::I((bytes[0] != 0) as i64),
        DType::I8 => Val::I(bytes[0] as i8 as i64),
        DType::U8 => Val::I(bytes[0] as i64),
        DType::I16 => Val::I(i16::from_le_bytes([bytes[0], bytes[1]]) as i64),
        DType::I32 => Val::I(i32::from_le_bytes(b(4)[..4].try_into().unwrap()) as i64),
        DType::U32 => Val::I(u32::from_le_bytes(b(4)[..4].try_into().unwrap()) as i64),
        DType::I64 => Val::I(i64::from_le_bytes(b(8))),
        DType::F16 => Val::F(num::f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])) as f64),
        DType::BF16 => Val::F(num::bf16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])) as f64),
        DType::F32 => Val::F(f32::from_le_bytes(b(4)[..4].try_into().unwrap()) as f64),
        DType::F64 => Val::F(f64::from_le_bytes(b(8))),
    }
}

/// Store a value already of `dt` (wrapped or rounded).
fn write_val(out: &mut [u8], dt: DType, v: Val) {
    match dt {
        DType::Bool => out[0] = (v.as_i64() != 0) as u8,
        DType::I8 | DType::U8 => out[0] = v.as_i64() as u8,
        DType::I16 => out[..2].copy_from_slice(&(v.as_i64() as i16).to_le_bytes()),
        DType::I32 | DType::U32 => out[..4].copy_from_slice(&(v.as_i64() as u32).to_le_bytes()),
        DType::I64 => out[..8].copy_from_slice(&v.as_i64().to_le_bytes()),
        DType::F16 => out[..2].copy_from_slice(&num::f32_to_f16_bits(v.as_f64() as f32).to_le_bytes()),
        DType::BF16 => out[..2].copy_from_slice(&num::f32_to_bf16_bits(v.as_f64() as f32).to_le_bytes()),
        DType::F32 => out[..4].copy_from_slice(&(v.as_f64() as f32).to_le_bytes()),
        DType::F64 => out[..8].copy_from_slice(&v.as_f64().to_le_bytes()),
    }
}

/// Thread ids as compact ranges: `0-31, 64-95`.
fn ranges(ids: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { format!("{}", ids[i]) } else { format!("{}-{}", ids[i], ids[j]) });
        i = j + 1;
    }
    parts.join(", ")
}

const NOBODY: u32 = u32::MAX;
const SEVERAL: u32 = u32::MAX - 1;

/// Per shared byte: who last wrote and read it in which barrier interval, and how many
/// `cp.async` writes to it are in flight.
struct RaceTracker {
    write_epoch: Vec<u32>,
    writer: Vec<u32>,
    read_epoch: Vec<u32>,
    reader: Vec<u32>,
    in_flight: Vec<u16>,
}

impl RaceTracker {
    fn new(n: usize) -> RaceTracker {
        RaceTracker {
            write_epoch: vec![0; n],
            writer: vec![NOBODY; n],
            read_epoch: vec![0; n],
            reader: vec![NOBODY; n],
            in_flight: vec![0; n],
        }
    }
    fn reset(&mut self) {
        self.write_epoch.fill(0);
        self.writer.fill(NOBODY);
        self.read_epoch.fill(0);
        self.reader.fill(NOBODY);
        self.in_flight.fill(0);
    }
}

/// One thread's `cp.async` state: copies not yet committed, committed groups oldest first.
#[derive(Default, Clone)]
struct AsyncState {
    open: Vec<PendingCopy>,
    groups: std::collections::VecDeque<Vec<PendingCopy>>,
}

#[derive(Clone)]
struct PendingCopy {
    smem_offset: usize,
    data: [u8; 16],
}

/// Where an access lands.
#[derive(Clone, Copy, PartialEq)]
enum Space {
    Global,
    Shared,
    Local,
}

struct Machine<'m> {
    m: &'m Module,
    threads: usize,
    /// Block-uniform values: scalar parameters and block indices.
    uniform: Vec<Option<Val>>,
    /// Per-thread values of loop variables, lets and the thread index: `var * threads + t`.
    env: Vec<Val>,
    bound: Vec<bool>,
    global: Vec<Vec<u8>>,
    /// Per local buffer, `threads` copies of its bytes.
    local: Vec<Vec<u8>>,
    smem: Vec<u8>,
    races: RaceTracker,
    /// Barrier intervals so far in this block (starts at 1).
    epoch: u32,
    asyncs: Vec<AsyncState>,
    block: [i64; 3],
    /// The last comment passed: names the user's line of the tile op being run.
    context: String,
    blocks_run: usize,
    banks: std::collections::BTreeMap<String, BankConflicts>,
    /// The swizzled offset expression (`SharedLayout::offset`) of each access to a swizzled
    /// tile, by the address of its index list: built once, evaluated per access.
    swizzled: std::collections::HashMap<usize, Expr>,
    /// Variables some `let` binds, by id.
    let_bound: Vec<bool>,
}

type Col = Vec<Val>;

impl<'m> Machine<'m> {
    fn new(m: &'m Module) -> Result<Machine<'m>, Diagnostic> {
        let threads = m.kernel.threads as usize;
        let mut smem_bytes = 0usize;
        for b in &m.buffers {
            if b.scope == Scope::Shared {
                let off = b
                    .shared_offset
                    .ok_or_else(|| error(format!("shared buffer '{}' has no planned offset", b.name)))?;
                smem_bytes = smem_bytes.max(off as usize + b.bytes() as usize);
            }
            if b.scope == Scope::Fragment {
                return Err(error(format!("fragment '{}' left after lowering", b.name)));
            }
        }
        let local = m
            .buffers
            .iter()
            .map(|b| if b.scope == Scope::Local { vec![0xFF; b.bytes() as usize * threads] } else { vec![] })
            .collect();
        Ok(Machine {
            m,
            threads,
            uniform: vec![None; m.vars.len()],
            env: vec![Val::I(0); m.vars.len() * threads],
            bound: vec![false; m.vars.len()],
            global: vec![vec![]; m.buffers.len()],
            local,
            smem: vec![0xFF; smem_bytes],
            races: RaceTracker::new(smem_bytes),
            epoch: 1,
            asyncs: vec![AsyncState::default(); threads],
            block: [0; 3],
            context: String::new(),
            blocks_run: 0,
            banks: Default::default(),
            swizzled: Default::default(),
            let_bound: {
                let mut bound = vec![false; m.vars.len()];
                tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
                    if let Stmt::Let { var, .. } = s {
                        bound[var.0 as usize] = true;
                    }
                });
                bound
            },
        })
    }

    fn err(&self, msg: impl std::fmt::Display) -> Diagnostic {
        let [x, y, z] = self.block;
        let at = if self.context.is_empty() { String::new() } else { format!(" at {}", self.context) };
        error(format!("{msg} (block ({x}, {y}, {z}){at})"))
    }

    fn run_grid(&mut self, opts: &Options) -> Result<(), Diagnostic> {
        let m = self.m;
        let mut grid = [1i64; 3];
        for (axis, g) in m.kernel.grid.iter().enumerate().take(3) {
            let v = self.eval(g, &[0])?[0].as_i64();
            if v <= 0 {
                return Err(error(format!("grid dimension {axis} is {v}")));
            }
            grid[axis] = v;
        }
        let mut blocks = Vec::new();
        match &opts.blocks {
            Some(list) => {
                blocks.extend(list.iter().filter(|b| (0..3).all(|a| b[a] >= 0 && b[a] < grid[a])).copied())
            }
            None => {
                for bz in 0..grid[2] {
                    for by in 0..grid[1] {
                        for bx in 0..grid[0] {
                            blocks.push([bx, by, bz]);
                        }
                    }
                }
            }
        }
        let all: Vec<u32> = (0..self.threads as u32).collect();
        for block in blocks {
            self.start_block(block);
            let body = &m.kernel.body;
            self.stmts(body, &all)?;
            self.blocks_run += 1;
        }
        Ok(())
    }

    fn start_block(&mut self, block: [i64; 3]) {
        self.block = block;
        for (i, v) in self.m.vars.iter().enumerate() {
            match v.kind {
                // a block index a let binds (`rasterize`) is unbound until the let runs
                VarKind::BlockIdx(_) if self.let_bound[i] => {
                    self.uniform[i] = None;
                    self.bound[i] = false;
                }
                VarKind::BlockIdx(axis) | VarKind::LaunchIdx(axis) => {
                    self.uniform[i] = Some(Val::I(block[axis as usize]))
                }
                VarKind::ThreadIdx => {
                    for t in 0..self.threads {
                        self.env[i * self.threads + t] = Val::I(t as i64);
                    }
                    self.bound[i] = true;
                }
                VarKind::Loop | VarKind::Temp => self.bound[i] = false,
                VarKind::Param => {}
            }
        }
        for l in &mut self.local {
            l.fill(0xFF);
        }
        self.smem.fill(0xFF);
        self.races.reset();
        self.epoch = 1;
        for a in &mut self.asyncs {
            *a = AsyncState::default();
        }
        self.context.clear();
    }

    // ---------------------------------------------------------------- expressions

    fn op_error(&self, e: OpError, op: &str, dt: DType) -> Diagnostic {
        match e {
            OpError::DivisionByZero => self.err("integer division by zero"),
            OpError::Unsupported => self.err(format!("'{op}' is not defined on {dt}")),
        }
    }

    /// Evaluate `e` for each thread of `active` (ascending ids).
    fn eval(&mut self, e: &Expr, active: &[u32]) -> Result<Col, Diagnostic> {
        let n = self.threads;
        Ok(match e {
            Expr::Const { value, dtype } => vec![num::constant(*value, *dtype); active.len()],
            Expr::Var { id, .. } => {
                let i = id.0 as usize;
                if let Some(v) = self.uniform[i] {
                    vec![v; active.len()]
                } else if self.bound[i] {
                    active.iter().map(|&t| self.env[i * n + t as usize]).collect()
                } else {
                    return Err(
                        self.err(format!("variable '{}' read before it is bound", self.m.var(*id).name))
                    );
                }
            }
            Expr::Load { buf, idx, dtype, .. } => {
                let b = self.m.buffer(*buf);
                let eb = b.dtype.bytes() as usize;
                let addrs = self.addresses(*buf, idx, active, 1, "load")?;
                let space = self.space(*buf);
                let mut out = Vec::with_capacity(active.len());
                for (k, &t) in active.iter().enumerate() {
                    let a = addrs[k];
                    if space == Space::Shared {
                        self.track_read(t, a, eb)?;
                    }
                    let v = read_val(&self.bytes(*buf, t)[a..a + eb], b.dtype);
                    out.push(if b.dtype == *dtype { v } else { num::cast(v, b.dtype, *dtype) });
                }
                if space == Space::Shared {
                    self.count_banks(&format!("load {}", b.name), active, &addrs, eb);
                }
                out
            }
            Expr::Binary { op: op @ (BinOp::And | BinOp::Or), a, b, .. } => {
                let x = self.eval(a, active)?;
                let want = *op == BinOp::And;
                let rest: Vec<u32> = active
                    .iter()
                    .zip(&x)
                    .filter(|(_, v)| (v.as_i64() != 0) == want)
                    .map(|(t, _)| *t)
                    .collect();
                let y = self.eval(b, &rest)?;
                let mut yi = y.into_iter();
                x.iter()
                    .map(|v| {
                        if (v.as_i64() != 0) == want {
                            Val::I((yi.next().expect("one value per thread").as_i64() != 0) as i64)
                        } else {
                            Val::I(!want as i64)
                        }
                    })
                    .collect()
            }
            Expr::Binary { op, a, b, dtype } => {
                let x = self.eval(a, active)?;
                let y = self.eval(b, active)?;
                let dt = a.dtype();
                let mut out = Vec::with_capacity(x.len());
                for (p, q) in x.into_iter().zip(y) {
                    out.push(
                        num::binary(*op, p, q, dt, *dtype).map_err(|e| self.op_error(e, op.name(), dt))?,
                    );
                }
                out
            }
            Expr::Unary { op, a, dtype } => {
                let x = self.eval(a, active)?;
                let mut out = Vec::with_capacity(x.len());
                for v in x {
                    out.push(if dtype.is_float() {
                        Val::F(num::float_unary(*op, v.as_f64(), *dtype))
                    } else if *op == UnOp::Not && a.dtype().is_float() {
                        Val::I((v.as_f64() == 0.0) as i64)
                    } else {
                        Val::I(
                            num::int_unary(*op, v.as_i64(), *dtype)
                                .map_err(|e| self.op_error(e, op.name(), *dtype))?,
                        )
                    });
                }
                out
            }
            Expr::Cast { a, dtype } => {
                let from = a.dtype();
                self.eval(a, active)?.into_iter().map(|v| num::cast(v, from, *dtype)).collect()
            }
            Expr::Select { cond, a, b, .. } => {
                let c = self.eval(cond, active)?;
                let (mut yes, mut no) = (Vec::new(), Vec::new());
                for (&t, v) in active.iter().zip(&c) {
                    if v.as_i64() != 0 {
                        yes.push(t)
                    } else {
                        no.push(t)
                    }
                }
                let x = self.eval(a, &yes)?;
                let y = self.eval(b, &no)?;
                let (mut xi, mut yi) = (x.into_iter(), y.into_iter());
                c.iter()
                    .map(|v| {
                        if v.as_i64() != 0 { xi.next() } else { yi.next() }.expect("one value per thread")
                    })
                    .collect()
            }
            Expr::ShflXor { a, mask, .. } => {
                self.full_warps(active, "shfl_xor")?;
                let x = self.eval(a, active)?;
                let mut pos = vec![usize::MAX; n];
                for (k, &t) in active.iter().enumerate() {
                    pos[t as usize] = k;
                }
                active.iter().map(|&t| x[pos[(t ^ (mask & 31)) as usize]]).collect()
            }
        })
    }

    /// Warp-collective operations need every lane of each warp they touch.
    fn full_warps(&self, active: &[u32], what: &str) -> Result<(), Diagnostic> {
        let mut count = std::collections::BTreeMap::<u32, u32>::new();
        for &t in active {
            *count.entry(t / 32).or_default() += 1;
        }
        let warp_size = |w: u32| (self.threads as u32 - w * 32).min(32);
        if let Some((w, c)) = count.iter().find(|(w, c)| **c != warp_size(**w)) {
            return Err(
                self.err(format!("{what} run by {c} of the 32 lanes of warp {w} (it needs all of them)"))
            );
        }
        Ok(())
    }

    fn space(&self, buf: BufferId) -> Space {
        match self.m.buffer(buf).scope {
            Scope::Global => Space::Global,
            Scope::Shared => Space::Shared,
            _ => Space::Local,
        }
    }

    /// The bytes an access by thread `t` indexes into (offsets from [`Machine::addresses`]).
    fn bytes(&self, buf: BufferId, t: u32) -> &[u8] {
        let b = self.m.buffer(buf);
        match self.space(buf) {
            Space::Global => &self.global[buf.0 as usize],
            Space::Shared => &self.smem,
            Space::Local => {
                let size = b.bytes() as usize;
                &self.local[buf.0 as usize][t as usize * size..(t as usize + 1) * size]
            }
        }
    }

    fn bytes_mut(&mut self, buf: BufferId, t: u32) -> &mut [u8] {
        let b = self.m.buffer(buf);
        match self.space(buf) {
            Space::Global => &mut self.global[buf.0 as usize],
            Space::Shared => &mut self.smem,
            Space::Local => {
                let size = b.bytes() as usize;
                &mut self.local[buf.0 as usize][t as usize * size..(t as usize + 1) * size]
            }
        }
    }

    /// Byte offsets of `buf[idx]` for each active thread: into the tensor (global), the
    /// block's shared memory (planned offset, swizzle applied) or the thread's copy of a
    /// local buffer. Checks every index against its dimension, that `width` elements fit,
    /// and that a vector access is aligned to its size.
    fn addresses(
        &mut self,
        buf: BufferId,
        idx: &[Expr],
        active: &[u32],
        width: usize,
        what: &str,
    ) -> Result<Vec<usize>, Diagnostic> {
        let b = self.m.buffer(buf);
        if idx.len() != b.shape.len() {
            return Err(self.err(format!("'{}' indexed with {} indices", b.name, idx.len())));
        }
        let strides = b.strides();
        let mut flat = vec![0i64; active.len()];
        for (d, e) in idx.iter().enumerate() {
            let col = self.eval(e, active)?;
            for (k, v) in col.iter().enumerate() {
                let i = v.as_i64();
                if i < 0 || i >= b.shape[d] {
                    let scope = if b.scope == Scope::Global {
                        "out of the bounds of tensor"
                    } else {
                        "out of range in"
                    };
                    return Err(self.err(format!(
                        "{what} by thread {}: index {i} of dimension {d} is {scope} '{}' (shape {:?})",
                        active[k], b.name, b.shape
                    )));
                }
                flat[k] += i * strides[d];
            }
        }
        let eb = b.dtype.bytes() as i64;
        let vec_bytes = width as i64 * eb;
        // a swizzled tile: the element offsets the generated code computes, from the one
        // definition of its layout
        let swizzled = if b.swizzle.is_some() {
            let key = idx.as_ptr() as usize;
            let offset = match self.swizzled.get(&key) {
                Some(e) => e.clone(),
                None => {
                    let e = SharedLayout::of(b).offset(idx);
                    self.swizzled.insert(key, e.clone());
                    e
                }
            };
            Some(self.eval(&offset, active)?.iter().map(|v| v.as_i64()).collect::<Vec<_>>())
        } else {
            None
        };
        let mut out = Vec::with_capacity(active.len());
        for (k, &f) in flat.iter().enumerate() {
            if f + width as i64 > b.num_elements() {
                return Err(self.err(format!(
                    "{what} by thread {}: {width} elements from element {f} run past the end of '{}' ({} elements)",
                    active[k],
                    b.name,
                    b.num_elements()
                )));
            }
            let mut byte = f * eb;
            if let Some(offsets) = &swizzled {
                byte = offsets[k] * eb;
            }
            if let Some(off) = b.shared_offset {
                byte += off as i64;
            }
            // global tensors are 16-byte aligned (KernelInfo's "align"), local arrays too
            if width > 1 && byte % vec_bytes != 0 {
                return Err(self.err(format!(
                    "{what} by thread {}: a {vec_bytes}-byte access to '{}' at byte {byte} is not aligned",
                    active[k], b.name
                )));
            }
            out.push(byte as usize);
        }
        Ok(out)
    }

    // ---------------------------------------------------------------- shared memory races

    fn race(&self, kind: &str, t: u32, other: u32, byte: usize) -> Diagnostic {
        let who = if other == SEVERAL { "other threads".to_string() } else { format!("thread {other}") };
        self.err(format!("shared-memory race ({kind}): thread {t} and {who} touch shared byte {byte} with no barrier between"))
    }

    fn track_read(&mut self, t: u32, at: usize, len: usize) -> Result<(), Diagnostic> {
        for a in at..at + len {
            if self.races.in_flight[a] > 0 {
                return Err(self.err(format!(
                    "thread {t} reads shared byte {a} while a cp.async into it is in flight (missing async_wait)"
                )));
            }
            if self.races.write_epoch[a] == self.epoch && self.races.writer[a] != t {
                return Err(self.race("read after write", t, self.races.writer[a], a));
            }
            if self.races.read_epoch[a] == self.epoch && self.races.reader[a] != t {
                self.races.reader[a] = SEVERAL;
            } else {
                self.races.read_epoch[a] = self.epoch;
                self.races.reader[a] = t;
            }
        }
        Ok(())
    }

    fn check_write(&self, t: u32, at: usize, len: usize) -> Result<(), Diagnostic> {
        for a in at..at + len {
            if self.races.in_flight[a] > 0 {
                return Err(self.err(format!(
                    "thread {t} writes shared byte {a} while a cp.async into it is in flight"
                )));
            }
            if self.races.write_epoch[a] == self.epoch && self.races.writer[a] != t {
                return Err(self.race("write after write", t, self.races.writer[a], a));
            }
            if self.races.read_epoch[a] == self.epoch && self.races.reader[a] != t {
                return Err(self.race("write after read", t, self.races.reader[a], a));
            }
        }
        Ok(())
    }

    fn track_write(&mut self, t: u32, at: usize, len: usize) -> Result<(), Diagnostic> {
        self.check_write(t, at, len)?;
        for a in at..at + len {
            self.races.write_epoch[a] = self.epoch;
            self.races.writer[a] = t;
        }
        Ok(())
    }

    /// Count the wavefronts a shared access of `bytes` per lane needs, per warp.
    fn count_banks(&mut self, what: &str, active: &[u32], addrs: &[usize], bytes: usize) {
        let mut k = 0;
        while k < active.len() {
            let warp = active[k] / 32;
            let mut end = k;
            while end < active.len() && active[end] / 32 == warp {
                end += 1;
            }
            // lanes are served in phases of 128 bytes: 32 lanes of ≤4 bytes, 16 of 8, 8 of 16
            let per_phase = (128 / bytes.max(4)).max(1);
            let (mut wavefronts, mut ideal) = (0u64, 0u64);
            for phase in addrs[k..end].chunks(per_phase) {
                let mut words: Vec<usize> = Vec::new();
                for &a in phase {
                    for w in (a / 4)..(a + bytes).div_ceil(4) {
                        words.push(w);
                    }
                }
                words.sort_unstable();
                words.dedup();
                let mut per_bank = [0u64; 32];
                for w in &words {
                    per_bank[w % 32] += 1;
                }
                wavefronts += per_bank.iter().copied().max().unwrap_or(0).max(1);
                ideal += (words.len() as u64).div_ceil(32).max(1);
            }
            let e = self
                .banks
                .entry(what.to_string())
                .or_insert_with(|| BankConflicts { what: what.to_string(), ..Default::default() });
            e.requests += 1;
            e.wavefronts += wavefronts;
            e.ideal += ideal;
            k = end;
        }
    }

    // ---------------------------------------------------------------- statements

    fn stmts(&mut self, body: &[Stmt], active: &[u32]) -> Result<(), Diagnostic> {
        for s in body {
            if active.is_empty() {
                return Ok(());
            }
            self.stmt(s, active)?;
        }
        Ok(())
    }

    fn bind(&mut self, var: tile_ir::VarId, active: &[u32], values: &[Val]) {
        let i = var.0 as usize;
        self.bound[i] = true;
        for (&t, v) in active.iter().zip(values) {
            self.env[i * self.threads + t as usize] = *v;
        }
    }

    fn stmt(&mut self, s: &Stmt, active: &[u32]) -> Result<(), Diagnostic> {
        let m = self.m;
        match s {
            Stmt::Comment(c) => self.context = c.clone(),
            Stmt::Let { var, value } => {
                let v = self.eval(value, active)?;
                self.bind(*var, active, &v);
            }
            Stmt::Store { buf, idx, value, .. } => {
                let b = m.buffer(*buf);
                let eb = b.dtype.bytes() as usize;
                let v = self.eval(value, active)?;
                let addrs = self.addresses(*buf, idx, active, 1, "store")?;
                let shared = self.space(*buf) == Space::Shared;
                for (k, &t) in active.iter().enumerate() {
                    if shared {
                        self.track_write(t, addrs[k], eb)?;
                    }
                    let x = num::cast(v[k], value.dtype(), b.dtype);
                    write_val(&mut self.bytes_mut(*buf, t)[addrs[k]..addrs[k] + eb], b.dtype, x);
                }
                if shared {
                    self.count_banks(&format!("store {}", b.name), active, &addrs, eb);
                }
            }
            Stmt::AtomicAdd { buf, idx, value, .. } => {
                let b = m.buffer(*buf);
                let eb = b.dtype.bytes() as usize;
                let v = self.eval(value, active)?;
                let addrs = self.addresses(*buf, idx, active, 1, "atomic add")?;
                for (k, &t) in active.iter().enumerate() {
                    let x = num::cast(v[k], value.dtype(), b.dtype);
                    let slot = &mut self.bytes_mut(*buf, t)[addrs[k]..addrs[k] + eb];
                    let old = read_val(slot, b.dtype);
                    let new = num::binary(BinOp::Add, old, x, b.dtype, b.dtype)
                        .map_err(|_| error(format!("atomic add on {}", b.dtype)))?;
                    write_val(slot, b.dtype, new);
                }
            }
            Stmt::For { var, start, extent, body, .. } => {
                let s0 = self.eval(start, active)?;
                let ext = self.eval(extent, active)?;
                let uniform = s0.windows(2).all(|w| w[0] == w[1]) && ext.windows(2).all(|w| w[0] == w[1]);
                if uniform {
                    let (s0, n) = (s0[0].as_i64(), ext[0].as_i64());
                    for j in 0..n.max(0) {
                        self.bind(*var, active, &vec![Val::I(s0 + j); active.len()]);
                        self.stmts(body, active)?;
                    }
                } else {
                    let longest = ext.iter().map(|v| v.as_i64()).max().unwrap_or(0);
                    for j in 0..longest.max(0) {
                        let mut now = Vec::new();
                        let mut vals = Vec::new();
                        for (k, &t) in active.iter().enumerate() {
                            if j < ext[k].as_i64() {
                                now.push(t);
                                vals.push(Val::I(s0[k].as_i64() + j));
                            }
                        }
                        self.bind(*var, &now, &vals);
                        self.stmts(body, &now)?;
                    }
                }
            }
            Stmt::If { cond, then, otherwise, .. } => {
                let c = self.eval(cond, active)?;
                let (mut yes, mut no) = (Vec::new(), Vec::new());
                for (&t, v) in active.iter().zip(&c) {
                    if v.as_i64() != 0 {
                        yes.push(t)
                    } else {
                        no.push(t)
                    }
                }
                self.stmts(then, &yes)?;
                self.stmts(otherwise, &no)?;
            }
            Stmt::Inst(i) => self.inst(i, active)?,
            Stmt::SourceLine(_) => {}
            // copy, fill, reduce, gemm, parallel, async, print, device_assert
            _ => return Err(self.err("tile op left after lowering")),
        }
        Ok(())
    }

    /// One thread-level instruction, executed by the active threads in lockstep.
    fn inst(&mut self, i: &Inst, active: &[u32]) -> Result<(), Diagnostic> {
        let m = self.m;
        match i {
            Inst::Sync(_) => {
                if active.len() != self.threads {
                    return Err(self.err(format!(
                        "deadlock: barrier reached by threads {} of {} (the others never arrive)",
                        ranges(active),
                        self.threads
                    )));
                }
                self.epoch += 1;
            }
            Inst::VecCopy(inst::VecCopy { dst, dst_idx, src, src_idx, width }) => {
                let (db, sb) = (m.buffer(*dst), m.buffer(*src));
                let bytes = *width as usize * sb.dtype.bytes() as usize;
                if db.dtype.bytes() != sb.dtype.bytes() {
                    return Err(self.err(format!("vector copy between {} and {}", sb.dtype, db.dtype)));
                }
                let from = self.addresses(*src, src_idx, active, *width as usize, "vector load")?;
                let to = self.addresses(*dst, dst_idx, active, *width as usize, "vector store")?;
                let (ss, ds) = (self.space(*src) == Space::Shared, self.space(*dst) == Space::Shared);
                for (k, &t) in active.iter().enumerate() {
                    if ss {
                        self.track_read(t, from[k], bytes)?;
                    }
                    let mut data = [0u8; 16];
                    data[..bytes].copy_from_slice(&self.bytes(*src, t)[from[k]..from[k] + bytes]);
                    if ds {
                        self.track_write(t, to[k], bytes)?;
                    }
                    self.bytes_mut(*dst, t)[to[k]..to[k] + bytes].copy_from_slice(&data[..bytes]);
                }
                if ss {
                    self.count_banks(&format!("vector load {}", sb.name), active, &from, bytes);
                }
                if ds {
                    self.count_banks(&format!("vector store {}", db.name), active, &to, bytes);
                }
            }
            Inst::AsyncCopy(inst::AsyncCopy { dst, dst_idx, src, src_idx, src_bytes }) => {
                let (db, sb) = (m.buffer(*dst), m.buffer(*src));
                if self.space(*dst) != Space::Shared || self.space(*src) != Space::Global {
                    return Err(self.err("cp.async must copy from global to shared memory"));
                }
                let n = self.eval(src_bytes, active)?;
                let to = self.addresses(*dst, dst_idx, active, 16 / db.dtype.bytes() as usize, "cp.async")?;
                // the source is only read for `src_bytes` bytes; its address must be aligned
                let from = self.addresses(*src, src_idx, active, 1, "cp.async")?;
                for (k, &t) in active.iter().enumerate() {
                    let count = n[k].as_i64();
                    if !(0..=16).contains(&count) {
                        return Err(self.err(format!("cp.async by thread {t} of {count} source bytes")));
                    }
                    if from[k] % 16 != 0 {
                        return Err(self.err(format!(
                            "cp.async by thread {t}: source byte {} of '{}' is not 16-byte aligned",
                            from[k], sb.name
                        )));
                    }
                    let count = count as usize;
                    if from[k] + count > self.global[src.0 as usize].len() {
                        return Err(self.err(format!(
                            "cp.async by thread {t}: {count} bytes from byte {} run past the end of '{}'",
                            from[k], sb.name
                        )));
                    }
                    let mut data = [0u8; 16];
                    data[..count].copy_from_slice(&self.global[src.0 as usize][from[k]..from[k] + count]);
                    // the bytes may land any time until the wait: nobody may touch them now
                    self.check_write(t, to[k], 16)?;
                    for a in to[k]..to[k] + 16 {
                        self.races.in_flight[a] += 1;
                    }
                    self.asyncs[t as usize].open.push(PendingCopy { smem_offset: to[k], data });
                }
                self.count_banks(&format!("cp.async {}", db.name), active, &to, 16);
            }
            Inst::AsyncCommit(_) => {
                for &t in active {
                    let a = &mut self.asyncs[t as usize];
                    let group = std::mem::take(&mut a.open);
                    a.groups.push_back(group);
                }
            }
            Inst::AsyncWait(inst::AsyncWait { pending }) => {
                for &t in active {
                    while self.asyncs[t as usize].groups.len() > *pending as usize {
                        let group = self.asyncs[t as usize].groups.pop_front().expect("a group");
                        for c in group {
                            for a in c.smem_offset..c.smem_offset + 16 {
                                self.races.in_flight[a] -= 1;
                            }
                            self.track_write(t, c.smem_offset, 16)?;
                            self.smem[c.smem_offset..c.smem_offset + 16].copy_from_slice(&c.data);
                        }
                    }
                }
            }
            Inst::Ldmatrix(ld) => {
                let (count, trans) = ld.form();
                self.ldmatrix(active, ld.dst, &ld.dst_offset, count, trans, ld.src, &ld.src_idx)?;
            }
            Inst::Mma(mma) => {
                self.mma(
                    active,
                    mma.atom,
                    (mma.a, &mma.a_offset),
                    (mma.b, &mma.b_offset),
                    (mma.c, &mma.c_offset),
                )?;
            }
            Inst::Printf(_) => {}
            Inst::Trap(_) => return Err(self.err(format!("__trap() by threads {}", ranges(active)))),
        }
        Ok(())
    }

    /// Byte offsets into each active thread's copy of local `buf` at element `offset`,
    /// checking that `bytes` fit.
    fn register_offsets(
        &mut self,
        buf: BufferId,
        offset: &Expr,
        active: &[u32],
        bytes: usize,
        what: &str,
    ) -> Result<Vec<usize>, Diagnostic> {
        let b = self.m.buffer(buf);
        if b.scope != Scope::Local {
            return Err(self.err(format!("{what} operand '{}' is not a register array", b.name)));
        }
        let col = self.eval(offset, active)?;
        let eb = b.dtype.bytes() as i64;
        let mut out = Vec::with_capacity(active.len());
        for (k, v) in col.iter().enumerate() {
            let at = v.as_i64() * eb;
            if at < 0 || at % 4 != 0 || at as usize + bytes > b.bytes() as usize {
                return Err(self.err(format!(
                    "{what} by thread {}: {bytes} bytes of registers from element {} of '{}' ({} elements) are out of range or unaligned",
                    active[k],
                    v.as_i64(),
                    b.name,
                    b.num_elements()
                )));
            }
            out.push(at as usize);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn ldmatrix(
        &mut self,
        active: &[u32],
        dst: BufferId,
        dst_offset: &Expr,
        count: u32,
        trans: bool,
        src: BufferId,
        src_idx: &[Expr],
    ) -> Result<(), Diagnostic> {
        self.full_warps(active, "ldmatrix")?;
        let sb = self.m.buffer(src);
        if sb.scope != Scope::Shared {
            return Err(self.err("ldmatrix reads shared memory"));
        }
        let rows = self.addresses(src, src_idx, active, 16 / sb.dtype.bytes() as usize, "ldmatrix")?;
        let regs = self.register_offsets(dst, dst_offset, active, 4 * count as usize, "ldmatrix")?;
        let lanes_used = 8 * count as usize;
        let what = format!("ldmatrix {}", sb.name);
        for (w, warp) in active.chunks(32).enumerate() {
            let k0 = w * 32;
            // row r of matrix i comes from lane 8 i + r
            let mut data = vec![[0u8; 16]; lanes_used];
            for (l, row) in data.iter_mut().enumerate() {
                let t = warp[l];
                let at = rows[k0 + l];
                self.track_read(t, at, 16)?;
                row.copy_from_slice(&self.smem[at..at + 16]);
            }
            self.count_banks(&what, &warp[..lanes_used], &rows[k0..k0 + lanes_used], 16);
            for (l, &t) in warp.iter().enumerate() {
                let (g, q) = (l / 4, l % 4);
                for i in 0..count as usize {
                    let mut reg = [0u8; 4];
                    if trans {
                        // element (row 2q + h, column g) of matrix i, h = 0, 1
                        for h in 0..2 {
                            reg[2 * h..2 * h + 2].copy_from_slice(&data[8 * i + 2 * q + h][2 * g..2 * g + 2]);
                        }
                    } else {
                        reg.copy_from_slice(&data[8 * i + g][4 * q..4 * q + 4]);
                    }
                    let at = regs[k0 + l] + 4 * i;
                    self.bytes_mut(dst, t)[at..at + 4].copy_from_slice(&reg);
                }
            }
        }
        Ok(())
    }

    /// One tensor-core `mma` of `atom` for each warp: each lane's fragments are read and
    /// written with the atom's fragment layouts (tile_ir::target: lane, element → row,
    /// column), the products summed exactly and rounded to the accumulator's type.
    fn mma(
        &mut self,
        active: &[u32],
        atom: &MmaAtom,
        (a, a_offset): (BufferId, &Expr),
        (b, b_offset): (BufferId, &Expr),
        (c, c_offset): (BufferId, &Expr),
    ) -> Result<(), Diagnostic> {
        self.full_warps(active, "mma")?;
        let m = self.m;
        let (adt, bdt, cdt) = (m.buffer(a).dtype, m.buffer(b).dtype, m.buffer(c).dtype);
        if (adt, bdt, cdt) != (atom.a, atom.b, atom.acc) {
            return Err(self.err(format!("{atom} on {adt} x {bdt} -> {cdt} registers")));
        }
        let (ea, eb, ec) = (atom.a_layout.elements(), atom.b_layout.elements(), atom.c_layout.elements());
        let (sa, sb, sc) = (adt.bytes() as usize, bdt.bytes() as usize, cdt.bytes() as usize);
        let ar = self.register_offsets(a, a_offset, active, ea as usize * sa, "mma A")?;
        let br = self.register_offsets(b, b_offset, active, eb as usize * sb, "mma B")?;
        let cr = self.register_offsets(c, c_offset, active, ec as usize * sc, "mma C")?;
        let (rows, cols, k) = (atom.m as usize, atom.n as usize, atom.k as usize);
        for (w, warp) in active.chunks(32).enumerate() {
            let mut am = vec![0f64; rows * k];
            let mut bm = vec![0f64; k * cols];
            let mut cm = vec![Val::I(0); rows * cols];
            for (l, &t) in warp.iter().enumerate() {
                let j = w * 32 + l;
                for e in 0..ea {
                    let (r, col) = atom.a_layout.coord(l as i64, e);
                    let at = ar[j] + e as usize * sa;
                    am[r as usize * k + col as usize] =
                        read_val(&self.bytes(a, t)[at..at + sa], adt).as_f64();
                }
                for e in 0..eb {
                    let (r, col) = atom.b_layout.coord(l as i64, e);
                    let at = br[j] + e as usize * sb;
                    bm[r as usize * cols + col as usize] =
                        read_val(&self.bytes(b, t)[at..at + sb], bdt).as_f64();
                }
                for e in 0..ec {
                    let (r, col) = atom.c_layout.coord(l as i64, e);
                    let at = cr[j] + e as usize * sc;
                    cm[r as usize * cols + col as usize] = read_val(&self.bytes(c, t)[at..at + sc], cdt);
                }
            }
            let mut d = vec![Val::I(0); rows * cols];
            for row in 0..rows {
                for col in 0..cols {
                    let sum: f64 = (0..k).map(|kk| am[row * k + kk] * bm[kk * cols + col]).sum();
                    d[row * cols + col] = match cm[row * cols + col] {
                        // fp32 accumulation: the exact sum, rounded once
                        Val::F(x) => Val::F((x + sum) as f32 as f64),
                        // int32 accumulation wraps
                        Val::I(x) => Val::I((x as i32).wrapping_add(sum as i64 as i32) as i64),
                    };
                }
            }
            for (l, &t) in warp.iter().enumerate() {
                let j = w * 32 + l;
                for e in 0..ec {
                    let (r, col) = atom.c_layout.coord(l as i64, e);
                    let at = cr[j] + e as usize * sc;
                    write_val(
                        &mut self.bytes_mut(c, t)[at..at + sc],
                        cdt,
                        d[r as usize * cols + col as usize],
                    );
                }
            }
        }
        Ok(())
    }
}
