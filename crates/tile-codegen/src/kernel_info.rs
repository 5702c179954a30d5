//! KernelInfo: the launch recipe of a compiled kernel, the one contract between the
//! compiler and whoever launches it (the native launcher of `tile-py`, `tilers-cc`'s
//! output, docs/format.md).
//!
//! It says what to launch (entry, required architecture, block actually launched, cluster
//! dims, dynamic shared memory), what every argument must be (dtype, shape, strides,
//! assumed alignment, and whether the kernel writes it), how many blocks a call runs (grid
//! expressions of the scalar parameters, evaluated by [`KernelInfo::launch_grid`], the
//! only grid evaluator), which tensor maps a call must encode, and the lowering report.
//! It is made once, here, from the lowered module, and serialized as JSON.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use tile_ir::*;

/// Dynamic shared memory a kernel may use without opting in (`cuFuncSetAttribute`).
pub const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// CUDA's limits on the grid, per dimension.
pub const MAX_GRID: [i64; 3] = [(1 << 31) - 1, 65535, 65535];

/// Everything needed to launch one compiled kernel (docs/format.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelInfo {
    /// The user's kernel (the prim_func).
    pub name: String,
    /// The `extern "C" __global__` function; None for a program only verified for the
    /// interpreter ([`KernelInfo::for_interpreter`]).
    pub entry: Option<String>,
    /// The architecture the code needs, e.g. "sm_90a" ("interp" for the interpreter).
    pub arch: String,
    /// The kernel's parameters, in the order of its CUDA parameters.
    pub params: Vec<ParamInfo>,
    /// Global scratch buffers (`T.alloc_global`) the launcher allocates for every call and
    /// passes after `params`, in this order; the call neither passes nor gets them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scratch: Vec<ScratchInfo>,
    /// The symbolic sizes (`T.dynamic`), in the order the CUDA function takes them, after
    /// `params` and `scratch`. A call binds each from the tensor dimensions listed in its `from`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<SizeInfo>,
    /// Blocks per dimension, three expressions of the scalar parameters (none for the
    /// interpreter).
    pub grid: Vec<GridExpr>,
    /// `threads=` of `T.Kernel`: the threads the user's code is written for.
    pub threads: u32,
    /// The block actually launched: `threads`, plus the producer warps the compiler adds
    /// to a warp-specialized kernel (numbered after the user's threads).
    pub block: [u32; 3],
    /// A persistent kernel: launch `min(grid[0] * grid[1] * grid[2], SMs)` blocks along x
    /// (one per SM), which walk the grid's tiles; `grid` keeps the tiles.
    #[serde(default, skip_serializing_if = "is_false")]
    pub persistent: bool,
    /// A kernel after the first of a call that waits for the kernels before it with
    /// `griddepcontrol.wait` (`tile_passes::grid_dependence`): the launcher may start it as
    /// a programmatic dependent of the kernel launched before it in the same call.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dependent_launch: bool,
    /// Thread-block cluster dims (`[1, 1, 1]`: no cluster). A persistent kernel's clusters
    /// run along x: launch `cluster[0] * min(tiles / cluster[0], SMs / cluster[0])` blocks
    /// (the tiles are a multiple of the cluster), each cluster walking groups of tiles. A
    /// kernel of a tile per block launches its grid, whose x is a multiple of `cluster[0]`.
    #[serde(default = "no_cluster")]
    pub cluster: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// Whether `shared_bytes` is over [`DEFAULT_SHARED_LIMIT`], so that the function's
    /// limit must be raised before it launches.
    pub shared_opt_in: bool,
    /// Bytes of one thread's arrays (its fragment slots and locals): the registers they
    /// take when all are live. A thread has at most 255 32-bit registers, so a kernel whose
    /// arrays need more spills to local memory; the autotuner passes over such configs.
    #[serde(default)]
    pub local_bytes: u32,
    /// TMA descriptors to encode for every call, from the tensors passed.
    #[serde(default)]
    pub tensor_maps: Vec<TensorMap>,
    /// What each tile op became (instructions, widths, stages, shared memory).
    #[serde(default)]
    pub report: Vec<String>,
    /// A prim_func of several `T.Kernel`s: the kernel each call launches after this one, in
    /// order, on the same stream, with the same arguments (each a KernelInfo of its own
    /// entry, grid, block, shared memory, tensor maps and report; `params`, `scratch` and
    /// `sizes` are the call's, as here, and its own `then` is empty). The scratch buffers
    /// are allocated once per call and shared by its kernels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<KernelInfo>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn no_cluster() -> [u32; 3] {
    [1, 1, 1]
}

/// A global scratch buffer (`T.alloc_global`): allocated per call through torch's caching
/// allocator (contiguous, contents undefined), passed to the kernel as a pointer to its
/// dtype, released when the call returns (stream-ordered: the memory is reused only by
/// work queued after the kernel).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScratchInfo {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<Extent>,
    /// The allocation's size: the product of `shape` times the dtype's bytes.
    pub bytes: Extent,
}

