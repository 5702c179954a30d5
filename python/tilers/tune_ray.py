"""The autotuner's benchmark workers on a Ray cluster (``backend="ray"``, ``pip install
tilers[ray]``): each config is a Ray task on one GPU of the cluster (a CPU where the
cluster has none); the asking process gathers the outcomes and alone writes the record.

Where the cluster is: the `RAY_ADDRESS` environment variable or a `ray.init(address=...)`
made before tuning (``ray://head-node:10001`` for a remote cluster, ``auto`` for the one
this machine belongs to); with neither, Ray starts a cluster on this machine. Every node
needs tilers and the module that defines the autotuned function importable (the same
checkout, or a runtime environment: ``ray.init(runtime_env={"py_modules": [...]})``).

Isolation as the process pool's (tilers/tune_pool.py): a task whose worker dies, that runs
past `timeout` seconds (it is cancelled) or that reports an error loses only its config.
The finalists are timed again, one after another, by one actor holding one GPU.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

from .errors import TileError

_workers: dict = {}  # per Ray worker process: the search's Worker, by its payload's digest


def _run_config(data: bytes, digest: str, config: dict, cutoff_ms):
    """A Ray task: check and time one config (the Worker is built once per process)."""
    import ray

    from .tune_pool import Worker

    worker = _workers.get(digest)
    if worker is None:
        worker = _workers[digest] = Worker(data)
    gpus = ray.get_gpu_ids()
    node = ray.get_runtime_context().get_node_id()[:8]
    device = f"{node}:gpu{gpus[0]}" if gpus else f"{node}:cpu"
    return worker.run(config, cutoff_ms), device


class _Retimer:
    """An actor holding one GPU: the finalists, timed one after another on it."""

    def __init__(self, data: bytes, digest: str):
        from .tune_pool import Worker

        self.worker = Worker(data)

    def run(self, config, cutoff_ms):
        import ray

        gpus = ray.get_gpu_ids()
        node = ray.get_runtime_context().get_node_id()[:8]
        return self.worker.run(config, cutoff_ms), f"{node}:gpu{gpus[0]}" if gpus else f"{node}:cpu"


class RayPool:
    """Configs as Ray tasks, as many in flight as the cluster has GPUs (or CPUs)."""

    def __init__(self, data: bytes, timeout=None):
        try:
            import ray
        except ImportError:
            raise TileError(
                "autotune backend='ray' needs Ray: pip install 'tilers[ray]' (or pip install ray)"
            ) from None
        self.ray = ray
        if not ray.is_initialized():
            # a cluster started here finds the search's module on this process's path
            path = os.pathsep.join(p for p in sys.path if p)
            ray.init(address=os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                     log_to_driver=False, include_dashboard=False,
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        self.slots = self.gpus or max(1, int(resources.get("CPU", 1)))
        self.data = ray.put(data)
        self.digest = hashlib.sha256(data).hexdigest()
        self.timeout = timeout
        options = {"num_gpus": 1} if self.gpus else {"num_cpus": 1}
        self.task = ray.remote(max_retries=0, **options)(_run_config)
        self.actor_class = ray.remote(max_restarts=0, **options)(_Retimer)
        self.retimer = None

    def run(self, tasks, on_done, one_device=False) -> None:
        ray = self.ray
        queue = list(tasks)
        slots = 1 if one_device else self.slots

        def submit(config, cutoff):
            if not one_device:
                return self.task.remote(self.data, self.digest, config, cutoff)
            if self.retimer is None:
                self.retimer = self.actor_class.remote(self.data, self.digest)
            return self.retimer.run.remote(config, cutoff)

        running = {}  # ref -> (index, started)
        while queue or running:
            while queue and len(running) < slots:
                index, config, cutoff_fn = queue.pop(0)
                running[submit(config, cutoff_fn())] = (index, time.monotonic())
            deadline = None
            if self.timeout is not None:
                now = time.monotonic()
                deadline = max(0.01, min(started + self.timeout - now for _, started in running.values()))
            done, _ = ray.wait(list(running), num_returns=1, timeout=deadline)
            for ref in done:
                index, _ = running.pop(ref)
                try:
                    outcome, device = ray.get(ref)
                except Exception as error:  # the worker died, or the task failed
                    first = str(error).strip().splitlines()
                    outcome, device = {
                        "status": "run error",
                        "error": f"the Ray task running this config failed: {first[-1] if first else error!r}",
                    }, None
                queue.extend(on_done(index, outcome, device) or [])
            if self.timeout is not None:
                now = time.monotonic()
                for ref, (index, started) in list(running.items()):
                    if now - started > self.timeout:
                        running.pop(ref)
                        ray.cancel(ref, force=True)
                        if one_device:
                            ray.kill(self.retimer)
                            self.retimer = None
                        queue.extend(on_done(index, {
                            "status": "run error",
                            "error": f"still running after {self.timeout:g} s on the Ray cluster; the task was cancelled",
                        }, None) or [])

    def close(self) -> None:
        if self.retimer is not None:
            self.ray.kill(self.retimer)
            self.retimer = None
