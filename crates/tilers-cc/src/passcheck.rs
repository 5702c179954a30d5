//! Pass-by-pass differential checking without a GPU: the module after every pass runs on
//! the same seeded random inputs — tile-level modules on the reference interpreter,
//! thread-level ones on `tile_interp::threads` (warp model: shuffles, ldmatrix, mma.sync,
//! cp.async groups, barriers, races) — and its outputs are compared with the reference
//! run (the tile-level interpreter on the program after `verify` and `simplify`).
//!
//! Used by `tests/pass_check.rs` and by `tilers.testing.check_passes` (through
//! `_tilers.check_passes`).
//!
//! With [`Blocks::Edges`] only the first and last block along each grid axis run (the
//! last one is where tiles are ragged): both levels get the same `if` around their body,
//! so other blocks leave the outputs as they were. A persistent kernel, and one in
//! thread-block clusters, runs every block whatever is asked ([`check_stages`]).

use crate::{CompileError, CompileOptions};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use tile_interp::{threads, Arg};
use tile_ir::*;

/// Which blocks of the grid run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Blocks {
    /// The first and last block along each grid axis.
    #[default]
    Edges,
    /// Every block.
    All,
}

#[derive(Clone, Debug)]
pub struct CheckOptions {
    pub compile: CompileOptions,
    pub seed: u64,
    pub blocks: Blocks,
    /// Tensor parameters that start as zeros instead of random values (counters a kernel
    /// requires zeroed, such as the arrivals of a last-block combine).
    pub zeros: Vec<String>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            compile: CompileOptions { arch: tile_ir::target::PORTABLE_ARCH.into(), ..Default::default() },
            seed: 0,
            blocks: Blocks::Edges,
            zeros: Vec::new(),
        }
    }
}

