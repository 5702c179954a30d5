"""tilers.tools.plot_layout (TileLang's tilelang.tools.plot_layout) and the fixed bank
swizzles as layouts (make_{full,half,quarter}_bank_swizzled_layout(rows, cols, bits)):
the layouts against the XOR pattern computed here, the pictures written where asked."""

import os

import numpy as np
import pytest
import tilers.language as T
from tilers.layout import (
    make_full_bank_swizzled_layout,
    make_half_bank_swizzled_layout,
    make_quarter_bank_swizzled_layout,
)


@pytest.mark.parametrize("make,line", [(make_full_bank_swizzled_layout, 128), (make_half_bank_swizzled_layout, 64),
                                       (make_quarter_bank_swizzled_layout, 32)])
@pytest.mark.parametrize("bits", [16, 32])
def test_the_bank_swizzles_permute_16_byte_chunks_by_row(make, line, bits):
    vector = 128 // bits
    chunks = line // 16
    rows, cols = 16, vector * chunks * 2
    layout = make(rows, cols, bits)
    assert layout._collision(rows * cols) is None  # a bijection
    i, j = np.indices((rows, cols))
    out = [np.asarray(o) for o in layout.map_forward_index([i, j])]
    storage = np.ravel_multi_index(out, layout.get_output_shape())
    # within one row of 8-row groups, chunk c of a line lands at chunk c ^ (row bits)
    s = i % 8
    chunk = (j // vector) % chunks
    swizzled = chunk ^ (s // (8 // chunks))
    assert (out[2] == j % vector + (swizzled + s * chunks) * vector).all()
    # elements of one 16-byte chunk stay together, in order
    assert (np.diff(storage.reshape(rows, -1, vector), axis=2) == 1).all()
    with pytest.raises(ValueError, match="columns must be a multiple"):
        make(8, vector, bits) if chunks > 1 else make(8, vector + 1, bits)


def test_plot_layout_writes_each_format(tmp_path):
    pytest.importorskip("matplotlib")
    from tilers.tools import plot_layout

    paths = plot_layout(T.Layout([4, 4], lambda i, j: (j, i)), save_directory=str(tmp_path), name="t",
                        formats="png,svg")
    assert [os.path.basename(p) for p in paths] == ["t.png", "t.svg"] and all(os.path.getsize(p) for p in paths)
    plot_layout(make_full_bank_swizzled_layout(32, 64, 16), save_directory=str(tmp_path), name="s", formats="png")
    plot_layout(T.Layout([2, 4, 8], lambda i, j, k: (k, i * 4 + j)), save_directory=str(tmp_path), name="r",
                view="output", formats="png")
    frag = T.Fragment((16, 16), forward_thread_fn=lambda i, j: (i * 16 + j) // 8, forward_index_fn=lambda i, j: j % 8)
    plot_layout(frag, save_directory=str(tmp_path), name="f", formats="all")
    assert sorted(os.listdir(tmp_path)) == ["f.pdf", "f.png", "f.svg", "r.png", "s.png", "t.png", "t.svg"]


def test_plot_layout_refuses_bad_arguments(tmp_path):
    pytest.importorskip("matplotlib")
    from tilers.tools import plot_layout

    with pytest.raises(TypeError, match="parameter 'layout'"):
        plot_layout("not a layout")
    with pytest.raises(ValueError, match="parameter 'formats'"):
        plot_layout(T.Layout([4, 4], lambda i, j: (j, i)), save_directory=str(tmp_path), formats="jpeg")
    with pytest.raises(ValueError, match="parameter 'grid_shape'"):
        plot_layout(T.Layout([4, 4], lambda i, j: (j, i)), save_directory=str(tmp_path), grid_shape=(3, 3))
