//! The native CUDA driver path: libcuda opened at run time, cubins loaded, kernels launched.
//!
//! Launching through cuda-bindings costs ~11 µs per call on the H200 (its argument packing
//! is Python); here one call packs the arguments and calls `cuLaunchKernel`. libcuda is
//! opened on first use, so the extension imports on machines without a driver; every
//! function then reports why no GPU is usable instead of failing at import.
//! `cuTensorMapEncodeTiled` (CUDA 12.0) is optional: without it only kernels with tensor
//! maps fail, at their first launch.
//!
//! The seam (see `python/tilers/_tilers.pyi`): `driver_status`, `device_attribute`,
//! `device_name`, `load_function` and `launch`. Handles (contexts, modules, functions,
//! streams) cross it as plain integers, the same values cuda-bindings' `int(handle)` gives.

use crate::tensor_map::{EncodeArgs, EncodedMap};
use libloading::Library;
use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::{Mutex, OnceLock};
// Dynamic shared memory a kernel may use without opting in: KernelInfo's `shared_opt_in`
// is `shared_bytes` over it.
use tile_codegen::kernel_info::DEFAULT_SHARED_LIMIT;

type CuResult = c_int;
type Handle = *mut c_void;

const CUDA_SUCCESS: CuResult = 0;
/// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
const MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
/// CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: a function compiled with
/// `__cluster_dims__` of more than 8 blocks (the portable size) launches only once set.
const NON_PORTABLE_CLUSTER_SIZE_ALLOWED: c_int = 14;
/// The most blocks a cluster may have everywhere (the portable size).
const PORTABLE_CLUSTER_BLOCKS: u32 = 8;
/// Arguments packed on the stack; kernels with more use the heap.
pub(crate) const STACK_ARGS: usize = 32;

/// The driver entry points tilers uses, resolved once from libcuda.
pub(crate) struct Driver {
    _library: Library,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult,
    driver_get_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut Handle, c_int) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut Handle) -> CuResult,
    ctx_push_current: unsafe extern "C" fn(Handle) -> CuResult,
    ctx_pop_current: unsafe extern "C" fn(*mut Handle) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult,
    func_set_attribute: unsafe extern "C" fn(Handle, c_int, c_int) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Handle,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    /// `cuLaunchKernelEx` (CUDA 12.0): launches with attributes (a programmatic dependent
    /// launch); None where the driver is older, where every kernel launches plainly.
    launch_kernel_ex: Option<LaunchKernelEx>,
    /// `cuTensorMapEncodeTiled` (CUDA 12.0): None where the driver is older, which only
    /// kernels with tensor maps need.
    tensor_map_encode_tiled: Option<EncodeTiled>,
    /// `cuOccupancyMaxActiveClusters` (CUDA 12.0): how many clusters of a clustered kernel
    /// run at once (its persistent grid); None where the driver is older.
    occupancy_max_active_clusters: Option<MaxActiveClusters>,
}

/// `CUlaunchConfig`: grid, block, dynamic shared bytes, stream, launch attributes.
#[repr(C)]
struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_bytes: c_uint,
    stream: Handle,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

/// `CUlaunchAttribute`: an id (a C enum), padding to 8 bytes, and a 64-byte value union.
#[repr(C)]
struct LaunchAttribute {
    id: c_uint,
    pad: [u8; 4],
    value: [u64; 8],
}

/// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the kernel may start before the
/// one before it on the stream ends (its `griddepcontrol.wait` waits for that one);
/// the value's first int is `programmaticStreamSerializationAllowed`.
const PROGRAMMATIC_STREAM_SERIALIZATION: c_uint = 6;

/// `cuLaunchKernelEx(config, f, kernelParams, extra)`.
type LaunchKernelEx =
    unsafe extern "C" fn(*const LaunchConfig, Handle, *mut *mut c_void, *mut *mut c_void) -> CuResult;

/// Whether kernels that wait for the ones before them in their call (KernelInfo
/// `dependent_launch`) are launched as programmatic dependents; `set_dependent_launch`.
static DEPENDENT_LAUNCH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether dependent launches are on (see `set_dependent_launch`).
pub(crate) fn dependent_launch_enabled() -> bool {
    DEPENDENT_LAUNCH.load(std::sync::atomic::Ordering::Relaxed)
}