/// A symbolic size: a dimension one compiled kernel takes at any value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeInfo {
    pub name: String,
    /// "int32" or "int64": the CUDA parameter's type and the largest value a call may bind.
    pub dtype: String,
    /// Every value must be a multiple of this (1: no promise); the launcher checks it.
    pub multiple_of: i64,
    /// The `[param, dim]` pairs that carry the size: dimension `dim` of tensor parameter
    /// `param`, the first input among them binds it and the rest must agree.
    pub from: Vec<[usize; 2]>,
}

/// A tensor's extent or stride: a number, or an expression of the symbolic sizes
/// (`{"size": k}`, products of them and numbers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Extent {
    Fixed(i64),
    Expr(GridExpr),
}

impl Extent {
    pub fn fixed(&self) -> Option<i64> {
        match self {
            Extent::Fixed(n) => Some(*n),
            Extent::Expr(_) => None,
        }
    }
    /// The value for a call whose sizes are `sizes` (None if it overflows).
    pub fn eval(&self, sizes: &[i64]) -> Option<i64> {
        match self {
            Extent::Fixed(n) => Some(*n),
            Extent::Expr(e) => {
                e.eval(&|_| ScalarValue::Int(0), sizes).ok().and_then(|v| i64::try_from(v).ok())
            }
        }
    }
}

/// One kernel parameter: a tensor (passed as a pointer to its data) or a scalar (by value).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ParamInfo {
    Tensor {
        name: String,
        dtype: String,
        shape: Vec<Extent>,
        /// In elements.
        strides: Vec<Extent>,
        /// The byte alignment the kernel assumes for the data pointer.
        align: u64,
        /// Whether the kernel writes the tensor (an output, written in place).
        written: bool,
    },
    Scalar {
        name: String,
        dtype: String,
    },
}

impl ParamInfo {
    pub fn name(&self) -> &str {
        match self {
            ParamInfo::Tensor { name, .. } | ParamInfo::Scalar { name, .. } => name,
        }
    }
    pub fn dtype(&self) -> &str {
        match self {
            ParamInfo::Tensor { dtype, .. } | ParamInfo::Scalar { dtype, .. } => dtype,
        }
    }
}

/// A grid dimension: `{"const": 4}`, `{"param": i}` (scalar parameter number i; a float
/// parameter counts as its value truncated toward zero), `{"size": k}` (symbolic size k)
/// or `{"op", "a", "b"}`, with Python's meaning of each operation (`floordiv` rounds toward
/// negative infinity).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GridExpr {
    Const {
        #[serde(rename = "const")]
        value: i64,
    },
    Param {
        param: usize,
    },
    Size {
        size: usize,
    },
    Op {
        op: GridOp,
        a: Box<GridExpr>,
        b: Box<GridExpr>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GridOp {
    Add,
    Sub,
    Mul,
    FloorDiv,
    CeilDiv,
    Min,
    Max,
}

/// A TMA descriptor the launcher encodes for each call (`cuTensorMapEncodeTiled`) from the
/// tensor passed as parameter `param` (its dtype, the call's shape, its strides and data
/// pointer; elements past the edge filled with zeros, no interleave, element strides 1),
/// and passes as a `__grid_constant__` parameter (128 bytes, 64-byte aligned) after the
/// parameters and the sizes, in this order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMap {
    /// Index into `params` of the tensor the map describes.
    pub param: usize,
    /// The box (tile) one copy moves, in elements per dimension, outermost first.
    #[serde(rename = "box")]
    pub box_shape: Vec<u32>,
    /// The shared-memory swizzle in bytes: 0 (none), 32, 64 or 128.
    pub swizzle: u32,
}

/// The driver's numbers for a tensor map (`cuda.h`: `CUtensorMapDataType`,
/// `CUtensorMapSwizzle`), shared by the native launcher and the C export.
pub mod tma {
    /// `CUtensorMapDataType` values.
    pub mod data_type {
        pub const UINT8: u32 = 0;
        pub const UINT16: u32 = 1;
        pub const UINT32: u32 = 2;
        pub const INT32: u32 = 3;
        pub const UINT64: u32 = 4;
        pub const INT64: u32 = 5;
        pub const FLOAT16: u32 = 6;
        pub const FLOAT32: u32 = 7;
        pub const FLOAT64: u32 = 8;
        pub const BFLOAT16: u32 = 9;
    }

    /// The TMA data type and element size of a tilers dtype (KernelInfo's dtype strings).
    /// Integers copy as the unsigned type of their width: TMA only moves their bytes.
    pub fn tma_data_type(dtype: &str) -> Option<(u32, u64)> {
        Some(match dtype {
            "bool" | "int8" | "uint8" => (data_type::UINT8, 1),
            "int16" | "uint16" => (data_type::UINT16, 2),
            "int32" => (data_type::INT32, 4),
            "uint32" => (data_type::UINT32, 4),
            "int64" => (data_type::INT64, 8),
            "uint64" => (data_type::UINT64, 8),
            "float16" => (data_type::FLOAT16, 2),
            "bfloat16" => (data_type::BFLOAT16, 2),
            "float32" => (data_type::FLOAT32, 4),
            "float64" => (data_type::FLOAT64, 8),
            _ => return None,
        })
    }

