//! The evaluator: blocks one after another, tile ops on whole regions, `parallel` loops
//! one statement at a time over all their iterations (a column of values per expression).

mod debug;

use crate::memory::{Col, Data};
use crate::num::{self, cast, constant, rounder, OpError, Val};
use tile_ir::simplify::wrap_int;
use tile_ir::verify::{resolve_copy, resolve_region, ResolvedRegion};
use tile_ir::*;

/// The `parallel` loop being run: every iteration's value of each of its variables.
struct Parallel {
    vars: Vec<VarId>,
    /// `values[d][l]`: the value of `vars[d]` in iteration `l` (row-major order).
    values: Vec<Vec<i64>>,
}

pub(crate) struct Interp<'m> {
    m: &'m Module,
    /// Contents of every buffer, by [`BufferId`].
    pub(crate) mem: Vec<Data>,
    /// Values of scalar variables (parameters, block indices, serial loop counters).
    env: Vec<Option<Val>>,
    par: Option<Parallel>,
    block: [i64; 3],
    /// Which statements run on every thread (they read the thread index).
    pt: PerThread,
    /// The threads that run the statements being executed: the block's, or a warp-role
    /// region's.
    lanes: Vec<i64>,
    /// A per-thread statement is running: `par` holds the thread index, one iteration per
    /// thread of `lanes`, and per-thread register buffers have a copy per thread.
    simt: bool,
    /// Iterations (of `par`, or the one of a block-level statement) that ran a `break` in
    /// the innermost loop running: they skip the rest of it.
    breaking: Vec<u32>,
    /// The block's `T.alloc_barrier` mbarriers, by (buffer, index): (arrivals a phase
    /// takes, arrivals still missing in the current phase, phases completed).
    bars: std::collections::BTreeMap<(BufferId, i64), (i64, i64, i64)>,
    /// Blocks per thread-block cluster run together (a kernel with cluster operations), else 1.
    cluster: i64,
}

/// A block of a cluster set aside between two `cluster_sync`s.
#[derive(Default)]
struct BlockState {
    block: [i64; 3],
    mem: Vec<(usize, Data)>,
    env: Vec<Option<Val>>,
    bars: std::collections::BTreeMap<(BufferId, i64), (i64, i64, i64)>,
}

/// Iterations (positions in the running `parallel` loop's row-major order) that are
/// active; statements outside `parallel` loops run with the single iteration `[0]`.
type Lanes<'a> = &'a [u32];

/// Split `ids` by a boolean column: (where true, where false).
fn split(ids: Lanes<'_>, cond: &[bool]) -> (Vec<u32>, Vec<u32>) {
    let mut yes = Vec::new();
    let mut no = Vec::new();
    for (&l, &c) in ids.iter().zip(cond) {
        if c {
            yes.push(l)
        } else {
            no.push(l)
        }
    }
    (yes, no)
}

fn truth(c: Col) -> Vec<bool> {
    match c {
        Col::I(v) => v.into_iter().map(|x| x != 0).collect(),
        Col::F(v) => v.into_iter().map(|x| x != 0.0).collect(),
    }
}

/// The wrapping function of an integer dtype, chosen once for a whole column.
fn wrapper(dt: DType) -> fn(i64) -> i64 {
    match dt {
        DType::Bool => |v| (v != 0) as i64,
        DType::I8 => |v| v as i8 as i64,
        DType::U8 => |v| v as u8 as i64,
        DType::I16 => |v| v as i16 as i64,
        DType::U16 => |v| v as u16 as i64,
        DType::I32 => |v| v as i32 as i64,
        DType::U32 => |v| v as u32 as i64,
        _ => |v| v,
    }
}

fn zip_map<T: Copy, U>(a: &[T], b: &[T], f: impl Fn(T, T) -> U) -> Vec<U> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// A binary operator on two columns with operands of `dt` and a result of `out`.
fn binary_col(op: BinOp, a: Col, b: Col, dt: DType, out: DType) -> Result<Col, OpError> {
    match (a, b) {
        (Col::F(a), Col::F(b)) => {
            let r = rounder(dt);
            Ok(match op {
                BinOp::Add => Col::F(zip_map(&a, &b, |x, y| r(x + y))),
                BinOp::Sub => Col::F(zip_map(&a, &b, |x, y| r(x - y))),
                BinOp::Mul => Col::F(zip_map(&a, &b, |x, y| r(x * y))),
                BinOp::Div => Col::F(zip_map(&a, &b, |x, y| r(x / y))),
                BinOp::Eq => Col::I(zip_map(&a, &b, |x, y| (x == y) as i64)),
                BinOp::Ne => Col::I(zip_map(&a, &b, |x, y| (x != y) as i64)),
                BinOp::Lt => Col::I(zip_map(&a, &b, |x, y| (x < y) as i64)),
                BinOp::Le => Col::I(zip_map(&a, &b, |x, y| (x <= y) as i64)),
                BinOp::Gt => Col::I(zip_map(&a, &b, |x, y| (x > y) as i64)),
                BinOp::Ge => Col::I(zip_map(&a, &b, |x, y| (x >= y) as i64)),
                _ => Col::F(
                    a.iter()
                        .zip(&b)
                        .map(|(&x, &y)| num::float_binary(op, x, y, dt))
                        .collect::<Result<_, _>>()?,
                ),
            })
        }
        (Col::I(a), Col::I(b)) => {
            let w = wrapper(out);
            Ok(Col::I(match op {
                BinOp::Add => zip_map(&a, &b, |x, y| w(x.wrapping_add(y))),
                BinOp::Sub => zip_map(&a, &b, |x, y| w(x.wrapping_sub(y))),
                BinOp::Mul => zip_map(&a, &b, |x, y| w(x.wrapping_mul(y))),
                // a uint64's bits compare as u64 (num::int_binary)
                BinOp::Lt if dt != DType::U64 => zip_map(&a, &b, |x, y| (x < y) as i64),
                _ => a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &y)| num::int_binary(op, x, y, dt, out))
                    .collect::<Result<_, _>>()?,
            }))
        }
        _ => Err(OpError::Unsupported),
    }
}

fn unary_col(op: UnOp, a: Col, dt: DType) -> Result<Col, OpError> {
    match a {
        Col::F(a) => Ok(Col::F(a.into_iter().map(|x| num::float_unary(op, x, dt)).collect())),
        Col::I(a) => Ok(Col::I(a.into_iter().map(|x| num::int_unary(op, x, dt)).collect::<Result<_, _>>()?)),
    }
}

fn cast_col(a: Col, from: DType, to: DType) -> Col {
    if from == to {
        return a;
    }
    match a {
        Col::F(v) if to.is_float() => {
            let r = rounder(to);
            Col::F(v.into_iter().map(r).collect())
        }
        Col::I(v) if to.is_int() || to == DType::Bool => {
            let w = wrapper(to);
            Col::I(v.into_iter().map(w).collect())
        }
        a => {
            let mut out = Col::empty_like(to, a.len());
            for k in 0..a.len() {
                out.push(cast(a.get(k), from, to));
            }
            out
        }
    }
}