impl CheckOptions {
    /// Parse `{"arch": "sm_80", "seed": 0, "blocks": "edges" | "all", "zeros": ["name", …]}`, and the compile
    /// options `wgmma`, `tma`, `persistent`, `tma_store`, `pingpong` (bools), `cluster` ([x, y]).
    pub fn from_json(text: &str) -> Result<CheckOptions, CompileError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| CompileError::Format(format!("options are not valid JSON: {e}")))?;
        let Some(o) = v.as_object() else {
            return Err(CompileError::Format("options must be a JSON object".into()));
        };
        let mut opts = CheckOptions::default();
        for (k, val) in o {
            let bad = |what: &str| CompileError::Format(format!("options.{k} must be {what}"));
            match k.as_str() {
                "arch" => opts.compile.arch = val.as_str().ok_or_else(|| bad("a string"))?.to_string(),
                "seed" => opts.seed = val.as_u64().ok_or_else(|| bad("a non-negative integer"))?,
                "zeros" => {
                    let names = val.as_array().ok_or_else(|| bad("a list of parameter names"))?;
                    opts.zeros = names
                        .iter()
                        .map(|n| {
                            n.as_str().map(str::to_string).ok_or_else(|| bad("a list of parameter names"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "blocks" => {
                    opts.blocks = match val.as_str() {
                        Some("edges") => Blocks::Edges,
                        Some("all") => Blocks::All,
                        _ => return Err(bad("\"edges\" or \"all\"")),
                    }
                }
                // the compile options that choose another kernel (as `tilers.compile` takes them)
                "wgmma" => opts.compile.mma_sync_only = !val.as_bool().ok_or_else(|| bad("a bool"))?,
                "tma" => opts.compile.no_tma = !val.as_bool().ok_or_else(|| bad("a bool"))?,
                "persistent" => opts.compile.no_persistent = !val.as_bool().ok_or_else(|| bad("a bool"))?,
                "tma_store" => opts.compile.no_tma_store = !val.as_bool().ok_or_else(|| bad("a bool"))?,
                "pingpong" => opts.compile.pingpong = val.as_bool().ok_or_else(|| bad("a bool"))?,
                "cluster" => {
                    opts.compile.cluster = crate::parse_cluster(val).map_err(CompileError::Format)?
                }
                other => return Err(CompileError::Format(format!("unknown option '{other}'"))),
            }
        }
        Ok(opts)
    }
}

/// Where the outputs of a stage first differ from the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    pub tensor: String,
    /// Elements outside the tolerance, of `total`.
    pub count: usize,
    pub total: usize,
    /// The first differing element's index and its values.
    pub index: Vec<i64>,
    pub want: f64,
    pub got: f64,
    /// Largest absolute difference over the tensor's elements outside the tolerance.
    pub max_error: f64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} elements of '{}' differ (max error {}); first at {:?}: want {}, got {}",
            self.count, self.total, self.tensor, self.max_error, self.index, self.want, self.got
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Ok,
    Mismatch(Mismatch),
    /// The interpreter stopped: a race, a deadlock, an access out of bounds, …
    Error(String),
    /// A tile-level module past `simplify` holding constructs only the lowering reads.
    Skipped(String),
}

impl Outcome {
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Mismatch(_) => "mismatch",
            Outcome::Error(_) => "error",
            Outcome::Skipped(_) => "skipped",
        }
    }
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Mismatch(_) | Outcome::Error(_))
    }
    pub fn message(&self) -> String {
        match self {
            Outcome::Ok => String::new(),
            Outcome::Mismatch(m) => m.to_string(),
            Outcome::Error(e) | Outcome::Skipped(e) => e.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct StageResult {
    pub pass: String,
    pub level: Level,
    pub outcome: Outcome,
    pub seconds: f64,
}

#[derive(Clone, Debug)]
pub struct PassCheck {
    pub name: String,
    /// The blocks that ran: those asked for, or all of a persistent or clustered kernel.
    pub blocks: Blocks,
    pub stages: Vec<StageResult>,
    /// The index in `stages` of the first failing stage.
    pub first_failure: Option<usize>,
    /// The IR text before and after the first failing pass.
    pub ir_before: Option<String>,
    pub ir_after: Option<String>,
}

impl PassCheck {
    pub fn ok(&self) -> bool {
        self.first_failure.is_none()
    }

    pub fn to_json(&self, opts: &CheckOptions) -> Value {
        let stages: Vec<Value> = self
            .stages
            .iter()
            .map(|s| {
                let mut v = json!({
                    "pass": s.pass,
                    "level": if s.level == Level::Thread { "thread" } else { "tile" },
                    "status": s.outcome.status(),
                    "message": s.outcome.message(),
                    "seconds": s.seconds,
                });
                if let Outcome::Mismatch(m) = &s.outcome {
                    v["mismatch"] = json!({
                        "tensor": m.tensor, "count": m.count, "total": m.total, "index": m.index,
                        "want": finite(m.want), "got": finite(m.got), "max_error": finite(m.max_error),
                    });
                }
                v
            })
            .collect();
        json!({
            "name": self.name,
            "arch": opts.compile.arch,
            "seed": opts.seed,
            "blocks": if self.blocks == Blocks::All { "all" } else { "edges" },
            "reference": "simplify",
            "ok": self.ok(),
            "first_failure": self.first_failure.map(|i| self.stages[i].pass.clone()),
            "stages": stages,
            "ir_before": self.ir_before,
            "ir_after": self.ir_after,
        })
    }
}

/// JSON has no NaN or infinities: those become their text.
fn finite(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(x.to_string())
    }
}

/// Compile `program` and check every stage (see [`check_stages`]). In a program of several
/// kernels each kernel is checked on its own (its stages are `kernel{k}/{pass}`), its
/// scratch buffers taken as tensor parameters: random contents in, compared out, as the
/// call's kernels hand them on; the stages of all kernels are listed in order.
pub fn check_passes(program: &str, opts: &CheckOptions) -> Result<PassCheck, CompileError> {
    let stages = crate::compile_stages(program, &opts.compile)?;
    if !stages.first().is_some_and(|(pass, _)| pass.starts_with("kernel0/")) {
        return check_stages(&stages, opts);
    }
    let mut kernels: Vec<(String, Vec<(String, Module)>)> = Vec::new();
    for (name, m) in stages {
        let Some((kernel, pass)) = name.split_once('/') else {
            return Err(CompileError::Internal {
                message: format!("stage '{name}' names no kernel"),
                reproducer: None,
            });
        };
        // a kernel's stages in order; those of the passes over the whole call (after every
        // kernel is lowered: grid_dependence) come after all kernels' and join their kernel's
        let index = match kernels.iter().position(|(k, _)| k == kernel) {
            Some(i) => i,
            None => {
                kernels.push((kernel.to_string(), Vec::new()));
                kernels.len() - 1
            }
        };
        kernels[index].1.push((pass.to_string(), m.scratch_as_params()));
    }
    let mut all: Option<PassCheck> = None;
    for (kernel, stages) in &kernels {
        let mut check = check_stages(stages, opts)?;
        for s in &mut check.stages {
            s.pass = format!("{kernel}/{}", s.pass);
        }
        match &mut all {
            None => all = Some(check),
            Some(all) => {
                if all.first_failure.is_none() && check.first_failure.is_some() {
                    all.first_failure = check.first_failure.map(|i| i + all.stages.len());
                    all.ir_before = check.ir_before;
                    all.ir_after = check.ir_after;
                }
                all.stages.extend(check.stages);
            }
        }
    }
    all.ok_or_else(|| CompileError::Internal {
        message: "a program without kernels".into(),
        reproducer: None,
    })
}

/// Check every stage after `input` against the reference run of the `simplify` stage —
/// for a kernel with symbolic sizes, at each of the sizes [`size_draws`] picks (the edges:
/// 0, 1, one tile, one tile and one, a ragged larger value).
pub fn check_stages(stages: &[(String, Module)], opts: &CheckOptions) -> Result<PassCheck, CompileError> {
    let simplified = simplify_stage(stages)?;
    let draws = size_draws(simplified);
    // a persistent kernel runs whole (`few_blocks`): so do the reference and every stage;
    // so does a kernel in thread-block clusters (the first and last block along x would
    // leave their peers out of the cluster's barriers and copies; and the cluster of a
    // multicast plan appears only in the stages after plan_warp_roles, while every stage
    // must run the same blocks)
    let whole = |m: &Module| m.tiles().is_some() || m.cluster_blocks() > 1;
    let blocks = if stages.iter().any(|(_, m)| whole(m)) { Blocks::All } else { opts.blocks };
    let references = draws
        .iter()
        .map(|sizes| reference_at(stages, opts.seed, blocks, sizes, &opts.zeros))
        .collect::<Result<Vec<_>, _>>()?;
    let mut results = Vec::new();
    let mut first_failure = None;
    for (i, (pass, m)) in stages.iter().enumerate().skip(1) {
        let t = Instant::now();
        let mut outcome = Outcome::Ok;
        for (r, sizes) in references.iter().zip(&draws) {
            let at = |e: String| {
                if sizes.is_empty() {
                    e
                } else {
                    format!("{e} (at sizes {})", sizes_text(simplified, sizes))
                }
            };
            if let Some((from, why)) = &r.from_stage {
                if let Some(f) = &r.failed {
                    outcome = if from == pass {
                        Outcome::Error(at(f.clone()))
                    } else {
                        Outcome::Skipped(format!("not checked: the reference stage '{from}' failed"))
                    };
                    break;
                }
                if m.level == Level::Tile || from == pass {
                    outcome = Outcome::Skipped(if from == pass {
                        format!("the reference (on the CPU model): the tile-level interpreter cannot run it: {why}")
                    } else {
                        why.clone()
                    });
                    break;
                }
            }
            outcome = match check(r, m, blocks) {
                Ok(()) => Outcome::Ok,
                Err(Failure::Error(e))
                    if m.level == Level::Tile && pass != "verify" && pass != "simplify" =>
                {
                    Outcome::Skipped(e)
                }
                Err(Failure::Error(e)) => Outcome::Error(at(e)),
                Err(Failure::Mismatch(mut mm)) => {
                    mm.tensor = at(mm.tensor);
                    Outcome::Mismatch(mm)
                }
            };
            if outcome != Outcome::Ok {
                break;
            }
        }
        if outcome.is_failure() && first_failure.is_none() {
            first_failure = Some((results.len(), i));
        }
        results.push(StageResult {
            pass: pass.clone(),
            level: m.level,
            outcome,
            seconds: t.elapsed().as_secs_f64(),
        });
    }
    let text = |i: usize| tile_ir::print::print_module(&stages[i].1);
    Ok(PassCheck {
        name: simplified.name.clone(),
        blocks,
        stages: results,
        first_failure: first_failure.map(|(k, _)| k),
        ir_before: first_failure.map(|(_, i)| text(i - 1)),
        ir_after: first_failure.map(|(_, i)| text(i)),
    })
}

/// `M=0, N=129`.
fn sizes_text(m: &Module, sizes: &[i64]) -> String {
    m.sizes().iter().zip(sizes).map(|(v, x)| format!("{}={x}", m.var(*v).name)).collect::<Vec<_>>().join(", ")
}

/// The sizes a symbolic kernel is checked at: per size, 0, its smallest multiple, one tile,
/// one tile and one multiple more, and a ragged value over two tiles — the tile being the
/// divisor of a grid dimension `ceildiv(size, tile)` when the grid has one, else 64. With
/// several sizes, draw k takes the k-th value of the first size, the (k+1)-th of the
/// second, …, so that sizes at different edges meet; a kernel in clusters along bx keeps
/// the draws whose grid along bx holds whole clusters. No sizes: one draw of none.
pub fn size_draws(m: &Module) -> Vec<Vec<i64>> {
    let sizes = m.sizes();
    if sizes.is_empty() {
        return vec![vec![]];
    }
    let values: Vec<Vec<i64>> = sizes
        .iter()
        .map(|v| {
            let q = m.dim_multiple(Dim::Size(*v)).max(1);
            let tile = grid_tile(m, *v).unwrap_or(64);
            let up = |x: i64| (x + q - 1) / q * q;
            vec![0, q, up(tile), up(tile) + q, up(2 * tile + tile / 2 + 3)]
        })
        .collect();
    let draws: Vec<Vec<i64>> = (0..5)
        .map(|k| values.iter().enumerate().map(|(j, vals)| vals[(k + j) % vals.len()]).collect())
        .collect();
    // a kernel in clusters of n blocks along bx launches only grids of whole clusters
    // (the launcher refuses others): the draws whose grid along bx is not a multiple go
    let n = m.kernel.cluster.map_or(1, |c| c[0] as i64);
    let (Some(grid), true) = (m.kernel.grid.first(), n > 1) else { return draws };
    let whole = |draw: &&Vec<i64>| {
        let g =
            sizes.iter().zip(draw.iter()).fold(grid.clone(), |g, (&v, &x)| g.substitute(v, &Expr::int(x)));
        tile_ir::simplify::simplify(g).as_int().is_none_or(|g| g % n == 0)
    };
    let kept: Vec<Vec<i64>> = draws.iter().filter(whole).cloned().collect();
    // none of whole clusters: the draws as they are, whose runs say why
    if kept.is_empty() {
        draws
    } else {
        kept
    }
}

/// The `d` of a grid dimension `(size + c) // d` (a `T.ceildiv(size, d)`), if any.
fn grid_tile(m: &Module, v: VarId) -> Option<i64> {
    let mut found = None;
    for g in &m.kernel.grid {
        g.walk(&mut |e| {
            if let Expr::Binary { op: BinOp::FloorDiv, a, b, .. } = e {
                if let (true, Some(d)) = (a.uses_var(v), b.as_int()) {
                    found.get_or_insert(d);
                }
            }
        });
    }
    found.filter(|d| *d > 0)
}

fn simplify_stage(stages: &[(String, Module)]) -> Result<&Module, CompileError> {
    stages
        .iter()
        .find(|(p, _)| p == "simplify")
        .map(|(_, m)| m)
        .ok_or_else(|| CompileError::Internal { message: "no simplify stage".into(), reproducer: None })
}

/// Why a stage does not agree with the reference.
#[derive(Clone, Debug)]
pub enum Failure {
    Error(String),
    Mismatch(Mismatch),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Error(e) => f.write_str(e),
            Failure::Mismatch(m) => m.fmt(f),
        }
    }
}

