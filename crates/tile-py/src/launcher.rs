//! `Launcher`: every GPU call of a kernel, checked and launched in one native call — the
//! one place that accepts or declines a call.
//!
//! `kernel(*args)` is `launcher(*args)` once the kernel is prepared (`JITKernel.__call__`).
//! From the kernel's KernelInfo (`tile_codegen::KernelInfo`, read back as that type) it
//! checks each argument (a torch tensor, subclasses included, on a CUDA device, of the
//! parameter's dtype, shape and strides, aligned, all on one device; scalars of the right
//! kind and range), evaluates the grid (`KernelInfo::launch_grid`, the only grid
//! evaluator), loads the kernel on a device it has not met (through the kernel's `load`),
//! allocates the `out_idx` outputs, gets torch's current stream and calls `cuLaunchKernel`.
//!
//! A prim_func of several `T.Kernel`s is one call of several kernels (KernelInfo's, then
//! those of its `then`): the arguments are checked once, every kernel's grid is evaluated
//! before anything is allocated, the outputs and scratch are allocated once, and each
//! kernel with blocks is launched in order on the same stream with the same arguments (its
//! own tensor maps after them) — the stream orders them, so a kernel reads what the ones
//! before it wrote.
//!
//! Scratch buffers (KernelInfo `scratch`, `T.alloc_global`) are allocated for every call
//! that launches blocks, after the arguments are accepted: one `torch.empty_strided` of
//! bytes each, through torch's caching allocator on the call's device (so on the stream
//! the kernel runs on, with no synchronization: a launch stays capturable in a CUDA graph),
//! passed after the parameters, and dropped once the kernel is queued — the allocator
//! hands the memory only to work queued after it on that stream.
//!
//! A call it declines — an argument that is not what the parameter needs — goes, before
//! anything is loaded, allocated or launched, to the kernel's `fallback`
//! (`JITKernel._declined`): host arrays run on the interpreter there, and anything else is
//! explained by the Python checks with the detailed error naming the parameter, the
//! expected and the received value. A grid out of CUDA's limits is an error raised here.
//!
//! Tensor maps (KernelInfo `tensor_maps`, TMA descriptors): the launcher checks each map
//! when it is made (a tensor parameter with 16-byte alignment, a dtype TMA copies, rank 1
//! to 5, the box and swizzle; tensor_map.rs), and every call that launches encodes one
//! `CUtensorMap` per map with `cuTensorMapEncodeTiled` (tensor_map.rs gives the arguments:
//! the tensor's data pointer from its slot, outputs included, its shape at the call's
//! sizes and the strides the kernel assumes), after the outputs are allocated and before
//! `cuLaunchKernel`. The kernel takes them after the parameters and the sizes, as
//! `const __grid_constant__` parameters: each kernel-parameter pointer points at 128 bytes,
//! 64-byte aligned, kept on the stack (the heap past a few maps). Each map keeps its last
//! encoding, keyed by the device, data pointer, shape and strides, so that calls on the
//! same tensors do not call the driver (a mutex: calls may come from several threads). A
//! grid of no blocks returns before any map is encoded; a misaligned data pointer is
//! declined like any other (the Python checks explain it); a shape or stride that TMA
//! cannot describe is a ValueError naming the parameter; a failed encoding, or a driver
//! without `cuTensorMapEncodeTiled` (older than CUDA 12.0), a RuntimeError naming it. A dry
//! run checks the encode arguments and encodes nothing. A clustered persistent kernel
//! (`__cluster_dims__(n, 1, 1)`) launches `n` blocks per cluster that runs at once
//! (`cuOccupancyMaxActiveClusters`, asked once per device); a clustered kernel launched a
//! tile per block launches its grid, whose x is a multiple of `n` (a constant grid checked
//! when the launcher is made, one of sizes or scalars per call by `launch_grid`); other
//! clusters are refused when the launcher is made (`KernelInfo::cluster_problem`).
//!
//! Tensors are read through torch's C shim (`torch_shim.rs`, ~30 ns a tensor) or, where
//! that is not usable, through their Python attributes (`t.dtype`, `t.shape`, ...: ~0.6 µs
//! a tensor, the same checks). A tensor subclass (`torch.nn.Parameter`, ...) is read as
//! its base tensor: the data, dtype, shape and strides of the C++ tensor it holds.

use crate::launch::{driver, run, Driver, Launch, STACK_ARGS};
use crate::tensor_map::{encode_args, map_layout, EncodedMap, MapCache, MapKey, MAX_RANK};
use crate::torch_shim::{self, TorchShim};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyTuple, PyType};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::OnceLock;
use tile_codegen::kernel_info::{Extent, GridExpr, KernelInfo, ParamInfo, ScalarValue};

const FLOAT32_MAX: f64 = f32::MAX as f64;

/// What a tensor argument must be.
struct TensorSpec {
    /// torch's dtype object (`torch.float16`): outputs are allocated with it, and the
    /// attribute reader compares it.
    dtype: PyObject,
    /// torch's ScalarType number of `dtype`, compared by the shim reader.
    dtype_code: i32,
    /// The shape and strides when fixed; with symbolic sizes, `dims` says which dimension
    /// is which size and the strides are the contiguous ones of the shape a call gives.
    shape: Vec<i64>,
    strides: Vec<i64>,
    dims: Option<Vec<SpecDim>>,
    align: u64,
}

#[derive(Clone, Copy)]
enum SpecDim {
    Fixed(i64),
    /// Symbolic size number k.
    Size(usize),
}

/// Sizes a call has not bound yet.
const UNBOUND: i64 = i64::MIN;

