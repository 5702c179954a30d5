//! The reference interpreter: runs a verified tile-level module on host memory, with the
//! meaning the GPU lowering (`tile_passes::lower_tile_ops`) gives it.
//!
//! **Execution.** The grid is evaluated from the scalar parameters; blocks run one after
//! another, `bx` fastest, then `by`, then `bz`, each with fresh zeroed shared, fragment and
//! local buffers. Statements outside `parallel` loops run once per block. A `parallel` loop
//! runs every index tuple of its extents; it is evaluated *a statement at a time over all
//! its iterations*: each expression yields a column of values (one per iteration), `if`
//! and `select` split the iterations, stores and atomics scatter element by element in
//! iteration order. A serial loop inside it whose bounds are the same for every iteration
//! loops over that vectorised body; one whose bounds differ runs one iteration at a time.
//! A body that writes a `local` buffer (a per-thread temporary) runs one iteration at a
//! time, so each iteration sees its own writes.
//!
//! **Memory.** Reads past a global tensor's edge give the load's `oob` value (the copy's
//! `pad`) or zero; writes past it are dropped (the GPU's guards). On-chip indices out of
//! range are errors at the user's statement.
//!
//! **Numbers** (`num.rs`). Every operation rounds to its node's dtype: fp16/bf16 results
//! are rounded through float32 (as the generated code converts), float32 after every op,
//! integers wrap to their width; float → int truncates and saturates (NaN → 0);
//! `floordiv`/`floormod` round toward −∞ (integer division by zero is an error; on floats
//! they are `floor(a / b)` and `a - floor(a / b) * b` in the C type); float `max`/`min`
//! return the other operand of a NaN; shift counts are masked to 31 (63 for 64-bit types), like
//! the GPU's shifts of promoted 32-bit ints; `and`/`or`/`select` evaluate only the operands
//! C would. Math functions are computed in f64 and rounded; `erf` is `libm`'s. Reductions
//! fold in index order from the identity, accumulating fp16/bf16 in float32. `gemm` sums
//! exact products over K in order, rounding to C's dtype after each addition.
//!
//! **Choices the lowering leaves open.** A `parallel` body's `if` runs its `then` branch
//! for all iterations that take it, then its `else` branch; iterations that communicate
//! through memory inside one loop race on the GPU and get this order here. A `local`
//! buffer read after the `parallel` loop that wrote it holds the last iteration's value.
//! fp16/bf16 conversions from float64 go through float32 (as the generated code's
//! `(float)` casts do). A float scalar parameter accepts [`Arg::Int`]; an integer one must
//! fit its dtype (a uint64 one from 2^63 up comes as [`Arg::UInt`]).
//!
//! **Speed** (release build, one core, `tests/programs.rs`): the fp16 `add` over
//! 2048 × 2048 elements (512 blocks of 32 × 128) runs in about 0.4 s, the 1000 × 1000
//! `add_f16` fixture in about 0.09 s; a 128 × 128 × 1024 fp16 GEMM block in about 0.05 s.

mod exec;
mod memory;
mod num;
pub mod threads;

use memory::Data;
use num::Val;
use tile_ir::{size_max, DType, Diagnostic, Level, Loc, Module, Param, Scope, VarId, VarKind};

pub use num::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};

/// One kernel argument, in `Module::params` order.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A tensor's elements as raw little-endian bytes of its dtype, row-major, contiguous
    /// (len = numel * dtype bytes). Written in place.
    Tensor(Vec<u8>),
    Int(i64),
    /// An integer past `i64::MAX`: a uint64 scalar from 2^63 up.
    UInt(u64),
    Float(f64),
}

fn describe(a: &Arg) -> String {
    match a {
        Arg::Tensor(b) => format!("a tensor of {} bytes", b.len()),
        Arg::Int(v) => format!("the integer {v}"),
        Arg::UInt(v) => format!("the integer {v}"),
        Arg::Float(x) => format!("the float {x}"),
    }
}

/// The value of a scalar parameter of `dt`: integers must fit; a float parameter also
/// takes an integer (Python passes `2` for `2.0`).
fn scalar_arg(name: &str, dt: DType, a: &Arg) -> Result<Val, Diagnostic> {
    let bad = |what: String| Diagnostic::error(format!("argument '{name}': {what}"), Loc::UNKNOWN);
    let integer = match a {
        Arg::Int(v) => Some(*v as i128),
        Arg::UInt(v) => Some(*v as i128),
        _ => None,
    };
    match (integer, dt.int_range(), a) {
        (Some(v), Some((lo, hi)), _) => {
            if v < lo || v > hi {
                return Err(bad(format!("expected {dt}, got {v}, which does not fit")));
            }
            // held as the interpreter holds values of dt (a uint64 as its bit pattern)
            Ok(Val::I(v as i64))
        }
        (Some(v), None, _) if dt.is_float() => {
            // past i64::MAX, the integer is held as a uint64's bits
            let from = if v > i64::MAX as i128 { DType::U64 } else { DType::I64 };
            Ok(num::cast(Val::I(v as i64), from, dt))
        }
        (None, None, Arg::Float(x)) if dt.is_float() => Ok(num::cast(Val::F(*x), DType::F64, dt)),
        _ => Err(bad(format!("expected a scalar of {dt}, got {}", describe(a)))),
    }
}

