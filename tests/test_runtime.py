"""Runtime tests that need no GPU: targets, NVRTC, and JITKernel's CPU-side behavior.

The grid evaluator is KernelInfo's (crates/tile-codegen/src/kernel_info.rs, tested there and
through the launcher in test_launcher.py)."""

import json
import os
import subprocess
import sys

import pytest
from tilers import runtime
from tilers.errors import TileError
from tilers.kernel import JITKernel

ELF_MAGIC = b"\x7fELF"

# Self-contained CUDA: no #include, our own fp16 storage type, fp16 math in inline PTX.
ADD_SOURCE = r"""
typedef unsigned short half_bits;

extern "C" __global__ void __launch_bounds__(256)
add_kernel(const half_bits* __restrict__ A, const half_bits* __restrict__ B,
           half_bits* __restrict__ C, int n) {
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < n) {
    half_bits c;
    asm("add.f16 %0, %1, %2;" : "=h"(c) : "h"(A[i]), "h"(B[i]));
    C[i] = c;
  }
}
"""


def add_info(arch: str) -> dict:
    tensor = {"kind": "tensor", "dtype": "float16", "shape": [1000, 1000],
              "strides": [1000, 1], "align": 16, "written": False}
    ceildiv_n = {"op": "ceildiv", "a": {"param": 3}, "b": {"const": 256}}
    return {
        "name": "add", "entry": "add_kernel", "arch": arch,
        "params": [
            dict(tensor, name="A"), dict(tensor, name="B"), dict(tensor, name="C", written=True),
            {"kind": "scalar", "name": "n", "dtype": "int32"},
        ],
        "grid": [ceildiv_n, {"const": 1}, {"const": 1}], "threads": 256, "block": [256, 1, 1],
        "shared_bytes": 0, "shared_opt_in": False, "report": [],
    }


PROGRAM_JSON = json.dumps({"version": 1, "name": "add"})


def make_add(arch="sm_90a", out_idx=None) -> JITKernel:
    return JITKernel("add", PROGRAM_JSON, ADD_SOURCE, add_info(arch), f"cuda:{arch}", out_idx)


needs_no_gpu = pytest.mark.skipif(runtime.gpu_available(), reason="a GPU is present")


# --- resolve_target ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, arch",
    [("cuda:sm_80", "sm_80"), ("cuda:sm_90a", "sm_90a"), ("sm_90a", "sm_90a"),
     ("sm_86", "sm_86"), ("cuda:sm_100a", "sm_100a")],
)
def test_resolve_target_explicit(target, arch):
    assert runtime.resolve_target(target) == arch


@pytest.mark.parametrize("target", ["cuda:sm80", "gpu", "sm_9", "cuda:compute_90", "", "SM_90", 90])
def test_resolve_target_rejects(target):
    with pytest.raises(ValueError) as error:
        runtime.resolve_target(target)
    message = str(error.value)
    assert "'target'" in message
    assert "cuda:sm_XX" in message
    assert repr(target) in message


def test_resolve_target_auto():
    arch = runtime.resolve_target("auto")
    if runtime.gpu_available():
        assert arch == runtime.device_arch(0)
    else:
        assert arch == "sm_90a"


def test_arch_of_capability():
    assert runtime.arch_of_capability(9, 0) == "sm_90a"
    assert runtime.arch_of_capability(8, 6) == "sm_86"
    assert runtime.arch_of_capability(8, 0) == "sm_80"
    assert runtime.arch_of_capability(10, 0) == "sm_100a"


def test_cubin_runs_on():
    assert runtime.cubin_runs_on("sm_90a", "sm_90a")
    assert runtime.cubin_runs_on("sm_90", "sm_90a")
    assert runtime.cubin_runs_on("sm_80", "sm_86")
    assert not runtime.cubin_runs_on("sm_86", "sm_80")
    assert not runtime.cubin_runs_on("sm_80", "sm_90a")
    assert not runtime.cubin_runs_on("sm_90a", "sm_100a")


@needs_no_gpu
def test_no_gpu_probe_says_why():
    count, reason = runtime.gpu_probe()
    assert count == 0
    assert reason


# --- NVRTC -------------------------------------------------------------------------------


def test_nvrtc_version():
    major, minor = runtime.nvrtc_version()
    assert major >= 12 and minor >= 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_compile_gives_cubin(arch):
    cubin = runtime.nvrtc_compile(ADD_SOURCE, arch, "add")
    assert isinstance(cubin, bytes)
    assert cubin.startswith(ELF_MAGIC)


