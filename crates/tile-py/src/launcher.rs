//! `Launcher`: a prepared kernel's whole per-call path in one native call.
//!
//! `kernel(*args)` is `launcher(*args)` once the launcher exists (`JITKernel.__call__`).
//! It checks each argument as the Python checks do (exact tensor type, CUDA, dtype, shape,
//! strides, alignment, one device; scalar types and ranges), reads the pointers through
//! torch's C shim (`torch_shim.rs`), allocates the `out_idx` outputs, evaluates the grid,
//! gets torch's current stream and calls `cuLaunchKernel`. It decides nothing it is
//! unsure of: for any argument it does not accept, before anything is allocated or
//! launched, it passes the call on to `JITKernel._call_checked`, whose Python checks raise
//! the detailed error (or accept what this path does not cover: host arrays, tensor
//! subclasses, strides that differ only along extent-1 dimensions, numpy scalars, a
//! device not loaded yet).

use crate::launch::{driver, run, Driver, Launch, STACK_ARGS};
use crate::torch_shim::{shim, TorchShim};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyTuple};
use serde_json::Value;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::OnceLock;

/// CUDA's grid limits (runtime.MAX_GRID_X, MAX_GRID_YZ).
const MAX_GRID: [i64; 3] = [(1 << 31) - 1, 65535, 65535];
const FLOAT32_MAX: f64 = f32::MAX as f64;

/// What a tensor argument must be; `dtype` is torch's ScalarType number (`tensor_codes`).
struct TensorSpec {
    dtype: i32,
    shape: Vec<i64>,
    strides: Vec<i64>,
    align: u64,
}

enum Param {
    Tensor(TensorSpec),
    /// `kind` is the packing letter of `_tilers.launch` (`?`, `b`, `B`, `h`, `i`, `I`, `q`, `f`, `d`).
    Scalar {
        kind: u8,
    },
}

#[derive(Clone, Copy)]
enum GridOp {
    Add,
    Sub,
    Mul,
    FloorDiv,
    CeilDiv,
    Min,
    Max,
}

/// A grid expression of KernelInfo (docs/format.md) over integer scalar parameters.
enum GridExpr {
    Const(i64),
    Param(usize),
    Op(GridOp, Box<GridExpr>, Box<GridExpr>),
}

struct Output {
    param: usize,
    shape: Py<PyTuple>,
    strides: Py<PyTuple>,
    dtype: PyObject,
}

/// Launcher(spec_json, output_dtypes, empty_strided, stream_getter, fallback, dry_run=False)
///
/// `spec_json`: {"params": [{"kind": "tensor", "dtype_code", "shape", "strides", "align"} |
/// {"kind": "scalar", "pack": letter}], "inputs": [param index per call argument],
/// "outputs": [param index per output], "grid": [3 gexprs], "block": [x, y, z],
/// "shared_bytes", "device_type": torch's CUDA DeviceType number, "devices": device count}.
/// `output_dtypes`: the torch dtype of each output; `empty_strided`: torch.empty_strided;
/// `stream_getter(device)`: torch's raw current stream, used when the shim has none.
/// `fallback`: a `weakref.WeakMethod` of the Python path, called with the arguments the
/// launcher declines (weak: the kernel holds the launcher).
/// `dry_run` does everything but ask for the stream and call cuLaunchKernel (benchmarks
/// of the CPU side without a GPU). Functions are added per device with `add_device`.
#[pyclass(module = "tilers._tilers", frozen)]
pub struct Launcher {
    params: Vec<Param>,
    inputs: Vec<usize>,
    outputs: Vec<Output>,
    grid: [GridExpr; 3],
    block: (u32, u32, u32),
    shared_bytes: u32,
    device_type: i32,
    /// (function, context) per device ordinal, once loaded there.
    functions: Vec<OnceLock<(usize, usize)>>,
    empty_strided: PyObject,
    stream_getter: PyObject,
    fallback: PyObject,
    driver: Option<&'static Driver>,
}

fn spec_error(what: &str) -> PyErr {
    PyValueError::new_err(format!("Launcher: bad spec ({what})"))
}

fn int_list(value: &Value, what: &str) -> PyResult<Vec<i64>> {
    value
        .as_array()
        .ok_or_else(|| spec_error(what))?
        .iter()
        .map(|v| v.as_i64().ok_or_else(|| spec_error(what)))
        .collect()
}

