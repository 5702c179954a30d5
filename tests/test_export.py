"""Ahead-of-time export (docs/export.md) on the CPU: the exported C compiles with the system
C compiler (-Wall -Wextra -Werror), and its checks, loading and launches run against a fake
driver (tests/export/fake_cuda.c, loaded through $TILERS_LIBCUDA) that records what it is
given. The launches on a real GPU are examples/cpp/run.sh's (tests/test_export_gpu.py)."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import kernels
import pytest
import tilers
import tilers.language as T
from tilers import _tilers
from tilers.errors import TileError

HERE = Path(__file__).parent
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler on the PATH")
C_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror"]

INVALID_VALUE, INVALID_CONTEXT, NO_BINARY_FOR_GPU = 1, 201, 209
SYMBOL_MISSING, NO_DRIVER, NOT_SUPPORTED = 302, 303, 801


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
    ]


def tensor(data, shape, strides=None):
    """A tilers_tensor; its arrays are kept on the object so they outlive the call."""
    shape_array = (ctypes.c_int64 * len(shape))(*shape)
    t = Tensor(data, len(shape), shape_array, None)
    t._keep = [shape_array]
    if strides is not None:
        stride_array = (ctypes.c_int64 * len(strides))(*strides)
        t.strides = stride_array
        t._keep.append(stride_array)
    return t


class LaunchRecord(ctypes.Structure):
    _fields_ = [
        ("function", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("context", ctypes.c_void_p),
        ("params", ctypes.c_int),
        ("bytes", (ctypes.c_ubyte * 128) * 64),
        ("dependent", ctypes.c_int),
    ]

    def param(self, i, ctype):
        return ctype.from_buffer_copy(bytes(self.bytes[i])[: ctypes.sizeof(ctype)]).value

    def words(self, i):
        return list((ctypes.c_uint64 * 16).from_buffer_copy(bytes(self.bytes[i])))


class EncodeRecord(ctypes.Structure):
    _fields_ = [
        ("data_type", ctypes.c_uint),
        ("rank", ctypes.c_uint),
        ("address", ctypes.c_void_p),
        ("dims", ctypes.c_uint64 * 5),
        ("strides", ctypes.c_uint64 * 4),
        ("box", ctypes.c_uint32 * 5),
        ("element_strides", ctypes.c_uint32 * 5),
        ("interleave", ctypes.c_uint),
        ("swizzle", ctypes.c_uint),
        ("l2_promotion", ctypes.c_uint),
        ("oob_fill", ctypes.c_uint),
    ]


class Fake:
    """The fake driver's controls and records (one library per variant, reset per test)."""

    def __init__(self, path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        self.lib.fake_last_launch.restype = ctypes.POINTER(LaunchRecord)
        self.lib.fake_launch_at.restype = ctypes.POINTER(LaunchRecord)
        self.lib.fake_entry_at.restype = ctypes.c_char_p
        self.lib.fake_encoded.restype = ctypes.POINTER(EncodeRecord)
        self.lib.fake_entry.restype = ctypes.c_char_p
        self.lib.fake_image.restype = ctypes.POINTER(ctypes.c_ubyte * 16)
        self.lib.fake_load_context.restype = ctypes.c_void_p
        self.lib.fake_fail.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def reset(self):
        self.lib.fake_reset()

    def count(self, what):
        return self.lib.fake_count(what.encode())

    def expect_params(self, sizes):
        self.lib.fake_expect_params(len(sizes), (ctypes.c_int * len(sizes))(*sizes))

    def fail(self, call, status):
        self.lib.fake_fail(call.encode(), status)

    @property
    def launch(self):
        return self.lib.fake_last_launch().contents

    def encoded(self, i):
        return self.lib.fake_encoded(i).contents


def build(source: Path, output: Path, *flags):
    result = subprocess.run(
        [CC, *C_FLAGS, *flags, str(source), "-o", str(output)], capture_output=True, text=True
    )
    assert result.returncode == 0, f"{source.name} does not compile:\n{result.stderr}"
    return output


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    """The fake driver, and variants lacking cuLaunchKernel, cuLaunchKernelEx or
    cuTensorMapEncodeTiled."""
    directory = tmp_path_factory.mktemp("fake")
    source = HERE / "export" / "fake_cuda.c"
    built = {}
    for variant, flags in [("full", []), ("no_launch", ["-DFAKE_NO_LAUNCH"]),
                           ("no_launch_ex", ["-DFAKE_NO_LAUNCH_EX"]), ("no_tensor_map", ["-DFAKE_NO_TENSOR_MAP"])]:
        path = build(source, directory / f"libfake_{variant}.so", "-shared", "-fPIC", *flags)
        built[variant] = Fake(path)
    return built


@pytest.fixture
def fake(fakes, monkeypatch):
    fakes["full"].reset()
    monkeypatch.setenv("TILERS_LIBCUDA", fakes["full"].path)
    return fakes["full"]


_counter = [0]


class Export:
    """An exported kernel built as a shared library of its own (so each has its own state:
    the driver opened once, the per-context table), with its functions typed."""

    def __init__(self, directory: Path, name: str, header: str, source: str, info: dict,
                 extra_sources=()):
        (directory / f"tilers_{name}.h").write_text(header)
        (directory / f"tilers_{name}.c").write_text(source)
        _counter[0] += 1
        sources = [directory / f"tilers_{name}.c", *extra_sources]
        library = directory / f"libexport_{name}_{_counter[0]}.so"
        result = subprocess.run(
            [CC, *C_FLAGS, "-shared", "-fPIC", "-I", str(directory), *map(str, sources),
             "-o", str(library), "-ldl", "-lpthread"],
            capture_output=True, text=True,
        )
        assert result.returncode == 0, result.stderr
        self.lib = ctypes.CDLL(str(library))
        self.name = name
        self.info = info
        self.workspace = bool(info.get("scratch"))
        argtypes = []
        for p in info["params"]:
            argtypes.append(Tensor if p["kind"] == "tensor" else SCALAR_TYPES[p["dtype"]])
        workspace = [ctypes.c_void_p, ctypes.c_size_t] if self.workspace else []
        self.launch_fn = getattr(self.lib, f"tilers_{name}_launch")
        self.launch_fn.argtypes = argtypes + workspace + [ctypes.c_void_p]
        self.check_fn = getattr(self.lib, f"tilers_{name}_check")
        self.check_fn.argtypes = argtypes + workspace
        self.size_fn = getattr(self.lib, f"tilers_{name}_workspace_size")
        self.size_fn.argtypes = argtypes + [ctypes.POINTER(ctypes.c_size_t)]
        self.error_fn = getattr(self.lib, f"tilers_{name}_last_error")
        self.error_fn.restype = ctypes.c_char_p

    def launch(self, *args, stream=None):
        return self.launch_fn(*args, stream)

    def workspace_size(self, *args):
        size = ctypes.c_size_t(12345)
        status = self.size_fn(*args, ctypes.byref(size))
        return status, size.value

    @property
    def error(self):
        return self.error_fn().decode()


SCALAR_TYPES = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8,
    "int16": ctypes.c_int16, "uint16": ctypes.c_uint16, "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float, "float64": ctypes.c_double,
}


