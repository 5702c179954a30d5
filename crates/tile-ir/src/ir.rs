//! IR node types: the module, buffers, variables, expressions and statements.

use crate::diag::{Loc, SourceTable};
use crate::inst::{Inst, Instruction};
use crate::layout::FragmentLayout;
use crate::target::{CopyAtom, MmaAtom};
use crate::types::{DType, Scope};
use std::fmt;

/// Index of a buffer in [`Module::buffers`]; prints as `@name` in the text IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// Index of a variable in [`Module::vars`]; prints as `%name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// One dimension of a buffer: a number, or — global tensors only — a symbolic size
/// (`T.dynamic`), a variable of kind [`VarKind::Size`] that a call binds from its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Fixed(i64),
    Size(VarId),
}

impl Dim {
    pub fn fixed(self) -> Option<i64> {
        match self {
            Dim::Fixed(n) => Some(n),
            Dim::Size(_) => None,
        }
    }
}

impl From<i64> for Dim {
    fn from(n: i64) -> Dim {
        Dim::Fixed(n)
    }
}

/// A shape of fixed dimensions, as `Dim`s.
pub fn fixed_dims(shape: &[i64]) -> Vec<Dim> {
    shape.iter().map(|&n| Dim::Fixed(n)).collect()
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub scope: Scope,
    pub dtype: DType,
    /// Fixed for every on-chip buffer; a global tensor's dimensions may be symbolic.
    pub shape: Vec<Dim>,
    pub loc: Loc,
    /// For fragments: who holds which element (set by `infer_layouts`).
    pub layout: Option<FragmentLayout>,
    /// Byte offset in the block's shared memory (set by `plan_shared_memory`).
    pub shared_offset: Option<u64>,
    /// Shared memory only: the swizzle of the tile's byte offsets (see
    /// [`crate::shared_layout`]; its layout is [`crate::SharedLayout::of`] this buffer).
    pub swizzle: Option<crate::shared_layout::Swizzle>,
    /// Shared memory only: the last dimension is stored in panels of this many elements,
    /// `[C / P][R][P]` for a tile of R rows of C (the canonical layouts `wgmma` reads: a row
    /// of a panel is one swizzle span). None: row-major.
    pub panel: Option<i64>,
    /// `T.view(root, shape, dtype)` of another dtype: a shared tile over `root`'s bytes
    /// (`plan_shared_memory` places it at the root's offset; `insert_syncs` orders their
    /// accesses as one buffer's). None: a buffer of its own.
    pub alias_of: Option<BufferId>,
}

impl Buffer {
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// The shape, when every dimension is fixed.
    pub fn fixed_shape(&self) -> Option<Vec<i64>> {
        self.shape.iter().map(|d| d.fixed()).collect()
    }
    pub fn is_symbolic(&self) -> bool {
        self.shape.iter().any(|d| d.fixed().is_none())
    }
    /// The shape of a buffer whose dimensions are fixed: every on-chip buffer (`verify`
    /// refuses a symbolic one). Panics on a symbolic shape, a compiler bug.
    pub fn extents(&self) -> Vec<i64> {
        match self.fixed_shape() {
            Some(s) => s,
            None => panic!("internal error: '{}' has a symbolic shape here", self.name),
        }
    }
    /// Extent of dimension `d`, when fixed.
    pub fn extent(&self, d: usize) -> Option<i64> {
        self.shape.get(d).and_then(|x| x.fixed())
    }
    /// Elements of a fixed shape (see [`Buffer::extents`]).
    pub fn num_elements(&self) -> i64 {
        self.extents().iter().product()
    }
    pub fn bytes(&self) -> i64 {
        self.num_elements() * self.dtype.bytes() as i64
    }
    /// The alignment the tile's physical shared address needs: a tile in wgmma's layout is
    /// swizzled by the hardware on physical address bits, so it starts on the swizzle's
    /// period; other tiles are swizzled relative to their start (16 bytes, 128 when
    /// swizzled, for the banks).
    pub fn shared_align(&self) -> u64 {
        match (self.panel, self.swizzle) {
            (Some(_), Some(sw)) => sw.period() as u64,
            (None, Some(_)) => 128,
            _ => 16,
        }
    }
    /// Row-major strides in elements, of a fixed shape.
    pub fn strides(&self) -> Vec<i64> {
        row_major_strides(&self.extents())
    }
    /// The most elements the tensor can have: the product of its fixed dimensions and of the
    /// largest value each symbolic size's type allows.
    pub fn max_elements(&self, vars: &[Var]) -> i128 {
        let mut n: i128 = 1;
        for d in &self.shape {
            let x = match d {
                Dim::Fixed(v) => *v as i128,
                Dim::Size(id) => size_max(vars[id.0 as usize].dtype) as i128,
            };
            n = n.saturating_mul(x);
        }
        n
    }
}

