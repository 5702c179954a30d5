"""``tilers.tools.plot_layout(layout, save_directory="./tmp", name="layout", formats="pdf")``:
a grid picture of a user layout. For a ``T.Layout`` each cell of the input grid (the
layout's shape, leading dimensions folded into rows, or ``grid_shape``) shows the storage
index the layout gives it, colored by it (``view="output"``: the storage grid, each cell the
input index it holds). For a ``T.Fragment`` each element shows the thread that holds it (and
its index in the thread, when the fragment says). Files go to ``save_directory/name.FORMAT``
for each of ``formats`` ("pdf", "png", "svg", "all" or a comma-separated list); needs
matplotlib (``pip install matplotlib``)."""

from __future__ import annotations

import os

import numpy as np

from .._user_layout import Fragment, Layout, _outputs

LABELED_CELLS = 1024


def _formats(formats) -> list[str]:
    if isinstance(formats, str):
        text = formats.strip().lower()
        items = ["pdf", "png", "svg"] if text == "all" else [f.strip() for f in text.split(",") if f.strip()]
    else:
        items = [str(f).strip().lower() for f in formats]
    bad = [f for f in items if f not in ("pdf", "png", "svg")]
    if bad or not items:
        raise ValueError(f"parameter 'formats': expected pdf, png, svg or all, got {formats!r}")
    return items


def _fixed_shape(shape, what):
    if not all(isinstance(d, int) for d in shape):
        raise ValueError(f"plot_layout: the {what} shape {list(shape)} must be fixed ints")
    return tuple(shape)


def _evaluate(fn, shape):
    idx = np.indices(shape).reshape(len(shape), -1)
    outs = _outputs(fn, [idx[k] for k in range(len(shape))])
    return [np.broadcast_to(np.asarray(o, dtype=np.int64), idx.shape[1:]) for o in outs]


def _grid(values, shape, grid_shape):
    n = int(np.prod(shape))
    if grid_shape is not None:
        rows, cols = grid_shape
        if rows * cols != n:
            raise ValueError(f"parameter 'grid_shape': {rows}x{cols} is not the layout's {n} elements")
    else:
        cols = shape[-1]
        rows = n // cols
    return values.reshape(rows, cols)


def plot_layout(layout, save_directory="./tmp", name: str = "layout", colormap: str | None = None,
                verbose: bool = False, formats="pdf", view: str = "input", grid_shape=None) -> list[str]:
    """Draw ``layout`` and return the paths written (see the module's docstring)."""
    if not isinstance(layout, (Layout, Fragment)):
        raise TypeError(f"parameter 'layout': expected a T.Layout or a T.Fragment, got {type(layout).__name__}")
    if view not in ("input", "output"):
        raise ValueError(f"parameter 'view': expected 'input' or 'output', got {view!r}")
    kinds = _formats(formats)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError(f"plot_layout needs matplotlib: pip install matplotlib ({err})") from None
    shape = _fixed_shape(layout.input_shape, "input")
    if isinstance(layout, Layout):
        out_shape = _fixed_shape(layout.output_shape, "output")
        storage = np.ravel_multi_index(tuple(_evaluate(layout.fn, shape)), out_shape)
        if view == "input":
            values, labels = storage, storage
        else:
            values = np.full(int(np.prod(out_shape)), -1, dtype=np.int64)
            values[storage] = np.arange(storage.size)
            labels, shape = values, out_shape
        grid = _grid(values, shape, grid_shape if view == "input" else None)
        text = _grid(labels, shape, grid_shape if view == "input" else None).astype(str)
        cmap = colormap or "Spectral"
        title = f"{layout!r}" + (" (storage view)" if view == "output" else "")
    else:
        thread_fn = layout.forward_thread_fn
        if thread_fn is None:
            raise ValueError("plot_layout: this T.Fragment has no forward_thread_fn to draw")
        thread = _evaluate(thread_fn, shape)[0]
        grid = _grid(thread, shape, grid_shape)
        if layout.forward_index_fn is not None:
            index = _evaluate(layout.forward_index_fn, shape)[0]
            text = np.char.add(np.char.add("T", thread.astype(str)), np.char.add(":", index.astype(str)))
        else:
            text = np.char.add("T", thread.astype(str))
        text = _grid(text, shape, grid_shape)
        cmap = colormap or "RdPu"
        title = f"{layout!r}"
    rows, cols = grid.shape
    fig, ax = plt.subplots(figsize=(max(4, cols * 0.45), max(3, rows * 0.45)))
    ax.imshow(grid, cmap=cmap, aspect="auto")
    if grid.size <= LABELED_CELLS:
        for r in range(rows):
            for c in range(cols):
                ax.text(c, r, text[r, c], ha="center", va="center", fontsize=6)
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.tick_params(labelsize=6)
    ax.set_title(title, fontsize=8)
    os.makedirs(save_directory, exist_ok=True)
    paths = []
    for kind in kinds:
        path = os.path.join(save_directory, f"{name}.{kind}")
        fig.savefig(path, bbox_inches="tight")
        paths.append(path)
        if verbose:
            print(f"plot_layout: wrote {path}")
    plt.close(fig)
    return paths