def export(tmp_path, kernel, name, cubin=None):
    """Export a compiled kernel with a stand-in cubin (the fake driver does not read it)."""
    info_json = json.dumps(kernel.info)
    cubin = cubin or f"cubin of {name}".encode().ljust(16, b"\0")
    header, source = _tilers.export_c(info_json, cubin, name)
    return Export(tmp_path, name, header, source, kernel.info)


def compiled(case):
    factory, kwargs = kernels.COMPILE_CASES[case]
    return tilers.compile(factory(**kwargs), target="cuda:sm_90a")


# pointers the fake never dereferences: 256-byte aligned like cudaMalloc's
A_PTR, B_PTR, C_PTR = 0x7F0000000000, 0x7F0000100000, 0x7F0000200000


@pytest.fixture(scope="module")
def matmul():
    """1000^3 fp16: three tensor maps, persistent, over 48 KiB of shared memory."""
    return compiled("matmul_nn_f16")


def matmul_args(a=None, b=None, c=None):
    return (
        a or tensor(A_PTR, [1000, 1000]),
        b or tensor(B_PTR, [1000, 1000]),
        c or tensor(C_PTR, [1000, 1000]),
    )


# ---- the files compile -----------------------------------------------------------------


@pytest.mark.parametrize("case", ["matmul_nn_f16", "softmax_rows", "matmul_dynamic_m_aligned"])
def test_kernel_export_writes_files_that_compile_with_the_system_compiler(tmp_path, case):
    kernel = compiled(case)
    files = kernel.export(tmp_path / "out", name=f"{case}_x")
    assert sorted(p.name for p in files.values()) == sorted(
        [f"{case}_x.cu", f"{case}_x.json", f"{case}_x.cubin", f"tilers_{case}_x.h",
         f"tilers_{case}_x.c"]
    )
    assert files[".cubin"].read_bytes()[:4] == b"\x7fELF"
    assert json.loads(files[".json"].read_text()) == kernel.info
    source = files[".c"].read_text()
    # the cubin is embedded: its first bytes open the array
    assert "static _Alignas(64) const unsigned char tl_cubin[] = {\n    127, 69, 76, 70," in source
    build(files[".c"], tmp_path / "k.o", "-c")
    if CXX is not None:
        (tmp_path / "use.cpp").write_text(f'#include "tilers_{case}_x.h"\nint main() {{ return 0; }}\n')
        result = subprocess.run(
            [CXX, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
             "-I", str(tmp_path / "out"), str(tmp_path / "use.cpp")],
            capture_output=True, text=True,
        )
        assert result.returncode == 0, result.stderr