/// Row-major strides of a shape.
pub fn row_major_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// The largest value a symbolic size of integer type `dt` can take.
pub fn size_max(dt: DType) -> i64 {
    match dt {
        DType::I64 => i64::MAX,
        _ => i32::MAX as i64,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarKind {
    /// The block's coordinate along grid axis 0, 1, 2 (`bx`, `by`, `bz`): `blockIdx.{x,y,z}`,
    /// or, when `rasterize` renumbers the blocks, bound by a `let` from the launch indices.
    BlockIdx(u8),
    /// Thread level: `blockIdx.{x,y,z}` as launched, when the block order differs from the
    /// user's (`rasterize`).
    LaunchIdx(u8),
    /// Thread level: `gridDim.{x,y,z}`, the blocks launched (a persistent kernel's stride
    /// over its tiles).
    LaunchDim(u8),
    /// `threadIdx.x` (thread level, and the role split of a warp-specialized pipeline).
    ThreadIdx,
    /// Bound by a loop.
    Loop,
    /// A scalar kernel parameter.
    Param,
    /// A symbolic size (`T.dynamic`): a dimension of global tensors that a call binds from
    /// the tensors it is given, a multiple of `multiple_of` (1: nothing promised), never
    /// negative. Passed to the kernel as a trailing scalar parameter.
    Size { multiple_of: i64 },
    /// Bound by a `let` (thread level only).
    Temp,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Var {
    pub name: String,
    pub kind: VarKind,
    pub dtype: DType,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Tensor { name: String, buffer: BufferId },
    Scalar { name: String, var: VarId },
}

impl Param {
    pub fn name(&self) -> &str {
        match self {
            Param::Tensor { name, .. } | Param::Scalar { name, .. } => name,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Tile,
    Thread,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub grid: Vec<Expr>,
    pub threads: u32,
    pub body: Vec<Stmt>,
    pub loc: Loc,
    /// `T.use_swizzle(panel)`: the order blocks are numbered in (the grid's blocks are the
    /// same; which hardware block runs which `(bx, by)` changes, for L2 reuse).
    pub raster: Option<Raster>,
    /// Warp specialization (`plan_warp_roles`): producer warps launched after the user's
    /// `threads`, and the register budgets of both roles. None: every thread runs the
    /// user's code.
    pub roles: Option<WarpRoles>,
    /// The TMA descriptors the kernel takes, after its parameters and sizes: one per
    /// (tensor, box, swizzle) its bulk tensor copies use. The launcher encodes them per call.
    pub tensor_maps: Vec<TensorMapDesc>,
    /// The register budgets the kernel asks of the warp roles the compiler adds
    /// (`T.annotate_producer_reg_dealloc`, `T.annotate_consumer_reg_alloc`,
    /// `T.no_set_max_nreg`); None: the compiler's.
    pub reg_budget: Option<RegBudget>,
    /// `T.import_source`: CUDA C++ the kernel's `T.call_extern`s call (device functions the
    /// user writes), emitted before the kernel in the order imported, each once.
    pub extern_sources: Vec<String>,
    /// `threads=n` not a multiple of 32: the threads the user's code is written for. The
    /// block launches `threads` (n rounded up to whole warps); tile ops spread over all of
    /// them, and per-thread code (`tile_ir::per_thread`) runs on threads 0..n only.
    pub user_threads: Option<u32>,
    /// `T.ClusterKernel(..., cluster_dims=(x, y, 1))`: the thread-block cluster this kernel
    /// asks for (`[x, y]` blocks along `bx`, `by`), in place of the compile option
    /// `cluster=` (`plan_warp_roles` makes it where it can, else reports why not).
    pub cluster: Option<[u32; 2]>,
}

/// The kernel's say on `plan_warp_roles`' `setmaxnreg` budgets: 0 for a role leaves the
/// compiler's choice; `none` means no `setmaxnreg` at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegBudget {
    pub producer: u32,
    pub consumer: u32,
    pub none: bool,
}

/// The warps of a warp-specialized kernel: threads `0..threads` (the user's, numbered as
/// written) consume, `threads..threads + producers` produce (issue TMA copies). Each
/// warpgroup sets its register budget with `setmaxnreg` at the split. Ping-pong: two
/// copies of the consumers (`0..threads` and `threads..2 * threads`, each numbered from 0
/// in its own code) work on alternate tiles, the producers after both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarpRoles {
    pub producers: u32,
    pub producer_regs: u32,
    pub consumer_regs: u32,
    /// Persistent: `min(tiles, SMs)` blocks are launched (`Module::tiles`, the product of
    /// the grid, which keeps its meaning for `bx`, `by`, `bz`), each walking the tiles with a
    /// stride of the blocks launched.
    pub persistent: bool,
    /// Two consumer slots on alternate tiles of the persistent walk, their main loops in
    /// turn (one's epilogue overlaps the other's tensor-core work).
    pub pingpong: bool,
    /// Thread-block clusters of a persistent kernel: `cluster[0] x cluster[1]` tiles of the
    /// grid (along `bx`, `by`) walked together by as many consecutive blocks (a cluster
    /// along the launch's x), the producer copies that do not depend on the block index
    /// along the cluster multicast (each block loads its share into all). A kernel launched
    /// a tile per block (`persistent` false) has `[n, 1]`: n consecutive blocks along `bx`.
    /// `[1, 1]`: none.
    pub cluster: [u32; 2],
    /// A persistent walk over tiles whose pipelined loops differ in trip count along `bx`
    /// (a causal mask): each block takes tiles in pairs of equal total work (`bx = x` and
    /// `bx = gx - 1 - x` of one row of the grid, or the row's middle tile with the next
    /// row's first when `gx` is odd), and the producer and the consumers carry the ring's
    /// position from tile to tile as a running sum of the trip counts.
    pub fold: bool,
}

impl WarpRoles {
    /// Copies of the user's threads that consume: 2 with ping-pong, else 1.
    pub fn slots(&self) -> u32 {
        1 + self.pingpong as u32
    }

    /// Blocks per thread-block cluster (1: no cluster).
    pub fn cluster_blocks(&self) -> u32 {
        self.cluster[0] * self.cluster[1]
    }
}

/// A TMA tensor map: `tensor` (a global parameter) seen in boxes of `box_dims` elements
/// per dimension (outermost first, like its shape), written to shared memory with the
/// `swizzle` (bytes: 0, 32, 64 or 128). Elements past the tensor's edge read as zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapDesc {
    pub tensor: BufferId,
    pub box_dims: Vec<i64>,
    pub swizzle: u32,
}

impl TensorMapDesc {
    /// Bytes one box moves.
    pub fn box_bytes(&self, elem_bytes: usize) -> i64 {
        self.box_dims.iter().product::<i64>() * elem_bytes as i64
    }
}

/// Threadblock rasterization: consecutive blocks walk down a panel of `panel` rows of the
/// grid (`by`), column after column (`bx`) — or, with `by_rows` false, along a panel of
/// `panel` columns, row after row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Raster {
    pub panel: u32,
    pub by_rows: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub name: String,
    pub sources: SourceTable,
    pub params: Vec<Param>,
    pub buffers: Vec<Buffer>,
    /// Global scratch buffers (`T.alloc_global`), in declaration order: not parameters of
    /// the call, but allocated by the runtime for each call (contents undefined at the start)
    /// and passed to the CUDA function after `params`. Every global buffer is a tensor
    /// parameter, one of these, or a view of an address the kernel reads
    /// ([`Module::is_pointer`], set by `bind_pointer`).
    pub scratch: Vec<BufferId>,
    pub vars: Vec<Var>,
    pub kernel: Kernel,
    pub level: Level,
    /// The manual schedules of pipelined loops (`ForKind::Pipelined::schedule`).
    pub schedules: Vec<Schedule>,
}

impl Module {
    /// Whether `b` is a global scratch buffer the runtime allocates per call
    /// ([`Module::scratch`]).
    pub fn is_scratch(&self, b: BufferId) -> bool {
        self.scratch.contains(&b)
    }
    /// The buffer whose bytes `b` occupies: the tile a view of another dtype (`T.view`,
    /// `alias_of`) lies over, else `b` itself.
    pub fn storage(&self, b: BufferId) -> BufferId {
        self.buffer(b).alias_of.unwrap_or(b)
    }
    /// Per buffer, whether it is a tile the cluster's peers reach (`T.copy_cluster`'s
    /// destination) under any name — the tile a [`Scope::Cluster`] view lies over, or a
    /// `T.view` over the same bytes; the views themselves are not.
    pub fn peer_reached(&self) -> Vec<bool> {
        let ids = || (0..self.buffers.len() as u32).map(BufferId);
        let reached: Vec<BufferId> =
            ids().filter(|&b| self.buffer(b).scope == Scope::Cluster).map(|v| self.storage(v)).collect();
        ids().map(|b| self.buffer(b).scope != Scope::Cluster && reached.contains(&self.storage(b))).collect()
    }
    /// Whether `b` is a global buffer over an address the kernel reads (`T.make_tensor`):
    /// neither a tensor parameter nor scratch; a `bind_pointer` sets it before any access.
    pub fn is_pointer(&self, b: BufferId) -> bool {
        self.buffer(b).scope == crate::Scope::Global
            && !self.is_scratch(b)
            && !self.params.iter().any(|p| matches!(p, Param::Tensor { buffer, .. } if *buffer == b))
    }
    /// This module with its scratch buffers as tensor parameters after the others (named as
    /// the buffers): how the checks without a GPU run one kernel of a prim_func of several,
    /// whose scratch lives through the whole call, on contents they give it.
    pub fn scratch_as_params(mut self) -> Module {
        for b in std::mem::take(&mut self.scratch) {
            self.params.push(Param::Tensor { name: self.buffers[b.0 as usize].name.clone(), buffer: b });
        }
        self
    }
    /// The alignment the block's shared memory base must have (the largest
    /// `Buffer::shared_align` of a tile in wgmma's layout; 16 when there is none). Above 16,
    /// the generated code rounds the dynamic shared memory's address up to it, and the launch
    /// asks for that many bytes more.
    pub fn shared_base_align(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|b| b.scope == Scope::Shared && b.panel.is_some())
            .map(|b| b.shared_align())
            .max()
            .unwrap_or(16)
    }

    /// A persistent kernel's tiles: the product of its grid (fixed), or None.
    pub fn tiles(&self) -> Option<i64> {
        if !self.kernel.roles.is_some_and(|r| r.persistent) {
            return None;
        }
        self.kernel.grid.iter().try_fold(1i64, |acc, g| g.as_int().and_then(|v| acc.checked_mul(v)))
    }

    /// Blocks per thread-block cluster (1: the kernel is launched without clusters): those
    /// of a warp-specialized kernel's multicast plan, else, for a kernel that works across
    /// its cluster itself (see [`Module::cluster_ops`]), `T.ClusterKernel`'s blocks along x.
    pub fn cluster_blocks(&self) -> u32 {
        match self.kernel.roles.map_or(1, |r| r.cluster_blocks()) {
            1 if self.cluster_ops() => self.kernel.cluster.map_or(1, |[x, _]| x),
            n => n,
        }
    }

    /// Whether the user's kernel works across its thread-block cluster: it reaches other
    /// blocks' shared memory (a [`Scope::Cluster`] view, `T.copy_cluster`) or waits for them
    /// (`T.cluster_sync`, `T.cluster_arrive` / `T.cluster_wait`). Such a kernel is launched
    /// in `T.ClusterKernel`'s clusters whatever else is planned, and is not warp-specialized.
    pub fn cluster_ops(&self) -> bool {
        if self.buffers.iter().any(|b| b.scope == Scope::Cluster) {
            return true;
        }
        if self.kernel.roles.is_some() {
            // a warp-specialized kernel: its cluster syncs are the multicast plan's
            return false;
        }
        let mut found = false;
        walk_stmts(&self.kernel.body, &mut |s| found |= s.is_cluster_barrier());
        found
    }

    /// Threads launched per block: the user's `threads` plus the producer warps.
    pub fn launched_threads(&self) -> u32 {
        self.consumer_threads() + self.kernel.roles.map_or(0, |r| r.producers)
    }

    /// Threads that run the user's code: `threads`, twice with ping-pong consumers.
    pub fn consumer_threads(&self) -> u32 {
        self.kernel.threads * self.kernel.roles.map_or(1, |r| r.slots())
    }

    /// The condition that separates the roles of a warp-specialized kernel: true on the
    /// user's threads (the consumers).
    pub fn consumer_cond(&self, tid: VarId) -> Expr {
        Expr::binary(BinOp::Lt, Expr::var(tid, DType::I32), Expr::int(self.consumer_threads() as i64))
    }

    /// The condition that separates the two consumer slots of a ping-pong kernel inside
    /// its consumer branch: true on slot 0.
    pub fn slot_cond(&self, tid: VarId) -> Expr {
        Expr::binary(BinOp::Lt, Expr::var(tid, DType::I32), Expr::int(self.kernel.threads as i64))
    }

    /// The top-level statement that splits a warp-specialized kernel into its roles
    /// (`if tid < threads { consumers } else { producers }`), by position.
    pub fn role_split(&self) -> Option<usize> {
        self.role_split_in(&self.kernel.body)
    }

    /// [`Module::role_split`] in `body` (a kernel body being rebuilt).
    pub fn role_split_in(&self, body: &[Stmt]) -> Option<usize> {
        self.kernel.roles?;
        let tid = self.vars.iter().position(|v| v.kind == VarKind::ThreadIdx)?;
        let cond = self.consumer_cond(VarId(tid as u32));
        body.iter().position(|s| matches!(s, Stmt::If { cond: c, .. } if *c == cond))
    }

    /// The threads `first..first + count` a condition selects when it is a warp-role region
    /// the kernel wrote (`T.ws(k)`: `tid >= first && tid < first + count`, `tid < count` or
    /// `tid >= first`), and none else. Tile operations inside such a branch run on those threads alone,
    /// numbered from 0; the compiler's own role split is not one (it has `roles`).
    pub fn thread_range(&self, cond: &Expr) -> Option<(u32, u32)> {
        if self.kernel.roles.is_some() {
            return None;
        }
        let is_tid = |e: &Expr| matches!(e, Expr::Var { id, .. } if self.vars.get(id.0 as usize).map(|v| v.kind) == Some(VarKind::ThreadIdx));
        // (lower bound, upper bound) a comparison of the thread index gives
        let bound = |e: &Expr| -> Option<(Option<i64>, Option<i64>)> {
            let Expr::Binary { op, a, b, .. } = e else { return None };
            let (op, c) = match (is_tid(a), is_tid(b), a.as_int(), b.as_int()) {
                (true, _, _, Some(c)) => (*op, c),
                (_, true, Some(c), _) => match op {
                    BinOp::Lt => (BinOp::Gt, c),
                    BinOp::Le => (BinOp::Ge, c),
                    BinOp::Gt => (BinOp::Lt, c),
                    BinOp::Ge => (BinOp::Le, c),
                    _ => return None,
                },
                _ => return None,
            };
            match op {
                BinOp::Lt => Some((None, Some(c))),
                BinOp::Le => Some((None, Some(c + 1))),
                BinOp::Ge => Some((Some(c), None)),
                BinOp::Gt => Some((Some(c + 1), None)),
                _ => None,
            }
        };
        let (lo, hi) = match cond {
            Expr::Binary { op: BinOp::And, a, b, .. } => {
                let (x, y) = (bound(a)?, bound(b)?);
                (x.0.or(y.0), x.1.or(y.1))
            }
            other => bound(other)?,
        };
        // the thread index is below the kernel's threads (simplify drops that half)
        let threads = self.kernel.threads as i64;
        let (lo, hi) = (lo.unwrap_or(0), hi.unwrap_or(threads));
        if lo < 0 || hi > threads || lo >= hi || (lo == 0 && hi == threads) {
            return None;
        }
        Some((lo as u32, (hi - lo) as u32))
    }

    /// A chain of warp-role `if`s (`if tx < 128: ... elif tx < 256: ... else: ...`) with
    /// each branch on the threads it runs on: a branch's range less the earlier ones', the
    /// final `else` once per interval of the threads no range holds (copied when there are
    /// two), each a warp-role `if` of its own. The chain keeps its nesting (one statement:
    /// its branches run at once), every `else` holding only warp-role `if`s, which the
    /// passes take as regions where they meet them. A chain whose ranges do not leave
    /// intervals keeps its shape. The JSON reader applies it to what the tracer wrote.
    pub fn split_role_elses(&mut self) {
        let body = std::mem::take(&mut self.kernel.body);
        self.kernel.body = self.split_elses(body);
    }

    fn split_elses(&self, body: Vec<Stmt>) -> Vec<Stmt> {
        body.into_iter()
            .flat_map(|s| match s {
                Stmt::If { cond, then, otherwise, loc } if !otherwise.is_empty() => {
                    let s = Stmt::If { cond, then, otherwise, loc };
                    match self.role_chain(&s) {
                        Some(parts) => parts,
                        None => {
                            let Stmt::If { cond, then, otherwise, loc } = s else { unreachable!() };
                            vec![Stmt::If {
                                cond,
                                then: self.split_elses(then),
                                otherwise: self.split_elses(otherwise),
                                loc,
                            }]
                        }
                    }
                }
                Stmt::If { cond, then, otherwise, loc } => {
                    vec![Stmt::If { cond, then: self.split_elses(then), otherwise, loc }]
                }
                Stmt::For { var, start, extent, kind, body, loc } => {
                    vec![Stmt::For { var, start, extent, kind, body: self.split_elses(body), loc }]
                }
                other => vec![other],
            })
            .collect()
    }

    /// `s` (an `if` with an `else`) as a sequence of disjoint warp-role `if`s, if it is a
    /// chain of them.
    fn role_chain(&self, s: &Stmt) -> Option<Vec<Stmt>> {
        let Stmt::If { cond, loc, .. } = s else { return None };
        let tid = self.thread_index_in(cond)?;
        let threads = self.kernel.threads;
        let mut taken: Vec<(u32, u32)> = Vec::new(); // [lo, hi) intervals held so far
        let mut out: Vec<Vec<Stmt>> = Vec::new();
        let mut at = s;
        let range_if = |lo: u32, hi: u32, body: Vec<Stmt>| {
            let c = |op, v: u32| Expr::binary(op, tid.clone(), Expr::int_of(v as i64, tid.dtype()));
            let cond = match (lo > 0, hi < threads) {
                (true, true) => Expr::binary(BinOp::And, c(BinOp::Ge, lo), c(BinOp::Lt, hi)),
                (true, false) => c(BinOp::Ge, lo),
                (false, true) => c(BinOp::Lt, hi),
                (false, false) => return body,
            };
            vec![Stmt::If { cond, then: body, otherwise: vec![], loc: *loc }]
        };
        // the threads of [lo, hi) that no earlier range took, if they are one interval
        let free = |taken: &[(u32, u32)], lo: u32, hi: u32| -> Vec<(u32, u32)> {
            let mut parts = vec![(lo, hi)];
            for &(a, b) in taken {
                parts = parts
                    .into_iter()
                    .flat_map(|(x, y)| {
                        let mut v = Vec::new();
                        if x < a.min(y) {
                            v.push((x, a.min(y)));
                        }
                        if b.max(x) < y {
                            v.push((b.max(x), y));
                        }
                        v
                    })
                    .collect();
            }
            parts
        };
        loop {
            let Stmt::If { cond, then, otherwise, .. } = at else { unreachable!() };
            let (first, count) = self.thread_range(cond)?;
            if self.thread_index_in(cond).as_ref() != Some(&tid) {
                return None;
            }
            let own = free(&taken, first, first + count);
            if own.len() > 1 {
                return None;
            }
            for (lo, hi) in own {
                out.push(range_if(lo, hi, self.split_elses(then.clone())));
            }
            taken.push((first, first + count));
            match otherwise.as_slice() {
                [next @ Stmt::If { cond: c, .. }] if self.thread_range(c).is_some() => at = next,
                rest => {
                    let mut last = Vec::new();
                    if !rest.is_empty() {
                        for (lo, hi) in free(&taken, 0, threads) {
                            last.extend(range_if(lo, hi, self.split_elses(rest.to_vec())));
                        }
                    }
                    // nest the branches again: `if r1 {A} else { if r2 {B} else { ... } }`
                    let mut acc = last;
                    for branch in out.into_iter().rev() {
                        acc = match branch.as_slice() {
                            [Stmt::If { cond, then, .. }] => {
                                vec![Stmt::If {
                                    cond: cond.clone(),
                                    then: then.clone(),
                                    otherwise: acc,
                                    loc: *loc,
                                }]
                            }
                            _ => return None,
                        };
                    }
                    return Some(acc);
                }
            }
        }
    }

    /// The thread-index variable a condition reads.
    fn thread_index_in(&self, cond: &Expr) -> Option<Expr> {
        let mut found = None;
        cond.walk(&mut |e| {
            if let Expr::Var { id, .. } = e {
                if self.vars.get(id.0 as usize).map(|v| v.kind) == Some(VarKind::ThreadIdx) {
                    found = Some(e.clone());
                }
            }
        });
        found
    }

    /// Whether the kernel synchronizes its warps itself: warp-role regions (`T.ws`) or
    /// barriers of its own (`T.alloc_barrier`). The compiler then adds no warp roles.
    pub fn own_warp_roles(&self) -> bool {
        let mut found = false;
        walk_stmts(&self.kernel.body, &mut |s| match s {
            Stmt::Barrier(_) => found = true,
            Stmt::If { cond, .. } => found |= self.thread_range(cond).is_some(),
            _ => {}
        });
        found
    }

    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }
    pub fn buffer_mut(&mut self, id: BufferId) -> &mut Buffer {
        &mut self.buffers[id.0 as usize]
    }
    pub fn var(&self, id: VarId) -> &Var {
        &self.vars[id.0 as usize]
    }
    pub fn add_var(&mut self, name: &str, kind: VarKind, dtype: DType) -> VarId {
        self.vars.push(Var { name: name.to_string(), kind, dtype });
        VarId(self.vars.len() as u32 - 1)
    }
    pub fn add_buffer(&mut self, buffer: Buffer) -> BufferId {
        self.buffers.push(buffer);
        BufferId(self.buffers.len() as u32 - 1)
    }
    /// Dimension `d` as an expression: a constant, or the size variable.
    pub fn dim_expr(&self, d: Dim) -> Expr {
        match d {
            Dim::Fixed(n) => Expr::int_of(n, if n > i32::MAX as i64 { DType::I64 } else { DType::I32 }),
            Dim::Size(id) => Expr::Var { id, dtype: self.var(id).dtype },
        }
    }
    /// The extent of dimension `d` of `buf` as an expression of type `dt` (an integer type
    /// at least as wide as the size's).
    pub fn extent_expr(&self, buf: BufferId, d: usize, dt: DType) -> Expr {
        crate::simplify::simplify(Expr::cast(self.dim_expr(self.buffer(buf).shape[d]), dt))
    }
    /// Row-major strides of `buf` in elements, as expressions of type `dt`.
    pub fn stride_exprs(&self, buf: BufferId, dt: DType) -> Vec<Expr> {
        let rank = self.buffer(buf).rank();
        let mut strides = vec![Expr::int_of(1, dt); rank];
        for d in (0..rank.saturating_sub(1)).rev() {
            strides[d] = crate::simplify::simplify(Expr::binary(
                BinOp::Mul,
                strides[d + 1].clone(),
                self.extent_expr(buf, d + 1, dt),
            ));
        }
        strides
    }
    /// A number known to divide dimension `d`'s extent: the extent when fixed, the size's
    /// declared multiple when symbolic.
    pub fn dim_multiple(&self, d: Dim) -> i64 {
        match d {
            Dim::Fixed(n) => n,
            Dim::Size(v) => match self.var(v).kind {
                VarKind::Size { multiple_of } => multiple_of,
                _ => 1,
            },
        }
    }
    /// Per dimension, a number known to divide `buf`'s row-major stride: the stride itself
    /// when the shape is fixed (what alignment and vector widths are decided by). Past
    /// 2^62 only its power-of-two part is kept.
    pub fn stride_multiples(&self, buf: BufferId) -> Vec<i64> {
        let b = self.buffer(buf);
        let mut out = vec![1i64; b.rank()];
        for d in (0..b.rank().saturating_sub(1)).rev() {
            let x = out[d + 1] as i128 * self.dim_multiple(b.shape[d + 1]) as i128;
            out[d] = if x <= 1 << 62 { x as i64 } else { 1 << (x.trailing_zeros().min(62)) };
        }
        out
    }
    /// Why `buf`'s rows may not start at multiples of `width` elements because of a symbolic
    /// size, as a hint for the user: "its rows are K elements long, and T.dynamic size 'K'
    /// promises no multiple of 8 (declare T.dynamic(\"K\", multiple_of=8))". None when no
    /// symbolic size is the reason.
    pub fn size_alignment_hint(&self, buf: BufferId, width: i64) -> Option<String> {
        let b = self.buffer(buf);
        b.shape.iter().skip(1).find_map(|d| match *d {
            Dim::Size(v) if self.dim_multiple(*d) % width != 0 => {
                let name = &self.var(v).name;
                Some(format!(
                    "'{}' has the T.dynamic size '{name}' after its first dimension, with no promise that it is a multiple of {width} (declare T.dynamic(\"{name}\", multiple_of={width}) if it always is)",
                    b.name
                ))
            }
            _ => None,
        })
    }
    /// The symbolic sizes, in the order of their variables: the kernel's trailing parameters.
    pub fn sizes(&self) -> Vec<VarId> {
        (0..self.vars.len() as u32)
            .map(VarId)
            .filter(|v| matches!(self.var(*v).kind, VarKind::Size { .. }))
            .collect()
    }
    /// This module with every symbolic dimension replaced by its value in `sizes` (one per
    /// [`Module::sizes`], in that order; 0 is allowed): what one call runs. The size
    /// variables stay, to be bound to the same values as scalars.
    pub fn with_sizes(&self, sizes: &[i64]) -> Module {
        let ids = self.sizes();
        let mut m = self.clone();
        for b in &mut m.buffers {
            for d in &mut b.shape {
                if let Dim::Size(v) = *d {
                    let k = ids.iter().position(|x| *x == v).expect("a size variable");
                    *d = Dim::Fixed(sizes[k]);
                }
            }
        }
        m
    }
    /// The `threadIdx.x` variable, created on first use.
    pub fn thread_idx(&mut self) -> VarId {
        if let Some(i) = self.vars.iter().position(|v| v.kind == VarKind::ThreadIdx) {
            return VarId(i as u32);
        }
        self.add_var("tid", VarKind::ThreadIdx, DType::I32)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    FloorMod,
    Max,
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub const ALL: [BinOp; 21] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::FloorDiv,
        BinOp::FloorMod,
        BinOp::Max,
        BinOp::Min,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::And,
        BinOp::Or,
        BinOp::BitAnd,
        BinOp::BitOr,
        BinOp::BitXor,
        BinOp::Shl,
        BinOp::Shr,
    ];
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::FloorDiv => "floordiv",
            BinOp::FloorMod => "floormod",
            BinOp::Max => "max",
            BinOp::Min => "min",
            BinOp::Eq => "eq",
            BinOp::Ne => "ne",
            BinOp::Lt => "lt",
            BinOp::Le => "le",
            BinOp::Gt => "gt",
            BinOp::Ge => "ge",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::BitAnd => "bitand",
            BinOp::BitOr => "bitor",
            BinOp::BitXor => "bitxor",
            BinOp::Shl => "shl",
            BinOp::Shr => "shr",
        }
    }
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
    Abs,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Erf,
    Sin,
    Cos,
    Floor,
    Ceil,
    /// The operand's bits as another type of the same width (`T.reinterpret`).
    Reinterpret,
}

