//! Reading a torch tensor's data pointer, dtype, device, sizes and strides in a few
//! nanoseconds, through torch's stable C shim (the `aoti_torch_*` functions of
//! libtorch_cpu, which AOTInductor and torch's stable ABI are built on).
//!
//! Why: a launch checks every tensor argument. Through Python attributes (`t.dtype`,
//! `t.shape`, `t.stride()`, `t.data_ptr()`, ...) that costs ~0.6 µs per tensor on the
//! H200's host, which made a 16-tensor call 8.6 µs slower than a 3-tensor one. The shim
//! reads the same fields of the C++ tensor directly.
//!
//! The shim takes an `at::Tensor*`. A Python tensor (`THPVariable`) holds its `at::Tensor`
//! right after the object header (torch 2.11; older versions wrap it in a `MaybeOwned`,
//! one word further). [`load`] finds which by comparing the word there with `t._cdata`
//! (the TensorImpl address torch itself reports) and checks the shim's answers against
//! Python's for a sample tensor and for a `torch.nn.Parameter` of it (a subclass instance
//! starts with the same `THPVariable`, so subclasses are read the same way, as their base
//! tensor). When anything disagrees, or a library or symbol is missing, the launcher reads
//! tensors through their Python attributes instead (`launcher.rs`).

use libloading::Library;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyType};
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// `AtenTensorHandle`: an `at::Tensor*`.
type TensorHandle = *const c_void;
/// `AOTITorchError`: 0 on success; the shim catches every C++ exception.
type ShimError = i32;

/// dlopen flags: only find a library that is already loaded (glibc's values).
#[cfg(unix)]
const RTLD_NOLOAD: c_int = 0x4;
#[cfg(unix)]
const RTLD_LAZY: c_int = 0x1;

/// The shim functions and where a Python tensor keeps its `at::Tensor`.
pub struct TorchShim {
    _cpu_library: Library,
    _cuda_library: Option<Library>,
    get_data_ptr: unsafe extern "C" fn(TensorHandle, *mut *mut c_void) -> ShimError,
    get_dim: unsafe extern "C" fn(TensorHandle, *mut i64) -> ShimError,
    get_sizes: unsafe extern "C" fn(TensorHandle, *mut *const i64) -> ShimError,
    get_strides: unsafe extern "C" fn(TensorHandle, *mut *const i64) -> ShimError,
    get_dtype: unsafe extern "C" fn(TensorHandle, *mut i32) -> ShimError,
    get_device_type: unsafe extern "C" fn(TensorHandle, *mut i32) -> ShimError,
    get_device_index: unsafe extern "C" fn(TensorHandle, *mut i32) -> ShimError,
    /// `aoti_torch_get_current_cuda_stream` of libtorch_cuda (absent in CPU-only builds).
    current_cuda_stream: Option<unsafe extern "C" fn(i32, *mut *mut c_void) -> ShimError>,
    /// Byte offset of the `at::Tensor` inside a `THPVariable`.
    tensor_offset: usize,
    /// `torch.Tensor`: its instances, and those of its subclasses, are read by the shim.
    tensor_type: Py<PyType>,
    /// torch's DeviceType numbers of CUDA and of the CPU.
    pub device_type_cuda: i32,
    pub device_type_cpu: i32,
}

// SAFETY: the shim functions are thread-safe readers; the libraries stay loaded.
unsafe impl Send for TorchShim {}
unsafe impl Sync for TorchShim {}

/// What a launch needs to know about one tensor argument.
pub struct TensorFields<'a> {
    pub data: u64,
    pub dtype: i32,
    pub device_type: i32,
    pub device_index: i32,
    pub sizes: &'a [i64],
    pub strides: &'a [i64],
}

/// The shim, or why it is not usable: decided by the first [`load`].
static SHIM: OnceLock<Result<TorchShim, String>> = OnceLock::new();

/// The shim, reading tensors of the `torch` module given; the first call decides, once
/// per process, whether it is usable (else: why not).
pub fn load(torch: &Bound<'_, PyAny>) -> Result<&'static TorchShim, &'static str> {
    if SHIM.get().is_none() {
        // Not get_or_init: the check calls into Python, which may let another thread in
        // to decide too; the first answer stays.
        let _ = SHIM.set(open_shim(torch));
    }
    match SHIM.get() {
        Some(Ok(shim)) => Ok(shim),
        Some(Err(reason)) => Err(reason),
        None => Err("the torch shim was not loaded"),
    }
}

impl TorchShim {
    /// Whether `object` is a `torch.Tensor` (of a subclass too), whose fields the shim reads.
    #[inline]
    pub fn is_tensor(&self, object: &Bound<'_, PyAny>) -> bool {
        let tensor = self.tensor_type.as_ptr().cast::<pyo3::ffi::PyTypeObject>();
        // SAFETY: reads the type of a live object; PyType_IsSubtype only reads the MRO.
        unsafe {
            let kind = pyo3::ffi::Py_TYPE(object.as_ptr());
            kind == tensor || pyo3::ffi::PyType_IsSubtype(kind, tensor) != 0
        }
    }

