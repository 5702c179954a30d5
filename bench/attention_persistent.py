"""Persistent or not, for attention kernels whose query tiles do different work (a causal mask,
a sliding window): each config of examples/flash_attention.py compiled twice, persistent=True
(blocks walk pairs of query tiles x and gx-1-x, WarpRoles::fold) and persistent=False (one
block per tile, the hardware's block scheduler), timed interleaved with SDPA's cuDNN back end
(A, B, cuDNN, A, B, …) over ROUNDS rounds. Rows: median TFLOP/s of each, the median of the
per-round ratios persistent / not and their spread. PERS_SHAPES="4x32x4096x64c,..." (c: causal,
wN: a window of N keys to the left) and PERS_DTYPES pick rows."""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402
import tilers  # noqa: E402
from common import interleaved, write_results  # noqa: E402

ROUNDS = int(os.environ.get("PERS_ROUNDS", "3"))
CONFIGS = {  # block_M, block_N, stages, threads, overlap (all o_direct: Q loaded by the producer)
    64: [(192, 128, 2, 384, False), (128, 128, 3, 256, True)],
    128: [(128, 128, 3, 256, True), (128, 128, 3, 256, False)],
    256: [(128, 80, 2, 256, True)],
}
SHAPES = os.environ.get("PERS_SHAPES", "4x32x4096x64c,8x32x4096x128c,16x16x1024x128c,4x32x4096x64w1024")
DTYPES = os.environ.get("PERS_DTYPES", "float16,bfloat16").split(",")


def parse(spec):
    window = (-1, -1)
    causal = spec.endswith("c")
    if "w" in spec:
        spec, left = spec.split("w")
        window = (int(left), 0)
    b, h, n, d = (int(x) for x in spec.rstrip("c").split("x"))
    return b, h, n, d, causal, window


def main():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    rows = []
    for spec in SHAPES.split(","):
        b, h, n, d, causal, window = parse(spec)
        for dtype in DTYPES:
            tdt = getattr(torch, dtype)
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=tdt) for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            mask = None
            if window != (-1, -1):  # keys j with i - left <= j <= i
                i = torch.arange(n, device="cuda")[:, None]
                j = torch.arange(n, device="cuda")[None, :]
                mask = (j <= i) & (j >= i - window[0])
            want = sdpa(qt, kt, vt, attn_mask=mask, is_causal=causal and mask is None).transpose(1, 2).float()
            if mask is None:
                work = 0.5 if causal else 1.0
            else:
                work = mask.float().mean().item()
            flops = 4 * b * h * n * n * d * work
            for bm, bn, st, th, overlap in CONFIGS[d]:
                fns = {}
                for persistent in (True, False):
                    kern = tilers.compile(fa.flash_attention(b, h, n, d, causal, bm, bn, st, th, dtype=dtype,
                                                             overlap=overlap, window=window, o_direct=True),
                                          out_idx=[3], persistent=persistent, fast_math=True)
                    out = kern(q, k, v)
                    torch.cuda.synchronize()
                    err = ((out.float() - want).abs().max() / want.abs().max()).item()
                    assert err < 2e-2, f"{spec} {dtype} {bm}x{bn} persistent={persistent}: error {err}"
                    fns["persistent" if persistent else "per tile"] = lambda kern=kern: kern(q, k, v)
                if mask is None:
                    def ref():
                        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                            return sdpa(qt, kt, vt, is_causal=causal)
                    fns["cudnn"] = ref
                iters = 5 if flops > 2**37 else 20
                rounds = [interleaved(fns, repeats=5, iters=iters) for _ in range(ROUNDS)]
                ratios = [r["per tile"] / r["persistent"] for r in rounds]
                row = {"shape": spec, "dtype": dtype, "config": f"{bm}x{bn} s{st} t{th}" + (" overlap" if overlap else "")}
                for name in fns:
                    row[f"{name} TFLOPs"] = flops / statistics.median(r[name] for r in rounds) / 1e9
                row["persistent / per tile"] = statistics.median(ratios)
                row["spread"] = f"{min(ratios):.3f}-{max(ratios):.3f}"
                print(row, flush=True)
                rows.append(row)
    write_results("attention-persistent", rows, {"rounds": ROUNDS})


if __name__ == "__main__":
    main()