def test_tilers_cc_writes_the_launcher_beside_the_cubin(tmp_path, matmul):
    program = tmp_path / "matmul.json"
    matmul.save_program(program)
    code = _tilers.cc_main([str(program), "-o", str(tmp_path / "out"), "--name", "mm"])
    assert code == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["mm.cu", "mm.cubin", "mm.json", "tilers_mm.c", "tilers_mm.h"]
    header = (tmp_path / "out" / "tilers_mm.h").read_text()
    assert (
        "tilers_status tilers_mm_launch(tilers_tensor A, tilers_tensor B, tilers_tensor C, "
        "CUstream stream);" in header
    )
    assert " *   C: float16[1000, 1000] (written)" in header
    assert _tilers.cc_main([str(program), "-o", str(tmp_path), "--name", "no-c"]) == 2


def test_export_refuses_what_c_cannot_launch(tmp_path):
    @T.prim_func
    def half_scalar(A: T.Tensor((128,), "float16"), s: T.float16):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                A[i] = s

    # (a stand-in cubin: NVRTC does not compile a float16 scalar parameter today)
    kernel = tilers.compile(half_scalar, target="cuda:sm_90a")
    with pytest.raises(ValueError, match="scalar parameter 's' is float16, which a C launcher"):
        _tilers.export_c(json.dumps(kernel.info), b"cubin", "half_scalar")
    with pytest.raises(TileError, match="not a C identifier"):
        compiled("softmax_rows").export(tmp_path, name="soft-max")
    interp = tilers.compile(kernels.add(16, 16), target="interp")
    with pytest.raises(TileError, match="compiled for the interpreter"):
        interp.export(tmp_path)


# ---- a launch against the fake driver ------------------------------------------------


def test_launch_passes_what_the_kernel_info_says(tmp_path, fake, matmul):
    e = export(tmp_path, matmul, "mm")
    info = matmul.info
    fake.expect_params([8, 8, 8, 128, 128, 128])
    fake.lib.fake_set_device(9, 0, 50)  # 50 SMs: fewer than the 64 tiles
    assert e.launch(*matmul_args(), stream=0x7777) == 0, e.error
    record = fake.launch
    assert info["persistent"]  # one block per SM walks the tiles
    assert list(record.grid) == [50, 1, 1]
    assert list(record.block) == info["block"]
    assert record.shared_bytes == info["shared_bytes"]
    assert record.stream == 0x7777
    assert [record.param(i, ctypes.c_uint64) for i in range(3)] == [A_PTR, B_PTR, C_PTR]
    # the maps follow the pointers, each the encoding of its tensor
    for j, tmap in enumerate(info["tensor_maps"]):
        words = record.words(3 + j)
        assert words[0] == [A_PTR, B_PTR, C_PTR][tmap["param"]]
        encoded = fake.encoded(words[1] - 1)
        assert encoded.data_type == 6  # FLOAT16
        assert encoded.rank == 2
        assert list(encoded.dims[:2]) == [1000, 1000]
        assert encoded.strides[0] == 2000
        assert list(encoded.box[:2]) == tmap["box"][::-1]
        assert encoded.swizzle == {0: 0, 32: 1, 64: 2, 128: 3}[tmap["swizzle"]]
        assert (encoded.interleave, encoded.l2_promotion, encoded.oob_fill) == (0, 3, 0)
    assert fake.lib.fake_entry().decode() == info["entry"]
    assert bytes(fake.lib.fake_image().contents)[:11] == b"cubin of mm"
    assert info["shared_opt_in"] and fake.lib.fake_attribute_value() == info["shared_bytes"]
    # a second launch on the same tensors: loaded once, maps from the cache
    assert e.launch(*matmul_args()) == 0
    assert (fake.count("loads"), fake.count("launches"), fake.count("encodes")) == (1, 2, 3)
    assert fake.launch.stream is None
    # other tensors: encoded again
    assert e.launch(*matmul_args(a=tensor(A_PTR + 256, [1000, 1000]))) == 0
    assert fake.count("encodes") == 4
    assert e.check_fn(*matmul_args()) == 0
    assert e.workspace_size(*matmul_args()) == (0, 0)


@pytest.mark.parametrize("persistent", [True, False])
def test_clusters_along_x_launch_whole_clusters(tmp_path, fake, persistent):
    """A clustered kernel (__cluster_dims__ compiled in): persistent, as many whole clusters
    as the SMs hold (at most one per group of tiles); a tile per block, its grid as is."""
    factory, kwargs = kernels.COMPILE_CASES["matmul_nn_f16"]
    kernel = tilers.compile(factory(**kwargs), target="cuda:sm_90a", cluster=(2, 1), persistent=persistent)
    assert kernel.info["cluster"] == [2, 1, 1], kernel.report()
    e = export(tmp_path, kernel, "mmc")
    fake.lib.fake_set_device(9, 0, 51)  # 51 SMs: 25 clusters of 2, fewer than the 32 groups of 8 x 8 tiles
    assert e.launch(*matmul_args()) == 0, e.error
    assert list(fake.launch.grid) == ([50, 1, 1] if persistent else [8, 8, 1])


