"""Benchmark workers of the autotuner: ``backend="process"`` (one worker process per GPU of
this host) and ``backend="ray"`` (tasks on the GPUs of a Ray cluster).

The search itself stays in the process that asked (``AutotunedFunction._search``): it
compiles every config on its thread pool (NVRTC writes each cubin to the content-addressed
cache), decides what to time, and is the only writer of the record store. A worker gets the
autotuned function (imported by name: it must live at a module's top level), the problem's
arguments and the test hooks once; then, per config, compiles it again (the cubin comes from
the cache), checks it against the reference and times it, and sends back what happened.

Isolation: a worker that dies (a crash, `os._exit`, a signal), runs past `timeout` seconds on
one config (a kernel that spins) or reports an error (a CUDA error may be sticky) loses only
that config, which is recorded as failed with the reason; the worker is replaced and the
search goes on. Timings from different GPUs are not comparable: the search re-times its
finalists on one worker before it writes the record.
"""

from __future__ import annotations

import collections
import importlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import time
import traceback

from .errors import TileError


def devices_from_env(devices=None) -> list:
    """The devices to spread over: `devices` (a list of indices, or a comma-separated string),
    else TILERS_TUNE_DEVICES, else every visible GPU; ["cpu"] where there is none."""
    if devices is None:
        devices = os.environ.get("TILERS_TUNE_DEVICES")
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    if devices is None:
        from . import runtime

        count, _ = runtime.gpu_probe()
        devices = list(range(count)) if count else ["cpu"]
    devices = list(devices)
    if not devices:
        raise ValueError("parameter 'devices': expected at least one device, got none")
    return [d if d == "cpu" else int(d) for d in devices]


# ---------------------------------------------------------------------------------------
# what crosses to a worker


