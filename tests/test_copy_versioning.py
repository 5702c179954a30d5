"""A `cp.async` tile copy that may reach past its tensor's edge is versioned on the tile:
`if (the region lies inside) { unchecked chunks } else { checked, zero-filled chunks }`
(lower/copy.rs), so that only the tiles at an edge pay each chunk's bounds check. Checked
here: both versions are emitted where the bound is not known at compile time and neither
where it is; every pass agrees on the CPU model; the interpreter matches numpy on tiles
inside, at the edge and past a length read from memory."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing

UNCHECKED = 'cp.async.cg.shared.global [%0], [%1], 16;"'
CHECKED = 'cp.async.cg.shared.global [%0], [%1], 16, %2;"'


def row_stream(B, S, D, block_N, stages, threads=64):
    """out[b] = the sum of the first ceildiv(lengths[b], block_N) tiles of block_N rows of
    X[b] (rows past S read as zeros; lengths clamped to [0, S]): the decode-attention pattern of a trip count read from
    memory and a tile that may end past the tensor."""

    @T.prim_func
    def kern(X: T.Tensor((B, S, D), "float16"), lengths: T.Tensor((B,), "int32"),
             out: T.Tensor((B, block_N, D), "float32")):
        with T.Kernel(B, threads=threads) as b:
            xs = T.alloc_shared((block_N, D), "float16")
            acc = T.alloc_fragment((block_N, D), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(T.max(T.min(lengths[b], S), 0), block_N), num_stages=stages):
                T.copy(X[b, k * block_N:(k + 1) * block_N, :], xs)
                for i, j in T.Parallel(block_N, D):
                    acc[i, j] += T.cast(xs[i, j], "float32")
            T.copy(acc, out[b, :, :])

    return kern


def expected(x, lengths, block_N):
    B, S, D = x.shape
    tiles = -(-S // block_N)
    padded = np.zeros((B, tiles * block_N, D), np.float32)
    padded[:, :S] = x
    out = np.zeros((B, block_N, D), np.float32)
    for b in range(B):
        for k in range(-(-int(lengths[b]) // block_N)):
            out[b] += padded[b, k * block_N:(k + 1) * block_N]
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_both_versions_where_the_edge_is_unknown(arch):
    src = tilers.compile(row_stream(2, 100, 64, 32, 2), out_idx=[2], target=f"cuda:{arch}").get_kernel_source()
    assert UNCHECKED in src and CHECKED in src
    # the test is one comparison on the tile's last row (k + 1's: the copy issued ahead),
    # not one per chunk
    assert "if ((((k * 32) + 63) < 100))" in src


def test_no_version_where_tiles_divide():
    src = tilers.compile(row_stream(2, 128, 64, 32, 2), out_idx=[2], target="cuda:sm_80").get_kernel_source()
    # 128 rows, but a length from memory may ask for a fifth tile: still versioned
    assert CHECKED in src
    # a fixed trip count whose tiles divide the tensor: no check, no second version

    @T.prim_func
    def fixed(X: T.Tensor((2, 128, 64), "float16"), out: T.Tensor((2, 32, 64), "float32")):
        with T.Kernel(2, threads=64) as b:
            xs = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((32, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(X[b, k * 32:(k + 1) * 32, :], xs)
                for i, j in T.Parallel(32, 64):
                    acc[i, j] += T.cast(xs[i, j], "float32")
            T.copy(acc, out[b, :, :])

    src = tilers.compile(fixed, out_idx=[1], target="cuda:sm_80").get_kernel_source()
    assert UNCHECKED in src and CHECKED not in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_every_pass_agrees(arch, stages):
    testing.check_passes(row_stream(2, 100, 64, 32, stages), arch=arch, check=True)


@pytest.mark.parametrize("S,lengths", [(100, [100, 64]), (100, [1, 33]), (96, [96, 95]), (100, [0, 97])])
def test_against_numpy(S, lengths):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, S, 64)).astype(np.float16)
    lengths = np.array(lengths, np.int32)
    out = tilers.compile(row_stream(2, S, 64, 32, 2), out_idx=[2])(x, lengths)
    np.testing.assert_allclose(out, expected(x.astype(np.float32), lengths, 32), rtol=1e-3, atol=1e-3)