/// Up to this many symbolic sizes are kept on the stack during a call.
const STACK_SIZES: usize = 8;

/// Up to this many tensor maps (128 bytes each) are kept on the stack during a call.
const STACK_MAPS: usize = 4;

/// A tensor map of the KernelInfo (`info.tensor_maps[i]` for `maps[i]`), checked when the
/// launcher is made.
struct MapParam {
    /// The tensor parameter it describes, and that tensor's rank.
    param: usize,
    rank: usize,
}

enum Param {
    Tensor(TensorSpec),
    /// `kind` is how the value is packed: `?` bool, `b`/`B` int8/uint8, `h`/`H`
    /// int16/uint16, `i`/`I` int32/uint32, `q`/`Q` int64/uint64, `f` float32, `d` float64.
    Scalar {
        kind: u8,
    },
}

struct Output {
    param: usize,
    /// Fixed shapes: the tuples, made once. A symbolic shape is made per call.
    shape: Option<(Py<PyTuple>, Py<PyTuple>)>,
}

/// How tensors are read.
enum Reader {
    /// torch's C shim; `device_type` is the DeviceType number of the tensors a call takes.
    Shim { shim: &'static TorchShim, device_type: i32 },
    /// Python attributes, because the shim is not usable (`why`).
    Attributes { why: String },
}

/// torch's current stream of a device.
enum StreamGetter {
    /// `torch._C._cuda_getCurrentRawStream(device)`: the handle as an int.
    Raw(PyObject),
    /// `torch.cuda.current_stream(device).cuda_stream`, where the raw getter is missing.
    Public(PyObject),
}

/// Launcher(info_json, out_idx, torch, load, fallback, dry_run=False, torch_shim=True)
///
/// `info_json`: the kernel's KernelInfo; `out_idx`: the parameters the launcher allocates
/// and returns (the call passes the others, in order); `torch`: the torch module.
/// `load` and `fallback` are `weakref.WeakMethod`s of the kernel (weak: the kernel holds
/// the launcher): `load(device) -> (function, context)` loads the kernel on a device the
/// first time a call runs there; `fallback(*args, **kwargs)` gets the calls declined.
/// `dry_run` (tests without a GPU): CPU tensors stand for CUDA tensors, outputs are
/// allocated on the CPU, and the call stops short of the stream and the driver.
/// `torch_shim=False` reads tensors through their Python attributes.
#[pyclass(module = "tilers._tilers", frozen)]
pub struct Launcher {
    info: KernelInfo,
    params: Vec<Param>,
    inputs: Vec<usize>,
    outputs: Vec<Output>,
    reader: Reader,
    /// `torch.device.type` of the tensors a call takes: "cuda" ("cpu" in a dry run).
    device_type_name: &'static str,
    tensor_type: Py<PyType>,
    integral: PyObject,
    real: PyObject,
    empty_strided: PyObject,
    /// None in a dry run.
    current_stream: Option<StreamGetter>,
    /// `torch.cuda.current_device`, for calls without a tensor argument; None in a dry run.
    current_device: Option<PyObject>,
    /// The kernels a call launches, in order (KernelInfo's first, then its `then`).
    steps: Vec<Step>,
    /// (function of each step, context) per device ordinal, once loaded there.
    functions: Vec<OnceLock<(Vec<usize>, usize)>>,
    /// Multiprocessors per device, read once: a persistent kernel launches one block per SM.
    sms: Vec<OnceLock<u32>>,
    /// Clusters of each (clustered, persistent) kernel that run at once, per device:
    /// `device * kernels + kernel`.
    clusters: Vec<OnceLock<u32>>,
    load: PyObject,
    fallback: PyObject,
    driver: Option<&'static Driver>,
    /// The bytes of each scratch buffer (KernelInfo `scratch`), in the order the kernel
    /// takes them (after the parameters).
    scratch: Vec<Extent>,
    /// `torch.uint8`: scratch buffers are allocated as bytes.
    byte_dtype: PyObject,
}

/// One kernel of a call (a prim_func may hold several `T.Kernel`s, launched in order with
/// the same arguments).
struct Step {
    /// Its KernelInfo: grid, block, shared memory, tensor maps.
    info: KernelInfo,
    /// The tensor maps a call encodes, in the order the kernel takes them (after the sizes).
    maps: Vec<MapParam>,
    /// The last encoding of each map, reused by calls with the same tensor.
    map_cache: MapCache,
}

fn info_error(what: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("Launcher: {what}"))
}

/// The packing of a scalar parameter of `dtype`.
fn scalar_kind(name: &str, dtype: &str) -> PyResult<u8> {
    Ok(match dtype {
        "bool" => b'?',
        "int8" => b'b',
        "uint8" => b'B',
        "int16" => b'h',
        "uint16" => b'H',
        "int32" => b'i',
        "uint32" => b'I',
        "int64" => b'q',
        "uint64" => b'Q',
        "float32" => b'f',
        "float64" => b'd',
        // 16-bit floats travel as their storage bits (the kernel's tl_half / tl_bf16)
        "float16" => b'e',
        "bfloat16" => b'E',
        _ => {
            return Err(info_error(format!("scalar parameter '{name}' of {dtype} cannot be passed by value")))
        }
    })
}

/// Strides equal, except along extents of 1, where a stride is never used (as in Python).
fn strides_match(strides: &[i64], want: &[i64], shape: &[i64]) -> bool {
    strides.len() == want.len()
        && strides.iter().zip(want).zip(shape).all(|((got, want), extent)| got == want || *extent == 1)
}

/// Row-major strides of `shape`, or None if they overflow.
fn contiguous(shape: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].checked_mul(shape[d + 1].max(1))?;
    }
    Some(strides)
}