/// The reference result of a program: the tile-level interpreter on the input after
/// `verify` and `simplify`. `module` is that program at the run's sizes (no symbolic
/// dimension left), `args` its parameters followed by the sizes.
pub struct Reference {
    pub module: Module,
    pub args: Vec<Arg>,
    pub result: Vec<Arg>,
    /// The stage whose CPU-model run is the reference when the tile-level interpreter
    /// cannot run the kernel (warp roles handing data over through mbarriers in loops of
    /// their own: only concurrent threads run those), and why; None: the `simplify` stage.
    pub from_stage: Option<(String, String)>,
    /// That stage's CPU-model run failed (a deadlock, a race): the stage is reported as
    /// failing with this, the later ones are not checked.
    pub failed: Option<String>,
}

/// The reference run (at the first of the [`size_draws`] of a symbolic kernel).
pub fn reference(stages: &[(String, Module)], seed: u64, blocks: Blocks) -> Result<Reference, CompileError> {
    let draw = size_draws(simplify_stage(stages)?).swap_remove(0);
    reference_at(stages, seed, blocks, &draw, &[])
}

/// The reference run at the given symbolic sizes (one per `Module::sizes`).
pub fn reference_at(
    stages: &[(String, Module)],
    seed: u64,
    blocks: Blocks,
    sizes: &[i64],
    zeros: &[String],
) -> Result<Reference, CompileError> {
    let module = simplify_stage(stages)?;
    let mut args = sized_args(module, sizes, seed);
    for name in zeros {
        let at = module
            .params
            .iter()
            .position(|p| matches!(p, Param::Tensor { buffer, .. } if module.buffer(*buffer).name == *name));
        match (at, at.and_then(|i| args.get_mut(i))) {
            (Some(_), Some(Arg::Tensor(bytes))) => bytes.fill(0),
            _ => {
                return Err(CompileError::User(format!(
                    "check_passes: zeros names '{name}', which is no tensor parameter of '{}'",
                    module.name
                )))
            }
        }
    }
    let failed = |e: String| {
        let at =
            if sizes.is_empty() { String::new() } else { format!(" at sizes {}", sizes_text(module, sizes)) };
        CompileError::User(format!("the reference run of '{}'{at} failed: {e}", module.name))
    };
    match execute(module, &args, blocks) {
        Ok(result) => {
            Ok(Reference { module: module.with_sizes(sizes), args, result, from_stage: None, failed: None })
        }
        Err(e) if e.contains(tile_interp::SEQUENTIAL_WAIT) => {
            // the first thread-level stage on the CPU model, which runs threads concurrently
            let Some((pass, first)) = stages.iter().find(|(_, m)| m.level == Level::Thread) else {
                return Err(failed(e));
            };
            let (result, failed) = match execute(&first.with_sizes(sizes), &args, blocks) {
                Ok(result) => (result, None),
                Err(f) => (vec![], Some(f)),
            };
            Ok(Reference {
                module: module.with_sizes(sizes),
                args,
                result,
                from_stage: Some((pass.clone(), e)),
                failed,
            })
        }
        Err(e) => Err(failed(e)),
    }
}