fn parse_param(value: &Value) -> PyResult<Param> {
    let field = |name: &str| value.get(name).ok_or_else(|| spec_error(name));
    match value.get("kind").and_then(Value::as_str) {
        Some("tensor") => Ok(Param::Tensor(TensorSpec {
            dtype: field("dtype_code")?.as_i64().ok_or_else(|| spec_error("dtype_code"))? as i32,
            shape: int_list(field("shape")?, "shape")?,
            strides: int_list(field("strides")?, "strides")?,
            align: field("align")?.as_u64().filter(|&a| a > 0).ok_or_else(|| spec_error("align"))?,
        })),
        Some("scalar") => {
            let pack = field("pack")?.as_str().ok_or_else(|| spec_error("pack"))?;
            match pack.as_bytes() {
                [kind @ (b'?' | b'b' | b'B' | b'h' | b'i' | b'I' | b'q' | b'f' | b'd')] => {
                    Ok(Param::Scalar { kind: *kind })
                }
                _ => Err(spec_error("pack")),
            }
        }
        _ => Err(spec_error("kind")),
    }
}

fn parse_grid(value: &Value, params: &[Param]) -> PyResult<GridExpr> {
    if let Some(constant) = value.get("const") {
        return Ok(GridExpr::Const(constant.as_i64().ok_or_else(|| spec_error("grid const"))?));
    }
    if let Some(param) = value.get("param") {
        let index = param.as_u64().ok_or_else(|| spec_error("grid param"))? as usize;
        return match params.get(index) {
            Some(Param::Scalar { kind }) if !matches!(kind, b'f' | b'd') => Ok(GridExpr::Param(index)),
            _ => Err(PyValueError::new_err(format!(
                "Launcher: the grid reads parameter {index}, which is not an integer scalar"
            ))),
        };
    }
    let op = match value.get("op").and_then(Value::as_str) {
        Some("add") => GridOp::Add,
        Some("sub") => GridOp::Sub,
        Some("mul") => GridOp::Mul,
        Some("floordiv") => GridOp::FloorDiv,
        Some("ceildiv") => GridOp::CeilDiv,
        Some("min") => GridOp::Min,
        Some("max") => GridOp::Max,
        _ => return Err(spec_error("grid op")),
    };
    let operand = |name: &str| parse_grid(value.get(name).ok_or_else(|| spec_error("grid operand"))?, params);
    Ok(GridExpr::Op(op, Box::new(operand("a")?), Box::new(operand("b")?)))
}

/// Python's `a // b` (rounding towards negative infinity); None where Python raises or
/// the value leaves i64 (Python then computes it and reports the error).
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let quotient = a.checked_div(b)?;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        quotient.checked_sub(1)
    } else {
        Some(quotient)
    }
}

impl GridExpr {
    /// The value over the call's packed slots (integer scalars hold their i64 bits).
    fn eval(&self, slots: &[u64]) -> Option<i64> {
        match self {
            GridExpr::Const(value) => Some(*value),
            GridExpr::Param(index) => Some(slots[*index] as i64),
            GridExpr::Op(op, a, b) => {
                let (a, b) = (a.eval(slots)?, b.eval(slots)?);
                match op {
                    GridOp::Add => a.checked_add(b),
                    GridOp::Sub => a.checked_sub(b),
                    GridOp::Mul => a.checked_mul(b),
                    GridOp::FloorDiv => floor_div(a, b),
                    GridOp::CeilDiv => floor_div(a.checked_neg()?, b)?.checked_neg(),
                    GridOp::Min => Some(a.min(b)),
                    GridOp::Max => Some(a.max(b)),
                }
            }
        }
    }
}

/// The slot of a scalar argument, or None when Python must check it: only exact bools,
/// ints and floats are taken here (an int param accepts a bool or a numpy integer in
/// Python; those go there).
fn scalar_slot(arg: &Bound<'_, PyAny>, kind: u8) -> Option<u64> {
    match kind {
        b'?' => arg.downcast_exact::<PyBool>().ok().map(|b| b.is_true() as u64),
        b'f' | b'd' => {
            let value = if let Ok(float) = arg.downcast_exact::<PyFloat>() {
                float.value()
            } else if arg.is_exact_instance_of::<PyInt>() {
                arg.extract::<f64>().ok()?
            } else {
                return None;
            };
            if kind == b'd' {
                return Some(value.to_bits());
            }
            if value.is_finite() && value.abs() > FLOAT32_MAX {
                return None;
            }
            Some((value as f32).to_bits() as u64)
        }
        _ => {
            if !arg.is_exact_instance_of::<PyInt>() {
                return None;
            }
            let value = arg.extract::<i64>().ok()?;
            let (low, high) = match kind {
                b'b' => (i8::MIN as i64, i8::MAX as i64),
                b'B' => (0, u8::MAX as i64),
                b'h' => (i16::MIN as i64, i16::MAX as i64),
                b'i' => (i32::MIN as i64, i32::MAX as i64),
                b'I' => (0, u32::MAX as i64),
                _ => (i64::MIN, i64::MAX),
            };
            // Little-endian: the low bytes of the i64 are the narrow value's bytes.
            (low..=high).contains(&value).then_some(value as u64)
        }
    }
}