def test_a_persistent_cluster_grid_is_what_the_driver_says_fits(tmp_path, fake):
    """cuOccupancyMaxActiveClusters, asked once when loaded with the kernel's block and
    shared memory: a GPC that holds fewer clusters than SMs / n would leave a second wave."""
    factory, kwargs = kernels.COMPILE_CASES["matmul_nn_f16"]
    kernel = tilers.compile(factory(**kwargs), target="cuda:sm_90a", cluster=(2, 1), persistent=True)
    e = export(tmp_path, kernel, "mmq")
    fake.lib.fake_set_device(9, 0, 51)
    fake.lib.fake_set_max_clusters(20)
    assert e.launch(*matmul_args()) == 0, e.error
    assert list(fake.launch.grid) == [40, 1, 1]
    assert [fake.lib.fake_cluster_query(i) for i in range(4)] == [*kernel.info["block"], kernel.info["shared_bytes"]]
    fake.lib.fake_set_max_clusters(60)  # asked once, when loaded
    assert e.launch(*matmul_args()) == 0 and list(fake.launch.grid) == [40, 1, 1]


@pytest.mark.parametrize("n", [4, 16])
def test_a_kernel_working_across_its_cluster_launches_its_grid(tmp_path, fake, n):
    """T.copy_cluster / T.cluster_sync: clusters of n along x, the grid as the kernel says;
    past 8 blocks the function is allowed its non-portable cluster size when loaded."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_cluster_ops import gather

    kernel = tilers.compile(gather(n, rows=3), target="cuda:sm_90a")
    assert kernel.info["cluster"] == [n, 1, 1]
    e = export(tmp_path, kernel, "gather")
    fake.lib.fake_set_device(9, 0, 132)
    assert e.launch(tensor(A_PTR, [3 * n, 64]), tensor(B_PTR, [3 * n, 64])) == 0, e.error
    assert list(fake.launch.grid) == [3 * n, 1, 1]
    assert fake.count("nonportable_clusters") == (1 if n > 8 else 0)


def test_a_cluster_grid_of_symbolic_size_is_checked_per_call(tmp_path, fake):
    """T.ClusterKernel(M, cluster_dims=4) with M symbolic: each call's grid along x must hold
    whole clusters; the check function says so, with the size it came from."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_cluster_ops import gather_rows

    kernel = tilers.compile(gather_rows(4), target="cuda:sm_90a")
    e = export(tmp_path, kernel, "rows")
    fake.lib.fake_set_device(9, 0, 132)
    assert e.launch(tensor(A_PTR, [8, 64]), tensor(B_PTR, [8, 64])) == 0, e.error
    assert list(fake.launch.grid) == [8, 1, 1]
    assert e.launch(tensor(A_PTR, [6, 64]), tensor(B_PTR, [6, 64])) == INVALID_VALUE
    assert e.error.startswith("tilers_rows: grid dimension x is 6 (from size M=6")
    assert e.error.endswith(
        "the kernel runs in thread-block clusters of 4 blocks along x, so it must be a multiple of 4")
    assert fake.count("launches") == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (matmul_args(a=tensor(None, [1000, 1000])),
         "tilers_mm: parameter 'A' is a NULL pointer (expected the device data of a "
         "float16[1000, 1000] tensor)"),
        (matmul_args(b=tensor(B_PTR, [1000, 999])),
         "tilers_mm: parameter 'B': expected shape (1000, 1000), got (1000, 999) (the kernel "
         "was compiled for that shape)"),
        (matmul_args(c=tensor(C_PTR, [1000 * 1000])),
         "tilers_mm: parameter 'C': expected a 2-dimensional tensor (float16[1000, 1000]), got "
         "1 dimensions"),
        (matmul_args(a=tensor(A_PTR + 8, [1000, 1000])),
         "tilers_mm: parameter 'A': the kernel assumes a 16-byte aligned data pointer, got "
         "0x7f0000000008 (8 bytes past a multiple of 16; a view that starts at an offset?)"),
        (matmul_args(a=tensor(A_PTR, [1000, 1000], strides=[1, 1000])),
         "tilers_mm: parameter 'A': expected strides (1000, 1) (in elements), got (1, 1000)"),
    ],
    ids=["null", "shape", "rank", "misaligned", "strides"],
)
def test_bad_arguments_are_errors_with_messages_and_launch_nothing(tmp_path, fake, matmul, args,
                                                                   message):
    e = export(tmp_path, matmul, "mm")
    assert e.launch(*args) == INVALID_VALUE
    assert e.error == message
    assert e.check_fn(*args) == INVALID_VALUE
    assert (fake.count("loads"), fake.count("launches"), fake.count("encodes")) == (0, 0, 0)


def test_strides_along_extents_of_one_and_given_contiguous_strides_are_accepted(tmp_path, fake):
    kernel = tilers.compile(kernels.add(1, 64, dtype="float32"), target="cuda:sm_90a")
    e = export(tmp_path, kernel, "row")
    fake.expect_params([8, 8, 8])
    args = [tensor(A_PTR, [1, 64], strides=[7, 1]), tensor(B_PTR, [1, 64], strides=[64, 1]),
            tensor(C_PTR, [1, 64])]
    assert e.launch(*args) == 0, e.error
    assert fake.count("launches") == 1