    /// torch's ScalarType number of a torch dtype (`torch.float16`).
    pub fn dtype_code(&self, torch: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<i32> {
        let py = torch.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("dtype", dtype)?;
        let sample = torch.call_method("empty", (0,), Some(&kwargs))?;
        let fields = self.fields(&sample).ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "the torch shim cannot read a tensor of {dtype}"
            ))
        })?;
        Ok(fields.dtype)
    }

    /// The fields of a tensor that passed [`Self::is_tensor`]; None when torch reports an
    /// error (a tensor without storage or strides, for example).
    ///
    /// The slices point into the tensor, which the caller's reference keeps alive.
    #[inline]
    pub fn fields<'a>(&self, tensor: &'a Bound<'_, PyAny>) -> Option<TensorFields<'a>> {
        // SAFETY: `tensor` is a THPVariable (its type is torch.Tensor or a subclass), whose
        // `at::Tensor` sits at `tensor_offset` (checked at load); each call writes one value.
        unsafe {
            let handle: TensorHandle = tensor.as_ptr().cast::<u8>().add(self.tensor_offset).cast();
            let mut dim = 0i64;
            let mut sizes = std::ptr::null();
            let mut strides = std::ptr::null();
            let mut dtype = 0;
            let mut device_type = 0;
            let mut device_index = 0;
            let mut data = std::ptr::null_mut();
            let failed = (self.get_dim)(handle, &mut dim)
                | (self.get_sizes)(handle, &mut sizes)
                | (self.get_strides)(handle, &mut strides)
                | (self.get_dtype)(handle, &mut dtype)
                | (self.get_device_type)(handle, &mut device_type)
                | (self.get_device_index)(handle, &mut device_index);
            if failed != 0 || dim < 0 {
                return None;
            }
            if (self.get_data_ptr)(handle, &mut data) != 0 {
                return None;
            }
            let dim = dim as usize;
            let (sizes, strides) = if dim == 0 {
                (&[][..], &[][..])
            } else {
                (std::slice::from_raw_parts(sizes, dim), std::slice::from_raw_parts(strides, dim))
            };
            Some(TensorFields { data: data as u64, dtype, device_type, device_index, sizes, strides })
        }
    }

    /// torch's current CUDA stream on `device` (as `torch.cuda.current_stream(device)`),
    /// or None when libtorch_cuda lacks the shim function or reports an error.
    #[inline]
    pub fn current_stream(&self, device: i32) -> Option<usize> {
        let get = self.current_cuda_stream?;
        let mut stream = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        let status = unsafe { get(device, &mut stream) };
        (status == 0).then_some(stream as usize)
    }
}

#[cfg(unix)]
fn open_loaded(name: &str) -> Result<Library, String> {
    // SAFETY: the library is already loaded (RTLD_NOLOAD), so nothing is initialised.
    unsafe { libloading::os::unix::Library::open(Some(name), RTLD_NOLOAD | RTLD_LAZY) }
        .map(Library::from)
        .map_err(|e| format!("{name} is not loaded ({e})"))
}

#[cfg(not(unix))]
fn open_loaded(name: &str) -> Result<Library, String> {
    Err(format!("{name}: the torch shim is only looked for on Linux"))
}

