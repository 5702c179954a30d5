"""Decode-time kernels (issue 18), tilers beside its references in one run:

- the skinny GEMM y = x @ W^T (examples/decode_gemm.py) for M in DECODE_MS, (N, K) in
  DECODE_NK, fp16 and bf16, beside cuBLAS (torch.nn.functional.linear) and a Triton GEMM;
- GQA decoding attention (examples/flash_decoding.py), 32 query heads over 8 KV heads, head
  dim 128, one query per sequence, contiguous and paged (pages of DECODE_PAGE = 64 tokens in a random
  order), beside SDPA's flash and cuDNN back ends (query length 1, `enable_gqa=True`, BHSD
  views of the BSHD cache: no copy in the timed region; a back end that refuses a shape is
  reported as unsupported, never fed a repeated KV).

Every timed call reads buffers the L2 cannot hold: each operand set is one of several copies
taken in turn, together over DECODE_L2X times the L2. Per row: the configs are tried first
(each timed alone, checked against the reference), then the fastest is re-timed interleaved
with the references over DECODE_ROUNDS rounds; the table gives microseconds, the bytes that
must be read, the fraction of the copy bandwidth measured in the same run (a device-to-device
copy, bytes read plus written over time: of 2 GiB, and of the row's own byte count, whose
ramp-up and tail a small read cannot avoid either), the floor of the launches a result needs (one or
two kernels), and the median ratio to each reference with its spread.

Timing (DECODE_TIMING): by default each measurement replays a CUDA graph of 20 captured calls
(rotating through the copies), as inference engines run decode steps — the GPU's time with
every launch a result needs inside it and no host launch cost; DECODE_TIMING=eager times
back-to-back calls from Python instead, where the host's few microseconds per launch (the
"launch floor") dominate the small rows, for tilers and the references alike.

    python bench/decode.py                        # all rows; DECODE_PART=gemm|attention for one half
    DECODE_MS=1,16 DECODE_NK=4096x4096 python bench/decode.py
    DECODE_PART=gemm DECODE_MS=128 DECODE_GEMM_ORDER=xw python bench/decode.py   # the batch-as-A tiles only

The attention space (each a comma list): DECODE_SPLITS, DECODE_BLOCK_N, DECODE_BLOCK_H,
DECODE_STAGES, DECODE_THREADS (the split kernel's), DECODE_COMBINE (kernel: a second kernel;
cluster: one kernel, splits in a thread-block cluster; last: one kernel, the last split to
arrive combines), DECODE_KEYS_AS_ROWS (0, 1: the scores as K q^T), DECODE_COMBINE_THREADS
(the second kernel's threads; 0: the example's default); one-warp split blocks beside them:
DECODE_ONE_WARP (TILE_ROWSxSTAGES pairs, "" for none), DECODE_ONE_WARP_SPLITS,
DECODE_ONE_WARP_COMBINE (0: the example's combine; n: blocks of n threads over n dims).
"""

import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import decode_gemm  # noqa: E402
import flash_decoding  # noqa: E402
import tilers  # noqa: E402
import tilers.language as T  # noqa: E402
from common import time_ms, write_results  # noqa: E402

ROUNDS = int(os.environ.get("DECODE_ROUNDS", "3"))
# "graph": each timing replays a CUDA graph of CALLS calls, the GPU's time as inference
# engines run decode (captured once: no host launch cost, every launch of a result inside);
# "eager": CALLS back-to-back calls from Python, the host's launch cost included (at a few
# microseconds per kernel it dominates the small rows)
TIMING = os.environ.get("DECODE_TIMING", "graph")
# the decoding kernel's pipeline depths tried, and whether every config's time is printed
STAGES = [int(s) for s in os.environ.get("DECODE_STAGES", "2,3,4").split(",")]
SPLITS = [int(s) for s in os.environ.get("DECODE_SPLITS", "1,2,4,8,16,32,64").split(",")]
# the decoding kernel's KV tile rows and query-head rows tried
BLOCK_NS = [int(s) for s in os.environ.get("DECODE_BLOCK_N", "64,128").split(",")]
BLOCK_HS = [int(s) for s in os.environ.get("DECODE_BLOCK_H", "16,64").split(",")]
# threads of the split kernel: fewer warps a block, fewer cross-warp reductions a tile
ATTN_THREADS = [int(s) for s in os.environ.get("DECODE_THREADS", "128").split(",")]
# the scores as K q^T (keys on the tensor cores' rows; the group's 4 query heads in 8 columns):
# measured 2-4x slower on an H100 (session 32), so only when asked ("0,1")
KEYS_AS_ROWS = [bool(int(s)) for s in os.environ.get("DECODE_KEYS_AS_ROWS", "0").split(",")]
# how the splits meet: a second kernel, or (2 to 16 splits) in the first split's shared memory
# through a thread-block cluster, one kernel
COMBINES = os.environ.get("DECODE_COMBINE", "kernel,cluster,last").split(",")
# the second kernel's threads (combine="kernel"): 0 the example's default
COMBINE_THREADS = [int(s) for s in os.environ.get("DECODE_COMBINE_THREADS", "0").split(",")]
# one-warp split blocks (threads=32: no reduction crosses warps; small tiles, so many blocks
# share an SM): "TILE_ROWSxSTAGES" pairs, over DECODE_ONE_WARP_SPLITS ("" leaves them out)
ONE_WARP = [tuple(int(x) for x in p.split("x")) for p in os.environ.get(
    "DECODE_ONE_WARP", "16x2,16x4,32x2,32x3").split(",") if p]
