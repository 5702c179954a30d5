"""Memory-bound kernels on the GPU: tilers' add and softmax beside torch's and a device-to-device
copy, at >= 256 MiB per tensor; GB/s and the fraction of the copy's bandwidth, in one run."""

import os
import sys

import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import kernels
from common import interleaved, write_results


def bind(kernel, *args):
    return lambda: kernel(*args)


def main():
    import torch

    rows = []
    # add: 3 tensors of 512 MiB (fp16) / 256 MiB (fp32 at half the elements)
    for dtype, (M, N) in [("float16", (16384, 16384)), ("float32", (8192, 8192))]:
        tdt = getattr(torch, dtype)
        a = torch.randn(M, N, device="cuda", dtype=tdt)
        b = torch.randn(M, N, device="cuda", dtype=tdt)
        c = torch.empty_like(a)
        src = torch.randn(M * N * 3 // 2, device="cuda", dtype=tdt)  # copy moves the same bytes
        dst = torch.empty_like(src)
        configs = {
            f"tilers {bm}x{bn}": kernels.add(M, N, dtype, bm, bn)
            for bm, bn in [(32, 128), (16, 256), (64, 128)]
        }
        fns = {name: bind(tilers.compile(f), a, b, c) for name, f in configs.items()}
        fns["torch.add"] = lambda: torch.add(a, b, out=c)
        fns["copy"] = lambda: dst.copy_(src)
        t = interleaved(fns)
        moved = 3 * a.numel() * a.element_size()
        assert (c == a + b).all()
        best = min((k for k in t if k.startswith("tilers")), key=t.get)
        for name, ms in t.items():
            rows.append(
                {
                    "op": f"add {dtype} {M}x{N}",
                    "impl": name,
                    "ms": ms,
                    "GB/s": moved / ms / 1e6,
                    "vs copy": t["copy"] / ms,
                    "best": name == best,
                }
            )
    # softmax fp32: 256 MiB in, 256 MiB out
    M, N = 16384, 4096
    a = torch.randn(M, N, device="cuda")
    out = torch.empty_like(a)
    src = torch.randn(M * N, device="cuda")
    dst = torch.empty_like(src)
    configs = {
        f"tilers rows={bm} threads={th}": kernels.softmax(M, N, block_M=bm, threads=th)
        for bm, th in [(1, 256), (1, 512), (2, 256), (4, 512)]
    }
    fns = {name: bind(tilers.compile(f), a, out) for name, f in configs.items()}
    fns["torch.softmax"] = lambda: torch._softmax(a, 1, False)
    fns["copy"] = lambda: dst.copy_(src)
    t = interleaved(fns)
    for name in configs:
        fns[name]()
        torch.testing.assert_close(out, torch.softmax(a, 1), rtol=1e-5, atol=1e-6)
    moved = 2 * a.numel() * 4
    best = min((k for k in t if k.startswith("tilers")), key=t.get)
    for name, ms in t.items():
        rows.append(
            {
                "op": f"softmax float32 {M}x{N}",
                "impl": name,
                "ms": ms,
                "GB/s": moved / ms / 1e6,
                "vs copy": t["copy"] / ms,
                "best": name == best,
            }
        )
    write_results("elementwise", rows)


if __name__ == "__main__":
    main()
