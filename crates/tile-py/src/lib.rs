//! The Python extension `tilers._tilers`: a few functions over the serialized program
//! (see `python/tilers/_tilers.pyi`). The GIL is released while compiling.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tile_interp::Arg;
use tilers_cc::{on_deep_stack, CompileError as DriverError, CompileOptions};

mod launch;
mod launcher;
mod tensor_map;
mod torch_shim;

create_exception!(
    _tilers,
    CompileError,
    PyException,
    "A kernel that does not compile; the message names the user's line."
);
create_exception!(
    _tilers,
    InternalCompilerError,
    CompileError,
    "A bug in tilers; the message says where the reproducer was saved."
);

/// Run `work` (an interpreter run) on a deep-stack thread while this thread, holding the
/// GIL only between waits, checks for Python signals every 50 ms: Ctrl-C during a long or
/// endless interpreted kernel sets `tile_interp::STOP`, the run stops at its next statement,
/// and the signal's exception (KeyboardInterrupt) is raised here.
fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    use std::time::Duration;
    let (send, receive) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("tilers-interpret".into())
        .stack_size(tilers_cc::DEEP_STACK_BYTES)
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = send.send(result);
        });
    let Ok(handle) = spawned else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err("could not start the interpreter's thread"));
    };
    let mut pending: Option<PyErr> = None;
    let mut receive = receive;
    loop {
        let (got, back) = py.allow_threads(move || {
            let got = receive.recv_timeout(Duration::from_millis(50));
            (got, receive)
        });
        receive = back;
        match got {
            Ok(result) => {
                let _ = handle.join();
                if pending.is_some() {
                    tile_interp::STOP.store(false, Ordering::Relaxed);
                }
                if let Some(e) = pending {
                    return Err(e);
                }
                return result.map_err(|panic| {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic".into());
                    InternalCompilerError::new_err(format!("internal error in the interpreter: {message}"))
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if pending.is_none() {
                    if let Err(e) = py.check_signals() {
                        tile_interp::STOP.store(true, Ordering::Relaxed);
                        pending = Some(e);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = handle.join();
                tile_interp::STOP.store(false, Ordering::Relaxed);
                return Err(pending.unwrap_or_else(|| {
                    InternalCompilerError::new_err("the interpreter's thread ended without a result")
                }));
            }
        }
    }
}

fn to_py(e: DriverError) -> PyErr {
    match e {
        DriverError::Internal { .. } => InternalCompilerError::new_err(e.to_string()),
        _ => CompileError::new_err(e.to_string()),
    }
}

/// compile(program_json, options_json) -> (cuda_source, kernel_info_json)
#[pyfunction]
fn compile(py: Python<'_>, program: String, options: String) -> PyResult<(String, String)> {
    let result = py.allow_threads(move || {
        on_deep_stack(move || {
            let opts = CompileOptions::from_json(&options)?;
            tilers_cc::compile(&program, &opts)
        })
    });
    let c = result.map_err(to_py)?;
    Ok((c.source, c.info))
}

/// inspect(program_json, options_json) -> (cuda_source, ir, layouts_json): compile as
/// `compile` does with these options and return what `kernel.ir()` and `kernel.layouts()`
/// show: the text IR after every pass (`[(pass_name, ir_text)]`, with `"keep_ir": true` in
/// the options, else None) and where the lowered kernel keeps each on-chip buffer (per
/// fragment its layout digits, `tile_ir::FragmentLayout`; per shared buffer its byte
/// offset and whether it is swizzled). The source lets the caller check that this is the
/// kernel it compiled.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn inspect(
    py: Python<'_>,
    program: String,
    options: String,
) -> PyResult<(String, Option<Vec<(String, String)>>, String)> {
    let result = py.allow_threads(move || {
        on_deep_stack(move || {
            let opts = CompileOptions::from_json(&options)?;
            let compiled = tilers_cc::compile(&program, &opts)?;
            let ir = opts.keep_ir.then_some(compiled.ir);
            Ok((compiled.source, ir, kernel_layouts(&compiled.modules).to_string()))
        })
    });
    result.map_err(to_py)
}

/// interpret(program_json, args, options_json) -> [bytes | None]: run the program on host
/// data with the reference interpreter. `args` follow the kernel's parameters: `bytes`
/// (a tensor's contents, row-major) or int / float (scalars). Returns each tensor's new
/// contents (None for scalars).
#[pyfunction]
fn interpret(
    py: Python<'_>,
    program: String,
    args: Vec<Bound<'_, PyAny>>,
    options: String,
) -> PyResult<Vec<Option<PyObject>>> {
    let _ = options; // reserved: interpreter options (e.g. checking modes) go here
    let mut converted = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        if let Ok(b) = a.downcast::<PyBytes>() {
            converted.push(Arg::Tensor(b.as_bytes().to_vec()));
        } else if let Ok(v) = a.extract::<i64>() {
            converted.push(Arg::Int(v));
        } else if let Ok(v) = a.extract::<u64>() {
            converted.push(Arg::UInt(v));
        } else if let Ok(v) = a.extract::<f64>() {
            converted.push(Arg::Float(v));
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "interpret: argument {i} must be bytes, int or float"
            )));
        }
    }
    let result = interruptible(py, move || tilers_cc::interpret(&program, converted))?;
    let out = result.map_err(to_py)?;
    Ok(out
        .into_iter()
        .map(|a| match a {
            Arg::Tensor(bytes) => Some(PyBytes::new(py, &bytes).into_any().unbind()),
            _ => None,
        })
        .collect())
}

