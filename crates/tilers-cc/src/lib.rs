//! The compiler driver shared by the command line (`tilers-cc`) and the Python extension:
//! serialized program → verified module → lowering pipeline → CUDA source + KernelInfo.
//!
//! No panic escapes: a panic inside the compiler becomes [`CompileError::Internal`] with
//! the program saved as a reproducer.

pub mod cli;
pub mod export;
pub mod nvrtc;
pub mod passcheck;

use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use tile_ir::diag::render_all;
use tile_ir::Module;
use tile_passes::{Ctx, Options, Target};

/// The stack the compiler runs on ([`on_deep_stack`]). Its passes recurse once per level of
/// nesting, up to `tile_ir::parse::MAX_NESTING` levels; the memory is reserved, and only
/// the part a program's depth touches is used.
pub const DEEP_STACK_BYTES: usize = 1 << 30;

/// Run `work` on a thread with [`DEEP_STACK_BYTES`] of stack and wait for it: every entry
/// point that parses, compiles, interprets or drops a program goes through here, so that a
/// deeply nested (legal) program cannot overflow the caller's stack, whatever thread it is.
pub fn on_deep_stack<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    let mut work = Some(work);
    let slot = &mut work;
    let joined = std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("tilers-compile".into()).stack_size(DEEP_STACK_BYTES);
        thread.spawn_scoped(scope, move || (slot.take().expect("work runs once"))()).map(|h| h.join())
    });
    match joined {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // no thread to be had (a limit on threads or memory): run here, as deep as this stack goes
        Err(_) => (work.take().expect("the thread did not start"))(),
    }
}

#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    pub arch: String,
    pub lineinfo: bool,
    pub fast_math: bool,
    /// Write the IR after every pass here (`TILERS_DUMP_IR`).
    pub dump_dir: Option<PathBuf>,
    /// Keep the text IR after every pass in [`Compiled::ir`] (`kernel.ir()`; memory per
    /// kernel, so only on request).
    pub keep_ir: bool,
    /// `tile_passes::Options::stmatrix_epilogue` (tests and benchmarks).
    pub stmatrix_epilogue: bool,
    /// `tile_passes::Options::mma_sync_only` (`"wgmma": false`).
    pub mma_sync_only: bool,
    /// `tile_passes::Options::no_tma` (`"tma": false`).
    pub no_tma: bool,
    /// `tile_passes::Options::no_persistent` (`"persistent": false`).
    pub no_persistent: bool,
    /// `tile_passes::Options::no_tma_store` (`"tma_store": false`).
    pub no_tma_store: bool,
    /// `tile_passes::Options::pingpong` (`"pingpong": true`).
    pub pingpong: bool,
    /// `tile_passes::Options::cluster` (`"cluster": [x, y]`, or `x` for `[x, 1]`).
    pub cluster: Option<[u32; 2]>,
}

/// `"cluster": [x, y]` (or `x`, `null`): blocks per cluster along `bx` and `by`, 1 to 16 in all.
pub fn parse_cluster(val: &Value) -> Result<Option<[u32; 2]>, String> {
    let dim = |v: &Value| v.as_u64().filter(|d| (1..=16).contains(d)).map(|d| d as u32);
    let dims = match val {
        Value::Null => return Ok(None),
        Value::Array(a) if a.len() == 2 => dim(&a[0]).zip(dim(&a[1])).map(|(x, y)| [x, y]),
        Value::Array(a) if a.len() == 3 && a[2].as_u64() == Some(1) => {
            dim(&a[0]).zip(dim(&a[1])).map(|(x, y)| [x, y])
        }
        v => dim(v).map(|x| [x, 1]),
    };
    match dims {
        Some([x, y]) if x * y <= 16 => Ok((x * y > 1).then_some([x, y])),
        _ => Err(format!("cluster must be [x, y] (blocks along bx and by, 16 in all at most), got {val}")),
    }
}

