"""Everything that touches CUDA: target resolution, NVRTC, module loading, grids and launches."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import sys

# `import tilers` must not load the CUDA libraries or torch: every import of
# `cuda.bindings` and `torch` in this file sits inside the function that needs it.

DEFAULT_ARCH = "sm_90a"

# The largest dynamic shared memory a kernel may use without opting in.
DEFAULT_SHARED_LIMIT = 48 * 1024

MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535

_ARCH_PATTERN = re.compile(r"sm_(\d)(\d{1,2})([af]?)")

_driver_module = None


def _driver():
    """cuda.bindings.driver, imported on first use and then kept (launches call this)."""
    global _driver_module
    if _driver_module is None:
        from cuda.bindings import driver

        _driver_module = driver
    return _driver_module


# --- the native driver path (crates/tile-py/src/launch.rs) ------------------------------
# Probing, loading and launching go through the extension, which opens libcuda itself:
# importing cuda.bindings costs ~0.1 s and its cuLaunchKernel ~11 µs a call. cuda-bindings
# stays the route for NVRTC, and for everything else when TILERS_NATIVE_DRIVER=0 (the
# reference path that bench/launch.py compares against).

_native_module = None


def native():
    """The extension module when it carries the native driver path (and it is enabled)."""
    global _native_module
    if _native_module is None:
        import os

        from tilers import _tilers

        enabled = os.environ.get("TILERS_NATIVE_DRIVER", "1") != "0"
        _native_module = _tilers if enabled and hasattr(_tilers, "launch") else False
    return _native_module or None


# CUdevice_attribute numbers (cuda.h)
ATTRIBUTE_CLOCK_RATE = 13
ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
ATTRIBUTE_MEMORY_CLOCK_RATE = 36
ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37
ATTRIBUTE_L2_CACHE_SIZE = 38
ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


def device_attribute(device_index: int, attribute: int) -> int:
    """cuDeviceGetAttribute for one of the ATTRIBUTE_* numbers above."""
    module = native()
    if module is not None:
        return module.device_attribute(device_index, attribute)
    driver = _driver()
    _init_driver()
    device = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
    return _check(
        driver.cuDeviceGetAttribute(driver.CUdevice_attribute(attribute), device),
        "cuDeviceGetAttribute",
    )


# ---------------------------------------------------------------------------------------
# GPU discovery and targets
# ---------------------------------------------------------------------------------------


@functools.cache
def gpu_probe() -> tuple[int, str]:
    """Return (number of usable CUDA devices, why none is usable or "").

    Cheap: it loads libcuda through cuda-bindings and asks the driver, nothing more.
    A missing cuda-bindings, a missing libcuda or a driver error all mean "no GPU".
    """
    module = native()
    if module is not None:
        count, reason = module.driver_status()
        return count, reason
    try:
        from cuda.bindings import driver
    except ImportError as error:
        return 0, f"cuda-bindings is not installed ({error})"
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as error:  # cuda-bindings raises this when libcuda.so cannot load
        return 0, f"the CUDA driver library could not be loaded ({error})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return 0, f"cuInit failed with {_error_name(err)}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS:
        return 0, f"cuDeviceGetCount failed with {_error_name(err)}"
    if count == 0:
        return 0, "the CUDA driver reports no devices"
    return count, ""


def gpu_available() -> bool:
    """Whether at least one CUDA GPU is usable (cached after the first call)."""
    return gpu_probe()[0] > 0


def arch_of_capability(major: int, minor: int) -> str:
    """The architecture string tilers compiles for on a device of this compute capability.

    From Hopper on, the architecture-specific variant (`sm_90a`) unlocks wgmma, TMA
    multicast and the like; a cubin built for it runs on exactly that chip.
    """
    suffix = "a" if major >= 9 else ""
    return f"sm_{major}{minor}{suffix}"


@functools.cache
def device_arch(device_index: int) -> str:
    """The architecture string of CUDA device `device_index`, e.g. "sm_90a" on an H200."""
    major = device_attribute(device_index, ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = device_attribute(device_index, ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    return arch_of_capability(major, minor)


@functools.cache
def device_name(device_index: int) -> str:
    """The marketing name of CUDA device `device_index`, e.g. "NVIDIA H200"."""
    module = native()
    if module is not None:
        return module.device_name(device_index)
    driver = _driver()
    _init_driver()
    device = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
    raw = _check(driver.cuDeviceGetName(256, device), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _current_device_index() -> int:
    """torch's current device when torch is already loaded and initialized, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def resolve_target(target: str) -> str:
    """Turn a user's `target=` into the architecture string to compile for.

    "auto" (or "cuda") picks the current GPU's architecture, or "sm_90a" where no GPU is
    usable; "cuda:sm_80", "cuda:sm_90a" and plain "sm_90a" name one explicitly.

    >>> resolve_target("cuda:sm_80")
    'sm_80'
    """
    if target == "interp":
        # the interpreter runs the tile program; CUDA is still generated (for kernel.source)
        return DEFAULT_ARCH
    if target in ("auto", "cuda"):
        if gpu_available():
            return device_arch(_current_device_index())
        return DEFAULT_ARCH
    arch = target.removeprefix("cuda:") if isinstance(target, str) else None
    if arch is None or not _ARCH_PATTERN.fullmatch(arch):
        raise ValueError(
            "parameter 'target': expected \"auto\", \"interp\", \"cuda:sm_XX\" or \"sm_XX\" "
            f"(e.g. \"cuda:sm_90a\", \"sm_80\"), got {target!r}"
        )
    return arch


