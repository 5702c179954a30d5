"""Everything that touches CUDA from Python: target resolution, NVRTC, the GPU probe and
module loading. Launches are the extension's (crates/tile-py/src/launcher.rs)."""

from __future__ import annotations

import functools
import hashlib
import re
import sys

# `import tilers` must not load the CUDA libraries or torch: every import of
# `cuda.bindings` and `torch` in this file sits inside the function that needs it. The
# driver is reached through the extension, which opens libcuda itself on first use
# (crates/tile-py/src/launch.rs); cuda-bindings is used for NVRTC only.

DEFAULT_ARCH = "sm_90a"

_ARCH_PATTERN = re.compile(r"sm_(\d)(\d{1,2})([af]?)")


def _native():
    from tilers import _tilers

    return _tilers


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
    return _native().device_attribute(device_index, attribute)


def dependent_launch(enabled: bool) -> bool:
    """Turn programmatic dependent launch on or off; returns the previous setting.

    A call of a prim_func of several ``T.Kernel`` blocks launches its kernels in order on one
    stream. On sm_90 and newer each kernel after the first waits for the ones before it with
    ``griddepcontrol.wait`` placed just before it first touches what they wrote (see the
    kernel's report), and the launcher lets it start while the kernel before it still runs
    (cuLaunchKernelEx with programmatic stream serialization): its launch latency and the
    work before that wait overlap the kernel before it. On by default; off, each kernel
    starts once the one before it ended (the instructions are then no-ops). A CUDA graph
    keeps the setting it was captured with."""
    return _native().set_dependent_launch(bool(enabled))


# ---------------------------------------------------------------------------------------
# GPU discovery and targets
# ---------------------------------------------------------------------------------------


@functools.cache
def gpu_probe() -> tuple[int, str]:
    """Return (number of usable CUDA devices, why none is usable or "").

    Cheap: the extension opens libcuda and asks the driver, nothing more. A missing
    libcuda or a driver error both mean "no GPU".
    """
    return _native().driver_status()


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
    return _native().device_name(device_index)


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


IMPORTED_MARK = "// T.import_source"


def _imported_code_errors(source: str, name: str, log: str):
    """When every error NVRTC reports lies in code a kernel imported (`T.import_source`,
    `T.inline_ptx`), the message for the user: their code, by its own line numbers; else
    None (the generated code is at fault: a tilers bug). PTX that ptxas refuses can only come
    from the kernel's own inline PTX or imported asm."""
    import re

    lines = source.split("\n")
    marks = [k for k, text in enumerate(lines) if text == IMPORTED_MARK]
    if not marks:
        return None
    end = next((k for k, text in enumerate(lines) if text.startswith('extern "C"')), len(lines))
    regions = [(m + 1, (marks[i + 1] if i + 1 < len(marks) else end)) for i, m in enumerate(marks)]
    errors = [(int(n), text) for n, text in re.findall(rf"{re.escape(name)}\.cu\((\d+)\): error: (.*)", log)]
    ptxas = [line for line in log.splitlines() if "ptxas" in line and "error" in line.lower()]
    if errors and all(any(a < n <= b for a, b in regions) for n, _ in errors):
        shown = []
        for n, text in errors[:10]:
            k = next(i for i, (a, b) in enumerate(regions) if a < n <= b)
            shown.append(f"  imported code {k + 1}, line {n - regions[k][0]}: error: {text}\n"
                         f"    {lines[n - 1].strip()}")
        return (f"kernel '{name}': the CUDA it imports (T.import_source) does not compile:\n"
                + "\n".join(shown) + "\nhelp: fix the imported code; get_kernel_source() shows it in place")
    if not errors and ptxas:
        return (f"kernel '{name}': ptxas refused the PTX; the kernel's own inline PTX (T.inline_ptx) or "
                "imported asm is the code tilers did not write:\n  " + "\n  ".join(ptxas[:10]))
    return None


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

            user = _imported_code_errors(source, name, log)
            if user is not None:
                raise TileError(user)
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
# Loading
# ---------------------------------------------------------------------------------------


class LoadedKernel:
    """A kernel function loaded into one device's primary context (the one torch uses);
    the handles are the driver's, as ints."""

    def __init__(
        self, device_index: int, context_handle: int, module_handle: int, function_handle: int,
        shared_bytes: int,
    ):
        self.device_index = device_index
        self.context_handle = context_handle
        self.module_handle = module_handle
        self.function_handle = function_handle
        self.shared_bytes = shared_bytes


# (device index, cubin hash, entry) -> LoadedKernel
_loaded_kernels: dict[tuple[int, str, str], LoadedKernel] = {}


def load_kernel(
    device_index: int, cubin: bytes, entry: str, shared_bytes: int, cluster_blocks: int = 1
) -> LoadedKernel:
    """Load `cubin` into the primary context of `device_index` and look up `entry`.

    Cached per (device, cubin hash, entry name). Raises the kernel's dynamic shared
    memory limit when it needs more than the default 48 KiB, and allows its thread-block
    cluster (compiled in) of `cluster_blocks` when that is past the portable 8.
    """
    key = (device_index, hashlib.sha256(cubin).hexdigest(), entry)
    loaded = _loaded_kernels.get(key)
    if loaded is None:
        context, module, function = _native().load_function(
            device_index, cubin, entry, shared_bytes, cluster_blocks
        )
        loaded = LoadedKernel(device_index, context, module, function, shared_bytes)
        _loaded_kernels[key] = loaded
    return loaded