impl UnOp {
    pub const ALL: [UnOp; 17] = [
        UnOp::Neg,
        UnOp::Not,
        UnOp::Abs,
        UnOp::Exp,
        UnOp::Exp2,
        UnOp::Log,
        UnOp::Log2,
        UnOp::Sqrt,
        UnOp::Rsqrt,
        UnOp::Tanh,
        UnOp::Sigmoid,
        UnOp::Erf,
        UnOp::Sin,
        UnOp::Cos,
        UnOp::Floor,
        UnOp::Ceil,
        UnOp::Reinterpret,
    ];
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Not => "not",
            UnOp::Abs => "abs",
            UnOp::Exp => "exp",
            UnOp::Exp2 => "exp2",
            UnOp::Log => "log",
            UnOp::Log2 => "log2",
            UnOp::Sqrt => "sqrt",
            UnOp::Rsqrt => "rsqrt",
            UnOp::Tanh => "tanh",
            UnOp::Sigmoid => "sigmoid",
            UnOp::Erf => "erf",
            UnOp::Sin => "sin",
            UnOp::Cos => "cos",
            UnOp::Floor => "floor",
            UnOp::Ceil => "ceil",
            UnOp::Reinterpret => "reinterpret",
        }
    }
    /// Transcendental and rounding functions: defined on floats only.
    pub fn is_float_math(self) -> bool {
        !matches!(self, UnOp::Neg | UnOp::Not | UnOp::Abs | UnOp::Reinterpret)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConstValue {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Const {
        value: ConstValue,
        dtype: DType,
    },
    Var {
        id: VarId,
        dtype: DType,
    },
    /// An element read. `oob` is the value read past a global tensor's edge (zero when absent).
    Load {
        buf: BufferId,
        idx: Vec<Expr>,
        dtype: DType,
        loc: Loc,
        oob: Option<Box<Expr>>,
    },
    Binary {
        op: BinOp,
        a: Box<Expr>,
        b: Box<Expr>,
        dtype: DType,
    },
    Unary {
        op: UnOp,
        a: Box<Expr>,
        dtype: DType,
    },
    Cast {
        a: Box<Expr>,
        dtype: DType,
    },
    Select {
        cond: Box<Expr>,
        a: Box<Expr>,
        b: Box<Expr>,
        dtype: DType,
    },
    /// Thread level: the value `a` held by the lane `lane ^ mask` of this warp.
    ShflXor {
        a: Box<Expr>,
        mask: u32,
        dtype: DType,
    },
}

impl Expr {
    pub fn dtype(&self) -> DType {
        match self {
            Expr::Const { dtype, .. }
            | Expr::Var { dtype, .. }
            | Expr::Load { dtype, .. }
            | Expr::Binary { dtype, .. }
            | Expr::Unary { dtype, .. }
            | Expr::Cast { dtype, .. }
            | Expr::Select { dtype, .. }
            | Expr::ShflXor { dtype, .. } => *dtype,
        }
    }

    pub fn int(value: i64) -> Expr {
        Expr::Const { value: ConstValue::Int(value), dtype: DType::I32 }
    }
    pub fn int_of(value: i64, dtype: DType) -> Expr {
        Expr::Const { value: ConstValue::Int(value), dtype }
    }
    pub fn bool(value: bool) -> Expr {
        Expr::Const { value: ConstValue::Int(value as i64), dtype: DType::Bool }
    }
    pub fn var(id: VarId, dtype: DType) -> Expr {
        Expr::Var { id, dtype }
    }
    pub fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
        let dtype = if op.is_comparison() { DType::Bool } else { a.dtype() };
        Expr::Binary { op, a: Box::new(a), b: Box::new(b), dtype }
    }
    pub fn unary(op: UnOp, a: Expr) -> Expr {
        let dtype = a.dtype();
        Expr::Unary { op, a: Box::new(a), dtype }
    }
    pub fn cast(a: Expr, dtype: DType) -> Expr {
        if a.dtype() == dtype {
            return a;
        }
        Expr::Cast { a: Box::new(a), dtype }
    }
    pub fn select(cond: Expr, a: Expr, b: Expr) -> Expr {
        let dtype = a.dtype();
        Expr::Select { cond: Box::new(cond), a: Box::new(a), b: Box::new(b), dtype }
    }
    pub fn load(buf: BufferId, idx: Vec<Expr>, dtype: DType) -> Expr {
        Expr::Load { buf, idx, dtype, loc: Loc::UNKNOWN, oob: None }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Const { value: ConstValue::Int(v), .. } => Some(*v),
            _ => None,
        }
    }
    /// Visit this expression and its sub-expressions, parents first.
    pub fn walk(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Const { .. } | Expr::Var { .. } => {}
            Expr::Load { idx, oob, .. } => {
                idx.iter().for_each(|e| e.walk(f));
                if let Some(o) = oob {
                    o.walk(f);
                }
            }
            Expr::Binary { a, b, .. } => {
                a.walk(f);
                b.walk(f);
            }
            Expr::Unary { a, .. } | Expr::Cast { a, .. } | Expr::ShflXor { a, .. } => a.walk(f),
            Expr::Select { cond, a, b, .. } => {
                cond.walk(f);
                a.walk(f);
                b.walk(f);
            }
        }
    }
    /// Rebuild this expression bottom-up; `f` may replace any node (children first).
    pub fn map(self, f: &mut dyn FnMut(Expr) -> Expr) -> Expr {
        let rebuilt = match self {
            Expr::Load { buf, idx, dtype, loc, oob } => Expr::Load {
                buf,
                idx: idx.into_iter().map(|e| e.map(f)).collect(),
                dtype,
                loc,
                oob: oob.map(|o| Box::new(o.map(f))),
            },
            Expr::Binary { op, a, b, dtype } => {
                Expr::Binary { op, a: Box::new(a.map(f)), b: Box::new(b.map(f)), dtype }
            }
            Expr::Unary { op, a, dtype } => Expr::Unary { op, a: Box::new(a.map(f)), dtype },
            Expr::Cast { a, dtype } => Expr::Cast { a: Box::new(a.map(f)), dtype },
            Expr::ShflXor { a, mask, dtype } => Expr::ShflXor { a: Box::new(a.map(f)), mask, dtype },
            Expr::Select { cond, a, b, dtype } => Expr::Select {
                cond: Box::new(cond.map(f)),
                a: Box::new(a.map(f)),
                b: Box::new(b.map(f)),
                dtype,
            },
            leaf => leaf,
        };
        f(rebuilt)
    }
    /// Does the expression mention variable `v`?
    pub fn uses_var(&self, v: VarId) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            if let Expr::Var { id, .. } = e {
                found |= *id == v;
            }
        });
        found
    }
    /// Replace variable `v` by `with`.
    pub fn substitute(self, v: VarId, with: &Expr) -> Expr {
        self.map(&mut |e| match e {
            Expr::Var { id, .. } if id == v => with.clone(),
            other => other,
        })
    }
}

