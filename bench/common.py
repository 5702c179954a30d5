"""Benchmark helpers: interleaved timing with CUDA events and result files with provenance."""

import datetime
import json
import os
import statistics
import subprocess


def time_ms(fn, iters):
    """Milliseconds per call of fn, averaged over `iters` back-to-back calls."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def interleaved(fns, repeats=15, iters=20, warmup=3):
    """Median ms per call of each fn, measured A, B, C, A, B, C, … so drift hits all alike."""
    import torch

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(time_ms(fn, iters))
    return {name: statistics.median(s) for name, s in samples.items()}


def provenance():
    import torch

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date": os.environ.get("TILERS_DATE")
        or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("TILERS_COMMIT", commit) or "unknown",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }


def write_results(name, rows, extra=None):
    """Print a table and write JSON to $OUT (or bench/results/) named after the benchmark."""
    info = provenance()
    out_dir = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump({**info, **(extra or {}), "rows": rows}, f, indent=1)
    print(f"# {name}: {info}")
    if rows:
        # rows of several kinds (bench/decode.py: GEMM and attention rows) each print with the
        # keys of the first row of their kind
        keys = None
        for r in rows:
            if keys is None or set(r) != set(keys):
                keys = list(r)
                print(" | ".join(keys))
            print(" | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    print(f"wrote {path}")