/// Does a tensor of `shape` and `strides` fit `spec`? Binds the sizes it carries first
/// (`sizes[k]` is UNBOUND until then) and checks those bound before.
fn shape_fits(spec: &TensorSpec, shape: &[i64], strides: &[i64], sizes: &mut [i64]) -> bool {
    let Some(dims) = &spec.dims else {
        return shape == spec.shape && strides_match(strides, &spec.strides, &spec.shape);
    };
    if shape.len() != dims.len() {
        return false;
    }
    for (dim, &n) in dims.iter().zip(shape) {
        match *dim {
            SpecDim::Fixed(want) if n != want => return false,
            SpecDim::Fixed(_) => {}
            SpecDim::Size(k) if sizes[k] == UNBOUND => sizes[k] = n,
            SpecDim::Size(k) if sizes[k] != n => return false,
            SpecDim::Size(_) => {}
        }
    }
    contiguous(shape).is_some_and(|want| strides_match(strides, &want, shape))
}

/// Every scalar parameter a grid expression reads, checked to be one, and every size it
/// reads, to exist.
fn check_grid_params(expr: &GridExpr, params: &[Param], sizes: usize) -> PyResult<()> {
    for index in expr.params() {
        if !matches!(params.get(index), Some(Param::Scalar { .. })) {
            return Err(info_error(format!("the grid reads parameter {index}, which is not a scalar")));
        }
    }
    if let Some(k) = expr.sizes().into_iter().find(|k| *k >= sizes) {
        return Err(info_error(format!("the grid reads size {k}, which is not one")));
    }
    Ok(())
}

impl Launcher {
    /// The slot of a scalar argument, or None when it does not fit the parameter. Exact
    /// bools, ints and floats are read directly; other numbers as Python's checks take
    /// them (`numbers.Integral` through `__index__`, `numbers.Real` through `__float__`).
    fn scalar_slot(&self, arg: &Bound<'_, PyAny>, kind: u8) -> Option<u64> {
        let py = arg.py();
        match kind {
            b'?' => arg.downcast_exact::<PyBool>().ok().map(|b| b.is_true() as u64),
            b'f' | b'd' | b'e' | b'E' => {
                let value = if let Ok(float) = arg.downcast_exact::<PyFloat>() {
                    float.value()
                } else if arg.is_exact_instance_of::<PyInt>() || arg.is_instance(self.real.bind(py)).ok()? {
                    arg.extract::<f64>().ok()?
                } else {
                    return None;
                };
                if kind == b'd' {
                    return Some(value.to_bits());
                }
                if kind == b'e' || kind == b'E' {
                    // rounded to nearest, as a cast in the kernel would; past the format's
                    // largest finite value it does not fit (as tilers/kernel.py's FLOAT_MAX)
                    let largest = if kind == b'e' { 65504.0 } else { 3.3895313892515355e38 };
                    if value.is_finite() && value.abs() > largest {
                        return None;
                    }
                    let x = value as f32;
                    let bits = if kind == b'e' {
                        tile_ir::arith::f32_to_f16_bits(x)
                    } else {
                        tile_ir::arith::f32_to_bf16_bits(x)
                    };
                    return Some(bits as u64);
                }
                if value.is_finite() && value.abs() > FLOAT32_MAX {
                    return None;
                }
                Some((value as f32).to_bits() as u64)
            }
            _ => {
                if !arg.is_exact_instance_of::<PyInt>() && !arg.is_instance(self.integral.bind(py)).ok()? {
                    return None;
                }
                if kind == b'Q' {
                    return arg.extract::<u64>().ok();
                }
                let value = arg.extract::<i64>().ok()?;
                let (low, high) = match kind {
                    b'b' => (i8::MIN as i64, i8::MAX as i64),
                    b'B' => (0, u8::MAX as i64),
                    b'h' => (i16::MIN as i64, i16::MAX as i64),
                    b'H' => (0, u16::MAX as i64),
                    b'i' => (i32::MIN as i64, i32::MAX as i64),
                    b'I' => (0, u32::MAX as i64),
                    _ => (i64::MIN, i64::MAX),
                };
                // Little-endian: the low bytes of the i64 are the narrow value's bytes.
                (low..=high).contains(&value).then_some(value as u64)
            }
        }
    }

    /// What the grid reads of scalar parameter `param`, from its packed slot: the value
    /// the kernel receives (a float32 rounded to float32).
    fn scalar_value(&self, param: usize, slot: u64) -> ScalarValue {
        match self.params[param] {
            Param::Scalar { kind: b'f' } => ScalarValue::Float(f32::from_bits(slot as u32) as f64),
            Param::Scalar { kind: b'd' } => ScalarValue::Float(f64::from_bits(slot)),
            Param::Scalar { kind: b'e' } => {
                ScalarValue::Float(tile_ir::arith::f16_bits_to_f32(slot as u16) as f64)
            }
            Param::Scalar { kind: b'E' } => {
                ScalarValue::Float(tile_ir::arith::bf16_bits_to_f32(slot as u16) as f64)
            }
            _ => ScalarValue::Int(slot as i64),
        }
    }

    /// A tensor argument's data pointer and device index, read through the shim, or None
    /// when it is not what `spec` needs.
    #[inline]
    fn read_by_shim(
        &self,
        shim: &TorchShim,
        device_type: i32,
        arg: &Bound<'_, PyAny>,
        spec: &TensorSpec,
        sizes: &mut [i64],
    ) -> Option<(u64, i32)> {
        if !shim.is_tensor(arg) {
            return None;
        }
        let fields = shim.fields(arg)?;
        let fits = fields.dtype == spec.dtype_code
            && fields.device_type == device_type
            && shape_fits(spec, fields.sizes, fields.strides, sizes);
        fits.then_some((fields.data, fields.device_index))
    }

