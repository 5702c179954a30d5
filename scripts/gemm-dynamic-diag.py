"""A static, a symbolic and a 128-aligned symbolic 4096^3 GEMM timed interleaved on the GPU,
with their CUDA, cubin and SASS written to $OUT (GPU only)."""

import os
import statistics
import subprocess
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "bench")
import kernels  # noqa: E402
import tilers  # noqa: E402
import tilers.language as T  # noqa: E402
import torch  # noqa: E402
from common import interleaved  # noqa: E402

M = N = K = 4096
cfg = (128, 128, 64, 2, 128, 8)
bm, bn, bk, st, th, p = cfg
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
ks = {
  "static": tilers.compile(kernels.matmul(M, N, K, bm, bn, bk, st, th, panel=p)),
  "dynamic": tilers.compile(kernels.matmul(T.dynamic("M"), N, K, bm, bn, bk, st, th, panel=p)),
  "aligned128": tilers.compile(kernels.matmul(T.dynamic("M", multiple_of=128), N, K, bm, bn, bk, st, th, panel=p)),
}
cs = {n: torch.empty(M, N, device="cuda", dtype=torch.float16) for n in ks}
fns = {n: (lambda k=k, c=cs[n]: k(a, b, c)) for n, k in ks.items()}
rounds = [interleaved(fns, repeats=7, iters=5) for _ in range(4)]
for n in ks:
    ms = statistics.median(r[n] for r in rounds)
    print(n, f"{ms:.4f} ms", f"{2*M*N*K/ms/1e9:.1f} TFLOPs", "ratio vs static", f"{statistics.median(r['static']/r[n] for r in rounds):.3f}")
out = os.environ.get("OUT", "/tmp")
for n, k in ks.items():
    path = os.path.join(out, f"{n}.cubin")
    open(path, "wb").write(k.cubin)
    open(os.path.join(out, f"{n}.cu"), "w").write(k.source)
    sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    open(os.path.join(out, f"{n}.sass"), "w").write(sass)
    lines = [l for l in sass.split("\n") if "/*" in l and ";" in l]
    print(n, "SASS instructions", len(lines), "regs?", [l for l in sass.split("\n") if "REG" in l][:1])
