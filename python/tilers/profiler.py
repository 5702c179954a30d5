"""Profiling compiled kernels: inputs, checks against a reference, GPU timing and peak fractions.

    profiler = kernel.profiler()
    profiler.assert_allclose(lambda A, B: A @ B, rtol=1e-2, atol=1e-2)
    ms = profiler.do_bench()             # median over CUDA-event timed runs, L2 flushed
    print(kernel.bench(flops=2 * M * N * K))   # ms, TFLOPs, GB/s, fraction of the peak

Timing follows the usual method (Triton's do_bench): a few runs estimate the time, the
warm-up and measured run counts are derived from the `warmup` and `rep` budgets in
milliseconds, each measured run sits between two CUDA events with a 256 MiB buffer
zeroed before it (so the kernel starts from a cold L2), and the median is reported.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from .utils.tensor import SUPPLY_TYPES

# Zeroed before every timed run: larger than any L2 (60 MiB on the H200), as Triton does.
L2_FLUSH_BYTES = 256 * 1024 * 1024

# The runs that estimate a kernel's time before the measured runs are planned.
ESTIMATE_RUNS = 5

_flush_buffers: dict = {}


def _torch():
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("profiling on the GPU needs torch (pip install torch)") from error
    return torch


# ---------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Timing:
    """One benchmark: the median (ms) of the measured runs, or the estimate if stopped early."""

    ms: float
    runs: int
    stopped_early: bool = False
    samples: list = dataclasses.field(default_factory=list, repr=False)


def _flush_buffer(torch, device):
    buffer = _flush_buffers.get(device)
    if buffer is None:
        buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
        _flush_buffers[device] = buffer
    return buffer


def _timed_runs(torch, fn, count: int, flush) -> list[float]:
    """Milliseconds of each of `count` runs of fn, each between its own pair of CUDA events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def bench_timing(
    fn,
    warmup: float = 25,
    rep: float = 100,
    n_warmup: int = 0,
    n_repeat: int = 0,
    flush_l2: bool = True,
    cutoff_ms: float | None = None,
) -> Timing:
    """Time `fn` on the current CUDA stream; see the module docstring for the method.

    `warmup` and `rep` are budgets in milliseconds (`n_warmup`/`n_repeat` override the
    counts). When the estimate is over `cutoff_ms` the measurement stops there and the
    estimate is returned with ``stopped_early`` set: the autotuner's early stop.
    """
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    flush = _flush_buffer(torch, torch.cuda.current_device()) if flush_l2 else None
    estimate_samples = _timed_runs(torch, fn, ESTIMATE_RUNS, flush)
    estimate = statistics.median(estimate_samples)
    if cutoff_ms is not None and estimate > cutoff_ms:
        return Timing(estimate, ESTIMATE_RUNS, True, estimate_samples)
    per_run = max(estimate, 1e-3)
    n_warmup = n_warmup or max(1, int(warmup / per_run))
    n_repeat = n_repeat or max(1, int(rep / per_run))
    for _ in range(n_warmup):
        fn()
    samples = _timed_runs(torch, fn, n_repeat, flush)
    return Timing(statistics.median(samples), n_repeat, False, samples)


BACKENDS = ("event", "cupti", "cudagraph")


def do_bench(fn, warmup=25, rep=100, n_warmup=0, n_repeat=0, flush_l2=True, return_mode="median",
             *, backend="event", quantiles=None, _n_warmup=None, _n_repeat=None,
             fast_flush=None, device=None, cache_size=None, early_stop_baseline=None):
    """Milliseconds per call of `fn` (median by default; "mean", "min", "max" or "all").

    TileLang's spellings are accepted: ``_n_warmup``/``_n_repeat`` (run counts instead of the
    ``warmup``/``rep`` budgets in ms), ``fast_flush`` (as ``flush_l2``), ``quantiles`` (a
    list of the sample quantiles, or one value for one quantile) and ``backend``: "event"
    (CUDA events around each call), "cupti" (timed with CUDA events too: the L2 flush sits
    outside the timed interval either way) or "cudagraph" (the calls captured in a CUDA
    graph and replayed, the launch overhead left out). ``device``, ``cache_size`` and
    ``early_stop_baseline`` are accepted and have no effect."""
    if backend not in BACKENDS:
        raise ValueError(f"parameter 'backend': expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if _n_warmup is not None:
        n_warmup = _n_warmup
    if _n_repeat is not None:
        n_repeat = _n_repeat
    if fast_flush is not None:
        flush_l2 = fast_flush
    if backend == "cudagraph":
        samples = _graph_samples(fn, warmup, rep, n_warmup, n_repeat)
    else:
        samples = bench_timing(fn, warmup, rep, n_warmup, n_repeat, flush_l2).samples
    if quantiles is not None:
        ordered = sorted(samples)
        values = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in quantiles]
        return values[0] if len(values) == 1 else values
    return _reduce(samples, return_mode)