# (those that launch 128 to 2048 blocks: about one SM's worth of warps to a few waves)
ONE_WARP_SPLITS = [int(s) for s in os.environ.get("DECODE_ONE_WARP_SPLITS", "1,2,4,8,16,32,64,128").split(",")]
# their combine: 0 the example's default, n: blocks of n threads over n of the head's dims
ONE_WARP_COMBINE = [int(s) for s in os.environ.get("DECODE_ONE_WARP_COMBINE", "0,32").split(",")]
VERBOSE = os.environ.get("DECODE_VERBOSE", "") == "1"
CALLS = 20
L2X = float(os.environ.get("DECODE_L2X", "3"))
PART = os.environ.get("DECODE_PART", "all")
MS = [int(m) for m in os.environ.get("DECODE_MS", "1,2,4,8,16,32,64,128").split(",")]
NK = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("DECODE_NK", "4096x4096,14336x4096,4096x14336").split(",")]
DTYPES = os.environ.get("DECODE_DTYPES", "float16,bfloat16").split(",")
# only the GEMM configs of this operand order ("xw" or "wx"; empty: every config)
GEMM_ORDER = os.environ.get("DECODE_GEMM_ORDER", "")
ATTN_BATCHES = [int(b) for b in os.environ.get("DECODE_BATCHES", "1,8,64").split(",")]
ATTN_LENGTHS = [int(n) for n in os.environ.get("DECODE_KV", "1024,8192,32768,131072").split(",")]
HEADS, HEADS_KV, DIM = 32, 8, 128
PAGE = int(os.environ.get("DECODE_PAGE", "64"))  # tokens per page of the paged rows


def rotating(make, nbytes):
    """Copies of an operand set, together over L2X times the L2, and a function that returns
    the next one on each call."""
    import torch

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copies = max(2, math.ceil(L2X * l2 / max(nbytes, 1)) + 1)
    sets = [make() for _ in range(copies)]
    state = {"i": 0}

    def next_set():
        state["i"] = (state["i"] + 1) % len(sets)
        return sets[state["i"]]

    return sets, next_set


def copy_bandwidth():
    """Bytes read plus written per second by a 2 GiB device-to-device copy."""
    import torch

    a = torch.empty(1 << 30, dtype=torch.float16, device="cuda")
    b = torch.empty_like(a)
    ms = min(time_ms(lambda: b.copy_(a), 10) for _ in range(3))
    return 2 * a.numel() * 2 / (ms * 1e-3)


def timer(fn, dependent=True):
    """A function that times fn: microseconds per call (see TIMING). `dependent=False`: the
    later kernels of a tilers call start only once the kernel before them ended (no
    programmatic dependent launch: `tilers.runtime.dependent_launch`)."""
    import torch

    if not dependent:
        # the launcher reads the setting at each launch (in a graph: at its capture)
        def serial():
            before = tilers.runtime.dependent_launch(False)
            try:
                fn()
            finally:
                tilers.runtime.dependent_launch(before)

        return timer(serial)
    if TIMING == "eager":
        return lambda: time_ms(fn, CALLS) * 1e3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # libraries set up their workspaces outside the capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    return lambda: time_ms(graph.replay, 3) * 1e3 / CALLS