/// set_dependent_launch(enabled) -> bool: whether the later kernels of a call of several
/// kernels may start while the kernel before them runs (programmatic dependent launch, on
/// by default where the driver has `cuLaunchKernelEx`); returns the previous setting. Off,
/// every kernel starts after the one before it ended (its `griddepcontrol` instructions
/// are no-ops): for comparing the two, or ruling the feature out.
#[pyfunction]
pub fn set_dependent_launch(enabled: bool) -> bool {
    DEPENDENT_LAUNCH.swap(enabled, std::sync::atomic::Ordering::Relaxed)
}

/// `cuOccupancyMaxActiveClusters(numClusters, func, config)`.
type MaxActiveClusters = unsafe extern "C" fn(*mut c_int, Handle, *const LaunchConfig) -> CuResult;

/// `cuTensorMapEncodeTiled(tensorMap, tensorDataType, tensorRank, globalAddress,
/// globalDim, globalStrides, boxDim, elementStrides, interleave, swizzle, l2Promotion,
/// oobFill)`; the enums are C enums (int-sized).
type EncodeTiled = unsafe extern "C" fn(
    *mut EncodedMap,
    c_uint,
    u32,
    *mut c_void,
    *const u64,
    *const u64,
    *const u32,
    *const u32,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
) -> CuResult;

// SAFETY: the driver API is thread-safe; the struct holds only function pointers and the
// library that keeps them valid.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

const LIBRARY: &str = if cfg!(windows) { "nvcuda.dll" } else { "libcuda.so.1" };

fn open_driver() -> Result<Driver, String> {
    // SAFETY: loading libcuda runs its initialisers, which have no preconditions.
    let library = unsafe { Library::new(LIBRARY) }
        .map_err(|e| format!("the CUDA driver library {LIBRARY} could not be loaded ({e})"))?;
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: the types above are the driver API's declared signatures.
            *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{LIBRARY} lacks {} ({e})", $name))?
        };
    }
    let init: unsafe extern "C" fn(c_uint) -> CuResult = symbol!("cuInit");
    // SAFETY: EncodeTiled is the driver API's declared signature.
    let tensor_map_encode_tiled: Option<EncodeTiled> =
        unsafe { library.get::<EncodeTiled>(b"cuTensorMapEncodeTiled\0") }.ok().map(|symbol| *symbol);
    // SAFETY: MaxActiveClusters is the driver API's declared signature.
    // SAFETY: the declared signature of cuLaunchKernelEx (CUDA 12.0).
    let launch_kernel_ex: Option<LaunchKernelEx> =
        unsafe { library.get::<LaunchKernelEx>(b"cuLaunchKernelEx\0") }.ok().map(|f| *f);
    let occupancy_max_active_clusters: Option<MaxActiveClusters> =
        unsafe { library.get::<MaxActiveClusters>(b"cuOccupancyMaxActiveClusters\0") }
            .ok()
            .map(|symbol| *symbol);
    let driver = Driver {
        device_get_count: symbol!("cuDeviceGetCount"),
        device_get: symbol!("cuDeviceGet"),
        device_get_attribute: symbol!("cuDeviceGetAttribute"),
        device_get_name: symbol!("cuDeviceGetName"),
        driver_get_version: symbol!("cuDriverGetVersion"),
        primary_ctx_retain: symbol!("cuDevicePrimaryCtxRetain"),
        ctx_get_current: symbol!("cuCtxGetCurrent"),
        ctx_push_current: symbol!("cuCtxPushCurrent_v2"),
        ctx_pop_current: symbol!("cuCtxPopCurrent_v2"),
        module_load_data: symbol!("cuModuleLoadData"),
        module_get_function: symbol!("cuModuleGetFunction"),
        func_set_attribute: symbol!("cuFuncSetAttribute"),
        launch_kernel: symbol!("cuLaunchKernel"),
        get_error_name: symbol!("cuGetErrorName"),
        launch_kernel_ex,
        tensor_map_encode_tiled,
        occupancy_max_active_clusters,
        _library: library,
    };
    // SAFETY: cuInit may be called any number of times, from any thread.
    let status = unsafe { init(0) };
    if status != CUDA_SUCCESS {
        return Err(format!("cuInit failed with {}", driver.error_name(status)));
    }
    Ok(driver)
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// The driver, opened and initialised on first use.
pub(crate) fn driver() -> PyResult<&'static Driver> {
    match DRIVER.get_or_init(open_driver) {
        Ok(driver) => Ok(driver),
        Err(reason) => Err(PyRuntimeError::new_err(format!("no usable CUDA driver: {reason}"))),
    }
}

