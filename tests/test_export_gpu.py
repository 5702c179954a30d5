"""The export on the GPU (docs/export.md): the C++ example (examples/cpp/run.sh) built with
the system compilers and run, its results against torch; an exported launcher called on
torch tensors and torch's stream, against torch, with bad arguments refused."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_export import Export, compiled, tensor

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
ROOT = Path(__file__).parent.parent
NVCC = shutil.which("nvcc")
CUDA_HOME = Path(
    os.environ.get("CUDA_HOME")
    or (Path(NVCC).resolve().parent.parent if NVCC else "/usr/local/cuda")
)


def test_cpp_example_runs_and_matches_torch(tmp_path):
    if not (CUDA_HOME / "include" / "cuda_runtime.h").is_file() or shutil.which("g++") is None:
        pytest.skip(f"the example needs g++ and the CUDA runtime headers under {CUDA_HOME}")
    dump = tmp_path / "dump"
    dump.mkdir()
    result = subprocess.run(
        ["bash", str(ROOT / "examples" / "cpp" / "run.sh"), str(tmp_path / "build"), "--dump",
         str(dump)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "CUDA_HOME": str(CUDA_HOME)},
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks passed" in result.stdout
    assert "a missing A -> status 1: tilers_gemm_m64: parameter 'A' is a NULL pointer" in result.stdout
    assert "a misaligned A -> status 1:" in result.stdout
    # two kernels in one exported call, with the caller's workspace
    assert "ok: splitk_gemm M=100 matches the CPU reference" in result.stdout
    a = torch.from_numpy(numpy.fromfile(dump / "gemm_a.bin", dtype="float16"))
    b = torch.from_numpy(numpy.fromfile(dump / "gemm_b.bin", dtype="float16"))
    c = torch.from_numpy(numpy.fromfile(dump / "gemm_c.bin", dtype="float16"))
    want = (a.reshape(100, 1024).cuda() @ b.reshape(1024, 1024).cuda()).cpu()
    torch.testing.assert_close(c.reshape(100, 1024), want, rtol=2e-3, atol=2e-2)
    x = torch.from_numpy(numpy.fromfile(dump / "softmax_x.bin", dtype="float32"))
    y = torch.from_numpy(numpy.fromfile(dump / "softmax_y.bin", dtype="float32"))
    want = torch.softmax(x.reshape(4096, 1000).cuda(), dim=1).cpu()
    torch.testing.assert_close(y.reshape(4096, 1000), want, rtol=1e-5, atol=1e-6)


def test_an_exported_launcher_runs_on_torch_tensors(tmp_path, monkeypatch):
    monkeypatch.delenv("TILERS_LIBCUDA", raising=False)
    kernel = compiled("matmul_dynamic_m")
    header, source = tilers._tilers.export_c(json.dumps(kernel.info), kernel.cubin, "mmd")
    e = Export(tmp_path, "mmd", header, source, kernel.info)
    stream = torch.cuda.current_stream().cuda_stream
    for m in [1, 33, 200]:
        a = torch.randn(m, 256, device="cuda", dtype=torch.float16)
        b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        c = torch.full((m, 256), float("nan"), device="cuda", dtype=torch.float16)
        args = [tensor(t.data_ptr(), list(t.shape)) for t in (a, b, c)]
        assert e.launch(*args, stream=stream) == 0, e.error
        torch.cuda.synchronize()
        torch.testing.assert_close(c, a @ b, rtol=2e-3, atol=2e-2)
    # a misaligned view: refused, nothing written
    c.fill_(7)
    base = torch.zeros(m * 256 + 8, device="cuda", dtype=torch.float16)
    view = base[1 : 1 + m * 256].view(m, 256)  # 2 bytes past a 16-byte boundary
    bad = [tensor(view.data_ptr(), [m, 256]), tensor(b.data_ptr(), [256, 256]),
           tensor(c.data_ptr(), [m, 256])]
    assert e.launch(*bad, stream=stream) == 1
    assert "16-byte aligned data pointer" in e.error
    torch.cuda.synchronize()
    assert bool((c == 7).all())


@pytest.mark.parametrize("persistent", [True, False])
def test_an_exported_clustered_kernel_runs(tmp_path, monkeypatch, persistent):
    """Clusters along x: persistent on whole clusters, a tile per block as its grid."""
    monkeypatch.delenv("TILERS_LIBCUDA", raising=False)
    import kernels

    f = kernels.matmul(1000, 1024, 520, 128, 128, 64, 4, 128)
    kernel = tilers.compile(f, out_idx=[2], cluster=(2, 1), persistent=persistent)
    assert kernel.info["cluster"] == [2, 1, 1], kernel.report()
    header, source = tilers._tilers.export_c(json.dumps(kernel.info), kernel.cubin, "mmc")
    e = Export(tmp_path, "mmc", header, source, kernel.info)
    a = torch.randn(1000, 520, device="cuda", dtype=torch.float16)
    b = torch.randn(520, 1024, device="cuda", dtype=torch.float16)
    c = torch.full((1000, 1024), float("nan"), device="cuda", dtype=torch.float16)
    args = [tensor(t.data_ptr(), list(t.shape)) for t in (a, b, c)]
    assert e.launch(*args, stream=torch.cuda.current_stream().cuda_stream) == 0, e.error
    torch.cuda.synchronize()
    assert torch.equal(c, kernel(a, b))