def launch_floor(n):
    """Microseconds per call of n launches of an empty tilers kernel (one block), timed as
    every row is (TIMING)."""

    @T.prim_func
    def empty(A: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32):
            A[0] = A[0]

    import torch

    kernel = tilers.compile(empty)
    a = torch.zeros(1, device="cuda")

    def run():
        for _ in range(n):
            kernel(a)

    timed = timer(run)
    return min(timed() for _ in range(5))


def launch_floor_pair(dependent):
    """Microseconds per call of a prim_func of two empty kernels (one block each), the
    second reading what the first wrote: the floor of a result that takes two kernels, with
    or without programmatic dependent launch."""

    @T.prim_func
    def pair(A: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=32):
            A[0] = A[0] + 1.0
        with T.Kernel(1, threads=32):
            A[1] = A[0]

    import torch

    kernel = tilers.compile(pair)
    a = torch.zeros(2, device="cuda")
    timed = timer(lambda: kernel(a), dependent=dependent)
    return min(timed() for _ in range(5))


def rounds_of(fns, serial=(), rounds=None):
    """Per round (ROUNDS of them), each fn timed once (A, B, C, A, B, C, ...): {name: [us per
    round]}; the names in `serial` timed without programmatic dependent launch."""
    import torch

    timers = {name: timer(fn, dependent=name not in serial) for name, fn in fns.items()}
    torch.cuda.synchronize()
    out = {name: [] for name in fns}
    for _ in range(rounds or ROUNDS):
        for name, timed in timers.items():
            out[name].append(timed())
    return out


_SIZE_BANDWIDTH = {}


def copy_bandwidth_at(nbytes):
    """Bytes read plus written per second by a device-to-device copy of `nbytes` (rotated
    over 3x the L2, timed as the rows are): the ceiling a read of that size meets once its
    ramp-up and tail count, beside the 2 GiB copy's asymptotic one. The better of two copies:
    `copy_` (in a CUDA graph a memcpy node, which the driver may give to a copy engine) and an
    elementwise kernel on the SMs (`torch.neg(a, out=b)`: the same bytes read and written)."""
    import torch

    if nbytes not in _SIZE_BANDWIDTH:
        n = max(1, nbytes // 2)
        sets, next_set = rotating(lambda: (torch.empty(n, dtype=torch.float16, device="cuda"),
                                           torch.empty(n, dtype=torch.float16, device="cuda")), 2 * n * 2)

        def memcpy():
            a, b = next_set()
            b.copy_(a)

        def kernel():
            a, b = next_set()
            torch.neg(a, out=b)

        found = {}
        for name, fn in (("memcpy", memcpy), ("kernel", kernel)):
            timed = timer(fn)
            found[name] = 2 * n * 2 / (min(timed() for _ in range(3)) * 1e-6)
        _SIZE_BANDWIDTH[nbytes] = found
        del sets
    return _SIZE_BANDWIDTH[nbytes]


def kernel_names(fn):
    """The names of the GPU kernels one call of fn launches (torch's profiler), or []."""
    import torch

    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.name for e in prof.events() if e.device_type == DeviceType.CUDA})
    except Exception as err:  # a profiler that cannot run here: the row goes on without names
        return [f"(profiler: {str(err).splitlines()[0][:80]})"]


