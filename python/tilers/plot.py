"""Pictures of layouts: which thread and register hold each fragment element, which bank each shared element uses."""

from __future__ import annotations

import numpy as np

BANKS = 32
BANK_BYTES = 4
# at most this many cells carry a text label; larger tiles are drawn as colors only
LABELED_CELLS = 1024


def fragment_owners(layout: dict) -> tuple[np.ndarray, np.ndarray]:
    """(thread, register slot) of every element of a fragment, as arrays of its shape.

    ``layout`` is a buffer's entry of the layouts ``_tilers.inspect`` returns: each dimension's index is a mixed-radix
    number whose digits come from the thread or the slot (``FragmentLayout::locate``); for
    a replicated layout, the lowest thread holding the element.
    """
    extents = layout["extents"]
    thread = np.zeros(extents, dtype=np.int64)
    slot = np.zeros(extents, dtype=np.int64)
    for d, digits in enumerate(layout["dims"]):
        index = np.arange(extents[d])
        thread_part = np.zeros(extents[d], dtype=np.int64)
        slot_part = np.zeros(extents[d], dtype=np.int64)
        for g in digits:
            value = (index // g["step"]) % g["size"]
            if "thread" in g:
                thread_part += value * g["thread"]
            else:
                slot_part += value * g["slot"]
        shape = [1] * len(extents)
        shape[d] = extents[d]
        thread += thread_part.reshape(shape)
        slot += slot_part.reshape(shape)
    return thread, slot


def shared_banks(buffer: dict) -> np.ndarray:
    """The bank (0-31) of every element of a shared buffer, as an array of its shape.

    Banks are 4 bytes wide; a swizzled buffer's byte offsets go through its swizzle functor
    ``<bits, base, shift>`` (tile_ir::Swizzle: the ``bits`` bits from ``base`` XOR the
    ``bits`` bits ``shift`` above them), measured from the buffer's offset.
    """
    element_bytes = _dtype_bytes(buffer["dtype"])
    shape = buffer["shape"]
    byte = np.arange(int(np.prod(shape)), dtype=np.int64) * element_bytes
    swizzle = buffer["swizzle"]
    if swizzle:
        mask = (1 << swizzle["bits"]) - 1
        line = swizzle["base"] + swizzle["shift"]
        byte = byte ^ (((byte >> line) & mask) << swizzle["base"])
    address = (buffer["offset"] or 0) + byte
    return ((address // BANK_BYTES) % BANKS).reshape(shape)


def _dtype_bytes(dtype: str) -> int:
    from ._trace import dtype_bytes

    return dtype_bytes(dtype)


def _last_two_dims(values: np.ndarray) -> tuple[np.ndarray, str]:
    """A 2-D view for drawing, rows x columns: the first slice of any leading dimensions."""
    if values.ndim == 1:
        return values.reshape(1, -1), ""
    if values.ndim == 2:
        return values, ""
    lead = values.shape[:-2]
    return values[(0,) * len(lead)], f" (its [{', '.join('0' * len(lead))}] slice)"


# One picture: (title, colors as ints, colormap, number of colors, labels or None).
Panel = tuple


def fragment_panels(buffer: dict) -> list:
    """A fragment: thread:register labels on the whole tile when it is small, else the
    block's warps over the whole tile and the labels of its top-left 16x16 corner."""
    layout = buffer["layout"]
    thread, slot = (_last_two_dims(a)[0] for a in fragment_owners(layout))
    labels = np.char.add(np.char.add(thread.astype(str), ":"), slot.astype(str))
    if thread.size <= LABELED_CELLS:
        return [("thread:register of each element", thread % 20, "tab20", 20, labels)]
    rows, cols = min(thread.shape[0], 16), min(thread.shape[1], 16)
    warps = max(1, -(-layout["active_threads"] // 32))
    return [
        ("warp of each element (thread // 32)", thread // 32, _warp_colormap(warps), warps, None),
        (
            f"rows 0-{rows - 1}, columns 0-{cols - 1}: thread:register",
            thread[:rows, :cols] % 20,
            "tab20",
            20,
            labels[:rows, :cols],
        ),
    ]


def shared_panels(buffer: dict) -> list:
    """A shared buffer: the bank of each element over one period of the swizzle (8 lines of
    at least 128 bytes) and the first 128 bytes of each row (a swizzle keeps chunks within
    their 128 bytes), so every bank shows."""
    banks, _ = _last_two_dims(shared_banks(buffer))
    element_bytes = _dtype_bytes(buffer["dtype"])
    row_bytes = banks.shape[1] * element_bytes
    rows = min(banks.shape[0], 8 * max(1, 128 // row_bytes))
    cols = min(banks.shape[1], max(1, 128 // element_bytes))
    if (rows, cols) == banks.shape:
        title = "bank of each element (4-byte banks)"
    else:
        title = (
            f"bank of each element (4-byte banks), rows 0-{rows - 1}, columns 0-{cols - 1}: "
            "the pattern repeats over the rest"
        )
    crop = banks[:rows, :cols]
    return [(title, crop, _bank_colormap(), BANKS, crop.astype(str))]


def plot_layout(buffer: dict, path) -> None:
    """Draw one buffer of the layouts (``_tilers.inspect``) into a PNG (or any format matplotlib writes)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "kernel.plot_layout needs matplotlib: pip install 'tilers[plot]' (or matplotlib)"
        ) from error

    _, note = _last_two_dims(np.zeros(buffer["shape"]))
    head = f"{buffer['scope']} {buffer['name']}: {buffer['dtype']}{buffer['shape']}{note}"
    if buffer["scope"] == "fragment":
        layout = buffer["layout"]
        head += f", {layout['active_threads']} threads, {layout['slots']} registers each"
        if layout["replicated"]:
            head += "; replicated: the lowest thread holding an element is shown"
        panels = fragment_panels(buffer)
    else:
        head += ", swizzled" if buffer["swizzle"] else ", not swizzled"
        panels = shared_panels(buffer)

    # labeled cells are big enough for "127:63"; a picture without labels is a fixed size
    cell = 0.42
    sizes = [
        (7.0, 6.0)
        if labels is None
        else (
            min(max(colors.shape[1] * cell + 1.2, 4.0), 40.0),
            min(max(colors.shape[0] * cell + 1.2, 2.0), 40.0),
        )
        for _, colors, _, _, labels in panels
    ]
    widths = [w for w, _ in sizes]
    figure = Figure(figsize=(sum(widths), max(h for _, h in sizes) + 0.6))
    FigureCanvasAgg(figure)
    figure.suptitle(head, fontsize=10)
    grid = figure.add_gridspec(1, len(panels), width_ratios=widths)
    for k, (title, colors, colormap, count, labels) in enumerate(panels):
        axes = figure.add_subplot(grid[0, k])
        image = axes.imshow(
            colors, cmap=colormap, vmin=-0.5, vmax=count - 0.5, interpolation="nearest"
        )
        axes.set_title(title, fontsize=8)
        axes.set_xlabel("column")
        axes.set_ylabel("row")
        if labels is None:
            ticks = range(count) if count <= 32 else None
            figure.colorbar(image, ax=axes, ticks=ticks, label="warp", shrink=0.8)
            continue
        size = 6 if labels.shape[1] <= 16 else 5
        for r in range(labels.shape[0]):
            for c in range(labels.shape[1]):
                axes.text(c, r, labels[r, c], ha="center", va="center", fontsize=size)
    figure.savefig(path, dpi=110, bbox_inches="tight")


def _warp_colormap(warps: int):
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    colors = list(colormaps["tab20"].colors)
    return ListedColormap([colors[k % 20] for k in range(warps)])


def _bank_colormap():
    """32 distinct colors, one per bank."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    colors = list(colormaps["tab20"].colors) + list(colormaps["tab20b"].colors)[:12]
    return ListedColormap(colors)