def _graph_samples(fn, warmup, rep, n_warmup, n_repeat) -> list:
    """Per-call ms of `fn` captured `n` times in one CUDA graph, the graph replayed 10 times."""
    torch = _torch()
    estimate = bench_timing(fn, warmup, rep, n_warmup or 1, n_repeat or ESTIMATE_RUNS, False).ms
    count = n_repeat or max(1, int(rep / max(estimate, 1e-3)))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()  # warm up on the capture stream
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(count):
                fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(10):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / count)
    return samples


def _reduce(samples, return_mode):
    if return_mode == "median":
        return statistics.median(samples)
    if return_mode == "mean":
        return statistics.fmean(samples)
    if return_mode == "min":
        return min(samples)
    if return_mode == "max":
        return max(samples)
    if return_mode == "all":
        return list(samples)
    raise ValueError(
        f"parameter 'return_mode': expected median, mean, min, max or all, got {return_mode!r}"
    )


# ---------------------------------------------------------------------------------------
# the device's peak
# ---------------------------------------------------------------------------------------

# Dense peak throughput (TFLOP/s) by operand dtype, and memory bandwidth (GB/s), from the
# vendor's data sheets. Checked in order: the first name fragment found in the device's
# name wins.
PEAKS = (
    ("H200", 4800, {"float16": 989.4, "bfloat16": 989.4, "float8": 1978.9, "int8": 1978.9,
                    "tfloat32": 494.7, "float32": 66.9, "float64": 66.9}),
    ("H100 PCIe", 2000, {"float16": 756.0, "bfloat16": 756.0, "float8": 1513.0, "int8": 1513.0,
                         "tfloat32": 378.0, "float32": 51.2, "float64": 51.2}),
    ("H100", 3350, {"float16": 989.4, "bfloat16": 989.4, "float8": 1978.9, "int8": 1978.9,
                    "tfloat32": 494.7, "float32": 66.9, "float64": 66.9}),
    ("A100-SXM4-40GB", 1555, {"float16": 312.0, "bfloat16": 312.0, "int8": 624.0,
                              "tfloat32": 156.0, "float32": 19.5, "float64": 19.5}),
    ("A100", 2039, {"float16": 312.0, "bfloat16": 312.0, "int8": 624.0,
                    "tfloat32": 156.0, "float32": 19.5, "float64": 19.5}),
    ("L40S", 864, {"float16": 362.0, "bfloat16": 362.0, "float8": 733.0, "int8": 733.0,
                   "tfloat32": 183.0, "float32": 91.6}),
    ("RTX 4090", 1008, {"float16": 165.2, "bfloat16": 165.2, "float8": 330.3, "int8": 660.6,
                        "float32": 82.6}),
)


@dataclasses.dataclass
class DevicePeak:
    name: str
    bandwidth_gbps: float | None
    tflops: dict

    def tflops_for(self, dtype: str | None) -> float | None:
        if dtype is None:
            return None
        if dtype.startswith("float8"):
            dtype = "float8"
        return self.tflops.get(dtype)


def device_peak(device_index: int = 0) -> DevicePeak:
    """The data-sheet peak of a device; bandwidth from its memory clock when not listed."""
    from tilers import runtime

    name = runtime.device_name(device_index)
    for fragment, bandwidth, tflops in PEAKS:
        if fragment in name:
            return DevicePeak(name, float(bandwidth), dict(tflops))
    try:
        clock_khz = runtime.device_attribute(device_index, runtime.ATTRIBUTE_MEMORY_CLOCK_RATE)
        bus_bits = runtime.device_attribute(
            device_index, runtime.ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
        )
        bandwidth = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None
    except RuntimeError:
        bandwidth = None
    return DevicePeak(name, bandwidth, {})


