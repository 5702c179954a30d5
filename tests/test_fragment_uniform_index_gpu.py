"""Fragments indexed by a uniform value (a T.serial variable, a constant, a block index)
beside T.Parallel variables, on the GPU: TileLang's split-K combine and the staged rows
against numpy, on sm_90a and the mma.sync path."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_fragment_uniform_index import (
    combine,
    combine_inputs,
    combine_reference,
    doubled,
    picked,
    staged,
    staged_reference,
)

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("options", [{}, {"wgmma": False}])
def test_combine_matches_numpy(seed, options):
    kernel = tilers.compile(combine(), out_idx=[2], **options)
    glse, partial = combine_inputs(seed)
    out = kernel(torch.from_numpy(glse).cuda(), torch.from_numpy(partial).cuda())
    np.testing.assert_allclose(out.float().cpu().numpy(), combine_reference(glse, partial), rtol=1e-2, atol=1e-2)


def test_staged_rows_match_numpy():
    A = np.random.default_rng(5).standard_normal((6, 64)).astype(np.float32)
    out = tilers.compile(staged(), out_idx=[1])(torch.from_numpy(A).cuda())
    np.testing.assert_allclose(out.cpu().numpy(), staged_reference(A), rtol=1e-5, atol=1e-5)


def test_a_block_index_as_the_row_matches_numpy():
    A = np.random.default_rng(6).standard_normal((4, 64)).astype(np.float32)
    out = tilers.compile(picked(), out_idx=[1])(torch.from_numpy(A).cuda())
    np.testing.assert_allclose(out.cpu().numpy(), (A + np.arange(4)[:, None]) * 2.0, rtol=1e-6)


def test_a_fragment_of_the_same_rank_used_first_matches_numpy():
    A = np.random.default_rng(8).standard_normal((4, 128)).astype(np.float32)
    out = tilers.compile(doubled(), out_idx=[1])(torch.from_numpy(A).cuda())
    np.testing.assert_allclose(out.cpu().numpy(), 2.0 * A.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)