impl CompileOptions {
    /// Parse `{"arch": "sm_90a", "lineinfo": false, "fast_math": false, "dump_ir": null,
    /// "keep_ir": false}`.
    pub fn from_json(text: &str) -> Result<CompileOptions, CompileError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| CompileError::Format(format!("options are not valid JSON: {e}")))?;
        let Some(o) = v.as_object() else {
            return Err(CompileError::Format("options must be a JSON object".into()));
        };
        let mut opts = CompileOptions { arch: tile_ir::target::DEFAULT_ARCH.into(), ..Default::default() };
        for (k, val) in o {
            match k.as_str() {
                "arch" => {
                    opts.arch = val
                        .as_str()
                        .ok_or_else(|| CompileError::Format("options.arch must be a string".into()))?
                        .to_string()
                }
                "lineinfo" => opts.lineinfo = val.as_bool().unwrap_or(false),
                "fast_math" => opts.fast_math = val.as_bool().unwrap_or(false),
                "dump_ir" => opts.dump_dir = val.as_str().map(PathBuf::from),
                "keep_ir" => opts.keep_ir = val.as_bool().unwrap_or(false),
                "stmatrix_epilogue" => opts.stmatrix_epilogue = val.as_bool().unwrap_or(false),
                "wgmma" => opts.mma_sync_only = !val.as_bool().unwrap_or(true),
                "tma" => opts.no_tma = !val.as_bool().unwrap_or(true),
                "persistent" => opts.no_persistent = !val.as_bool().unwrap_or(true),
                "tma_store" => opts.no_tma_store = !val.as_bool().unwrap_or(true),
                "pingpong" => opts.pingpong = val.as_bool().unwrap_or(false),
                "cluster" => opts.cluster = parse_cluster(val).map_err(CompileError::Format)?,
                other => return Err(CompileError::Format(format!("unknown option '{other}'"))),
            }
        }
        Ok(opts)
    }
}

#[derive(Clone, Debug)]
pub enum CompileError {
    /// The input is not a valid serialized program (or options).
    Format(String),
    /// Mistakes in the user's kernel, rendered with source lines.
    User(String),
    /// A bug in tilers.
    Internal { message: String, reproducer: Option<PathBuf> },
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileError::Format(m) | CompileError::User(m) => f.write_str(m),
            CompileError::Internal { message, reproducer } => {
                writeln!(f, "internal compiler error: {message}")?;
                match reproducer {
                    Some(p) => write!(
                        f,
                        "the program was saved to {}; please report this bug with that file attached (`tilers-cc {}` reproduces it)",
                        p.display(),
                        p.display()
                    ),
                    None => write!(f, "please report this bug with the kernel that caused it"),
                }
            }
        }
    }
}

pub struct Compiled {
    pub source: String,
    /// KernelInfo JSON text.
    pub info: String,
    /// The lowered module of each kernel, in launch order (one per `T.Kernel`).
    pub modules: Vec<Module>,
    /// (pass, text IR after it), `input` first: with [`CompileOptions::keep_ir`] only. In a
    /// program of several kernels each pass is named `kernel{k}/{pass}`, kernel by kernel.
    pub ir: Vec<(String, String)>,
}

fn save_reproducer(program: &str) -> Option<PathBuf> {
    // content-addressed, so the same failure saves one file
    let mut h: u64 = 0xcbf29ce484222325;
    for b in program.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    let path = std::env::temp_dir().join(format!("tilers-ice-{h:016x}.json"));
    std::fs::write(&path, program).ok().map(|_| path)
}

/// Compile a serialized program; `dump` sees the IR text after each pass.
pub fn compile_with(
    program: &str,
    opts: &CompileOptions,
    dump: &mut dyn FnMut(&str, &str),
) -> Result<Compiled, CompileError> {
    let mut dump_module = |pass: &str, m: &Module| dump(pass, &tile_ir::print::print_module(m));
    compile_guarded(program, opts, &mut dump_module)
}

/// Compile a serialized program and return the module after every pass, in order
/// (`input` first); code generation runs too, so its errors are reported.
pub fn compile_stages(program: &str, opts: &CompileOptions) -> Result<Vec<(String, Module)>, CompileError> {
    let mut stages = Vec::new();
    compile_guarded(program, opts, &mut |pass, m| stages.push((pass.to_string(), m.clone())))?;
    Ok(stages)
}

