#!/usr/bin/env python3
"""On the GPU machine: how many thread-block clusters of the one-kernel decode attention
(examples/flash_decoding.py, combine="cluster") run at once, per split count, pipeline depth
and KV tile — cuOccupancyMaxActiveClusters on the loaded function. Batch 1 with 8 KV heads
needs 8 clusters at once (one per KV head); fewer means a second wave.

  PYTHONPATH=<installed wheel> python3 scripts/cluster-occupancy.py"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_decoding as fd  # noqa: E402
import tilers  # noqa: E402


class LaunchConfig(ctypes.Structure):
    # CUlaunchConfig: grid, block, dynamic shared memory, stream, attributes
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


def main():
    import torch

    torch.zeros(1, device="cuda")  # the device's primary context, current on this thread
    cuda = ctypes.CDLL("libcuda.so.1")
    for splits in (8, 16):
        for stages in (2, 3, 4):
            for block_N in (64, 128):
                f = fd.flash_decode.prim_func(1, 32, 8, 128, 8192, num_split=splits, combine="cluster",
                                              num_stages=stages, block_N=block_N)
                try:
                    kernel = tilers.compile(f, out_idx=[-1])
                except tilers.TileError as e:  # too much shared memory for a block
                    print(f"splits {splits} stages {stages} block_N {block_N}: {str(e).splitlines()[0][:100]}")
                    continue
                launch = kernel.launches[0]
                function = kernel._load(0)[0].function_handle
                config = LaunchConfig((ctypes.c_uint * 3)(splits, 1, 1), (ctypes.c_uint * 3)(*launch["block"]),
                                      launch["shared_bytes"], None, None, 0)
                clusters = ctypes.c_int(0)
                status = cuda.cuOccupancyMaxActiveClusters(ctypes.byref(clusters), ctypes.c_void_p(function),
                                                           ctypes.byref(config))
                print(f"splits {splits} stages {stages} block_N {block_N}: {launch['shared_bytes']} bytes of shared "
                      f"memory, {clusters.value} clusters at once (status {status})")


if __name__ == "__main__":
    main()