def test_the_stream_chooses_the_context_and_each_context_loads_once(tmp_path, fake, matmul):
    e = export(tmp_path, matmul, "mm")
    fake.expect_params([8, 8, 8, 128, 128, 128])
    assert e.launch(*matmul_args()) == 0
    assert fake.lib.fake_load_context() == 0x1000
    # a stream of the second GPU's context: pushed for the load and the launch, popped after
    assert e.launch(*matmul_args(), stream=0x5000) == 0
    assert fake.lib.fake_load_context() == 0x2000
    assert fake.launch.context == 0x2000
    assert fake.lib.fake_depth() == 1
    assert e.launch(*matmul_args(), stream=0x5000) == 0
    assert (fake.count("loads"), fake.count("pushes"), fake.count("launches")) == (2, 2, 3)


def test_no_context_is_an_error(tmp_path, fake, matmul):
    e = export(tmp_path, matmul, "mm")
    fake.lib.fake_set_no_context()
    assert e.launch(*matmul_args()) == INVALID_CONTEXT
    assert "no CUDA context is current on this thread" in e.error


def test_a_device_of_another_architecture_is_refused_before_loading(tmp_path, fake, matmul):
    e = export(tmp_path, matmul, "mm")
    fake.lib.fake_set_device(8, 6, 84)
    assert e.launch(*matmul_args()) == NO_BINARY_FOR_GPU
    assert e.error == (
        "tilers_mm: compiled for sm_90a, but the device of this context (CUDA device 0) is "
        "sm_86, which cannot run it: export it again for that architecture"
    )
    assert fake.count("loads") == 0


@pytest.mark.parametrize(
    "call, status, message",
    [
        ("cuModuleLoadData", 200,
         "tilers_mm: cuModuleLoadData failed with CUDA_ERROR_INVALID_IMAGE (200)"),
        ("cuLaunchKernel", 701,
         "tilers_mm: cuLaunchKernel failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701)"),
        ("cuTensorMapEncodeTiled", 1,
         "tilers_mm: cuTensorMapEncodeTiled failed with CUDA_ERROR_INVALID_VALUE (1) for the "
         "tensor map of parameter 'A'"),
        ("cuInit", 100, "tilers_mm: no usable CUDA driver: cuInit failed with "
         "CUDA_ERROR_NO_DEVICE (100)"),
        ("cuInit", 999, "tilers_mm: no usable CUDA driver: cuInit failed with an unknown "
         "error (999)"),
    ],
)
def test_driver_failures_pass_their_status_with_a_message(tmp_path, fake, matmul, call, status,
                                                          message):
    e = export(tmp_path, matmul, "mm")
    fake.fail(call, status)
    assert e.launch(*matmul_args()) == status
    assert e.error == message
    assert fake.lib.fake_depth() == 1


def test_a_driver_that_does_not_load_is_an_error(tmp_path, monkeypatch, matmul):
    e = export(tmp_path, matmul, "mm")
    monkeypatch.setenv("TILERS_LIBCUDA", str(tmp_path / "no-such-libcuda.so"))
    assert e.launch(*matmul_args()) == NO_DRIVER
    assert e.error.startswith(
        f"tilers_mm: no usable CUDA driver: the CUDA driver library {tmp_path}/no-such-libcuda.so "
        "could not be loaded ("
    )
    # the checks still run first: a bad argument is reported as such
    assert e.launch(*matmul_args(a=tensor(None, [1000, 1000]))) == INVALID_VALUE


def test_a_driver_without_a_function_is_an_error(tmp_path, fakes, monkeypatch, matmul):
    monkeypatch.setenv("TILERS_LIBCUDA", fakes["no_launch"].path)
    e = export(tmp_path, matmul, "mm")
    assert e.launch(*matmul_args()) == SYMBOL_MISSING
    assert e.error == "tilers_mm: no usable CUDA driver: the CUDA driver library lacks cuLaunchKernel"
    # without cuTensorMapEncodeTiled only kernels with tensor maps fail
    fakes["no_tensor_map"].reset()
    monkeypatch.setenv("TILERS_LIBCUDA", fakes["no_tensor_map"].path)
    e = export(tmp_path, matmul, "mm")
    assert e.launch(*matmul_args()) == NOT_SUPPORTED
    assert "has no cuTensorMapEncodeTiled (tensor maps need CUDA 12.0 or newer)" in e.error
    softmax = export(tmp_path, compiled("softmax_rows"), "sm")
    fakes["no_tensor_map"].expect_params([8, 8])
    assert softmax.launch(tensor(A_PTR, [1001, 1024]), tensor(B_PTR, [1001, 1024])) == 0
    assert fakes["no_tensor_map"].count("launches") == 1


def test_calls_from_many_threads_load_once(tmp_path, fake, matmul):
    e = export(tmp_path, matmul, "mm")
    fake.expect_params([8, 8, 8, 128, 128, 128])
    results = []

    def work():
        for _ in range(50):
            results.append(e.launch(*matmul_args()))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 200
    assert (fake.count("loads"), fake.count("launches")) == (1, 200)


# ---- symbolic sizes, scalars in the grid, scratch -------------------------------------


