"""Where batch-1 decode attention's time goes (issue 18): for each config of
examples/flash_decoding.py at one shape, the call's time (a CUDA graph of 20 calls over
copies of the KV cache together 3x the L2, as bench/decode.py times), the duration of each of
its kernels (torch's profiler: split kernel and combine apart), and beside them a kernel that
only streams the same K/V tiles through the same pipeline (grid, tiles, stages) with next to
no arithmetic: the floor of this decomposition's loads — its trip count a constant, and
read from cache_seqlens as the split kernel's is (its first copies then wait for that load).
GPU only.

    python scripts/decode-attn-probe.py                     # batch 1, 8k keys
    PROBE_S=32768 PROBE_CONFIGS='[{"num_split": 16, "block_N": 64, "num_stages": 3}]' python ...
"""

import concurrent.futures
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
# PROBE_EXAMPLES: another examples/ folder (an older flash_decoding.py, to time before and after in one run)
sys.path.insert(0, os.environ.get("PROBE_EXAMPLES", os.path.join(HERE, "..", "examples")))

import decode as bench  # noqa: E402
import flash_decoding  # noqa: E402
import tilers  # noqa: E402
import tilers.language as T  # noqa: E402

B = int(os.environ.get("PROBE_B", "1"))
S = int(os.environ.get("PROBE_S", "8192"))
HEADS, HEADS_KV, DIM = 32, 8, 128
# bytes in flight per block (stages x tile) against the cross-warp work per tile (threads)
DEFAULT = [
    {"num_split": sp, "block_N": bn, "num_stages": st, "threads": th}
    for th, splits in ((128, (16, 32)), (64, (16, 32)), (32, (64,)))
    for sp in splits
    for bn, st in ((32, 4), (32, 8), (32, 12), (64, 3), (64, 4), (64, 6), (128, 2), (128, 3))
    if S // sp >= bn
]
CONFIGS = json.loads(os.environ["PROBE_CONFIGS"]) if "PROBE_CONFIGS" in os.environ else DEFAULT


