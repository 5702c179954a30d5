"""JITKernel: a compiled kernel that checks its arguments and launches on torch tensors."""

from __future__ import annotations

import json
import math
import numbers
import operator
import os
import weakref

from tilers import _sizes, cache, host, runtime
from tilers._source import add_call_site
from tilers.errors import TileError

FLOAT32_MAX = 3.4028234663852886e38
# The largest finite value of each float dtype a scalar parameter can have (float64: any).
FLOAT_MAX = {"float32": FLOAT32_MAX, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}

# The range of each integer dtype a scalar parameter can have.
INTEGER_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides, in elements, of a tensor of `shape`."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def compile_options(
    arch: str,
    lineinfo: bool,
    fast_math: bool,
    keep_ir: bool = False,
    wgmma: bool = True,
    tma: bool = True,
    persistent: bool | str = True,
    tma_store: bool = True,
    cluster: tuple[int, int] | None = None,
) -> str:
    """The options JSON of `_tilers.compile` (docs/format.md): one place, so that a kernel
    compiled again for kernel.ir() / kernel.layouts() is compiled exactly as it was."""
    options = {"arch": arch, "lineinfo": bool(lineinfo), "fast_math": bool(fast_math)}
    if not wgmma:
        options["wgmma"] = False
    if not tma:
        options["tma"] = False
    if not persistent:
        options["persistent"] = False
    elif persistent == "pingpong":
        options["pingpong"] = True
    if not tma_store:
        options["tma_store"] = False
    if cluster is not None:
        options["cluster"] = list(cluster)
    if keep_ir:
        options["keep_ir"] = True
    return json.dumps(options)


def normalize_out_idx(out_idx, kernel_name: str, params: list[dict]) -> list[int]:
    """``out_idx`` (an int, a list of them or None) as non-negative positions in KernelInfo's
    ``params``; negative ones count from the end. Only tensors can be outputs."""
    if out_idx is None:
        return []
    indices = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    count = len(params)
    names = ", ".join(p["name"] for p in params)
    positions = []
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise TileError(
                f"out_idx {index!r} is out of range: {kernel_name} has {count} parameters "
                f"({names})"
            )
        position = index % count
        if params[position]["kind"] != "tensor":
            raise TileError(
                f"out_idx {index} names scalar parameter '{params[position]['name']}'; only "
                "tensors can be outputs"
            )
        if position in positions:
            raise TileError(
                f"out_idx lists parameter '{params[position]['name']}' twice ({out_idx!r}); each "
                "output is one parameter"
            )
        positions.append(position)
    return positions


class _TensorParam:
    """What a tensor argument must be, for the Python checks that explain a declined call."""

    is_tensor = True

    def __init__(self, index: int, spec: dict, torch, info: dict):
        self.index = index
        self.spec = spec
        self.info = info
        self.name = spec["name"]
        self.dtype = spec["dtype"]
        self.torch_dtype = getattr(torch, spec["dtype"])
        self.symbolic = _sizes.is_symbolic(spec)
        self.shape = None if self.symbolic else tuple(spec["shape"])
        self.strides = None if self.symbolic else tuple(spec["strides"])
        self.align = spec["align"]

    def describe(self) -> str:
        shape = _sizes.shape_text(self.spec, self.info)
        return f"a torch.Tensor of {self.dtype} with shape {shape}"