impl Driver {
    fn error_name(&self, status: CuResult) -> String {
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or fails.
        let found = unsafe { (self.get_error_name)(status, &mut name) };
        if found != CUDA_SUCCESS || name.is_null() {
            return format!("CUDA error {status}");
        }
        // SAFETY: a NUL-terminated static string from the driver.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }

    fn check(&self, status: CuResult, call: &str) -> PyResult<()> {
        if status == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(PyRuntimeError::new_err(format!("{call} failed with {}", self.error_name(status))))
        }
    }

    fn device(&self, ordinal: i32) -> PyResult<c_int> {
        let mut device = 0;
        // SAFETY: writes one int.
        self.check(unsafe { (self.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
        Ok(device)
    }

    /// Make `context` current unless it already is; return whether it was pushed.
    fn push_unless_current(&self, context: Handle) -> PyResult<bool> {
        let mut current = null_mut();
        // SAFETY: writes one handle.
        self.check(unsafe { (self.ctx_get_current)(&mut current) }, "cuCtxGetCurrent")?;
        if current == context {
            return Ok(false);
        }
        // SAFETY: `context` is a retained primary context.
        self.check(unsafe { (self.ctx_push_current)(context) }, "cuCtxPushCurrent")?;
        Ok(true)
    }

    fn pop(&self) -> PyResult<()> {
        let mut popped = null_mut();
        // SAFETY: pops the context this thread pushed.
        self.check(unsafe { (self.ctx_pop_current)(&mut popped) }, "cuCtxPopCurrent")
    }

    /// Encode one tensor map with `context` current (0: the current one). A RuntimeError
    /// says what failed: the driver's error name, or a driver without the function.
    pub(crate) fn encode_tensor_map(&self, context: usize, args: &EncodeArgs) -> PyResult<EncodedMap> {
        let Some(encode) = self.tensor_map_encode_tiled else {
            return Err(PyRuntimeError::new_err(
                "this CUDA driver has no cuTensorMapEncodeTiled (tensor maps need CUDA 12.0 or newer)",
            ));
        };
        let context = context as Handle;
        let pushed = !context.is_null() && self.push_unless_current(context)?;
        let mut map = EncodedMap::ZERO;
        // SAFETY: `map` is 128 bytes, 64-byte aligned; each array holds at least `rank`
        // entries (`global_strides` rank - 1), all valid for the call.
        let status = unsafe {
            encode(
                &mut map,
                args.data_type,
                args.rank,
                args.global_address as *mut c_void,
                args.global_dim.as_ptr(),
                args.global_strides.as_ptr(),
                args.box_dim.as_ptr(),
                args.element_strides.as_ptr(),
                args.interleave,
                args.swizzle,
                args.l2_promotion,
                args.oob_fill,
            )
        };
        if pushed {
            self.pop()?;
        }
        self.check(status, "cuTensorMapEncodeTiled")?;
        Ok(map)
    }
}

/// Primary contexts by device ordinal: retained once, never released, so they outlive
/// every module loaded into them (torch uses the same ones).
static CONTEXTS: Mutex<Option<HashMap<i32, usize>>> = Mutex::new(None);

fn primary_context(driver: &Driver, ordinal: i32) -> PyResult<Handle> {
    let mut contexts = CONTEXTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let contexts = contexts.get_or_insert_with(HashMap::new);
    if let Some(&context) = contexts.get(&ordinal) {
        return Ok(context as Handle);
    }
    let device = driver.device(ordinal)?;
    let mut context = null_mut();
    // SAFETY: writes one handle.
    let status = unsafe { (driver.primary_ctx_retain)(&mut context, device) };
    driver.check(status, "cuDevicePrimaryCtxRetain")?;
    contexts.insert(ordinal, context as usize);
    Ok(context)
}

/// driver_status() -> (device_count, reason): how many CUDA devices are usable, and why
/// none is ("" when some are). Opens libcuda on the first call.
#[pyfunction]
pub fn driver_status() -> (i32, String) {
    let driver = match DRIVER.get_or_init(open_driver) {
        Ok(driver) => driver,
        Err(reason) => return (0, reason.clone()),
    };
    let mut count = 0;
    // SAFETY: writes one int.
    let status = unsafe { (driver.device_get_count)(&mut count) };
    if status != CUDA_SUCCESS {
        return (0, format!("cuDeviceGetCount failed with {}", driver.error_name(status)));
    }
    if count == 0 {
        return (0, "the CUDA driver reports no devices".to_string());
    }
    (count, String::new())
}

/// driver_version() -> int, e.g. 13000 for CUDA 13.0.
#[pyfunction]
pub fn driver_version() -> PyResult<i32> {
    let driver = driver()?;
    let mut version = 0;
    // SAFETY: writes one int.
    driver.check(unsafe { (driver.driver_get_version)(&mut version) }, "cuDriverGetVersion")?;
    Ok(version)
}

/// device_attribute(device, attribute) -> int: cuDeviceGetAttribute (a CUdevice_attribute number).
#[pyfunction]
pub fn device_attribute(device: i32, attribute: i32) -> PyResult<i32> {
    let driver = driver()?;
    let handle = driver.device(device)?;
    let mut value = 0;
    // SAFETY: writes one int.
    let status = unsafe { (driver.device_get_attribute)(&mut value, attribute, handle) };
    driver.check(status, "cuDeviceGetAttribute")?;
    Ok(value)
}

/// device_name(device) -> str, e.g. "NVIDIA H200".
#[pyfunction]
pub fn device_name(device: i32) -> PyResult<String> {
    let driver = driver()?;
    let handle = driver.device(device)?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    let status = unsafe { (driver.device_get_name)(name.as_mut_ptr(), 256, handle) };
    driver.check(status, "cuDeviceGetName")?;
    // SAFETY: NUL-terminated within the buffer.
    Ok(unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
}

/// load_function(device, cubin, entry, shared_bytes, cluster_blocks=1) -> (context, module,
/// function): load `cubin` into the device's primary context and look up `entry`, raising the
/// function's dynamic shared memory limit when it needs more than 48 KiB and allowing a
/// cluster of more than 8 blocks (compiled in) when it has one. The GIL is released while the
/// driver loads the image.
#[pyfunction]
#[pyo3(signature = (device, cubin, entry, shared_bytes, cluster_blocks = 1))]
pub fn load_function(
    py: Python<'_>,
    device: i32,
    cubin: &[u8],
    entry: &str,
    shared_bytes: u32,
    cluster_blocks: u32,
) -> PyResult<(usize, usize, usize)> {
    let driver = driver()?;
    let entry = CString::new(entry).map_err(|_| PyValueError::new_err("entry name contains NUL"))?;
    let context = primary_context(driver, device)? as usize;
    py.allow_threads(|| {
        let pushed = driver.push_unless_current(context as Handle)?;
        let loaded = load_into_current(driver, cubin, &entry, shared_bytes, cluster_blocks);
        if pushed {
            driver.pop()?;
        }
        let (module, function) = loaded?;
        Ok((context, module, function))
    })
}

fn load_into_current(
    driver: &Driver,
    cubin: &[u8],
    entry: &CStr,
    shared_bytes: u32,
    cluster_blocks: u32,
) -> PyResult<(usize, usize)> {
    let mut module = null_mut();
    // SAFETY: `cubin` is an ELF image that lives for the call; the driver copies it.
    let status = unsafe { (driver.module_load_data)(&mut module, cubin.as_ptr().cast()) };
    driver.check(status, "cuModuleLoadData")?;
    let mut function = null_mut();
    // SAFETY: `module` was just loaded; `entry` is NUL-terminated.
    let status = unsafe { (driver.module_get_function)(&mut function, module, entry.as_ptr()) };
    driver.check(status, "cuModuleGetFunction")?;
    if shared_bytes > DEFAULT_SHARED_LIMIT {
        let limit =
            c_int::try_from(shared_bytes).map_err(|_| PyValueError::new_err("shared_bytes is over 2^31"))?;
        // SAFETY: a valid function handle and attribute.
        let status = unsafe { (driver.func_set_attribute)(function, MAX_DYNAMIC_SHARED_SIZE_BYTES, limit) };
        driver.check(status, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")?;
    }
    if cluster_blocks > PORTABLE_CLUSTER_BLOCKS {
        // SAFETY: a valid function handle and attribute.
        let status = unsafe { (driver.func_set_attribute)(function, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) };
        driver.check(status, "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")?;
    }
    Ok((module as usize, function as usize))
}

/// Write one argument into its 8-byte slot, as the kernel parameter of `kind` reads it
/// (little-endian: the value's bytes start the slot).
fn pack(arg: &Bound<'_, PyAny>, kind: u8) -> PyResult<u64> {
    let py = arg.py();
    let slot = match kind {
        // a tensor: its data_ptr()
        b'T' => arg.call_method0(intern!(py, "data_ptr"))?.extract::<u64>()?,
        // a device pointer given as an int
        b'P' => arg.extract::<u64>()?,
        b'?' => arg.extract::<bool>()? as u64,
        b'b' => arg.extract::<i8>()? as u8 as u64,
        b'B' => arg.extract::<u8>()? as u64,
        b'h' => arg.extract::<i16>()? as u16 as u64,
        b'H' => arg.extract::<u16>()? as u64,
        b'i' => arg.extract::<i32>()? as u32 as u64,
        b'I' => arg.extract::<u32>()? as u64,
        b'q' => arg.extract::<i64>()? as u64,
        b'Q' => arg.extract::<u64>()?,
        b'f' => {
            let value = arg.extract::<f64>()?;
            let narrowed = value as f32;
            if value.is_finite() && !narrowed.is_finite() {
                return Err(PyOverflowError::new_err(format!("{value} does not fit in float32")));
            }
            narrowed.to_bits() as u64
        }
        b'd' => arg.extract::<f64>()?.to_bits(),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown kind {:?} (expected one of T P ? b B h H i I q Q f d)",
                other as char
            )))
        }
    };
    Ok(slot)
}

/// Kernel parameters for cuLaunchKernel: `pointers[i]` points at `slots[i]`.
struct Packed<'a> {
    slots: &'a mut [u64],
    pointers: &'a mut [*mut c_void],
}