    /// `CUtensorMapSwizzle` of a swizzle span in bytes: NONE 0, 32B 1, 64B 2, 128B 3 (not
    /// the numbering of wgmma's shared-memory descriptors).
    pub fn swizzle_mode(bytes: u32) -> Option<u32> {
        Some(match bytes {
            0 => 0,
            32 => 1,
            64 => 2,
            128 => 3,
            _ => return None,
        })
    }
}

/// What the grid reads of one scalar argument, as the kernel receives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    Int(i64),
    Float(f64),
}

/// Why a grid expression has no value for a call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GridProblem {
    /// `floordiv` or `ceildiv` by zero.
    DividesByZero,
    /// A float parameter that is infinite or NaN.
    NotFinite,
    /// The value, or None where it is too large to compute.
    OutOfRange(Option<i128>),
    /// A grid along x of this many blocks where the kernel runs in clusters of `cluster`
    /// blocks along x, launched a tile per block: not a multiple.
    NotClusterMultiple { blocks: u32, cluster: u32 },
}

/// A grid dimension of one call that CUDA cannot launch.
#[derive(Clone, Debug, PartialEq)]
pub struct GridError {
    /// 0, 1 or 2 (x, y, z).
    pub axis: usize,
    pub problem: GridProblem,
    /// The scalar parameters the dimension reads, in order of first use.
    pub params: Vec<usize>,
    /// The symbolic sizes it reads, with their values.
    pub sizes: Vec<(usize, i64)>,
}

impl GridError {
    /// "grid dimension x is 0 (from scalar parameter n=0): every grid dimension must be at
    /// least 1"; `value_text(i)` writes the value given for parameter i.
    pub fn message(&self, info: &KernelInfo, value_text: &dyn Fn(usize) -> String) -> String {
        let axis = ["x", "y", "z"][self.axis];
        let mut sources = Vec::new();
        if !self.params.is_empty() {
            let parts: Vec<String> = self
                .params
                .iter()
                .map(|&i| {
                    let name = info.params.get(i).map_or("?", ParamInfo::name);
                    format!("{name}={}", value_text(i))
                })
                .collect();
            let plural = if parts.len() > 1 { "s" } else { "" };
            sources.push(format!("scalar parameter{plural} {}", parts.join(", ")));
        }
        if !self.sizes.is_empty() {
            let parts: Vec<String> = self
                .sizes
                .iter()
                .map(|&(k, v)| format!("{}={v}", info.sizes.get(k).map_or("?", |s| s.name.as_str())))
                .collect();
            let plural = if parts.len() > 1 { "s" } else { "" };
            sources.push(format!("size{plural} {}", parts.join(", ")));
        }
        let source =
            if sources.is_empty() { String::new() } else { format!(" (from {})", sources.join("; ")) };
        let limit = MAX_GRID[self.axis];
        match self.problem {
            GridProblem::DividesByZero => format!("grid dimension {axis} divides by zero{source}"),
            GridProblem::NotFinite => format!(
                "grid dimension {axis} reads a float that is not finite{source}: it has no number of blocks"
            ),
            GridProblem::OutOfRange(Some(value)) if value < 0 => {
                format!("grid dimension {axis} is {value}{source}: a grid dimension cannot be negative")
            }
            GridProblem::OutOfRange(Some(value)) => {
                format!("grid dimension {axis} is {value}{source}: over the CUDA limit of {limit} blocks")
            }
            GridProblem::OutOfRange(None) => {
                format!("grid dimension {axis} overflows{source}: over the CUDA limit of {limit} blocks")
            }
            GridProblem::NotClusterMultiple { blocks, cluster } => format!(
                "grid dimension {axis} is {blocks}{source}: the kernel runs in thread-block clusters of {cluster} blocks along x, so it must be a multiple of {cluster}"
            ),
        }
    }
}

/// Python's `a // b`; None when `b` is 0 or the quotient overflows.
fn floor_div(a: i128, b: i128) -> Option<i128> {
    let quotient = a.checked_div(b)?;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        quotient.checked_sub(1)
    } else {
        Some(quotient)
    }
}