/// check(program_json) -> kernel_info_json: verify without generating code (interpreter).
#[pyfunction]
fn check(py: Python<'_>, program: String) -> PyResult<String> {
    py.allow_threads(move || on_deep_stack(move || tilers_cc::check(&program))).map_err(to_py)
}

/// The on-chip buffers of every kernel of the call (in a program of several kernels, each
/// entry says its kernel's number in `kernel`).
fn kernel_layouts(modules: &[tile_ir::Module]) -> serde_json::Value {
    let mut all = buffer_layouts(&modules[0]);
    if modules.len() > 1 {
        let mut buffers = Vec::new();
        for (k, m) in modules.iter().enumerate() {
            for mut entry in buffer_layouts(m)["buffers"].as_array().cloned().unwrap_or_default() {
                entry["kernel"] = serde_json::json!(k);
                buffers.push(entry);
            }
        }
        all["buffers"] = serde_json::json!(buffers);
    }
    all
}

fn buffer_layouts(m: &tile_ir::Module) -> serde_json::Value {
    use serde_json::json;
    use tile_ir::{Scope, Source};
    let mut buffers = Vec::new();
    for b in &m.buffers {
        // a symbolic size by its name
        let shape: Vec<serde_json::Value> = b
            .shape
            .iter()
            .map(|d| match d {
                tile_ir::Dim::Fixed(n) => json!(n),
                tile_ir::Dim::Size(v) => json!(m.var(*v).name),
            })
            .collect();
        let mut entry = json!({
            "name": b.name,
            "scope": b.scope.name(),
            "dtype": b.dtype.name(),
            "shape": shape,
            "source": m.sources.short(b.loc),
        });
        match (b.scope, &b.layout) {
            // lowering turns fragments into per-thread register arrays; the layout stays
            (_, Some(l)) => {
                entry["scope"] = json!("fragment");
                entry["shape"] = json!(l.extents);
                let dims: Vec<Vec<serde_json::Value>> = l
                    .dims
                    .iter()
                    .map(|digits| {
                        digits
                            .iter()
                            .map(|g| match g.source {
                                Source::Thread(stride) => {
                                    json!({"size": g.size, "step": g.step, "thread": stride})
                                }
                                Source::Slot(stride) => {
                                    json!({"size": g.size, "step": g.step, "slot": stride})
                                }
                            })
                            .collect()
                    })
                    .collect();
                entry["layout"] = json!({
                    "extents": l.extents,
                    "dims": dims,
                    "replicated": l.replicated,
                    "active_threads": l.active_threads,
                    "slots": l.slots(),
                    "text": l.to_string(),
                });
            }
            (Scope::Shared, _) => {
                // the swizzle functor of the tile's byte offsets (tile_ir::Swizzle), or null
                entry["swizzle"] = match b.swizzle {
                    Some(s) => {
                        json!({"bits": s.bits, "base": s.base, "shift": s.shift, "text": s.to_string()})
                    }
                    None => json!(null),
                };
                entry["layout_text"] = json!(tile_ir::SharedLayout::of(b).to_string());
                entry["offset"] = json!(b.shared_offset);
                entry["bytes"] = json!(b.bytes());
            }
            _ => continue,
        }
        buffers.push(entry);
    }
    json!({"threads": m.kernel.threads, "buffers": buffers})
}