/// Raw pointers that cross `allow_threads`; they point into the caller's stack frame,
/// which outlives the closure.
pub(crate) struct Launch {
    pub function: usize,
    pub context: usize,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
    pub stream: usize,
    pub parameters: usize,
    /// Launch as a programmatic dependent of the kernel before it on the stream (the
    /// kernel waits for it with `griddepcontrol.wait`); plainly where the driver cannot.
    pub dependent: bool,
}

fn fill(args: &Bound<'_, PyAny>, kinds: &[u8], packed: &mut Packed<'_>) -> PyResult<()> {
    let mut store = |index: usize, arg: &Bound<'_, PyAny>| -> PyResult<()> {
        packed.slots[index] = pack(arg, kinds[index]).map_err(|error| {
            let py = arg.py();
            let message = format!("argument {index}: {}", error.value(py));
            if error.is_instance_of::<PyOverflowError>(py) {
                PyOverflowError::new_err(message)
            } else if error.is_instance_of::<PyValueError>(py) {
                PyValueError::new_err(message)
            } else {
                PyTypeError::new_err(message)
            }
        })?;
        Ok(())
    };
    if let Ok(tuple) = args.downcast::<PyTuple>() {
        for (index, arg) in tuple.iter().enumerate() {
            store(index, &arg)?;
        }
    } else if let Ok(list) = args.downcast::<PyList>() {
        for (index, arg) in list.iter().enumerate() {
            store(index, &arg)?;
        }
    } else {
        return Err(PyTypeError::new_err("launch: args must be a tuple or a list"));
    }
    for (pointer, slot) in packed.pointers.iter_mut().zip(packed.slots.iter_mut()) {
        *pointer = (slot as *mut u64).cast();
    }
    Ok(())
}