fn open_shim(torch: &Bound<'_, PyAny>) -> Result<TorchShim, String> {
    if !cfg!(target_os = "linux") {
        return Err("the torch shim is only looked for on Linux".into());
    }
    let error = |e: PyErr| e.to_string();
    let cpu_library = open_loaded("libtorch_cpu.so")?;
    macro_rules! symbol {
        ($library:expr, $name:literal) => {
            // SAFETY: the types above are the shim's declared C signatures (shim.h).
            *unsafe { $library.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("libtorch_cpu lacks {} ({e})", $name))?
        };
    }
    let cuda_library = open_loaded("libtorch_cuda.so").ok();
    let current_cuda_stream = cuda_library.as_ref().and_then(|library| {
        // SAFETY: as declared in shim.h.
        unsafe { library.get(b"aoti_torch_get_current_cuda_stream\0") }.ok().map(|s| *s)
    });
    let device_type_cuda: unsafe extern "C" fn() -> i32 = symbol!(cpu_library, "aoti_torch_device_type_cuda");
    let device_type_cpu: unsafe extern "C" fn() -> i32 = symbol!(cpu_library, "aoti_torch_device_type_cpu");
    let tensor_type =
        torch.getattr("Tensor").and_then(|t| Ok(t.downcast_into::<PyType>()?)).map_err(error)?;
    let mut shim = TorchShim {
        get_data_ptr: symbol!(cpu_library, "aoti_torch_get_data_ptr"),
        get_dim: symbol!(cpu_library, "aoti_torch_get_dim"),
        get_sizes: symbol!(cpu_library, "aoti_torch_get_sizes"),
        get_strides: symbol!(cpu_library, "aoti_torch_get_strides"),
        get_dtype: symbol!(cpu_library, "aoti_torch_get_dtype"),
        get_device_type: symbol!(cpu_library, "aoti_torch_get_device_type"),
        get_device_index: symbol!(cpu_library, "aoti_torch_get_device_index"),
        current_cuda_stream,
        tensor_offset: 0,
        tensor_type: tensor_type.unbind(),
        // SAFETY: functions without arguments returning constants.
        device_type_cuda: unsafe { device_type_cuda() },
        device_type_cpu: unsafe { device_type_cpu() },
        _cpu_library: cpu_library,
        _cuda_library: cuda_library,
    };
    // torch.empty((3, 4, 5))[1:, ::2, 1:]: not contiguous and at an offset, so the shim
    // must get every field right
    let py = torch.py();
    let slices = (PySlice::new(py, 1, 3, 1), PySlice::new(py, 0, 4, 2), PySlice::new(py, 1, 5, 1));
    let sample = torch.call_method1("empty", ((3, 4, 5),)).and_then(|t| t.get_item(slices)).map_err(error)?;
    if !shim.is_tensor(&sample) {
        return Err("the sample is not a torch.Tensor".into());
    }
    shim.tensor_offset = tensor_offset(&sample)?;
    check_sample(&shim, &sample)?;
    // a subclass instance: the same THPVariable, so the same offset
    let parameter = torch.getattr("nn").and_then(|nn| nn.getattr("Parameter")).map_err(error)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("requires_grad", false).map_err(error)?;
    check_sample(&shim, &parameter.call((&sample,), Some(&kwargs)).map_err(error)?)?;
    Ok(shim)
}

/// Where the sample's `at::Tensor` is: the word after the object header that holds the
/// TensorImpl address `_cdata` reports.
fn tensor_offset(sample: &Bound<'_, PyAny>) -> Result<usize, String> {
    let error = |e: PyErr| e.to_string();
    let implementation: usize = sample.getattr("_cdata").map_err(error)?.extract().map_err(error)?;
    let basic_size: usize =
        sample.get_type().getattr("__basicsize__").map_err(error)?.extract().map_err(error)?;
    let word = std::mem::size_of::<usize>();
    // `at::Tensor` (torch >= 2.9?) or `MaybeOwned<at::Tensor>` = (bool, at::Tensor) before.
    for offset in [2 * word, 3 * word] {
        if offset + word > basic_size {
            break;
        }
        // SAFETY: within the object's fixed-size part.
        let value = unsafe { sample.as_ptr().cast::<u8>().add(offset).cast::<usize>().read_unaligned() };
        if value == implementation && value != 0 {
            return Ok(offset);
        }
    }
    Err("no word of the tensor object holds its TensorImpl address (_cdata)".into())
}

/// The shim's fields of the sample must be what Python reports.
fn check_sample(shim: &TorchShim, sample: &Bound<'_, PyAny>) -> Result<(), String> {
    let error = |e: PyErr| e.to_string();
    let data: u64 = sample.call_method0("data_ptr").map_err(error)?.extract().map_err(error)?;
    let shape: Vec<i64> = sample.getattr("shape").map_err(error)?.extract().map_err(error)?;
    let strides: Vec<i64> = sample.call_method0("stride").map_err(error)?.extract().map_err(error)?;
    let fields = shim.fields(sample).ok_or("the shim reports an error for the sample")?;
    if fields.data != data || fields.sizes != shape.as_slice() || fields.strides != strides.as_slice() {
        return Err(format!(
            "the shim reads the sample as data {:#x}, sizes {:?}, strides {:?}; Python says {data:#x}, {shape:?}, {strides:?}",
            fields.data, fields.sizes, fields.strides
        ));
    }
    Ok(())
}

/// load_torch_shim(torch) -> str: start reading tensors through torch's C shim (the
/// launcher does this itself); "" when it is in use, else why not. torch must be imported
/// (its libraries are found among those already loaded).
#[pyfunction]
pub fn load_torch_shim(torch: &Bound<'_, PyAny>) -> String {
    match load(torch) {
        Ok(_) => String::new(),
        Err(reason) => reason.to_string(),
    }
}

/// tensor_codes(tensor) -> (dtype, device_type): torch's numbers for the tensor's
/// ScalarType and DeviceType, as the launcher compares them (None without the shim).
#[pyfunction]
pub fn tensor_codes(tensor: &Bound<'_, PyAny>) -> Option<(i32, i32)> {
    let Some(Ok(shim)) = SHIM.get() else { return None };
    if !shim.is_tensor(tensor) {
        return None;
    }
    shim.fields(tensor).map(|fields| (fields.dtype, fields.device_type))
}
