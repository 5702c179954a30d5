"""The FlashAttention forward of examples/flash_attention.py on the CPU: the interpreter
against float64 numpy (ragged sequence lengths, causal or not, head dims 64 and 128, fp16 and
bf16), every pass checked on the warp model for sm_90a and sm_80, NVRTC compiling the
configurations bench/attention.py times, and what the report says of the two gemms."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")


def inputs(b, n, h, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    np_dtype = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    return [rng.standard_normal((b, n, h, d)).astype(np_dtype) for _ in range(3)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,d", [(100, 64), (64, 128), (130, 64)])
def test_interpreter_against_numpy(n, d, causal, dtype):
    b, h = 1, 2
    k = tilers.compile(fa.flash_attention(b, h, n, d, causal, block_M=64, block_N=32, dtype=dtype),
                       out_idx=[3], target="interp")
    q, kk, v = inputs(b, n, h, d, dtype)
    out = np.asarray(k(q, kk, v)).astype(np.float64)
    want = fa.reference_numpy(q.astype(np.float32), kk.astype(np.float32), v.astype(np.float32), causal)
    tol = 2e-3 if dtype == "float16" else 2e-2
    assert np.abs(out - want).max() < tol


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("causal", [False, True])
def test_every_pass_agrees(arch, causal):
    f = fa.flash_attention(1, 1, 96, 64, causal, block_M=64, block_N=32)
    result = tilers.testing.check_passes(f, arch=arch, blocks="all")
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("config", [(128, 64, 2, 128), (128, 128, 2, 256), (64, 64, 3, 128)])
@pytest.mark.parametrize("d", [64, 128])
def test_nvrtc_compiles_the_benchmarked_configs(config, d):
    bm, bn, st, th = config
    k = tilers.compile(fa.flash_attention(2, 4, 1024, d, True, bm, bn, st, th), out_idx=[3],
                       target="cuda:sm_90a")
    assert k.cubin[:4] == b"\x7fELF"
    report = k.report()
    # P stays in registers: the accumulator of the first gemm, cast, is the second's A
    assert "'acc_s_cast' placed in shared memory" not in report, report
    assert "A from registers" in report, report


def test_p_moves_from_the_mma_accumulator_to_the_a_operand_in_registers():
    # on mma.sync the two fragments hold the same elements per thread in another register
    # order: the copy is a permutation of each thread's registers (checked on the model)
    k = tilers.compile(fa.flash_attention(1, 1, 96, 64, False, block_M=64, block_N=32), out_idx=[3],
                       target="cuda:sm_80")
    assert "'acc_s_cast' placed in shared memory" not in k.report()
    assert "operands by A from registers" in k.report(), k.report()


def test_the_example_runs_on_the_interpreter(capsys):
    sys.argv = ["flash_attention.py", "--causal"]
    fa.main()
    assert "check: OK" in capsys.readouterr().out