def tune(space, build, first_args, next_args, want, tol, finalists=3):
    """The tuning of a row: every config of `space` built (NVRTC on a thread pool), checked on
    `first_args` against `want`, timed alone over the rotating copies (`next_args`); the
    `finalists` fastest re-timed interleaved over ROUNDS rounds (one timing alone picks a
    config within its noise). (µs, config, kernel) of the best median, or None when none ran."""
    import concurrent.futures

    import torch

    def make(cfg):
        kernel = build(cfg)
        if getattr(kernel, "source", None) is not None:
            _ = kernel.cubin  # NVRTC, through the cubin cache
        return kernel

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        futures = [pool.submit(make, cfg) for cfg in space]
    timed = []
    for index, (cfg, future) in enumerate(zip(space, futures)):
        try:
            kernel = future.result()
            got = kernel(*first_args).float()
        except Exception as err:  # a config the compiler refuses (shared memory, ...)
            print(f"  skip {cfg}: {str(err).splitlines()[0][:100]}")
            continue
        if not torch.allclose(got, want, rtol=tol, atol=tol):
            print(f"  WRONG {cfg}")
            continue
        us = timer(lambda: kernel(*next_args()))()
        if VERBOSE:
            print(f"  {cfg}: {us:.2f} us")
        timed.append((us, index, cfg, kernel))
    if not timed:
        return None
    timed.sort(key=lambda t: t[:2])
    best = timed[:finalists]
    if len(best) > 1:
        # each round captures its graphs afresh: a config whose time depends on how its
        # calls fall in a capture (measured: 15.9 or 17.7 µs for one config on the H100)
        # shows it in its median
        times = {index: [] for _, index, _, _ in best}
        for _ in range(ROUNDS):
            for index, ts in rounds_of({index: (lambda k: lambda: k(*next_args()))(kernel)
                                        for _, index, _, kernel in best}, rounds=1).items():
                times[index] += ts
        medians = {index: statistics.median(ts) for index, ts in times.items()}
        if VERBOSE:
            print("  finalists: " + "; ".join(f"{cfg} {medians[index]:.2f} us" for _, index, cfg, _ in best))
        best.sort(key=lambda t: (medians[t[1]], t[1]))
        return medians[best[0][1]], best[0][2], best[0][3]
    return best[0][0], best[0][2], best[0][3]


class WithArrivals:
    """A combine="last" decode kernel called as the others are: its `arrivals` counter (zeroed
    once; every call leaves it zero) passed after the caller's arguments."""

    def __init__(self, kernel, arrivals):
        self.kernel, self.arrivals = kernel, arrivals
        self.source = kernel.source

    @property
    def cubin(self):
        return self.kernel.cubin

    def __call__(self, *args):
        return self.kernel(*args, self.arrivals)


def summarize(row, times, ours, refs, nbytes, bandwidth):
    """Median µs, fraction of copy bandwidth (the 2 GiB copy's, and a copy's of the row's own
    size), and the median ratio (reference / tilers) and its spread to each reference."""
    t = statistics.median(times[ours])
    found = copy_bandwidth_at(nbytes)
    at_size = max(found.values())
    row.update({"us": t, "bytes": nbytes, "of_copy_bw": nbytes / (t * 1e-6) / bandwidth,
                "copy_bw_at_size": at_size, "copy_bw_at_size_by": found,
                "of_copy_bw_at_size": nbytes / (t * 1e-6) / at_size})
    if "launch_floor_us" in row:
        # the most a result of this many launches could reach: the launches' floor, then
        # the bytes at copy bandwidth (a bound, not a model: the first bytes take longer)
        stream = nbytes / bandwidth
        row["of_copy_bw_floor_bound"] = stream / (stream + row["launch_floor_us"] * 1e-6)
    for ref in refs:
        if ref not in times:
            row[f"vs_{ref}"] = "unsupported"
            continue
        ratios = [r / o for r, o in zip(times[ref], times[ours])]
        row[f"{ref}_us"] = statistics.median(times[ref])
        row[f"vs_{ref}"] = statistics.median(ratios)
        row[f"vs_{ref}_spread"] = [min(ratios), max(ratios)]
    return row


# ---------------------------------------------------------------------------------------
# the skinny GEMM