/// How many clusters of `function` (compiled with `__cluster_dims__`, blocks of `block`
/// threads and `shared_bytes` of dynamic shared memory) can run at once on the device of
/// `context`; None where the driver cannot say.
pub(crate) fn max_active_clusters(
    driver: &Driver,
    context: usize,
    function: usize,
    block: [u32; 3],
    shared_bytes: u32,
    cluster: u32,
) -> PyResult<Option<u32>> {
    let Some(query) = driver.occupancy_max_active_clusters else { return Ok(None) };
    let pushed = context != 0 && driver.push_unless_current(context as Handle)?;
    // the cluster size is the function's own (compiled in): no launch attribute
    let config = LaunchConfig {
        grid: [cluster, 1, 1],
        block,
        shared_bytes,
        stream: null_mut(),
        attrs: null_mut(),
        num_attrs: 0,
    };
    let mut clusters: c_int = 0;
    // SAFETY: a loaded function and a config that lives for the call; writes one int.
    let status = unsafe { query(&mut clusters, function as Handle, &config) };
    if pushed {
        driver.pop()?;
    }
    Ok((status == CUDA_SUCCESS && clusters > 0).then_some(clusters as u32))
}

pub(crate) fn run(driver: &Driver, launch: Launch) -> PyResult<()> {
    let context = launch.context as Handle;
    let pushed = !context.is_null() && driver.push_unless_current(context)?;
    let (gx, gy, gz) = launch.grid;
    let (bx, by, bz) = launch.block;
    if let (true, Some(launch_ex)) = (launch.dependent, driver.launch_kernel_ex) {
        let mut attribute =
            LaunchAttribute { id: PROGRAMMATIC_STREAM_SERIALIZATION, pad: [0; 4], value: [0; 8] };
        attribute.value[0] = 1; // programmaticStreamSerializationAllowed (an int, little-endian)
        let config = LaunchConfig {
            grid: [gx, gy, gz],
            block: [bx, by, bz],
            shared_bytes: launch.shared_bytes,
            stream: launch.stream as Handle,
            attrs: (&mut attribute as *mut LaunchAttribute).cast(),
            num_attrs: 1,
        };
        // SAFETY: as cuLaunchKernel below; the config and its attribute outlive the call.
        let status = unsafe {
            launch_ex(&config, launch.function as Handle, launch.parameters as *mut *mut c_void, null_mut())
        };
        if pushed {
            driver.pop()?;
        }
        return driver.check(status, "cuLaunchKernelEx");
    }
    // SAFETY: a loaded function; `parameters` holds one pointer per kernel parameter, each
    // to 8 bytes that start with the parameter's value; both outlive the call.
    let status = unsafe {
        (driver.launch_kernel)(
            launch.function as Handle,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            launch.shared_bytes,
            launch.stream as Handle,
            launch.parameters as *mut *mut c_void,
            null_mut(),
        )
    };
    if pushed {
        driver.pop()?;
    }
    driver.check(status, "cuLaunchKernel")
}

