#!/usr/bin/env python3
"""On the GPU machine: where the one-kernel decode attention (examples/flash_decoding.py,
combine="cluster") loses to the two-kernel one. With heads_kv 1 the grid is one cluster (no
question of how clusters are placed on the GPCs); short and long KV separate a fixed cost
per launch from a cost per key. Back-to-back launches timed with CUDA events on L2-resident
buffers: the numbers compare the two combines with each other, not with memory speed.

  PYTHONPATH=<installed wheel> python3 scripts/cluster-combine-probe.py"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_decoding as fd  # noqa: E402


def per_call_us(f, args, n=200):
    for _ in range(5):
        f(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        f(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n * 1000


def main():
    for heads_kv, keys in ((1, 1024), (1, 4096), (1, 32768), (8, 1024), (8, 8192)):
        heads, dim = 4 * heads_kv, 128
        q = torch.randn(1, heads, dim, device="cuda", dtype=torch.float16)
        k = torch.randn(1, keys, heads_kv, dim, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        lengths = torch.tensor([keys], dtype=torch.int32, device="cuda")
        row = []
        for splits, stages in ((16, 2), (16, 3), (8, 2), (2, 2)):
            for combine in ("kernel", "cluster"):
                f = fd.flash_decode(1, heads, heads_kv, dim, keys, num_split=splits, block_H=16, block_N=64,
                                    num_stages=stages, combine=combine)
                row.append(f"{splits}/{stages}/{combine[:3]} {per_call_us(f, (q, k, v, lengths)):.1f}")
        print(f"heads_kv {heads_kv} keys {keys}: " + ", ".join(row), flush=True)


if __name__ == "__main__":
    main()
