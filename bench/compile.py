"""Compile-time fast paths, in one run: `import tilers`, a cold compile of a 128x128x32
3-stage GEMM (trace + Rust + NVRTC + load), the same program again in the process, a
disk-cache hit in a new process, and how parallel compiles scale with threads.

Fresh processes are children of this script (`--child`), each with torch already on the
GPU (the state of a real program), so what they time is tilers alone. Until T.gemm has a
GPU lowering the script measures a stand-in kernel and says so in every row.
Targets (issue 7): import <= 0.3 s; cold compile <= 0.5 s with the Rust core <= 10 ms;
again in the process <= 1 ms; disk-cache hit in a new process <= 20 ms.
"""

import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

PROCESSES = 5  # fresh processes per measurement (median)


def gemm(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128,
         dtype="float16", accum_dtype="float32"):
    import tilers.language as T

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def softmax(M, N, block_M=4, threads=256):
    import kernels

    return kernels.softmax(M, N, block_M=block_M, threads=threads)


SUBJECTS = {
    "gemm": (gemm, {"M": 4096, "N": 4096, "K": 4096},
             [{"block_M": bm, "block_N": bn, "num_stages": s, "threads": t}
              for bm in (64, 128) for bn in (64, 128) for s in (2, 3) for t in (128, 256)]),
    "softmax": (softmax, {"M": 4096, "N": 4096},
                [{"block_M": bm, "threads": t} for bm in (1, 2, 4, 8) for t in (128, 256, 512)]
                + [{"block_M": bm, "threads": 1024} for bm in (1, 2, 4, 8)]),
}


def median(values):
    return statistics.median(values)


# ---------------------------------------------------------------------------------------
# the child process: one compile, timed by stage
# ---------------------------------------------------------------------------------------


def child(subject: str, preload_nvrtc: bool) -> dict:
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    import tilers
    from tilers import _tilers, cache, runtime
    from tilers._trace import trace

    out = {"import_s": time.perf_counter() - start}
    factory, params, _ = SUBJECTS[subject]
    if preload_nvrtc:
        start = time.perf_counter()
        runtime.nvrtc_version()
        out["nvrtc_load_s"] = time.perf_counter() - start

    start = time.perf_counter()
    prim = factory(**params)
    kernel = tilers.compile(prim)  # trace + Rust core
    traced = time.perf_counter()
    cubin = kernel.cubin  # memo, disk cache or NVRTC
    compiled = time.perf_counter()
    kernel._load(0)  # cuModuleLoadData
    loaded = time.perf_counter()
    out.update(
        front_s=traced - start, cubin_s=compiled - traced, load_s=loaded - compiled,
        total_s=loaded - start, cubin_from=dict(cache.stats), cubin_bytes=len(cubin),
    )

    # the Rust core alone, and tracing alone (medians of repeated calls)
    program_json = kernel.program_json
    options = kernel.compile_options()
    rust, traces = [], []
    for _ in range(7):
        t = time.perf_counter()
        _tilers.compile(program_json, options)
        rust.append(time.perf_counter() - t)
        t = time.perf_counter()
        json.dumps(trace(factory(**params), {}), separators=(",", ":"))
        traces.append(time.perf_counter() - t)
    out["rust_s"] = median(rust)
    out["trace_s"] = median(traces)

    # the same program again in this process: tilers.compile's memo, a @tilers.jit
    # factory's memo, and the program traced again (the Rust output and cubin memos)
    again = []
    for _ in range(7):
        t = time.perf_counter()
        tilers.compile(prim)
        again.append(time.perf_counter() - t)
    out["again_compile_s"] = median(again)
    jitted = tilers.jit(factory)
    jitted(**params)
    again = []
    for _ in range(7):
        t = time.perf_counter()
        jitted(**params)
        again.append(time.perf_counter() - t)
    out["again_jit_s"] = median(again)
    again = []
    for _ in range(7):
        t = time.perf_counter()
        other = tilers.compile(factory(**params))
        _ = other.cubin
        other._load(0)
        again.append(time.perf_counter() - t)
    out["again_retrace_s"] = median(again)
    return out


def run_child(subject: str, cache_dir: str, preload_nvrtc=False) -> dict:
    env = dict(os.environ, TILERS_CACHE_DIR=cache_dir)
    command = [sys.executable, __file__, "--child", subject]
    if preload_nvrtc:
        command.append("--preload-nvrtc")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    times = []
    for _ in range(PROCESSES):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True)
        times.append(float(done.stdout.strip()))
    return median(times)


