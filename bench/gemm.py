"""GEMM on the GPU: tilers beside cuBLAS (torch.matmul) and a standard Triton matmul, in one
run, fp16 and bf16, square, LLM and decode shapes, B stored K x N (NN) and N x K (TN).
Per row: a sweep over CONFIGS picks the fastest correct tilers config (the tuning), then
that config is re-timed interleaved with cuBLAS and Triton over ROUNDS rounds; the row
reports the median TFLOP/s, the median of the per-round ratios to cuBLAS and their spread.

Dynamic-M rows (GEMM_DYNAMIC=1 adds them; GEMM_DYNAMIC=only runs just them): for M = 4096
and M = 64 (N = K = 4096, fp16, NN) the best static config is tuned first, then that
config is built once more with M = T.dynamic("M") — one kernel for every M, its row guards
kept — and the two are re-timed interleaved with cuBLAS over several rounds: the row
reports the median static/dynamic time ratio and its spread over the rounds."""

import json
import os
import sys

import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import kernels  # noqa: E402
from common import interleaved, write_results  # noqa: E402

ROUNDS = int(os.environ.get("GEMM_ROUNDS", "3"))
# extra tilers.compile options for every tilers kernel, e.g. GEMM_COMPILE='{"persistent": false}'
COMPILE = json.loads(os.environ.get("GEMM_COMPILE", "{}"))

CONFIGS = [  # block_M, block_N, block_K, stages, threads, T.use_swizzle panel (0: none)
    # on sm_90a, two warpgroups split 128x256 either way: the policy goes last when given
    (128, 256, 64, 4, 256, 8, "full_row"),
    (128, 256, 64, 3, 256, 8, "full_row"),
    (256, 128, 64, 3, 256, 8, "full_row"),
    (128, 128, 32, 3, 128, 0),
    (128, 256, 32, 3, 256, 0),
    (128, 256, 64, 3, 256, 0),
    (128, 128, 64, 4, 128, 0),
    (256, 128, 32, 3, 256, 0),
    (64, 128, 32, 3, 128, 0),
    (128, 256, 64, 4, 256, 0),
    (256, 128, 64, 3, 256, 0),
    (128, 128, 32, 3, 128, 8),
    (128, 256, 64, 3, 256, 8),
    (128, 128, 64, 3, 128, 0),
    (128, 128, 64, 3, 128, 8),
    (128, 128, 64, 2, 128, 8),
    # ping-pong: two consumer slots of one warpgroup on alternate tiles (persistent="pingpong")
    (128, 128, 64, 4, 128, 8, "square", {"persistent": "pingpong"}),
    (128, 128, 64, 5, 128, 8, "square", {"persistent": "pingpong"}),
    (64, 256, 64, 4, 128, 8, "square", {"persistent": "pingpong"}),
    (128, 128, 64, 3, 256, 8, "full_row", {"persistent": "pingpong"}),
    # thread-block clusters of two tiles along bx (A multicast) or by (B multicast)
    (128, 256, 64, 3, 256, 8, "full_row", {"cluster": (2, 1)}),
    (128, 256, 64, 3, 256, 8, "full_row", {"cluster": (1, 2)}),
    (128, 256, 64, 4, 256, 8, "full_row", {"cluster": (2, 1)}),
    (128, 256, 64, 4, 256, 8, "full_row", {"cluster": (1, 2)}),
    (256, 128, 64, 3, 256, 8, "full_row", {"cluster": (2, 1)}),
    (128, 128, 64, 4, 128, 8, "square", {"cluster": (1, 2)}),
]
# the Done-when shapes of the wgmma issue: GEMM_SHAPES=hopper
HOPPER_SHAPES = [
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 4096, 4096),
    (4096, 14336, 4096),
    (4096, 4096, 14336),
]
ALL_SHAPES = [
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (8192, 8192, 1024),
    (16384, 4096, 4096),
    (4096, 14336, 4096),
    (4096, 4096, 14336),
    (1, 4096, 4096),
    (16, 4096, 4096),
    (64, 4096, 4096),
    (128, 4096, 4096),
]
# GEMM_SHAPES="4096x4096x4096,16x4096x4096" picks rows; GEMM_QUICK=1 two of them
if os.environ.get("GEMM_SHAPES") == "hopper":
    SHAPES = HOPPER_SHAPES
elif os.environ.get("GEMM_SHAPES"):
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["GEMM_SHAPES"].split(",")]
elif os.environ.get("GEMM_QUICK"):
    SHAPES = [(4096, 4096, 4096), (8192, 8192, 1024)]
else:
    SHAPES = ALL_SHAPES