/// One dimension of a region operand, as the user wrote it.
#[derive(Clone, Debug, PartialEq)]
pub enum RegionDim {
    /// `A[i]` inside a region with slices: one element, the dimension is dropped.
    Index(Expr),
    /// `A[a:b]`.
    Slice { start: Expr, stop: Expr },
    /// `A[i]` in the origin form (`T.copy(A[by * bM, k * bK], tile)`): extent from the other side.
    Origin(Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub buf: BufferId,
    /// One entry per leading dimension; missing trailing dimensions are whole.
    pub dims: Vec<RegionDim>,
    pub loc: Loc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForKind {
    Serial,
    Unroll,
    /// `T.Pipelined(n, num_stages=stages)`; `schedule` indexes [`Module::schedules`] when the
    /// user gave `stage=` / `order=` (one entry per top-level statement of the body).
    Pipelined {
        stages: u32,
        schedule: Option<u32>,
    },
}

/// TileLang's manual schedule of a pipelined loop (`T.Pipelined(..., stage=, order=,
/// group=)`, groups expanded): per top-level statement of the loop body, in source order,
/// its stage (statement of stage `s` runs iteration `i - s` at step `i`; negative: a copy
/// the pipeline's producer runs) and its position among the statements of a step. What is
/// honoured, and how: docs/architecture.md, "Manual pipeline schedules".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub stage: Vec<i32>,
    pub order: Vec<i32>,
}

/// How `gemm` spreads warps over the output tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarpPolicy {
    Square,
    FullRow,
    FullCol,
}