/// Random arguments at the given sizes: [`random_args`] of the module at those sizes, the
/// sizes after them.
pub fn sized_args(m: &Module, sizes: &[i64], seed: u64) -> Vec<Arg> {
    let mut args = random_args(&m.with_sizes(sizes), seed);
    args.extend(sizes.iter().map(|x| Arg::Int(*x)));
    args
}

/// Check a lowered (or any) module against the reference.
pub fn check(r: &Reference, m: &Module, blocks: Blocks) -> Result<(), Failure> {
    let got = execute(m, &r.args, blocks).map_err(Failure::Error)?;
    compare(&r.module, &r.result, &got).map_err(Failure::Mismatch)
}

/// Wrap the body in `if` block ∈ {first, last} along every grid axis.
pub fn few_blocks(mut m: Module) -> Module {
    if m.tiles().is_some() {
        // a persistent kernel binds its block indices per tile inside its tile loop, and its
        // pipeline's ring runs through every tile a block walks: it runs whole (the model
        // launches a few blocks, each walking several tiles)
        return m;
    }
    let mut cond = Expr::bool(true);
    for (i, v) in m.vars.iter().enumerate() {
        if let VarKind::BlockIdx(axis) = v.kind {
            let Some(g) = m.kernel.grid.get(axis as usize) else { continue };
            let b = Expr::var(VarId(i as u32), v.dtype);
            let g = Expr::cast(g.clone(), v.dtype);
            let last = Expr::binary(BinOp::Sub, g, Expr::int_of(1, v.dtype));
            let any = [Expr::int_of(0, v.dtype), last]
                .into_iter()
                .map(|x| Expr::binary(BinOp::Eq, b.clone(), x))
                .reduce(|p, q| Expr::binary(BinOp::Or, p, q))
                .unwrap();
            cond = Expr::binary(BinOp::And, cond, any);
        }
    }
    // the lets that bind renumbered block indices (`rasterize`) come first
    let mut body = std::mem::take(&mut m.kernel.body);
    let lets = body.iter().take_while(|s| matches!(s, Stmt::Let { .. } | Stmt::Comment(_))).count();
    let rest = body.split_off(lets);
    body.push(Stmt::If { cond, then: rest, otherwise: vec![], loc: Loc::UNKNOWN });
    m.kernel.body = body;
    m
}