/// `acc (+)= x @ y` in float32 for fp16/bf16 operands, whose products float32 holds
/// exactly (so adding in f32 is the same as adding the exact product and rounding); `x`
/// holds rows of K, `y` columns of K. Four output columns at a time, for speed.
fn gemm_f32_exact_products(
    x: &[f64],
    y: &[f64],
    acc: Vec<f64>,
    rows: usize,
    cols: usize,
    k: usize,
    clear: bool,
) -> Vec<f64> {
    let x: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let y: Vec<f32> = y.iter().map(|&v| v as f32).collect();
    let mut out: Vec<f32> =
        if clear { vec![0.0; acc.len()] } else { acc.iter().map(|&v| v as f32).collect() };
    for i in 0..rows {
        let x_row = &x[i * k..(i + 1) * k];
        for j0 in (0..cols).step_by(4) {
            let n = (cols - j0).min(4);
            let mut s = [0f32; 4];
            s[..n].copy_from_slice(&out[i * cols + j0..i * cols + j0 + n]);
            for (kk, &p) in x_row.iter().enumerate() {
                for t in 0..n {
                    s[t] += p * y[(j0 + t) * k + kk];
                }
            }
            out[i * cols + j0..i * cols + j0 + n].copy_from_slice(&s[..n]);
        }
    }
    out.into_iter().map(|v| v as f64).collect()
}

/// Row-major iteration over a shape: calls `f` with each index tuple.
fn for_each_index(
    shape: &[i64],
    mut f: impl FnMut(&[i64]) -> Result<(), Diagnostic>,
) -> Result<(), Diagnostic> {
    if shape.iter().any(|&e| e <= 0) {
        return Ok(());
    }
    let mut c = vec![0i64; shape.len()];
    loop {
        f(&c)?;
        let mut d = shape.len();
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            c[d] += 1;
            if c[d] < shape[d] {
                break;
            }
            c[d] = 0;
        }
    }
}