def triton_matmul():
    """A standard Triton matmul with its own autotune configs (None when Triton is missing)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.autotune(
        configs=[
            triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_stages=3, num_warps=8),
            triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_stages=4, num_warps=4),
            triton.Config({"BM": 64, "BN": 128, "BK": 32}, num_stages=4, num_warps=4),
            triton.Config({"BM": 128, "BN": 64, "BK": 32}, num_stages=4, num_warps=4),
        ],
        key=["M", "N", "K"],
    )
    @triton.jit
    def kernel(
        a,
        b,
        c,
        M,
        N,
        K,
        sam,
        sak,
        sbk,
        sbn,
        scm,
        scn,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            ka = k * BK + rk
            x = tl.load(
                a + rm[:, None] * sam + ka[None, :] * sak,
                mask=(rm[:, None] < M) & (ka[None, :] < K),
                other=0.0,
            )
            y = tl.load(
                b + ka[:, None] * sbk + rn[None, :] * sbn,
                mask=(ka[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            acc += tl.dot(x, y)
        tl.store(
            c + rm[:, None] * scm + rn[None, :] * scn,
            acc.to(c.dtype.element_ty),
            mask=(rm[:, None] < M) & (rn[None, :] < N),
        )

    def run(a, b_kn, c):
        M, K = a.shape
        N = b_kn.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
        kernel[grid](
            a,
            b_kn,
            c,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            b_kn.stride(0),
            b_kn.stride(1),
            c.stride(0),
            c.stride(1),
        )

    return run


def bind(kernel, *args):
    return lambda: kernel(*args)


def policy_of(config):
    """The warp policy a config names (its seventh field), as kernels.matmul's argument."""
    import tilers.language as T

    if len(config) < 7:
        return {}
    return {"policy": {"square": T.GemmWarpPolicy.Square, "full_row": T.GemmWarpPolicy.FullRow,
                       "full_col": T.GemmWarpPolicy.FullCol}[config[6]]}


def config_name(config):
    bm, bn, bk, st, th, panel = config[:6]
    name = f"{bm}x{bn}x{bk} s{st} t{th}" + (f" p{panel}" if panel else "")
    name += f" {config[6]}" if len(config) > 6 else ""
    return name + "".join(f" {k}={v}" for k, v in options_of(config).items())


def options_of(config):
    """The compile options a config adds (its eighth field) to GEMM_COMPILE's."""
    return {**COMPILE, **(config[7] if len(config) > 7 else {})}


DYNAMIC_SHAPES = [(4096, 4096, 4096), (64, 4096, 4096)]
DYNAMIC_ROUNDS = 5


def best_static_config(torch, M, N, K, a, b, c, want):
    """The fastest correct config of CONFIGS for this shape (one interleaved sweep)."""
    fns = {}
    by_name = {}
    for config in CONFIGS:
        bm, bn, bk, st, th, panel = config[:6]
        by_name[config_name(config)] = config
        try:
            k = tilers.compile(
                kernels.matmul(M, N, K, bm, bn, bk, st, th, panel=panel, **policy_of(config)),
                **options_of(config),
            )
            k(a, b, c)
            torch.cuda.synchronize()
            if ((c.float() - want).abs().max() / (want.abs().max() + 1)).item() > 1e-2:
                continue
            # keyed by name: a config's options are a dict (unhashable)
            fns[config_name(config)] = bind(k, a, b, c)
        except Exception as e:  # a config that does not compile or run is skipped
            print(f"config {config} failed: {type(e).__name__}: {str(e)[:200]}")
    t = interleaved(fns, repeats=5, iters=5 if M * N * K > 2**33 else 20)
    return by_name[min(t, key=t.get)]