fn compile_guarded(
    program: &str,
    opts: &CompileOptions,
    dump: &mut dyn FnMut(&str, &Module),
) -> Result<Compiled, CompileError> {
    let result = catch_unwind(AssertUnwindSafe(|| compile_inner(program, opts, dump)));
    match result {
        Ok(Err(CompileError::Internal { message, .. })) => {
            Err(CompileError::Internal { message, reproducer: save_reproducer(program) })
        }
        Ok(r) => r,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(CompileError::Internal { message, reproducer: save_reproducer(program) })
        }
    }
}

/// Compile a serialized program: the IR after every pass goes to `opts.dump_dir` (or
/// `TILERS_DUMP_IR`) as files, and into [`Compiled::ir`] with `opts.keep_ir`.
pub fn compile(program: &str, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    let dump_dir = opts.dump_dir.clone().or_else(|| std::env::var_os("TILERS_DUMP_IR").map(PathBuf::from));
    let mut index = 0;
    let mut kept = Vec::new();
    let mut dump = |pass: &str, text: &str| {
        if let Some(dir) = &dump_dir {
            let _ = std::fs::create_dir_all(dir);
            let file = format!("{index:02}-{}.tir", pass.replace('/', "-"));
            let _ = std::fs::write(dir.join(file), text);
            index += 1;
        }
        if opts.keep_ir {
            kept.push((pass.to_string(), text.to_string()));
        }
    };
    let mut compiled = compile_with(program, opts, &mut dump)?;
    compiled.ir = kept;
    Ok(compiled)
}

/// A program the parser refused: malformed, or legal but past one of tilers' limits (then
/// the message is at the user's line).
pub fn format_error(e: tile_ir::parse::FormatError) -> CompileError {
    match e.limit {
        Some(text) => CompileError::User(text),
        None => CompileError::Format(e.to_string()),
    }
}

fn compile_inner(
    program: &str,
    opts: &CompileOptions,
    dump_module: &mut dyn FnMut(&str, &Module),
) -> Result<Compiled, CompileError> {
    let modules = tile_ir::parse::parse_kernels(program).map_err(format_error)?;
    let target = Target::parse(&opts.arch).map_err(CompileError::Format)?;
    let options = Options {
        lineinfo: opts.lineinfo,
        fast_math: opts.fast_math,
        stmatrix_epilogue: opts.stmatrix_epilogue,
        mma_sync_only: opts.mma_sync_only,
        no_tma: opts.no_tma,
        no_persistent: opts.no_persistent,
        no_tma_store: opts.no_tma_store,
        pingpong: opts.pingpong,
        cluster: opts.cluster,
    };
    let several = modules.len() > 1;
    let sources = modules[0].sources.clone();
    let mut lowered = Vec::with_capacity(modules.len());
    // each kernel is lowered on its own: passes see one kernel, as in a prim_func of one
    for (k, module) in modules.into_iter().enumerate() {
        let mut ctx = Ctx::new(target.clone(), options.clone());
        let mut dump = |pass: &str, m: &Module| {
            if several {
                dump_module(&format!("kernel{k}/{pass}"), m)
            } else {
                dump_module(pass, m)
            }
        };
        let module = tile_passes::run(module, &mut ctx, Some(&mut dump)).map_err(|diags| {
            let bugs: Vec<_> = diags.iter().filter(|d| d.severity == tile_ir::diag::Severity::Bug).collect();
            if let Some(b) = bugs.first() {
                CompileError::Internal { message: b.message.clone(), reproducer: None }
            } else {
                CompileError::User(render_all(&diags, &sources))
            }
        })?;
        lowered.push((module, ctx.report));
    }
    // the kernels of one call: each may start while the one before it runs
    tile_passes::grid_dependence::place(&mut lowered, &target);
    if several && target.sm >= 90 {
        for (k, (m, _)) in lowered.iter().enumerate() {
            dump_module(&format!("kernel{k}/grid_dependence"), m);
        }
    }
    let cg = tile_codegen::CodegenOptions { lineinfo: opts.lineinfo };
    let kernel = tile_codegen::emit_cuda_kernels(&lowered, &target, &cg).map_err(|d| match d.severity {
        tile_ir::diag::Severity::Bug => CompileError::Internal { message: d.message, reproducer: None },
        _ => CompileError::User(d.render(&sources)),
    })?;
    Ok(Compiled {
        source: kernel.source,
        info: kernel.info.to_json(),
        modules: lowered.into_iter().map(|(m, _)| m).collect(),
        ir: Vec::new(),
    })
}

