"""Explicit warp specialization (TileLang's expert controls) on the CPU: warp-role regions
(`T.ws`), the kernel's own mbarriers (`T.alloc_barrier`, `T.barrier_wait`,
`T.barrier_arrive`), TMA copies the kernel places (`T.tma_copy`), register budgets
(`T.set_max_nreg`, `T.annotate_*_reg_*`). Kernels run on the interpreter against numpy,
pass by pass on the warp model of the lowered code (mbarrier phases, TMA, named barriers),
and compile with NVRTC for sm_90a; misuse is an error at the user's line or a deadlock
report naming the barrier."""

import warnings

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


def producer_consumer(M, N, K, bM=128, bN=128, bK=64, dtype="float16", producer_first=True,
                      wait=True, arrive=True):
    """Warpgroup 0 loads A and B tiles by TMA, warpgroup 1 multiplies them (one buffer)."""

    @T.prim_func
    def pc(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            loaded = T.alloc_barrier(128)
            used = T.alloc_barrier(128)
            with T.ws(1):
                T.clear(acc)
            for k in T.serial(T.ceildiv(K, bK)):
                with T.ws(0):
                    T.barrier_wait(used, (k + 1) % 2)
                    T.tma_copy(A[by * bM, k * bK], A_s, barrier=loaded)
                    T.tma_copy(B[k * bK, bx * bN], B_s, barrier=loaded)
                    if arrive:
                        T.barrier_arrive(loaded)
                with T.ws(1):
                    if wait:
                        T.barrier_wait(loaded, k % 2)
                    T.gemm(A_s, B_s, acc)
                    T.barrier_arrive(used)
            with T.ws(1):
                T.copy(acc, C[by * bM, bx * bN])

    return pc


def two_slot_ring(M, N, K, bM=128, bN=128, bK=64, dtype="float16"):
    """A ring of two tile pairs on barrier arrays (full[s], empty[s])."""

    @T.prim_func
    def ring(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A0 = T.alloc_shared((bM, bK), dtype)
            B0 = T.alloc_shared((bK, bN), dtype)
            A1 = T.alloc_shared((bM, bK), dtype)
            B1 = T.alloc_shared((bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            full = T.alloc_barrier([128, 128])
            empty = T.alloc_barrier([128] * 2)
            with T.ws(1):
                T.clear(acc)
            for k2 in T.serial(T.ceildiv(K, 2 * bK)):
                for s, (As, Bs) in enumerate([(A0, B0), (A1, B1)]):
                    k = 2 * k2 + s
                    with T.ws(0):
                        T.mbarrier_wait_parity(empty[s], (k2 + 1) % 2)
                        T.tma_copy(A[by * bM, k * bK], As, barrier=full[s])
                        T.tma_copy(B[k * bK, bx * bN], Bs, barrier=full[s])
                        T.mbarrier_arrive(full[s])
                    with T.ws(1):
                        T.mbarrier_wait_parity(full[s], k2 % 2)
                        T.gemm(As, Bs, acc)
                        T.mbarrier_arrive(empty[s])
            with T.ws(1):
                T.copy(acc, C[by * bM, bx * bN])

    return ring


def split_columns(M, N, K, bM=128, bN=128, bK=64, dtype="float16"):
    """Two warpgroups, each computing half of the tile's columns; A shared by both."""
    half = bN // 2

    @T.prim_func
    def split(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B0 = T.alloc_shared((bK, half), dtype)
            B1 = T.alloc_shared((bK, half), dtype)
            C0 = T.alloc_fragment((bM, half), "float32")
            C1 = T.alloc_fragment((bM, half), "float32")
            with T.ws(0):
                T.clear(C0)
            with T.ws(1):
                T.clear(C1)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=0):
                T.copy(A[by * bM, k * bK], A_s)
                with T.ws(0):
                    T.copy(B[k * bK, bx * bN], B0)
                    T.gemm(A_s, B0, C0)
                with T.ws(1):
                    T.copy(B[k * bK, bx * bN + half], B1)
                    T.gemm(A_s, B1, C1)
            with T.ws(0):
                T.copy(C0, C[by * bM, bx * bN])
            with T.ws(1):
                T.copy(C1, C[by * bM, bx * bN + half])

    return split


@tilers.jit
def eager_producer_consumer(A, B, bM=128, bN=128, bK=64, dtype=T.float16):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
        A_s = T.alloc_shared((bM, bK), dtype)
        B_s = T.alloc_shared((bK, bN), dtype)
        acc = T.alloc_fragment((bM, bN), T.float32)
        loaded = T.alloc_barrier(arrive_count=128)
        used = T.alloc_barrier(arrive_count=128)
        with T.ws(1):
            T.clear(acc)
        with T.ws(0):
            T.dec_max_nreg(40)  # 256 threads start at 255 registers: the producer gives some back
        for k in range(T.ceildiv(K, bK)):
            with T.ws(0):
                T.barrier_wait(used, (k + 1) % 2)
                T.tma_copy(A[by * bM, k * bK], A_s, barrier=loaded)
                T.tma_copy(B[k * bK, bx * bN], B_s, barrier=loaded)
                T.barrier_arrive(loaded)
            with T.ws(1):
                T.barrier_wait(loaded, k % 2)
                T.gemm(A_s, B_s, acc)
                T.barrier_arrive(used)
        with T.ws(1):
            T.copy(acc, C[by * bM, bx * bN])
    return C


def rand(*shape, dtype="float16", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


# ---------------------------------------------------------------------------------------
# correct kernels: interpreter, warp model pass by pass, NVRTC


@pytest.mark.parametrize("mnk", [(256, 256, 128), (200, 136, 192), (128, 128, 64), (64, 256, 320)])
def test_producer_consumer_checks_pass_by_pass(mnk):
    result = tilers.testing.check_passes(producer_consumer(*mnk), arch="sm_90a")
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("mnk", [(256, 200, 256), (130, 256, 384), (128, 128, 128)])
def test_a_two_slot_ring_on_barrier_arrays_checks_pass_by_pass(mnk):
    result = tilers.testing.check_passes(two_slot_ring(*mnk), arch="sm_90a")
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("mnk", [(200, 256, 192), (128, 128, 64)])
def test_two_warpgroups_on_column_halves_check_pass_by_pass(mnk):
    result = tilers.testing.check_passes(split_columns(*mnk), arch="sm_90a")
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("factory", [producer_consumer, two_slot_ring, split_columns])
def test_on_the_interpreter_against_numpy(factory):
    M, N, K = 192, 256, 256
    kernel = tilers.compile(factory(M, N, K), out_idx=[2], target="cuda:sm_90a")
    a, b = rand(M, K), rand(K, N, seed=1)
    np.testing.assert_allclose(kernel(a, b).astype(np.float64), reference(a, b), rtol=2e-2, atol=2e-1)
    assert kernel.cubin[:4] == ELF_MAGIC


def test_what_the_lowering_made_of_the_regions():
    kernel = tilers.compile(producer_consumer(256, 256, 128), out_idx=[2], target="cuda:sm_90a")
    report = kernel.report()
    assert "T.tma_copy A -> A_s: TMA, 1x [128, 64], 128B swizzle, 16384 bytes on loaded" in report
    assert "T.ws region on threads 0-127: its tile ops run on its 128 threads" in report
    assert "T.ws region on threads 128-255" in report
    assert "over 128 threads" in report  # the accumulator lives in warpgroup 1's registers
    src = kernel.source
    assert "mbarrier.expect_tx.relaxed.cta.shared::cta.b64" in src
    assert "cp.async.bulk.tensor.2d" in src and "wgmma.mma_async" in src
    assert "__syncthreads();" in src  # after the barriers' init
    assert "bar.sync 1, 128;" in src  # the consumer's epilogue staging, among its threads
    # the kernel's own roles: no compiler-made producer warpgroup
    assert kernel.info["block"] == [256, 1, 1] and not kernel.info.get("persistent")


def test_the_eager_style_runs_with_register_budgets():
    a, b = rand(256, 192), rand(192, 128, seed=1)
    c = eager_producer_consumer(a, b)
    np.testing.assert_allclose(c.astype(np.float64), reference(a, b), rtol=2e-2, atol=2e-1)
    kernel = eager_producer_consumer.compile(M=256, N=128, K=192)
    assert "setmaxnreg.dec.sync.aligned.u32 40" in kernel.source
    program = tilers.testing.check_passes(kernel, arch="sm_90a")
    assert program.ok, program.failure_message()


def test_register_budget_annotations_set_the_compilers_warp_roles():
    def gemm(budget):
        @T.prim_func
        def g(A: T.Tensor((512, 512), "float16"), B: T.Tensor((512, 512), "float16"),
              C: T.Tensor((512, 512), "float16")):
            with T.Kernel(4, 4, threads=256) as (bx, by):
                A_s = T.alloc_shared((128, 64), "float16")
                B_s = T.alloc_shared((64, 128), "float16")
                acc = T.alloc_fragment((128, 128), "float32")
                budget()
                T.clear(acc)
                for k in T.Pipelined(8, num_stages=3):
                    T.copy(A[by * 128, k * 64], A_s)
                    T.copy(B[k * 64, bx * 128], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[by * 128, bx * 128])

        return g

    def custom():
        T.annotate_producer_reg_dealloc(40)
        T.annotate_consumer_reg_alloc(232)

    default = tilers.compile(gemm(lambda: None), target="cuda:sm_90a").source
    # FlashAttention-3's budgets for a TMA-only producer are the default
    assert "setmaxnreg.dec.sync.aligned.u32 24" in default and "setmaxnreg.inc.sync.aligned.u32 240" in default
    chosen = tilers.compile(gemm(custom), target="cuda:sm_90a").source
    assert "setmaxnreg.dec.sync.aligned.u32 40" in chosen and "setmaxnreg.inc.sync.aligned.u32 232" in chosen
    none = tilers.compile(gemm(T.no_set_max_nreg), target="cuda:sm_90a").source
    assert "setmaxnreg" not in none

    def too_much():
        T.annotate_consumer_reg_alloc(256)
        T.annotate_producer_reg_dealloc(256)

    with pytest.raises(TileError, match="exceed the 64512 registers the block is launched with"):
        tilers.compile(gemm(too_much), target="cuda:sm_90a")


# ---------------------------------------------------------------------------------------
# misuse: the warp model reports it, naming the barrier


def test_a_wait_nobody_completes_is_a_deadlock_report_naming_the_barrier():
    result = tilers.testing.check_passes(producer_consumer(128, 128, 128, arrive=False), arch="sm_90a")
    assert not result.ok
    message = result.failure_message()
    assert "deadlock: no thread can go on" in message, message
    assert "warpgroup 1) wait on loaded[0] for parity 0" in message, message


def test_reading_a_tile_before_its_barrier_is_reported():
    result = tilers.testing.check_passes(producer_consumer(128, 128, 128, wait=False), arch="sm_90a")
    assert not result.ok
    message = result.failure_message()
    assert "a wgmma of warpgroup 1 reads bytes of" in message and "before any TMA copy wrote them" in message, message


# ---------------------------------------------------------------------------------------
# diagnostics at the user's line


def kernel_with(body, threads=256, target="cuda:sm_90a"):
    @T.prim_func
    def k(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((128, 64), "float16")
            body(A, B, A_s)

    return tilers.compile(k, target=target)


def test_ws_mistakes_are_named_at_the_line():
    with pytest.raises(TileError, match=r"T.ws\(0, 2\): a region's warpgroups must be consecutive"):
        kernel_with(lambda A, B, A_s: T.ws(0, 2))
    with pytest.raises(TileError, match="T.ws runs on threads 256-383, but the kernel has threads=256"):
        def beyond(A, B, A_s):
            with T.ws(2):
                T.copy(A[0, 0], A_s)
        kernel_with(beyond)

    def nested(A, B, A_s):
        with T.ws(0):
            with T.ws(1):
                T.copy(A[0, 0], A_s)

    with pytest.raises(TileError, match="T.ws regions cannot be nested") as info:
        kernel_with(nested)
    assert "test_warp_specialize.py:" in str(info.value)


def test_barrier_mistakes_are_named_at_the_line():
    def in_loop(A, B, A_s):
        for k in T.serial(2):
            T.alloc_barrier(128)

    with pytest.raises(TileError, match="T.alloc_barrier must be called at the top of the kernel"):
        kernel_with(in_loop)

    def no_barrier(A, B, A_s):
        with T.ws(0):
            T.tma_copy(A[0, 0], A_s)

    with pytest.raises(TileError, match="T.tma_copy needs the barrier its bytes complete on"):
        kernel_with(no_barrier)

    def unpicked(A, B, A_s):
        bars = T.alloc_barrier([128, 128])
        T.barrier_arrive(bars)

    with pytest.raises(TileError, match="'bars' holds 2 barriers; pick one"):
        kernel_with(unpicked)

    def not_a_barrier(A, B, A_s):
        T.barrier_wait(A_s, 0)

    with pytest.raises(TileError, match="T.barrier_wait takes a barrier from T.alloc_barrier"):
        kernel_with(not_a_barrier)

    def cluster(A, B, A_s):
        bar = T.alloc_barrier(128)
        T.mbarrier_arrive(bar, cta_id=1)

    with pytest.raises(TileError, match="thread-block cluster"):
        kernel_with(cluster)

    def sm80(A, B, A_s):
        bar = T.alloc_barrier(256)
        T.barrier_arrive(bar)

    with pytest.raises(TileError, match="barriers of T.alloc_barrier need sm_90 or newer"):
        kernel_with(sm80, target="cuda:sm_80")


def test_a_copy_tma_cannot_make_is_an_error_naming_why():
    @T.prim_func
    def odd(A: T.Tensor((256, 130), "float16"), B: T.Tensor((130, 128), "float16"),
            C: T.Tensor((256, 128), "float16")):
        with T.Kernel(1, 2, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            bar = T.alloc_barrier(128)
            with T.ws(0):
                T.tma_copy(A[by * 128, 0], A_s, barrier=bar)
                T.barrier_arrive(bar)
            with T.ws(1):
                T.barrier_wait(bar, 0)
                T.clear(acc)
                T.gemm(A_s, B_s, acc)
                T.copy(acc, C[by * 128, 0])

    with pytest.raises(TileError, match="T.tma_copy A -> A_s: a bulk tensor copy cannot carry it out: the rows of 'A'") as info:
        tilers.compile(odd, target="cuda:sm_90a")
    assert "T.tma_copy(A[by * 128, 0], A_s, barrier=bar)" in str(info.value)


def test_a_fragment_in_two_region_sizes_names_both_lines():
    @T.prim_func
    def mixed(A: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=256) as bx:
            frag = T.alloc_fragment((128, 128), "float32")
            with T.ws(0):
                T.fill(frag, 1.0)
            T.copy(frag, A)

    with pytest.raises(TileError, match="fragment 'frag' is used by 256 threads here and by 128 threads elsewhere"):
        tilers.compile(mixed, target="cuda:sm_90a")


def test_set_max_nreg_checks_its_count():
    with pytest.raises(TileError, match="a multiple of 8 in 24..256"):
        kernel_with(lambda A, B, A_s: T.set_max_nreg(100, 1))


def test_a_manual_pipeline_schedule_is_checked_and_sync_is_ignored_with_a_warning():
    def body(A, B, A_s):
        acc = T.alloc_fragment((128, 64), "float32")
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2, order=[0, 1], stage=[0, 1], sync=[[0, 1]]):
            T.copy(A[0, k * 64], A_s)
            T.copy(A_s, acc)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel_with(body, threads=128)
    assert any("sync= is not used" in str(w.message) for w in caught)
    with pytest.raises(TileError, match="order= has 2 entries and stage= 3"):
        T.Pipelined(4, num_stages=2, order=[0, 1], stage=[0, 1, 2])


def test_constant_barrier_indices_and_parities_are_checked_at_the_line():
    def oob(A, B, A_s):
        bars = T.alloc_barrier([128, 128])
        T.barrier_arrive(bars[5])

    with pytest.raises(TileError, match="'bars' holds 2 barrier\\(s\\); index 5 is out of range"):
        kernel_with(oob)

    def parity(A, B, A_s):
        bar = T.alloc_barrier(128)
        T.barrier_wait(bar, 2)

    with pytest.raises(TileError, match="a phase parity is 0 or 1, got 2"):
        kernel_with(parity)


def gathered_tiles(tiles, rows=64, D=64):
    """O[t] = X[tile (Off[t] mod 8)] @ W: the producer's T.tma_copy at a position it reads
    from shared memory (TileLang's block-sparse `k = block_offset[bi]`), the consumers'
    gemm on it."""

    @T.prim_func
    def f(X: T.Tensor((8 * rows, D), "float16"), Off: T.Tensor((tiles,), "int32"),
          W: T.Tensor((D, D), "float16"), O: T.Tensor((tiles * rows, D), "float32")):
        with T.Kernel(1, threads=256) as bx:
            S = T.alloc_shared((rows, D), "float16")
            W_s = T.alloc_shared((D, D), "float16")
            acc = T.alloc_fragment((rows, D), "float32")
            offs = T.alloc_shared((tiles,), "int32")
            full = T.alloc_barrier(128)
            empty = T.alloc_barrier(128)
            for i in T.Parallel(tiles):
                offs[i] = (Off[i] % 8 + 8) % 8
            tid = T.get_thread_binding()
            if tid >= 128:
                for t in T.serial(tiles):
                    T.barrier_wait(empty, (t + 1) % 2)
                    T.tma_copy(X[offs[t] * rows, 0], S, barrier=full)
                    T.barrier_arrive(full)
            else:
                T.copy(W, W_s)
                for t in T.serial(tiles):
                    T.barrier_wait(full, t % 2)
                    T.gemm(S, W_s, acc, clear_accum=True)
                    T.barrier_arrive(empty)
                    T.copy(acc, O[t * rows, 0])

    return f


def test_a_tma_copy_at_a_position_read_from_shared_memory():
    # the regions loop on their own: the reference is the lowered code on the CPU model
    r = tilers.testing.check_passes(gathered_tiles(5), arch="sm_90a", check=True)
    assert "the reference (on the CPU model)" in r.table()
    src = tilers.compile(gathered_tiles(5), target="cuda:sm_90a").get_kernel_source()
    assert "cp.async.bulk.tensor" in src
