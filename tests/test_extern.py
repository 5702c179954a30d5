"""The escape hatch to CUDA: ``T.import_source`` (device functions the user writes),
``T.call_extern`` (calls of them or of CUDA builtins, by value, by address and as a value)
and ``T.inline_ptx``: the generated source, NVRTC for sm_80 and sm_90a, the program format
round trip, operands checked against the imported prototypes at the user's line, and the
interpreter's refusal (it cannot run CUDA)."""

import json

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError

SOURCE = r"""
// y = x * s + k
__device__ __forceinline__ float scale_add(float x, float s, int k) { return x * s + (float)k; }
/* halves n floats */
__device__ void halve(const float* __restrict__ src, float* dst, int n = 2) {
  for (int i = 0; i < n; ++i) dst[i] = src[i] * 0.5f;
}
template <typename T1, typename T2>
__device__ void widen(T1 *src, T2 *dst, const int n) { for (int i = 0; i < n; ++i) dst[i] = (T2)src[i]; }
__device__ void bump(int* counter) { atomicAdd(counter, 1); }
"""


def extern_kernel(N=256, threads=128):
    """B[i] = scale_add(A[i], 2, 3) + halve(A[i]) + (i + 1 through inline PTX); Count gets
    one bump per thread of block 0."""

    @T.prim_func
    def f(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), Count: T.Tensor((1,), "int32")):
        with T.Kernel(T.ceildiv(N, threads), threads=threads) as bx:
            T.import_source(SOURCE)
            T.import_source(SOURCE)  # once in the source however often imported
            tx = T.get_thread_binding()
            a = T.alloc_local((2,), "float32")
            h = T.alloc_local((2,), "float32")
            r = T.alloc_local((1,), "uint32")
            a[0] = A[bx * threads + tx]
            a[1] = 0.0
            y = T.call_extern("float32", "scale_add", a[0], 2.0, 3)
            T.call_extern("handle", "halve", T.access_ptr(a[0], "r", 2), T.access_ptr(h[0], "w", 2))
            T.inline_ptx("add.u32 %0, %1, %2;", outputs=[r[0]], inputs=[T.Cast("uint32", tx), T.uint32(1)])
            if bx == 0:
                T.call_extern("handle", "bump", T.access_ptr(Count[0], "rw"))
            if bx * threads + tx < N:
                B[bx * threads + tx] = y + h[0] + T.Cast("float32", r[0])

    return f


def expected(A, threads=128):
    i = np.arange(A.shape[0]) % threads
    return (A * 2 + 3) + A * 0.5 + (i + 1).astype(np.float32)


def test_the_source_holds_the_imported_code_and_the_calls():
    src = tilers.compile(extern_kernel(), target="cuda:sm_90a").get_kernel_source()
    assert src.count("__device__ __forceinline__ float scale_add") == 1
    assert "scale_add(a[0], 2.0f, 3)" in src
    assert "halve((const float* __restrict__)(&a[0]), (float*)(&h[0]));" in src
    assert 'asm volatile("add.u32 %0, %1, %2;" : "=r"(*o0) : "r"(i0), "r"(i1));' in src
    assert "bump((int*)(&Count[0]));" in src
    # the imported code comes before the kernel that calls it
    assert src.index("scale_add(float x") < src.index("__global__")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_compiles_it(arch):
    assert len(tilers.compile(extern_kernel(), target=f"cuda:{arch}").cubin) > 0


def test_same_program_same_source():
    one = tilers.compile(extern_kernel(), target="cuda:sm_90a").get_kernel_source()
    two = tilers.compile(extern_kernel(), target="cuda:sm_90a").get_kernel_source()
    assert one == two


def test_saved_program_round_trips(tmp_path):
    kernel = tilers.compile(extern_kernel(), target="cuda:sm_90a")
    path = tmp_path / "program.json"
    kernel.save_program(str(path))
    program = json.loads(path.read_text())
    assert SOURCE in program["kernel"]["extern_sources"]
    assert "call_extern" in path.read_text()