    /// The same through Python attributes (`isinstance`, `dtype`, `device`, `shape`,
    /// `stride()`, `data_ptr()`, `get_device()`).
    fn read_by_attributes(
        &self,
        arg: &Bound<'_, PyAny>,
        spec: &TensorSpec,
        sizes: &mut [i64],
    ) -> PyResult<Option<(u64, i32)>> {
        let py = arg.py();
        if !arg.is_instance(self.tensor_type.bind(py))? || !arg.getattr(intern!(py, "dtype"))?.is(&spec.dtype)
        {
            return Ok(None);
        }
        let device_type = arg.getattr(intern!(py, "device"))?.getattr(intern!(py, "type"))?;
        if !device_type.eq(self.device_type_name)? {
            return Ok(None);
        }
        let shape: Vec<i64> = arg.getattr(intern!(py, "shape"))?.extract()?;
        let strides: Vec<i64> = arg.call_method0(intern!(py, "stride"))?.extract()?;
        if !shape_fits(spec, &shape, &strides, sizes) {
            return Ok(None);
        }
        let data: u64 = arg.call_method0(intern!(py, "data_ptr"))?.extract()?;
        let device: i32 = arg.call_method0(intern!(py, "get_device"))?.extract()?;
        Ok(Some((data, device)))
    }

    /// Check one tensor argument against its parameter; its data pointer if it passes.
    #[inline]
    fn tensor_slot(
        &self,
        arg: &Bound<'_, PyAny>,
        spec: &TensorSpec,
        device: &mut i32,
        sizes: &mut [i64],
    ) -> Option<u64> {
        let (data, index) = match &self.reader {
            Reader::Shim { shim, device_type } => self.read_by_shim(shim, *device_type, arg, spec, sizes)?,
            Reader::Attributes { .. } => self.read_by_attributes(arg, spec, sizes).ok()??,
        };
        if data % spec.align != 0 {
            return None;
        }
        if *device == i32::MIN {
            *device = index;
        } else if index != *device {
            return None;
        }
        Some(data)
    }

    /// The data pointer of a tensor the launcher allocated.
    fn data_pointer(&self, tensor: &Bound<'_, PyAny>) -> PyResult<u64> {
        let read = match &self.reader {
            Reader::Shim { shim, .. } => shim.fields(tensor).map(|fields| fields.data),
            Reader::Attributes { .. } => {
                Some(tensor.call_method0(intern!(tensor.py(), "data_ptr"))?.extract()?)
            }
        };
        read.ok_or_else(|| {
            PyRuntimeError::new_err("torch.empty_strided returned a tensor the launcher cannot read")
        })
    }

    /// Allocate the outputs on `device` (symbolic shapes at the call's `sizes`); their
    /// pointers go into `slots`.
    fn allocate(
        &self,
        py: Python<'_>,
        device: i32,
        slots: &mut [u64],
        sizes: &[i64],
    ) -> PyResult<Vec<PyObject>> {
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for output in &self.outputs {
            let Param::Tensor(spec) = &self.params[output.param] else { unreachable!("outputs are tensors") };
            let kwargs = PyDict::new(py);
            kwargs.set_item(intern!(py, "dtype"), spec.dtype.bind(py))?;
            if self.driver.is_some() {
                kwargs.set_item(intern!(py, "device"), device)?;
            }
            let (shape, strides) = match (&output.shape, &spec.dims) {
                (Some((shape, strides)), _) => (shape.bind(py).clone(), strides.bind(py).clone()),
                (None, Some(dims)) => {
                    let shape: Vec<i64> = dims
                        .iter()
                        .map(|d| match *d {
                            SpecDim::Fixed(n) => n,
                            SpecDim::Size(k) => sizes[k],
                        })
                        .collect();
                    let strides = contiguous(&shape)
                        .ok_or_else(|| PyValueError::new_err("an output's strides overflow"))?;
                    (PyTuple::new(py, &shape)?, PyTuple::new(py, &strides)?)
                }
                (None, None) => unreachable!("an output has a shape"),
            };
            let tensor = self.empty_strided.bind(py).call((shape, strides), Some(&kwargs))?;
            slots[output.param] = self.data_pointer(&tensor)?;
            outputs.push(tensor.unbind());
        }
        Ok(outputs)
    }

    /// Allocate the scratch buffers on `device` (bytes at the call's `sizes`); their pointers
    /// go into `slots` after the parameters. The tensors are kept until the launch is queued.
    fn allocate_scratch(
        &self,
        py: Python<'_>,
        device: i32,
        slots: &mut [u64],
        sizes: &[i64],
    ) -> PyResult<Vec<PyObject>> {
        let mut held = Vec::with_capacity(self.scratch.len());
        for (k, bytes) in self.scratch.iter().enumerate() {
            let name = &self.info.scratch[k].name;
            let bytes = bytes.eval(sizes).filter(|b| *b >= 0).ok_or_else(|| {
                PyValueError::new_err(format!("scratch buffer '{name}' (T.alloc_global): its size overflows"))
            })?;
            let kwargs = PyDict::new(py);
            kwargs.set_item(intern!(py, "dtype"), self.byte_dtype.bind(py))?;
            if self.driver.is_some() {
                kwargs.set_item(intern!(py, "device"), device)?;
            }
            let tensor = self.empty_strided.bind(py).call(((bytes,), (1,)), Some(&kwargs))?;
            slots[self.params.len() + k] = self.data_pointer(&tensor)?;
            held.push(tensor.unbind());
        }
        Ok(held)
    }

