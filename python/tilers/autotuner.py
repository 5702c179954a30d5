"""@tilers.autotune: compile a factory's configs in parallel, check and time each, keep the fastest.

    @tilers.autotune(configs=[{"block_M": 64, "block_N": 128}, ...], ref_prog=torch.add)
    @tilers.jit(out_idx=[2])
    def add(M, N, block_M, block_N): ...

    kernel = add(4096, 4096)   # tunes once; later calls (and processes) reuse the record

How a search runs (``AutotunedFunction.tune``):

1. Every config is compiled in a thread pool, one task per config (trace, the Rust core
   and NVRTC; the last two release the GIL, so compiles scale with CPU cores). A config
   that fails to compile is reported and never chosen.
2. Staged search when the configs vary both tile sizes (parameters named ``block*`` or
   ``tile*``, or ``tile_keys=``) and other parameters (stages, threads): round 1 times
   one config per distinct tile size, round 2 every config of the ``keep`` fastest tile
   sizes (and of any within 5% of the best). Otherwise every config is timed.
3. Before a config is timed it is checked against ``ref_prog`` (when given) on the same
   random inputs; a wrong result is reported and never chosen. Timing is
   ``profiler.bench_timing`` (CUDA events, L2 flushed, median); a config whose first
   estimate is over ``early_stop`` times the best so far stops there.
4. The best config, every config's outcome and the timing are saved as a tuning record
   (``python -m tilers tuning`` lists them), keyed by ``record_fields``: the factory's
   source and the helpers and constants it reads, the config space, the problem (the
   factory's other arguments), tilers' and NVRTC's versions and the GPU (model,
   architecture, SM count). The same key reuses the record without timing anything.

A factory whose kernel has T.dynamic sizes compiles once per config whatever the sizes;
calling the autotuned factory returns a ``DynamicKernel`` that binds the sizes of each call
from its tensors, maps them to a bucket (``bucket=``; by default each size rounded up to a
power of two and to its ``multiple_of``: M = 1000 is tuned at 1024, and 0 shares the bucket
of 1), and runs that bucket's best config — searched (with inputs at the bucket's sizes) the
first time a bucket is met, or read from its record. The bucket's sizes are part of the
record's key, so a nearby batch size finds the tuned config again without a search.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import hashlib
import inspect
import json
import math
import os
import sys
import textwrap
import threading
import time
import types

from .errors import TileError

RECORD_VERSION = 1

# Tile-size parameters for the staged search, when tile_keys= is not given.
TILE_PREFIXES = ("block", "tile")

# In round 2 the search also keeps tile sizes whose round-1 time is within this of the best.
KEEP_MARGIN = 0.05
# 32-bit registers one thread may have (sm_80 and sm_90).
MAX_THREAD_REGISTERS = 255

def next_power_of_two(value: int) -> int:
    """The default bucket of a T.dynamic size: the next power of two (0 and 1 give 1)."""
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


STATUSES = ("ok", "compile error", "wrong result", "run error", "stopped early", "skipped")


@dataclasses.dataclass
class ConfigResult:
    """What happened to one config: status (see STATUSES), time in ms, error text, round."""

    config: dict
    status: str = "skipped"
    ms: float | None = None
    error: str | None = None
    round: int = 0
    # where and when it was timed: the device (a GPU index, "cpu"; None in the asking
    # process) and seconds since the search began
    device: int | str | None = None
    finished: float | None = None

    def as_json(self) -> dict:
        out = {
            "config": self.config, "status": self.status, "ms": self.ms,
            "error": self.error, "round": self.round,
        }
        if self.device is not None:
            out["device"] = self.device
        if self.finished is not None:
            out["finished"] = self.finished
        return out


@dataclasses.dataclass
class TuneResult:
    """The outcome of a search (or of a reused record): the best config and its kernel."""

    config: dict
    ms: float
    kernel: object
    results: list
    key: str
    record: dict
    from_record: bool
    seconds: float
    # the T.dynamic sizes the configs were timed at (the bucket); empty for fixed shapes
    sizes: dict = dataclasses.field(default_factory=dict)

    @property
    def latency(self) -> float:  # TileLang's name
        return self.ms

    @property
    def ref_latency(self):  # TileLang's: the reference's time; tilers does not time it
        return None


# ---------------------------------------------------------------------------------------
# record keys
# ---------------------------------------------------------------------------------------


def canonical(value):
    """A JSON-able stand-in for a value in a record key (dtypes and other objects by repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return repr(value)


def digest(value) -> str:
    text = json.dumps(canonical(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _code_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _user_function(value):
    """The Python function behind `value` when it is user code worth hashing, else None."""
    from ._trace import PrimFunc
    from .jit import JitFunction

    if isinstance(value, AutotunedFunction):
        value = value.jit_function
    if isinstance(value, JitFunction):
        value = value.factory
    if isinstance(value, PrimFunc):
        value = value.func
    if not isinstance(value, types.FunctionType):
        return None
    package = (value.__module__ or "").split(".")[0]
    if package in ("tilers", "torch", "numpy") or package in sys.stdlib_module_names:
        return None
    return value


def _is_constant(value) -> bool:
    if isinstance(value, (bool, int, float, str, type(None))):
        return True
    if isinstance(value, tuple) and len(value) <= 64:
        return all(_is_constant(v) for v in value)
    return False


def kernel_identity(func, limit: int = 64) -> str:
    """SHA-256 over a factory's source, the user functions it calls (transitively) and the
    constants (module globals and closure values) they read.

    Editing the factory or a helper changes the identity, so no record of the old code is
    reused; tilers, torch, numpy and the standard library are not followed.
    """
    parts = []
    seen = set()

    def visit(function):
        if id(function) in seen or len(seen) >= limit:
            return
        seen.add(id(function))
        code = function.__code__
        try:
            source = textwrap.dedent(inspect.getsource(function))
        except (OSError, TypeError):  # no source file: the bytecode stands in for it
            source = code.co_code.hex() + repr(code.co_consts)
        parts.append(f"def {function.__module__}.{function.__qualname__}\n{source}")
        namespace = function.__globals__
        values = [(n, namespace[n]) for n in sorted(_code_names(code)) if n in namespace]
        for name, cell in zip(code.co_freevars, function.__closure__ or ()):
            try:
                values.append((name, cell.cell_contents))
            except ValueError:  # an empty cell
                continue
        for name, value in values:
            helper = _user_function(value)
            if helper is not None:
                visit(helper)
            elif _is_constant(value):
                parts.append(f"{name} = {value!r}")

    target = _user_function(func) or func
    visit(target)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def device_info(device_index: int | None = None) -> dict:
    """The GPU a record is for: model, architecture, SM count."""
    from . import runtime

    if not runtime.gpu_available():
        raise RuntimeError(
            f"autotuning times kernels on a GPU and none is usable: {runtime.gpu_probe()[1]}"
        )
    index = runtime._current_device_index() if device_index is None else device_index
    return {
        "name": runtime.device_name(index),
        "arch": runtime.device_arch(index),
        "sms": runtime.device_attribute(index, runtime.ATTRIBUTE_MULTIPROCESSOR_COUNT),
    }


# ---------------------------------------------------------------------------------------
# records on disk
# ---------------------------------------------------------------------------------------


class TuningRecords:
    """Tuning records as JSON files named by their key (``<cache>/tuning/<key>.json``)."""

    def __init__(self, directory: str | None = None):
        if directory is None:
            from .cache import cache_dir

            directory = os.path.join(cache_dir(), "tuning")
        self.directory = directory

    def path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def load(self, key: str) -> dict | None:
        """The record for `key`, or None (also for an unreadable or malformed file, and for
        one in a folder other users can write: see tilers/cache.py)."""
        from .cache import read_trusted

        text = read_trusted(self.path(key))
        if text is None:
            return None
        try:
            record = json.loads(text)
        except ValueError:
            return None
        if not _valid_record(record) or record["key"] != key:
            return None
        return record

    def save(self, record: dict) -> str | None:
        """Write the record; its path, or None where the folder is not trusted."""
        from .cache import atomic_write, folder_trusted

        path = self.path(record["key"])
        if not folder_trusted(self.directory):
            return None
        atomic_write(path, (json.dumps(record, indent=1) + "\n").encode())
        return path

    def all(self) -> list[dict]:
        """Every readable record, oldest first."""
        records = []
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return records
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                record = self.load(name[: -len(".json")])
                if record is not None:
                    records.append(record)
        records.sort(key=lambda r: r.get("created", ""))
        return records


def _valid_record(record) -> bool:
    """Whether a parsed file is a whole record: what tune() and `python -m tilers tuning` read
    of it has the right types (anything else reads as no record, and the search runs)."""
    return (
        isinstance(record, dict)
        and record.get("version") == RECORD_VERSION
        and isinstance(record.get("key"), str)
        and isinstance(record.get("best"), dict)
        and isinstance(record.get("sizes", {}), dict)
        and _is_time(record.get("ms"))
        and isinstance(record.get("results", []), list)
        and all(_valid_result(r) for r in record.get("results", []))
    )


def _is_time(value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool)
        and math.isfinite(value) and value >= 0
    )


def _valid_result(result) -> bool:
    """One entry of a record's `results`: the fields of ConfigResult, nothing else."""
    fields = {field.name for field in dataclasses.fields(ConfigResult)}
    return (
        isinstance(result, dict)
        and set(result) <= fields
        and isinstance(result.get("config"), dict)
        and result.get("status", "skipped") in STATUSES
        and (result.get("ms") is None or _is_time(result.get("ms")))
        and (result.get("error") is None or isinstance(result.get("error"), str))
        and isinstance(result.get("round", 0), int) and not isinstance(result.get("round", 0), bool)
        and (result.get("device") is None or isinstance(result.get("device"), (int, str)))
        and (result.get("finished") is None or _is_time(result.get("finished")))
    )


# ---------------------------------------------------------------------------------------
# progress and summary
# ---------------------------------------------------------------------------------------


def config_text(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


class _Progress:
    """A one-line progress bar on stderr with the best config so far (a terminal only)."""

    def __init__(self, name: str, enabled: bool):
        self.name = name
        self.enabled = enabled and sys.stderr.isatty()
        self.done = 0
        self.total = 0
        self.stage = ""

    def start(self, stage: str, total: int):
        self.stage, self.done, self.total = stage, 0, total

    def step(self, best: ConfigResult | None):
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (width - filled)
        best_text = f"best {best.ms:.4f} ms {config_text(best.config)}" if best else "no result yet"
        line = f"\rautotune {self.name} {self.stage} [{bar}] {self.done}/{self.total} {best_text}"
        sys.stderr.write(line[:200].ljust(120))
        sys.stderr.flush()

    def close(self):
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def summary_table(name: str, results: list, flops=None, bytes=None) -> str:
    """The table printed after a search: timed configs fastest first, then the others."""
    timed = sorted((r for r in results if r.status == "ok"), key=lambda r: r.ms)
    others = [r for r in results if r.status != "ok"]
    header = ["#", "config", "status", "ms"]
    if flops:
        header.append("TFLOP/s")
    if bytes:
        header.append("GB/s")
    rows = []
    for rank, result in enumerate(timed + others, 1):
        ms = f"{result.ms:.4f}" if result.ms is not None else "-"
        row = [str(rank), config_text(result.config), result.status, ms]
        if flops:
            row.append(f"{flops / result.ms / 1e9:.1f}" if result.status == "ok" else "-")
        if bytes:
            row.append(f"{bytes / result.ms / 1e6:.0f}" if result.status == "ok" else "-")
        if result.error:
            row[2] += f" ({result.error.splitlines()[0][:60]})"
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = [f"autotune {name}: {len(timed)} of {len(results)} configs timed"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# the decorator
# ---------------------------------------------------------------------------------------


class _SearchState:
    """Inputs and reference outputs shared by every config of one search."""

    def __init__(self, sizes=None):
        self.profiler = None
        self.expected = None
        self.sizes = dict(sizes or {})


class AutotunedFunction:
    """A ``@tilers.jit`` factory whose tile parameters are chosen by measurement.

    Calling it with the problem's arguments returns the best kernel; ``tune(...)``
    returns the whole TuneResult. Arguments named in a config may still be passed
    explicitly: the call then compiles that kernel and tunes nothing.
    """

    # Hooks for tests (no GPU needed): bench_fn(kernel, config, cutoff_ms) -> Timing,
    # check_fn(kernel, config) raising AssertionError on a wrong result, and
    # device_info_fn() -> {"name", "arch", "sms"}. For a kernel with T.dynamic sizes the
    # first two are also given sizes= (the bucket's values, {"M": 1024}).
    bench_fn = None
    check_fn = None
    device_info_fn = None

    def __init__(
        self, jit_function, configs, warmup=25, rep=100, ref_prog=None, rtol=1e-2,
        atol=1e-2, key=None, supply_type="auto", scalars=None, flops=None, bytes=None,
        search="auto", tile_keys=None, keep=3, early_stop=1.5, max_workers=None,
        records=True, records_dir=None, verbose=True, bucket=None, backend="local",
        devices=None, timeout=None,
    ):
        from .eager import EagerFunction
        from .jit import JitFunction

        if isinstance(jit_function, EagerFunction):
            raise TileError(
                f"@tilers.autotune over the eager function '{jit_function.__name__}' is not "
                "supported yet: tune a factory (a @tilers.jit function returning a "
                "@T.prim_func), or call the eager function with a chosen config"
            )
        if not isinstance(jit_function, JitFunction):
            raise TileError(
                "@tilers.autotune goes above @tilers.jit: it tunes a factory of prim_funcs "
                f"(got {type(jit_function).__name__})"
            )
        if configs is None:
            raise TileError("@tilers.autotune needs configs=[{...}, ...] or a function returning them")
        if not (bucket is None or callable(bucket) or (
            isinstance(bucket, dict) and all(callable(f) for f in bucket.values())
        )):
            raise ValueError(
                "parameter 'bucket': expected a function of the sizes ({'M': 1000} -> "
                "{'M': 1024}) or a dict of functions by size name ({'M': lambda m: ...}), "
                f"got {bucket!r}"
            )
        if backend not in ("local", "process", "ray"):
            raise ValueError(f"parameter 'backend': expected local, process or ray, got {backend!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or timeout <= 0):
            raise ValueError(f"parameter 'timeout': expected seconds > 0 per config, got {timeout!r}")
        if search not in ("auto", "staged", "exhaustive"):
            raise ValueError(
                f"parameter 'search': expected auto, staged or exhaustive, got {search!r}"
            )
        self.jit_function = jit_function
        self.__name__ = jit_function.__name__
        self.__doc__ = jit_function.__doc__
        self.configs = configs
        self.warmup, self.rep = warmup, rep
        self.ref_prog, self.rtol, self.atol = ref_prog, rtol, atol
        self.key = key
        self.supply_type, self.scalars = supply_type, scalars
        self.flops, self.bytes = flops, bytes
        self.search, self.tile_keys, self.keep = search, tile_keys, keep
        self.early_stop = early_stop
        self.max_workers = max_workers
        self.use_records = records
        self.records = TuningRecords(records_dir) if records_dir is not None else None
        self.verbose = verbose
        self.bucket = bucket
        self.backend, self.devices, self.timeout = backend, devices, timeout
        self.last_result: TuneResult | None = None
        self._kernels = {}
        self._identity = None
        self._signature = inspect.signature(jit_function.factory)

    # --- calling ------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        try:
            memo_key = (args, tuple(sorted(kwargs.items())))
            kernel = self._kernels.get(memo_key)
        except TypeError:  # unhashable arguments: no memo
            memo_key, kernel = None, None
        if kernel is not None:
            return kernel
        if self._tuned_names() & kwargs.keys():
            return self.jit_function.compile(*args, **kwargs)
        probe = self._first_kernel(args, kwargs)
        if probe is not None and probe.info.get("sizes"):
            kernel = DynamicKernel(self, args, kwargs, probe)
        else:
            kernel = self.tune(*args, **kwargs).kernel
        if memo_key is not None:
            self._kernels[memo_key] = kernel
        return kernel

    def compile(self, *args, **kwargs):
        """The tuned kernel for these arguments (TileLang's ``autotune(...).compile``)."""
        return self(*args, **kwargs)

    def _first_kernel(self, args, kwargs):
        """The kernel of the first config that compiles (None if none does): whether the
        factory's kernels have T.dynamic sizes. The search compiles it again from the memo."""
        for config in self.config_space(*args, **kwargs):
            try:
                return self.jit_function.compile(*args, **kwargs, **config)
            except Exception:
                continue
        return None

    def bucket_of(self, kernel, values: dict) -> dict:
        """The sizes a call with T.dynamic size values `values` is tuned at (its bucket)."""
        specs = {size["name"]: size for size in kernel.info.get("sizes", [])}
        if callable(self.bucket) and not isinstance(self.bucket, dict):
            chosen = self.bucket(dict(values))
            if not isinstance(chosen, dict) or set(chosen) != set(values):
                raise TileError(
                    f"autotune {self.__name__}: bucket= must return a value for each size "
                    f"({', '.join(values)}); for {values} it returned {chosen!r}"
                )
            chosen = {name: chosen[name] for name in values}
            user = set(values)
        else:
            functions = self.bucket or {}
            unknown = sorted(set(functions) - set(values))
            if unknown:
                raise TileError(
                    f"autotune {self.__name__}: bucket= names {', '.join(unknown)}, not a "
                    f"T.dynamic size of the kernel (its sizes: {', '.join(values)})"
                )
            chosen = {
                name: functions.get(name, next_power_of_two)(value)
                for name, value in values.items()
            }
            user = set(functions)
        for name, value in chosen.items():
            multiple = specs[name].get("multiple_of", 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TileError(
                    f"autotune {self.__name__}: bucket= maps {name}={values[name]} to "
                    f"{value!r}; a bucket is a size, an int >= 0"
                )
            if value % multiple:
                if name in user:
                    raise TileError(
                        f"autotune {self.__name__}: bucket= maps {name}={values[name]} to "
                        f"{value}, which is not a multiple of {multiple} as "
                        f'T.dynamic("{name}", multiple_of={multiple}) promises'
                    )
                chosen[name] = -(-value // multiple) * multiple
        return chosen

    def _records(self) -> TuningRecords:
        if self.records is None:
            self.records = TuningRecords()
        return self.records

    # --- configs and keys ---------------------------------------------------------------

    def config_space(self, *args, **kwargs) -> list[dict]:
        """The configs for this problem, checked against the factory's parameters."""
        configs = self.configs
        if callable(configs):
            try:
                wants_args = bool(inspect.signature(configs).parameters)
            except (TypeError, ValueError):
                wants_args = True
            configs = configs(*args, **kwargs) if wants_args else configs()
        configs = list(configs)
        if not configs:
            raise TileError(f"autotune {self.__name__}: the config space is empty")
        parameters = self._signature.parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        for config in configs:
            if not isinstance(config, dict):
                raise TileError(
                    f"autotune {self.__name__}: a config is a dict of factory arguments, "
                    f"got {type(config).__name__} {config!r}"
                )
            for name in config:
                if name == "pass_configs":  # TileLang's per-config compiler switches
                    continue
                if name in ("target", "out_idx") or (name not in parameters and not takes_any):
                    raise TileError(
                        f"autotune {self.__name__}: config {config!r} sets '{name}', which is "
                        f"not a parameter of {self.__name__}{self._signature}"
                    )
        return configs

    def _tuned_names(self) -> set:
        if callable(self.configs):
            return set()
        return {name for config in self.configs for name in config}

    def problem(self, args, kwargs, configs) -> dict:
        """The factory's arguments that are not tuned, defaults included, by name."""
        tuned = {name for config in configs for name in config}
        try:
            bound = self._signature.bind_partial(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{self.__name__}: {error}") from None
        values = dict(bound.arguments)
        for name, parameter in self._signature.parameters.items():
            if name not in values and parameter.default is not parameter.empty:
                values[name] = parameter.default
        return {name: value for name, value in values.items() if name not in tuned}

    def record_fields(self, args, kwargs, configs, sizes=None) -> dict:
        """Everything a record depends on; its key is their digest. `sizes`: the T.dynamic
        sizes (a bucket) the configs are timed at, always part of the key."""
        from . import __version__, _tilers, cache

        problem = self.problem(args, kwargs, configs)
        if callable(self.key):
            problem = {"key": self.key(*args, **kwargs)}
        elif self.key is not None:
            names = [self.key] if isinstance(self.key, str) else list(self.key)
            # a size named in key= is keyed anyway (by its bucket)
            names = [n for n in names if n not in (sizes or {})]
            missing = [n for n in names if n not in problem]
            if missing:
                raise TileError(
                    f"autotune {self.__name__}: key= names {', '.join(missing)}, not among "
                    f"the problem's arguments ({', '.join(problem)})"
                )
            problem = {name: problem[name] for name in names}
        if self._identity is None:
            self._identity = kernel_identity(self.jit_function.factory)
        info = (self.device_info_fn or device_info)()
        fields = {
            "kernel": f"{self.jit_function.factory.__module__}.{self.__name__}",
            "identity": self._identity,
            "space": digest(configs),
            "problem": canonical(problem),
            "tilers": f"{__version__}+{_tilers.__version__}",
            "nvrtc": cache.nvrtc_version_for_key(),
            "device": info["name"],
            "arch": info["arch"],
            "sms": info["sms"],
            "target": canonical(self.jit_function.target),
            "out_idx": canonical(self.jit_function.out_idx),
        }
        if sizes:
            fields["sizes"] = canonical(dict(sizes))
        return fields

    def record_key(self, *args, sizes=None, **kwargs) -> str:
        configs = self.config_space(*args, **kwargs)
        return digest(self.record_fields(args, kwargs, configs, sizes))[:32]

    # --- the search ---------------------------------------------------------------------

    def tune(self, *args, force=False, sizes=None, **kwargs) -> TuneResult:
        """The best config for this problem: from its record, or by a search (`force`).
        A kernel with T.dynamic sizes is tuned at `sizes` ({"M": 1024}: inputs of those
        sizes), which key the record."""
        started = time.perf_counter()
        configs = self.config_space(*args, **kwargs)
        sizes = dict(sizes or {})
        fields = self.record_fields(args, kwargs, configs, sizes)
        key = digest(fields)[:32]
        if self.use_records and not force:
            record = self._records().load(key)
            # the config as the space writes it (JSON turned its tuples into lists)
            best = None
            if record is not None:
                wanted = canonical(record["best"])
                best = next((c for c in configs if canonical(c) == wanted), None)
            if best is not None:
                try:
                    kernel = self.jit_function.compile(*args, **kwargs, **best)
                except Exception:  # the record's config no longer compiles: search again
                    kernel = None
                if kernel is not None:
                    results = [ConfigResult(**r) for r in record.get("results", [])]
                    result = TuneResult(
                        dict(best), record["ms"], kernel, results, key, record, True,
                        time.perf_counter() - started, sizes,
                    )
                    self.last_result = result
                    if self.verbose:
                        at = f" at {config_text(sizes)}" if sizes else ""
                        print(
                            f"autotune {self.__name__}: reusing the record {key}{at} "
                            f"({config_text(record['best'])}, {record['ms']:.4f} ms)",
                            file=sys.stderr,
                        )
                    return result
        result = self._search(args, kwargs, configs, fields, key, started, sizes)
        self.last_result = result
        return result

    def _flops_bytes(self, args, kwargs):
        values = []
        for value in (self.flops, self.bytes):
            values.append(value(*args, **kwargs) if callable(value) else value)
        return values

    def _run_config(self, kernel, config, state, cutoff_ms) -> dict:
        """Check one compiled config and time it: {"status", "ms", "error"} (the work of a
        benchmark worker, in this process or another)."""
        try:
            self._check(kernel, config, state)
        except AssertionError as error:
            return {"status": "wrong result", "error": str(error)}
        except Exception as error:
            return {"status": "run error", "error": f"{type(error).__name__}: {error}"}
        try:
            timing = self._bench(kernel, config, state, cutoff_ms)
        except Exception as error:
            return {"status": "run error", "error": f"{type(error).__name__}: {error}"}
        if timing.stopped_early:
            return {"status": "stopped early", "ms": timing.ms,
                    "error": f"estimate {timing.ms:.4f} ms over {cutoff_ms:.4f} ms"}
        return {"status": "ok", "ms": timing.ms}

    def _search(self, args, kwargs, configs, fields, key, started, sizes) -> TuneResult:
        results = [ConfigResult(dict(config)) for config in configs]
        progress = _Progress(self.__name__ + (f" at {config_text(sizes)}" if sizes else ""),
                             self.verbose)
        kernels = self._compile_all(args, kwargs, configs, results, progress)
        self._check_sizes(kernels, sizes)
        state = _SearchState(sizes)
        order = [i for i, kernel in enumerate(kernels) if kernel is not None]
        groups = self._groups(configs, order)
        best: ConfigResult | None = None
        pool = self._pool(args, kwargs, sizes) if self.backend != "local" else None

        def cutoff():
            return best.ms * self.early_stop if best is not None and self.early_stop else None

        def apply(index, round_number, outcome, device=None) -> bool:
            """Record a config's outcome; whether it ran (ok or stopped early)."""
            nonlocal best
            result = results[index]
            result.round = round_number
            result.status = outcome["status"]
            result.ms = outcome.get("ms")
            result.error = outcome.get("error")
            result.device = device
            result.finished = round(time.perf_counter() - started, 3)
            if result.status == "ok" and (best is None or result.ms < best.ms):
                best = result
            return result.status in ("ok", "stopped early")

        def measure(index, round_number) -> bool:
            return apply(index, round_number,
                         self._run_config(kernels[index], results[index].config, state, cutoff()))

        def measure_all(jobs, round_number) -> None:
            """Each job is a list of configs tried in order until one runs (one config of a
            tile size in round 1; a single config otherwise)."""
            if pool is None:
                for job in jobs:
                    for index in job:
                        if measure(index, round_number):
                            break
                    progress.step(best)
                return
            rest = {job[0]: list(job[1:]) for job in jobs}

            def on_done(index, outcome, device):
                ran = apply(index, round_number, outcome, device)
                follow = rest.pop(index, [])
                if not ran and follow:
                    # the job's next config; the job is done when one runs or none is left
                    rest[follow[0]] = follow[1:]
                    return [(follow[0], results[follow[0]].config, cutoff)]
                progress.step(best)
                return []

            pool.run([(job[0], results[job[0]].config, cutoff) for job in jobs], on_done)

        try:
            if len(groups) > 1 and any(len(g) > 1 for g in groups):
                # round 1: one config of each tile size (the first that runs and is correct)
                progress.start("round 1", len(groups))
                measure_all(groups, 1)
                if pool is not None:
                    # round 1's best tile sizes, timed again on one device before choosing
                    best = self._retime_finalists(pool, results, best, progress, started,
                                                  among=[i for g in groups for i in g]) or best
                group_times = []
                for group in groups:
                    times = [results[i].ms for i in group if results[i].status == "ok"]
                    if times:
                        group_times.append((min(times), group))
                group_times.sort(key=lambda item: item[0])
                kept = [
                    group for rank, (ms, group) in enumerate(group_times)
                    if rank < self.keep or ms <= group_times[0][0] * (1 + KEEP_MARGIN)
                ]
                # round 2: the rest of the kept tile sizes
                rest = [i for group in kept for i in group if results[i].round == 0]
                progress.start("round 2", len(rest))
                measure_all([[i] for i in rest], 2)
            else:
                progress.start("", len(order))
                measure_all([[i] for i in order], 1)
            if pool is not None and best is not None:
                best = self._retime_finalists(pool, results, best, progress, started)
        finally:
            if pool is not None:
                pool.close()
        progress.close()

        for result in results:
            if result.status == "skipped" and result.round == 0 and result.error is None:
                result.error = "its tile size was slower in round 1"
        flops, moved = self._flops_bytes(args, kwargs)
        if self.verbose:
            title = self.__name__ + (f" at {config_text(sizes)}" if sizes else "")
            print(summary_table(title, results, flops, moved), file=sys.stderr)
        if best is None:
            raise TileError(self._failure_message(results))
        seconds = time.perf_counter() - started
        record = {
            "version": RECORD_VERSION,
            "key": key,
            "fields": fields,
            "kernel": fields["kernel"],
            "problem": fields["problem"],
            "sizes": fields.get("sizes", {}),
            "device": fields["device"],
            "best": best.config,
            "ms": best.ms,
            "flops": flops,
            "bytes": moved,
            "tflops": flops / best.ms / 1e9 if flops else None,
            "gbps": moved / best.ms / 1e6 if moved else None,
            "configs": len(configs),
            "results": [r.as_json() for r in results],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seconds": seconds,
        }
        if self.use_records:
            try:
                self._records().save(record)
            except OSError as error:
                print(f"autotune {self.__name__}: could not save the record ({error})",
                      file=sys.stderr)
        best_kernel = kernels[results.index(best)]
        return TuneResult(dict(best.config), best.ms, best_kernel, results, key, record, False,
                          seconds, sizes)

    def _pool(self, args, kwargs, sizes):
        """The benchmark workers of backend="process" or "ray" (tilers/tune_pool.py)."""
        from . import tune_pool

        if getattr(_autotune_inputs, "tensors", None) is not None:
            raise TileError(
                f"autotune {self.__name__}: set_autotune_inputs(...) gives this process's "
                f"tensors, which backend={self.backend!r} cannot hand to its workers; tune with "
                "the default backend, or let the workers draw inputs (supply_type=)"
            )
        data = tune_pool.payload(self, args, kwargs, sizes)
        if self.backend == "ray":
            from . import tune_ray

            return tune_ray.RayPool(data, timeout=self.timeout)
        devices = tune_pool.devices_from_env(self.devices)
        return tune_pool.ProcessPool(data, devices, timeout=self.timeout)

    def _retime_finalists(self, pool, results, best, progress, started, among=None) -> ConfigResult:
        """Timings from different GPUs are not comparable: the `keep` fastest configs (and any
        within 5% of the best) — of `among` (indices) when given — are timed again on one
        device, and the best of those wins."""
        pool_of = results if among is None else [results[i] for i in among]
        ok = sorted((r for r in pool_of if r.status == "ok"), key=lambda r: r.ms)
        finalists = [r for rank, r in enumerate(ok)
                     if rank < self.keep or r.ms <= ok[0].ms * (1 + KEEP_MARGIN)]
        # round 1 on a single device (a one-GPU host) was timed on one device already
        one_device = among is not None and len(getattr(pool, "devices", ())) == 1
        if len(finalists) < 2 or one_device:
            return best
        progress.start("finalists", len(finalists))
        index_of = {id(r): i for i, r in enumerate(results)}
        chosen = {"best": None}

        def on_done(index, outcome, device):
            result = results[index]
            if outcome["status"] == "ok":
                result.ms, result.device = outcome["ms"], device
                result.finished = round(time.perf_counter() - started, 3)
                if chosen["best"] is None or result.ms < chosen["best"].ms:
                    chosen["best"] = result
            progress.step(chosen["best"])
            return []

        tasks = [(index_of[id(r)], r.config, lambda: None) for r in finalists]
        pool.run(tasks, on_done, one_device=True)
        return chosen["best"] or best

    def _check_sizes(self, kernels, sizes) -> None:
        """The sizes given are the compiled kernels' T.dynamic sizes, all of them."""
        for kernel in kernels:
            if kernel is None:
                continue
            declared = kernel.sizes
            if set(declared) != set(sizes):
                if not sizes:
                    example = ", ".join(f"{n!r}: 1024" for n in declared)
                    raise TileError(
                        f"autotune {self.__name__}: its kernel has T.dynamic sizes "
                        f"({', '.join(declared)}); tune them at some values, "
                        f"tune(..., sizes={{{example}}}), or call the kernel the autotuned "
                        "factory returns, which tunes each call's bucket"
                    )
                raise TileError(
                    f"autotune {self.__name__}: sizes={sizes} does not give the kernel's "
                    f"T.dynamic sizes ({', '.join(declared) or 'none'})"
                )

    def _failure_message(self, results) -> str:
        lines = [f"autotune {self.__name__}: no config compiled, ran and passed the check:"]
        for result in results[:20]:
            reason = (result.error or result.status).splitlines()[0][:160]
            lines.append(f"  {config_text(result.config)}: {result.status}: {reason}")
        if len(results) > 20:
            lines.append(f"  ... and {len(results) - 20} more")
        return "\n".join(lines)

    def _groups(self, configs, order) -> list[list[int]]:
        """Indices of the compiled configs, grouped by tile size (one group per config when
        the search is exhaustive or the configs have no tile and no other parameters)."""
        if self.search == "exhaustive":
            return [[i] for i in order]
        if self.tile_keys is not None:
            tile_keys = set(self.tile_keys)
        else:
            tile_keys = {k for c in configs for k in c if k.lower().startswith(TILE_PREFIXES)}
        all_keys = {k for c in configs for k in c}
        if not tile_keys or tile_keys >= all_keys:
            return [[i] for i in order]
        groups: dict = {}
        for index in order:
            signature = json.dumps(
                canonical({k: v for k, v in configs[index].items() if k in tile_keys}),
                sort_keys=True,
            )
            groups.setdefault(signature, []).append(index)
        return list(groups.values())

    def _compile_all(self, args, kwargs, configs, results, progress) -> list:
        """Compile every config in a thread pool; the kernels (None where it failed or was
        passed over).

        Tracing and the Rust pipeline come first, for all configs: a config whose thread
        arrays need more registers than a thread has (KernelInfo's ``local_bytes`` over
        255 words) is passed over when some other config fits, before NVRTC, which can take
        a minute on the straight-line code of such a config and whose kernel would spill."""

        def trace(config):
            return self.jit_function.compile(*args, **kwargs, **config)

        def build(kernel):
            if kernel.source is not None:
                _ = kernel.cubin  # NVRTC, through the cubin cache
            return kernel

        workers = self.max_workers or min(len(configs), _cpu_count())
        kernels = [None] * len(configs)
        progress.start("compile", len(configs))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            traced = [None] * len(configs)
            futures = {pool.submit(trace, config): i for i, config in enumerate(configs)}
            for future in concurrent.futures.as_completed(futures):
                index = futures[future]
                try:
                    traced[index] = future.result()
                except Exception as error:
                    results[index].status = "compile error"
                    results[index].error = f"{type(error).__name__}: {error}"
                    progress.step(None)
            words = [_register_words(kernel) for kernel in traced]
            if any(w is not None and w <= MAX_THREAD_REGISTERS for w in words):
                for index, w in enumerate(words):
                    if w is not None and w > MAX_THREAD_REGISTERS:
                        traced[index] = None
                        results[index].status = "skipped"
                        results[index].error = (
                            f"its thread arrays need {w} registers per thread, over the "
                            f"{MAX_THREAD_REGISTERS} a thread has: it would spill"
                        )
                        progress.step(None)
            futures = {pool.submit(build, kernel): i for i, kernel in enumerate(traced)
                       if kernel is not None}
            for future in concurrent.futures.as_completed(futures):
                index = futures[future]
                try:
                    kernels[index] = future.result()
                except Exception as error:
                    results[index].status = "compile error"
                    results[index].error = f"{type(error).__name__}: {error}"
                progress.step(None)
        return kernels

    def _check(self, kernel, config, state) -> None:
        if self.check_fn is not None:
            if state.sizes:
                self.check_fn(kernel, config, sizes=dict(state.sizes))
            else:
                self.check_fn(kernel, config)
            return
        if self.ref_prog is None:
            return
        profiler = self._profiler(kernel, state)
        if state.expected is None:
            state.expected = profiler.reference(self.ref_prog)
        # assert_allclose poisons every output first, allocated and in place alike
        profiler.assert_allclose(self.ref_prog, self.rtol, self.atol,
                                 args=profiler.inputs(), expected=state.expected)

    def _bench(self, kernel, config, state, cutoff_ms):
        if self.bench_fn is not None:
            if state.sizes:
                return self.bench_fn(kernel, config, cutoff_ms, sizes=dict(state.sizes))
            return self.bench_fn(kernel, config, cutoff_ms)
        from .profiler import bench_timing

        profiler = self._profiler(kernel, state)
        call_args = profiler.inputs()
        return bench_timing(lambda: kernel(*call_args), self.warmup, self.rep,
                            cutoff_ms=cutoff_ms)

    def _profiler(self, kernel, state):
        """The profiler of this config, sharing the search's inputs (those of an enclosing
        ``with set_autotune_inputs(...)`` when there is one)."""
        from . import _sizes
        from .profiler import Profiler

        given = getattr(_autotune_inputs, "tensors", None) if state.profiler is None else None
        sizes = state.sizes
        if given is not None and not sizes and kernel.info.get("sizes"):
            # T.dynamic sizes take their values from the inputs the user chose
            shapes = {
                position: tuple(t.shape)
                for position, t in zip(kernel._input_positions, given)
                if hasattr(t, "shape")
            }
            values = _sizes.bind(kernel.info, shapes)
            sizes = state.sizes = {
                size["name"]: value for size, value in zip(kernel.info["sizes"], values)
            }
        profiler = Profiler(kernel, supply_type=self.supply_type, scalars=self.scalars,
                            sizes=sizes)
        if state.profiler is None:
            state.profiler = profiler
            if given is not None:
                profiler._inputs = list(given)
        else:
            profiler._inputs = state.profiler.inputs()
        return profiler


class DynamicKernel:
    """What an autotuned factory returns when its kernel has T.dynamic sizes.

    Calling it with a kernel's arguments binds the sizes from the tensors, maps them to
    their bucket (``AutotunedFunction.bucket_of``) and runs the bucket's best kernel; the
    first call in a bucket tunes it (or reads its record). Every config is compiled once,
    whatever the sizes: a new bucket costs timing, never a compile.
    """

    def __init__(self, owner: AutotunedFunction, args, kwargs, probe):
        self.owner = owner
        self.args, self.kwargs = args, dict(kwargs)
        self._probe = probe
        self.__name__ = owner.__name__
        self.results: dict[tuple, TuneResult] = {}  # by bucket (its values, in size order)
        self._by_values: dict[tuple, object] = {}

    @property
    def sizes(self) -> list[str]:
        """The names of the T.dynamic sizes."""
        return self._probe.sizes

    def bucket_of(self, **sizes) -> dict:
        """The sizes a call with these sizes is tuned at."""
        self._known(sizes)
        return self.owner.bucket_of(self._probe, sizes)

    def tune(self, force=False, **sizes) -> TuneResult:
        """The bucket of these sizes, tuned (or read from its record; `force`: search)."""
        self._known(sizes)
        bucket = self.owner.bucket_of(self._probe, sizes)
        slot = tuple(bucket.values())
        if force or slot not in self.results:
            self.results[slot] = self.owner.tune(*self.args, force=force, sizes=bucket,
                                                 **self.kwargs)
        return self.results[slot]

    def kernel_for(self, **sizes):
        """The compiled kernel that runs calls with these sizes."""
        return self.tune(**sizes).kernel

    def __call__(self, *args):
        values = self._probe.call_sizes(*args)
        slot = tuple(values.values())
        kernel = self._by_values.get(slot)
        if kernel is None:
            kernel = self.kernel_for(**values)
            self._by_values[slot] = kernel
        return kernel(*args)

    def _known(self, sizes) -> None:
        if set(sizes) != set(self.sizes):
            raise TypeError(
                f"{self.__name__}: expected the sizes {', '.join(self.sizes)}, got "
                f"{', '.join(sizes) or 'none'}"
            )

    def __repr__(self) -> str:
        tuned = ", ".join(config_text(r.sizes) for r in self.results.values()) or "none yet"
        return f"<DynamicKernel {self.__name__} over {', '.join(self.sizes)}; tuned at: {tuned}>"


def _register_words(kernel) -> int | None:
    """32-bit registers the arrays of one thread take, over every kernel a call launches
    (the largest); None when there is no KernelInfo (the interpreter)."""
    info = getattr(kernel, "info", None)
    if not isinstance(info, dict) or "local_bytes" not in info:
        return None
    infos = [info] + list(info.get("then") or [])
    return max((i.get("local_bytes", 0) + 3) // 4 for i in infos)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class AutotunedEager:
    """``@tilers.autotune`` over an eager ``@tilers.jit`` function: a call tunes the configs
    on the call's own tensors (once per shapes, dtypes and other arguments, remembered in
    this process), then runs the best and returns its outputs. Every config is compiled,
    checked against ``ref_prog`` (when given: its outputs against the kernel's, on the
    same inputs) and timed; a config that fails is reported and never chosen."""

    def __init__(self, function, configs, warmup=25, rep=100, ref_prog=None, rtol=1e-2,
                 atol=1e-2, verbose=True, supply_type="auto"):
        self.function = function
        self.supply_type = supply_type
        self.__name__ = function.__name__
        self.__doc__ = function.__doc__
        self.configs = configs
        self.warmup, self.rep = warmup, rep
        self.ref_prog, self.rtol, self.atol = ref_prog, rtol, atol
        self.verbose = verbose
        self.best: dict = {}  # call key -> (config, ms)
        self.last_results: list = []

    def config_space(self, *args, **kwargs) -> list:
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = [dict(c) for c in configs]
        if not configs:
            raise TileError(f"@tilers.autotune on {self.__name__}: the config space is empty")
        params = set(self.function.signature.parameters)
        for c in configs:
            unknown = set(c) - params
            if unknown:
                raise TileError(
                    f"@tilers.autotune on {self.__name__}: config key '{sorted(unknown)[0]}' is not a "
                    f"parameter of {self.__name__} ({', '.join(params)})"
                )
        return configs

    def _bind(self, args, kwargs, config):
        """The call's arguments with `config` bound by keyword (a tuned parameter given
        positionally is replaced)."""
        names = self.function._names
        args = list(args)
        kwargs = dict(kwargs)
        for name, value in config.items():
            if name in names and names.index(name) < len(args):
                args[names.index(name)] = value
            else:
                kwargs[name] = value
        return tuple(args), kwargs

    def _given(self, args, kwargs) -> bool:
        """Whether the call passes a tuned parameter itself (then nothing is tuned, as in
        TileLang: the call compiles what it names)."""
        if callable(self.configs):
            return False
        tuned = {k for c in self.configs for k in c}
        names = self.function._names
        positional = set(names[: len(args)])
        return bool(tuned & (set(kwargs) | positional))

    def __call__(self, *args, **kwargs):
        if self._given(args, kwargs):
            return self.function(*args, **kwargs)
        config = self.tune(*args, **kwargs)
        call_args, call_kwargs = self._bind(args, kwargs, config)
        return self.function(*call_args, **call_kwargs)

    def compile(self, *args, **kwargs):
        """The best kernel for these arguments (tuned on first use); with a tuned parameter
        given, the kernel of those arguments."""
        if self._given(args, kwargs):
            return self.function.compile(*args, **kwargs)
        config = self.tune(*args, **kwargs)
        call_args, call_kwargs = self._bind(args, kwargs, config)
        return self.function.compile(*call_args, **call_kwargs)

    def tune(self, *args, **kwargs) -> dict:
        """The best config for a call with these arguments."""
        key = self.function._key(args, kwargs)
        known = self.best.get(key)
        if known is not None:
            return known[0]
        from .profiler import bench_timing

        results = []
        for config in self.config_space(*args, **kwargs):
            call_args, call_kwargs = self._bind(args, kwargs, config)
            try:
                kernel, getters = self.function._prepare(call_args, call_kwargs, allow_missing=True)
                if getters is None:
                    inputs = list(call_args)
                else:
                    inputs = [
                        call_args[g] if type(g) is int else call_kwargs.get(g, _NO_TENSOR) if type(g) is str else g[0]
                        for g in getters
                    ]
                if any(i is _NO_TENSOR or i is None for i in inputs):
                    # .compile(M=..., ...) without tensors: those of an enclosing `with
                    # set_autotune_inputs(...)` (which also give T.dynamic sizes their
                    # values), else random inputs of the kernel's shapes
                    given = get_autotune_inputs()
                    if given is not None:
                        inputs = list(given)
                    else:
                        inputs = kernel.get_profiler(self.supply_type).inputs()
                out = kernel(*inputs)
                if self.ref_prog is not None:
                    _check_outputs(out, self.ref_prog(*inputs), self.rtol, self.atol)
                ms = bench_timing(lambda: kernel(*inputs), self.warmup, self.rep).ms
                results.append(ConfigResult(config, "ok", ms))
            except Exception as error:  # noqa: BLE001 - a failing config is reported, not fatal
                results.append(ConfigResult(config, "failed", None, f"{type(error).__name__}: {error}"))
        self.last_results = results
        good = [r for r in results if r.status == "ok"]
        if not good:
            raise TileError(
                f"@tilers.autotune on {self.__name__}: no config compiled, matched the reference and "
                f"ran; first failure: {results[0].error}"
            )
        best = min(good, key=lambda r: r.ms)
        if self.verbose:
            print(f"tilers.autotune {self.__name__}: best {config_text(best.config)} "
                  f"{best.ms:.4f} ms of {len(results)} configs ({len(results) - len(good)} failed)")
        self.best[key] = (best.config, best.ms)
        return best.config


_NO_TENSOR = object()


def _check_outputs(out, expected, rtol, atol):
    import torch

    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    wants = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(outs) != len(wants):
        raise AssertionError(f"{len(outs)} outputs, the reference returned {len(wants)}")
    for got, want in zip(outs, wants):
        torch.testing.assert_close(got.double(), torch.as_tensor(want, device=got.device).double(),
                                   rtol=rtol, atol=atol)


def autotune(
    configs=None, warmup=25, rep=100, ref_prog=None, rtol=1e-2, atol=1e-2, key=None, *,
    supply_type="auto", scalars=None, flops=None, bytes=None, search="auto", tile_keys=None,
    keep=3, early_stop=1.5, max_workers=None, records=True, records_dir=None, verbose=True,
    bucket=None, timeout=None, early_stop_factor=None, skip_check=False,
    max_mismatched_ratio=None, cache_input_tensors=None, supply_prog=None,
    manual_check_prog=None, do_not_specialize=None, backend="local", devices=None,
):
    """Tune a ``@tilers.jit`` factory over ``configs`` (see the module docstring).

    configs: a list of dicts of factory arguments, or a function of the problem's
        arguments returning one. warmup, rep: timing budgets in ms per config.
    ref_prog, rtol, atol: every config's outputs must match ``ref_prog(*inputs)``.
    key: which of the factory's other arguments a record depends on (names, or a
        function of the arguments); default all of them.
    flops, bytes: numbers or functions of the arguments, for TFLOP/s and GB/s in records.
    search: "auto" (staged when tile sizes and other parameters both vary), "staged",
        "exhaustive"; keep: tile sizes kept for round 2; early_stop: stop timing a config
        whose estimate is over this times the best (None: never).
    bucket: for kernels with T.dynamic sizes, the sizes a call is tuned at: a function of
        the sizes ({"M": 1000} -> {"M": 1024}) or a dict of functions by size name;
        default each size rounded up to a power of two (and to its multiple_of).
        ``bucket={"M": lambda m: m}`` tunes every value of M on its own.
    backend: "local" (check and time every config in this process), "process" (one
        benchmark worker process per GPU: ``devices=`` or TILERS_TUNE_DEVICES restricts
        them; a worker that crashes, hangs past ``timeout`` seconds on a config or hits a
        CUDA error loses only that config) or "ray" (tasks on the GPUs of a Ray cluster,
        ``pip install tilers[ray]``); the finalists are timed again on one GPU, and this
        process alone writes the record. The function must live at a module's top level.
    """

    if supply_prog is not None or manual_check_prog is not None:
        raise TileError(
            "tilers.autotune: supply_prog and manual_check_prog are not supported; use "
            "`with tilers.autotuner.set_autotune_inputs(...)` for chosen inputs and ref_prog "
            "for the check"
        )
    if early_stop_factor is not None:  # TileLang's name
        early_stop = early_stop_factor
    if skip_check:
        ref_prog = None

    def decorate(function):
        from .eager import EagerFunction
        from .jit import JitFunction, jit

        if not isinstance(function, (JitFunction, EagerFunction)):
            function = jit(function)
        if isinstance(function, EagerFunction):
            return AutotunedEager(function, configs, warmup=warmup, rep=rep, ref_prog=ref_prog,
                                  rtol=rtol, atol=atol, verbose=verbose, supply_type=supply_type)
        return AutotunedFunction(
            function, configs, warmup=warmup, rep=rep, ref_prog=ref_prog, rtol=rtol, atol=atol,
            key=key, supply_type=supply_type, scalars=scalars, flops=flops, bytes=bytes,
            search=search, tile_keys=tile_keys, keep=keep, early_stop=early_stop,
            max_workers=max_workers, records=records, records_dir=records_dir, verbose=verbose,
            bucket=bucket, backend=backend, devices=devices, timeout=timeout,
        )

    return decorate


# ---------------------------------------------------------------------------------------
# TileLang's other spellings: set_autotune_inputs and the AutoTuner builder
# ---------------------------------------------------------------------------------------

_autotune_inputs = threading.local()


@contextlib.contextmanager
def set_autotune_inputs(*tensors):
    """Within the block, tuning runs every config on these inputs (the kernel's input
    arguments, in order) instead of random ones: ``with set_autotune_inputs(a, b): f(M, N)``;
    one list argument is the list of inputs."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    previous = getattr(_autotune_inputs, "tensors", None)
    _autotune_inputs.tensors = tensors
    try:
        yield
    finally:
        _autotune_inputs.tensors = previous


def get_autotune_inputs():
    return getattr(_autotune_inputs, "tensors", None)


class AutoTuner:
    """TileLang's builder form of ``@tilers.autotune``::

        result = (AutoTuner.from_kernel(kernel=factory, configs=configs)
                  .set_compile_args(out_idx=[-1])
                  .set_profile_args(ref_prog=ref, rtol=1e-2, atol=1e-2)
                  .run(warmup=25, rep=100))
        result.config, result.latency, result.kernel

    ``factory(**config)`` returns a ``@T.prim_func`` (or is a ``@tilers.jit`` factory)."""

    def __init__(self, fn, configs):
        self.fn = fn
        self.configs = configs
        self.compile_args: dict = {}
        self.profile_args: dict = {}

    @classmethod
    def from_kernel(cls, kernel, configs):
        return cls(kernel, configs)

    def set_compile_args(self, out_idx=None, target="auto", execution_backend=None,
                         target_host=None, verbose=None, pass_configs=None):
        self.compile_args = {"out_idx": out_idx, "target": target or "auto",
                             "pass_configs": pass_configs}
        return self

    def set_profile_args(self, warmup=25, rep=100, timeout=30, supply_type="auto",
                         ref_prog=None, supply_prog=None, rtol=1e-2, atol=1e-2,
                         max_mismatched_ratio=0.01, skip_check=False, manual_check_prog=None,
                         cache_input_tensors=False, backend="event"):
        if supply_prog is not None or manual_check_prog is not None:
            raise TileError(
                "AutoTuner.set_profile_args: supply_prog and manual_check_prog are not "
                "supported; use `with tilers.autotuner.set_autotune_inputs(...)` for chosen "
                "inputs and ref_prog for the check"
            )
        from .utils.tensor import supply_name

        self.profile_args = {
            "warmup": warmup, "rep": rep, "supply_type": supply_name(supply_type),
            "ref_prog": None if skip_check else ref_prog, "rtol": rtol, "atol": atol,
        }
        return self

    def run(self, warmup=None, rep=None, timeout=None, **_ignored):
        from .jit import JitFunction, jit

        function = self.fn
        if not isinstance(function, JitFunction):
            function = jit(function, **{k: v for k, v in self.compile_args.items() if v is not None})
        profile = dict(self.profile_args)
        if warmup is not None:
            profile["warmup"] = warmup
        if rep is not None:
            profile["rep"] = rep
        tuned = AutotunedFunction(function, self.configs, **profile)
        return tuned.tune()

    __call__ = run
