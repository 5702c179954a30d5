"""JITKernel: a compiled kernel that checks its arguments and launches on torch tensors."""

from __future__ import annotations

import ctypes
import json
import math
import numbers
import operator
import os
import weakref

from tilers import cache, host, runtime
from tilers._source import add_call_site

# Every dtype of docs/format.md, by the name of its torch dtype (the same names).
TORCH_DTYPE_NAMES = (
    "bool", "int8", "uint8", "int16", "int32", "uint32", "int64",
    "float16", "bfloat16", "float32", "float64",
)

FLOAT32_MAX = 3.4028234663852886e38


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides, in elements, of a tensor of `shape`."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


class _TensorParam:
    """What a tensor argument must be, precomputed once so that a call only compares."""

    is_tensor = True

    def __init__(self, index: int, spec: dict, torch):
        self.index = index
        self.name = spec["name"]
        self.dtype = spec["dtype"]
        self.torch_dtype = getattr(torch, spec["dtype"])
        self.shape = tuple(spec["shape"])
        self.strides = tuple(spec["strides"])
        self.align = spec["align"]

    def describe(self) -> str:
        return f"a torch.Tensor of {self.dtype} with shape {_tuple_text(self.shape)}"


class _ScalarParam:
    """What a scalar argument must be: its dtype and, for integers, its range."""

    is_tensor = False

    def __init__(self, index: int, spec: dict):
        self.index = index
        self.name = spec["name"]
        self.dtype = spec["dtype"]
        self.ctype = runtime.SCALAR_CTYPES[spec["dtype"]]
        self.range = runtime.INTEGER_RANGES.get(spec["dtype"])

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
        if self.dtype == "float32" and math.isfinite(value) and abs(value) > FLOAT32_MAX:
            raise OverflowError(
                f"parameter '{self.name}': {value} does not fit in float32 "
                f"(largest finite value {FLOAT32_MAX})"
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
        out_idx: list[int] | None,
        *,
        lineinfo: bool = False,
        fast_math: bool = False,
    ):
        self.name = name
        self.program_json = program_json
        self.source = source
        self.info = info
        self.target = target
        self.arch = info["arch"]
        self.entry = info["entry"]
        self.lineinfo = lineinfo
        self.fast_math = fast_math
        self.params = [spec["name"] for spec in info["params"]]
        self.out_idx = self._normalize_out_idx(out_idx)
        self._input_positions = [i for i in range(len(self.params)) if i not in self.out_idx]
        self._cubin: bytes | None = None
        # kernel.ir() and kernel.layouts() compile again for their data, once
        self._ir_dumps: dict[str, str] | None = None
        self._layouts: dict | None = None
        # Filled on the first call (it imports torch): see _prepare.
        self._checks: list | None = None
        self._loaded: dict[int, runtime.LoadedKernel] = {}
        # Made after the first launch that passed the Python checks: see _make_launcher.
        self._launcher = None
        self._launcher_problem: str | None = None
        self._entry = self._call_checked
        self._outputs_given: JITKernel | None = None

    def _normalize_out_idx(self, out_idx) -> list[int]:
        if out_idx is None:
            return []
        if isinstance(out_idx, int):
            out_idx = [out_idx]
        count = len(self.params)
        positions = []
        for index in out_idx:
            if not -count <= index < count:
                raise ValueError(
                    f"parameter 'out_idx': {index} is not a parameter index of {self.name} "
                    f"({count} parameters: {', '.join(self.params)})"
                )
            position = index % count
            if self.info["params"][position]["kind"] != "tensor":
                raise ValueError(
                    f"parameter 'out_idx': {index} names scalar parameter "
                    f"'{self.params[position]}'; only tensors can be outputs"
                )
            positions.append(position)
        return positions

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

    # --- what the compiler made of it (tilers/report.py, tilers/plot.py) -----------------

    def _lowering_arch(self) -> str:
        # a kernel for the interpreter has no lowering of its own: show the default target's
        return self.arch if self.source is not None else "sm_90a"

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
        the names of the passes (a pass that runs twice is "simplify#2" the second time)."""
        from tilers import report

        if self._ir_dumps is None:
            self._ir_dumps = report.ir_dumps(self.program_json, self._lowering_arch())
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
            from tilers import report

            self._layouts = report.layout_data(self.program_json, self._lowering_arch())
        return self._layouts

    # --- profiling (tilers/profiler.py) ---------------------------------------------------

    def profiler(self, supply_type="auto", scalars=None, seed=0):
        """A Profiler: inputs, ``assert_allclose(ref_prog, rtol, atol)``, ``do_bench()``."""
        from tilers.profiler import Profiler

        return Profiler(self, supply_type=supply_type, scalars=scalars, seed=seed)

    def get_profiler(self, tensor_supply_type="auto"):
        """TileLang's name for ``profiler()``."""
        return self.profiler(supply_type=tensor_supply_type)

    def bench(self, flops=None, bytes=None, warmup=25, rep=100, dtype=None):
        """Time the kernel on random inputs: ms, TFLOP/s, GB/s and fractions of the peak.

        >>> print(kernel.bench(flops=2 * M * N * K))
        """
        return self.profiler().bench(flops=flops, bytes=bytes, warmup=warmup, rep=rep, dtype=dtype)

    def __repr__(self) -> str:
        parts = []
        for position, spec in enumerate(self.info["params"]):
            if spec["kind"] == "tensor":
                text = f"{spec['name']}: {spec['dtype']}{list(spec['shape'])}"
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

    # kernel(*args) is self._entry(*args): _call_checked until the native launcher
    # (crates/tile-py/src/launcher.rs) exists, then the launcher, which checks and launches
    # in one call and passes whatever it does not accept on to _call_checked. A property
    # rather than a method, so that the hot path runs no Python frame (~0.13 µs a call).
    __call__ = property(operator.attrgetter("_entry"))

    def _call_checked(self, *args, **kwargs):
        """The call with every check in Python: the first call, and whatever the launcher
        passes on (it raises the detailed error, or runs what the launcher does not take)."""
        if kwargs:
            inputs = ", ".join(self.params[i] for i in self._input_positions)
            raise TypeError(
                f"{self.name}() takes its arguments by position, not by keyword "
                f"({', '.join(kwargs)}): call it as {self.name}({inputs})"
            )
        if len(args) != len(self._input_positions):
            raise self._argument_count_error(len(args))
        if self._checks is None:
            # First call (or target="interp"): host arrays go to the interpreter. Later
            # calls take the GPU path and divert only when a tensor check fails.
            if self._runs_on_host(args):
                return host.call(self, args, self._check_scalar)
            self._prepare(args)
        tensor_type = self._tensor_type
        one_device = self._one_device

        # Validate every argument before allocating or launching anything.
        values = list(self._values)
        device = None
        for (index, torch_dtype, shape, strides, align, param), arg in zip(self._input_specs, args):
            if torch_dtype is None:  # a scalar
                values[index] = param.check(arg)
                continue
            if not (
                isinstance(arg, tensor_type)
                and arg.is_cuda
                and arg.dtype is torch_dtype
                and arg.shape == shape
                and arg.stride() == strides
            ):
                if self._runs_on_host(args):
                    return host.call(self, args, self._check_scalar)
                self._diagnose_tensor(param, arg)
            pointer = arg.data_ptr()
            if pointer % align:
                raise ValueError(
                    f"parameter '{param.name}': the kernel assumes a {param.align}-byte aligned "
                    f"data pointer, but this one is {pointer % param.align} bytes past a "
                    f"multiple of {param.align} (a view that starts at an offset, such as "
                    f"x[1:]?) — pass {param.name}.clone()"
                )
            values[index] = pointer
            if one_device:  # every CUDA tensor is on device 0
                device = 0
                continue
            arg_device = arg.get_device()
            if device is None:
                device = arg_device
                first_tensor = param.name
            elif arg_device != device:
                raise ValueError(
                    f"parameter '{param.name}': expected a tensor on cuda:{device} like "
                    f"'{first_tensor}', got a tensor on cuda:{arg_device}"
                )

        grid = self._grid
        if grid is None:
            grid = self._grid_of(values)
        if device is None:
            device = self._torch.cuda.current_device()
        loaded = self._loaded.get(device)
        if loaded is None:
            loaded = self._load(device)

        outputs = []
        if self.out_idx:
            empty_strided = self._torch.empty_strided
            for param in self._output_checks:
                output = empty_strided(
                    param.shape, param.strides, dtype=param.torch_dtype, device=device
                )
                values[param.index] = output.data_ptr()
                outputs.append(output)

        stream = self._current_stream(device)
        if loaded.native:
            self._native_launch(
                loaded.function_handle, loaded.context_handle, grid, self._block,
                loaded.shared_bytes, stream, values, self._kinds,
            )
            if self._launcher is None and self._launcher_problem is None:
                self._make_launcher(args, device)
        else:
            runtime.launch(loaded, grid, self._block, stream, tuple(values), self._ctypes_types)

        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _runs_on_host(self, args) -> bool:
        """Whether this call goes to the interpreter: host arrays, or target="interp".

        Mixing host arrays and GPU tensors in one call is an error naming both sides.
        """
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

    def _prepare(self, args) -> None:
        """First call: refuse what cannot run here, import torch, precompute the checks."""
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
        torch.cuda.init()
        checks = []
        for index, spec in enumerate(self.info["params"]):
            if spec["kind"] == "tensor":
                checks.append(_TensorParam(index, spec, torch))
            else:
                checks.append(_ScalarParam(index, spec))
        self._ctypes_types = tuple(
            ctypes.c_void_p if check.is_tensor else check.ctype for check in checks
        )
        # the fast path's precomputed pieces: the checks of the inputs and outputs in
        # call order, the argument kinds of _tilers.launch, the tensor type
        # (index, torch dtype or None for a scalar, shape, strides, align, check): unpacked
        # per argument, cheaper than reading the check's attributes
        self._input_specs = tuple(
            (check.index, check.torch_dtype, check.shape, check.strides, check.align, check)
            if check.is_tensor else (check.index, None, None, None, 1, check)
            for check in (checks[position] for position in self._input_positions)
        )
        self._output_checks = tuple(checks[position] for position in self.out_idx)
        self._values = (None,) * len(checks)
        self._kinds = bytes(
            ord("P") if check.is_tensor else ord(runtime.SCALAR_KINDS[check.ctype])
            for check in checks
        )
        native = runtime.native()
        self._native_launch = native.launch if native is not None else None
        self._tensor_type = torch.Tensor
        self._one_device = torch.cuda.device_count() == 1
        self._block = tuple(self.info["block"])
        uses_params = any(runtime.grid_params(gexpr) for gexpr in self.info["grid"])
        self._grid = None if uses_params else runtime.eval_grid(self.info["grid"], [])
        self._grid_of = runtime.grid_evaluator(self.info["grid"], self.params)
        # torch's private raw-stream getter returns the handle as an int and costs a
        # fraction of torch.cuda.current_stream(device).cuda_stream; keep the public
        # route for a torch without it.
        raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw_stream is not None:
            self._current_stream = raw_stream
        else:
            self._current_stream = lambda device: torch.cuda.current_stream(device).cuda_stream
        self._torch = torch
        self._checks = checks

    def _load(self, device: int) -> runtime.LoadedKernel:
        """Check that this device can run the cubin, then load it there (once per device)."""
        device_arch = runtime.device_arch(device)
        if not runtime.cubin_runs_on(self.arch, device_arch):
            raise RuntimeError(
                f"kernel '{self.name}' was compiled for {self.arch}, but its tensors are on "
                f"cuda:{device}, an {runtime.device_name(device)} ({device_arch}), which "
                f"cannot run it: compile with target=\"auto\" or target=\"cuda:{device_arch}\""
            )
        loaded = runtime.load_kernel(
            device, self.cubin, self.entry, self.info.get("shared_bytes", 0)
        )
        self._loaded[device] = loaded
        if self._launcher is not None:
            self._launcher.add_device(device, loaded.function_handle, loaded.context_handle)
        return loaded

    def _make_launcher(self, args, device: int, dry_run: bool = False) -> None:
        """Build the native launcher from this call's arguments, which passed every check.

        Why: checking arguments in Python costs ~0.6 µs per tensor, more than the launch
        itself for a few tensors. The launcher reads tensors through torch's C shim
        (crates/tile-py/src/torch_shim.rs); where that is unavailable, or the kernel's
        grid reads a float, the Python checks stay the only path (`_launcher_problem`).
        `dry_run` (benchmarks without a GPU): the launcher stops short of cuLaunchKernel.
        """
        self._launcher_problem = _launcher_unavailable(self)
        if self._launcher_problem is not None:
            return
        from tilers import _tilers

        torch = self._torch
        first_tensor = next(
            (arg for arg, (_, dtype, *_) in zip(args, self._input_specs) if dtype is not None),
            None,
        )
        if first_tensor is None:  # only scalars in: no tensor to take the device from
            self._launcher_problem = "Launcher: the kernel takes no tensor argument"
            return
        codes = _tilers.tensor_codes(first_tensor)
        if codes is None:  # a tensor subclass: try again on a later call
            self._launcher_problem = None
            return
        _, device_type = codes
        params = []
        for check in self._checks:
            if check.is_tensor:
                params.append({
                    "kind": "tensor", "dtype_code": _dtype_code(torch, check.torch_dtype),
                    "shape": check.shape, "strides": check.strides, "align": check.align,
                })
            else:
                params.append({"kind": "scalar", "pack": runtime.SCALAR_KINDS[check.ctype]})
        spec = {
            "params": params, "inputs": self._input_positions, "outputs": self.out_idx,
            "grid": self.info["grid"], "block": self._block,
            "shared_bytes": self.info.get("shared_bytes", 0), "device_type": device_type,
            "devices": max(torch.cuda.device_count(), device + 1),
        }
        try:
            launcher = _tilers.Launcher(
                json.dumps(spec), [check.torch_dtype for check in self._output_checks],
                torch.empty_strided, self._current_stream,
                weakref.WeakMethod(self._call_checked), dry_run,
            )
        except ValueError as error:  # a grid of float parameters, over 32 parameters
            self._launcher_problem = str(error)
            return
        for loaded_device, loaded in self._loaded.items():
            launcher.add_device(loaded_device, loaded.function_handle, loaded.context_handle)
        self._launcher = launcher
        self._entry = launcher

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
        if not arg.is_cuda:
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
        if tuple(arg.shape) != param.shape:
            raise ValueError(
                f"parameter '{name}': expected shape {_tuple_text(param.shape)}, got "
                f"{_tuple_text(tuple(arg.shape))} (the kernel was compiled for that shape)"
            )
        strides = arg.stride()
        if any(
            got != want and extent != 1
            for got, want, extent in zip(strides, param.strides, param.shape)
        ):
            if param.strides == contiguous_strides(param.shape):
                raise ValueError(
                    f"parameter '{name}': expected a contiguous tensor with strides "
                    f"{_tuple_text(param.strides)}, got strides {_tuple_text(strides)} — "
                    f"pass {name}.contiguous()"
                )
            raise ValueError(
                f"parameter '{name}': expected strides {_tuple_text(param.strides)}, got "
                f"strides {_tuple_text(strides)}"
            )


