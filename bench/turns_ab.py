"""A/B of the two consumer warpgroups' turns (named barriers 5/6, FlashAttention-3's
scheduler barrier) and of the register budgets, on attention kernels: each config as
compiled, with the turns patched out of its CUDA source, and (d=256) with setmaxnreg 40/232
instead of 24/240, interleaved with cuDNN. Since the turns are taken only where the tiles'
trip counts differ (causal, windowed), only those rows have a "noturns" variant now.
Results: bench/results/attention-turns-2026-12-06-h100.json. Needs a GPU."""
import json
import os
import re
import statistics
import sys

sys.path[:0] = [os.path.dirname(__file__), os.path.join(os.path.dirname(__file__), "..", "examples")]
import flash_attention as fa  # noqa: E402
import tilers  # noqa: E402
import torch  # noqa: E402
from common import interleaved  # noqa: E402
from tilers.kernel import JITKernel  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.nn.functional import scaled_dot_product_attention as sdpa  # noqa: E402

TURN = re.compile(r'^\s*asm volatile\("bar\.(sync|arrive) [56], 256;" ::: "memory"\);\n', re.M)
CASES = [((4, 16, 4096, 256, False), [(128, 80, 2, 256, True, "direct"), (128, 80, 2, 256, False, "direct")]),
         ((16, 16, 1024, 128, False), [(128, 128, 3, 256, True, "direct"), (128, 176, 2, 256, True, "direct")]),
         ((8, 32, 4096, 128, True), [(128, 128, 3, 256, True, True)]),
         ((8, 32, 4096, 128, False), [(128, 128, 3, 256, True, "direct")]),
         ((4, 32, 4096, 64, False), [(128, 128, 3, 256, True, "direct")])]
dtype = os.environ.get("AB_DTYPE", "float16")
rows = []
for (b, h, n, d, causal), cfgs in CASES:
    tdt = getattr(torch, dtype)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=tdt) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    want = sdpa(qt, kt, vt, is_causal=causal).transpose(1, 2).float()
    fns = {}
    for bm, bn, st, th, ov, oq in cfgs:
        new = tilers.compile(fa.flash_attention(b, h, n, d, causal, bm, bn, st, th, dtype=dtype, overlap=ov,
                                                o_in_q=oq is True, o_direct=oq == "direct"), fast_math=True)
        src = new.get_kernel_source()
        name = f"{bm}x{bn}s{st}{' ov' if ov else ''}{' od' if oq == 'direct' else ''}"
        variants = [(name, new)]
        patched, count = TURN.subn("", src)
        if count:
            variants.append((name + " noturns", JITKernel(new.name, new.program_json, patched, new.info, new.target, None, fast_math=True)))
        if d == 256 and ov:
            osrc = src.replace("setmaxnreg.dec.sync.aligned.u32 24", "setmaxnreg.dec.sync.aligned.u32 40").replace(
                "setmaxnreg.inc.sync.aligned.u32 240", "setmaxnreg.inc.sync.aligned.u32 232")
            variants.append((name + " noturns 40/232", JITKernel(new.name, new.program_json, TURN.sub("", osrc), new.info, new.target, None, fast_math=True)))
        for vname, kern in variants:
            out = torch.empty_like(q)
            kern(q, k, v, out)
            torch.cuda.synchronize()
            err = ((out.float() - want).abs().max() / want.abs().max()).item()
            if err > 2e-2:
                print("WRONG", vname, err, flush=True)
                continue
            fns[vname] = lambda kern=kern, out=out: kern(q, k, v, out)
    def ref():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(qt, kt, vt, is_causal=causal)
    fns["cudnn"] = ref
    flops = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
    rounds = [interleaved(fns, repeats=5, iters=5) for _ in range(3)]
    row = {"shape": f"{b}x{h}x{n}x{d}" + ("c" if causal else ""), "dtype": dtype}
    for kname in fns:
        r = [x["cudnn"] / x[kname] for x in rounds]
        row[kname] = f"{flops / statistics.median(x[kname] for x in rounds) / 1e9:.0f} TF, {statistics.median(r):.3f}x cudnn [{min(r):.3f},{max(r):.3f}]"
    print(json.dumps(row, indent=1), flush=True)
    rows.append(row)
out = os.environ.get("OUT")
if out:
    json.dump(rows, open(os.path.join(out, f"turns_ab_{dtype}.json"), "w"), indent=1)
