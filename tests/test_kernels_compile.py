"""Every test kernel compiles for sm_80 and sm_90a with NVRTC (no GPU needed), deterministically."""

import json
import os
import subprocess
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
import kernels

ELF_MAGIC = b"\x7fELF"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("case", sorted(kernels.COMPILE_CASES))
def test_compiles_with_nvrtc(case, arch):
    factory, kwargs = kernels.COMPILE_CASES[case]
    kernel = tilers.compile(factory(**kwargs), target=f"cuda:{arch}")
    assert kernel.info["arch"] == arch
    assert kernel.cubin[:4] == ELF_MAGIC
    # readable: comments name the user's source line
    assert "kernels.py:" in kernel.source


def test_vectorized_where_contiguous():
    kernel = tilers.compile(kernels.add(1024, 1024), target="cuda:sm_90a")
    assert "*(const uint4*)(&A[" in kernel.source
    assert "*(uint4*)(&C[" in kernel.source
    assert any("vector loads" in line for line in kernel.info["report"])


def test_wide_reduction_goes_through_shared_memory():
    kernel = tilers.compile(kernels.softmax(16, 4096, block_M=1, threads=256), target="cuda:sm_90a")
    assert "__shfl_xor_sync" in kernel.source
    assert "__syncthreads()" in kernel.source
    assert kernel.info["shared_bytes"] > 0


DETERMINISM_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import tilers, kernels
for name in sorted(kernels.COMPILE_CASES):
    f, kw = kernels.COMPILE_CASES[name]
    k = tilers.compile(f(**kw), target="cuda:sm_90a")
    sys.stdout.write(k.source)
"""


def test_same_program_gives_byte_identical_cuda_across_processes():
    script = DETERMINISM_SCRIPT.format(tests=os.path.dirname(__file__))
    runs = []
    for seed in ("0", "1"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, check=True
        )
        runs.append(out.stdout)
    assert runs[0] == runs[1]
    assert len(runs[0]) > 10000


def test_copy_between_tiles_of_different_shapes_names_the_users_line():
    @T.prim_func
    def bad(A: T.Tensor((128, 128), "float32"), B: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 32), "float32")
            f = T.alloc_fragment((32, 64), "float32")
            T.copy(A[0, 0], s)
            T.copy(s, f)  # the mistake
            T.copy(f, B[0, 0])

    with pytest.raises(tilers.TileError) as info:
        tilers.compile(bad, target="cuda:sm_90a")
    msg = str(info.value)
    assert "different shapes" in msg
    line = next(n for n, text in enumerate(open(__file__), 1) if "# the mistake" in text)
    assert f"{os.path.basename(__file__)}:{line}" in msg
    assert "T.copy(s, f)" in msg
    assert "/tilers/" not in msg.replace(os.path.dirname(__file__), "")


def test_layout_conflict_names_both_lines():
    # (a transposed read goes through a shared copy; a transposed write is the conflict)
    @T.prim_func
    def bad(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((64, 64), "float32")
            g = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], f)
            T.copy(A[0, 0], g)
            for i, j in T.Parallel(64, 64):
                g[j, i] = f[i, j]  # transposed write of a fragment
            T.copy(g, B[0, 0])

    with pytest.raises(tilers.TileError) as info:
        tilers.compile(bad, target="cuda:sm_90a")
    msg = str(info.value)
    assert "layout conflict" in msg and "g[j, i]" in msg and "T.Parallel(64, 64)" in msg


def test_shared_memory_over_the_limit_names_each_buffer():
    @T.prim_func
    def big(A: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s1 = T.alloc_shared((256, 256), "float32")
            s2 = T.alloc_shared((64, 256), "float32")
            T.copy(A[0, 0], s1)
            T.copy(A[0, 0], s2)
            T.copy(s1, A[0, 0])
            T.copy(s2, A[0, 0])

    with pytest.raises(tilers.TileError) as info:
        tilers.compile(big, target="cuda:sm_90a")
    msg = str(info.value)
    assert "'s1'" in msg and "262144 bytes" in msg and "'s2'" in msg


def test_race_in_parallel_loop_is_an_error():
    @T.prim_func
    def racy(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(64, 64):
                B[i] = A[i, j]

    with pytest.raises(tilers.TileError, match="race"):
        tilers.compile(racy, target="cuda:sm_90a")


def tilers_cc_binary():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(["cargo", "build", "-q", "-p", "tilers-cc"], cwd=root, check=True)
    return os.path.join(root, "target", "debug", "tilers-cc")


def test_tilers_cc_and_python_give_the_same_cuda_and_cubin(tmp_path):
    kernel = tilers.compile(kernels.softmax(64, 1000, tile_N=1024), target="cuda:sm_90a")
    program = tmp_path / "softmax.json"
    kernel.save_program(str(program))
    out = subprocess.run(
        [tilers_cc_binary(), str(program), "-o", str(tmp_path), "--arch", "sm_90a"],
        capture_output=True,
        text=True,
        env=dict(os.environ, VIRTUAL_ENV=sys.prefix),
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "softmax.cu").read_text() == kernel.source
    assert (tmp_path / "softmax.cubin").read_bytes() == kernel.cubin


def test_tilers_cc_reports_kernel_errors_with_exit_code_1(tmp_path):
    kernel = tilers.compile(kernels.add(64, 64), target="cuda:sm_90a")
    program = json.loads(kernel.program_json)
    program["kernel"]["threads"] = 2000
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(program))
    out = subprocess.run(
        [tilers_cc_binary(), str(path), "-o", str(tmp_path)], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "threads=2000" in out.stderr and "kernels.py:" in out.stderr


def test_shifted_fragment_index_reads_its_shared_copy_not_a_wrong_element():
    @T.prim_func
    def shifted(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 63), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], f)
            for i, j in T.Parallel(64, 63):
                B[i, j] = f[i, j + 1]

    import numpy as np
    from tilers import testing

    a = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    out = np.asarray(tilers.compile(shifted, out_idx=[1], target="interp")(a))
    assert np.array_equal(out, a[:, 1:])
    testing.check_passes(shifted, arch="sm_90a", check=True)
    k = tilers.compile(shifted, target="cuda:sm_90a")
    assert "it reads a copy in shared memory ('f_relayout')" in k.report()


def test_compiler_errors_carry_the_users_location():
    @T.prim_func
    def racy(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(64, 64):
                B[i] = A[i, j]  # the race

    with pytest.raises(tilers.TileError) as info:
        tilers.compile(racy, target="cuda:sm_90a")
    line = next(n for n, text in enumerate(open(__file__), 1) if "# the race" in text)
    assert info.value.file == __file__
    assert info.value.line == line
    assert info.value.column > 0