    /// The function of each step on `device` and its context, loaded there on first use.
    fn functions(&self, py: Python<'_>, device: i32) -> PyResult<&(Vec<usize>, usize)> {
        let slot = usize::try_from(device)
            .ok()
            .and_then(|d| self.functions.get(d))
            .ok_or_else(|| PyRuntimeError::new_err(format!("Launcher: no CUDA device {device}")))?;
        if let Some(loaded) = slot.get() {
            return Ok(loaded);
        }
        let load = self.load.bind(py).call0()?;
        if load.is_none() {
            return Err(PyRuntimeError::new_err("the kernel of this launcher was deleted"));
        }
        let loaded: (Vec<usize>, usize) = load.call1((device,))?.extract()?;
        if loaded.0.len() != self.steps.len() {
            return Err(PyRuntimeError::new_err(format!(
                "Launcher: load gave {} functions for {} kernels",
                loaded.0.len(),
                self.steps.len()
            )));
        }
        Ok(slot.get_or_init(|| loaded))
    }

    /// How many blocks (clusters, for a clustered kernel) of a persistent kernel walk its
    /// tiles on `device`: one per SM, or as many clusters as run at once (a cluster's blocks
    /// share a GPC, so fewer than SMs / n may fit: launching more would run them after the
    /// others, a second wave), asked of the driver once per device.
    fn walkers(&self, py: Python<'_>, device: i32, step: usize) -> PyResult<u32> {
        let sms = self.multiprocessors(device)?;
        let info = &self.steps[step].info;
        let n = info.cluster[0].max(1);
        if n == 1 {
            return Ok(sms);
        }
        let at = usize::try_from(device).ok().map(|d| d * self.steps.len() + step);
        let Some(cell) = at.and_then(|i| self.clusters.get(i)) else {
            return Ok(sms / n);
        };
        if let Some(&k) = cell.get() {
            return Ok(k);
        }
        let k = match self.driver {
            Some(driver) => {
                let (functions, context) = self.functions(py, device)?;
                crate::launch::max_active_clusters(
                    driver,
                    *context,
                    functions[step],
                    info.block,
                    info.shared_bytes,
                    n,
                )?
                .unwrap_or(sms / n)
                .min(sms / n)
            }
            None => sms / n,
        };
        Ok(*cell.get_or_init(|| k.max(1)))
    }

    /// The device of a call without tensor arguments: torch's current device.
    /// The SMs of `device` (a dry run: 132, an H100/H200's).
    fn multiprocessors(&self, device: i32) -> PyResult<u32> {
        let Some(cell) = usize::try_from(device).ok().and_then(|d| self.sms.get(d)) else {
            return Ok(132);
        };
        if let Some(&n) = cell.get() {
            return Ok(n);
        }
        let n = if self.driver.is_some() {
            // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            crate::launch::device_attribute(device, 16)?.max(1) as u32
        } else {
            132
        };
        Ok(*cell.get_or_init(|| n))
    }

    fn current_device(&self, py: Python<'_>) -> PyResult<i32> {
        match &self.current_device {
            Some(getter) => getter.bind(py).call0()?.extract(),
            None => Ok(0),
        }
    }

    fn stream(&self, py: Python<'_>, device: i32) -> PyResult<usize> {
        if let Reader::Shim { shim, .. } = &self.reader {
            if let Some(stream) = shim.current_stream(device) {
                return Ok(stream);
            }
        }
        match &self.current_stream {
            Some(StreamGetter::Raw(getter)) => getter.bind(py).call1((device,))?.extract(),
            Some(StreamGetter::Public(getter)) => {
                getter.bind(py).call1((device,))?.getattr(intern!(py, "cuda_stream"))?.extract()
            }
            None => Ok(0),
        }
    }

    /// The grid error of a call, with the values as the call gave them.
    fn grid_error(&self, error: tile_codegen::kernel_info::GridError, args: &Bound<'_, PyTuple>) -> PyErr {
        // as Python writes the value the call gave: 0, 2.5
        let value_text = |param: usize| -> String {
            let Some(arg) = self.inputs.iter().position(|&p| p == param).and_then(|i| args.get_item(i).ok())
            else {
                return "?".into();
            };
            let text = match self.params[param] {
                Param::Scalar { kind: b'f' | b'd' | b'e' | b'E' } => {
                    arg.extract::<f64>().and_then(|v| Ok(PyFloat::new(arg.py(), v).repr()?.to_string()))
                }
                _ => arg.extract::<i64>().map(|v| v.to_string()),
            };
            text.unwrap_or_else(|_| "?".into())
        };
        PyValueError::new_err(error.message(&self.info, &value_text))
    }

    /// A call's result: None, the one output, or a tuple of them.
    fn returned(&self, py: Python<'_>, outputs: Vec<PyObject>) -> PyResult<PyObject> {
        Ok(match outputs.len() {
            0 => py.None(),
            1 => outputs.into_iter().next().unwrap_or_else(|| py.None()),
            _ => PyTuple::new(py, outputs)?.into_any().unbind(),
        })
    }