impl WarpPolicy {
    pub fn name(self) -> &'static str {
        match self {
            WarpPolicy::Square => "square",
            WarpPolicy::FullRow => "full_row",
            WarpPolicy::FullCol => "full_col",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceKind {
    Sum,
    Max,
    Min,
    AbsMax,
}

impl ReduceKind {
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::AbsMax => "absmax",
        }
    }
}

/// The read-modify-write of an atomic: `T.atomic_add` / `T.atomic_max` / `T.atomic_min`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AtomicOp {
    Add,
    Max,
    Min,
}

/// The memory order of an atomic, C++'s names (TileLang's `memory_order=`; its
/// `"consume"` is read as `"acquire"`). Relaxed unless the user asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryOrder {
    Relaxed,
    Acquire,
    Release,
    AcqRel,
    SeqCst,
}

/// What an atomic does to each element it reaches: `op` with `order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AtomicMode {
    pub op: AtomicOp,
    pub order: MemoryOrder,
}

impl AtomicOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
        }
    }
    pub fn from_name(s: &str) -> Option<AtomicOp> {
        [AtomicOp::Add, AtomicOp::Max, AtomicOp::Min].into_iter().find(|o| o.name() == s)
    }
}

impl MemoryOrder {
    pub const ALL: [MemoryOrder; 5] = [
        MemoryOrder::Relaxed,
        MemoryOrder::Acquire,
        MemoryOrder::Release,
        MemoryOrder::AcqRel,
        MemoryOrder::SeqCst,
    ];
    /// C++'s (and TileLang's) spelling.
    pub fn name(self) -> &'static str {
        match self {
            MemoryOrder::Relaxed => "relaxed",
            MemoryOrder::Acquire => "acquire",
            MemoryOrder::Release => "release",
            MemoryOrder::AcqRel => "acq_rel",
            MemoryOrder::SeqCst => "seq_cst",
        }
    }
    pub fn from_name(s: &str) -> Option<MemoryOrder> {
        MemoryOrder::ALL.into_iter().find(|o| o.name() == s)
    }
}