def stream_kernel(num_split, block_N, num_stages, threads, from_lengths=False, dtype="float16"):
    """The split kernel's loads alone: block (hk, b, s) streams its keys' K and V tiles into
    shared memory through a pipeline of num_stages and adds one row of each into its output.
    from_lengths: the trip count from cache_seqlens[b], as the split kernel's (its first
    copies then wait for that load)."""
    split_len = ((S + num_split - 1) // num_split + block_N - 1) // block_N * block_N

    def body(K, V, length, out):
        with T.Kernel(HEADS_KV, B, num_split, threads=threads) as (hk, b, s):
            K_s = T.alloc_shared((block_N, DIM), dtype)
            V_s = T.alloc_shared((block_N, DIM), dtype)
            acc = T.alloc_fragment((DIM,), "float32")
            T.fill(acc, 0)
            start = s * split_len
            stop = S if length is None else length[b]
            tiles = T.ceildiv(T.max(T.min(start + split_len, stop) - start, 0), block_N)
            for k in T.Pipelined(tiles, num_stages=num_stages):
                T.copy(K[b, start + k * block_N:start + (k + 1) * block_N, hk, :], K_s)
                T.copy(V[b, start + k * block_N:start + (k + 1) * block_N, hk, :], V_s)
                for d in T.Parallel(DIM):
                    acc[d] += T.cast(K_s[k % block_N, d], "float32") + T.cast(V_s[0, d], "float32")
            for d in T.Parallel(DIM):
                out[b, hk, s, d] = acc[d]

    if from_lengths:

        @T.prim_func
        def stream(K: T.Tensor((B, S, HEADS_KV, DIM), dtype), V: T.Tensor((B, S, HEADS_KV, DIM), dtype),
                   cache_seqlens: T.Tensor((B,), "int32"), out: T.Tensor((B, HEADS_KV, num_split, DIM), "float32")):
            body(K, V, cache_seqlens, out)

        return tilers.compile(stream)

    @T.prim_func
    def stream(K: T.Tensor((B, S, HEADS_KV, DIM), dtype), V: T.Tensor((B, S, HEADS_KV, DIM), dtype),
               out: T.Tensor((B, HEADS_KV, num_split, DIM), "float32")):
        body(K, V, None, out)

    return tilers.compile(stream)


def kernel_us(fn, calls=20):
    """{kernel name: mean µs} over `calls` eager calls (torch's profiler)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    found = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            found.setdefault(e.name, []).append(e.time_range.elapsed_us())
    return {name: round(statistics.mean(ts), 2) for name, ts in found.items()}


def main():
    import torch

    kv_bytes = 2 * B * S * HEADS_KV * DIM * 2
    sets, next_set = bench.rotating(lambda: (
        torch.randn(B, HEADS, DIM, device="cuda", dtype=torch.float16),
        torch.randn(B, S, HEADS_KV, DIM, device="cuda", dtype=torch.float16),
        torch.randn(B, S, HEADS_KV, DIM, device="cuda", dtype=torch.float16)), kv_bytes)
    seqlens = torch.full((B,), S, device="cuda", dtype=torch.int32)
    bandwidth = bench.copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()} B={B} S={S}: {kv_bytes} bytes of KV; copy bandwidth "
          f"{bandwidth / 1e12:.2f} TB/s: {kv_bytes / bandwidth * 1e6:.2f} us at that rate", flush=True)
    q0, k0, v0 = sets[0]
    want = torch.from_numpy(flash_decoding.reference(
        q0.cpu().numpy(), k0.cpu().numpy(), v0.cpu().numpy(), seqlens.cpu().numpy())).float().cuda()

    def build(make):
        try:
            kernel = make()
            _ = kernel.cubin  # NVRTC, on the pool
            return kernel
        except Exception as err:
            return str(err).splitlines()[0][:120]

    keys = sorted({(c["num_split"], c["block_N"], c["num_stages"], c.get("threads", 128)) for c in CONFIGS})
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        kernels = list(pool.map(lambda cfg: build(lambda: flash_decoding.flash_decode(
            B, HEADS, HEADS_KV, DIM, S, **{"block_H": 16, **cfg})), CONFIGS))
        stream_kernels = dict(zip(keys, pool.map(lambda key: build(lambda: stream_kernel(*key)), keys)))
        stream_kernels.update(zip([(*key, "lengths") for key in keys], pool.map(
            lambda key: build(lambda: stream_kernel(*key, from_lengths=True)), keys)))
    kernels = [bench.WithArrivals(k, torch.zeros(B, HEADS_KV, device="cuda", dtype=torch.int32))
               if cfg.get("combine") == "last" and not isinstance(k, str) else k for cfg, k in zip(CONFIGS, kernels)]
    streams = {}
    for cfg, kernel in zip(CONFIGS, kernels):
        key = (cfg["num_split"], cfg["block_N"], cfg["num_stages"], cfg.get("threads", 128))
        line = {"config": cfg}
        try:
            if isinstance(kernel, str):
                raise RuntimeError(kernel)
            got = kernel(q0, k0, v0, seqlens).float()
            if not torch.allclose(got, want, rtol=1e-2, atol=1e-2):
                line["error"] = "WRONG"
            else:
                line["us"] = round(bench.timer(lambda: kernel(*next_set(), seqlens))(), 2)
                line["kernels_us"] = kernel_us(lambda: kernel(*next_set(), seqlens))
        except Exception as err:
            line["error"] = str(err).splitlines()[0][:120]
        for which in (key, (*key, "lengths")):
            if which in streams:
                continue
            try:
                sk = stream_kernels[which]
                if isinstance(sk, str):
                    raise RuntimeError(sk)
                out = torch.empty(B, HEADS_KV, cfg["num_split"], DIM, device="cuda")
                extra = (seqlens,) if which[-1] == "lengths" else ()
                streams[which] = round(bench.timer(lambda: sk(*next_set()[1:], *extra, out))(), 2)
            except Exception as err:
                streams[which] = str(err).splitlines()[0][:120]
        line["stream_us"] = streams[key]
        line["stream_from_lengths_us"] = streams[(*key, "lengths")]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