# ---------------------------------------------------------------------------------------
# parallel compiles
# ---------------------------------------------------------------------------------------


def compile_configs(subject: str, workers: int) -> float:
    """Seconds to compile every config of the subject (trace, Rust, NVRTC) on `workers`
    threads, with the disk cache off and the memos cleared."""
    import importlib

    import tilers
    from tilers import cache

    factory, params, configs = SUBJECTS[subject]
    cache.clear_memo()
    importlib.import_module("tilers.jit")._compiled_programs.clear()

    def build(config):
        kernel = tilers.compile(factory(**params, **config))
        return len(kernel.cubin)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(build, configs))
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------


def pick_subject() -> tuple[str, str]:
    import tilers

    factory, params, _ = SUBJECTS["gemm"]
    try:
        tilers.compile(factory(**params))
        return "gemm", ""
    except tilers.TileError as error:
        first = str(error).splitlines()[0][:120]
        return "softmax", f"stand-in: the GEMM does not compile yet ({first})"


def main():
    from common import write_results

    subject, note = pick_subject()
    label = "gemm 128x128x32 3-stage" if subject == "gemm" else "softmax 4096x4096 (stand-in)"
    rows = []

    def row(measure, seconds, target_s, extra=""):
        rows.append({
            "measure": measure, "subject": label, "ms": seconds * 1e3,
            "target ms": target_s * 1e3 if target_s else "-",
            "met": (seconds <= target_s) if target_s else "-", "note": extra,
        })

    row("import tilers (new process)", import_seconds("tilers"), 0.3)
    row("import torch (new process, for scale)", import_seconds("torch"), None)

    with tempfile.TemporaryDirectory() as scratch:
        colds, preloaded, hits = [], [], []
        for i in range(PROCESSES):
            cache_dir = os.path.join(scratch, f"cold{i}")
            colds.append(run_child(subject, cache_dir))
            preloaded.append(run_child(subject, os.path.join(scratch, f"warm{i}"), True))
            hits.append(run_child(subject, cache_dir))  # the cache the cold run filled
    for result in colds + preloaded:
        assert result["cubin_from"]["nvrtc"] == 1, result
    for result in hits:
        assert result["cubin_from"]["disk"] == 1, result

    def med(results, field):
        return median([r[field] for r in results])

    row("cold compile: trace + Rust + NVRTC + load, NVRTC library loaded in it",
        med(colds, "total_s"), 0.5,
        f"front {med(colds, 'front_s') * 1e3:.1f} ms, NVRTC {med(colds, 'cubin_s') * 1e3:.1f} ms,"
        f" load {med(colds, 'load_s') * 1e3:.1f} ms")
    row("cold compile with NVRTC already loaded", med(preloaded, "total_s"), 0.5,
        f"NVRTC library load {med(preloaded, 'nvrtc_load_s') * 1e3:.1f} ms before")
    row("  of which the Rust core", med(colds, "rust_s"), 0.010)
    row("  of which tracing (Python)", med(colds, "trace_s"), None)
    row("same program again: tilers.compile memo", med(colds, "again_compile_s"), 0.001)
    row("same program again: @tilers.jit factory memo", med(colds, "again_jit_s"), 0.001)
    row("same program again: traced again (Rust + cubin memos)",
        med(colds, "again_retrace_s"), None)
    row("new process, disk-cache hit: trace + Rust + cubin read + load",
        med(hits, "total_s"), 0.020,
        f"front {med(hits, 'front_s') * 1e3:.1f} ms, cubin read {med(hits, 'cubin_s') * 1e3:.2f}"
        f" ms, load {med(hits, 'load_s') * 1e3:.2f} ms; import tilers {med(hits, 'import_s'):.3f} s")

    # NVRTC in threads: cuda-bindings must release the GIL for this to scale
    os.environ["TILERS_CACHE"] = "0"
    workers = min(16, os.cpu_count() or 1)
    count = len(SUBJECTS[subject][2])
    serial = compile_configs(subject, 1)
    parallel = compile_configs(subject, workers)
    row(f"compile {count} configs, 1 thread", serial, None)
    row(f"compile {count} configs, {workers} threads", parallel, None,
        f"speedup {serial / parallel:.1f}x on {workers} threads")

    extra = {"subject": label, "note": note, "processes": PROCESSES,
             "cold": colds, "preloaded": preloaded, "hits": hits}
    write_results("compile", rows, extra=extra)
    if note:
        print(note)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], "--preload-nvrtc" in sys.argv)))
    else:
        main()