class _ScalarParam:
    """What a scalar argument must be: its dtype and, for integers, its range."""

    is_tensor = False

    def __init__(self, index: int, spec: dict):
        self.index = index
        self.name = spec["name"]
        self.dtype = spec["dtype"]
        self.range = INTEGER_RANGES.get(spec["dtype"])

    def check(self, value):
        """Return `value` if it fits this parameter; raise TypeError/OverflowError if not."""
        if self.dtype == "bool":
            if not isinstance(value, bool):
                raise TypeError(
                    f"parameter '{self.name}': expected a bool, got {_type_text(value)}"
                )
            return value
        if self.range is not None:
            # `type(value) is int` first: the ABC check behind isinstance is slow.
            if type(value) is not int and not isinstance(value, numbers.Integral):
                raise TypeError(
                    f"parameter '{self.name}': expected an int ({self.dtype}), "
                    f"got {_type_text(value)} {value!r}"
                )
            value = int(value)
            low, high = self.range
            if not low <= value <= high:
                raise OverflowError(
                    f"parameter '{self.name}': {value} does not fit in {self.dtype} "
                    f"(range {low} to {high})"
                )
            return value
        if not isinstance(value, numbers.Real):
            raise TypeError(
                f"parameter '{self.name}': expected a float ({self.dtype}), got {_type_text(value)}"
            )
        value = float(value)
        largest = FLOAT_MAX.get(self.dtype)
        if largest is not None and math.isfinite(value) and abs(value) > largest:
            raise OverflowError(
                f"parameter '{self.name}': {value} does not fit in {self.dtype} "
                f"(largest finite value {largest})"
            )
        return value