def test_symbolic_sizes_are_bound_checked_and_passed(tmp_path, fake):
    kernel = compiled("matmul_dynamic_m_aligned")  # M multiple of 64, N = K = 256
    e = export(tmp_path, kernel, "mmd")
    fake.expect_params([8, 8, 8, 4, 128, 128, 128])

    def args(m_a, m_c=None, k=256):
        return (tensor(A_PTR, [m_a, k]), tensor(B_PTR, [256, 256]),
                tensor(C_PTR, [m_a if m_c is None else m_c, 256]))

    assert e.launch(*args(384)) == 0, e.error
    assert fake.launch.param(3, ctypes.c_int32) == 384
    assert list(fake.launch.grid) == [4, 6, 1]
    assert fake.encoded(0).dims[1] == 384
    assert e.launch(*args(100)) == INVALID_VALUE
    assert e.error == (
        "tilers_mmd: size 'M' (dimension 0 of parameter 'A') is 100, but the kernel was compiled "
        "for multiples of 64 (T.dynamic(\"M\", multiple_of=64))"
    )
    assert e.launch(*args(128, 192)) == INVALID_VALUE
    assert e.error == (
        "tilers_mmd: parameter 'C': dimension 0 is 192, but size 'M' is 128 (dimension 0 of "
        "parameter 'A')"
    )
    assert e.launch(*args(128, k=255)) == INVALID_VALUE
    assert "parameter 'A': expected shape (M, 256), got (128, 255)" in e.error
    assert e.launch(*args(1 << 31)) == INVALID_VALUE
    assert "size 'M' (dimension 0 of parameter 'A') is 2147483648: it must be 0 to 2147483647" in e.error
    # M = 0: no blocks, nothing launched, and no driver needed
    launches = fake.count("launches")
    assert e.launch(*args(0)) == 0
    assert fake.count("launches") == launches


def test_a_grid_from_a_scalar_follows_python_and_names_the_parameter(tmp_path, fake):
    @T.prim_func
    def fill(A: T.Tensor((1024,), "float32"), n: T.int32, value: T.float32):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                A[bx * 128 + i] = value

    kernel = tilers.compile(fill, target="cuda:sm_90a")
    e = export(tmp_path, kernel, "fill")
    fake.expect_params([8, 4, 4])
    a = tensor(A_PTR, [1024])
    assert e.launch(a, 1000, 2.5) == 0
    assert list(fake.launch.grid) == [8, 1, 1]
    assert fake.launch.param(1, ctypes.c_int32) == 1000
    assert fake.launch.param(2, ctypes.c_float) == 2.5
    assert e.launch(a, -129, 0.0) == INVALID_VALUE
    assert e.error == (
        "tilers_fill: grid dimension x is -1 (from scalar parameter n=-129): a grid dimension "
        "cannot be negative"
    )


def test_scratch_lives_in_the_callers_workspace(tmp_path, fake):
    M = T.dynamic("M")

    @T.prim_func
    def staged(A: T.Tensor((M, 64), "float32"), B: T.Tensor((M, 64), "float32")):
        S = T.alloc_global((2, M, 64), "float16")
        W = T.alloc_global((3,), "float32")
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            T.copy(A[bx * 32 : bx * 32 + 32, :], S[1, bx * 32 : bx * 32 + 32, :])
            T.copy(S[1, bx * 32 : bx * 32 + 32, :], B[bx * 32 : bx * 32 + 32, :])
            W[0] = 1.0

    kernel = tilers.compile(staged, target="cuda:sm_90a")
    e = export(tmp_path, kernel, "staged")
    fake.expect_params([8, 8, 8, 8, 4])
    a, b = tensor(A_PTR, [100, 64]), tensor(B_PTR, [100, 64])
    status, need = e.workspace_size(a, b)
    assert status == 0
    assert need == 2 * 100 * 64 * 2 + 256  # S rounded to 256 bytes, then W
    # the query checks shapes, not pointers
    assert e.workspace_size(tensor(None, [100, 64]), b) == (0, need)
    status, _ = e.workspace_size(a, tensor(B_PTR, [99, 64]))
    assert status == INVALID_VALUE and "size 'M' is 100" in e.error
    workspace = 0x7F0000400000
    assert e.launch(a, b, workspace, need) == 0, e.error
    assert [fake.launch.param(i, ctypes.c_uint64) for i in range(4)] == [
        A_PTR, B_PTR, workspace, workspace + 2 * 100 * 64 * 2
    ]
    assert fake.launch.param(4, ctypes.c_int32) == 100
    assert e.launch(a, b, None, need) == INVALID_VALUE
    assert e.error == (
        f"tilers_staged: workspace: this call needs {need} bytes of workspace "
        "(tilers_staged_workspace_size), got NULL"
    )
    assert e.launch(a, b, workspace, need - 1) == INVALID_VALUE
    assert e.error.endswith(f"got {need - 1}")
    assert e.launch(a, b, workspace + 4, need) == INVALID_VALUE
    assert "expected a 16-byte aligned pointer" in e.error