/// xorshift64*: deterministic test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Random arguments: floats in [-1, 1), integers over their whole range, scalars fixed. A
/// module with symbolic sizes takes them at its one-tile draw ([`size_draws`]), after the
/// parameters ([`sized_args`] picks the sizes).
pub fn random_args(m: &Module, seed: u64) -> Vec<Arg> {
    if m.buffers.iter().any(|b| b.is_symbolic()) {
        let draws = size_draws(m);
        // the one-tile draw, or the last where a cluster left fewer
        let draw = draws.get(2).or(draws.last()).expect("a draw");
        return sized_args(m, draw, seed);
    }
    let mut rng = Rng(seed);
    m.params
        .iter()
        .map(|p| match p {
            Param::Tensor { buffer, .. } => {
                let b = m.buffer(*buffer);
                let n = b.num_elements().max(0) as usize;
                let mut bytes = Vec::with_capacity(b.bytes().max(0) as usize);
                for _ in 0..n {
                    match b.dtype {
                        DType::F16 => bytes.extend(tile_interp::f32_to_f16_bits(rng.unit()).to_le_bytes()),
                        DType::BF16 => bytes.extend(tile_interp::f32_to_bf16_bits(rng.unit()).to_le_bytes()),
                        DType::F32 => bytes.extend(rng.unit().to_le_bytes()),
                        DType::F64 => bytes.extend((rng.unit() as f64).to_le_bytes()),
                        DType::Bool => bytes.push((rng.next() & 1) as u8),
                        dt => bytes.extend(&rng.next().to_le_bytes()[..dt.bytes() as usize]),
                    }
                }
                Arg::Tensor(bytes)
            }
            Param::Scalar { var, .. } => {
                if m.var(*var).dtype.is_float() {
                    Arg::Float(0.75)
                } else {
                    Arg::Int(37)
                }
            }
        })
        .collect()
}

