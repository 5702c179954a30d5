"""The Rust extension: the whole seam between Python and the compiler core."""

__version__: str

class CompileError(Exception):
    """The kernel does not compile; the message is rendered with the user's source lines."""

class InternalCompilerError(CompileError):
    """A bug in tilers; the message says where the reproducer (the program JSON) was saved."""

def compile(program: str, options: str) -> tuple[str, str]:
    """Serialized program (docs/format.md) and options JSON ({"arch", "lineinfo",
    "fast_math", "dump_ir"}) -> (CUDA source, KernelInfo JSON). Releases the GIL."""

def dump_ir(program: str, options: str) -> list[tuple[str, str]]:
    """The text IR after every pass: [("input", ...), ("verify", ...), ...]."""

def layouts(program: str, options: str) -> str:
    """JSON {"threads", "buffers": [...]}: each fragment of the lowered kernel with its layout
    ({"extents", "dims": [[{"size", "step", "thread" | "slot"}, ...]], "replicated",
    "active_threads", "slots", "text"}) and each shared buffer with its "offset", "bytes"
    and "swizzle"."""

def pass_names() -> list[str]:
    """The lowering pipeline, in order."""

def interpret(program: str, args: list[bytes | int | float], options: str) -> list[bytes | None]:
    """Run the program on host data with the reference interpreter; tensors are passed and
    returned as their row-major bytes (None is returned for scalars)."""

def check_passes(program: str, options: str) -> str:
    """Run the program after every pass on seeded random inputs (tile-level stages on the
    reference interpreter, thread-level ones on the warp model) and compare with the
    tile-level result. Options {"arch", "seed", "blocks": "edges" | "all"}; JSON
    {"name", "ok", "first_failure", "stages": [{"pass", "level", "status", "message",
    "seconds", "mismatch"?}], "ir_before", "ir_after"}."""

def check(program: str) -> str:
    """Verify the program without generating code; KernelInfo JSON with its params."""

def load_torch_shim(sample: object, tensor_types: tuple[type, ...]) -> str:
    """Start reading tensors through torch's stable C shim (aoti_torch_*, already loaded with
    torch); "" when in use, else why not. `sample`: a strided CPU tensor, not contiguous and
    at an offset, which the shim must read as Python does."""

def tensor_codes(tensor: object) -> tuple[int, int] | None:
    """torch's (ScalarType, DeviceType) numbers of a plain tensor; None without the shim."""

class Launcher:
    """A prepared kernel's per-call path in one native call (see crates/tile-py/src/launcher.rs):
    checks, pointers, `out_idx` outputs, grid, torch's current stream, cuLaunchKernel.
    Arguments it does not accept go, untouched, to `fallback()` (a WeakMethod of
    JITKernel._call_checked). `dry_run` stops short of the stream and the driver."""

    def __init__(
        self, spec_json: str, output_dtypes: list, empty_strided, stream_getter, fallback,
        dry_run: bool = False,
    ) -> None: ...
    def add_device(self, device: int, function: int, context: int) -> None:
        """The kernel as loaded on `device` (handles from load_function)."""
    def __call__(self, *args, **kwargs): ...
