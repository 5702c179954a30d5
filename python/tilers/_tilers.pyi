"""The Rust extension: the whole seam between Python and the compiler core.

`python -m mypy.stubtest tilers._tilers` (in scripts/test) checks this file against the
module `crates/tile-py/src/lib.rs` builds. Driver handles (contexts, modules, functions,
streams) cross the seam as plain ints, the values cuda-bindings' `int(handle)` gives.
"""

from collections.abc import Callable
from typing import Any, final

__all__ = [
    "compile",
    "inspect",
    "pass_names",
    "interpret",
    "check",
    "check_passes",
    "export_c",
    "export_dispatcher",
    "cc_main",
    "driver_status",
    "driver_version",
    "device_attribute",
    "device_name",
    "load_function",
    "launch",
    "set_dependent_launch",
    "load_torch_shim",
    "tensor_codes",
    "Launcher",
    "CompileError",
    "InternalCompilerError",
    "__version__",
]

__version__: str

class CompileError(Exception):
    """The kernel does not compile; the message is rendered with the user's source lines."""

class InternalCompilerError(CompileError):
    """A bug in tilers; the message says where the reproducer (the program JSON) was saved."""

# ---- the compiler (the GIL is released while it runs)

def compile(program: str, options: str) -> tuple[str, str]:
    """Serialized program (docs/format.md) and options JSON ({"arch", "lineinfo",
    "fast_math", "dump_ir", "keep_ir"}) -> (CUDA source, KernelInfo JSON)."""

def inspect(program: str, options: str) -> tuple[str, list[tuple[str, str]] | None, str]:
    """Compile as `compile` does with these options -> (CUDA source, the text IR after
    every pass [("input", ...), ("verify", ...), ...] with "keep_ir": true, else None,
    layouts JSON {"threads", "buffers": [...]}: each fragment of the lowered kernel with its
    layout ({"extents", "dims": [[{"size", "step", "thread" | "slot"}, ...]], "replicated",
    "active_threads", "slots", "text"}) and each shared buffer with its "offset", "bytes"
    and "swizzle"; in a program of several kernels the passes are named "kernel0/verify", …
    kernel by kernel, and each buffer says its kernel's number in "kernel"). What kernel.ir()
    and kernel.layouts() show."""

def pass_names() -> list[str]:
    """The lowering pipeline, in order."""

def interpret(program: str, args: list[bytes | int | float], options: str) -> list[bytes | None]:
    """Run the program on host data with the reference interpreter; tensors are passed and
    returned as their row-major bytes (None is returned for scalars)."""

def check(program: str) -> str:
    """Verify the program without generating code; KernelInfo JSON with its params."""

def check_passes(program: str, options: str) -> str:
    """Run the program after every pass on seeded random inputs (tile-level stages on the
    reference interpreter, thread-level ones on the warp model) and compare with the
    tile-level result. Options {"arch", "seed", "blocks": "edges" | "all"}; JSON
    {"name", "ok", "first_failure", "stages": [{"pass", "level", "status", "message",
    "seconds", "mismatch"?}], "ir_before", "ir_after"}."""

# ---- ahead-of-time export (docs/export.md)

def export_c(info_json: str, cubin: bytes, name: str) -> tuple[str, str]:
    """The C launcher of a compiled kernel: (tilers_<name>.h, tilers_<name>.c), the cubin
    embedded. ValueError says why a kernel cannot be exported."""

def export_dispatcher(name: str, members: list[tuple[str, str, list[str]]]) -> tuple[str, str]:
    """A C dispatcher tilers_<name>_launch over exported kernels, given as (export name,
    KernelInfo JSON, conditions like "M=1..128" or "A.0=..64"); the first member whose
    conditions hold and whose checks take a call's shapes runs it."""

def cc_main(args: list[str]) -> int:
    """Run the tilers-cc command line (arguments without the program name); its exit code."""

# ---- the CUDA driver (libcuda is opened on first use; without one these raise
# RuntimeError("no usable CUDA driver: ..."), except driver_status, which reports it)

def driver_status() -> tuple[int, str]:
    """(device count, reason): how many CUDA devices are usable, and why none is ("" when
    some are)."""

def driver_version() -> int:
    """cuDriverGetVersion, e.g. 13000 for CUDA 13.0."""

def device_attribute(device: int, attribute: int) -> int:
    """cuDeviceGetAttribute of a device ordinal (a CUdevice_attribute number)."""

def device_name(device: int) -> str:
    """cuDeviceGetName of a device ordinal, e.g. "NVIDIA H200"."""

def load_function(
    device: int, cubin: bytes, entry: str, shared_bytes: int, cluster_blocks: int = 1
) -> tuple[int, int, int]:
    """Load `cubin` into the device's primary context and look up `entry` -> (context,
    module, function); raises the function's dynamic shared memory limit past 48 KiB when
    `shared_bytes` needs it, and allows a compiled-in cluster of `cluster_blocks` past the
    portable 8 (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED). Releases the GIL."""

def launch(
    function: int,
    context: int,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_bytes: int,
    stream: int,
    args: tuple[object, ...] | list[object],
    kinds: bytes,
) -> None:
    """cuLaunchKernel on `stream` (0: the legacy default stream), `context` made current
    unless it is (0: the current one). `kinds` has one byte per argument: `T` a tensor
    (its data_ptr()), `P` a device pointer int, or a scalar: `?` bool, `b`/`B` int8/uint8,
    `h`/`H` int16/uint16, `i`/`I` int32/uint32, `q`/`Q` int64/uint64, `f` float32, `d`
    float64. Never synchronizes; releases the GIL around the driver call. For tests and
    benchmarks: kernels launch through `Launcher`."""

def set_dependent_launch(enabled: bool) -> bool:
    """Whether the later kernels of a call of several kernels that wait for the ones before
    them (KernelInfo `dependent_launch`) launch as programmatic dependents (cuLaunchKernelEx);
    on by default; returns the previous setting."""

# ---- torch (the launcher reads tensors through torch's stable C shim)

def load_torch_shim(torch: Any) -> str:
    """Start reading tensors of the `torch` module through torch's stable C shim
    (aoti_torch_*, already loaded with torch); "" when in use, else why not. The launcher
    does this itself."""

def tensor_codes(tensor: object) -> tuple[int, int] | None:
    """torch's (ScalarType, DeviceType) numbers of a tensor; None without the shim."""

@final
class Launcher:
    """Every GPU call of a kernel in one native call, the one place that accepts or declines
    a call (see crates/tile-py/src/launcher.rs): argument checks against the KernelInfo,
    the grid, loading on a device met for the first time (`load(device) -> ([function of
    each kernel], context)`: KernelInfo's kernel, then those of its `then`), `out_idx`
    outputs and scratch (once per call), torch's current stream, cuLaunchKernel per kernel. A call it
    declines goes, untouched, to `fallback` (a WeakMethod of JITKernel._declined), which
    explains it. `dry_run`: CPU tensors stand for CUDA tensors and the driver is not called
    (tests without a GPU); `torch_shim=False` reads tensors through Python attributes."""

    def __new__(
        cls,
        info_json: str,
        out_idx: list[int],
        torch: Any,
        load: Callable[[], Callable[[int], tuple[list[int], int]] | None],
        fallback: Callable[[], Callable[..., Any] | None],
        dry_run: bool = False,
        torch_shim: bool = True,
    ) -> Launcher: ...
    @property
    def tensor_reader(self) -> str:
        """How tensors are read: "torch's C shim", or "Python attributes (why)"."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Launch and return the outputs (None, one tensor or a tuple), or what `fallback`
        returns for a call the launcher declines."""