def dynamic_rows():
    """Static vs T.dynamic("M") GEMM at the static kernel's best config, interleaved."""
    import statistics

    import tilers.language as T
    import torch

    rows = []
    for M, N, K in DYNAMIC_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        want = a.float() @ b.float()
        config = best_static_config(torch, M, N, K, a, b, c, want)
        bm, bn, bk, st, th, panel = config[:6]
        static = tilers.compile(
                kernels.matmul(M, N, K, bm, bn, bk, st, th, panel=panel, **policy_of(config)),
                **options_of(config),
            )
        dynamic = tilers.compile(
            kernels.matmul(T.dynamic("M"), N, K, bm, bn, bk, st, th, panel=panel, **policy_of(config))
        )
        cd = torch.empty_like(c)
        dynamic(a, b, cd)
        torch.cuda.synchronize()
        err = ((cd.float() - want).abs().max() / (want.abs().max() + 1)).item()
        assert err < 1e-2, f"dynamic kernel wrong at M={M}: {err}"
        fns = {
            "static": bind(static, a, b, c),
            "dynamic": bind(dynamic, a, b, cd),
            "cublas": lambda a=a, b=b: torch.matmul(a, b),
        }
        iters = 5 if M * N * K > 2**33 else 20
        rounds = [interleaved(fns, repeats=7, iters=iters) for _ in range(DYNAMIC_ROUNDS)]
        ratios = [r["static"] / r["dynamic"] for r in rounds]
        flops = 2 * M * N * K
        med = {name: statistics.median(r[name] for r in rounds) for name in fns}
        row = {
            "dtype": "float16",
            "shape": f"{M}x{N}x{K}",
            "B": "NN",
            "config": f"{bm}x{bn}x{bk} s{st} t{th}" + (f" p{panel}" if panel else ""),
            "static TFLOPs": flops / med["static"] / 1e9,
            "dynamic TFLOPs": flops / med["dynamic"] / 1e9,
            "cublas TFLOPs": flops / med["cublas"] / 1e9,
            "dynamic vs static": statistics.median(ratios),
            "spread": f"{min(ratios):.3f}-{max(ratios):.3f}",
            "rounds": DYNAMIC_ROUNDS,
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def main():
    import statistics

    import torch

    mode = os.environ.get("GEMM_DYNAMIC", "")
    if mode == "only":
        write_results("gemm-dynamic", dynamic_rows())
        return
    rows = []
    tri = triton_matmul()
    dtypes = os.environ.get("GEMM_DTYPES", "float16,bfloat16").split(",")
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for M, N, K in SHAPES:
            for layout in ("NN", "TN"):
                trans_B = layout == "TN"
                a = torch.randn(M, K, device="cuda", dtype=tdt)
                b = torch.randn((N, K) if trans_B else (K, N), device="cuda", dtype=tdt)
                b_kn = b.T if trans_B else b
                c = torch.empty(M, N, device="cuda", dtype=tdt)
                want = a.float() @ b_kn.float()
                fns = {}
                for config in CONFIGS:
                    bm, bn, bk, st, th, panel = config[:6]
                    name = config_name(config)
                    try:
                        k = tilers.compile(
                            kernels.matmul(
                                M,
                                N,
                                K,
                                bm,
                                bn,
                                bk,
                                st,
                                th,
                                dtype=dtype,
                                trans_B=trans_B,
                                panel=panel,
                                **policy_of(config),
                            ),
                            **options_of(config),
                        )
                        k(a, b, c)
                        torch.cuda.synchronize()
                        err = ((c.float() - want).abs().max() / (want.abs().max() + 1)).item()
                        if err > 1e-2:
                            print(f"config {name} wrong: {err}")
                            continue
                        fns[f"tilers {name}"] = bind(k, a, b, c)
                    except Exception as e:  # a config that does not compile or run is skipped
                        print(f"config {name} failed: {type(e).__name__}: {str(e)[:200]}")
                iters = 5 if M * N * K > 2**33 else 20
                # tune: one interleaved sweep over the configs picks the fastest
                t = interleaved(fns, repeats=3, iters=iters)
                # then the three fastest again, longer: one short sweep's order is within noise
                top = sorted(t, key=t.get)[:3]
                t = interleaved({name: fns[name] for name in top}, repeats=9, iters=iters)
                best_name = min(t, key=t.get)
                # re-time the chosen config beside the references, ROUNDS rounds
                chosen = {"tilers": fns[best_name], "cublas": lambda a=a, b_kn=b_kn: torch.matmul(a, b_kn)}
                if tri is not None:
                    ct = torch.empty_like(c)
                    chosen["triton"] = lambda a=a, b_kn=b_kn, ct=ct: tri(a, b_kn, ct)
                rounds = [interleaved(chosen, repeats=7, iters=iters) for _ in range(ROUNDS)]
                med = {name: statistics.median(r[name] for r in rounds) for name in chosen}
                ratios = [r["cublas"] / r["tilers"] for r in rounds]
                flops = 2 * M * N * K
                row = {
                    "dtype": dtype,
                    "shape": f"{M}x{N}x{K}",
                    "B": layout,
                    "tilers": best_name,
                    "tilers TFLOPs": flops / med["tilers"] / 1e9,
                    "cublas TFLOPs": flops / med["cublas"] / 1e9,
                    "vs cublas": statistics.median(ratios),
                    "spread": f"{min(ratios):.3f}-{max(ratios):.3f}",
                    "rounds": ROUNDS,
                }
                if "triton" in chosen:
                    row["triton TFLOPs"] = flops / med["triton"] / 1e9
                    row["vs triton"] = statistics.median(r["triton"] / r["tilers"] for r in rounds)
                # the bar: the best reference of each round (the faster of cuBLAS and Triton)
                refs = [name for name in chosen if name != "tilers"]
                best = [min(r[name] for name in refs) / r["tilers"] for r in rounds]
                row["vs best"] = statistics.median(best)
                row["best spread"] = f"{min(best):.3f}-{max(best):.3f}"
                rows.append(row)
                print(row, flush=True)
    write_results("gemm", rows)
    if mode:
        write_results("gemm-dynamic", dynamic_rows())


if __name__ == "__main__":
    main()