@dataclasses.dataclass
class BenchResult:
    """What kernel.bench reports; printing it gives one line."""

    name: str
    ms: float
    flops: float | None
    bytes: float | None
    tflops: float | None
    gbps: float | None
    peak_tflops: float | None
    peak_gbps: float | None
    device: str

    @property
    def compute_fraction(self) -> float | None:
        if self.tflops is None or not self.peak_tflops:
            return None
        return self.tflops / self.peak_tflops

    @property
    def memory_fraction(self) -> float | None:
        if self.gbps is None or not self.peak_gbps:
            return None
        return self.gbps / self.peak_gbps

    def __str__(self) -> str:
        parts = [f"{self.name}: {self.ms * 1e3:.2f} us" if self.ms < 0.1 else
                 f"{self.name}: {self.ms:.4f} ms"]
        if self.tflops is not None:
            text = f"{self.tflops:.1f} TFLOP/s"
            if self.compute_fraction is not None:
                text += f" ({self.compute_fraction:.0%} of {self.peak_tflops:.0f})"
            parts.append(text)
        if self.gbps is not None:
            text = f"{self.gbps:.0f} GB/s"
            if self.memory_fraction is not None:
                text += f" ({self.memory_fraction:.0%} of {self.peak_gbps:.0f})"
            parts.append(text)
        return ", ".join(parts) + f" on {self.device}"


# ---------------------------------------------------------------------------------------
# the profiler of one kernel
# ---------------------------------------------------------------------------------------


def _poison(torch, tensor, pattern: int = 0) -> None:
    """Fill `tensor` with a value a correct kernel overwrites (see Profiler.run_poisoned)."""
    if tensor.dtype.is_floating_point:
        tensor.fill_(float("nan"))
    elif tensor.dtype is torch.bool:
        tensor.fill_(pattern == 0)
    else:
        info = torch.iinfo(tensor.dtype)
        tensor.fill_(info.max if pattern == 0 else info.min)