# torch's ScalarType number of each torch dtype, read once through the shim.
_dtype_codes: dict = {}

# Why tensors cannot be read through torch's C shim in this process ("" when they can);
# None until the first launcher asks.
_shim_problem: str | None = None


def _launcher_unavailable(kernel: JITKernel) -> str | None:
    """Why `kernel` cannot have a native launcher, or None when it can."""
    global _shim_problem
    if os.environ.get("TILERS_FAST_LAUNCH", "1") == "0":
        return "TILERS_FAST_LAUNCH=0"
    if _shim_problem is None:
        from tilers import _tilers

        torch = kernel._torch
        # not contiguous and at an offset, so the shim must get every field right
        sample = torch.empty((3, 4, 5))[1:, ::2, 1:]
        _shim_problem = _tilers.load_torch_shim(sample, (torch.Tensor, torch.nn.Parameter))
    return f"torch's C shim is not usable: {_shim_problem}" if _shim_problem else None


def _dtype_code(torch, dtype) -> int:
    code = _dtype_codes.get(dtype)
    if code is None:
        from tilers import _tilers

        code, _ = _tilers.tensor_codes(torch.empty(0, dtype=dtype))
        _dtype_codes[dtype] = code
    return code


def _tuple_text(values) -> str:
    """(1024, 1000), and (7,) for one element, as Python writes tuples."""
    return str(tuple(values))


def _type_text(value) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__name__
    return f"{kind.__module__}.{kind.__qualname__}"