/// Verify a serialized program without generating code (for the interpreter); returns its
/// KernelInfo JSON ([`tile_codegen::KernelInfo::for_interpreter`]: the parameters and the
/// block; no entry, grid or source; the kernels after the first in `then`).
pub fn check(program: &str) -> Result<String, CompileError> {
    let modules = tile_ir::parse::parse_kernels(program).map_err(format_error)?;
    let sources = modules[0].sources.clone();
    let mut infos = Vec::new();
    for module in modules {
        let mut ctx = Ctx::new(Target::default_gpu(), Options::default());
        let module = tile_passes::run_through(module, &mut ctx, "verify")
            .map_err(|d| CompileError::User(render_all(&d, &sources)))?;
        infos.push(tile_codegen::KernelInfo::for_interpreter(&module));
    }
    let mut info = infos.remove(0);
    for later in &infos {
        for (p, q) in info.params.iter_mut().zip(&later.params) {
            if let (
                tile_codegen::kernel_info::ParamInfo::Tensor { written, .. },
                tile_codegen::kernel_info::ParamInfo::Tensor { written: also, .. },
            ) = (p, q)
            {
                *written |= *also;
            }
        }
    }
    for later in &mut infos {
        later.params = info.params.clone();
    }
    info.then = infos;
    Ok(info.to_json())
}

/// Run a serialized program on host buffers with the reference interpreter, after the
/// passes that define its meaning (`verify`, `simplify`); returns the arguments, tensors
/// holding their new contents.
pub fn interpret(
    program: &str,
    mut args: Vec<tile_interp::Arg>,
) -> Result<Vec<tile_interp::Arg>, CompileError> {
    let result = catch_unwind(AssertUnwindSafe(move || -> Result<Vec<tile_interp::Arg>, CompileError> {
        let modules = tile_ir::parse::parse_kernels(program).map_err(format_error)?;
        let sources = modules[0].sources.clone();
        let user = |diags: Vec<tile_ir::Diagnostic>| CompileError::User(render_all(&diags, &sources));
        let mut simplified = Vec::with_capacity(modules.len());
        for module in modules {
            let mut ctx = Ctx::new(Target::default_gpu(), Options::default());
            simplified.push(tile_passes::run_through(module, &mut ctx, "simplify").map_err(user)?);
        }
        let run_error = |d: tile_ir::Diagnostic| CompileError::User(d.render(&sources));
        if let [module] = &simplified[..] {
            tile_interp::run(module, &mut args).map_err(run_error)?;
            return Ok(args);
        }
        run_in_order(&simplified, &mut args).map_err(run_error)?;
        Ok(args)
    }));
    match result {
        Ok(r) => r,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(CompileError::Internal {
                message: format!("in the interpreter: {message}"),
                reproducer: save_reproducer(program),
            })
        }
    }
}

/// Run the kernels of one call in order on the interpreter: `args` are the call's (the
/// parameters, then the sizes); the scratch buffers are made once (as the models start
/// them) and handed from kernel to kernel as extra tensor parameters.
fn run_in_order(kernels: &[Module], args: &mut Vec<tile_interp::Arg>) -> Result<(), tile_ir::Diagnostic> {
    let first = &kernels[0];
    let n_params = first.params.len();
    let (sized, _) = tile_interp::bind_sizes(first, args)?;
    let mut scratch: Vec<tile_interp::Arg> = sized
        .scratch
        .iter()
        .map(|&b| {
            let b = sized.buffer(b);
            tile_interp::Arg::Tensor(tile_interp::scratch_bytes(b.dtype, b.num_elements().max(0) as usize))
        })
        .collect();
    let n_scratch = scratch.len();
    for m in kernels {
        let sizes = args.split_off(n_params);
        args.append(&mut scratch);
        args.extend(sizes);
        let result = tile_interp::run(&m.clone().scratch_as_params(), args);
        let rest = args.split_off(n_params + n_scratch);
        scratch = args.split_off(n_params);
        args.extend(rest);
        result?;
    }
    Ok(())
}