class Profiler:
    """Inputs, checks and timing for one compiled kernel (``kernel.profiler()``).

    The kernel's outputs are its ``out_idx`` parameters, or its last tensor parameter
    when it has none (written in place); every other parameter is an input. Inputs are
    random tensors of the declared shapes and dtypes (``supply_type``), and scalars take
    ``scalars[name]`` (default 1 / 1.0). A kernel with T.dynamic sizes takes their values
    for the inputs from ``sizes`` (``{"M": 1024}``).
    """

    def __init__(self, kernel, supply_type="auto", scalars=None, seed=0, sizes=None):
        from tilers import _sizes
        from tilers.utils.tensor import supply_name

        supply_type = supply_name(supply_type)
        if supply_type not in SUPPLY_TYPES:
            raise ValueError(
                f"parameter 'supply_type': expected one of {', '.join(SUPPLY_TYPES)}, "
                f"got {supply_type!r}"
            )
        declared = [size["name"] for size in kernel.info.get("sizes", [])]
        sizes = dict(sizes or {})
        unknown = sorted(set(sizes) - set(declared))
        missing = [name for name in declared if name not in sizes]
        if unknown:
            raise ValueError(
                f"parameter 'sizes': {kernel.name} has no T.dynamic size "
                f"{', '.join(map(repr, unknown))} (its sizes: {', '.join(declared) or 'none'})"
            )
        if missing:
            raise ValueError(
                f"parameter 'sizes': {kernel.name} has T.dynamic sizes; give the profiler "
                f"their values, e.g. sizes={{{', '.join(f'{n!r}: 1024' for n in missing)}}}"
            )
        self.size_values = [sizes[name] for name in declared]
        self._shape_at = _sizes.shape_at
        self.kernel = kernel
        self.func = kernel  # TileLang's name: the kernel, called as profiler.func(*args)
        self.supply_type = supply_type
        self.scalars = dict(scalars or {})
        self.seed = seed
        specs = kernel.info["params"]
        if kernel.out_idx:
            self.output_positions = list(kernel.out_idx)
        else:
            tensors = [i for i, spec in enumerate(specs) if spec["kind"] == "tensor"]
            self.output_positions = tensors[-1:]
        self._inputs = None

    # --- inputs -------------------------------------------------------------------------

    def supply(self) -> list:
        """Fresh arguments for the kernel's call: its inputs, plus in-place outputs."""
        torch = _torch()
        generator = torch.Generator(device="cuda").manual_seed(self.seed)
        args = []
        for position in self.kernel._input_positions:
            spec = self.kernel.info["params"][position]
            if spec["kind"] == "tensor":
                args.append(self._tensor(torch, spec, generator))
            else:
                default = 1.0 if spec["dtype"].startswith("float") else 1
                if spec["dtype"] == "bool":
                    default = True
                args.append(self.scalars.get(spec["name"], default))
        return args

    def _tensor(self, torch, spec, generator):
        from .utils.tensor import make_tensor

        shape = self._shape_at(spec, self.size_values)
        return make_tensor(self.supply_type, shape, getattr(torch, spec["dtype"]), "cuda", generator)

    def inputs(self) -> list:
        """The arguments the profiler uses by default (supplied once, then kept)."""
        if self._inputs is None:
            self._inputs = self.supply()
        return self._inputs

    # --- running and checking -----------------------------------------------------------

    def run(self, args=None) -> list:
        """Call the kernel; the list of its outputs (see the class docstring)."""
        args = self.inputs() if args is None else list(args)
        result = self.kernel(*args)
        if self.kernel.out_idx:
            return list(result) if isinstance(result, tuple) else [result]
        by_position = dict(zip(self.kernel._input_positions, args))
        return [by_position[position] for position in self.output_positions]

    def run_poisoned(self, args=None, pattern: int = 0) -> list:
        """Run the kernel with each output first filled with a value it should never hold
        (NaN for floats; for integers the largest value, or with `pattern=1` the smallest;
        True, or False), so that every element the kernel leaves unwritten shows. Outputs
        the kernel allocates (`out_idx`) are allocated here instead, poisoned, and passed
        in place: torch's caching allocator would otherwise hand back memory that still
        holds an earlier run's correct result."""
        torch = _torch()
        kernel = self.kernel
        args = self.inputs() if args is None else list(args)
        if not kernel.out_idx:
            by_position = dict(zip(kernel._input_positions, args))
            for position in self.output_positions:
                _poison(torch, by_position[position], pattern)
            return self.run(args)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        full = [None] * len(kernel.params)
        for position, arg in zip(kernel._input_positions, args):
            full[position] = arg
        outputs = []
        for position in kernel.out_idx:
            spec = kernel.info["params"][position]
            output = torch.empty(
                self._shape_at(spec, self.size_values), dtype=getattr(torch, spec["dtype"]),
                device=device if device is not None else "cuda",
            )
            _poison(torch, output, pattern)
            full[position] = output
            outputs.append(output)
        kernel._with_outputs_given()(*full)
        return outputs

    def reference_args(self, args) -> list:
        """The arguments `ref_prog` takes: the kernel's inputs, without in-place outputs."""
        if self.kernel.out_idx:
            return list(args)
        return [
            arg for position, arg in zip(self.kernel._input_positions, args)
            if position not in self.output_positions
        ]

    def reference(self, ref_prog, args=None) -> list:
        args = self.inputs() if args is None else list(args)
        expected = ref_prog(*self.reference_args(args))
        return list(expected) if isinstance(expected, (tuple, list)) else [expected]

    def assert_allclose(self, ref_prog=None, rtol=1e-2, atol=1e-2, args=None, expected=None,
                        *, reference_program=None, input_tensors=None,
                        max_mismatched_ratio=0.01) -> None:
        """Run the kernel and `ref_prog` on the same inputs; raise AssertionError where more
        than ``max_mismatched_ratio`` of an output's elements (1%, TileLang's default; 0 for
        none) differ by more than ``atol + rtol * |expected|``, naming the output.
        TileLang's names: ``reference_program``, ``input_tensors``."""
        if reference_program is not None:
            ref_prog = reference_program
        if ref_prog is None:
            raise TypeError("assert_allclose() needs the reference: assert_allclose(ref_prog)")
        if input_tensors is not None:
            args = input_tensors
        self._mismatch_ratio = max_mismatched_ratio
        args = self.inputs() if args is None else list(args)
        if expected is None:
            expected = self.reference(ref_prog, args)
        # outputs are poisoned first (run_poisoned); integer and bool outputs twice, with
        # two patterns, since a reference may hold either value where the kernel wrote none
        actual = self.run_poisoned(args)
        self._compare(actual, expected, rtol, atol)
        if any(not out.dtype.is_floating_point for out in actual):
            self._compare(self.run_poisoned(args, pattern=1), expected, rtol, atol)

    def _compare(self, actual, expected, rtol, atol) -> None:
        torch = _torch()
        if len(actual) != len(expected):
            raise AssertionError(
                f"{self.kernel.name} has {len(actual)} output(s) but the reference "
                f"returned {len(expected)}"
            )
        names = [self.kernel.params[p] for p in self.output_positions]
        for name, got, want in zip(names, actual, expected):
            want = torch.as_tensor(want, device=got.device)
            if tuple(want.shape) != tuple(got.shape):
                raise AssertionError(
                    f"output '{name}' of {self.kernel.name}: shape {tuple(got.shape)}, the "
                    f"reference's is {tuple(want.shape)}"
                )
            got64, want64 = got.double(), want.double()
            error = (got64 - want64).abs()
            bound = atol + rtol * want64.abs()
            bad = ~(error <= bound) & ~(got64.isnan() & want64.isnan())
            allowed = int(got.numel() * (getattr(self, "_mismatch_ratio", None) or 0))
            if int(bad.sum()) > allowed:
                count = int(bad.sum())
                worst = float(error[bad].max())
                index = tuple(int(i) for i in bad.nonzero()[0])
                raise AssertionError(
                    f"output '{name}' of {self.kernel.name} differs from the reference at "
                    f"{count} of {got.numel()} elements (first at {index}: {float(got64[index])} "
                    f"vs {float(want64[index])}); largest error {worst:.3g} "
                    f"(rtol={rtol}, atol={atol})"
                )

    # --- timing -------------------------------------------------------------------------

    def do_bench(
        self, func=None, warmup=25, rep=100, n_warmup=0, n_repeat=0, args=None,
        flush_l2=True, return_mode="median", *, input_tensors=None, backend="event",
        quantiles=None, dynamic_symbolic_constraints=None, device=None,
        early_stop_baseline=None,
    ) -> float:
        """Milliseconds per call of the kernel on the profiler's inputs (or of `func`, with
        them as its arguments); ``input_tensors`` is TileLang's name for ``args``."""
        if input_tensors is not None:
            args = input_tensors
        call_args = self.inputs() if args is None else list(args)
        target = self.kernel if func is None else func

        def call():
            target(*call_args)

        return do_bench(call, warmup, rep, n_warmup, n_repeat, flush_l2, return_mode,
                        backend=backend, quantiles=quantiles)

    def run_once(self, func=None):
        """One call of the kernel (or of `func`) on the profiler's inputs; its result."""
        target = self.kernel if func is None else func
        return target(*self.inputs())

    def __call__(self, *args):
        return self.kernel(*(args or self.inputs()))

    def bench(self, flops=None, bytes=None, warmup=25, rep=100, args=None, dtype=None):
        """Time the kernel; report ms, TFLOP/s (given `flops`), GB/s and peak fractions.

        `bytes` defaults to every tensor parameter read or written once; `dtype` picks
        the compute peak (default: the first tensor parameter's dtype).
        """
        torch = _torch()
        ms = self.do_bench(warmup=warmup, rep=rep, args=args)
        specs = self.kernel.info["params"]
        if bytes is None:
            bytes = sum(
                math.prod(self._shape_at(spec, self.size_values)) * _element_size(torch, spec["dtype"])
                for spec in specs if spec["kind"] == "tensor"
            )
        if dtype is None:
            dtype = next((spec["dtype"] for spec in specs if spec["kind"] == "tensor"), None)
        peak = device_peak(torch.cuda.current_device())
        return BenchResult(
            name=self.kernel.name,
            ms=ms,
            flops=flops,
            bytes=bytes,
            tflops=flops / ms / 1e9 if flops else None,
            gbps=bytes / ms / 1e6 if bytes else None,
            peak_tflops=peak.tflops_for(dtype),
            peak_gbps=peak.bandwidth_gbps,
            device=peak.name,
        )


def _element_size(torch, dtype: str) -> int:
    return getattr(torch, dtype).itemsize