def test_template_functions_take_any_pointer():
    @T.prim_func
    def f(A: T.Tensor((128,), "int8"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.import_source(SOURCE)
            tx = T.get_thread_binding()
            q = T.alloc_local((4,), "int8")
            d = T.alloc_local((4,), "float32")
            for v in T.vectorized(4):
                q[v] = A[tx * 4 + v]
            T.call_extern("handle", "widen", T.access_ptr(q, "r"), T.access_ptr(d, "w"), 4)
            for v in T.serial(4):
                B[tx * 4 + v] = d[v]

    src = tilers.compile(f, target="cuda:sm_90a").get_kernel_source()
    assert "widen(&q[0], &d[0], 4);" in src


def test_builtins_and_tilelangs_keyword_dtype():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.call_extern("void", "__nanosleep", 100)
            tx = T.get_thread_binding()
            c = T.call_extern("__clz", T.Cast("int32", tx), dtype="int32")
            A[tx] = T.Cast("float32", c)

    src = tilers.compile(f, target="cuda:sm_90a").get_kernel_source()
    assert "__nanosleep(100);" in src and "__clz(tid)" in src


def test_the_interpreter_refuses_with_the_reason():
    A = np.arange(256, dtype=np.float32)
    with pytest.raises(TileError, match=r"T.call_extern\('scale_add'\) runs only on the GPU"):
        tilers.compile(extern_kernel(), target="interp")(A, np.zeros_like(A), np.zeros(1, np.int32))


def test_a_nanosleep_runs_as_nothing_on_the_interpreter():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.call_extern("handle", "__nanosleep", 10)
            tx = T.get_thread_binding()
            A[tx] = A[tx] + 1.0

    A = np.zeros(128, np.float32)
    tilers.compile(f, target="interp")(A)
    np.testing.assert_array_equal(A, 1)


def misuse(body):
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.import_source(SOURCE)
            tx = T.get_thread_binding()
            a = T.alloc_local((2,), "float32")
            a[0] = A[tx]
            body(A, B, a, tx)

    return f


@pytest.mark.parametrize(
    "body,message",
    [
        (lambda A, B, a, tx: T.call_extern("float32", "scale_add", a[0], 2.0),
         r"2 operands, but the imported 'scale_add' takes 3"),
        (lambda A, B, a, tx: T.call_extern("float32", "scale_add", T.access_ptr(a[0], "r"), 2.0, 3),
         r"operand 0: an address of 'a', but 'scale_add' takes a value \(float\)"),
        (lambda A, B, a, tx: T.call_extern("handle", "halve", a[0], T.access_ptr(a[1], "w")),
         r"operand 0: a float32 value, but 'halve' takes an address \(const float\*"),
        (lambda A, B, a, tx: T.call_extern("handle", "halve", T.access_ptr(a[0], "w"), T.access_ptr(a[1], "w")),
         r"taken for writing \('w'\), but 'halve' takes const float\*"),
        (lambda A, B, a, tx: T.call_extern("float32", "halve", T.access_ptr(a[0], "r"), T.access_ptr(a[1], "w")),
         r"a float32 result was asked for, but the imported 'halve' returns void"),
        (lambda A, B, a, tx: T.call_extern("float32", "scale_add", a[0], 2.0, 1.5),
         r"operand 2: a float32 value, but 'scale_add' takes int here"),
        (lambda A, B, a, tx: T.call_extern("handle", "bump", T.access_ptr(A[0], "rw")),
         r"operand 0: 'A' holds float32, but 'bump' takes int\*"),
        (lambda A, B, a, tx: T.call_extern("float32", "1bad", a[0]),
         r"parameter 'func_name': expected the name of a C function"),
        (lambda A, B, a, tx: T.call_extern("handle", "halve", a, a),
         r"the buffer 'a' itself"),
        (lambda A, B, a, tx: T.inline_ptx("add.u32 %0, %1, %2;", outputs=[a[0]], inputs=[tx]),
         r"the PTX names 3 operands \(%0..%2\), but 1 outputs and 1 inputs were given"),
        (lambda A, B, a, tx: T.inline_ptx("mov.b32 %0, %1;", outputs=[A[0]], inputs=[tx]),
         r"output 0 must be an element of a T.alloc_local buffer"),
    ],
)
def test_misuse_is_an_error_at_the_users_line(body, message):
    with pytest.raises(TileError, match=message) as err:
        tilers.compile(misuse(body), target="cuda:sm_90a")
    assert "test_extern.py" in str(err.value)


def test_inside_parallel_is_an_error():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.import_source(SOURCE)
            for i in T.Parallel(128):
                A[i] = T.call_extern("float32", "scale_add", A[i], 2.0, 1)

    with pytest.raises(TileError, match=r"inside T.Parallel") as err:
        tilers.compile(f, target="cuda:sm_90a")
    assert "test_extern.py" in str(err.value)


def test_a_fragment_address_is_an_error():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.import_source(SOURCE)
            frag = T.alloc_fragment((128,), "float32")
            T.copy(A, frag)
            T.call_extern("handle", "bump", T.access_ptr(frag[0], "rw"))

    with pytest.raises(TileError, match=r"'frag' is a fragment") as err:
        tilers.compile(f, target="cuda:sm_90a")
    assert "test_extern.py" in str(err.value)


def test_the_prototype_reader():
    from tilers import _extern

    protos = _extern.prototypes([SOURCE])
    assert [p.text for p in protos["scale_add"][0].params] == ["float", "float", "int"]
    halve = protos["halve"][0]
    assert halve.required == 2 and len(halve.params) == 3
    assert halve.params[0].pointer and halve.params[0].const and halve.params[0].dtype == "float32"
    assert not halve.params[1].const
    widen = protos["widen"][0]
    assert widen.params[0].pointer and widen.params[0].dtype is None
    assert "if" not in protos and "for" not in protos


def test_imported_code_that_does_not_compile_is_the_users_error_not_a_tilers_bug():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.import_source("__device__ float broken(float x) {\n  return x * ;\n}\n")
            tx = T.get_thread_binding()
            A[tx] = T.call_extern("float32", "broken", A[tx])

    with pytest.raises(TileError) as err:
        _ = tilers.compile(f, target="cuda:sm_90a").cubin
    message = str(err.value)
    assert "the CUDA it imports (T.import_source) does not compile" in message
    assert "imported code 1, line 2: error: expected an expression" in message
    assert "tilers bug" not in message


def test_inline_ptx_that_ptxas_refuses_is_named():
    @T.prim_func
    def f(A: T.Tensor((128,), "uint32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            r = T.alloc_local((1,), "uint32")
            T.inline_ptx("add.u32.nonsense %0, %1, %2;", outputs=[r[0]], inputs=[A[tx], T.uint32(1)])
            A[tx] = r[0]

    with pytest.raises(TileError, match=r"ptxas refused the PTX; the kernel's own inline PTX") as err:
        _ = tilers.compile(f, target="cuda:sm_90a").cubin
    assert "Unknown modifier '.nonsense'" in str(err.value)


def test_kernel_prelude_is_imported_code():
    """TileLang's T.Kernel(..., prelude=code): the code before the kernel, as T.import_source."""

    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128, prelude=SOURCE) as bx:
            tx = T.get_thread_binding()
            B[bx * 128 + tx] = T.call_extern("float32", "scale_add", A[tx], 2.0, 3)

    k = tilers.compile(f, out_idx=[1], target="cuda:sm_90a")
    src = k.get_kernel_source()
    assert src.index("scale_add(float x") < src.index("__global__") and "scale_add(A[" in src
    assert len(k.cubin) > 0


def test_a_prelude_that_is_not_code_names_the_line():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128, prelude=3):
            A[0] = 1.0

    with pytest.raises(TileError, match=r"test_extern.py:\d+:\d+: error: T.Kernel: prelude must be a string"):
        tilers.compile(f, target="cuda:sm_90a")
