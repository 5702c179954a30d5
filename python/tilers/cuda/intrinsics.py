"""``tilers.cuda.intrinsics.make_mma_swizzle_layout``: the shared-memory layout TileLang's
hand-written kernels annotate on tiles they read and write element by element."""

from __future__ import annotations

from .. import _trace
from .. import language as T


def make_mma_swizzle_layout(buffer, is_smooth: bool = False):
    """The XOR-swizzled layout of a shared tile whose rows are a multiple of 64 bytes, as a
    ``T.Layout`` for ``T.annotate_layout({s: make_mma_swizzle_layout(s)})``: the 16-byte
    chunks of each row, taken in spans of up to 128 bytes, are permuted by the row's
    position in its group of 8 (``chunk ^ row % 8`` for 128-byte spans), and the spans are
    stored one after another. Rows of other widths, or ``is_smooth=True``, keep the plain
    row-major layout. Element accesses read and write the same values either way: the
    layout only moves where they live."""
    loc = _trace.capture()
    if not isinstance(buffer, _trace.Buffer):
        raise _trace.user_error(
            f"make_mma_swizzle_layout takes a buffer, got {type(buffer).__name__}", loc=loc
        )
    shape = tuple(buffer.shape)
    bits = _trace.dtype_bytes(buffer.dtype) * 8
    if len(shape) < 2:
        raise _trace.user_error(
            f"make_mma_swizzle_layout: '{buffer.name}' has {len(shape)} dimension(s); it lays out 2-D rows",
            loc=loc,
        )
    cols = shape[-1]
    if is_smooth or (cols * bits) % 512 != 0 or bits > 128:
        return T.Layout(shape, lambda *idx: list(idx))
    per_chunk = 128 // bits  # elements in 16 bytes
    span = min(128, cols * bits // 8) // 16  # 16-byte chunks in one swizzled span
    rows_per_step = 8 // span

    def fn(*idx):
        *lead, i, j = idx
        chunk = j // per_chunk
        permuted = (chunk % span) ^ ((i % 8) // rows_per_step)
        return [*lead, chunk // span, i, permuted * per_chunk + j % per_chunk]

    return T.Layout(shape, fn)


__all__ = ["make_mma_swizzle_layout"]