fn value(bytes: &[u8], dt: DType) -> f64 {
    match dt {
        DType::F16 => tile_interp::f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])) as f64,
        DType::BF16 => tile_interp::bf16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])) as f64,
        DType::F32 => f32::from_le_bytes(bytes[..4].try_into().unwrap()) as f64,
        DType::F64 => f64::from_le_bytes(bytes[..8].try_into().unwrap()),
        DType::Bool | DType::U8 => bytes[0] as f64,
        DType::I8 => bytes[0] as i8 as f64,
        DType::I16 => i16::from_le_bytes([bytes[0], bytes[1]]) as f64,
        DType::U16 => u16::from_le_bytes([bytes[0], bytes[1]]) as f64,
        DType::I32 => i32::from_le_bytes(bytes[..4].try_into().unwrap()) as f64,
        DType::U32 => u32::from_le_bytes(bytes[..4].try_into().unwrap()) as f64,
        DType::I64 => i64::from_le_bytes(bytes[..8].try_into().unwrap()) as f64,
        DType::U64 => u64::from_le_bytes(bytes[..8].try_into().unwrap()) as f64,
    }
}

/// Compare the tensors of two runs: bit-exact for integers; for floats within a relative
/// tolerance of the dtype (reductions and mma sum in another order than the reference).
pub fn compare(m: &Module, want: &[Arg], got: &[Arg]) -> Result<(), Mismatch> {
    for (p, (w, g)) in m.params.iter().zip(want.iter().zip(got)) {
        let (Param::Tensor { name, buffer }, Arg::Tensor(w), Arg::Tensor(g)) = (p, w, g) else { continue };
        if w == g {
            continue;
        }
        let b = m.buffer(*buffer);
        let eb = b.dtype.bytes() as usize;
        let rtol = match b.dtype {
            DType::F16 => 1e-2,
            DType::BF16 => 3e-2,
            DType::F32 => 1e-4,
            DType::F64 => 1e-9,
            _ => 0.0,
        };
        let scale = if rtol > 0.0 {
            w.chunks(eb).map(|c| value(c, b.dtype).abs()).filter(|x| x.is_finite()).fold(0.0, f64::max)
        } else {
            0.0
        };
        let mut count = 0;
        let mut first = None;
        let mut max_error = 0.0f64;
        for (k, (x, y)) in w.chunks(eb).zip(g.chunks(eb)).enumerate() {
            if x == y {
                continue;
            }
            let (x, y) = (value(x, b.dtype), value(y, b.dtype));
            let close =
                rtol > 0.0 && ((x - y).abs() <= rtol * (x.abs() + 0.1 * scale) || (x.is_nan() && y.is_nan()));
            if !close {
                count += 1;
                let err = (x - y).abs();
                max_error = if err.is_nan() || max_error.is_nan() { f64::NAN } else { max_error.max(err) };
                first.get_or_insert((k, x, y));
            }
        }
        if let Some((k, x, y)) = first {
            let strides = b.strides();
            let index: Vec<i64> = strides.iter().zip(b.extents()).map(|(s, n)| (k as i64 / s) % n).collect();
            return Err(Mismatch {
                tensor: name.clone(),
                count,
                total: w.len() / eb,
                index,
                want: x,
                got: y,
                max_error,
            });
        }
    }
    Ok(())
}

