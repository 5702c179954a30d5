"""tests/test_shifts.py's kernels on the GPU against the interpreter: a run-time count at or
past the width (or negative) shifts every bit out on both (PTX shl/shr clamp the count)."""

import os
import sys

import numpy as np
import pytest
import tilers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_shifts as ts  # noqa: E402


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64", "int8", "int16"])
def test_gpu_shifts_match_the_interpreter(dtype):
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    a, s = ts.inputs(dtype)
    host = [a.copy(), s.copy(), np.zeros_like(a), np.zeros_like(a)]
    tilers.compile(ts.shifts(dtype), target="interp")(*host)
    kernel = tilers.compile(ts.shifts(dtype))
    dev = [torch.from_numpy(x).cuda() for x in (a, s, np.zeros_like(a), np.zeros_like(a))]
    kernel(*dev)
    for d, h in zip(dev[2:], host[2:]):
        np.testing.assert_array_equal(d.cpu().numpy(), h)