def triton_linear():
    """A Triton GEMM for y = x @ W^T (its own autotuned tiles), the reference beside cuBLAS."""
    import triton
    import triton.language as tl

    @triton.autotune(
        configs=[triton.Config({"BM": 16, "BN": bn, "BK": bk}, num_stages=s, num_warps=w)
                 for bn in (64, 128) for bk in (64, 128) for s in (3, 4) for w in (4,)],
        key=["M", "N", "K"],
    )
    @triton.jit
    def kernel(x, w, y, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_n, pid_m = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            a = tl.load(x + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            b = tl.load(w + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
            acc += tl.dot(a, b)
        tl.store(y + rm[:, None] * N + rn[None, :], acc.to(y.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(x, w):
        import torch

        M, K = x.shape
        N = w.shape[0]
        y = torch.empty(M, N, device=x.device, dtype=x.dtype)
        kernel[lambda meta: (triton.cdiv(N, meta["BN"]), triton.cdiv(M, meta["BM"]))](x, w, y, M, N, K)
        return y

    return run


def gemm_rows(bandwidth, floors):
    import torch
    import torch.nn.functional as F

    triton_run = triton_linear()
    rows = []
    for dtype in DTYPES:
        tdt = getattr(torch, dtype)
        for N, K in NK:
            for M in MS:
                nbytes = (N * K + M * K + M * N) * 2

                def make():
                    return (torch.randn(M, K, device="cuda").to(tdt),
                            (torch.randn(N, K, device="cuda") / K**0.5).to(tdt))

                sets, next_set = rotating(make, nbytes)
                want = F.linear(*sets[0]).float()
                space = [c for c in decode_gemm.configs(N, K, dtype, M)
                         if not GEMM_ORDER or c.get("order", "wx") == GEMM_ORDER]
                best = tune(space, lambda cfg: decode_gemm.linear(N, K, dtype=dtype, **cfg),
                            sets[0], next_set, want, 3e-2)
                if best is None:
                    rows.append({"kind": "gemm", "dtype": dtype, "M": M, "N": N, "K": K, "error": "no config ran"})
                    continue
                _, cfg, kernel = best
                launches = 1 if cfg["schedule"] in ("tiles", "gemv") else 2
                fns = {"tilers": lambda: kernel(*next_set()), "cublas": lambda: F.linear(*next_set())}
                if launches == 2:  # the same kernels, each started after the one before it ended
                    fns["tilers_serial"] = fns["tilers"]
                try:
                    triton_run(*sets[0])
                    fns["triton"] = lambda: triton_run(*next_set())
                except Exception as err:
                    print(f"  triton refused M={M} N={N} K={K}: {str(err).splitlines()[0][:100]}")
                times = rounds_of(fns, serial=("tilers_serial",))
                first = sets[0]
                cublas_kernels = kernel_names(lambda: F.linear(*first))
                row = {"kind": "gemm", "dtype": dtype, "M": M, "N": N, "K": K, "config": cfg,
                       "launch_floor_us": floors[launches],
                       "cublas_kernels": cublas_kernels}
                rows.append(summarize(row, times, "tilers", ["cublas", "triton", "tilers_serial"], nbytes, bandwidth))
                print(rows[-1])
                del sets
                torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------------------
# decoding attention


def attention_rows(bandwidth, floors):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    rows = []
    for B in ATTN_BATCHES:
        for S in ATTN_LENGTHS:
            kv_bytes = 2 * B * S * HEADS_KV * DIM * 2
            if kv_bytes > 40 * 2**30:
                print(f"  skip B={B} S={S}: {kv_bytes / 2**30:.0f} GiB of KV")
                continue
            nbytes = kv_bytes + 2 * B * HEADS * DIM * 2

            def make():
                q = torch.randn(B, HEADS, DIM, device="cuda", dtype=torch.float16)
                k = torch.randn(B, S, HEADS_KV, DIM, device="cuda", dtype=torch.float16)
                v = torch.randn(B, S, HEADS_KV, DIM, device="cuda", dtype=torch.float16)
                return q, k, v

            sets, next_set = rotating(make, kv_bytes)
            seqlens = torch.full((B,), S, device="cuda", dtype=torch.int32)

            def sdpa_call(backend, q, k, v):
                with sdpa_kernel(backend):
                    return sdpa(q.unsqueeze(2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)

            q0, k0, v0 = sets[0]
            # the reference: SDPA's math back end where it fits (it repeats the KV heads),
            # else the first fused back end that runs the shape
            want = None
            for backend in ((SDPBackend.MATH,) if kv_bytes <= 2**31 else ()) + (
                    SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                try:
                    want = sdpa_call(backend, q0, k0, v0).squeeze(2).float()
                    break
                except Exception:
                    continue
            if want is None:
                print(f"  no reference runs B={B} S={S}; rows skipped")
                continue
            for paged in (False, True):
                if paged:
                    pages = S // PAGE
                    tables = [torch.randperm(B * pages, device="cuda").view(B, pages).to(torch.int32)
                              for _ in range(len(sets))]
                    paged_sets = []
                    for (q, k, v), table in zip(sets, tables):
                        kp = torch.empty(B * pages, PAGE, HEADS_KV, DIM, device="cuda", dtype=k.dtype)
                        vp = torch.empty_like(kp)
                        kp[table.flatten().long()] = k.reshape(B * pages, PAGE, HEADS_KV, DIM)
                        vp[table.flatten().long()] = v.reshape(B * pages, PAGE, HEADS_KV, DIM)
                        paged_sets.append((q, kp, vp, seqlens, table))
                    args_of = paged_sets
                else:
                    args_of = [(q, k, v, seqlens) for q, k, v in sets]
                state = {"i": 0}

                def next_args():
                    state["i"] = (state["i"] + 1) % len(args_of)
                    return args_of[state["i"]]

                space = [{"num_split": num_split, "block_N": block_N, "block_H": block_H, "num_stages": stages,
                          "combine": combine, **({} if threads == 128 else {"threads": threads}),
                          **({"keys_as_rows": True} if rows else {}),
                          **({"combine_threads": ct} if ct else {})}
                         for num_split in SPLITS if num_split * 64 <= S
                         for rows in KEYS_AS_ROWS
                         for block_N in BLOCK_NS for block_H in ([8] if rows else BLOCK_HS) for stages in STAGES
                         for threads in ATTN_THREADS
                         for combine in COMBINES
                         if combine == "kernel" or (combine == "cluster" and 2 <= num_split <= 16)
                         or (combine == "last" and num_split > 1)
                         for ct in (COMBINE_THREADS if combine == "kernel" and num_split > 1 else [0])]
                space += [{"num_split": num_split, "block_N": block_N, "block_H": 16, "num_stages": stages,
                           "combine": "kernel", "threads": 32,
                           **({"combine_threads": cd, "combine_dims": cd} if cd and num_split > 1 else {})}
                          for num_split in ONE_WARP_SPLITS for block_N, stages in ONE_WARP
                          if num_split * 2 * block_N <= S and 128 <= B * HEADS_KV * num_split <= 2048
                          for cd in (ONE_WARP_COMBINE if num_split > 1 else [0])]

                def build(cfg):
                    kernel = flash_decoding.flash_decode(
                        B, HEADS, HEADS_KV, DIM, S, **cfg,
                        page_size=PAGE if paged else 0, num_pages=B * S // PAGE if paged else 0)
                    if cfg["combine"] != "last":
                        return kernel
                    # one kernel: its splits count their arrivals in a tensor zeroed once
                    return WithArrivals(kernel, torch.zeros(B, HEADS_KV, device="cuda", dtype=torch.int32))

                best = tune(space, build, args_of[0], next_args, want, 1e-2)
                if best is None:
                    rows.append({"kind": "attention", "B": B, "S": S, "paged": paged, "error": "no config ran"})
                    continue
                _, cfg, kernel = best
                fns = {"tilers": lambda: kernel(*next_args())}
                launches = 2 if cfg["num_split"] > 1 and cfg["combine"] == "kernel" else 1
                if launches == 2:  # the combine: a second kernel
                    fns["tilers_serial"] = fns["tilers"]
                for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                                      ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        got = sdpa_call(backend, q0, k0, v0).squeeze(2).float()
                        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
                    except Exception as err:
                        print(f"  {name} unsupported at B={B} S={S}: {str(err).splitlines()[0][:100]}")
                        continue
                    fns[name] = (lambda be: lambda: sdpa_call(be, *next_set()))(backend)
                times = rounds_of(fns, serial=("tilers_serial",))
                row = {"kind": "attention", "B": B, "S": S, "paged": paged, "page_size": PAGE if paged else 0, "config": cfg,
                       "launch_floor_us": floors[launches]}
                rows.append(summarize(row, times, "tilers", ["sdpa_flash", "sdpa_cudnn", "tilers_serial"], nbytes,
                                      bandwidth))
                print(rows[-1])
            del sets
            torch.cuda.empty_cache()
    return rows


def main():
    bandwidth = copy_bandwidth()
    floors = {1: launch_floor(1), 2: launch_floor(2)}
    # a result of two kernels is one call of a prim_func of two: its floor with the second
    # kernel started early (programmatic dependent launch) and without
    pair = {"dependent": launch_floor_pair(True), "serial": launch_floor_pair(False)}
    floors[2] = pair["dependent"]
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s; launch floors {floors} us, two kernels in one call {pair} "
          f"({TIMING} timing)")
    rows = []
    if PART in ("all", "gemm"):
        rows += gemm_rows(bandwidth, floors)
    if PART in ("all", "attention"):
        rows += attention_rows(bandwidth, floors)
    write_results("decode", rows, {"copy_bandwidth_bytes_per_s": bandwidth, "launch_floor_us": floors,
                                   "two_kernel_floor_us": pair,
                                   "rounds": ROUNDS, "l2x": L2X, "timing": TIMING, "calls": CALLS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
