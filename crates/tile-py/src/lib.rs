//! The Python extension `tilers._tilers`: a few functions over the serialized program
//! (see `python/tilers/_tilers.pyi`). The GIL is released while compiling.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use tilers_cc::{CompileError as DriverError, CompileOptions};

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
        let opts = CompileOptions::from_json(&options)?;
        tilers_cc::compile(&program, &opts)
    });
    let c = result.map_err(to_py)?;
    Ok((c.source, c.info))
}

/// dump_ir(program_json, options_json) -> [(pass_name, ir_text)], the IR after every pass.
#[pyfunction]
fn dump_ir(py: Python<'_>, program: String, options: String) -> PyResult<Vec<(String, String)>> {
    let result = py.allow_threads(move || {
        let opts = CompileOptions::from_json(&options)?;
        let mut dumps = Vec::new();
        tilers_cc::compile_with(&program, &opts, &mut |pass, text| {
            dumps.push((pass.to_string(), text.to_string()))
        })?;
        Ok(dumps)
    });
    result.map_err(to_py)
}

/// pass_names() -> [str], the lowering pipeline in order.
#[pyfunction]
fn pass_names() -> Vec<&'static str> {
    tile_passes::pass_names()
}

#[pymodule]
fn _tilers(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(dump_ir, m)?)?;
    m.add_function(wrap_pyfunction!(pass_names, m)?)?;
    m.add("CompileError", m.py().get_type::<CompileError>())?;
    m.add("InternalCompilerError", m.py().get_type::<InternalCompilerError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