def test_nvrtc_compile_options():
    assert runtime.nvrtc_options("sm_90a") == ["-arch=sm_90a", "-std=c++17"]
    options = runtime.nvrtc_options("sm_80", lineinfo=True, fast_math=True)
    assert "-lineinfo" in options and "--use_fast_math" in options
    cubin = runtime.nvrtc_compile(ADD_SOURCE, "sm_80", "add", lineinfo=True, fast_math=True)
    assert cubin.startswith(ELF_MAGIC)


def test_nvrtc_compile_error_is_tile_error_with_log():
    source = 'extern "C" __global__ void broken(int* x) { x[0] = undeclared_name; }'
    with pytest.raises(TileError) as error:
        runtime.nvrtc_compile(source, "sm_90a", "broken")
    message = str(error.value)
    assert "this is a tilers bug: the generated CUDA did not compile" in message
    assert "undeclared_name" in message  # from NVRTC's log
    assert "broken.cu" in message


# --- JITKernel without a GPU -------------------------------------------------------------


def test_kernel_attributes(tmp_path):
    kernel = make_add()
    assert kernel.source == ADD_SOURCE
    assert kernel.get_kernel_source() == ADD_SOURCE
    assert kernel.info["entry"] == "add_kernel"
    assert kernel.arch == "sm_90a"
    assert kernel.params == ["A", "B", "C", "n"]
    path = tmp_path / "add.json"
    kernel.save_program(path)
    assert path.read_text() == PROGRAM_JSON


def test_kernel_cubin_is_compiled_once():
    kernel = make_add("sm_80")
    cubin = kernel.cubin
    assert cubin.startswith(ELF_MAGIC)
    assert kernel.cubin is cubin


def test_kernel_repr():
    text = repr(make_add(out_idx=[2]))
    assert text.startswith("<JITKernel add(")
    assert "A: float16[1000, 1000]" in text
    assert "C: float16[1000, 1000] (output)" in text
    assert "n: int32" in text
    assert "sm_90a" in text


def test_kernel_out_idx_checked():
    assert make_add(out_idx=[-2]).out_idx == [2]
    with pytest.raises(TileError, match="out_idx 3 names scalar parameter 'n'"):
        make_add(out_idx=[3])
    with pytest.raises(TileError, match=r"out_idx 7 is out of range: add has 4 parameters \(A, B, C, n\)"):
        make_add(out_idx=[7])


def test_kernel_argument_count():
    kernel = make_add(out_idx=[2])
    with pytest.raises(TypeError) as error:
        kernel(1, 2)
    assert str(error.value) == (
        "add() takes 3 tensor/scalar arguments (A, B, n; C is an output allocated by the "
        "kernel) but 2 were given"
    )
    with pytest.raises(TypeError) as error:
        make_add()(1)
    assert str(error.value) == (
        "add() takes 4 tensor/scalar arguments (A, B, C, n) but 1 was given"
    )


def test_kernel_arguments_by_keyword():
    with pytest.raises(TypeError) as error:
        make_add(out_idx=[2])(1, 2, n=3)
    assert str(error.value) == (
        "add() takes its arguments by position, not by keyword (n): call it as add(A, B, n)"
    )


def test_kernel_argument_count_message_with_one_output():
    info = add_info("sm_90a")
    info["params"] = info["params"][:3]
    kernel = JITKernel("add", PROGRAM_JSON, ADD_SOURCE, info, "auto", [2])
    with pytest.raises(TypeError) as error:
        kernel(1, 2, 3)
    assert str(error.value) == (
        "add() takes 2 tensor/scalar arguments (A, B; C is an output allocated by the kernel) "
        "but 3 were given"
    )


@needs_no_gpu
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernel_call_without_gpu(arch):
    kernel = make_add(arch, out_idx=[2])
    with pytest.raises(RuntimeError) as error:
        kernel(object(), object(), 1000)
    message = str(error.value)
    assert f"kernel 'add' was compiled for {arch} with no GPU to run it" in message
    assert "interpreter" in message


def test_import_loads_neither_torch_nor_cuda():
    code = (
        "import sys, tilers.kernel, tilers.runtime\n"
        "loaded = [m for m in ('torch', 'cuda.bindings.driver', 'cuda.bindings.nvrtc')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