    /// Encode the call's tensor maps into `out`, one per map: the tensor's data pointer
    /// from its slot, its shape from the KernelInfo at the call's sizes, its strides the
    /// ones the kernel assumes (contiguous for symbolic shapes). A map whose tensor is the
    /// one it was last encoded for is copied from the cache; a dry run checks the
    /// arguments and encodes nothing.
    #[allow(clippy::too_many_arguments)]
    fn encode_maps(
        &self,
        py: Python<'_>,
        step: &Step,
        device: i32,
        context: usize,
        slots: &[u64],
        sizes: &[i64],
        out: &mut [EncodedMap],
    ) -> PyResult<()> {
        for (index, (map, out)) in step.maps.iter().zip(out.iter_mut()).enumerate() {
            let Param::Tensor(spec) = &self.params[map.param] else { unreachable!("maps are of tensors") };
            let rank = map.rank;
            let mut key =
                MapKey { device, data: slots[map.param], rank, shape: [0; MAX_RANK], strides: [0; MAX_RANK] };
            match &spec.dims {
                None => {
                    key.shape[..rank].copy_from_slice(&spec.shape);
                    key.strides[..rank].copy_from_slice(&spec.strides);
                }
                Some(dims) => {
                    for (extent, dim) in key.shape.iter_mut().zip(dims) {
                        *extent = match *dim {
                            SpecDim::Fixed(n) => n,
                            SpecDim::Size(k) => sizes[k],
                        };
                    }
                    // row-major, as shape_fits checked the tensor's (it does not overflow)
                    key.strides[rank - 1] = 1;
                    for d in (0..rank - 1).rev() {
                        key.strides[d] = key.strides[d + 1].saturating_mul(key.shape[d + 1].max(1));
                    }
                }
            }
            if let Some(encoded) = step.map_cache.get(index, &key) {
                *out = encoded;
                continue;
            }
            let (info, param) = (&step.info.tensor_maps[index], &self.info.params[map.param]);
            let name = param.name();
            let args =
                encode_args(info, name, param.dtype(), &key.shape[..rank], &key.strides[..rank], key.data)
                    .map_err(PyValueError::new_err)?;
            let Some(driver) = self.driver else { continue };
            let encoded = py.allow_threads(|| driver.encode_tensor_map(context, &args)).map_err(|error| {
                PyRuntimeError::new_err(format!("the tensor map of parameter '{name}': {}", error.value(py)))
            })?;
            step.map_cache.put(index, key, encoded);
            *out = encoded;
        }
        Ok(())
    }