class JITKernel:
    """A compiled tilers kernel: its CUDA source, its KernelInfo, and a launcher.

    Calling it checks every argument against KernelInfo (type, device, dtype, shape,
    strides, alignment, scalar ranges) before anything is allocated or launched, then
    launches on torch's current stream. With `out_idx`, the caller passes only the other
    parameters and gets the freshly allocated outputs back::

        C = kernel(A, B)        # out_idx=[2]
    """

    def __init__(
        self,
        name: str,
        program_json: str,
        source: str,
        info: dict,
        target: str,
        out_idx,
        *,
        lineinfo: bool = False,
        fast_math: bool = False,
        wgmma: bool = True,
        tma: bool = True,
        persistent: bool = True,
        tma_store: bool = True,
        cluster: tuple[int, int] | None = None,
    ):
        self.name = name
        self.program_json = program_json
        if source is not None:
            from .engine.callback import postprocess_cuda

            source = postprocess_cuda(source, info["arch"])
        self.source = source
        self.info = info
        self.target = target
        self.arch = info["arch"]
        self.entry = info["entry"]
        # the kernels a call launches, in order (a prim_func of several T.Kernel blocks):
        # KernelInfo's first, then its "then"
        self.launches = [info, *info.get("then", [])]
        self.lineinfo = lineinfo
        self.fast_math = fast_math
        self.wgmma = wgmma
        self.tma = tma
        self.persistent = persistent
        self.tma_store = tma_store
        self.cluster = cluster
        self.params = [spec["name"] for spec in info["params"]]
        self.out_idx = normalize_out_idx(out_idx, name, info["params"])
        self._input_positions = [i for i in range(len(self.params)) if i not in self.out_idx]
        for size in info.get("sizes", []):
            if not any(param in self._input_positions for param, _ in size["from"]):
                outputs = ", ".join(sorted({self.params[p] for p, _ in size["from"]}))
                raise TileError(
                    f"kernel '{name}': the T.dynamic size '{size['name']}' is a dimension of "
                    f"outputs only ({outputs}), so a call cannot know it: give it to an input "
                    "tensor, or leave that output out of out_idx and pass it"
                )
        self._cubin: bytes | None = None
        # kernel.ir() and kernel.layouts(): the kernel compiled again with its own options,
        # on request (see _inspect)
        self._ir_dumps: dict[str, str] | None = None
        self._layouts: dict | None = None
        # Made on the first GPU call (it imports torch): see _prepare.
        self._launcher = None
        self._input_checks: tuple = ()
        self._dry_run = False
        self._loaded: dict[int, tuple[runtime.LoadedKernel, ...]] = {}
        self._entry = self._first_call
        self._outputs_given: JITKernel | None = None

    # --- what the kernel is -------------------------------------------------------------

    @property
    def cubin(self) -> bytes:
        """The kernel compiled by NVRTC for `self.arch` (compiled once, on first use)."""
        if self.source is None:
            raise RuntimeError(
                f"kernel '{self.name}' was compiled for the interpreter (target=\"interp\"): it "
                "has no GPU code; compile with target=\"auto\" or \"cuda:sm_XX\" for that"
            )
        if self._cubin is None:
            # memo, then the disk cache, then NVRTC (tilers/cache.py)
            self._cubin = cache.get_cubin(
                self.source, self.arch, self.name,
                lineinfo=self.lineinfo, fast_math=self.fast_math,
            )
        return self._cubin

    def get_kernel_source(self) -> str:
        """The generated CUDA C++ source (the same as `kernel.source`)."""
        return self.source

    def save_program(self, path) -> None:
        """Write the serialized tile program; `tilers-cc` compiles the file the same way."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.program_json)

    def export(self, directory, name: str | None = None) -> dict:
        """Write the kernel for C/C++ programs (docs/export.md): ``NAME.cu``, ``NAME.json``
        (KernelInfo), ``NAME.cubin`` and the launcher ``tilers_NAME.h`` / ``tilers_NAME.c``,
        which needs only the CUDA driver at run time. NAME is the kernel's unless given.

        >>> kernel.export("build/kernels", name="gemm_f16")
        """
        from tilers.export import export_kernel

        return export_kernel(self, directory, name)

    # --- what the compiler made of it (tilers/report.py, tilers/plot.py) -----------------

    def compile_options(self, keep_ir: bool = False) -> str:
        """The options JSON this kernel was compiled with (`_tilers.compile`)."""
        # a kernel for the interpreter has no lowering of its own: show the default target's
        arch = self.arch if self.source is not None else runtime.DEFAULT_ARCH
        return compile_options(arch, self.lineinfo, self.fast_math, keep_ir, self.wgmma, self.tma, self.persistent,
            self.tma_store, self.cluster)

    def _inspect(self, keep_ir: bool) -> None:
        """Compile the program again with this kernel's options, for its layouts and, with
        `keep_ir`, the IR after every pass (kept only on request: memory per kernel)."""
        from tilers import _tilers, report

        source, stages, layouts = _tilers.inspect(self.program_json, self.compile_options(keep_ir))
        if self.source is not None and source != self.source:
            raise RuntimeError(
                f"kernel '{self.name}': compiling it again gave different CUDA; this is a "
                "tilers bug (the compiler must be deterministic), please report it"
            )
        self._layouts = json.loads(layouts)
        if stages is not None:
            self._ir_dumps = report.ir_dumps(stages)

    def report(self) -> str:
        """What each tile op became: instructions (mma.sync, ldmatrix, cp.async or why not),
        vector widths, pipeline stages, swizzles, layouts, shared memory per buffer, and
        registers once the cubin has been built.

        >>> print(kernel.report())
        """
        from tilers import report

        if self.source is None:
            return (
                f"kernel {self.name} was compiled for the interpreter (target=\"interp\"): "
                "it has no lowering report"
            )
        resources = report.cubin_resources(self._cubin) if self._cubin is not None else None
        return report.format_report(self.info, self._layout_data(), resources)

    def ir(self, which: str | None = None):
        """The text IR after a pass: ``kernel.ir("after:lower_tile_ops")``; with no argument,
        the names of the passes (a pass that runs twice is "simplify#2" the second time).

        This kernel's own compilation (its target, lineinfo and fast_math), run again on the
        first call with every pass's IR kept, and memoized on the kernel."""
        from tilers import report

        if self._ir_dumps is None:
            self._inspect(keep_ir=True)
        if which is None:
            return list(self._ir_dumps)
        return report.select_ir(self._ir_dumps, which)

    def layouts(self) -> str:
        """Where each on-chip buffer lives: per fragment, which thread and register hold
        each element; per shared buffer, its offset and swizzle."""
        from tilers import report

        return report.format_layouts(self._layout_data())

    def plot_layout(self, buffer: str, path) -> None:
        """Draw ``buffer``'s layout into an image file (needs matplotlib): for a fragment, the
        thread:register holding each element; for a shared buffer, each element's bank.

        >>> kernel.plot_layout("acc", "acc.png")
        """
        from tilers import plot

        buffers = {b["name"]: b for b in self._layout_data()["buffers"]}
        if buffer not in buffers:
            raise ValueError(
                f"kernel '{self.name}' has no shared or fragment buffer named {buffer!r}; "
                f"it has: {', '.join(buffers) or 'none'}"
            )
        plot.plot_layout(buffers[buffer], path)

    def _layout_data(self) -> dict:
        if self._layouts is None:
            self._inspect(keep_ir=False)
        return self._layouts

    # --- profiling (tilers/profiler.py) ---------------------------------------------------

    def profiler(self, supply_type="auto", scalars=None, seed=0, sizes=None):
        """A Profiler: inputs, ``assert_allclose(ref_prog, rtol, atol)``, ``do_bench()``.
        A kernel with T.dynamic sizes needs their values: ``sizes={"M": 1024}``."""
        from tilers.profiler import Profiler

        return Profiler(self, supply_type=supply_type, scalars=scalars, seed=seed, sizes=sizes)

    def get_profiler(self, tensor_supply_type="auto", sizes=None):
        """TileLang's name for ``profiler()``."""
        return self.profiler(supply_type=tensor_supply_type, sizes=sizes)

    def bench(self, flops=None, bytes=None, warmup=25, rep=100, dtype=None, sizes=None):
        """Time the kernel on random inputs: ms, TFLOP/s, GB/s and fractions of the peak.

        >>> print(kernel.bench(flops=2 * M * N * K))
        """
        return self.profiler(sizes=sizes).bench(
            flops=flops, bytes=bytes, warmup=warmup, rep=rep, dtype=dtype
        )

    @property
    def sizes(self) -> list[str]:
        """The names of the kernel's T.dynamic sizes (empty: every shape is fixed)."""
        return [size["name"] for size in self.info.get("sizes", [])]

    def call_sizes(self, *args) -> dict[str, int]:
        """The value of each T.dynamic size in a call with these arguments (as the kernel
        is called: its inputs, and in-place outputs), or the ValueError the call would give
        (disagreeing tensors, a broken multiple_of, a shape of another rank)."""
        if not self.info.get("sizes"):
            return {}
        if len(args) != len(self._input_positions):
            raise self._argument_count_error(len(args))
        shapes = {}
        for position, arg in zip(self._input_positions, args):
            spec = self.info["params"][position]
            if spec["kind"] == "tensor" and hasattr(arg, "shape"):
                shape = tuple(arg.shape)
                _sizes.check_shape(spec["name"], spec, self.info, shape)
                shapes[position] = shape
        return dict(zip(self.sizes, _sizes.bind(self.info, shapes)))

    def __repr__(self) -> str:
        parts = []
        for position, spec in enumerate(self.info["params"]):
            if spec["kind"] == "tensor":
                dims = _sizes.shape_text(spec, self.info)[1:-1].rstrip(",")
                text = f"{spec['name']}: {spec['dtype']}[{dims}]"
            else:
                text = f"{spec['name']}: {spec['dtype']}"
            if position in self.out_idx:
                text += " (output)"
            parts.append(text)
        return f"<JITKernel {self.name}({', '.join(parts)}) for {self.arch}>"

    # --- calling ------------------------------------------------------------------------

    def _with_outputs_given(self) -> JITKernel:
        """This kernel taking every parameter, its `out_idx` outputs too (written in place):
        the profiler's checks pass outputs they filled with NaN themselves, so that an
        element the kernel leaves unwritten cannot pass on a value left in reused memory."""
        if not self.out_idx:
            return self
        if self._outputs_given is None:
            sibling = JITKernel(
                self.name, self.program_json, self.source, self.info, self.target, None,
                lineinfo=self.lineinfo, fast_math=self.fast_math,
            )
            sibling._cubin = self._cubin
            self._outputs_given = sibling
        return self._outputs_given

    # kernel(*args) is self._entry(*args): _first_call until the kernel is prepared, then
    # the native launcher (crates/tile-py/src/launcher.rs), which checks and launches in
    # one call and passes the calls it declines to _declined. A property rather than a
    # method, so that the hot path runs no Python frame (~0.13 µs a call).
    __call__ = property(operator.attrgetter("_entry"))

    def _first_call(self, *args, **kwargs):
        """Calls before the kernel is prepared: host arrays run on the interpreter; a GPU
        call prepares the kernel (torch, the launcher) and is the launcher's first."""
        self._check_call_form(args, kwargs)
        if self._runs_on_host(args):
            return host.call(self, args, self._check_scalar)
        self._prepare()
        return self._entry(*args)

    def _checked_call(self, *args, **kwargs):
        """Every call with TILERS_FAST_LAUNCH=0 (a debugging switch): the Python checks,
        then the native launch."""
        self._check_call_form(args, kwargs)
        if self._runs_on_host(args):
            return host.call(self, args, self._check_scalar)
        self._check_arguments(args)
        return self._launcher(*args)

    def _declined(self, *args, **kwargs):
        """A call the launcher declined, untouched: host arrays run on the interpreter;
        arrays of other frameworks in CUDA memory (CuPy, JAX) run through DLPack; anything
        else is a wrong argument, which the Python checks name."""
        self._check_call_form(args, kwargs)
        if self._runs_on_host(args):
            return host.call(self, args, self._check_scalar)
        if any(host.is_dlpack_gpu_array(a) for a in args):
            return self._dlpack_call(args)
        self._check_arguments(args)
        raise RuntimeError(
            f"kernel '{self.name}': the native launcher declined a call whose arguments "
            "pass the Python checks; this is a tilers bug, please report it with the "
            "arguments' types, dtypes, shapes, strides and devices"
        )

    def _dlpack_call(self, args):
        """Arrays of another framework (CuPy, JAX) as torch tensors over the same memory
        (DLPack, no copy); the outputs the kernel allocates come back in the framework of
        the first such argument. A JAX array is immutable: a parameter the kernel writes in
        place must be a torch or CuPy array."""
        torch = self._torch
        framework = None
        converted = []
        for position, arg in zip(self._input_positions, args):
            if host.is_dlpack_gpu_array(arg):
                module = type(arg).__module__.split(".")[0]
                framework = framework or module
                if module in ("jax", "jaxlib") and self.info["params"][position].get("written"):
                    raise ValueError(
                        f"parameter '{self.params[position]}': the kernel writes it, but a JAX array "
                        "is immutable; make it an output the kernel returns (out_idx=) or pass a "
                        "torch or CuPy array"
                    )
                arg = torch.from_dlpack(arg)
            converted.append(arg)
        self._check_arguments(converted)
        result = self._launcher(*converted)
        back = _from_dlpack_of(framework)
        if back is None or result is None:
            return result
        if isinstance(result, tuple):
            return tuple(back(r) for r in result)
        return back(result)

    def _check_call_form(self, args, kwargs) -> None:
        if kwargs:
            inputs = ", ".join(self.params[i] for i in self._input_positions)
            raise TypeError(
                f"{self.name}() takes its arguments by position, not by keyword "
                f"({', '.join(kwargs)}): call it as {self.name}({inputs})"
            )
        if len(args) != len(self._input_positions):
            raise self._argument_count_error(len(args))

    def _check_arguments(self, args) -> None:
        """Raise the error that names what is wrong with a call's arguments (the
        parameter, what it needs and what it got); return when nothing is."""
        device = None
        shapes = {}
        for param, arg in zip(self._input_checks, args):
            if not param.is_tensor:
                param.check(arg)
                continue
            self._diagnose_tensor(param, arg)
            shapes[param.index] = tuple(arg.shape)
            pointer = arg.data_ptr()
            if pointer % param.align:
                raise ValueError(
                    f"parameter '{param.name}': the kernel assumes a {param.align}-byte aligned "
                    f"data pointer, but this one is {pointer % param.align} bytes past a "
                    f"multiple of {param.align} (a view that starts at an offset, such as "
                    f"x[1:]?) — pass {param.name}.clone()"
                )
            arg_device = arg.get_device()
            if device is None:
                device = arg_device
                first_tensor = param.name
            elif arg_device != device:
                raise ValueError(
                    f"parameter '{param.name}': expected a tensor on cuda:{device} like "
                    f"'{first_tensor}', got a tensor on cuda:{arg_device}"
                )
        _sizes.bind(self.info, shapes)  # tensors that disagree on a size, broken promises

    def _runs_on_host(self, args) -> bool:
        """Whether this call goes to the interpreter: host arrays, or target="interp".

        Mixing host arrays and GPU tensors in one call is an error naming both sides.
        """
        if self._dry_run:  # CPU tensors stand for GPU tensors
            return False
        on_host, on_gpu = [], []
        for position, arg in zip(self._input_positions, args):
            if host.is_host_array(arg):
                on_host.append(self.params[position])
            elif host.is_gpu_tensor(arg):
                on_gpu.append(self.params[position])
        if self.target == "interp":
            if on_gpu:
                raise ValueError(
                    f"kernel '{self.name}' was compiled with target=\"interp\", which runs on "
                    f"host arrays, but {', '.join(on_gpu)} {'is a GPU tensor' if len(on_gpu) == 1 else 'are GPU tensors'}"
                )
            return True
        if on_host and on_gpu:
            raise ValueError(
                f"kernel '{self.name}' got host arrays ({', '.join(on_host)}) and GPU tensors "
                f"({', '.join(on_gpu)}) in one call: pass all on the GPU, or all on the host "
                "(the interpreter)"
            )
        if on_host:
            return True
        # only scalars given (outputs allocated by the kernel): the GPU if there is one
        tensor_inputs = any(self.info["params"][p]["kind"] == "tensor" for p in self._input_positions)
        return not on_gpu and not tensor_inputs and not runtime.gpu_available()

    def _check_scalar(self, position: int, value):
        return _ScalarParam(position, self.info["params"][position]).check(value)

    def _prepare(self, dry_run: bool = False) -> None:
        """The first GPU call: refuse what cannot run here, import torch, make the launcher.

        `dry_run` (tests without a GPU): CPU tensors stand for CUDA tensors, and the
        launcher stops short of the driver.
        """
        if not dry_run:
            count, reason = runtime.gpu_probe()
            if count == 0:
                raise RuntimeError(
                    f"kernel '{self.name}' was compiled for {self.arch} with no GPU to run it: "
                    f"{reason}. kernel.source and kernel.cubin are still available; call it with "
                    "host (numpy) arrays to run it on the tilers interpreter."
                )
        try:
            import torch
        except ImportError as error:
            raise RuntimeError(
                f"kernel '{self.name}': launching on the GPU needs torch (pip install torch)"
            ) from error
        if not dry_run:
            torch.cuda.init()
        from tilers import _tilers

        self._torch = torch
        self._dry_run = dry_run
        checks = []
        for index, spec in enumerate(self.info["params"]):
            if spec["kind"] == "tensor":
                checks.append(_TensorParam(index, spec, torch, self.info))
            else:
                checks.append(_ScalarParam(index, spec))
        self._input_checks = tuple(checks[position] for position in self._input_positions)
        self._device_type = "cpu" if dry_run else "cuda"
        self._launcher = _tilers.Launcher(
            json.dumps(self.info), self.out_idx, torch,
            weakref.WeakMethod(self._load_function), weakref.WeakMethod(self._declined),
            dry_run=dry_run,
        )
        if os.environ.get("TILERS_FAST_LAUNCH", "1") == "0":
            self._entry = self._checked_call
        else:
            self._entry = self._launcher

    def _load_function(self, device: int) -> tuple[list[int], int]:
        """The launcher's `load`: the function of each of the call's kernels loaded on
        `device`, in launch order, and their context."""
        if self._dry_run:
            return [0] * len(self.launches), 0
        loaded = self._loaded.get(device) or self._load(device)
        return [kernel.function_handle for kernel in loaded], loaded[0].context_handle

    def _load(self, device: int) -> tuple[runtime.LoadedKernel, ...]:
        """Check that this device can run the cubin, then load each of the call's kernels
        there (once per device)."""
        device_arch = runtime.device_arch(device)
        if not runtime.cubin_runs_on(self.arch, device_arch):
            raise RuntimeError(
                f"kernel '{self.name}' was compiled for {self.arch}, but its tensors are on "
                f"cuda:{device}, an {runtime.device_name(device)} ({device_arch}), which "
                f"cannot run it: compile with target=\"auto\" or target=\"cuda:{device_arch}\""
            )
        loaded = tuple(
            runtime.load_kernel(
                device, self.cubin, launch["entry"], launch["shared_bytes"],
                launch.get("cluster", [1])[0],
            )
            for launch in self.launches
        )
        self._loaded[device] = loaded
        return loaded

    # --- error messages -----------------------------------------------------------------

    def _argument_count_error(self, given: int) -> TypeError:
        inputs = [self.params[i] for i in self._input_positions]
        expected = len(inputs)
        noun = "argument" if expected == 1 else "arguments"
        listing = ", ".join(inputs)
        outputs = [self.params[i] for i in self.out_idx]
        if len(outputs) == 1:
            listing += f"; {outputs[0]} is an output allocated by the kernel"
        elif outputs:
            names = ", ".join(outputs[:-1]) + f" and {outputs[-1]}"
            listing += f"; {names} are outputs allocated by the kernel"
        verb = "was" if given == 1 else "were"
        error = TypeError(
            f"{self.name}() takes {expected} tensor/scalar {noun} ({listing.lstrip('; ')}) "
            f"but {given} {verb} given"
        )
        return add_call_site(error, f"call it as {self.name}({', '.join(inputs)})")

    def _diagnose_tensor(self, param: _TensorParam, arg) -> None:
        """Raise the error that says what is wrong with a tensor argument.

        Returns normally only when the tensor is acceptable after all: its strides differ
        from KernelInfo's only along dimensions of extent 1, where a stride is never used.
        """
        torch = self._torch
        name = param.name
        if not isinstance(arg, torch.Tensor):
            raise TypeError(
                f"parameter '{name}': expected {param.describe()}, got {_type_text(arg)}"
            )
        if arg.device.type != self._device_type:
            raise ValueError(
                f"parameter '{name}': expected a CUDA tensor, got a tensor on {arg.device} "
                f"(move it with {name}.cuda(), or pass every tensor on the host to run on the "
                "tilers interpreter)"
            )
        if arg.dtype is not param.torch_dtype:
            raise ValueError(
                f"parameter '{name}': expected dtype {param.dtype}, got {arg.dtype} "
                f"(tilers never casts silently: pass {name}.to(torch.{param.dtype}))"
            )
        if param.symbolic:
            _sizes.check_shape(name, param.spec, param.info, tuple(arg.shape))
            shape = tuple(arg.shape)
            want_strides = contiguous_strides(shape)
        else:
            if tuple(arg.shape) != param.shape:
                raise ValueError(
                    f"parameter '{name}': expected shape {_tuple_text(param.shape)}, got "
                    f"{_tuple_text(tuple(arg.shape))} (the kernel was compiled for that shape)"
                )
            shape, want_strides = param.shape, param.strides
        strides = arg.stride()
        if any(
            got != want and extent != 1
            for got, want, extent in zip(strides, want_strides, shape)
        ):
            if want_strides == contiguous_strides(shape):
                raise ValueError(
                    f"parameter '{name}': expected a contiguous tensor with strides "
                    f"{_tuple_text(want_strides)}, got strides {_tuple_text(strides)} — "
                    f"pass {name}.contiguous()"
                )
            raise ValueError(
                f"parameter '{name}': expected strides {_tuple_text(want_strides)}, got "
                f"strides {_tuple_text(strides)}"
            )


def _tuple_text(values) -> str:
    """(1024, 1000), and (7,) for one element, as Python writes tuples."""
    return str(tuple(values))


def _from_dlpack_of(framework):
    """The function that takes a torch tensor into `framework`'s arrays (no copy)."""
    if framework == "cupy":
        import cupy

        return cupy.from_dlpack
    if framework in ("jax", "jaxlib"):
        import jax.dlpack

        return jax.dlpack.from_dlpack
    return None


def _type_text(value) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__name__
    return f"{kind.__module__}.{kind.__qualname__}"