impl AtomicMode {
    pub const RELAXED_ADD: AtomicMode = AtomicMode { op: AtomicOp::Add, order: MemoryOrder::Relaxed };
    /// `atomic_add`, `atomic_max.release`: the text IR's word for it.
    pub fn text(self) -> String {
        match self.order {
            MemoryOrder::Relaxed => format!("atomic_{}", self.op.name()),
            o => format!("atomic_{}.{}", self.op.name(), o.name()),
        }
    }
    /// The mode back from [`AtomicMode::text`].
    pub fn from_text(s: &str) -> Option<AtomicMode> {
        let rest = s.strip_prefix("atomic_")?;
        let (op, order) = match rest.split_once('.') {
            Some((op, order)) => (op, MemoryOrder::from_name(order)?),
            None => (rest, MemoryOrder::Relaxed),
        };
        Some(AtomicMode { op: AtomicOp::from_name(op)?, order })
    }
}

/// What `T.print` shows.
#[derive(Clone, Debug, PartialEq)]
pub enum Printed {
    /// A scalar expression.
    Value(Expr),
    /// A tile: a region of a buffer (fragments whole).
    Tile(Region),
}

/// `T.copy(src, dst)`: elements of `src` to `dst`, converted to `dst`'s dtype; reads past a
/// global tensor's edge give `pad` (zero when absent), writes past it are dropped. With
/// `atomic` (a tile `T.atomic_add(dst, src)`, `T.atomic_max`, …) each element of `dst` is
/// combined with its source element by that atomic instead of overwritten.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyOp {
    pub src: Region,
    pub dst: Region,
    pub pad: Option<Expr>,
    pub loc: Loc,
    /// Set by `select_instructions`.
    pub inst: Option<CopyInst>,
    pub atomic: Option<AtomicMode>,
}

/// How a `T.copy` is carried out (`select_instructions`' choice; the lowering follows it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CopyInst {
    /// By the block's threads over the anchor's layout: vector accesses (up to 16 bytes)
    /// where contiguous and aligned, a guarded scalar path at ragged edges.
    Threads,
    /// One 16-byte `cp.async` per thread and chunk, zero-filled past the edge (a pipelined
    /// global → shared copy: issued ahead, waited for by the pipeline).
    CpAsync,
    /// A fragment whose threads hold less than 16 contiguous bytes of a row (an mma
    /// accumulator) is written to a swizzled shared tile — by `stmatrix` where given — and
    /// from there to global memory in 16-byte vectors along rows.
    Staged { stmatrix: Option<&'static CopyAtom> },
    /// A wgmma accumulator written to a shared tile in the panel layout by the threads and
    /// from there to global memory by one bulk tensor store (TMA) per panel: the epilogue of
    /// a warp-specialized kernel (`plan_pipeline` chooses it).
    StagedTma,
    /// A bulk tensor copy (TMA) of a pipelined loop's producer, issued by one producer
    /// thread and completing on the stage's mbarrier (`plan_pipeline` chooses it,
    /// `inject_pipeline` expands it).
    Tma,
}

/// `T.reduce_*(src, dst, dim)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReduceOp {
    pub kind: ReduceKind,
    pub src: BufferId,
    pub dst: BufferId,
    pub dim: usize,
    pub clear: bool,
    pub loc: Loc,
}

/// `c (+)= op(a) @ op(b)`: a is (M, K) or (K, M) transposed, b (K, N) or (N, K), c (M, N).
#[derive(Clone, Debug, PartialEq)]
pub struct GemmOp {
    pub a: BufferId,
    pub b: BufferId,
    pub c: BufferId,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub policy: WarpPolicy,
    pub clear_accum: bool,
    pub loc: Loc,
    /// Set by `inject_pipeline`: the operand is one stage of a multi-buffered tile (its
    /// buffer has a leading stage dimension) selected by this index.
    pub a_stage: Option<Expr>,
    pub b_stage: Option<Expr>,
    /// The part of each operand's buffer the gemm reads, as the user wrote it (`A_s[k % 2,
    /// :, :]`, `Q_s[:, 0:64]`): one entry per leading dimension (after a stage dimension
    /// `inject_pipeline` added), missing trailing dimensions whole; empty for the whole
    /// buffer. Leading dimensions are indices, the last two the matrix (fixed slices);
    /// `GemmOp::operand` resolves them and `verify` checks them.
    pub a_view: Vec<RegionDim>,
    pub b_view: Vec<RegionDim>,
    /// Set by `select_instructions`.
    pub inst: Option<GemmInst>,
}

/// A gemm operand as the instructions read it: element `(i, j)` of the matrix is
/// `buf[prefix..., start[0] + i, start[1] + j]`.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmOperand {
    pub buf: BufferId,
    /// The pipeline stage (if any), then the user's leading indices.
    pub prefix: Vec<Expr>,
    pub start: [i64; 2],
    /// Rows and columns of the matrix as stored (K x M for a transposed A).
    pub tile: [i64; 2],
}

impl GemmOperand {
    /// The buffer index of matrix element `(i, j)`.
    pub fn index(&self, i: Expr, j: Expr) -> Vec<Expr> {
        let off = |e: Expr, s: i64| if s == 0 { e } else { Expr::binary(BinOp::Add, e, Expr::int(s)) };
        let mut idx = self.prefix.clone();
        idx.push(off(i, self.start[0]));
        idx.push(off(j, self.start[1]));
        idx
    }

    /// Whether the operand is its buffer's whole matrix (no window inside the last two
    /// dimensions).
    pub fn is_whole(&self, m: &Module) -> bool {
        let e = m.buffer(self.buf).extents();
        self.start == [0, 0] && self.tile[..] == e[e.len() - 2..]
    }
}

impl GemmOp {
    /// Whether A x B into C is a tensor-core combination (mma.sync / wgmma): fp16 or bf16
    /// into fp32 (fp16 into fp16 too), int8 into int32. Other numeric combinations (fp32 x
    /// fp32, mixed widths) run on CUDA cores: `infer_layouts` rewrites them as element loops.
    pub fn on_tensor_cores(a: DType, b: DType, c: DType) -> bool {
        matches!(
            (a, b, c),
            (DType::F16, DType::F16, DType::F32 | DType::F16)
                | (DType::BF16, DType::BF16, DType::F32)
                | (DType::I8, DType::I8, DType::I32)
        )
    }

    /// Whether A x B into C can be computed at all: on tensor cores, or on CUDA cores with
    /// the products and sums in C's dtype (a float accumulator takes any numeric inputs, an
    /// integer one integer inputs).
    pub fn computable(a: DType, b: DType, c: DType) -> bool {
        let num = |d: DType| d.is_float() || d.is_int();
        Self::on_tensor_cores(a, b, c)
            || (c.is_float() && num(a) && num(b))
            || (c.is_int() && a.is_int() && b.is_int())
    }