    fn decline(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyObject> {
        let method = self.fallback.bind(py).call0()?;
        if method.is_none() {
            return Err(PyRuntimeError::new_err("the kernel of this launcher was deleted"));
        }
        Ok(method.call(args, kwargs)?.unbind())
    }
}

#[pymethods]
impl Launcher {
    #[new]
    #[pyo3(signature = (info_json, out_idx, torch, load, fallback, dry_run=false, torch_shim=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        info_json: &str,
        out_idx: Vec<usize>,
        torch: &Bound<'_, PyAny>,
        load: PyObject,
        fallback: PyObject,
        dry_run: bool,
        torch_shim: bool,
    ) -> PyResult<Self> {
        let info: KernelInfo =
            serde_json::from_str(info_json).map_err(|e| info_error(format!("not a KernelInfo ({e})")))?;
        let mut steps = Vec::new();
        for launch in info.launches() {
            if launch.entry.is_none() {
                return Err(info_error(format!(
                    "kernel '{}' has no GPU code (compiled for the interpreter)",
                    info.name
                )));
            }
            // clusters along x (compiled in: __cluster_dims__), of a persistent kernel or of
            // one launched a tile per block (its grid along x a multiple of the cluster)
            if let Some(why) = launch.cluster_problem() {
                return Err(info_error(format!("kernel '{}' cannot be launched: {why}", info.name)));
            }
            let mut maps = Vec::with_capacity(launch.tensor_maps.len());
            for map in &launch.tensor_maps {
                let Some(ParamInfo::Tensor { name, dtype, shape, align, .. }) = info.params.get(map.param)
                else {
                    return Err(info_error(format!(
                        "a tensor map of parameter {}, which is not a tensor",
                        map.param
                    )));
                };
                // a misaligned pointer is declined (and explained) before any map is encoded
                if !align.is_multiple_of(16) {
                    return Err(info_error(format!(
                        "parameter '{name}' has a tensor map, which needs 16-byte aligned data, but an alignment of {align}"
                    )));
                }
                map_layout(map, name, dtype, shape.len()).map_err(info_error)?;
                maps.push(MapParam { param: map.param, rank: shape.len() });
            }
            let mut own = launch.clone();
            own.then.clear();
            steps.push(Step { info: own, map_cache: MapCache::new(maps.len()), maps });
        }
        let reader = match (torch_shim, torch_shim::load(torch)) {
            (true, Ok(shim)) => {
                let device_type = if dry_run { shim.device_type_cpu } else { shim.device_type_cuda };
                Reader::Shim { shim, device_type }
            }
            (true, Err(why)) => Reader::Attributes { why: format!("torch's C shim is not usable: {why}") },
            (false, _) => Reader::Attributes { why: "torch_shim=False".into() },
        };
        let mut params = Vec::with_capacity(info.params.len());
        for param in &info.params {
            params.push(match param {
                ParamInfo::Tensor { dtype, shape, strides, align, .. } => {
                    let dtype = torch.getattr(dtype.as_str())?;
                    let dtype_code = match &reader {
                        Reader::Shim { shim, .. } => shim.dtype_code(torch, &dtype)?,
                        Reader::Attributes { .. } => -1,
                    };
                    if *align == 0 {
                        return Err(info_error(format!(
                            "parameter '{}' has an alignment of 0",
                            param.name()
                        )));
                    }
                    let fixed: Option<Vec<i64>> = shape.iter().map(Extent::fixed).collect();
                    let (shape, strides, dims) = match fixed {
                        Some(shape) => {
                            let strides = strides
                                .iter()
                                .map(|e| {
                                    e.fixed().ok_or_else(|| info_error("a fixed shape with symbolic strides"))
                                })
                                .collect::<PyResult<Vec<_>>>()?;
                            (shape, strides, None)
                        }
                        None => {
                            let dims = shape
                                .iter()
                                .map(|e| match e {
                                    Extent::Fixed(n) => Ok(SpecDim::Fixed(*n)),
                                    Extent::Expr(GridExpr::Size { size }) if *size < info.sizes.len() => {
                                        Ok(SpecDim::Size(*size))
                                    }
                                    _ => Err(info_error(format!(
                                        "parameter '{}': a dimension is neither a number nor a size",
                                        param.name()
                                    ))),
                                })
                                .collect::<PyResult<Vec<_>>>()?;
                            (Vec::new(), Vec::new(), Some(dims))
                        }
                    };
                    Param::Tensor(TensorSpec {
                        dtype: dtype.unbind(),
                        dtype_code,
                        shape,
                        strides,
                        dims,
                        align: *align,
                    })
                }
                ParamInfo::Scalar { name, dtype } => Param::Scalar { kind: scalar_kind(name, dtype)? },
            });
        }
        let mut outputs = Vec::with_capacity(out_idx.len());
        for &param in &out_idx {
            let Some(Param::Tensor(TensorSpec { shape, strides, dims, .. })) = params.get(param) else {
                return Err(info_error(format!("out_idx {param} is not a tensor parameter")));
            };
            let shape = match dims {
                None => Some((PyTuple::new(py, shape)?.unbind(), PyTuple::new(py, strides)?.unbind())),
                Some(_) => None,
            };
            outputs.push(Output { param, shape });
        }
        let inputs: Vec<usize> = (0..params.len()).filter(|i| !out_idx.contains(i)).collect();
        for step in &steps {
            if step.info.grid.len() != 3 {
                return Err(info_error("the grid must have three dimensions"));
            }
            for expr in &step.info.grid {
                check_grid_params(expr, &params, info.sizes.len())?;
            }
        }
        // every size must come from an input: a call cannot know one only outputs carry
        for size in &info.sizes {
            if !size.from.iter().any(|[p, _]| inputs.contains(p)) {
                return Err(info_error(format!(
                    "size '{}' is a dimension of no input tensor, so a call cannot bind it",
                    size.name
                )));
            }
            if size.multiple_of < 1 {
                return Err(info_error(format!(
                    "size '{}' has a multiple of {}",
                    size.name, size.multiple_of
                )));
            }
        }
        let cuda = torch.getattr("cuda")?;
        let (devices, current_stream, current_device) = if dry_run {
            (1, None, None)
        } else {
            let devices: usize = cuda.call_method0("device_count")?.extract()?;
            // torch's private raw-stream getter returns the handle as an int, at a
            // fraction of the cost of torch.cuda.current_stream(device).cuda_stream
            let stream = match torch.getattr("_C")?.getattr("_cuda_getCurrentRawStream") {
                Ok(raw) => StreamGetter::Raw(raw.unbind()),
                Err(_) => StreamGetter::Public(cuda.getattr("current_stream")?.unbind()),
            };
            (devices, Some(stream), Some(cuda.getattr("current_device")?.unbind()))
        };
        let numbers = py.import("numbers")?;
        let scratch = info.scratch.iter().map(|s| s.bytes.clone()).collect();
        Ok(Launcher {
            info,
            params,
            inputs,
            outputs,
            reader,
            device_type_name: if dry_run { "cpu" } else { "cuda" },
            tensor_type: torch.getattr("Tensor")?.downcast_into::<PyType>()?.unbind(),
            integral: numbers.getattr("Integral")?.unbind(),
            real: numbers.getattr("Real")?.unbind(),
            empty_strided: torch.getattr("empty_strided")?.unbind(),
            byte_dtype: torch.getattr("uint8")?.unbind(),
            scratch,
            current_stream,
            current_device,
            functions: (0..devices).map(|_| OnceLock::new()).collect(),
            sms: (0..devices).map(|_| OnceLock::new()).collect(),
            clusters: (0..devices * steps.len()).map(|_| OnceLock::new()).collect(),
            load,
            fallback,
            driver: if dry_run { None } else { Some(driver()?) },
            steps,
        })
    }

    /// How this launcher reads tensors: "torch's C shim", or "Python attributes (why)".
    #[getter]
    fn tensor_reader(&self) -> String {
        match &self.reader {
            Reader::Shim { .. } => "torch's C shim".into(),
            Reader::Attributes { why } => format!("Python attributes ({why})"),
        }
    }

