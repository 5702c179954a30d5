"""Interpreter speed on this (CPU) machine: a 512x512x512 fp16 GEMM tile program with
128x128x32 tiles, an element-wise add over 4M elements, and a row softmax; each checked
against numpy. Writes bench/results/interp-<date>.json."""

import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import kernels  # noqa: E402


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    rng = np.random.default_rng(0)
    rows = []
    # GEMM 512^3, 128x128x32 tiles, 3 stages (pipelined loop runs serially on the interpreter)
    k = tilers.compile(
        kernels.matmul(512, 512, 512, 128, 128, 32, 3, 128), out_idx=[2], target="interp"
    )
    a = rng.standard_normal((512, 512)).astype(np.float16)
    b = rng.standard_normal((512, 512)).astype(np.float16)
    s, c = best_of(lambda: k(a, b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c.astype(np.float64) - want).max() / np.abs(want).max())
    rows.append(
        {
            "program": "gemm fp16 512x512x512, tiles 128x128x32",
            "seconds": s,
            "target s": 2.0,
            "max rel error vs numpy": err,
            "GFLOP/s": 2 * 512**3 / s / 1e9,
        }
    )
    # element-wise add over 4M fp16 elements
    k = tilers.compile(kernels.add(2048, 2048, "float16"), out_idx=[2], target="interp")
    x = rng.standard_normal((2048, 2048)).astype(np.float16)
    y = rng.standard_normal((2048, 2048)).astype(np.float16)
    s, z = best_of(lambda: k(x, y))
    rows.append(
        {
            "program": "add fp16 2048x2048 (4M elements)",
            "seconds": s,
            "M elements/s": 4 * 2**20 / s / 1e6,
            "exact": bool((z == x + y).all()),
        }
    )
    # row softmax fp32 1024 x 1024
    k = tilers.compile(kernels.softmax(1024, 1024), out_idx=[1], target="interp")
    v = rng.standard_normal((1024, 1024)).astype(np.float32)
    s, o = best_of(lambda: k(v))
    e = np.exp(v.astype(np.float64) - v.max(1, keepdims=True))
    rows.append(
        {
            "program": "softmax fp32 1024x1024",
            "seconds": s,
            "max rel error vs numpy": float(
                (np.abs(o - e / e.sum(1, keepdims=True)) / (e / e.sum(1, keepdims=True))).max()
            ),
        }
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "rows": rows,
    }
    for r in rows:
        print(r)
    out = os.path.join(os.path.dirname(__file__), "results", f"interp-{info['date'][:10]}.json")
    with open(out, "w") as f:
        json.dump(info, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