def test_several_kernels_launch_in_turn_sharing_the_workspace(tmp_path, fake, fakes, monkeypatch):
    """A prim_func of two T.Kernel (split-K: partial sums into T.alloc_global scratch, then
    their reduction): one launch function, each kernel from its own entry with its own grid
    and block, in order, on the same stream, both given the same workspace."""
    sys.path.insert(0, str(HERE.parent / "examples"))
    import decode_gemm

    program = decode_gemm.linear.prim_func(1000, 520, schedule="splitk", split_k=3, block_N=64, block_M=16)
    kernel = tilers.compile(program, target="cuda:sm_90a")
    info = kernel.info
    assert len(info["then"]) == 1
    e = export(tmp_path, kernel, "splitk")
    fake.expect_params([8, 8, 8, 8, 4])  # X, W, Y, the partials, M
    x, w, y = tensor(A_PTR, [5, 520]), tensor(B_PTR, [1000, 520]), tensor(C_PTR, [5, 1000])
    status, need = e.workspace_size(x, w, y)
    assert status == 0 and need == -(-3 * 5 * 1000 * 4 // 256) * 256  # rounded to 256 bytes
    workspace = 0x7F0000400000
    assert e.launch(x, w, y, workspace, need, stream=0x7777) == 0, e.error
    assert (fake.count("loads"), fake.count("launches")) == (1, 2)
    first, second = (fake.lib.fake_launch_at(i).contents for i in range(2))
    assert [fake.lib.fake_entry_at(i).decode() for i in range(2)] == [info["entry"], info["then"][0]["entry"]]
    assert second.function == first.function + 1  # the module's second function
    assert list(first.grid) == [16, 1, 3] and list(first.block) == info["block"]
    assert list(second.grid) == [1, 5, 1] and list(second.block) == info["then"][0]["block"]
    # the reduction waits for the partial sums (griddepcontrol.wait): launched with
    # programmatic stream serialization behind the first kernel, which is launched plainly
    assert info["then"][0]["dependent_launch"]
    assert (first.dependent, second.dependent) == (0, 1)
    for record in (first, second):
        assert record.stream == 0x7777
        assert [record.param(i, ctypes.c_uint64) for i in range(4)] == [A_PTR, B_PTR, C_PTR, workspace]
        assert record.param(4, ctypes.c_int32) == 5
    # a driver without cuLaunchKernelEx (older than CUDA 12.0): both launched plainly
    fakes["no_launch_ex"].reset()
    fakes["no_launch_ex"].expect_params([8, 8, 8, 8, 4])
    monkeypatch.setenv("TILERS_LIBCUDA", fakes["no_launch_ex"].path)
    plain = export(tmp_path, kernel, "splitk_plain")
    assert plain.launch(x, w, y, workspace, need, stream=0x7777) == 0, plain.error
    records = [fakes["no_launch_ex"].lib.fake_launch_at(i).contents for i in range(2)]
    assert fakes["no_launch_ex"].count("launches") == 2 and [r.dependent for r in records] == [0, 0]
    assert list(records[1].grid) == [1, 5, 1]
    monkeypatch.setenv("TILERS_LIBCUDA", fake.path)
    # loaded once per context: the next call launches both again from the table
    assert e.launch(x, w, y, workspace, need) == 0
    assert (fake.count("loads"), fake.count("launches")) == (1, 4)
    # M = 0: neither kernel has blocks, nothing is loaded or launched
    fake.reset()
    empty = [tensor(A_PTR, [0, 520]), w, tensor(C_PTR, [0, 1000])]
    assert e.launch(*empty, workspace, need) == 0
    assert fake.count("launches") == 0
    # a launch that fails names the kernel; the ones before it are queued
    fake.reset()
    fake.expect_params([8, 8, 8, 8, 4])
    fake.fail("cuLaunchKernel", 719)
    assert e.launch(x, w, y, workspace, need) == 719
    assert "kernel 1 of 2" in e.error


# ---- a dispatcher over specializations ------------------------------------------------


def test_a_dispatcher_runs_the_first_specialization_that_takes_the_call(tmp_path, fake):
    aligned, general = compiled("matmul_dynamic_m_aligned"), compiled("matmul_dynamic_m")
    (tmp_path / "d").mkdir()
    directory = tmp_path / "d"
    sources = []
    for name, kernel in [("mm_aligned", aligned), ("mm_any", general)]:
        header, source = _tilers.export_c(
            json.dumps(kernel.info), f"cubin {name}".encode().ljust(16, b"\0"), name
        )
        (directory / f"tilers_{name}.h").write_text(header)
        (directory / f"tilers_{name}.c").write_text(source)
        (directory / f"{name}.json").write_text(json.dumps(kernel.info))
        sources.append(directory / f"tilers_{name}.c")
    files = tilers.export.dispatcher(
        directory, "mm", [("mm_aligned", None, {"M": (None, 4096)}), ("mm_any", None, {})]
    )
    header, source = files[".h"].read_text(), files[".c"].read_text()
    d = Export(directory, "mm", header, source, aligned.info, extra_sources=sources)
    fake.expect_params([8, 8, 8, 4, 128, 128, 128])

    def args(m):
        return tensor(A_PTR, [m, 256]), tensor(B_PTR, [256, 256]), tensor(C_PTR, [m, 256])

    assert d.launch(*args(128)) == 0, d.error
    assert bytes(fake.lib.fake_image().contents)[:13] == b"cubin mm_alig"
    assert d.launch(*args(100)) == 0, d.error
    assert bytes(fake.lib.fake_image().contents)[:12] == b"cubin mm_any"
    assert d.launch(*args(8192)) == 0  # past the bucket: the general kernel
    assert fake.count("loads") == 2
    bad = tensor(A_PTR, [128, 255]), tensor(B_PTR, [256, 256]), tensor(C_PTR, [128, 256])
    assert d.launch(*bad) == INVALID_VALUE
    assert d.error.startswith("tilers_mm: no specialization takes this call: tilers_mm_aligned: ")
    assert "; tilers_mm_any: parameter 'A': expected shape (M, 256), got (128, 255)" in d.error
    # the chosen specialization's own error when the shapes fit but a pointer does not
    assert d.launch(tensor(None, [128, 256]), *args(128)[1:]) == INVALID_VALUE
    assert d.error.startswith("tilers_mm_aligned: parameter 'A' is a NULL pointer")
    with pytest.raises(TileError, match="neither one of its sizes"):
        tilers.export.dispatcher(directory, "mm2", [("mm_any", None, {"Q": (1, 2)})])
    with pytest.raises(TileError, match="does not exist"):
        tilers.export.dispatcher(directory, "mm3", [("nothing", None, {})])


def test_tilers_cc_link_writes_the_dispatcher(tmp_path, fake):
    kernel = compiled("add_dynamic_m")
    kernel.export(tmp_path, name="add_small")
    kernel.export(tmp_path, name="add_big")
    code = _tilers.cc_main(
        ["link", "-o", str(tmp_path), "--name", "add", f"{tmp_path}/add_small.json:M=..64",
         f"{tmp_path}/add_big.json"]
    )
    assert code == 0
    header = (tmp_path / "tilers_add.h").read_text()
    assert "A dispatcher: the first of tilers_add_small when M=..64; tilers_add_big" in header
    for name in ["add", "add_small", "add_big"]:
        build(tmp_path / f"tilers_{name}.c", tmp_path / f"{name}.o", "-c")
    assert _tilers.cc_main(["link", "-o", str(tmp_path), "--name", "x",
                            f"{tmp_path}/add_small.json:M<64"]) == 2


def test_the_export_runs_in_a_program_of_its_own(tmp_path, fake, matmul):
    """A C program (no Python in the process) linking the export and the fake driver."""
    e_dir = tmp_path / "c"
    e_dir.mkdir()
    matmul.export(e_dir, name="mm")
    (e_dir / "main.c").write_text(
        '#include <stdio.h>\n#include "tilers_mm.h"\n'
        "int main(void) {\n"
        "    int64_t shape[2] = {1000, 1000};\n"
        "    tilers_tensor a = {(void *)0x7f0000000000, 2, shape, NULL};\n"
        "    tilers_tensor b = {(void *)0x7f0000100000, 2, shape, NULL};\n"
        "    tilers_tensor c = {NULL, 2, shape, NULL};\n"
        "    tilers_status s = tilers_mm_launch(a, b, c, NULL);\n"
        '    printf("%d %s\\n", s, tilers_mm_last_error());\n'
        "    c.data = (void *)0x7f0000200000;\n"
        "    s = tilers_mm_launch(a, b, c, NULL);\n"
        '    printf("%d\\n", s);\n'
        "    return 0;\n}\n"
    )
    program = tmp_path / "main"
    result = subprocess.run(
        [CC, *C_FLAGS, "-I", str(e_dir), str(e_dir / "main.c"), str(e_dir / "tilers_mm.c"),
         "-o", str(program), "-ldl", "-lpthread"], capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    run = subprocess.run([str(program)], capture_output=True, text=True,
                         env={**os.environ, "TILERS_LIBCUDA": fake.path}, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "1 tilers_mm: parameter 'C' is a NULL pointer (expected the device data of a "
        "float16[1000, 1000] tensor)",
        "0",
    ]


# ---- the C++ example --------------------------------------------------------------------


def test_the_cpp_example_exports_and_compiles(tmp_path):
    """examples/cpp: the export script runs without a GPU, and main.cpp compiles against the
    exported headers (CI has no CUDA toolkit: tests/export/cuda_runtime.h declares the few
    runtime functions it uses). examples/cpp/run.sh runs it on a GPU."""
    root = HERE.parent
    out = subprocess.run(
        [sys.executable, str(root / "examples" / "cpp" / "export_kernels.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    for name in ["gemm", "gemm_m64", "gemm_m128", "splitk_gemm", "softmax"]:
        build(tmp_path / f"tilers_{name}.c", tmp_path / f"{name}.o", "-c", "-O2")
    assert "tilers_gemm_m64 when M=..256; tilers_gemm_m128" in (tmp_path / "tilers_gemm.h").read_text()
    if CXX is None:
        pytest.skip("no C++ compiler to check main.cpp with")
    result = subprocess.run(
        [CXX, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", str(tmp_path),
         "-I", str(HERE / "export"), str(root / "examples" / "cpp" / "main.cpp")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
