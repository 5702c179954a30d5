//! The tilers lowering pipeline: tile-level IR in, thread-level IR out.
//!
//! Each pass is `fn(Module, &mut Ctx) -> Result<Module, Diagnostics>` in a file named after
//! it, with a doc comment stating what it requires, ensures and does not do. [`PIPELINE`]
//! is the flat, ordered list; [`run`] drives it and can hand the IR after each pass to a
//! dump callback (`TILERS_DUMP_IR`, `kernel.ir("after:<pass>")`).

pub mod elide_syncs;
pub mod gemm;
pub mod grid_dependence;
pub mod infer_layouts;
pub mod infer_scopes;
pub mod inject_pipeline;
pub mod insert_syncs;
mod local_owners;
pub mod lower;
pub mod plan_pipeline;
pub mod plan_shared_memory;
pub mod plan_warp_roles;
mod ranges;
pub mod rasterize;
pub mod select_instructions;
pub mod simplify;
pub mod verify;
pub mod version_edges;
pub mod widen_indices;

use tile_ir::{Diagnostic, Module};

pub use tile_ir::Target;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    pub lineinfo: bool,
    pub fast_math: bool,
    /// Write mma accumulators' staging tiles with `stmatrix` where the target has it. Off:
    /// on the H200 it measured 1-3% slower than the threads' 4-byte stores for mma.sync
    /// epilogues (bench/results/gemm-ab-2026-12-01-h200.json); kept for tests, benchmarks
    /// and the wgmma epilogues to come.
    pub stmatrix_epilogue: bool,
    /// Keep every gemm on `mma.sync`, the portable path, even where `wgmma` exists (to
    /// compare the two: `tilers.compile(..., wgmma=False)`).
    pub mma_sync_only: bool,
    /// Keep pipelines on `cp.async` issued by the compute threads even where TMA and warp
    /// specialization exist (`tilers.compile(..., tma=False)`, options JSON `"tma": false`).
    pub no_tma: bool,
    /// Launch a warp-specialized kernel one tile per block instead of persistent
    /// (`tilers.compile(..., persistent=False)`, options JSON `"persistent": false`).
    pub no_persistent: bool,
    /// Keep a warp-specialized kernel's staged epilogue on the threads' 16-byte stores
    /// instead of TMA stores (options JSON `"tma_store": false`).
    pub no_tma_store: bool,
    /// A persistent warp-specialized kernel gets two consumer slots on alternate tiles
    /// (`tilers.compile(..., persistent="pingpong")`, options JSON `"pingpong": true`).
    pub pingpong: bool,
    /// Thread-block clusters for a warp-specialized kernel: `[x, y]` tiles of the grid walked
    /// by one cluster (persistent) or run by one (a tile per block, along `bx`), the producer
    /// copies they share multicast (`tilers.compile(..., cluster=(2, 1))`, options JSON
    /// `"cluster": [2, 1]`); a kernel's own `Kernel::cluster` wins.
    pub cluster: Option<[u32; 2]>,
}

/// State shared by the passes of one compilation.
pub struct Ctx {
    pub target: Target,
    pub options: Options,
    /// The lowering report: one line per decision a kernel author may want to know.
    pub report: Vec<String>,
}

impl Ctx {
    pub fn new(target: Target, options: Options) -> Ctx {
        Ctx { target, options, report: Vec::new() }
    }
}

pub type Pass = fn(Module, &mut Ctx) -> Result<Module, Vec<Diagnostic>>;

/// The lowering pipeline, in order.
pub const PIPELINE: &[(&str, Pass)] = &[
    // shapes, dtypes, scopes, constant indices, races: user errors with spans
    ("verify", verify::verify),
    // constant folding and affine index arithmetic
    ("simplify", simplify::simplify),
    // gemm operand tiles filled by copies live in shared memory
    ("infer_scopes", infer_scopes::infer_scopes),
    // who holds which element of each fragment (gemm layouts from the atoms); which thread runs which parallel iteration
    ("infer_layouts", infer_layouts::infer_layouts),
    // per gemm and copy, the instruction from the target's tables, and why not a faster one
    ("select_instructions", select_instructions::select_instructions),
    // which pipelined loop becomes an mbarrier pipeline fed by TMA (Hopper)
    ("plan_pipeline", plan_pipeline::plan_pipeline),
    // producer warps after the user's threads for that pipeline, register budgets (setmaxnreg)
    ("plan_warp_roles", plan_warp_roles::plan_warp_roles),
    // T.Pipelined: global->shared copies run stages-1 iterations ahead into multi-buffered tiles
    ("inject_pipeline", inject_pipeline::inject_pipeline),
    // barriers between tile ops that share a shared-memory buffer
    ("insert_syncs", insert_syncs::insert_syncs),
    // tile ops to per-thread code by their chosen instructions: vector accesses, bounds guards, shuffles
    ("lower_tile_ops", lower::lower_tile_ops),
    // block barriers between accesses that another barrier already orders
    ("elide_syncs", elide_syncs::elide_syncs),
    // offsets of shared buffers in the block's dynamic shared memory
    ("plan_shared_memory", plan_shared_memory::plan_shared_memory),
    // symbolic sizes: blocks wholly inside the tensors take a copy of the body without guards
    ("version_edges", version_edges::version_edges),
    // index arithmetic that could pass 2^31 (wide tensors, their guards) in 64 bits
    ("widen_indices", widen_indices::widen_indices),
    // fold what lowering exposed
    ("simplify", simplify::simplify),
    // T.use_swizzle: the blocks numbered panel by panel, as lets of the block indices
    ("rasterize", rasterize::rasterize),
];

/// Names of the passes, in order (`tilers` prints this list).
pub fn pass_names() -> Vec<&'static str> {
    PIPELINE.iter().map(|(n, _)| *n).collect()
}

/// Receives (pass name, module) after each pass.
pub type DumpFn<'a> = dyn FnMut(&str, &Module) + 'a;

/// Run the pipeline from its start through the first pass named `last` (`"verify"`: the
/// checks of a tile program; `"simplify"`: the tile-level program whose meaning the reference
/// interpreter defines).
pub fn run_through(mut m: Module, ctx: &mut Ctx, last: &str) -> Result<Module, Vec<Diagnostic>> {
    for (name, pass) in PIPELINE {
        m = pass(m, ctx)?;
        if *name == last {
            return Ok(m);
        }
    }
    Err(vec![Diagnostic::bug(format!("no pass named '{last}' in the pipeline"))])
}

/// Run the whole pipeline; `dump` sees the IR after each pass.
pub fn run(
    mut m: Module,
    ctx: &mut Ctx,
    mut dump: Option<&mut DumpFn<'_>>,
) -> Result<Module, Vec<Diagnostic>> {
    if let Some(d) = dump.as_mut() {
        d("input", &m);
    }
    for (name, pass) in PIPELINE {
        m = pass(m, ctx)?;
        if let Some(d) = dump.as_mut() {
            d(name, &m);
        }
    }
    Ok(m)
}