impl GridExpr {
    /// The value for a call whose scalar parameter i is `value(i)` and whose symbolic size
    /// k is `sizes[k]`.
    pub fn eval(&self, value: &dyn Fn(usize) -> ScalarValue, sizes: &[i64]) -> Result<i128, GridProblem> {
        let overflow = GridProblem::OutOfRange(None);
        match self {
            GridExpr::Const { value } => Ok(*value as i128),
            GridExpr::Size { size } => sizes.get(*size).map(|v| *v as i128).ok_or(overflow),
            GridExpr::Param { param } => match value(*param) {
                ScalarValue::Int(v) => Ok(v as i128),
                ScalarValue::Float(v) if !v.is_finite() => Err(GridProblem::NotFinite),
                // i128 holds every integer below 1.7e38
                ScalarValue::Float(v) if v.abs() < 1e38 => Ok(v.trunc() as i128),
                ScalarValue::Float(_) => Err(overflow),
            },
            GridExpr::Op { op, a, b } => {
                let (a, b) = (a.eval(value, sizes)?, b.eval(value, sizes)?);
                let divisor = |b: i128| if b == 0 { Err(GridProblem::DividesByZero) } else { Ok(b) };
                match op {
                    GridOp::Add => a.checked_add(b).ok_or(overflow),
                    GridOp::Sub => a.checked_sub(b).ok_or(overflow),
                    GridOp::Mul => a.checked_mul(b).ok_or(overflow),
                    GridOp::FloorDiv => floor_div(a, divisor(b)?).ok_or(overflow),
                    GridOp::CeilDiv => floor_div(a.checked_neg().ok_or(overflow)?, divisor(b)?)
                        .and_then(i128::checked_neg)
                        .ok_or(overflow),
                    GridOp::Min => Ok(a.min(b)),
                    GridOp::Max => Ok(a.max(b)),
                }
            }
        }
    }

    /// The scalar parameters the expression reads, in order of first use.
    pub fn params(&self) -> Vec<usize> {
        self.leaves(false)
    }

    /// The symbolic sizes the expression reads, in order of first use.
    pub fn sizes(&self) -> Vec<usize> {
        self.leaves(true)
    }

    fn leaves(&self, sizes: bool) -> Vec<usize> {
        fn visit(e: &GridExpr, sizes: bool, out: &mut Vec<usize>) {
            match e {
                GridExpr::Const { .. } => {}
                GridExpr::Param { param: i } | GridExpr::Size { size: i } => {
                    if matches!(e, GridExpr::Size { .. }) == sizes && !out.contains(i) {
                        out.push(*i)
                    }
                }
                GridExpr::Op { a, b, .. } => {
                    visit(a, sizes, out);
                    visit(b, sizes, out);
                }
            }
        }
        let mut out = Vec::new();
        visit(self, sizes, &mut out);
        out
    }
}

impl KernelInfo {
    /// The grid of one call whose scalar parameter i is `value(i)` and whose symbolic size
    /// k is `sizes[k]`: three dimensions within CUDA's limits, or the first that is not. A
    /// dimension of 0 (a size of 0) is a grid of no blocks: nothing to launch.
    pub fn launch_grid(
        &self,
        value: &dyn Fn(usize) -> ScalarValue,
        sizes: &[i64],
    ) -> Result<[u32; 3], GridError> {
        let error = |axis: usize, problem: GridProblem| {
            let expr = &self.grid[axis];
            let read = expr.sizes().into_iter().map(|k| (k, sizes.get(k).copied().unwrap_or(0))).collect();
            GridError { axis, problem, params: expr.params(), sizes: read }
        };
        let mut dims = [1u32; 3];
        for (axis, expr) in self.grid.iter().enumerate().take(3) {
            let problem = match expr.eval(value, sizes) {
                Ok(v) if (0..=MAX_GRID[axis] as i128).contains(&v) => {
                    dims[axis] = v as u32;
                    continue;
                }
                Ok(v) => GridProblem::OutOfRange(Some(v)),
                Err(problem) => problem,
            };
            return Err(error(axis, problem));
        }
        // a cluster's blocks are consecutive along x: a grid of a tile per block (a
        // persistent one is sized by the launcher) holds whole clusters
        let n = self.cluster[0];
        if n > 1 && !self.persistent && dims[0] % n != 0 {
            return Err(error(0, GridProblem::NotClusterMultiple { blocks: dims[0], cluster: n }));
        }
        Ok(dims)
    }

    /// Why this kernel's cluster cannot be launched as compiled (`__cluster_dims__(n, 1, 1)`),
    /// if it cannot: clusters run along x only, and a kernel launched a tile per block with
    /// a constant grid along x needs a multiple of `n` (the compiler makes no other; checked
    /// once when a launcher is made). A grid along x that reads sizes or scalars is checked
    /// per call by [`KernelInfo::launch_grid`]. None: no cluster, or one that launches.
    pub fn cluster_problem(&self) -> Option<String> {
        let [n, y, z] = self.cluster;
        if [y, z] != [1, 1] {
            return Some(format!(
                "it needs a thread-block cluster {:?}: clusters run along x only",
                self.cluster
            ));
        }
        if n <= 1 || self.persistent {
            return None;
        }
        match self.grid.first() {
            Some(GridExpr::Const { value }) if value % n as i64 != 0 => Some(format!(
                "it runs in thread-block clusters of {n} blocks along x, and its grid along x ({value}) is not a multiple of {n}"
            )),
            Some(_) => None,
            None => Some("its KernelInfo has no grid".into()),
        }
    }