impl<'m> Interp<'m> {
    pub(crate) fn new(m: &'m Module, mem: Vec<Data>, env: Vec<Option<Val>>) -> Interp<'m> {
        let threads = m.kernel.threads as i64;
        Interp {
            m,
            mem,
            env,
            par: None,
            block: [0; 3],
            pt: PerThread::of(m),
            lanes: (0..threads).collect(),
            simt: false,
            breaking: Vec::new(),
            bars: Default::default(),
            cluster: 1,
        }
    }

    fn error(&self, msg: impl std::fmt::Display, loc: Loc) -> Diagnostic {
        let [x, y, z] = self.block;
        Diagnostic::error(format!("{msg} (in block ({x}, {y}, {z}))"), loc)
    }

    fn op_error(&self, e: OpError, op: &str, dt: DType, loc: Loc) -> Diagnostic {
        match e {
            OpError::DivisionByZero => self.error("integer division by zero", loc),
            OpError::Unsupported => self.error(format!("'{op}' is not defined on {dt}"), loc),
        }
    }

    /// Run the kernel body for every block of the grid: bx fastest, then by, then bz.
    pub(crate) fn run_grid(&mut self) -> Result<(), Diagnostic> {
        let m = self.m;
        let mut grid = [1i64; 3];
        for (axis, g) in m.kernel.grid.iter().enumerate().take(3) {
            let v = self.scalar(g, m.kernel.loc)?.as_i64();
            // a grid of no blocks (a size of 0) runs nothing, as the launcher launches nothing
            if v < 0 {
                return Err(Diagnostic::error(
                    format!("grid dimension {axis} is {v}; it must not be negative"),
                    m.kernel.loc,
                ));
            }
            grid[axis] = v;
        }
        let block_vars: Vec<(usize, u8)> = m
            .vars
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v.kind {
                VarKind::BlockIdx(axis) => Some((i, axis)),
                _ => None,
            })
            .collect();
        // gemm accumulators start at zero, as the compiled kernel zeroes them (lower/mod.rs):
        // `T.gemm` into a never-cleared accumulator sums from 0
        let mut accumulators = std::collections::BTreeSet::new();
        walk_stmts(&m.kernel.body, &mut |s| {
            if let Stmt::Gemm(op) = s {
                accumulators.insert(op.c);
            }
        });
        // a kernel that works across its thread-block cluster (T.copy_cluster,
        // T.cluster_sync): the blocks of each cluster run its body in turn, one stretch
        // between the body's cluster_syncs at a time, each block's state kept aside
        let cluster = if m.cluster_ops() { m.cluster_blocks().max(1) as i64 } else { 1 };
        if cluster > 1 && grid[0] % cluster != 0 {
            return Err(Diagnostic::error(
                format!(
                    "a grid of {} blocks along x launched in thread-block clusters of {cluster}",
                    grid[0]
                ),
                m.kernel.loc,
            ));
        }
        self.cluster = cluster;
        // a stretch ends where the blocks wait for each other: a cluster_sync or the
        // cluster_wait after a cluster_arrive (all have arrived by then: each arrives before
        // its wait); an arrive itself orders nothing here
        let stretches: Vec<&[Stmt]> = m
            .kernel
            .body
            .split(|s| matches!(s, Stmt::Inst(inst::Inst::ClusterSync(_) | inst::Inst::ClusterWait(_))))
            .collect();
        let views: Vec<(usize, usize)> = m
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.scope == Scope::Cluster)
            .filter_map(|(i, b)| b.alias_of.map(|r| (i, r.0 as usize)))
            .collect();
        for bz in 0..grid[2] {
            for by in 0..grid[1] {
                for bx0 in (0..grid[0]).step_by(cluster as usize) {
                    if cluster == 1 {
                        self.enter_block([bx0, by, bz], &block_vars, &accumulators);
                        self.exec(&m.kernel.body, &[0])?;
                        continue;
                    }
                    // the cluster's shared tiles as its blocks see them through views, then
                    // each block started and set aside
                    for &(v, _) in &views {
                        let b = &m.buffers[v];
                        let n = b.num_elements().max(0) as usize;
                        self.mem[v] = Data::from_bytes(b.dtype, &crate::scratch_bytes(b.dtype, n));
                    }
                    let mut states = Vec::new();
                    for c in 0..cluster {
                        self.enter_block([bx0 + c, by, bz], &block_vars, &accumulators);
                        states.push(self.leave_block(&views, c as usize));
                    }
                    for stretch in &stretches {
                        for (c, state) in states.iter_mut().enumerate() {
                            self.resume_block(std::mem::take(state), &views, c);
                            self.exec(stretch, &[0])?;
                            *state = self.leave_block(&views, c);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Start block `block`: its indices bound, its on-chip buffers fresh (undefined: floats
    /// NaN, as scratch; gemm accumulators 0), its barriers none.
    fn enter_block(
        &mut self,
        block: [i64; 3],
        block_vars: &[(usize, u8)],
        accumulators: &std::collections::BTreeSet<BufferId>,
    ) {
        let m = self.m;
        self.block = block;
        self.bars.clear();
        for &(var, axis) in block_vars {
            let v = self.block.get(axis as usize).copied().unwrap_or(0);
            self.env[var] = Some(Val::I(wrap_int(v, m.vars[var].dtype)));
        }
        // every block gets fresh on-chip buffers, which start undefined on the GPU: floats
        // start as NaN here (as scratch does), so a kernel that reads what it did not write
        // (a missing T.clear) shows it; gemm accumulators 0
        for (i, b) in m.buffers.iter().enumerate() {
            if b.scope != Scope::Global && b.scope != Scope::Cluster {
                // a register buffer that per-thread statements write: a copy per thread
                let copies =
                    if self.pt.bufs.contains(&BufferId(i as u32)) { m.kernel.threads as usize } else { 1 };
                let n = b.num_elements().max(0) as usize * copies;
                self.mem[i] = if accumulators.contains(&BufferId(i as u32)) {
                    Data::zeros(b.dtype, n)
                } else {
                    Data::from_bytes(b.dtype, &crate::scratch_bytes(b.dtype, n))
                };
            }
        }
    }

    /// Set block `c` of the cluster aside: its on-chip buffers, variables and barriers; its
    /// shared tiles that other blocks reach go to their cluster views' slice `c`.
    fn leave_block(&mut self, views: &[(usize, usize)], c: usize) -> BlockState {
        let m = self.m;
        for &(v, root) in views {
            let n = self.mem[root].len();
            for e in 0..n {
                let x = self.mem[root].get(e);
                self.mem[v].set(c * n + e, x);
            }
        }
        let mem = m
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.scope != Scope::Global && b.scope != Scope::Cluster)
            .map(|(i, _)| (i, std::mem::replace(&mut self.mem[i], Data::zeros(DType::I8, 0))))
            .collect();
        BlockState { block: self.block, mem, env: self.env.clone(), bars: std::mem::take(&mut self.bars) }
    }

    /// Take block `c` of the cluster up again where [`Interp::leave_block`] left it.
    fn resume_block(&mut self, state: BlockState, views: &[(usize, usize)], c: usize) {
        self.block = state.block;
        self.env = state.env;
        self.bars = state.bars;
        for (i, d) in state.mem {
            self.mem[i] = d;
        }
        for &(v, root) in views {
            let n = self.mem[root].len();
            for e in 0..n {
                let x = self.mem[v].get(c * n + e);
                self.mem[root].set(e, x);
            }
        }
    }

    /// Where element `o` of the cluster view `buf` lies: (buffer, offset) — the root tile
    /// itself for this block's own rank, else the view's slice of the peer.
    fn cluster_element(&self, buf: BufferId, o: usize) -> (usize, usize) {
        let b = self.m.buffer(buf);
        let root = b.alias_of.expect("a cluster view has a root").0 as usize;
        let n = self.mem[root].len();
        let own = self.block[0].rem_euclid(self.cluster) as usize;
        if o / n == own {
            (root, o % n)
        } else {
            (buf.0 as usize, o)
        }
    }

    fn exec(&mut self, body: &[Stmt], ids: Lanes<'_>) -> Result<(), Diagnostic> {
        let mut left: Option<Vec<u32>> = None;
        for s in body {
            let now = left.as_deref().unwrap_or(ids);
            if now.is_empty() {
                break;
            }
            self.stmt(s, now)?;
            if !self.breaking.is_empty() {
                // those that ran a `break` leave the rest of the loop's body
                let keep: Vec<u32> = now.iter().copied().filter(|l| !self.breaking.contains(l)).collect();
                left = Some(keep);
            }
        }
        Ok(())
    }

    /// Evaluate an expression once, outside any `parallel` loop (or for one iteration).
    fn scalar(&self, e: &Expr, loc: Loc) -> Result<Val, Diagnostic> {
        Ok(self.eval(e, &[0], loc)?.get(0))
    }

    fn tile_op_outside_parallel(&self, what: &str, loc: Loc) -> Result<(), Diagnostic> {
        match self.par {
            Some(_) => Err(Diagnostic::error(format!("{what} inside a T.Parallel loop"), loc)),
            None => Ok(()),
        }
    }

    /// A statement that reads the thread index: run once per thread of `lanes` (as the
    /// iterations of a parallel loop over the thread index).
    fn per_thread(&mut self, s: &Stmt) -> Result<(), Diagnostic> {
        let tid = self.pt.tid.expect("a per-thread statement reads the thread index");
        // threads=n of part of a warp: the launched threads past n run none of it
        let active = self.m.kernel.user_threads.unwrap_or(self.m.kernel.threads) as i64;
        let lanes: Vec<_> = self.lanes.iter().copied().filter(|&t| t < active).collect();
        let ids: Vec<u32> = (0..lanes.len() as u32).collect();
        self.par = Some(Parallel { vars: vec![tid], values: vec![lanes] });
        self.simt = true;
        let r = self.stmt(s, &ids);
        self.par = None;
        self.simt = false;
        r
    }

    /// The element offset of each iteration's copy of per-thread buffer `buf` (0 outside a
    /// per-thread statement, where nothing reads such a buffer).
    fn lane_base(&self, buf: BufferId, ids: Lanes<'_>) -> Option<Vec<usize>> {
        if !self.simt || !self.pt.bufs.contains(&buf) {
            return None;
        }
        let n = self.m.buffer(buf).num_elements().max(0) as usize;
        let tids = &self.par.as_ref().expect("per-thread iterations").values[0];
        Some(ids.iter().map(|&l| tids[l as usize] as usize * n).collect())
    }

    /// A statement outside per-thread code writes a per-thread buffer: every thread's copy.
    fn broadcast(&mut self, buf: BufferId, offsets: &[usize], values: &Col) {
        let n = self.m.buffer(buf).num_elements().max(0) as usize;
        for t in 0..self.m.kernel.threads as usize {
            let at: Vec<usize> = offsets.iter().map(|&o| o + t * n).collect();
            self.store(buf, &at, values.clone());
        }
    }

    fn stmt(&mut self, s: &Stmt, ids: Lanes<'_>) -> Result<(), Diagnostic> {
        crate::check_stop()?;
        let m = self.m;
        if !self.simt && self.par.is_none() && self.pt.head(m, s) {
            return self.per_thread(s);
        }
        match s {
            Stmt::Store { buf, idx, value, loc } => {
                let offsets = self.indices(*buf, idx, ids, *loc, *loc)?;
                let b = m.buffer(*buf);
                let values = cast_col(self.eval(value, ids, *loc)?, value.dtype(), b.dtype);
                if !self.simt && self.pt.bufs.contains(buf) {
                    self.broadcast(*buf, &offsets, &values);
                } else {
                    self.store(*buf, &offsets, values);
                }
            }
            Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
                let offsets = self.indices(*buf, idx, ids, *loc, *loc)?;
                let dt = m.buffer(*buf).dtype;
                let values = cast_col(self.eval(value, ids, *loc)?, value.dtype(), dt);
                let olds = self.atomic(mode.op, *buf, &offsets, &values, *loc)?;
                if let Some(p) = prev {
                    if let Some(base) = self.lane_base(*p, ids) {
                        // each thread's old value, in its own copy
                        for (k, o) in base.into_iter().enumerate() {
                            self.mem[p.0 as usize].set(o, olds[k]);
                        }
                    } else if self.pt.bufs.contains(p) {
                        let old = Col::splat(olds[olds.len() - 1], 1);
                        self.broadcast(*p, &[0], &old);
                    } else {
                        // one iteration at a time (the body writes a local buffer): its old value
                        self.mem[p.0 as usize].set(0, olds[olds.len() - 1]);
                    }
                }
            }
            Stmt::Copy(CopyOp { src, dst, pad, loc, atomic, .. }) => {
                self.tile_op_outside_parallel("T.copy", *loc)?;
                match atomic {
                    Some(mode) => self.atomic_tile(mode.op, src, dst, *loc)?,
                    None => self.copy(src, dst, pad.as_ref(), *loc)?,
                }
            }
            Stmt::Fill { dst, value, loc } => {
                self.tile_op_outside_parallel("T.fill", *loc)?;
                self.fill(dst, value, *loc)?;
            }
            Stmt::Reduce(ReduceOp { kind, src, dst, dim, clear, loc }) => {
                self.tile_op_outside_parallel("T.reduce", *loc)?;
                self.reduce(*kind, *src, *dst, *dim, *clear, *loc)?;
            }
            Stmt::Gemm(op) => {
                let loc = op.loc;
                self.tile_op_outside_parallel("T.gemm", loc)?;
                // each operand's matrix inside its buffer: a stage of a multi-buffered tile,
                // the user's leading indices, a window of the last two dimensions
                let mut views = Vec::new();
                for which in 0..2 {
                    let o = op
                        .operand(self.m, which)
                        .map_err(|why| Diagnostic::error(format!("T.gemm: {why}"), loc))?;
                    let e = self.m.buffer(o.buf).extents();
                    let mut at = Vec::new();
                    for p in &o.prefix {
                        match self.scalar(p, loc)? {
                            Val::I(v) if v >= 0 => at.push(v),
                            _ => {
                                return Err(Diagnostic::error(
                                    "T.gemm operand index is not a non-negative integer",
                                    loc,
                                ))
                            }
                        }
                    }
                    at.extend(o.start);
                    if at.iter().zip(&e).any(|(i, n)| i >= n) || at.len() != e.len() {
                        return Err(Diagnostic::error(
                            format!(
                                "T.gemm operand index {at:?} is outside '{}' {e:?}",
                                self.m.buffer(o.buf).name
                            ),
                            loc,
                        ));
                    }
                    let base = at.iter().zip(&e).fold(0i64, |acc, (i, n)| acc * n + i);
                    views.push(GemmView { base: base as usize, ld: e[e.len() - 1] as usize, tile: o.tile });
                }
                self.gemm(
                    op.a,
                    op.b,
                    op.c,
                    op.transpose_a,
                    op.transpose_b,
                    op.clear_accum,
                    (&views[0], &views[1]),
                    loc,
                )?;
            }
            Stmt::Parallel { vars, extents, body, loc, .. } => self.parallel(vars, extents, body, *loc)?,
            Stmt::For { var, start, extent, body, loc, .. } => {
                let starts = self.eval(start, ids, *loc)?.ints();
                let counts = self.eval(extent, ids, *loc)?.ints();
                let uniform =
                    starts.iter().all(|&v| v == starts[0]) && counts.iter().all(|&v| v == counts[0]);
                if !uniform {
                    // bounds differ between iterations of the enclosing parallel loop:
                    // run the loop for one iteration at a time
                    for &l in ids {
                        self.stmt(s, &[l])?;
                    }
                    return Ok(());
                }
                let dt = m.var(*var).dtype;
                let outer = std::mem::take(&mut self.breaking);
                for t in 0..counts[0].max(0) {
                    let now: Vec<u32> = ids.iter().copied().filter(|l| !self.breaking.contains(l)).collect();
                    if now.is_empty() {
                        break;
                    }
                    self.env[var.0 as usize] = Some(Val::I(wrap_int(starts[0].wrapping_add(t), dt)));
                    self.exec(body, &now)?;
                }
                self.breaking = outer;
            }
            // a warp-role region (`T.ws`): the block's tile ops in program order, whichever
            // threads run them
            Stmt::If { cond, then, otherwise, .. } if !self.simt && self.m.thread_range(cond).is_some() => {
                let (first, count) = self.m.thread_range(cond).expect("checked");
                let inside = |t: &i64| *t >= first as i64 && *t < (first + count) as i64;
                let all = std::mem::take(&mut self.lanes);
                self.lanes = all.iter().copied().filter(inside).collect();
                let r = self.exec(then, ids);
                self.lanes = all.iter().copied().filter(|t| !inside(t)).collect();
                let r =
                    r.and_then(|_| if self.lanes.is_empty() { Ok(()) } else { self.exec(otherwise, ids) });
                self.lanes = all;
                r?
            }
            // the kernel's own barriers order nothing here (the interpreter runs a block's
            // statements one after another; the warp model of the lowered code runs them);
            // a TMA copy is its copy
            Stmt::Barrier(BarrierOp { kind, bar, idx, loc }) => match kind {
                BarrierKind::TmaLoad { copy } => self.copy(&copy.src, &copy.dst, None, *loc)?,
                BarrierKind::Init { count } => {
                    let i = self.scalar(idx, *loc)?.as_i64();
                    self.bars.insert((*bar, i), (*count as i64, *count as i64, 0));
                }
                BarrierKind::Arrive => self.arrive(*bar, idx, ids, *loc)?,
                BarrierKind::Wait { parity } => self.barrier_wait(*bar, idx, parity, ids, *loc)?,
                // the copies' bytes landed when they were issued
                BarrierKind::ExpectTx { .. } => {}
            },
            Stmt::Inst(tile_ir::inst::Inst::AsyncArrive(a)) => {
                self.arrive(a.bar, &a.idx, ids, Loc::UNKNOWN)?
            }
            // a kernel's own cp.async: its bytes land at once (a program run one statement
            // after another sees them at the wait or barrier that orders them)
            Stmt::Inst(tile_ir::inst::Inst::AsyncCopy(c)) => self.cp_async(c, ids)?,
            Stmt::Inst(tile_ir::inst::Inst::SetMaxNReg(_)) => {}
            Stmt::Inst(tile_ir::inst::Inst::BindPointer(b)) => {
                return Err(self.error(crate::pointer_message(&self.m.buffer(b.buf).name), self.m.kernel.loc));
            }
            Stmt::Inst(tile_ir::inst::Inst::CallExtern(c)) => {
                if !crate::EXTERN_NO_EFFECT.contains(&c.name.as_str()) {
                    return Err(self.error(crate::extern_message(&c.name), self.m.kernel.loc));
                }
            }
            Stmt::Inst(tile_ir::inst::Inst::LoopBreak(_)) => self.breaking.extend_from_slice(ids),
            Stmt::If { cond, then, otherwise, loc } => {
                let c = truth(self.eval(cond, ids, *loc)?);
                let (yes, no) = split(ids, &c);
                self.exec(then, &yes)?;
                self.exec(otherwise, &no)?;
            }
            Stmt::Print { what, msg, block, loc } => self.print(what, msg, block.as_deref(), ids, *loc)?,
            Stmt::DeviceAssert { cond, msg, loc } => self.device_assert(cond, msg, ids, *loc)?,
            Stmt::Comment(_) => {}
            // a pipelined loop after `inject_pipeline`: the copies issued ahead run where they
            // are issued (into their stage buffers); barriers, waits and commits order nothing
            // here (the interpreter runs a block's tile ops one after another)
            Stmt::Async { body } => self.exec(body, ids)?,
            Stmt::Inst(i) if i.effects().only_orders() => {}
            // thread-level statements (`let`, vector copies, warp-level matrix ops) are made
            // by the lowering and never appear in the tile-level programs run here
            _ => {
                return Err(Diagnostic::error(
                    "the interpreter runs tile-level programs; this one holds a thread-level statement",
                    s.loc(),
                ))
            }
        }
        Ok(())
    }

    /// Every thread running the statement arrives at `bar[idx]` (each its own index in
    /// per-thread code).
    fn arrive(&mut self, bar: BufferId, idx: &Expr, ids: Lanes<'_>, loc: Loc) -> Result<(), Diagnostic> {
        let at = self.eval(idx, ids, loc)?.ints();
        let each: Vec<(i64, usize)> =
            if self.simt { at.iter().map(|&i| (i, 1)).collect() } else { vec![(at[0], self.lanes.len())] };
        for (i, n) in each {
            let name = &self.m.buffer(bar).name;
            let Some(b) = self.bars.get_mut(&(bar, i)) else {
                return Err(self.error(format!("arrival at {name}[{i}], which holds no barrier"), loc));
            };
            for _ in 0..n {
                b.1 -= 1;
                if b.1 == 0 {
                    b.1 = b.0;
                    b.2 += 1;
                }
            }
        }
        Ok(())
    }

    /// A wait for a phase of `bar[idx]`: the interpreter runs the block's statements one
    /// after another, so the phase must have completed by now.
    fn barrier_wait(
        &mut self,
        bar: BufferId,
        idx: &Expr,
        parity: &Expr,
        ids: Lanes<'_>,
        loc: Loc,
    ) -> Result<(), Diagnostic> {
        let at = self.eval(idx, ids, loc)?.ints();
        let ps = self.eval(parity, ids, loc)?.ints();
        for (&i, &p) in at.iter().zip(&ps) {
            let name = &self.m.buffer(bar).name;
            let Some(&(count, missing, done)) = self.bars.get(&(bar, i)) else {
                return Err(self.error(format!("a wait on {name}[{i}], which holds no barrier"), loc));
            };
            if done & 1 == p & 1 {
                return Err(self
                    .error(
                        format!(
                            "T.barrier_wait on {name}[{i}] for parity {p} {}: the \
                             interpreter runs the kernel's statements one after another, and phase {done} has \
                             {missing} of its {count} arrivals missing at this point",
                            crate::SEQUENTIAL_WAIT
                        ),
                        loc,
                    )
                    .with_help(
                        "warp-role regions that hand data to each other through mbarriers inside loops of \
                         their own run concurrently only on the GPU (or the thread-level CPU model of \
                         testing.check_passes); the interpreter runs them in program order",
                    ));
            }
        }
        Ok(())
    }

    /// `T.ptx_cp_async` by each iteration in `ids`: `bytes` bytes from `src` to `dst`, the
    /// source's first `src_bytes` of them, zeros after.
    fn cp_async(&mut self, c: &tile_ir::inst::AsyncCopy, ids: Lanes<'_>) -> Result<(), Diagnostic> {
        let loc = Loc::UNKNOWN;
        let (db, sb) = (self.m.buffer(c.dst), self.m.buffer(c.src));
        let eb = db.dtype.bytes() as usize;
        let n = c.bytes as usize / eb;
        let to = self.indices(c.dst, &c.dst_idx, ids, loc, loc)?;
        let from = self.indices(c.src, &c.src_idx, ids, loc, loc)?;
        let read = self.eval(&c.src_bytes, ids, loc)?.ints();
        let (dlen, slen) = (self.mem[c.dst.0 as usize].len(), self.mem[c.src.0 as usize].len());
        for k in 0..to.len() {
            let count = read[k];
            if !(0..=c.bytes as i64).contains(&count) {
                return Err(Diagnostic::error(
                    format!("T.ptx_cp_async reads {count} bytes of a {}-byte copy", c.bytes),
                    loc,
                ));
            }
            let count = count as usize / eb;
            if to[k] + n > dlen || (count > 0 && (from[k] == usize::MAX || from[k] + count > slen)) {
                return Err(Diagnostic::error(
                    format!(
                        "T.ptx_cp_async of {} bytes from '{}' to '{}' runs past the end of a buffer",
                        c.bytes, sb.name, db.name
                    ),
                    loc,
                ));
            }
            for e in 0..n {
                let v = if e < count { self.mem[c.src.0 as usize].get(from[k] + e) } else { Val::I(0) };
                self.mem[c.dst.0 as usize].set(to[k] + e, v);
            }
        }
        Ok(())
    }

    /// Write `values` at `offsets`, skipping those past a global tensor's edge.
    fn store(&mut self, buf: BufferId, offsets: &[usize], values: Col) {
        if self.m.buffer(buf).scope == Scope::Cluster {
            for (k, &o) in offsets.iter().enumerate() {
                let (b, at) = self.cluster_element(buf, o);
                self.mem[b].set(at, values.get(k));
            }
            return;
        }
        let data = &mut self.mem[buf.0 as usize];
        if offsets.contains(&usize::MAX) {
            for (k, &o) in offsets.iter().enumerate() {
                if o != usize::MAX {
                    data.set(o, values.get(k));
                }
            }
        } else {
            data.scatter(offsets, &values);
        }
    }

    /// Flat element offsets of `buf[idx]` for each iteration; `usize::MAX` marks an element
    /// past the edge of a global tensor. Out of range on chip is an error at `at`.
    fn indices(
        &self,
        buf: BufferId,
        idx: &[Expr],
        ids: Lanes<'_>,
        loc: Loc,
        at: Loc,
    ) -> Result<Vec<usize>, Diagnostic> {
        let cols: Vec<Vec<i64>> =
            idx.iter().map(|e| self.eval(e, ids, loc).map(Col::ints)).collect::<Result<_, _>>()?;
        let mut out = self.offsets(buf, &cols, ids.len(), at)?;
        if let Some(base) = self.lane_base(buf, ids) {
            for (o, b) in out.iter_mut().zip(base) {
                *o += b;
            }
        }
        Ok(out)
    }

    fn offsets(&self, buf: BufferId, cols: &[Vec<i64>], n: usize, at: Loc) -> Result<Vec<usize>, Diagnostic> {
        let b = self.m.buffer(buf);
        if cols.len() != b.extents().len() {
            return Err(self.error(
                format!(
                    "'{}' has {} dimensions but is indexed with {}",
                    b.name,
                    b.extents().len(),
                    cols.len()
                ),
                at,
            ));
        }
        let strides = b.strides();
        let mut out = vec![0usize; n];
        for (d, col) in cols.iter().enumerate() {
            let (extent, stride) = (b.extents()[d], strides[d]);
            for (o, &i) in out.iter_mut().zip(col) {
                if *o == usize::MAX {
                    continue;
                }
                if i < 0 || i >= extent {
                    *o = usize::MAX;
                } else {
                    *o += (i * stride) as usize;
                }
            }
        }
        if b.scope != Scope::Global {
            if let Some(k) = out.iter().position(|&o| o == usize::MAX) {
                let index: Vec<i64> = cols.iter().map(|c| c[k]).collect();
                return Err(self.error(
                    format!(
                        "index {index:?} is out of range for {} buffer '{}' of shape {:?}",
                        b.scope.name(),
                        b.name,
                        b.extents()
                    ),
                    at,
                ));
            }
        }
        Ok(out)
    }

    /// The values of a `parallel` loop variable in iterations `ids`.
    fn par_var(&self, id: VarId, ids: Lanes<'_>) -> Option<Vec<i64>> {
        let p = self.par.as_ref()?;
        let d = p.vars.iter().position(|v| *v == id)?;
        let all = &p.values[d];
        Some(if ids.len() == all.len() {
            all.clone()
        } else {
            ids.iter().map(|&l| all[l as usize]).collect()
        })
    }

    /// Does `e` depend on the iteration of the running `parallel` loop?
    fn varies(&self, e: &Expr) -> bool {
        let Some(p) = &self.par else { return false };
        let mut found = false;
        e.walk(&mut |x| match x {
            Expr::Var { id, .. } => found |= p.vars.contains(id),
            // each thread's own copy
            Expr::Load { buf, .. } => found |= self.simt && self.pt.bufs.contains(buf),
            _ => {}
        });
        found
    }

    fn eval(&self, e: &Expr, ids: Lanes<'_>, loc: Loc) -> Result<Col, Diagnostic> {
        let n = ids.len();
        if n > 1 && !matches!(e, Expr::Const { .. } | Expr::Var { .. }) && !self.varies(e) {
            // the same in every iteration: compute it once
            let v = self.eval(e, &ids[..1], loc)?.get(0);
            return Ok(Col::splat(v, n));
        }
        let m = self.m;
        Ok(match e {
            Expr::Const { value, dtype } => Col::splat(constant(*value, *dtype), n),
            Expr::Var { id, .. } => {
                if let Some(v) = self.par_var(*id, ids) {
                    return Ok(Col::I(v));
                }
                match self.env.get(id.0 as usize).copied().flatten() {
                    Some(v) => Col::splat(v, n),
                    None => {
                        return Err(
                            self.error(format!("variable '{}' has no value here", m.var(*id).name), loc)
                        )
                    }
                }
            }
            Expr::Load { buf, idx, dtype, loc: load_loc, oob } => {
                let at = if load_loc.is_known() { *load_loc } else { loc };
                let offsets = self.indices(*buf, idx, ids, loc, at)?;
                let b = m.buffer(*buf);
                let data = &self.mem[buf.0 as usize];
                let values = if b.scope == Scope::Cluster {
                    let mut out = Col::empty_like(b.dtype, offsets.len());
                    for &o in &offsets {
                        let (src, at) = self.cluster_element(*buf, o);
                        out.push(self.mem[src].get(at));
                    }
                    out
                } else if offsets.contains(&usize::MAX) {
                    let inside: Vec<bool> = offsets.iter().map(|&o| o != usize::MAX).collect();
                    let (in_ids, out_ids) = split(ids, &inside);
                    let kept: Vec<usize> = offsets.iter().copied().filter(|&o| o != usize::MAX).collect();
                    let read = data.gather(&kept);
                    let past_edge = match oob {
                        Some(o) => cast_col(self.eval(o, &out_ids, loc)?, o.dtype(), b.dtype),
                        None => Col::splat(cast(Val::I(0), DType::I64, b.dtype), out_ids.len()),
                    };
                    debug_assert_eq!(in_ids.len(), read.len());
                    Col::merge(&inside, read, past_edge)
                } else {
                    data.gather(&offsets)
                };
                cast_col(values, b.dtype, *dtype)
            }
            Expr::Binary { op: op @ (BinOp::And | BinOp::Or), a, b, .. } => {
                // && and || short-circuit, as in the generated C
                let first = truth(self.eval(a, ids, loc)?);
                let decided_by_a: Vec<bool> = first.iter().map(|&x| x == (*op == BinOp::Or)).collect();
                let (decided, rest) = split(ids, &decided_by_a);
                let second = truth(self.eval(b, &rest, loc)?);
                let a_part = Col::splat(Val::I((*op == BinOp::Or) as i64), decided.len());
                let b_part = Col::I(second.into_iter().map(|x| x as i64).collect());
                Col::merge(&decided_by_a, a_part, b_part)
            }
            Expr::Binary { op, a, b, dtype } => {
                let x = self.eval(a, ids, loc)?;
                let y = self.eval(b, ids, loc)?;
                binary_col(*op, x, y, a.dtype(), *dtype)
                    .map_err(|err| self.op_error(err, op.name(), a.dtype(), loc))?
            }
            Expr::Unary { op: UnOp::Reinterpret, a, dtype } => {
                let x = self.eval(a, ids, loc)?;
                let mut out = Col::empty_like(*dtype, x.len());
                for k in 0..x.len() {
                    out.push(num::reinterpret(x.get(k), a.dtype(), *dtype));
                }
                out
            }
            Expr::Unary { op, a, dtype } => {
                let x = self.eval(a, ids, loc)?;
                unary_col(*op, x, *dtype).map_err(|err| self.op_error(err, op.name(), *dtype, loc))?
            }
            Expr::Cast { a, dtype } => cast_col(self.eval(a, ids, loc)?, a.dtype(), *dtype),
            Expr::Select { cond, a, b, dtype } => {
                // like C's `c ? a : b`, only the chosen arm is evaluated
                let c = truth(self.eval(cond, ids, loc)?);
                let (yes, no) = split(ids, &c);
                let x = if yes.is_empty() { Col::empty_like(*dtype, 0) } else { self.eval(a, &yes, loc)? };
                let y = if no.is_empty() { Col::empty_like(*dtype, 0) } else { self.eval(b, &no, loc)? };
                Col::merge(&c, x, y)
            }
            // thread-level expressions (warp shuffles) are made by the lowering
            _ => {
                return Err(self.error(
                    "the interpreter runs tile-level programs; this one holds a thread-level expression",
                    loc,
                ))
            }
        })
    }

    fn parallel(
        &mut self,
        vars: &[VarId],
        extents: &[i64],
        body: &[Stmt],
        loc: Loc,
    ) -> Result<(), Diagnostic> {
        if self.par.is_some() {
            return Err(Diagnostic::error("T.Parallel loops cannot be nested", loc));
        }
        if vars.len() != extents.len() {
            return Err(Diagnostic::error("T.Parallel has a different number of variables and extents", loc));
        }
        let total = extents.iter().map(|&e| e.max(0)).product::<i64>();
        if total == 0 {
            return Ok(());
        }
        if total > u32::MAX as i64 {
            return Err(self.error(format!("T.Parallel of {total} iterations is too large"), loc));
        }
        let total = total as usize;
        let mut values = Vec::with_capacity(vars.len());
        let mut stride = total;
        for &e in extents {
            let e = e as usize;
            stride /= e;
            values.push((0..total).map(|l| ((l / stride) % e) as i64).collect());
        }
        self.par = Some(Parallel { vars: vars.to_vec(), values });
        // local buffers are per-thread temporaries: a body that writes one runs one
        // iteration at a time, so each iteration sees its own writes
        let mut writes_local = false;
        walk_stmts(body, &mut |s| match s {
            Stmt::Store { buf, .. } => writes_local |= self.m.buffer(*buf).scope == Scope::Local,
            Stmt::Atomic { prev, .. } => writes_local |= prev.is_some(),
            _ => {}
        });
        let result = if writes_local {
            (0..total as u32).try_for_each(|l| self.exec(body, &[l]))
        } else {
            let ids: Vec<u32> = (0..total as u32).collect();
            self.exec(body, &ids)
        };
        self.par = None;
        result
    }

    /// Start indices of a resolved region, each wrapped to its expression's dtype.
    fn starts(&self, r: &ResolvedRegion, loc: Loc) -> Result<Vec<(i64, DType)>, Diagnostic> {
        r.starts.iter().map(|e| Ok((self.scalar(e, loc)?.as_i64(), e.dtype()))).collect()
    }

    /// Offset of every element of a region, iterating over its non-unit kept dimensions in
    /// row-major order; `usize::MAX` past a global tensor's edge; on-chip out of range is
    /// an error.
    fn region_offsets(&self, r: &ResolvedRegion, loc: Loc) -> Result<Vec<usize>, Diagnostic> {
        let starts = self.starts(r, loc)?;
        let dims: Vec<usize> = (0..r.extents.len()).filter(|&d| r.kept[d] && r.extents[d] != 1).collect();
        let shape: Vec<i64> = dims.iter().map(|&d| r.extents[d]).collect();
        let n = shape.iter().product::<i64>().max(0) as usize;
        let mut cols: Vec<Vec<i64>> = starts.iter().map(|&(s, _)| vec![s; n]).collect();
        let mut k = 0;
        for_each_index(&shape, |c| {
            for (pos, &d) in dims.iter().enumerate() {
                let (s, dt) = starts[d];
                cols[d][k] = wrap_int(s.wrapping_add(c[pos]), dt);
            }
            k += 1;
            Ok(())
        })?;
        self.offsets(r.buf, &cols, n, loc)
    }

    fn copy(&mut self, src: &Region, dst: &Region, pad: Option<&Expr>, loc: Loc) -> Result<(), Diagnostic> {
        let m = self.m;
        let (s, d) = resolve_copy(m, src, dst, loc)?;
        let (sb, db) = (m.buffer(s.buf), m.buffer(d.buf));
        let from = self.region_offsets(&s, loc)?;
        let to = self.region_offsets(&d, loc)?;
        if from.len() != to.len() {
            return Err(Diagnostic::bug("copy regions of different sizes after resolution"));
        }
        let data = &self.mem[s.buf.0 as usize];
        let values = if from.contains(&usize::MAX) {
            let pad = match pad {
                Some(p) => cast(self.scalar(p, loc)?, p.dtype(), sb.dtype),
                None => cast(Val::I(0), DType::I64, sb.dtype),
            };
            let mut values = Col::empty_like(sb.dtype, from.len());
            for &o in &from {
                values.push(if o == usize::MAX { pad } else { data.get(o) });
            }
            values
        } else {
            data.gather(&from)
        };
        self.store(d.buf, &to, cast_col(values, sb.dtype, db.dtype));
        Ok(())
    }

    /// Atomic `op` on the elements of `buf` at `offsets` (in order), with `values`; the
    /// old values (0 for an element past a global tensor's edge, where the atomic is
    /// dropped).
    fn atomic(
        &mut self,
        op: AtomicOp,
        buf: BufferId,
        offsets: &[usize],
        values: &Col,
        loc: Loc,
    ) -> Result<Vec<Val>, Diagnostic> {
        let dt = self.m.buffer(buf).dtype;
        let mut olds = Vec::with_capacity(offsets.len());
        for (k, &o) in offsets.iter().enumerate() {
            if o == usize::MAX {
                olds.push(cast(Val::I(0), DType::I64, dt));
                continue;
            }
            let old = self.mem[buf.0 as usize].get(o);
            let new = num::atomic_combine(op, old, values.get(k), dt)
                .map_err(|e| self.op_error(e, &format!("atomic_{}", op.name()), dt, loc))?;
            self.mem[buf.0 as usize].set(o, new);
            olds.push(old);
        }
        Ok(olds)
    }

    /// A tile atomic: each element of `dst` combined with its element of `src` (converted
    /// to `dst`'s dtype), in row-major order.
    fn atomic_tile(&mut self, op: AtomicOp, src: &Region, dst: &Region, loc: Loc) -> Result<(), Diagnostic> {
        let m = self.m;
        let (s, d) = resolve_copy(m, src, dst, loc)?;
        let (sb, db) = (m.buffer(s.buf), m.buffer(d.buf));
        let from = self.region_offsets(&s, loc)?;
        let to = self.region_offsets(&d, loc)?;
        if from.len() != to.len() {
            return Err(Diagnostic::bug("atomic regions of different sizes after resolution"));
        }
        let data = &self.mem[s.buf.0 as usize];
        let mut values = Col::empty_like(sb.dtype, from.len());
        let zero = cast(Val::I(0), DType::I64, sb.dtype);
        for &o in &from {
            values.push(if o == usize::MAX { zero } else { data.get(o) });
        }
        self.atomic(op, d.buf, &to, &cast_col(values, sb.dtype, db.dtype), loc)?;
        Ok(())
    }

    fn fill(&mut self, dst: &Region, value: &Expr, loc: Loc) -> Result<(), Diagnostic> {
        let r = resolve_region(self.m, dst, None)?;
        let dt = self.m.buffer(r.buf).dtype;
        let v = cast(self.scalar(value, loc)?, value.dtype(), dt);
        let offsets = self.region_offsets(&r, loc)?;
        let n = offsets.len();
        self.store(r.buf, &offsets, Col::splat(v, n));
        Ok(())
    }

    fn reduce(
        &mut self,
        kind: ReduceKind,
        src: BufferId,
        dst: BufferId,
        dim: usize,
        clear: bool,
        loc: Loc,
    ) -> Result<(), Diagnostic> {
        let m = self.m;
        let (sb, db) = (m.buffer(src), m.buffer(dst));
        if dim >= sb.extents().len() {
            return Err(Diagnostic::error(format!("dim={dim} is out of range for '{}'", sb.name), loc));
        }
        let outer: i64 = sb.extents()[..dim].iter().product();
        let len = sb.extents()[dim];
        let inner: i64 = sb.extents()[dim + 1..].iter().product();
        if outer * inner != db.num_elements() {
            return Err(Diagnostic::error(
                format!(
                    "'{}' of shape {:?} cannot hold the reduction of '{}' over dim {dim}",
                    db.name,
                    db.extents(),
                    sb.name
                ),
                loc,
            ));
        }
        // fp16/bf16 accumulate in float32
        let acc_dt = if matches!(sb.dtype, DType::F16 | DType::BF16) { DType::F32 } else { sb.dtype };
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = num::reduce_identity(kind, acc_dt);
                for r in 0..len {
                    let x = cast(
                        self.mem[src.0 as usize].get(((o * len + r) * inner + i) as usize),
                        sb.dtype,
                        acc_dt,
                    );
                    let x = match (kind, x) {
                        (ReduceKind::AbsMax, Val::F(f)) => Val::F(f.abs()),
                        (ReduceKind::AbsMax, Val::I(v)) if acc_dt.is_signed() => {
                            Val::I(wrap_int(v.wrapping_abs(), acc_dt))
                        }
                        (_, x) => x,
                    };
                    acc = num::reduce_combine(kind, acc, x, acc_dt);
                }
                let out = (o * inner + i) as usize;
                if !clear {
                    let old = cast(self.mem[dst.0 as usize].get(out), db.dtype, acc_dt);
                    acc = num::reduce_combine(kind, old, acc, acc_dt);
                }
                self.mem[dst.0 as usize].set(out, cast(acc, acc_dt, db.dtype));
            }
        }
        Ok(())
    }

    /// `C (+)= op(A) @ op(B)` over views (`GemmView`) of A and B: products exact, summed over K in order, rounded to C's dtype
    /// after every addition.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        transpose_a: bool,
        transpose_b: bool,
        clear: bool,
        (va, vb): (&GemmView, &GemmView),
        loc: Loc,
    ) -> Result<(), Diagnostic> {
        let m = self.m;
        let (ab, bb, cb) = (m.buffer(a), m.buffer(b), m.buffer(c));
        let (a_shape, b_shape) = (va.tile, vb.tile);
        if cb.extents().len() != 2 {
            return Err(Diagnostic::error("T.gemm operands must be 2-D", loc));
        }
        let (a_base, b_base, lda, ldb) = (va.base, vb.base, va.ld, vb.ld);
        let (rows, k_a) = if transpose_a { (a_shape[1], a_shape[0]) } else { (a_shape[0], a_shape[1]) };
        let (k_b, cols) = if transpose_b { (b_shape[1], b_shape[0]) } else { (b_shape[0], b_shape[1]) };
        if k_a != k_b || cb.extents() != [rows, cols] {
            return Err(Diagnostic::error("T.gemm operand shapes do not agree", loc));
        }
        let (rows, cols, k_a) = (rows as usize, cols as usize, k_a as usize);
        let a_at = |i: usize, k: usize| a_base + if transpose_a { k * lda + i } else { i * lda + k };
        let b_at = |k: usize, j: usize| b_base + if transpose_b { j * ldb + k } else { k * ldb + j };
        // op(A) row by row and op(B) column by column, so the K loop reads both contiguously
        let a_rows: Vec<usize> =
            (0..rows).flat_map(|i| (0..k_a).map(move |k| (i, k))).map(|(i, k)| a_at(i, k)).collect();
        let b_cols: Vec<usize> =
            (0..cols).flat_map(|j| (0..k_a).map(move |k| (k, j))).map(|(k, j)| b_at(k, j)).collect();
        let x = self.mem[a.0 as usize].gather(&a_rows);
        let y = self.mem[b.0 as usize].gather(&b_cols);
        let dt = cb.dtype;
        let c_all: Vec<usize> = (0..rows * cols).collect();
        let old = self.mem[c.0 as usize].gather(&c_all);
        let result = match (x, y, old) {
            (Col::F(x), Col::F(y), Col::F(acc))
                if dt == DType::F32
                    && [ab.dtype, bb.dtype].iter().all(|d| matches!(d, DType::F16 | DType::BF16)) =>
            {
                Col::F(gemm_f32_exact_products(&x, &y, acc, rows, cols, k_a, clear))
            }
            (Col::F(x), Col::F(y), Col::F(mut acc)) => {
                let round = rounder(dt);
                for i in 0..rows {
                    let x_row = &x[i * k_a..(i + 1) * k_a];
                    for j in 0..cols {
                        let y_col = &y[j * k_a..(j + 1) * k_a];
                        let mut s = if clear { 0.0 } else { acc[i * cols + j] };
                        for (p, q) in x_row.iter().zip(y_col) {
                            s = round(s + p * q);
                        }
                        acc[i * cols + j] = s;
                    }
                }
                Col::F(acc)
            }
            (Col::I(x), Col::I(y), Col::I(mut acc)) => {
                let wrap = wrapper(dt);
                for i in 0..rows {
                    let x_row = &x[i * k_a..(i + 1) * k_a];
                    for j in 0..cols {
                        let y_col = &y[j * k_a..(j + 1) * k_a];
                        let mut s = if clear { 0 } else { acc[i * cols + j] };
                        for (p, q) in x_row.iter().zip(y_col) {
                            s = wrap(s.wrapping_add(p.wrapping_mul(*q)));
                        }
                        acc[i * cols + j] = s;
                    }
                }
                Col::I(acc)
            }
            _ => {
                return Err(Diagnostic::error(
                    format!("T.gemm of {} x {} into {} is not supported", ab.dtype, bb.dtype, dt),
                    loc,
                ))
            }
        };
        self.mem[c.0 as usize].scatter(&c_all, &result);
        Ok(())
    }
}

/// A gemm operand's matrix in its buffer (row-major elements): element `(r, c)` of the
/// stored matrix is at `base + r * ld + c`.
struct GemmView {
    base: usize,
    ld: usize,
    tile: [i64; 2],
}