/// A call's symbolic sizes: the kernel's parameters come first in `args`, then one integer
/// per [`Module::sizes`] (as the CUDA kernel takes them). Returns the module specialized to
/// those sizes ([`Module::with_sizes`]) and each size variable with its value; checks each
/// value is non-negative, fits the size's type and keeps its declared multiple.
pub fn bind_sizes(m: &Module, args: &[Arg]) -> Result<(Module, Vec<(VarId, i64)>), Diagnostic> {
    let sizes = m.sizes();
    if sizes.is_empty() {
        return Ok((m.clone(), Vec::new()));
    }
    let n = m.params.len();
    if args.len() != n + sizes.len() {
        let names: Vec<&str> = sizes.iter().map(|v| m.var(*v).name.as_str()).collect();
        return Err(Diagnostic::error(
            format!(
                "'{}' takes {} arguments and then its symbolic sizes ({}), got {} values in all",
                m.name,
                n,
                names.join(", "),
                args.len()
            ),
            Loc::UNKNOWN,
        ));
    }
    let mut values = Vec::new();
    for (v, a) in sizes.iter().zip(&args[n..]) {
        let var = m.var(*v);
        let bad = |what: String| Diagnostic::error(format!("size '{}': {what}", var.name), Loc::UNKNOWN);
        let x = match a {
            Arg::Int(x) => x,
            Arg::UInt(x) => return Err(bad(format!("{x} is not a size of {}", var.dtype))),
            _ => return Err(bad(format!("expected an integer, got {}", describe(a)))),
        };
        if *x < 0 || *x > size_max(var.dtype) {
            return Err(bad(format!("{x} is not a size of {} (0 to {})", var.dtype, size_max(var.dtype))));
        }
        if let VarKind::Size { multiple_of } = var.kind {
            if x % multiple_of != 0 {
                return Err(bad(format!("{x} is not a multiple of {multiple_of}, as T.dynamic promised")));
            }
        }
        values.push((*v, *x));
    }
    let spec = m.with_sizes(&values.iter().map(|(_, x)| *x).collect::<Vec<_>>());
    Ok((spec, values))
}

/// The bytes a scratch buffer (`T.alloc_global`) of `n` elements starts with in the models:
/// NaN for floats (whose contents start undefined on the GPU), 0 for other dtypes.
pub fn scratch_bytes(dt: DType, n: usize) -> Vec<u8> {
    let nan: &[u8] = match dt {
        DType::F16 => &0x7e00u16.to_le_bytes(),
        DType::BF16 => &0x7fc0u16.to_le_bytes(),
        DType::F32 => &0x7fc0_0000u32.to_le_bytes(),
        DType::F64 => &0x7ff8_0000_0000_0000u64.to_le_bytes(),
        _ => return vec![0; n * dt.bytes() as usize],
    };
    nan.repeat(n)
}

/// Run a verified, simplified tile-level module over the whole grid. `args` are the
/// kernel's parameters, then its symbolic sizes ([`bind_sizes`]).
///
/// Tensor arguments are updated in place, also when an error stops the run part way
/// (like a kernel that faults after some writes).
/// In the message of a run that stopped at a `T.barrier_wait` no earlier statement
/// completes: warp-role regions handing data over through mbarriers in loops of their own
/// run concurrently, which a program run one statement after another cannot do.
/// CUDA builtins a `T.call_extern` may name that change no value the program reads: the
/// interpreters run them as nothing.
pub const EXTERN_NO_EFFECT: &[&str] =
    &["__nanosleep", "__threadfence", "__threadfence_block", "__threadfence_system"];

/// Why a `T.call_extern` of `name` cannot run here.
pub fn extern_message(name: &str) -> String {
    format!(
        "T.call_extern('{name}') runs only on the GPU: the interpreter cannot run the CUDA code it calls (run the kernel on CUDA tensors)"
    )
}

/// Why a `T.make_tensor` over a loaded address cannot run here.
pub fn pointer_message(name: &str) -> String {
    format!(
        "'{name}' is a T.make_tensor over an address the kernel reads: it runs only on the GPU (the interpreter has no device memory)"
    )
}

