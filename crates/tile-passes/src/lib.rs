//! The tilers lowering pipeline: tile-level IR in, thread-level IR out.
//!
//! Each pass is `fn(Module, &mut Ctx) -> Result<Module, Diagnostics>` in a file named after
//! it, with a doc comment stating what it requires, ensures and does not do. [`PIPELINE`]
//! is the flat, ordered list; [`run`] drives it and can hand the IR after each pass to a
//! dump callback (`TILERS_DUMP_IR`, `kernel.ir("after:<pass>")`).

pub mod gemm;
pub mod infer_layouts;
pub mod infer_scopes;
pub mod inject_pipeline;
pub mod insert_syncs;
pub mod lower_tile_ops;
pub mod plan_shared_memory;
mod ranges;
pub mod simplify;
pub mod verify;
pub mod widen_indices;

use tile_ir::{Diagnostic, Module};

/// What the code is compiled for.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// `sm_80`, `sm_90a`, …
    pub arch: String,
    /// Compute capability as a number: 80, 90, …
    pub sm: u32,
    /// Shared memory one block may use, in bytes (with the opt-in above 48 KiB).
    pub shared_limit: u64,
    pub max_threads: u32,
}

impl Target {
    pub fn from_arch(arch: &str) -> Option<Target> {
        let digits: String = arch.strip_prefix("sm_")?.chars().take_while(|c| c.is_ascii_digit()).collect();
        let sm: u32 = digits.parse().ok()?;
        if sm < 70 {
            return None;
        }
        let shared_limit = match sm {
            80 | 87 => 163 * 1024,
            86 | 89 => 99 * 1024,
            90..=99 => 227 * 1024,
            100..=109 => 227 * 1024,
            _ => 99 * 1024,
        };
        Some(Target { arch: arch.to_string(), sm, shared_limit, max_threads: 1024 })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    pub lineinfo: bool,
    pub fast_math: bool,
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
    // who holds which element of each fragment; which thread runs which parallel iteration
    ("infer_layouts", infer_layouts::infer_layouts),
    // T.Pipelined: global->shared copies run stages-1 iterations ahead into multi-buffered tiles
    ("inject_pipeline", inject_pipeline::inject_pipeline),
    // barriers between tile ops that share a shared-memory buffer
    ("insert_syncs", insert_syncs::insert_syncs),
    // tile ops to per-thread code: vector accesses, bounds guards, shuffles
    ("lower_tile_ops", lower_tile_ops::lower_tile_ops),
    // offsets of shared buffers in the block's dynamic shared memory
    ("plan_shared_memory", plan_shared_memory::plan_shared_memory),
    // index arithmetic that could pass 2^31 (wide tensors, their guards) in 64 bits
    ("widen_indices", widen_indices::widen_indices),
    // fold what lowering exposed
    ("simplify", simplify::simplify),
];

/// Names of the passes, in order (`tilers` prints this list).
pub fn pass_names() -> Vec<&'static str> {
    PIPELINE.iter().map(|(n, _)| *n).collect()
}

/// Receives (pass name, module) after each pass.
pub type DumpFn<'a> = dyn FnMut(&str, &Module) + 'a;

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
