"""Defects a fault probe found (session 23), each a silent wrong result or an error that
blamed tilers: a duplicate out_idx, a tensor passed for two parameters on the interpreter,
the factory memo taking 2 for 2.0, T.ceildiv by zero, an architecture NVRTC does not know,
and a grid above CUDA's limits."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError


def copy_twice():
    @T.prim_func
    def copy(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(4):
                B[i] = A[i] * 2.0

    return copy


def test_out_idx_naming_a_parameter_twice_is_an_error():
    with pytest.raises(TileError, match=r"out_idx lists parameter 'B' twice"):
        tilers.compile(copy_twice(), out_idx=[1, -1], target="cuda:sm_90a")


def test_one_array_for_an_input_and_an_output_works_in_place():
    @T.prim_func
    def double(Y: T.Tensor((8,), "float32"), X: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                Y[i] = X[i] * 2.0

    k = tilers.compile(double, target="cuda:sm_90a")
    a = np.arange(8, dtype=np.float32)
    k(a, a)  # the unchanged input X must not be copied back over Y's result
    np.testing.assert_array_equal(a, np.arange(8, dtype=np.float32) * 2)


def test_one_array_for_two_written_parameters_is_an_error():
    @T.prim_func
    def two(Y: T.Tensor((8,), "float32"), Z: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                Y[i] = 1.0
                Z[i] = 2.0

    k = tilers.compile(two, target="cuda:sm_90a")
    a = np.zeros(8, dtype=np.float32)
    with pytest.raises(TileError, match="'Y' and 'Z' are the same memory"):
        k(a, a)


def test_the_factory_memo_tells_an_int_from_a_float():
    @tilers.jit(out_idx=[1], target="cuda:sm_90a")
    def scale_by(c):
        @T.prim_func
        def k(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(8):
                    B[i] = T.floor(A[i] / c) if isinstance(c, int) else A[i] / c

        return k

    a = np.full(8, 7, np.float32)
    assert scale_by(2)(a)[0] == 3.0
    assert scale_by(2.0)(a)[0] == 3.5
    assert scale_by(c=2)(a)[0] == 3.0 and scale_by(c=2.0)(a)[0] == 3.5


def test_compile_memo_tells_an_int_from_a_float_parameter():
    f = copy_twice()
    tilers.compile(f, out_idx=[1], target="cuda:sm_90a")
    with pytest.raises(TileError, match="out_idx 1.0 is out of range"):
        tilers.compile(f, out_idx=[1.0], target="cuda:sm_90a")


@tilers.jit(out_idx=[1], target="cuda:sm_90a")
def add1(N, block):
    """A factory whose grid is T.ceildiv(N, block)."""

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(32):
                B[bx * 32 + i] = A[bx * 32 + i] + 1.0

    return k


def test_ceildiv_by_zero_is_an_error_at_the_line():
    with pytest.raises(TileError, match=r"test_call_and_compile_checks.py:\d+:\d+: error: T.ceildiv\(64, 0\)"):
        add1(64, 0)


@pytest.mark.parametrize("arch", ["sm_99", "sm_85", "sm_80a", "sm_75"])
def test_an_architecture_nvrtc_does_not_know_is_an_error_up_front(arch):
    with pytest.raises(TileError, match=f"unsupported architecture '{arch}': expected one of sm_80"):
        tilers.compile(copy_twice(), out_idx=[1], target=f"cuda:{arch}")


@pytest.mark.parametrize("arch", ["sm_86", "sm_89", "sm_100a", "sm_120a"])
def test_known_architectures_compile(arch):
    k = tilers.compile(copy_twice(), out_idx=[1], target=f"cuda:{arch}")
    assert k.cubin  # NVRTC compiles it


@pytest.mark.parametrize("grid,axis,blocks", [((1, 70000), 1, 70000), ((2, 1, 65536), 2, 65536),
                                              ((2**31,), 0, 2**31)])
def test_a_grid_above_cudas_limits_is_an_error(grid, axis, blocks):
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(*grid, threads=32):
            A[0] = 1.0

    with pytest.raises(TileError, match=f"grid dimension {axis} is {blocks} blocks, above the"):
        tilers.compile(k, target="cuda:sm_90a")


def test_a_per_thread_variable_carried_across_parallel_iterations_is_an_error():
    @T.prim_func
    def count(A: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            v = T.alloc_var("int32", init=3)
            for i in T.Parallel(128):
                v = v + 1
            A[0] = v

    with pytest.raises(TileError, match="'v' is each thread's own"):
        tilers.compile(count, out_idx=[0], target="cuda:sm_90a")


def test_a_per_thread_temporary_set_first_in_the_iteration_is_fine():
    @T.prim_func
    def square_plus(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            t = T.alloc_var("float32")
            for i in T.Parallel(128):
                t = A[i] * A[i]
                t = t + 1.0
                B[i] = t

    k = tilers.compile(square_plus, out_idx=[1], target="cuda:sm_90a")
    a = np.arange(128, dtype=np.float32)
    np.testing.assert_allclose(k(a), a * a + 1)
    assert tilers.testing.check_passes(square_plus, arch="sm_90a").ok


def test_the_largest_grid_cuda_takes_compiles():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(2**31 - 1, 65535, threads=32):
            A[0] = 1.0

    assert "blockIdx" in tilers.compile(k, target="cuda:sm_90a").source


def test_stage_and_extent_limits_are_errors_at_the_line():
    def pipelined(stages):
        @T.prim_func
        def k(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((16, 64), "float32")
                for i in T.Pipelined(4, num_stages=stages):
                    T.copy(A[i * 16, 0], s)

        return k

    with pytest.raises(TileError, match=r"test_call_and_compile_checks.py:\d+:\d+: error: num_stages=17 is above"):
        tilers.compile(pipelined(17), target="cuda:sm_90a")

    with pytest.raises(TileError, match=r"test_call_and_compile_checks.py:\d+:\d+: error: T.Parallel extent 2147483647"):

        @T.prim_func
        def big(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                for i in T.Parallel(2**31 - 1):
                    A[0] = 1.0

        tilers.compile(big, target="cuda:sm_90a")


SPIN = '''
import signal, sys, time
import tilers, tilers.language as T

# a shell's background job (CI runs the tests as one) starts with SIGINT ignored, and Python
# then installs no handler: set the interactive one
signal.signal(signal.SIGINT, signal.default_int_handler)

@T.prim_func
def spin(A: T.Tensor((4,), "int32"), n: T.int32):
    with T.Kernel(1, threads=32):
        i = T.alloc_var("int32", init=0)
        while i < n:
            i = i + 1
        A[0] = i

k = tilers.compile(spin, out_idx=[0], target="interp")  # the interpreter, GPU or not
print("ready", flush=True)
start = time.time()
try:
    k(2**31 - 1)  # about an hour on the interpreter
except KeyboardInterrupt:
    print(f"interrupted after {time.time() - start:.1f} s", flush=True)
    print(k(5)[0], flush=True)  # the next run is not stopped
'''


def test_ctrl_c_stops_an_interpreted_kernel(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "spin.py"  # a file: the kernel's `while` is traced from its source
    script.write_text(SPIN)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "interrupted after" in out and out.strip().endswith("5"), out


def test_messages_name_the_buffer_assigned_at_the_calls_column():
    @T.prim_func
    def k(A: T.Tensor((128, 64), "float16"), B: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float16"); frag = T.alloc_fragment((32, 64), "float16")  # noqa: E702
            T.copy(A[0, 0], s)
            T.copy(s, frag)
            T.copy(frag, B[0, 0])

    with pytest.raises(TileError, match=r"'s' region has shape \[64, 64\], 'frag' region has shape \[32, 64\]"):
        tilers.compile(k, target="cuda:sm_90a")


def test_ceildiv_of_a_list_is_an_error_at_the_line():
    with pytest.raises(TileError, match=r"error: T.ceildiv\(64, \[32\]\): operands must be integers .* got list"):
        add1(64, [32])


def test_a_read_only_array_is_fine_for_a_parameter_the_kernel_only_reads():
    k = tilers.compile(copy_twice(), out_idx=[1], target="cuda:sm_90a")
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    np.testing.assert_array_equal(k(a), a * 2)
    b = np.zeros(4, dtype=np.float32)
    b.flags.writeable = False
    k2 = tilers.compile(copy_twice(), target="cuda:sm_90a")
    with pytest.raises(ValueError, match="parameter 'B': the kernel writes it, and the array is read-only"):
        k2(a, b)


def local_tile(case):
    @T.prim_func
    def k(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128):
            loc = T.alloc_local((128,), "float32")
            if case == "reversed":  # set on one thread, read on another
                for i in T.Parallel(128):
                    loc[i] = A[i]
                for i in T.Parallel(128):
                    B[i] = loc[127 - i]
            elif case == "outside":  # read by every thread, set by one
                for i in T.Parallel(128):
                    loc[i] = A[i]
                B[0] = loc[3]
            elif case == "next_round":  # the second loop's write reaches the first loop's read
                for s in T.serial(2):
                    for i in T.Parallel(128):
                        B[i] = loc[127 - i]
                    for i in T.Parallel(128):
                        loc[i] = A[i]
            elif case == "same_element":  # each thread reads back what it set
                for i in T.Parallel(128):
                    loc[i] = A[i]
                for i in T.Parallel(128):
                    B[i * 2] = loc[i] * 2.0
            elif case == "set_by_all":  # every thread sets all of it first
                for j in T.serial(128):
                    loc[j] = 1.0
                for i in T.Parallel(128):
                    B[i] = loc[127 - i]

    return k


@pytest.mark.parametrize("case,element,line", [("reversed", 127, 9), ("outside", 3, 13), ("next_round", 127, 17)])
def test_a_local_element_read_on_another_thread_than_set_is_an_error(case, element, line):
    # the GPU would read the reading thread's own (unset) copy; the interpreter the set value
    with pytest.raises(TileError, match=rf"'loc' is each thread's own .* reads loc\[{element}\] here") as e:
        tilers.compile(local_tile(case), target="cuda:sm_90a")
    assert (e.value.file, e.value.line) == (__file__, local_tile.__code__.co_firstlineno + line)
    assert "T.alloc_fragment" in str(e.value)


@pytest.mark.parametrize("case", ["same_element", "set_by_all"])
def test_local_elements_read_where_they_were_set_compile_and_run(case):
    k = tilers.compile(local_tile(case), target="cuda:sm_90a")
    a = np.arange(256, dtype=np.float32)
    b = np.zeros(256, dtype=np.float32)
    k(a, b)
    want = np.zeros(256, dtype=np.float32)
    if case == "same_element":
        want[0:256:2] = a[:128] * 2
    else:
        want[:128] = 1.0
    np.testing.assert_array_equal(b, want)


def reduce_read_by_all(n, threads, rows):
    @T.prim_func
    def k(A: T.Tensor((rows, n), "float16"), B: T.Tensor((rows, n), "float32"), S: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((rows, n), "float16")
            r = T.alloc_fragment((rows,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, r, dim=1)
            for j in T.serial(rows):  # scalar code: every thread holds all of r
                S[j] = r[j]
            for i, j in T.Parallel(rows, n):
                B[i, j] = x[i, j] - r[i]

    return k


@pytest.mark.parametrize("n,threads,rows", [(128, 128, 1), (1024, 256, 1), (64, 128, 4), (64, 256, 4)])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_reduction_read_by_scalar_code_reaches_every_thread(n, threads, rows, arch):
    # the source sits on fewer threads than the block (vectorized), the result is read by
    # all: it used to be a "layout conflict"; now the reducing threads hand it to all
    from tilers.testing import check_passes

    k = reduce_read_by_all(n, threads, rows)
    assert check_passes(k, arch=arch).ok
    kern = tilers.compile(k, target=f"cuda:{arch}")
    assert "through shared memory" in kern.report()
    a = (np.arange(rows * n, dtype=np.float32).reshape(rows, n) % 7).astype(np.float16)
    b = np.zeros((rows, n), np.float32)
    s = np.zeros(rows, np.float32)
    kern(a, b, s)
    np.testing.assert_allclose(s, a.astype(np.float32).sum(1))
    np.testing.assert_allclose(b, a.astype(np.float32) - a.astype(np.float32).sum(1, keepdims=True))


@pytest.mark.parametrize("start,stop,step", [(1, 16, 3), (15, -1, -4), (0, 16, 5), (5, 5, 2), (10, 2, 3), (0, 16, 1)])
@pytest.mark.parametrize("loop", ["serial", "unroll"])
def test_stepped_loops_visit_pythons_range(start, stop, step, loop):
    # TileLang's T.serial(start, stop, step) / T.unroll(..., step)
    @T.prim_func
    def k(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            for i in getattr(T, loop)(start, stop, step):
                B[i] = A[i] + 1.0

    kern = tilers.compile(k, target="cuda:sm_90a")
    a = np.arange(16, dtype=np.float32)
    b = np.zeros(16, np.float32)
    kern(a, b)
    want = np.zeros(16, np.float32)
    idx = list(range(start, stop, step))
    want[idx] = a[idx] + 1
    np.testing.assert_array_equal(b, want)


def test_a_stepped_loop_with_traced_bounds_and_the_eager_style():
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32"), n: T.int32):
        with T.Kernel(2, threads=32) as bx:
            for i in T.serial(bx, n, 2):  # block 0 the even rows below n, block 1 the odd
                B[i] = A[i] + 1.0

    kern = tilers.compile(k, target="cuda:sm_90a")
    for n in (0, 1, 7, 64):
        a = np.arange(64, dtype=np.float32)
        b = np.zeros(64, np.float32)
        kern(a, b, n)
        want = np.zeros(64, np.float32)
        want[:n] = a[:n] + 1
        np.testing.assert_array_equal(b, want)

    @tilers.jit
    def backwards(A, n):
        A: T.Tensor((16,), T.float32)
        B = T.empty((16,), T.float32)
        with T.Kernel(1, threads=32):
            for j in T.serial(16):
                B[j] = 0.0
            for i in T.unroll(n - 1, -1, -3):
                B[i] = A[i]
            for i in range(1, n, 6):  # a device loop too (T.serial)
                B[i] = A[i] * 2.0
        return B

    a = np.arange(16, dtype=np.float32) + 1
    want = np.zeros(16, np.float32)
    want[list(range(12, -1, -3))] = a[list(range(12, -1, -3))]
    want[[1, 7]] = a[[1, 7]] * 2
    np.testing.assert_array_equal(np.asarray(backwards(a, 13)), want)


@pytest.mark.parametrize("step,message", [(0, "step must not be 0"), (1.5, "step must be a Python int, got 1.5")])
def test_a_bad_step_is_an_error_at_the_line(step, message):
    @T.prim_func
    def k(B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.serial(0, 16, step):
                B[i] = 1.0

    with pytest.raises(TileError, match=rf"test_call_and_compile_checks.py:\d+:\d+: error: T.serial {message}"):
        tilers.compile(k, target="cuda:sm_90a")


@T.prim_func
def masked_sum(A: T.Tensor((100,), "int32"), M: T.Tensor((100,), "int32"), S: T.Tensor((2,), "int32")):
    with T.Kernel(1, threads=32):
        acc = T.alloc_var("int32", init=0)
        big = T.alloc_var("int32", init=0)
        for k in T.serial(100):
            if M[k] == 0:  # TileLang's `continue`: the rest of this iteration is skipped
                continue
            acc = acc + A[k]
            if A[k] > 50:
                big = big + 1
            else:
                continue
            acc = acc + 1000
        S[0] = acc
        S[1] = big


def test_continue_under_a_traced_condition_skips_the_rest_of_the_iteration():
    a = np.arange(100, dtype=np.int32)
    m = (np.arange(100) % 3 != 0).astype(np.int32)
    s = np.zeros(2, np.int32)
    tilers.compile(masked_sum, target="cuda:sm_90a")(a, m, s)
    kept = [int(x) for x, keep in zip(a, m) if keep]
    assert s.tolist() == [sum(kept) + 1000 * sum(x > 50 for x in kept), sum(x > 50 for x in kept)]


def test_a_continue_deeper_in_a_branch_is_still_an_error_at_its_line():
    with pytest.raises(TileError, match=r"test_call_and_compile_checks.py:\d+:\d+: .*continue"):

        @T.prim_func
        def k(A: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32):
                for i in T.serial(8):
                    if A[i] > 0:
                        if A[i] > 4:
                            continue
                        A[i] = 1
                    A[i] = A[i] + 1

        tilers.compile(k, target="cuda:sm_90a")