pub const SEQUENTIAL_WAIT: &str = "would wait forever here";

/// Set by the embedder (the Python module, on Ctrl-C) to stop every interpreter run at its
/// next statement with [`INTERRUPTED`]; cleared by the embedder once the run has returned.
pub static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
pub const INTERRUPTED: &str = "interrupted (KeyboardInterrupt)";

pub(crate) fn check_stop() -> Result<(), Diagnostic> {
    if STOP.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Diagnostic::error(INTERRUPTED.to_string(), Loc::UNKNOWN));
    }
    Ok(())
}

pub fn run(m: &Module, args: &mut [Arg]) -> Result<(), Diagnostic> {
    if let Some(b) = m.buffers.iter().enumerate().find(|(i, _)| m.is_pointer(tile_ir::BufferId(*i as u32))) {
        return Err(Diagnostic::error(pointer_message(&b.1.name), b.1.loc));
    }
    let (spec, sizes) = bind_sizes(m, args)?;
    let m = &spec;
    // the sizes follow the parameters (bind_sizes counted them)
    let n = if sizes.is_empty() { args.len() } else { m.params.len() };
    let args = &mut args[..n];
    if args.len() != m.params.len() {
        let names: Vec<&str> = m.params.iter().map(|p| p.name()).collect();
        return Err(Diagnostic::error(
            format!(
                "'{}' takes {} arguments ({}), got {}",
                m.name,
                m.params.len(),
                names.join(", "),
                args.len()
            ),
            Loc::UNKNOWN,
        ));
    }
    let mut mem: Vec<Data> =
        m.buffers.iter().map(|b| Data::zeros(b.dtype, b.num_elements().max(0) as usize)).collect();
    let mut env: Vec<Option<Val>> = vec![None; m.vars.len()];
    for (v, x) in &sizes {
        env[v.0 as usize] = Some(Val::I(*x));
    }
    let mut bound = vec![false; m.buffers.len()];
    for (p, a) in m.params.iter().zip(args.iter()) {
        match p {
            Param::Tensor { name, buffer } => {
                let b = m.buffer(*buffer);
                let want = b.num_elements().max(0) as usize * b.dtype.bytes() as usize;
                match a {
                    Arg::Tensor(bytes) if bytes.len() == want => {
                        mem[buffer.0 as usize] = Data::from_bytes(b.dtype, bytes);
                        bound[buffer.0 as usize] = true;
                    }
                    other => {
                        return Err(Diagnostic::error(
                            format!(
                            "argument '{name}': expected a {} tensor of shape {:?} ({want} bytes), got {}",
                            b.dtype,
                            b.extents(),
                            describe(other)
                        ),
                            Loc::UNKNOWN,
                        ))
                    }
                }
            }
            Param::Scalar { name, var } => {
                env[var.0 as usize] = Some(scalar_arg(name, m.var(*var).dtype, a)?);
            }
        }
    }
    // scratch (`T.alloc_global`) starts undefined on the GPU; here floats start as NaN, so a
    // kernel that reads what it did not write shows it
    for &id in &m.scratch {
        let b = m.buffer(id);
        mem[id.0 as usize] =
            Data::from_bytes(b.dtype, &scratch_bytes(b.dtype, b.num_elements().max(0) as usize));
        bound[id.0 as usize] = true;
    }
    if let Some(b) = m.buffers.iter().zip(&bound).find(|(b, bound)| b.scope == Scope::Global && !**bound) {
        return Err(Diagnostic::error(
            format!("global buffer '{}' is not a parameter of the kernel", b.0.name),
            b.0.loc,
        ));
    }
    if m.level != Level::Tile {
        return Err(Diagnostic::error(
            "the interpreter runs tile-level programs; this module is already lowered to threads",
            Loc::UNKNOWN,
        ));
    }
    // the thread index selects the kernel's own warp-role regions (`T.ws`) and is read by
    // statements that run per thread (`tile_ir::per_thread`)
    // (the compiler's own role split, `roles`, is thread level)
    let roles = m.kernel.roles.is_some();
    if let Some(v) =
        m.vars.iter().find(|v| v.kind == VarKind::Temp || (v.kind == VarKind::ThreadIdx && roles))
    {
        return Err(Diagnostic::error(
            format!("the interpreter runs tile-level programs; '{}' is a thread-level variable", v.name),
            Loc::UNKNOWN,
        ));
    }
    let mut interp = exec::Interp::new(m, mem, env);
    let result = interp.run_grid();
    for (p, a) in m.params.iter().zip(args.iter_mut()) {
        if let (Param::Tensor { buffer, .. }, Arg::Tensor(bytes)) = (p, a) {
            interp.mem[buffer.0 as usize].write_bytes(bytes);
        }
    }
    result
}