    /// Operand A (`which` 0) or B (1) as the instructions read it; `Err` says why the view
    /// is not a matrix of its buffer (`verify` reports it at the gemm).
    pub fn operand(&self, m: &Module, which: usize) -> Result<GemmOperand, String> {
        let (buf, stage, view) = match which {
            0 => (self.a, &self.a_stage, &self.a_view),
            _ => (self.b, &self.b_stage, &self.b_view),
        };
        let b = m.buffer(buf);
        let extents = b.extents();
        let skip = stage.is_some() as usize;
        let dims = &extents[skip.min(extents.len())..];
        if dims.len() < 2 {
            return Err(format!("'{}' is not a matrix (it has {} dimension(s))", b.name, dims.len()));
        }
        if view.len() > dims.len() {
            return Err(format!(
                "'{}' has {} dimensions but the operand names {}",
                b.name,
                dims.len(),
                view.len()
            ));
        }
        let lead = dims.len() - 2;
        let mut prefix: Vec<Expr> = stage.iter().cloned().collect();
        let mut start = [0i64; 2];
        let mut tile = [dims[lead], dims[lead + 1]];
        for (d, &extent) in dims.iter().enumerate() {
            let entry = view.get(d);
            if d < lead {
                match entry {
                    Some(RegionDim::Index(e) | RegionDim::Origin(e)) => prefix.push(e.clone()),
                    Some(RegionDim::Slice { start, stop }) => {
                        let (s, t) = (crate::simplify::simplify(start.clone()), crate::simplify::simplify(stop.clone()));
                        match (s.as_int(), t.as_int()) {
                            (Some(s0), Some(t0)) if t0 == s0 + 1 => prefix.push(Expr::int(s0)),
                            _ => {
                                return Err(format!(
                                    "dimension {d} of '{}' must be one index (the gemm reads a matrix of its last two dimensions)",
                                    b.name
                                ))
                            }
                        }
                    }
                    None if extent == 1 => prefix.push(Expr::int(0)),
                    None => {
                        return Err(format!(
                            "'{}' has {} dimensions: index the leading {lead} (the gemm reads a matrix of the last two)",
                            b.name,
                            dims.len()
                        ))
                    }
                }
                continue;
            }
            let k = d - lead;
            match entry {
                None => {}
                Some(RegionDim::Slice { start: s, stop: t }) => {
                    let (s, t) = (crate::simplify::simplify(s.clone()), crate::simplify::simplify(t.clone()));
                    match (s.as_int(), t.as_int()) {
                        (Some(s0), Some(t0)) if 0 <= s0 && s0 < t0 && t0 <= extent => {
                            start[k] = s0;
                            tile[k] = t0 - s0;
                        }
                        (Some(s0), Some(t0)) => {
                            return Err(format!(
                            "the slice {s0}:{t0} of dimension {d} of '{}' is outside its {extent} elements",
                            b.name
                        ))
                        }
                        _ => {
                            return Err(format!(
                                "the slice of dimension {d} of '{}' must have fixed bounds (Python ints)",
                                b.name
                            ))
                        }
                    }
                }
                Some(RegionDim::Index(_) | RegionDim::Origin(_)) => {
                    return Err(format!(
                    "dimension {d} of '{}' is indexed: a gemm operand is a matrix of its last two dimensions",
                    b.name
                ))
                }
            }
        }
        Ok(GemmOperand { buf, prefix, start, tile })
    }
}

/// The tensor-core instruction of a `T.gemm` and how its operands reach it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmInst {
    pub atom: &'static MmaAtom,
    /// The grid of the atom's scope over the output tile (`warps_m × warps_n`, row-major):
    /// warps for `mma.sync`, warpgroups for `wgmma`.
    pub warps_m: i64,
    pub warps_n: i64,
    pub a: OperandSource,
    pub b: OperandSource,
    /// The N of one instruction (`wgmma` chooses it from the tile; `mma.sync`: the atom's).
    pub n: i64,
    /// `wgmma` in a pipelined loop: the gemm returns with its group of this k-tile still in
    /// flight (`wait_group 1`), the loop drains it after (`inject_pipeline` decides).
    pub in_flight: bool,
    /// `wgmma` in a manually scheduled pipeline's steady state: the gemm returns with its
    /// group in flight and no wait; `inject_pipeline` placed the `wgmma_wait` that retires
    /// it before the first statement that touches its registers (`schedule.rs`).
    pub deferred: bool,
}

/// Where a gemm operand's fragments come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperandSource {
    /// A fragment already in the mma operand layout.
    Registers,
    /// `ldmatrix` (transposing when the tile is stored the other way) from shared memory.
    Ldmatrix,
    /// Element by element from shared memory (8-bit tiles stored the other way, which
    /// `ldmatrix` cannot transpose).
    Gather,
    /// Read by the tensor core from shared memory through a matrix descriptor (`wgmma`).
    Descriptor,
}

impl OperandSource {
    pub fn name(self) -> &'static str {
        match self {
            OperandSource::Registers => "registers",
            OperandSource::Ldmatrix => "ldmatrix",
            OperandSource::Gather => "gather",
            OperandSource::Descriptor => "descriptor",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Store {
        buf: BufferId,
        idx: Vec<Expr>,
        value: Expr,
        loc: Loc,
    },
    /// `T.atomic_add(buf[idx], value)` and its kin: one element combined with `value`
    /// atomically; with `prev` (`return_prev=True`), the element's old value is stored in
    /// that one-element local buffer, which the user's expression reads.
    Atomic {
        mode: AtomicMode,
        buf: BufferId,
        idx: Vec<Expr>,
        value: Expr,
        prev: Option<BufferId>,
        loc: Loc,
    },
    Copy(CopyOp),
    Fill {
        dst: Region,
        value: Expr,
        loc: Loc,
    },
    Reduce(ReduceOp),
    Gemm(GemmOp),
    /// `layout` (set by `infer_layouts`) says which thread runs which iteration.
    Parallel {
        vars: Vec<VarId>,
        extents: Vec<i64>,
        body: Vec<Stmt>,
        loc: Loc,
        layout: Option<FragmentLayout>,
    },
    For {
        var: VarId,
        start: Expr,
        extent: Expr,
        kind: ForKind,
        body: Vec<Stmt>,
        loc: Loc,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        otherwise: Vec<Stmt>,
        loc: Loc,
    },
    /// `T.print(value, msg)`: once per block outside `parallel` loops (a tile is shown
    /// whole), once per iteration inside; `block` restricts it to one block (missing
    /// trailing coordinates are 0).
    Print {
        what: Printed,
        msg: String,
        block: Option<Vec<i64>>,
        loc: Loc,
    },
    /// `T.device_assert(cond, msg)`: a false `cond` stops the kernel with `msg` and the
    /// user's line; checked per iteration inside `parallel` loops, once per block outside.
    DeviceAssert {
        cond: Expr,
        msg: String,
        loc: Loc,
    },
    /// Copies issued ahead by `inject_pipeline` into one stage of a multi-buffered shared
    /// tile; ordered by the `async_commit` / `async_wait` and barriers it places, so
    /// `insert_syncs` leaves them alone.
    Async {
        body: Vec<Stmt>,
    },
    /// The kernel's own synchronization on a barrier of `T.alloc_barrier` (TileLang's
    /// explicit warp-specialization controls); run by the threads of the statement (its
    /// `T.ws` region, or the block). Lowered by `lower_tile_ops`.
    Barrier(BarrierOp),
    /// Thread level: bind a per-thread scalar.
    Let {
        var: VarId,
        value: Expr,
    },
    /// Thread level: an instruction (see [`crate::inst`]).
    Inst(Inst),
    /// Thread level: a comment for the reader of the generated code.
    Comment(String),
    /// Thread level: the code that follows implements the user's statement at this
    /// location (made with `lineinfo`, emitted as a `#line` directive).
    SourceLine(Loc),
}

/// A statement on element `idx` of a barrier buffer (`T.alloc_barrier`: a shared int64
/// buffer, one mbarrier per element).
#[derive(Clone, Debug, PartialEq)]
pub struct BarrierOp {
    pub kind: BarrierKind,
    pub bar: BufferId,
    pub idx: Expr,
    pub loc: Loc,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BarrierKind {
    /// At the top of the kernel: the barrier completes a phase once `count` threads arrived
    /// (and its expected transaction bytes landed). Initialized before the first statement.
    Init { count: u32 },
    /// Every thread running the statement arrives (`T.barrier_arrive`).
    Arrive,
    /// One thread running the statement adds `bytes` expected transaction bytes to the
    /// current phase (`T.mbarrier_expect_tx`).
    ExpectTx { bytes: Expr },
    /// Every thread running the statement waits until the phase of this parity completed
    /// (`T.barrier_wait`).
    Wait { parity: Expr },
    /// `T.tma_copy(src, dst, barrier=)`: one thread adds the tile's bytes to the current
    /// phase and issues the bulk tensor copy that completes them.
    TmaLoad { copy: Box<CopyOp> },
}

impl BarrierOp {
    /// The expressions of the op, in order (the TMA copy's regions included).
    pub fn exprs(&self) -> Vec<&Expr> {
        let mut out = vec![&self.idx];
        match &self.kind {
            BarrierKind::Init { .. } | BarrierKind::Arrive => {}
            BarrierKind::ExpectTx { bytes } => out.push(bytes),
            BarrierKind::Wait { parity } => out.push(parity),
            BarrierKind::TmaLoad { copy } => {
                out.extend(region_exprs(&copy.src));
                out.extend(region_exprs(&copy.dst));
            }
        }
        out
    }