def tuned_by_name(module: str, qualname: str):
    """The autotuned function `module.qualname` (how a worker finds the search's function)."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def payload(owner, args, kwargs, sizes) -> bytes:
    """The autotuned function (by name), the problem and the hooks, pickled for a worker; a
    user error when they cannot cross to another process."""
    factory = owner.jit_function.factory
    module, qualname = factory.__module__, getattr(factory, "__qualname__", factory.__name__)
    try:
        found = tuned_by_name(module, qualname)
    except Exception:
        found = None
    if found is not owner:
        raise TileError(
            f"autotune {owner.__name__}: backend={owner.backend!r} runs the configs in other "
            f"processes, which find the autotuned function by its name ({module}.{qualname}); "
            "define it at the top level of a module (or use the default backend)"
        )
    hooks = {name: getattr(owner, name) for name in ("bench_fn", "check_fn", "device_info_fn")
             if getattr(owner, name) is not None}
    try:
        return pickle.dumps((module, qualname, args, kwargs, dict(sizes or {}), hooks))
    except Exception as error:
        raise TileError(
            f"autotune {owner.__name__}: backend={owner.backend!r} sends the factory's arguments "
            f"and hooks to other processes, but they cannot be pickled ({error}); use "
            "module-level functions (not lambdas) for ref_prog and the hooks"
        ) from None


class Worker:
    """One worker's side: the autotuned function and the search's inputs on one device."""

    def __init__(self, data: bytes):
        from .autotuner import _SearchState

        module, qualname, args, kwargs, sizes, hooks = pickle.loads(data)
        self.owner = tuned_by_name(module, qualname)
        for name, value in hooks.items():
            setattr(self.owner, name, value)
        self.args, self.kwargs = args, kwargs
        self.state = _SearchState(sizes)

    def run(self, config: dict, cutoff_ms) -> dict:
        try:
            kernel = self.owner.jit_function.compile(*self.args, **self.kwargs, **config)
        except Exception as error:
            return {"status": "compile error", "error": f"{type(error).__name__}: {error}"}
        return self.owner._run_config(kernel, config, self.state, cutoff_ms)


def _worker_main(conn, device, data: bytes) -> None:
    """A worker process: CUDA_VISIBLE_DEVICES names its one GPU before anything loads CUDA."""
    if device != "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    try:
        worker = Worker(data)
    except BaseException:
        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        _, index, config, cutoff_ms = message
        conn.send(("done", index, worker.run(config, cutoff_ms)))


# ---------------------------------------------------------------------------------------
# the pool


class _Process:
    def __init__(self, context, device, data):
        self.device = device
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, device, data), daemon=True)
        self.process.start()
        child.close()
        self.task = None  # (index, started)
        self.ready = False
        self.created = time.monotonic()

    def stop(self, kill=False):
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(("stop",))
            except (OSError, ValueError):
                pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


class ProcessPool:
    """Worker processes, one per device, fed configs as they free up.

    `run(tasks, on_done)`: each task is `(index, config, cutoff_fn)`; `on_done(index,
    result, device)` gets each outcome and may return more tasks (a tile size's next config
    after a failed one). A worker that dies or runs past `timeout` seconds on one config is
    replaced; so is one that reports a run error (the GPU context may be broken).
    """

    def __init__(self, data: bytes, devices, timeout=None, start_timeout=600.0):
        self.data = data
        self.devices = list(devices)
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.context = multiprocessing.get_context("spawn")
        self.workers = [_Process(self.context, d, data) for d in self.devices]
        self.replaced = 0

    def _replace(self, worker: _Process, kill: bool) -> None:
        worker.stop(kill=kill)
        self.workers[self.workers.index(worker)] = _Process(self.context, worker.device, self.data)
        self.replaced += 1

    def _fail(self, worker: _Process, why: str) -> list:
        """The worker's config failed with `why`: replace the worker, report the config."""
        task = worker.task
        worker.task = None
        self._replace(worker, kill=True)
        if task is None:
            return []
        return self.on_done(task[0], {"status": "run error", "error": why}, worker.device) or []

    def run(self, tasks, on_done, one_device=False) -> None:
        """Run the tasks on the workers (`one_device`: on the first device's only)."""
        self.on_done = on_done
        queue = collections.deque(tasks)
        while queue or any(w.task is not None for w in self.workers):
            for worker in self.workers:
                if one_device and worker.device != self.devices[0]:
                    continue
                if worker.task is None and worker.ready and queue:
                    index, config, cutoff_fn = queue.popleft()
                    worker.conn.send(("run", index, config, cutoff_fn()))
                    worker.task = (index, time.monotonic())
            waiting = [w.conn for w in self.workers] + [w.process.sentinel for w in self.workers]
            ready = set(multiprocessing.connection.wait(waiting, timeout=self._next_deadline()))
            now = time.monotonic()
            for worker in list(self.workers):
                message = None
                if worker.conn in ready:
                    try:
                        message = worker.conn.recv()
                    except (EOFError, OSError):
                        message = None
                if message is not None and message[0] == "ready":
                    worker.ready = True
                elif message is not None and message[0] == "failed":
                    self.close()
                    raise TileError(f"autotune: a benchmark worker could not start:\n{message[1]}")
                elif message is not None and message[0] == "done":
                    index = worker.task[0]
                    worker.task = None
                    result = message[2]
                    if result.get("status") == "run error":
                        self._replace(worker, kill=False)
                    queue.extend(on_done(index, result, worker.device) or [])
                elif worker.process.sentinel in ready or worker.conn in ready:
                    worker.process.join(timeout=5)
                    code = worker.process.exitcode
                    why = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    if worker.task is None and not worker.ready:
                        self.close()
                        raise TileError(
                            f"autotune: the benchmark worker for {_device_text(worker.device)} died "
                            f"while starting ({why})"
                        )
                    queue.extend(self._fail(
                        worker,
                        f"the benchmark worker on {_device_text(worker.device)} died ({why}) while "
                        "running this config; it was replaced",
                    ))
                elif worker.task is not None and self.timeout is not None and now - worker.task[1] > self.timeout:
                    queue.extend(self._fail(
                        worker,
                        f"still running after {self.timeout:g} s on {_device_text(worker.device)} "
                        "(a kernel that never ends?); its worker was stopped and replaced",
                    ))
                elif not worker.ready and now - worker.created > self.start_timeout:
                    self.close()
                    raise TileError(f"autotune: a benchmark worker did not start in {self.start_timeout:g} s")

    def _next_deadline(self):
        now = time.monotonic()
        limits = []
        for w in self.workers:
            if w.task is not None and self.timeout is not None:
                limits.append(w.task[1] + self.timeout - now)
            elif not w.ready:
                limits.append(w.created + self.start_timeout - now)
        return max(0.01, min(limits)) if limits else None

    def close(self):
        for worker in self.workers:
            worker.stop()
        self.workers = []


def _device_text(device) -> str:
    return "the CPU" if device == "cpu" else f"GPU {device}"


__all__ = ["ProcessPool", "Worker", "devices_from_env", "payload", "tuned_by_name"]