    /// Every kernel a call launches, in order: this one, then [`KernelInfo::then`].
    pub fn launches(&self) -> impl Iterator<Item = &KernelInfo> {
        std::iter::once(self).chain(&self.then)
    }

    /// The shape of tensor parameter `param` for a call whose sizes are `sizes`.
    pub fn shape_of(&self, param: usize, sizes: &[i64]) -> Option<Vec<i64>> {
        match self.params.get(param)? {
            ParamInfo::Tensor { shape, .. } => shape.iter().map(|e| e.eval(sizes)).collect(),
            ParamInfo::Scalar { .. } => None,
        }
    }

    /// The KernelInfo of a verified tile-level program run by the interpreter: its
    /// parameters and block; no entry, grid or shared memory (nothing is generated).
    pub fn for_interpreter(m: &Module) -> KernelInfo {
        KernelInfo {
            name: m.name.clone(),
            entry: None,
            arch: "interp".into(),
            params: param_info(m),
            scratch: scratch_info(m),
            sizes: size_info(m),
            grid: Vec::new(),
            threads: m.kernel.threads,
            block: [m.kernel.threads, 1, 1],
            persistent: false,
            dependent_launch: false,
            cluster: no_cluster(),
            shared_bytes: 0,
            shared_opt_in: false,
            local_bytes: 0,
            tensor_maps: Vec::new(),
            report: Vec::new(),
            then: Vec::new(),
        }
    }

    /// JSON text (docs/format.md).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("KernelInfo serializes")
    }
}

fn gexpr(m: &Module, e: &Expr) -> Result<GridExpr, Diagnostic> {
    let bad = || {
        Diagnostic::error(
            "a grid dimension must be computed from constants, scalar parameters and T.dynamic sizes",
            m.kernel.loc,
        )
        .with_help("e.g. T.Kernel(T.ceildiv(n, 128), threads=128) with n: T.int32")
    };
    let scalar_param = |id: &VarId| {
        m.params.iter().position(|p| matches!(p, Param::Scalar { var, .. } if var == id)).ok_or_else(bad)
    };
    Ok(match e {
        Expr::Const { value: ConstValue::Int(v), .. } => GridExpr::Const { value: *v },
        Expr::Var { id, .. } if matches!(m.var(*id).kind, VarKind::Size { .. }) => {
            GridExpr::Size { size: m.sizes().iter().position(|v| v == id).ok_or_else(bad)? }
        }
        Expr::Var { id, .. } => GridExpr::Param { param: scalar_param(id)? },
        Expr::Cast { a, dtype } if dtype.is_int() && a.dtype().is_int() => gexpr(m, a)?,
        // `T.int32(x)` of a float parameter: truncated toward zero, as the launcher does
        Expr::Cast { a, dtype } if dtype.is_int() => match a.as_ref() {
            Expr::Var { id, .. } if a.dtype().is_float() => GridExpr::Param { param: scalar_param(id)? },
            _ => return Err(bad()),
        },
        Expr::Binary { op, a, b, .. } => {
            let op = match op {
                BinOp::Add => GridOp::Add,
                BinOp::Sub => GridOp::Sub,
                BinOp::Mul => GridOp::Mul,
                BinOp::FloorDiv => GridOp::FloorDiv,
                BinOp::Min => GridOp::Min,
                BinOp::Max => GridOp::Max,
                _ => return Err(bad()),
            };
            GridExpr::Op { op, a: Box::new(gexpr(m, a)?), b: Box::new(gexpr(m, b)?) }
        }
        _ => return Err(bad()),
    })
}