    /// launcher(*args): launch and return the outputs (None, one tensor or a tuple), or
    /// what the fallback returns for a call the launcher declines.
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyObject> {
        if args.len() != self.inputs.len() || kwargs.is_some_and(|k| !k.is_empty()) {
            return self.decline(py, args, kwargs);
        }
        let n_sizes = self.info.sizes.len();
        // the kernel's 8-byte arguments: parameters, scratch pointers, sizes
        let first_size = self.params.len() + self.scratch.len();
        let count = first_size + n_sizes;
        let mut stack_sizes = [UNBOUND; STACK_SIZES];
        let mut heap_sizes = Vec::new();
        let sizes: &mut [i64] = if n_sizes <= STACK_SIZES {
            &mut stack_sizes[..n_sizes]
        } else {
            heap_sizes.resize(n_sizes, UNBOUND);
            &mut heap_sizes
        };
        let mut stack_slots = [0u64; STACK_ARGS];
        let mut heap_slots = Vec::new();
        let slots: &mut [u64] = if count <= STACK_ARGS {
            &mut stack_slots[..count]
        } else {
            heap_slots.resize(count, 0);
            &mut heap_slots
        };
        let mut device = i32::MIN;
        for (arg, &param) in args.iter().zip(&self.inputs) {
            let slot = match &self.params[param] {
                Param::Tensor(spec) => self.tensor_slot(&arg, spec, &mut device, sizes),
                Param::Scalar { kind } => self.scalar_slot(&arg, *kind),
            };
            match slot {
                Some(slot) => slots[param] = slot,
                None => return self.decline(py, args, kwargs),
            }
        }
        // the sizes: bound by the inputs (Launcher::new checked each has one), in their
        // type's range, multiples of what T.dynamic promised; passed after the parameters
        for (k, size) in self.info.sizes.iter().enumerate() {
            let value = sizes[k];
            let max = if size.dtype == "int64" { i64::MAX } else { i32::MAX as i64 };
            if !(0..=max).contains(&value) || value % size.multiple_of != 0 {
                return self.decline(py, args, kwargs);
            }
            slots[first_size + k] = value as u64;
        }
        let device = match device {
            i32::MIN => self.current_device(py)?,
            // a dry run's CPU tensors are on device -1
            _ if self.driver.is_none() => 0,
            device => device,
        };
        // every kernel's grid, before anything is allocated or launched
        let mut stack_grids = [[0u32; 3]; 2];
        let mut heap_grids = Vec::new();
        let grids: &mut [[u32; 3]] = if self.steps.len() <= 2 {
            &mut stack_grids[..self.steps.len()]
        } else {
            heap_grids.resize(self.steps.len(), [0; 3]);
            &mut heap_grids
        };
        for (k, (step, grid)) in self.steps.iter().zip(grids.iter_mut()).enumerate() {
            *grid = step
                .info
                .launch_grid(&|i| self.scalar_value(i, slots[i]), sizes)
                .map_err(|e| self.grid_error(e, args))?;
            if step.info.persistent {
                // one block per SM (at most one per tile) walks the grid's tiles; with
                // clusters of n blocks, as many clusters as run at once walk groups of n
                let tiles = grid.iter().map(|&g| g as u64).product::<u64>();
                let n = step.info.cluster[0].max(1) as u64;
                let walkers = (tiles / n).min(self.walkers(py, device, k)? as u64);
                *grid = [(walkers * n) as u32, 1, 1];
            }
        }
        if grids.iter().all(|grid| grid.contains(&0)) {
            // no blocks (a size of 0): nothing to launch, the outputs are returned as made
            let outputs = self.allocate(py, device, slots, sizes)?;
            return self.returned(py, outputs);
        }
        let (functions, context) = self.functions(py, device)?;
        let context = *context;

        let outputs = self.allocate(py, device, slots, sizes)?;
        let scratch = self.allocate_scratch(py, device, slots, sizes)?;
        let stream = if self.driver.is_some() { self.stream(py, device)? } else { 0 };
        // a kernel may start early only behind a kernel of this call (never behind the
        // caller's work, which it does not wait for)
        let mut launched = false;
        let dependents = crate::launch::dependent_launch_enabled();
        for ((step, grid), &function) in self.steps.iter().zip(grids.iter()).zip(functions) {
            if grid.contains(&0) {
                continue;
            }
            let dependent = launched && dependents && step.info.dependent_launch;
            launched = true;
            // the tensor maps, after the outputs are bound (a map may describe one)
            let n_maps = step.maps.len();
            let mut stack_maps;
            let mut heap_maps = Vec::new();
            let maps: &mut [EncodedMap] = if n_maps == 0 {
                &mut []
            } else if n_maps <= STACK_MAPS {
                stack_maps = [EncodedMap::ZERO; STACK_MAPS];
                &mut stack_maps[..n_maps]
            } else {
                heap_maps.resize(n_maps, EncodedMap::ZERO);
                &mut heap_maps
            };
            self.encode_maps(py, step, device, context, slots, sizes, maps)?;
            // the kernel's parameters: the params, scratch and sizes (8-byte slots), then the maps
            let total = count + n_maps;
            let mut stack_pointers = [null_mut::<c_void>(); STACK_ARGS];
            let mut heap_pointers = Vec::new();
            let pointers: &mut [*mut c_void] = if total <= STACK_ARGS {
                &mut stack_pointers[..total]
            } else {
                heap_pointers.resize(total, null_mut());
                &mut heap_pointers
            };
            let (slot_pointers, map_pointers) = pointers.split_at_mut(count);
            for (pointer, slot) in slot_pointers.iter_mut().zip(slots.iter_mut()) {
                *pointer = (slot as *mut u64).cast();
            }
            for (pointer, map) in map_pointers.iter_mut().zip(maps.iter_mut()) {
                *pointer = (map as *mut EncodedMap).cast();
            }
            if let Some(driver) = self.driver {
                let launch = Launch {
                    function,
                    context,
                    grid: (grid[0], grid[1], grid[2]),
                    block: (step.info.block[0], step.info.block[1], step.info.block[2]),
                    shared_bytes: step.info.shared_bytes,
                    stream,
                    parameters: pointers.as_mut_ptr() as usize,
                    dependent,
                };
                py.allow_threads(move || run(driver, launch))?;
            } else {
                // dry run: the GIL round trip of a real launch, no driver call
                let first = pointers.first().map_or(0, |p| *p as usize);
                py.allow_threads(move || std::hint::black_box(first));
            }
        }
        // the kernels are queued: the caching allocator may reuse the scratch for later work
        drop(scratch);
        self.returned(py, outputs)
    }
}