/// Give shared buffers consecutive offsets when no pass has planned them yet.
fn place_shared(mut m: Module) -> Module {
    let mut next = 0u64;
    for b in &mut m.buffers {
        if b.scope == Scope::Shared && b.shared_offset.is_none() {
            // a tile in wgmma's layout starts on its swizzle period, as plan_shared_memory
            // places it (the model swizzles physical addresses)
            next = next.next_multiple_of(b.shared_align().max(128));
            b.shared_offset = Some(next);
            next += (b.bytes() as u64).div_ceil(128) * 128;
        }
    }
    m
}

/// Run one module of either level on a copy of `args`; a panic in an interpreter is an
/// error too.
pub fn execute(m: &Module, args: &[Arg], blocks: Blocks) -> Result<Vec<Arg>, String> {
    let mut args = args.to_vec();
    let m = if blocks == Blocks::Edges { few_blocks(m.clone()) } else { m.clone() };
    let result = catch_unwind(AssertUnwindSafe(|| match m.level {
        Level::Tile => tile_interp::run(&m, &mut args),
        Level::Thread => threads::run(&place_shared(m.clone()), &mut args),
    }));
    match result {
        Ok(r) => r.map_err(|d| d.message)?,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            return Err(format!("the interpreter panicked: {message}"));
        }
    }
    Ok(args)
}
