"""A/B of two compilers' GEMM kernels in one process: the CUDA an earlier tilers wrote for
a config (a JSON file of sources, `python bench/gemm_ab.py OLD.json`) against what this
tilers writes for the same config, timed interleaved with cuBLAS (A, B, cuBLAS, A, B, …).
Both run through this tilers' launcher with this tilers' KernelInfo (the sources are
checked to need the same shared memory), so the only difference is the code. Rows: the
median of each over 9 rounds, and the new/old ratio."""

import json
import os
import sys

import tilers
from tilers.kernel import JITKernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import kernels  # noqa: E402
from common import interleaved, write_results  # noqa: E402


def main(path):
    import torch

    old = json.load(open(path))
    rows = []
    for key, entry in old.items():
        shape, dtype, layout, tile, stages, threads, panel = key.split()
        M, N, K = (int(v) for v in shape.split("x"))
        bm, bn, bk = (int(v) for v in tile.split("x"))
        st, th, p = int(stages[1:]), int(threads[1:]), int(panel[1:])
        trans_B = layout == "TN"
        new = tilers.compile(kernels.matmul(M, N, K, bm, bn, bk, st, th, dtype=dtype, trans_B=trans_B, panel=p))
        assert new.info["shared_bytes"] == entry["shared_bytes"] and new.info["entry"] == entry["entry"], key
        before = JITKernel(new.name, new.program_json, entry["source"], new.info, new.target, None)
        tdt = getattr(torch, dtype)
        a = torch.randn(M, K, device="cuda", dtype=tdt)
        b = torch.randn((N, K) if trans_B else (K, N), device="cuda", dtype=tdt)
        b_kn = b.T if trans_B else b
        want = a.float() @ b_kn.float()
        outputs = {}
        for name, k in (("old", before), ("new", new)):
            c = torch.empty(M, N, device="cuda", dtype=tdt)
            k(a, b, c)
            torch.cuda.synchronize()
            err = ((c.float() - want).abs().max() / (want.abs().max() + 1)).item()
            assert err < 1e-2, f"{key} {name}: error {err}"
            outputs[name] = c
        t = interleaved(
            {
                "old": lambda: before(a, b, outputs["old"]),
                "new": lambda: new(a, b, outputs["new"]),
                "cublas": lambda: torch.matmul(a, b_kn),
            },
            repeats=9,
            iters=5 if M * N * K > 2**33 else 20,
        )
        flops = 2 * M * N * K
        rows.append({
            "case": key,
            "old TFLOPs": flops / t["old"] / 1e9,
            "new TFLOPs": flops / t["new"] / 1e9,
            "cublas TFLOPs": flops / t["cublas"] / 1e9,
            "new / old": t["old"] / t["new"],
            "new vs cublas": t["cublas"] / t["new"],
        })
    write_results("gemm-ab", rows, {"old_sources": os.path.basename(path)})


if __name__ == "__main__":
    main(sys.argv[1])