impl Launcher {
    /// Check one tensor argument against its parameter; its data pointer if it passes.
    #[inline]
    fn tensor_slot(
        &self,
        shim: &TorchShim,
        arg: &Bound<'_, PyAny>,
        spec: &TensorSpec,
        device: &mut i32,
    ) -> Option<u64> {
        if !shim.is_plain_tensor(arg) {
            return None;
        }
        let fields = shim.fields(arg)?;
        // a stride along an extent of 1 is never used, so it may be anything (as in Python)
        let strides_match = fields.strides.len() == spec.strides.len()
            && fields
                .strides
                .iter()
                .zip(&spec.strides)
                .zip(&spec.shape)
                .all(|((got, want), extent)| got == want || *extent == 1);
        if fields.dtype != spec.dtype
            || fields.device_type != self.device_type
            || fields.sizes != spec.shape
            || !strides_match
            || fields.data % spec.align != 0
        {
            return None;
        }
        if *device < 0 {
            *device = fields.device_index;
        } else if fields.device_index != *device {
            return None;
        }
        Some(fields.data)
    }

    fn grid(&self, slots: &[u64]) -> Option<(u32, u32, u32)> {
        let mut dims = [0u32; 3];
        for ((dim, expr), limit) in dims.iter_mut().zip(&self.grid).zip(MAX_GRID) {
            let value = expr.eval(slots)?;
            if !(1..=limit).contains(&value) {
                return None;
            }
            *dim = value as u32;
        }
        Some((dims[0], dims[1], dims[2]))
    }

    /// Allocate the outputs on `device`; their pointers go into `slots`.
    fn allocate(
        &self,
        py: Python<'_>,
        shim: &TorchShim,
        device: i32,
        slots: &mut [u64],
    ) -> PyResult<Vec<PyObject>> {
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for output in &self.outputs {
            let kwargs = PyDict::new(py);
            kwargs.set_item(pyo3::intern!(py, "dtype"), output.dtype.bind(py))?;
            kwargs.set_item(pyo3::intern!(py, "device"), device)?;
            let tensor = self
                .empty_strided
                .bind(py)
                .call((output.shape.bind(py), output.strides.bind(py)), Some(&kwargs))?;
            let fields =
                shim.is_plain_tensor(&tensor).then(|| shim.fields(&tensor)).flatten().ok_or_else(|| {
                    PyRuntimeError::new_err("torch.empty_strided returned a tensor the launcher cannot read")
                })?;
            slots[output.param] = fields.data;
            outputs.push(tensor.unbind());
        }
        Ok(outputs)
    }

    fn stream(&self, py: Python<'_>, shim: &TorchShim, device: i32) -> PyResult<usize> {
        match shim.current_stream(device) {
            Some(stream) => Ok(stream),
            None => self.stream_getter.bind(py).call1((device,))?.extract(),
        }
    }
}