/// The buffers a statement writes, at either level of the IR: tile ops by their
/// destination, thread-level instructions by the accesses they declare.
fn destinations(s: &Stmt) -> Vec<BufferId> {
    match s {
        Stmt::Store { buf, .. } | Stmt::Atomic { buf, .. } => vec![*buf],
        Stmt::Copy(op) => vec![op.dst.buf],
        Stmt::Fill { dst, .. } => vec![dst.buf],
        Stmt::Reduce(op) => vec![op.dst],
        Stmt::Gemm(op) => vec![op.c],
        Stmt::Inst(i) => i
            .accesses()
            .iter()
            .filter(|a| a.kind == tile_ir::inst::AccessKind::Write)
            .map(|a| a.buf)
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether the kernel waits for the kernels launched before it (`griddep_wait`).
fn waits_for_grids(m: &Module) -> bool {
    let mut found = false;
    walk_stmts(&m.kernel.body, &mut |s| found |= matches!(s, Stmt::Inst(Inst::GridDepWait(_))));
    found
}

/// Every buffer some statement of the kernel writes.
fn written_buffers(m: &Module) -> BTreeSet<BufferId> {
    let mut written = BTreeSet::new();
    walk_stmts(&m.kernel.body, &mut |s| written.extend(destinations(s)));
    written
}

/// An extent or stride as KernelInfo writes it: a number, or an expression of the sizes.
fn extent(m: &Module, e: &Expr) -> Extent {
    let e = tile_ir::simplify::simplify(e.clone());
    match e.as_int() {
        Some(n) => Extent::Fixed(n),
        // products of sizes and numbers, which gexpr always takes
        None => Extent::Expr(gexpr(m, &e).expect("an extent is a product of sizes")),
    }
}

/// KernelInfo's description of the parameters: dtype, shape, strides, assumed alignment,
/// and whether the kernel writes the tensor.
pub fn param_info(m: &Module) -> Vec<ParamInfo> {
    let written = written_buffers(m);
    m.params
        .iter()
        .map(|p| match p {
            Param::Tensor { name, buffer } => {
                let b = m.buffer(*buffer);
                ParamInfo::Tensor {
                    name: name.clone(),
                    dtype: b.dtype.name().into(),
                    shape: (0..b.rank()).map(|d| extent(m, &m.dim_expr(b.shape[d]))).collect(),
                    strides: m.stride_exprs(*buffer, DType::I64).iter().map(|e| extent(m, e)).collect(),
                    align: 16,
                    written: written.contains(buffer),
                }
            }
            Param::Scalar { name, var } => {
                ParamInfo::Scalar { name: name.clone(), dtype: m.var(*var).dtype.name().into() }
            }
        })
        .collect()
}

/// KernelInfo's description of the scratch buffers: dtype, shape and bytes.
pub fn scratch_info(m: &Module) -> Vec<ScratchInfo> {
    m.scratch
        .iter()
        .map(|&id| {
            let b = m.buffer(id);
            let dims: Vec<Expr> = b.shape.iter().map(|d| Expr::cast(m.dim_expr(*d), DType::I64)).collect();
            let bytes = dims.iter().fold(Expr::int_of(b.dtype.bytes() as i64, DType::I64), |acc, d| {
                Expr::binary(BinOp::Mul, acc, d.clone())
            });
            ScratchInfo {
                name: b.name.clone(),
                dtype: b.dtype.name().into(),
                shape: dims.iter().map(|d| extent(m, d)).collect(),
                bytes: extent(m, &bytes),
            }
        })
        .collect()
}

/// KernelInfo's description of the symbolic sizes: each with the tensor dimensions that
/// carry it.
pub fn size_info(m: &Module) -> Vec<SizeInfo> {
    m.sizes()
        .into_iter()
        .map(|v| {
            let var = m.var(v);
            let mut from = Vec::new();
            for (i, p) in m.params.iter().enumerate() {
                if let Param::Tensor { buffer, .. } = p {
                    for (d, dim) in m.buffer(*buffer).shape.iter().enumerate() {
                        if *dim == Dim::Size(v) {
                            from.push([i, d]);
                        }
                    }
                }
            }
            let multiple_of = match var.kind {
                VarKind::Size { multiple_of } => multiple_of,
                _ => 1,
            };
            SizeInfo { name: var.name.clone(), dtype: var.dtype.name().into(), multiple_of, from }
        })
        .collect()
}

/// The kernel's tensor maps, by the parameter number of their tensors.
fn tensor_maps(m: &Module) -> Result<Vec<TensorMap>, Diagnostic> {
    m.kernel
        .tensor_maps
        .iter()
        .map(|t| {
            let param = m
                .params
                .iter()
                .position(|p| matches!(p, Param::Tensor { buffer, .. } if *buffer == t.tensor))
                .ok_or_else(|| Diagnostic::bug("a tensor map of a buffer that is not a parameter"))?;
            let box_shape = t
                .box_dims
                .iter()
                .map(|&d| u32::try_from(d).map_err(|_| Diagnostic::bug("a tensor map box out of range")))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(TensorMap { param, box_shape, swizzle: t.swizzle })
        })
        .collect()
}

/// The launch recipe of a lowered (thread-level) module whose `__global__` function is
/// `entry`.
pub fn kernel_info(m: &Module, arch: &str, entry: &str, report: &[String]) -> Result<KernelInfo, Diagnostic> {
    let mut grid = m.kernel.grid.iter().map(|g| gexpr(m, g)).collect::<Result<Vec<_>, _>>()?;
    while grid.len() < 3 {
        grid.push(GridExpr::Const { value: 1 });
    }
    let shared: u64 = m
        .buffers
        .iter()
        .filter(|b| b.scope == Scope::Shared)
        .map(|b| b.shared_offset.unwrap_or(0) + b.bytes() as u64)
        .max()
        .unwrap_or(0);
    let base_align = m.shared_base_align();
    let shared = shared.div_ceil(16) * 16 + base_align.saturating_sub(16);
    let shared_bytes = u32::try_from(shared)
        .map_err(|_| Diagnostic::bug(format!("{shared} bytes of shared memory passed the planner")))?;
    let local: i64 = m.buffers.iter().filter(|b| b.scope == Scope::Local).map(|b| b.bytes()).sum();
    let local_bytes = u32::try_from(local).unwrap_or(u32::MAX);
    Ok(KernelInfo {
        name: m.name.clone(),
        entry: Some(entry.to_string()),
        arch: arch.to_string(),
        params: param_info(m),
        scratch: scratch_info(m),
        sizes: size_info(m),
        grid,
        threads: m.kernel.threads,
        block: [m.launched_threads(), 1, 1],
        persistent: m.tiles().is_some(),
        dependent_launch: waits_for_grids(m),
        cluster: [m.cluster_blocks(), 1, 1],
        shared_bytes,
        shared_opt_in: shared_bytes > DEFAULT_SHARED_LIMIT,
        local_bytes,
        tensor_maps: tensor_maps(m)?,
        report: report.to_vec(),
        then: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(value: i64) -> GridExpr {
        GridExpr::Const { value }
    }
    fn p(param: usize) -> GridExpr {
        GridExpr::Param { param }
    }
    fn op(op: GridOp, a: GridExpr, b: GridExpr) -> GridExpr {
        GridExpr::Op { op, a: Box::new(a), b: Box::new(b) }
    }

    fn info(grid: Vec<GridExpr>, scalars: &[(&str, &str)]) -> KernelInfo {
        let mut params = vec![ParamInfo::Tensor {
            name: "A".into(),
            dtype: "float16".into(),
            shape: vec![Extent::Fixed(8)],
            strides: vec![Extent::Fixed(1)],
            align: 16,
            written: true,
        }];
        params.extend(
            scalars
                .iter()
                .map(|(name, dtype)| ParamInfo::Scalar { name: name.to_string(), dtype: dtype.to_string() }),
        );
        KernelInfo {
            name: "k".into(),
            entry: Some("k_kernel".into()),
            arch: "sm_90a".into(),
            params,
            scratch: vec![],
            sizes: vec![],
            grid,
            threads: 128,
            block: [128, 1, 1],
            persistent: false,
            dependent_launch: false,
            cluster: [1, 1, 1],
            shared_bytes: 0,
            shared_opt_in: false,
            local_bytes: 0,
            tensor_maps: vec![],
            report: vec![],
            then: vec![],
        }
    }

    fn ints(values: &[i64]) -> impl Fn(usize) -> ScalarValue + '_ {
        move |i| ScalarValue::Int(values[i])
    }

    fn message(info: &KernelInfo, values: &[i64]) -> String {
        let error = info.launch_grid(&ints(values), &[]).unwrap_err();
        error.message(info, &|i| values[i].to_string())
    }

    #[test]
    fn grid_operations_follow_python() {
        let grid = vec![
            op(GridOp::CeilDiv, p(1), c(128)),
            op(GridOp::FloorDiv, p(1), c(128)),
            op(GridOp::Max, op(GridOp::Min, p(2), c(3)), op(GridOp::Sub, op(GridOp::Mul, p(2), c(2)), c(13))),
        ];
        let k = info(grid, &[("n", "int32"), ("m", "int32")]);
        assert_eq!(k.launch_grid(&ints(&[0, 1000, 7]), &[]), Ok([8, 7, 3]));
        assert_eq!(k.launch_grid(&ints(&[0, 1024, 7]), &[]), Ok([8, 8, 3]));
        // floor division rounds toward negative infinity; ceildiv is -(-a // b)
        let e = |a: i64, b: i64| op(GridOp::FloorDiv, c(a), c(b)).eval(&ints(&[]), &[]).unwrap();
        assert_eq!((e(-7, 3), e(-7, -3), e(7, -3), e(7, 3)), (-3, 2, -3, 2));
        assert_eq!(op(GridOp::CeilDiv, c(9), c(4)).eval(&ints(&[]), &[]), Ok(3));
        assert_eq!(op(GridOp::CeilDiv, c(-9), c(4)).eval(&ints(&[]), &[]), Ok(-2));
    }

    #[test]
    fn grid_errors_name_the_parameters() {
        let k = info(vec![op(GridOp::CeilDiv, p(1), c(128)), c(1), c(1)], &[("n", "int32")]);
        assert_eq!(
            message(&k, &[0, -129]),
            "grid dimension x is -1 (from scalar parameter n=-129): a grid dimension cannot be negative"
        );
        // no blocks: nothing to launch, not an error
        assert_eq!(k.launch_grid(&ints(&[0, 0]), &[]), Ok([0, 1, 1]));
        let k = info(vec![c(1), op(GridOp::Add, p(1), p(2)), c(1)], &[("m", "int64"), ("n", "int64")]);
        assert_eq!(
            message(&k, &[0, 65000, 536]),
            "grid dimension y is 65536 (from scalar parameters m=65000, n=536): over the CUDA limit of 65535 blocks"
        );
        let k = info(vec![p(1), c(65535), c(65535)], &[("m", "int64")]);
        assert_eq!(k.launch_grid(&ints(&[0, (1 << 31) - 1]), &[]), Ok([(1 << 31) - 1, 65535, 65535]));
        assert!(message(&k, &[0, 1 << 31]).ends_with("over the CUDA limit of 2147483647 blocks"));
        let k = info(vec![op(GridOp::FloorDiv, c(8), p(1)), c(1), c(1)], &[("block", "int32")]);
        assert_eq!(message(&k, &[0, 0]), "grid dimension x divides by zero (from scalar parameter block=0)");
        let k = info(vec![op(GridOp::Mul, p(1), op(GridOp::Mul, p(1), p(1))), c(1), c(1)], &[("n", "int64")]);
        assert!(
            message(&k, &[0, i64::MAX]).starts_with("grid dimension x overflows (from scalar parameter n=")
        );
        let k = info(vec![c(-2), c(1), c(1)], &[]);
        assert_eq!(message(&k, &[0]), "grid dimension x is -2: a grid dimension cannot be negative");
    }

    #[test]
    fn sizes_are_leaves_of_the_grid_and_shapes() {
        let mut k =
            info(vec![op(GridOp::CeilDiv, GridExpr::Size { size: 0 }, c(64)), p(1), c(1)], &[("n", "int32")]);
        k.sizes.push(SizeInfo {
            name: "M".into(),
            dtype: "int32".into(),
            multiple_of: 1,
            from: vec![[0, 0]],
        });
        assert_eq!(k.launch_grid(&ints(&[0, 3]), &[129]), Ok([3, 3, 1]));
        assert_eq!(k.launch_grid(&ints(&[0, 3]), &[0]), Ok([0, 3, 1]));
        let e = k.launch_grid(&ints(&[0, 70000]), &[65]).unwrap_err();
        assert_eq!(e.axis, 1);
        let k2 = info(vec![op(GridOp::Sub, c(0), GridExpr::Size { size: 0 }), c(1), c(1)], &[]);
        let mut k2 = k2;
        k2.sizes = k.sizes.clone();
        assert_eq!(
            k2.launch_grid(&ints(&[0]), &[5]).unwrap_err().message(&k2, &|_| "?".into()),
            "grid dimension x is -5 (from size M=5): a grid dimension cannot be negative"
        );
        // a symbolic extent and stride in JSON, and back
        let shape = vec![Extent::Expr(GridExpr::Size { size: 0 }), Extent::Fixed(64)];
        let text = serde_json::to_string(&shape).unwrap();
        assert_eq!(text, r#"[{"size":0},64]"#);
        assert_eq!(serde_json::from_str::<Vec<Extent>>(&text).unwrap(), shape);
        assert_eq!(shape[0].eval(&[7]), Some(7));
        k.sizes[0].from.push([0, 1]);
        let text = k.to_json();
        assert!(
            text.contains(r#""sizes":[{"name":"M","dtype":"int32","multiple_of":1,"from":[[0,0],[0,1]]}]"#)
        );
        assert_eq!(serde_json::from_str::<KernelInfo>(&text).unwrap(), k);
    }

    #[test]
    fn float_parameters_are_truncated() {
        let k = info(vec![op(GridOp::CeilDiv, p(1), c(4)), c(1), c(1)], &[("x", "float32")]);
        let floats = |v: f64| move |_: usize| ScalarValue::Float(v);
        assert_eq!(k.launch_grid(&floats(9.9), &[]), Ok([3, 1, 1]));
        assert_eq!(k.launch_grid(&floats(-0.5), &[]), Ok([0, 1, 1]));
        assert_eq!(k.launch_grid(&floats(-4.5), &[]).unwrap_err().problem, GridProblem::OutOfRange(Some(-1)));
        assert_eq!(k.launch_grid(&floats(f64::NAN), &[]).unwrap_err().problem, GridProblem::NotFinite);
        assert_eq!(k.launch_grid(&floats(1e300), &[]).unwrap_err().problem, GridProblem::OutOfRange(None));
    }

    #[test]
    fn json_round_trip_and_defaults() {
        let k = info(vec![op(GridOp::CeilDiv, p(1), c(128)), c(1), c(1)], &[("n", "int32")]);
        let text = k.to_json();
        assert!(text.contains(
            r#""grid":[{"op":"ceildiv","a":{"param":1},"b":{"const":128}},{"const":1},{"const":1}]"#
        ));
        assert!(text.contains(r#"{"kind":"scalar","name":"n","dtype":"int32"}"#));
        assert_eq!(serde_json::from_str::<KernelInfo>(&text).unwrap(), k);
        // cluster, tensor maps and the report may be left out of a hand-written KernelInfo
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        for field in ["cluster", "tensor_maps", "report"] {
            value.as_object_mut().unwrap().remove(field);
        }
        assert_eq!(serde_json::from_value::<KernelInfo>(value).unwrap(), k);
        let map = TensorMap { param: 0, box_shape: vec![64, 64], swizzle: 128 };
        assert_eq!(serde_json::to_string(&map).unwrap(), r#"{"param":0,"box":[64,64],"swizzle":128}"#);
    }
}
