"""Per-call launch overhead: tilers kernels of 3 and 16 tensor arguments beside torch.add, the
same kernels with the Python checks before the native launch (TILERS_FAST_LAUNCH=0), and the
bare native launch, measured interleaved in one run.

Each case is a kernel of one small block, so a call costs what the CPU spends issuing it:
the time per call is the CPU time of `CALLS` back-to-back calls issued while the GPU is
kept busy (median over interleaved repeats), beside probes of the torch attributes a
launch reads.
Targets (issue 7): tilers with 3 tensors <= 0.5x torch.add; 16 arguments <= 3 arguments + 2 us.
The eager style (issue 16) is timed beside the direct call: `eager_add(a, b)` binds
M and N from the tensors, looks up the compiled kernel and allocates the output.
On Hopper (issue 14) a one-block warp-specialized TMA GEMM is timed too: its two tensor maps
cached (the same tensors every call), re-encoded (two sets of tensors alternating, so every
call encodes both maps with cuTensorMapEncodeTiled), and the same GEMM on cp.async
(`tma=False`, no maps).
"""

import os
import statistics
import sys
import time

import tilers
import tilers.language as T
from tilers import _tilers
from tilers.kernel import JITKernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import kernels
from common import write_results

CALLS = 200
REPEATS = 25
SLEEP_CYCLES = 40_000_000  # ~20 ms of GPU sleep: longer than any batch of CALLS launches
M, N = 8, 128  # one block of the add kernel