def cubin_runs_on(arch: str, device: str) -> bool:
    """Whether a cubin built for `arch` loads on a device whose own arch is `device`.

    A cubin runs on its own major version at an equal or later minor version (sm_80 on
    sm_86); an arch-specific cubin (`sm_90a`) runs only on exactly that chip.
    """
    built = _ARCH_PATTERN.fullmatch(arch)
    present = _ARCH_PATTERN.fullmatch(device)
    if built is None or present is None:
        return False
    built_major, built_minor, built_suffix = built.groups()
    major, minor, _ = present.groups()
    if built_major != major:
        return False
    if built_suffix == "a":
        return built_minor == minor
    return int(built_minor) <= int(minor)


# ---------------------------------------------------------------------------------------
# NVRTC
# ---------------------------------------------------------------------------------------


def _nvrtc():
    """Import cuda.bindings.nvrtc with a message that says what to install."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise RuntimeError(
            "tilers needs NVRTC to compile kernels: pip install 'cuda-bindings>=13,<14' "
            f"'nvidia-cuda-nvrtc==13.0.*' ({error})"
        ) from error
    return nvrtc


def _nvrtc_check(result, call: str):
    """Unpack an NVRTC result tuple, raising RuntimeError on failure."""
    nvrtc = _nvrtc()
    err, *values = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, message = nvrtc.nvrtcGetErrorString(err)
        raise RuntimeError(f"{call} failed: {message.decode(errors='replace')}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """The version of the NVRTC library in use, e.g. (13, 0)."""
    nvrtc = _nvrtc()
    try:
        major, minor = _nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    except RuntimeError as error:
        raise RuntimeError(
            "libnvrtc could not be loaded: pip install 'nvidia-cuda-nvrtc==13.0.*' "
            f"({error})"
        ) from error
    return major, minor


def nvrtc_options(arch: str, lineinfo: bool = False, fast_math: bool = False) -> list[str]:
    """The NVRTC command line for compiling generated CUDA to a cubin for `arch`."""
    # A real architecture (`sm_XX`, not `compute_XX`) makes NVRTC emit SASS, so the
    # result is a cubin: PTX from a newer NVRTC is refused by an older driver.
    options = [f"-arch={arch}", "-std=c++17"]
    if lineinfo:
        options.append("-lineinfo")
    if fast_math:
        options.append("--use_fast_math")
    return options


def nvrtc_compile(
    source: str, arch: str, name: str, lineinfo: bool = False, fast_math: bool = False
) -> bytes:
    """Compile CUDA C++ `source` for `arch` (e.g. "sm_90a") with NVRTC; return the cubin.

    `name` names the program in NVRTC's messages. A compile error is a tilers bug (the
    generated CUDA should always compile) and raises `TileError` with NVRTC's log.
    """
    nvrtc = _nvrtc()
    nvrtc_version()  # a clear error when libnvrtc cannot be loaded
    options = nvrtc_options(arch, lineinfo=lineinfo, fast_math=fast_math)
    program = _nvrtc_check(
        nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        (err,) = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, message = nvrtc.nvrtcGetErrorString(err)
            log = _program_log(program)
            from tilers.errors import TileError

            raise TileError(
                f"NVRTC could not compile kernel '{name}' for {arch} "
                f"({message.decode(errors='replace')}); this is a tilers bug: the generated "
                f"CUDA did not compile. NVRTC options: {' '.join(options)}\n{log}"
            )
        size = _nvrtc_check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _nvrtc_check(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _program_log(program) -> str:
    nvrtc = _nvrtc()
    size = _nvrtc_check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
    log = b" " * size
    _nvrtc_check(nvrtc.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog")
    return log.rstrip(b"\0").decode(errors="replace").strip()


# ---------------------------------------------------------------------------------------
# Driver API: contexts, modules, launches
# ---------------------------------------------------------------------------------------


def _error_name(err) -> str:
    driver = _driver()
    status, name = driver.cuGetErrorName(err)
    if status != driver.CUresult.CUDA_SUCCESS or name is None:
        return str(err)
    return name.decode()


def _check(result, call: str):
    """Unpack a cuda-bindings driver result tuple, raising RuntimeError on failure."""
    driver = _driver()
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{call} failed with {_error_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def _init_driver() -> None:
    driver = _driver()
    _check(driver.cuInit(0), "cuInit")


@functools.cache
def primary_context(device_index: int):
    """The primary context of a device: the one the CUDA runtime, and so torch, uses.

    Retained once and never released, so it outlives every module loaded into it.
    """
    driver = _driver()
    _init_driver()
    device = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
    return _check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")


class _CurrentContext:
    """Make a context current for a `with` block, and restore the previous one after.

    When torch already made it current on this thread (the usual case), nothing is
    pushed, so the common path costs one cuCtxGetCurrent.
    """

    def __init__(self, context):
        self.context = context
        self.pushed = False

    def __enter__(self):
        self.pushed = _make_current(self.context, int(self.context))
        return self

    def __exit__(self, *exc_info):
        if self.pushed:
            _check(_driver().cuCtxPopCurrent(), "cuCtxPopCurrent")
        return False


def _make_current(context, handle: int) -> bool:
    """Push `context` unless it is already current; return whether it was pushed."""
    driver = _driver()
    err, current = driver.cuCtxGetCurrent()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuCtxGetCurrent failed with {_error_name(err)}")
    if current is not None and int(current) == handle:
        return False
    _check(driver.cuCtxPushCurrent(context), "cuCtxPushCurrent")
    return True


class LoadedKernel:
    """A kernel function loaded into one device's primary context, ready to launch.

    `native`: loaded by the extension (context, module and function are ints, launched
    with `_tilers.launch`), else by cuda-bindings (its handle objects).
    """

    def __init__(
        self, device_index: int, context, module, function, shared_bytes: int, native=False
    ):
        self.device_index = device_index
        self.context = context
        self.context_handle = int(context)
        self.module = module
        self.function = function
        self.function_handle = int(function)
        self.shared_bytes = shared_bytes
        self.native = native


# (device index, cubin hash, entry) -> LoadedKernel
_loaded_kernels: dict[tuple[int, str, str], LoadedKernel] = {}


def load_kernel(device_index: int, cubin: bytes, entry: str, shared_bytes: int) -> LoadedKernel:
    """Load `cubin` into the primary context of `device_index` and look up `entry`.

    Cached per (device, cubin hash, entry name). Raises the kernel's dynamic shared
    memory limit when it needs more than the default 48 KiB.
    """
    key = (device_index, hashlib.sha256(cubin).hexdigest(), entry)
    loaded = _loaded_kernels.get(key)
    if loaded is not None:
        return loaded
    native_module = native()
    if native_module is not None:
        context, module, function = native_module.load_function(
            device_index, cubin, entry, shared_bytes
        )
        loaded = LoadedKernel(device_index, context, module, function, shared_bytes, True)
        _loaded_kernels[key] = loaded
        return loaded
    driver = _driver()
    context = primary_context(device_index)
    with _CurrentContext(context):
        module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        function = _check(driver.cuModuleGetFunction(module, entry.encode()), "cuModuleGetFunction")
        if shared_bytes > DEFAULT_SHARED_LIMIT:
            attribute = driver.CUfunction_attribute
            _check(
                driver.cuFuncSetAttribute(
                    function,
                    attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes,
                ),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            )
    loaded = LoadedKernel(device_index, context, module, function, shared_bytes)
    _loaded_kernels[key] = loaded
    return loaded


def launch(
    kernel: LoadedKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    stream: int,
    values: tuple,
    ctypes_types: tuple,
) -> None:
    """Launch a loaded kernel on `stream` (a raw CUstream handle, 0 for the default).

    `values` and `ctypes_types` are the kernel's arguments in the cuda-bindings form:
    pointers as ints with `ctypes.c_void_p`, scalars with their ctypes type. This is the
    per-call path, so it is written out flat rather than with `_CurrentContext`.
    """
    if kernel.native:
        kinds = bytes(
            ord("P") if kind is ctypes.c_void_p else ord(SCALAR_KINDS[kind]) for kind in ctypes_types
        )
        native().launch(
            kernel.function_handle, kernel.context_handle, grid, block,
            kernel.shared_bytes, stream, values, kinds,
        )
        return
    driver = _driver()
    pushed = _make_current(kernel.context, kernel.context_handle)
    try:
        (err,) = driver.cuLaunchKernel(
            kernel.function,
            grid[0], grid[1], grid[2],
            block[0], block[1], block[2],
            kernel.shared_bytes,
            stream,
            (values, ctypes_types),
            0,
        )
    finally:
        if pushed:
            _check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel failed with {_error_name(err)}")


# The ctypes type a scalar of each dtype is passed as, and its range for integers.
SCALAR_CTYPES = {
    "bool": ctypes.c_bool,
    "int8": ctypes.c_int8,
    "uint8": ctypes.c_uint8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32,
    "int64": ctypes.c_int64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}

# The byte `_tilers.launch` packs a scalar of each ctypes type by (struct-module letters).
SCALAR_KINDS = {
    ctypes.c_bool: "?",
    ctypes.c_int8: "b",
    ctypes.c_uint8: "B",
    ctypes.c_int16: "h",
    ctypes.c_int32: "i",
    ctypes.c_uint32: "I",
    ctypes.c_int64: "q",
    ctypes.c_float: "f",
    ctypes.c_double: "d",
}

INTEGER_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


# ---------------------------------------------------------------------------------------
# Grids
# ---------------------------------------------------------------------------------------


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


_GRID_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "ceildiv": _ceildiv,
    "min": min,
    "max": max,
}


def grid_params(gexpr: dict) -> list[int]:
    """The indices of the scalar parameters a grid expression reads, in order of use."""
    if "param" in gexpr:
        return [gexpr["param"]]
    if "op" in gexpr:
        return grid_params(gexpr["a"]) + grid_params(gexpr["b"])
    return []


def _eval_gexpr(gexpr: dict, scalar_args) -> int:
    if "const" in gexpr:
        return gexpr["const"]
    if "param" in gexpr:
        return int(scalar_args[gexpr["param"]])
    a = _eval_gexpr(gexpr["a"], scalar_args)
    b = _eval_gexpr(gexpr["b"], scalar_args)
    op = gexpr["op"]
    if op in ("floordiv", "ceildiv") and b == 0:
        raise ZeroDivisionError
    return _GRID_OPS[op](a, b)


def eval_grid(gexprs: list[dict], scalar_args, param_names=None) -> tuple[int, int, int]:
    """Evaluate KernelInfo's `grid` (three gexprs, see docs/format.md) to (gx, gy, gz).

    `scalar_args[i]` is the value of parameter number i of KernelInfo's `params` (a list
    of all call arguments, or a dict keyed by parameter index); `param_names[i]` names
    it in errors. A grid dimension below 1 or over the hardware's limit is a ValueError
    that names the scalar parameters it came from.
    """
    dims = []
    for axis, gexpr in zip("xyz", gexprs):
        try:
            value = _eval_gexpr(gexpr, scalar_args)
        except ZeroDivisionError:
            source = _describe_params(gexpr, scalar_args, param_names)
            raise ValueError(f"grid dimension {axis} divides by zero{source}") from None
        limit = MAX_GRID_X if axis == "x" else MAX_GRID_YZ
        if not 1 <= value <= limit:
            source = _describe_params(gexpr, scalar_args, param_names)
            if value < 1:
                problem = "every grid dimension must be at least 1"
            else:
                problem = f"over the CUDA limit of {limit} blocks"
            raise ValueError(f"grid dimension {axis} is {value}{source}: {problem}")
        dims.append(value)
    return dims[0], dims[1], dims[2]


def grid_evaluator(gexprs: list[dict], param_names=None):
    """Return a function of the call's argument list that computes the grid like eval_grid.

    The gexprs become nested closures once, so a launch does not walk the dicts; any
    value out of range is re-evaluated by eval_grid for its error message.
    """
    x, y, z = (_compile_gexpr(gexpr) for gexpr in gexprs)

    def evaluate(args) -> tuple[int, int, int]:
        try:
            grid = (x(args), y(args), z(args))
        except ZeroDivisionError:
            grid = (0, 0, 0)
        gx, gy, gz = grid
        if 1 <= gx <= MAX_GRID_X and 1 <= gy <= MAX_GRID_YZ and 1 <= gz <= MAX_GRID_YZ:
            return grid
        return eval_grid(gexprs, args, param_names)

    return evaluate


def _compile_gexpr(gexpr: dict):
    if "const" in gexpr:
        value = gexpr["const"]
        return lambda args: value
    if "param" in gexpr:
        index = gexpr["param"]
        return lambda args: int(args[index])
    operation = _GRID_OPS[gexpr["op"]]
    a = _compile_gexpr(gexpr["a"])
    b = _compile_gexpr(gexpr["b"])
    return lambda args: operation(a(args), b(args))


def _describe_params(gexpr: dict, scalar_args, param_names) -> str:
    """' (from scalar parameters n=0, m=3)', or '' when the dimension is a constant."""
    used = list(dict.fromkeys(grid_params(gexpr)))
    if not used:
        return ""
    parts = []
    for index in used:
        name = param_names[index] if param_names is not None else f"#{index}"
        parts.append(f"{name}={scalar_args[index]!r}")
    plural = "s" if len(parts) > 1 else ""
    return f" (from scalar parameter{plural} {', '.join(parts)})"