/// launch(function, context, grid, block, shared_bytes, stream, args, kinds): launch a
/// loaded function on `stream` (0: the legacy default stream).
///
/// `kinds` has one byte per argument: `T` a tensor (its `data_ptr()` is read), `P` a
/// device pointer as an int, or a scalar passed by value: `?` bool, `b`/`B` int8/uint8,
/// `h`/`H` int16/uint16, `i`/`I` int32/uint32, `q`/`Q` int64/uint64, `f` float32, `d`
/// float64 (Python's `struct` letters). `context` is
/// made current for the launch unless it already is (0: use the current one). Allocates
/// nothing on the device, never synchronizes, and releases the GIL around cuLaunchKernel
/// (which blocks when the launch queue is full).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn launch(
    py: Python<'_>,
    function: usize,
    context: usize,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_bytes: u32,
    stream: usize,
    args: &Bound<'_, PyAny>,
    kinds: &[u8],
) -> PyResult<()> {
    let count = args.len()?;
    if count != kinds.len() {
        return Err(PyValueError::new_err(format!("launch: {count} arguments but {} kinds", kinds.len())));
    }
    let mut stack_slots = [0u64; STACK_ARGS];
    let mut stack_pointers = [null_mut::<c_void>(); STACK_ARGS];
    let mut heap_slots = Vec::new();
    let mut heap_pointers = Vec::new();
    let mut packed = if count <= STACK_ARGS {
        Packed { slots: &mut stack_slots[..count], pointers: &mut stack_pointers[..count] }
    } else {
        heap_slots.resize(count, 0u64);
        heap_pointers.resize(count, null_mut());
        Packed { slots: &mut heap_slots, pointers: &mut heap_pointers }
    };
    fill(args, kinds, &mut packed)?;
    let driver = driver()?;
    let launch = Launch {
        function,
        context,
        grid,
        block,
        shared_bytes,
        stream,
        parameters: packed.pointers.as_mut_ptr() as usize,
        dependent: false,
    };
    py.allow_threads(move || run(driver, launch))
}