/// check_passes(program_json, options_json) -> JSON: the program after every pass run on
/// the same seeded random inputs and compared with the tile-level reference (see
/// `tilers_cc::passcheck`). Options: `{"arch": "sm_80", "seed": 0, "blocks": "edges"|"all"}`.
#[pyfunction]
fn check_passes(py: Python<'_>, program: String, options: String) -> PyResult<String> {
    let result = interruptible(py, move || -> Result<String, DriverError> {
        let opts = tilers_cc::passcheck::CheckOptions::from_json(&options)?;
        let r = tilers_cc::passcheck::check_passes(&program, &opts)?;
        Ok(r.to_json(&opts).to_string())
    })?;
    result.map_err(to_py)
}

/// pass_names() -> [str], the lowering pipeline in order.
#[pyfunction]
fn pass_names() -> Vec<&'static str> {
    tile_passes::pass_names()
}

/// export_c(info_json, cubin, name) -> (header, source): the C launcher of a compiled kernel
/// (`tilers_<name>.h`, `tilers_<name>.c`; docs/export.md). ValueError: why it cannot be
/// exported.
#[pyfunction]
fn export_c(info_json: &str, cubin: &[u8], name: &str) -> PyResult<(String, String)> {
    let info: tile_codegen::KernelInfo = serde_json::from_str(info_json)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("not a KernelInfo ({e})")))?;
    let exported =
        tilers_cc::export::export_c(&info, cubin, name).map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok((exported.header, exported.source))
}

/// export_dispatcher(name, members) -> (header, source): a C dispatcher over exported
/// kernels; `members` are (export name, KernelInfo JSON, conditions such as "M=1..128").
#[pyfunction]
fn export_dispatcher(name: &str, members: Vec<(String, String, Vec<String>)>) -> PyResult<(String, String)> {
    let bad = pyo3::exceptions::PyValueError::new_err;
    let mut parsed = Vec::with_capacity(members.len());
    for (member, info_json, conditions) in members {
        let info = serde_json::from_str(&info_json)
            .map_err(|e| bad(format!("specialization '{member}': not a KernelInfo ({e})")))?;
        let when = conditions
            .iter()
            .map(|c| tilers_cc::export::Condition::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        parsed.push(tilers_cc::export::Member { name: member, info, when });
    }
    let exported = tilers_cc::export::export_dispatcher(name, &parsed).map_err(bad)?;
    Ok((exported.header, exported.source))
}

/// cc_main(args) -> int: run the `tilers-cc` command line (without the program name) and
/// return its exit code; the Python package's `tilers-cc` entry point. The GIL is released.
#[pyfunction]
fn cc_main(py: Python<'_>, args: Vec<String>) -> u8 {
    py.allow_threads(move || on_deep_stack(move || tilers_cc::cli::run(&args)))
}

#[pymodule]
fn _tilers(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(pass_names, m)?)?;
    m.add_function(wrap_pyfunction!(interpret, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(check_passes, m)?)?;
    m.add_function(wrap_pyfunction!(export_c, m)?)?;
    m.add_function(wrap_pyfunction!(export_dispatcher, m)?)?;
    m.add_function(wrap_pyfunction!(cc_main, m)?)?;
    m.add_function(wrap_pyfunction!(launch::driver_status, m)?)?;
    m.add_function(wrap_pyfunction!(launch::driver_version, m)?)?;
    m.add_function(wrap_pyfunction!(launch::device_attribute, m)?)?;
    m.add_function(wrap_pyfunction!(launch::device_name, m)?)?;
    m.add_function(wrap_pyfunction!(launch::load_function, m)?)?;
    m.add_function(wrap_pyfunction!(launch::launch, m)?)?;
    m.add_function(wrap_pyfunction!(launch::set_dependent_launch, m)?)?;
    m.add_function(wrap_pyfunction!(torch_shim::load_torch_shim, m)?)?;
    m.add_function(wrap_pyfunction!(torch_shim::tensor_codes, m)?)?;
    m.add_class::<launcher::Launcher>()?;
    m.add("CompileError", m.py().get_type::<CompileError>())?;
    m.add("InternalCompilerError", m.py().get_type::<InternalCompilerError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