#[pymethods]
impl Launcher {
    #[new]
    #[pyo3(signature = (spec_json, output_dtypes, empty_strided, stream_getter, fallback, dry_run=false))]
    fn new(
        py: Python<'_>,
        spec_json: &str,
        output_dtypes: Vec<PyObject>,
        empty_strided: PyObject,
        stream_getter: PyObject,
        fallback: PyObject,
        dry_run: bool,
    ) -> PyResult<Self> {
        let spec: Value = serde_json::from_str(spec_json).map_err(|e| spec_error(&e.to_string()))?;
        let field = |name: &str| spec.get(name).ok_or_else(|| spec_error(name));
        let params = field("params")?
            .as_array()
            .ok_or_else(|| spec_error("params"))?
            .iter()
            .map(parse_param)
            .collect::<PyResult<Vec<_>>>()?;
        let index_list = |name: &str| -> PyResult<Vec<usize>> {
            let list = int_list(field(name)?, name)?;
            list.into_iter()
                .map(|i| {
                    usize::try_from(i).ok().filter(|&i| i < params.len()).ok_or_else(|| spec_error(name))
                })
                .collect()
        };
        let inputs = index_list("inputs")?;
        let output_params = index_list("outputs")?;
        if output_params.len() != output_dtypes.len() {
            return Err(spec_error("one dtype per output"));
        }
        if params.len() > STACK_ARGS {
            return Err(PyValueError::new_err(format!("Launcher: more than {STACK_ARGS} parameters")));
        }
        if !inputs.iter().any(|&i| matches!(params[i], Param::Tensor(_))) {
            // the device comes from the tensors; with none, Python asks torch for it
            return Err(PyValueError::new_err("Launcher: the kernel takes no tensor argument"));
        }
        let mut outputs = Vec::new();
        for (param, dtype) in output_params.into_iter().zip(output_dtypes) {
            let Param::Tensor(TensorSpec { shape, strides, .. }) = &params[param] else {
                return Err(spec_error("an output that is not a tensor"));
            };
            outputs.push(Output {
                param,
                shape: PyTuple::new(py, shape)?.unbind(),
                strides: PyTuple::new(py, strides)?.unbind(),
                dtype,
            });
        }
        let grid_list =
            field("grid")?.as_array().filter(|g| g.len() == 3).ok_or_else(|| spec_error("grid"))?;
        let grid = [
            parse_grid(&grid_list[0], &params)?,
            parse_grid(&grid_list[1], &params)?,
            parse_grid(&grid_list[2], &params)?,
        ];
        let block = int_list(field("block")?, "block")?;
        let block = match block.as_slice() {
            [x, y, z] => (*x as u32, *y as u32, *z as u32),
            _ => return Err(spec_error("block")),
        };
        let devices = field("devices")?.as_u64().ok_or_else(|| spec_error("devices"))? as usize;
        Ok(Launcher {
            params,
            inputs,
            outputs,
            grid,
            block,
            shared_bytes: field("shared_bytes")?.as_u64().ok_or_else(|| spec_error("shared_bytes"))? as u32,
            device_type: field("device_type")?.as_i64().ok_or_else(|| spec_error("device_type"))? as i32,
            functions: (0..devices).map(|_| OnceLock::new()).collect(),
            empty_strided,
            stream_getter,
            fallback,
            driver: if dry_run { None } else { Some(driver()?) },
        })
    }

    /// add_device(device, function, context): the kernel as loaded on `device`.
    fn add_device(&self, device: usize, function: usize, context: usize) -> PyResult<()> {
        let slot = self
            .functions
            .get(device)
            .ok_or_else(|| PyValueError::new_err(format!("Launcher: no device {device}")))?;
        let _ = slot.set((function, context));
        Ok(())
    }

    /// launcher(*args): launch and return the outputs (None, one tensor or a tuple), or
    /// what the Python path returns for arguments the launcher declines.
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyObject> {
        let decline = || -> PyResult<PyObject> {
            let method = self.fallback.bind(py).call0()?;
            if method.is_none() {
                return Err(PyRuntimeError::new_err("the kernel of this launcher was deleted"));
            }
            Ok(method.call(args, kwargs)?.unbind())
        };
        let Some(shim) = shim() else { return decline() };
        if args.len() != self.inputs.len() || kwargs.is_some_and(|k| !k.is_empty()) {
            return decline();
        }
        let mut slots = [0u64; STACK_ARGS];
        let mut device = -1;
        for (arg, &param) in args.iter().zip(&self.inputs) {
            let slot = match &self.params[param] {
                Param::Tensor(spec) => self.tensor_slot(shim, &arg, spec, &mut device),
                Param::Scalar { kind } => scalar_slot(&arg, *kind),
            };
            match slot {
                Some(slot) => slots[param] = slot,
                None => return decline(),
            }
        }
        if self.driver.is_none() {
            // dry run: the benchmarks' CPU tensors are on device -1
            device = device.max(0);
        }
        let Some(&(function, context)) =
            usize::try_from(device).ok().and_then(|d| self.functions.get(d)).and_then(OnceLock::get)
        else {
            return decline();
        };
        let Some(grid) = self.grid(&slots) else { return decline() };

        let outputs = self.allocate(py, shim, device, &mut slots)?;
        let count = self.params.len();
        let mut pointers = [null_mut::<c_void>(); STACK_ARGS];
        for (pointer, slot) in pointers.iter_mut().zip(slots.iter_mut()).take(count) {
            *pointer = (slot as *mut u64).cast();
        }
        if let Some(driver) = self.driver {
            let launch = Launch {
                function,
                context,
                grid,
                block: self.block,
                shared_bytes: self.shared_bytes,
                stream: self.stream(py, shim, device)?,
                parameters: pointers.as_mut_ptr() as usize,
            };
            py.allow_threads(move || run(driver, launch))?;
        } else {
            // dry run: the GIL round trip of a real launch, no driver call
            let first = pointers[0] as usize;
            py.allow_threads(move || std::hint::black_box(first));
        }
        Ok(match outputs.len() {
            0 => py.None(),
            1 => outputs.into_iter().next().unwrap_or_else(|| py.None()),
            _ => PyTuple::new(py, outputs)?.into_any().unbind(),
        })
    }
}