    pub fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> BarrierOp {
        let kind = match self.kind {
            BarrierKind::ExpectTx { bytes } => BarrierKind::ExpectTx { bytes: bytes.map(f) },
            BarrierKind::Wait { parity } => BarrierKind::Wait { parity: parity.map(f) },
            BarrierKind::TmaLoad { copy } => {
                let copy = *copy;
                BarrierKind::TmaLoad {
                    copy: Box::new(CopyOp {
                        src: map_region(copy.src, f),
                        dst: map_region(copy.dst, f),
                        ..copy
                    }),
                }
            }
            k => k,
        };
        BarrierOp { kind, idx: self.idx.map(f), ..self }
    }
}

impl Stmt {
    pub fn loc(&self) -> Loc {
        match self {
            Stmt::Store { loc, .. }
            | Stmt::Atomic { loc, .. }
            | Stmt::Fill { loc, .. }
            | Stmt::Parallel { loc, .. }
            | Stmt::For { loc, .. }
            | Stmt::If { loc, .. }
            | Stmt::Print { loc, .. }
            | Stmt::DeviceAssert { loc, .. } => *loc,
            Stmt::Copy(op) => op.loc,
            Stmt::Reduce(op) => op.loc,
            Stmt::Gemm(op) => op.loc,
            Stmt::Barrier(op) => op.loc,
            _ => Loc::UNKNOWN,
        }
    }
    /// Child statement lists.
    pub fn bodies(&self) -> Vec<&Vec<Stmt>> {
        match self {
            Stmt::Parallel { body, .. } | Stmt::For { body, .. } => vec![body],
            Stmt::If { then, otherwise, .. } => vec![then, otherwise],
            Stmt::Async { body } => vec![body],
            _ => vec![],
        }
    }
    /// A thread-level instruction as a statement.
    pub fn inst(i: impl Into<Inst>) -> Stmt {
        Stmt::Inst(i.into())
    }
    /// A cluster barrier: `cluster_sync`, or one of its halves (`cluster_arrive`,
    /// `cluster_wait`).
    pub fn is_cluster_barrier(&self) -> bool {
        use crate::inst::Inst as I;
        matches!(self, Stmt::Inst(I::ClusterSync(_) | I::ClusterArrive(_) | I::ClusterWait(_)))
    }
}

/// Visit every statement in `stmts`, parents first.
pub fn walk_stmts(stmts: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for s in stmts {
        f(s);
        for body in s.bodies() {
            walk_stmts(body, f);
        }
    }
}

/// The expressions of a region, in order.
pub fn region_exprs(r: &Region) -> Vec<&Expr> {
    let mut out = Vec::new();
    for d in &r.dims {
        match d {
            RegionDim::Index(e) | RegionDim::Origin(e) => out.push(e),
            RegionDim::Slice { start, stop } => {
                out.push(start);
                out.push(stop);
            }
        }
    }
    out
}

/// Visit every expression directly held by a statement (not those of child statements).
pub fn stmt_exprs(s: &Stmt, f: &mut dyn FnMut(&Expr)) {
    match s {
        Stmt::Store { idx, value, .. } | Stmt::Atomic { idx, value, .. } => {
            idx.iter().for_each(&mut *f);
            f(value);
        }
        Stmt::Copy(op) => {
            region_exprs(&op.src).into_iter().for_each(&mut *f);
            region_exprs(&op.dst).into_iter().for_each(&mut *f);
            op.pad.iter().for_each(&mut *f);
        }
        Stmt::Fill { dst, value, .. } => {
            region_exprs(dst).into_iter().for_each(&mut *f);
            f(value);
        }
        Stmt::For { start, extent, .. } => {
            f(start);
            f(extent);
        }
        Stmt::If { cond, .. } => f(cond),
        Stmt::Print { what: Printed::Value(e), .. } | Stmt::DeviceAssert { cond: e, .. } => f(e),
        Stmt::Print { what: Printed::Tile(r), .. } => region_exprs(r).into_iter().for_each(&mut *f),
        Stmt::Let { value, .. } => f(value),
        Stmt::Gemm(op) => {
            op.a_stage.iter().for_each(&mut *f);
            op.b_stage.iter().for_each(&mut *f);
            for d in op.a_view.iter().chain(&op.b_view) {
                match d {
                    RegionDim::Index(e) | RegionDim::Origin(e) => f(e),
                    RegionDim::Slice { start, stop } => {
                        f(start);
                        f(stop);
                    }
                }
            }
        }
        Stmt::Inst(i) => i.exprs().into_iter().for_each(&mut *f),
        Stmt::Barrier(op) => op.exprs().into_iter().for_each(&mut *f),
        Stmt::Reduce(_)
        | Stmt::Parallel { .. }
        | Stmt::Async { .. }
        | Stmt::Comment(_)
        | Stmt::SourceLine(_) => {}
    }
}

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.0)
    }
}

/// `r` with `f` applied to every expression in it.
pub fn map_region(r: Region, f: &mut dyn FnMut(Expr) -> Expr) -> Region {
    Region { dims: r.dims.into_iter().map(|d| map_region_dim(d, f)).collect(), ..r }
}

/// One region dimension with `f` applied to its expressions.
pub fn map_region_dim(d: RegionDim, f: &mut dyn FnMut(Expr) -> Expr) -> RegionDim {
    match d {
        RegionDim::Index(e) => RegionDim::Index(e.map(f)),
        RegionDim::Origin(e) => RegionDim::Origin(e.map(f)),
        RegionDim::Slice { start, stop } => RegionDim::Slice { start: start.map(f), stop: stop.map(f) },
    }
}

/// Rebuild a statement with `f` applied to every expression in it, child statements
/// included (bottom-up within each expression, see [`Expr::map`]).
pub fn map_stmt_exprs(s: Stmt, f: &mut dyn FnMut(Expr) -> Expr) -> Stmt {
    let exprs =
        |v: Vec<Expr>, f: &mut dyn FnMut(Expr) -> Expr| v.into_iter().map(|e| e.map(f)).collect::<Vec<_>>();
    let stmts = |v: Vec<Stmt>, f: &mut dyn FnMut(Expr) -> Expr| {
        v.into_iter().map(|s| map_stmt_exprs(s, f)).collect::<Vec<_>>()
    };
    match s {
        Stmt::Store { buf, idx, value, loc } => {
            Stmt::Store { buf, idx: exprs(idx, f), value: value.map(f), loc }
        }
        Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
            Stmt::Atomic { mode, buf, idx: exprs(idx, f), value: value.map(f), prev, loc }
        }
        Stmt::Copy(op) => Stmt::Copy(CopyOp {
            src: map_region(op.src, f),
            dst: map_region(op.dst, f),
            pad: op.pad.map(|p| p.map(f)),
            ..op
        }),
        Stmt::Fill { dst, value, loc } => Stmt::Fill { dst: map_region(dst, f), value: value.map(f), loc },
        Stmt::Gemm(op) => Stmt::Gemm(GemmOp {
            a_stage: op.a_stage.map(|e| e.map(f)),
            b_stage: op.b_stage.map(|e| e.map(f)),
            a_view: op.a_view.into_iter().map(|d| map_region_dim(d, f)).collect(),
            b_view: op.b_view.into_iter().map(|d| map_region_dim(d, f)).collect(),
            ..op
        }),
        Stmt::Parallel { vars, extents, body, loc, layout } => {
            Stmt::Parallel { vars, extents, body: stmts(body, f), loc, layout }
        }
        Stmt::For { var, start, extent, kind, body, loc } => {
            Stmt::For { var, start: start.map(f), extent: extent.map(f), kind, body: stmts(body, f), loc }
        }
        Stmt::If { cond, then, otherwise, loc } => {
            Stmt::If { cond: cond.map(f), then: stmts(then, f), otherwise: stmts(otherwise, f), loc }
        }
        Stmt::Async { body } => Stmt::Async { body: stmts(body, f) },
        Stmt::Print { what, msg, block, loc } => {
            let what = match what {
                Printed::Value(e) => Printed::Value(e.map(f)),
                Printed::Tile(r) => Printed::Tile(map_region(r, f)),
            };
            Stmt::Print { what, msg, block, loc }
        }
        Stmt::DeviceAssert { cond, msg, loc } => Stmt::DeviceAssert { cond: cond.map(f), msg, loc },
        Stmt::Let { var, value } => Stmt::Let { var, value: value.map(f) },
        Stmt::Inst(i) => Stmt::Inst(i.map_exprs(&mut |e| e.map(f))),
        Stmt::Barrier(op) => Stmt::Barrier(op.map_exprs(f)),
        other @ (Stmt::Reduce(_) | Stmt::Comment(_) | Stmt::SourceLine(_)) => other,
    }
}

/// The `printf` conversion of a value of `dt` as the generated code passes it (after C's
/// default argument promotions; fp16/bf16 are computed in float, so they print as `%g`).
pub fn printf_conversion(dt: DType) -> &'static str {
    match dt {
        DType::Bool | DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32 => "%d",
        DType::U32 => "%u",
        DType::I64 => "%lld",
        DType::U64 => "%llu",
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => "%g",
    }
}