def sum16(M, N, dtype="float16"):
    """Out = A0 + ... + A14: a kernel of 16 tensor parameters, one block."""

    @T.prim_func
    def sum16(
        A0: T.Tensor((M, N), dtype), A1: T.Tensor((M, N), dtype), A2: T.Tensor((M, N), dtype),
        A3: T.Tensor((M, N), dtype), A4: T.Tensor((M, N), dtype), A5: T.Tensor((M, N), dtype),
        A6: T.Tensor((M, N), dtype), A7: T.Tensor((M, N), dtype), A8: T.Tensor((M, N), dtype),
        A9: T.Tensor((M, N), dtype), A10: T.Tensor((M, N), dtype), A11: T.Tensor((M, N), dtype),
        A12: T.Tensor((M, N), dtype), A13: T.Tensor((M, N), dtype), A14: T.Tensor((M, N), dtype),
        Out: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(M, N):
                Out[i, j] = (
                    A0[i, j] + A1[i, j] + A2[i, j] + A3[i, j] + A4[i, j] + A5[i, j] + A6[i, j]
                    + A7[i, j] + A8[i, j] + A9[i, j] + A10[i, j] + A11[i, j] + A12[i, j]
                    + A13[i, j] + A14[i, j]
                )

    return sum16


@tilers.jit
def eager_add(A, B, block_M=8, block_N=128):
    """The add kernel in TileLang's eager style: a call binds M, N from the tensors (the
    call's key), allocates C and returns it."""
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float16)
    B: T.Tensor((M, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = (
                A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
            )
    return C


def cpu_interleaved(fns, calls=CALLS, repeats=REPEATS, warmup=20):
    """Median microseconds of CPU time per call of each fn, measured A, B, C, A, B, C, ...

    Before each batch the GPU is given a long sleep kernel, so the batch's launches queue
    behind it and the wall-clock time of the batch is what the CPU spends issuing them,
    however fast the GPU would run them.
    """
    import torch

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            torch.cuda._sleep(SLEEP_CYCLES)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def getter_costs(tensor, loops=20000):
    """Nanoseconds per call of the torch attributes a launch reads (with the loop's cost)."""
    import torch

    stream_of = torch._C._cuda_getCurrentRawStream
    probes = {
        "isinstance(t, torch.Tensor)": lambda: isinstance(tensor, torch.Tensor),
        "t.is_cuda": lambda: tensor.is_cuda,
        "t.dtype": lambda: tensor.dtype,
        "t.shape": lambda: tensor.shape,
        "t.stride()": lambda: tensor.stride(),
        "t.is_contiguous()": lambda: tensor.is_contiguous(),
        "t.data_ptr()": lambda: tensor.data_ptr(),
        "t.get_device()": lambda: tensor.get_device(),
        "raw stream getter": lambda: stream_of(0),
        "empty lambda (loop cost)": lambda: None,
    }
    costs = {}
    for name, probe in probes.items():
        start = time.perf_counter()
        for _ in range(loops):
            probe()
        costs[name] = (time.perf_counter() - start) / loops * 1e9
    return costs


def python_checks_kernel(kernel):
    """A copy of `kernel` whose every call runs the Python checks before the native launch
    (what TILERS_FAST_LAUNCH=0 does)."""
    copy = JITKernel(kernel.name, kernel.program_json, kernel.source, kernel.info,
                     kernel.target, kernel.out_idx)
    copy._cubin = kernel.cubin
    copy._prepare()
    copy._entry = copy._checked_call
    return copy


def bare_launch(kernel, args, kinds):
    """The native launch alone: pointers read by the extension, no argument checks."""
    import torch

    loaded = kernel._loaded[0][0]  # the kernel's first (and only) function
    grid = tuple(dim["const"] for dim in kernel.info["grid"])  # a constant grid
    block = tuple(kernel.info["block"])
    stream = torch.cuda.current_stream().cuda_stream
    values = tuple(args)
    launch = _tilers.launch

    def fn():
        launch(loaded.function_handle, loaded.context_handle, grid, block,
               loaded.shared_bytes, stream, values, kinds)

    return fn


def main():
    import torch

    torch.cuda.init()
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = torch.randn(M, N, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    add = tilers.compile(kernels.add(M, N, "float16", M, N, 128))
    add_out = tilers.compile(kernels.add(M, N, "float16", M, N, 128), out_idx=[2])
    inputs16 = [torch.randn(M, N, device="cuda", dtype=torch.float16) for _ in range(15)]
    out16 = torch.empty_like(a)
    args16 = inputs16 + [out16]
    s16 = tilers.compile(sum16(M, N))

    # correctness first: each path computes the right thing
    add(a, b, c)
    assert torch.equal(c, a + b)
    assert torch.equal(add_out(a, b), a + b)
    assert torch.equal(eager_add(a, b), a + b)
    s16(*args16)
    torch.testing.assert_close(out16, sum(inputs16[1:], inputs16[0]), rtol=1e-2, atol=1e-2)
    # the calls above prepared the kernels: every call is their native launcher
    for kernel in (add, add_out, s16):
        assert kernel._entry is kernel._launcher, kernel
    add(a, b, c)
    assert torch.equal(c, a + b) and torch.equal(add_out(a, b), a + b)
    out16.zero_()
    s16(*args16)
    torch.testing.assert_close(out16, sum(inputs16[1:], inputs16[0]), rtol=1e-2, atol=1e-2)
    checked_add = python_checks_kernel(add)
    checked_s16 = python_checks_kernel(s16)
    c.zero_()
    checked_add(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)
    checked_s16(*args16)

    # the same kernel as a torch operator (tilers.torch.custom_op): the dispatcher's cost
    import tilers.torch as tilers_torch

    add_op = tilers_torch.custom_op(add_out, "tilers_bench::add")
    assert torch.equal(add_op(a, b), a + b)
    pointers = (a.data_ptr(), b.data_ptr(), c.data_ptr())
    fns = {
        "tilers add(a, b) as a torch op (custom_op)": lambda: add_op(a, b),
        "torch.add(a, b, out=c)": lambda: torch.add(a, b, out=c),
        "torch.add(a, b)": lambda: torch.add(a, b),
        "tilers add(a, b, c)": lambda: add(a, b, c),
        "tilers add(a, b) out_idx": lambda: add_out(a, b),
        "tilers eager add(a, b) (binds M, N; allocates C)": lambda: eager_add(a, b),
        "tilers sum16 (16 tensors)": lambda: s16(*args16),
        "tilers add(a, b, c), Python checks": lambda: checked_add(a, b, c),
        "tilers sum16, Python checks": lambda: checked_s16(*args16),
        "native launch, 3 pointers as ints": bare_launch(add, pointers, b"PPP"),
        "native launch, 3 tensors": bare_launch(add, (a, b, c), b"TTT"),
        "native launch, 16 tensors": bare_launch(s16, args16, b"T" * 16),
    }
    if torch.cuda.get_device_capability() >= (9, 0):
        gemm = kernels.matmul(128, 128, 128, 128, 128, 64, 3, 128)
        tma = tilers.compile(gemm, out_idx=[2])
        plain = tilers.compile(gemm, out_idx=[2], tma=False)
        assert tma.info["tensor_maps"] and not plain.info["tensor_maps"]
        sets = [
            (torch.randn(128, 128, device="cuda").half(), torch.randn(128, 128, device="cuda").half())
            for _ in range(2)
        ]
        for x, y in sets:
            want = x.float() @ y.float()
            torch.testing.assert_close(tma(x, y).float(), want, rtol=2e-2, atol=2e-1)
            torch.testing.assert_close(plain(x, y).float(), want, rtol=2e-2, atol=2e-1)
        flip = [0]

        def alternating():
            flip[0] ^= 1
            return tma(*sets[flip[0]])

        fns["tilers TMA gemm, maps cached"] = lambda: tma(*sets[0])
        fns["tilers TMA gemm, maps re-encoded"] = alternating
        fns["tilers cp.async gemm (tma=False)"] = lambda: plain(*sets[0])
    cpu = cpu_interleaved(fns)
    reference = cpu["torch.add(a, b, out=c)"]
    rows = []
    for name in fns:
        rows.append({
            "impl": name,
            "us/call (CPU)": cpu[name],
            "vs torch.add(out=)": cpu[name] / reference,
        })
    for name, ns in getter_costs(a).items():
        rows.append({"impl": f"probe: {name}", "us/call (CPU)": ns / 1e3, "vs torch.add(out=)": "-"})
    ratio = cpu["tilers add(a, b, c)"] / reference
    growth = cpu["tilers sum16 (16 tensors)"] - cpu["tilers add(a, b, c)"]
    summary = {
        "tilers 3 tensors / torch.add": ratio,
        "tilers 16 - 3 tensors (us)": growth,
        "native launch floor / torch.add": cpu["native launch, 3 pointers as ints"] / reference,
        "Python checks, 3 tensors / torch.add": cpu["tilers add(a, b, c), Python checks"] / reference,
        "torch op / direct call (out_idx)": cpu["tilers add(a, b) as a torch op (custom_op)"]
        / cpu["tilers add(a, b) out_idx"],
        "Python checks, 16 - 3 tensors (us)": (
            cpu["tilers sum16, Python checks"] - cpu["tilers add(a, b, c), Python checks"]
        ),
        "eager call - out_idx call (us)": (
            cpu["tilers eager add(a, b) (binds M, N; allocates C)"] - cpu["tilers add(a, b) out_idx"]
        ),
        "target 3 tensors <= 0.5x torch.add": ratio <= 0.5,
        "target growth <= 2 us": growth <= 2.0,
        **({
            "TMA gemm cached / cp.async gemm": cpu["tilers TMA gemm, maps cached"]
            / cpu["tilers cp.async gemm (tma=False)"],
            "TMA map encoding, two maps (us)": cpu["tilers TMA gemm, maps re-encoded"]
            - cpu["tilers TMA gemm, maps cached"],
        } if "tilers TMA gemm, maps cached" in cpu else {}),
        "calls per sample": CALLS,
        "repeats": REPEATS,
    }
    write_results("launch", rows, extra={"summary": summary})
    for key, value in summary.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
