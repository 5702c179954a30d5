"""Tensors for tests and profiling, by TileLang's names: ``TensorSupplyType``,
``get_tensor_supply``, ``torch_assert_close``, ``map_torch_type``."""

from __future__ import annotations

import enum


class TensorSupplyType(enum.Enum):
    """How the profiler fills a kernel's inputs (``kernel.get_profiler(tensor_supply_type=...)``),
    with TileLang's distributions: Integer (integers in [-2, 2], [0, 2] unsigned: exact in
    every dtype), Uniform (uniform in [-1, 1)), Normal (normal with mean -1 and standard
    deviation 1, as TileLang draws it), Randn (standard normal), Zero, One, Auto (Uniform
    for float16/bfloat16/float32, Integer otherwise). int8 tensors under Uniform and
    Normal are ones."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7

    @property
    def supply_name(self) -> str:
        """The name tilers' Profiler takes (``supply_type="integer"``)."""
        return self.name.lower()


SUPPLY_TYPES = ("auto", "normal", "randn", "uniform", "integer", "zero", "one")


def supply_name(supply_type) -> str:
    """A TensorSupplyType, or tilers' string, as tilers' string."""
    if isinstance(supply_type, TensorSupplyType):
        return supply_type.supply_name
    return supply_type


def map_torch_type(dtype):
    """The torch dtype of a tilers dtype or its name (``"float16"`` -> ``torch.float16``)."""
    from .. import _trace

    return _trace.DType(dtype).as_torch()


def make_tensor(kind: str, shape, torch_dtype, device, generator=None):
    """One tensor of ``shape`` filled as supply type ``kind`` says (see TensorSupplyType)."""
    import torch

    shape = tuple(int(d) for d in shape)
    floating = torch_dtype.is_floating_point
    kw = {"device": device, "generator": generator}
    if kind == "auto":
        kind = "uniform" if torch_dtype in (torch.float16, torch.bfloat16, torch.float32) else "integer"
    if kind == "zero":
        return torch.zeros(shape, dtype=torch_dtype, device=device)
    if kind == "one" or (torch_dtype is torch.int8 and kind in ("uniform", "normal")):
        return torch.ones(shape, dtype=torch_dtype, device=device)
    if kind == "integer" or not floating:
        if torch_dtype is torch.bool:
            return torch.randint(0, 2, shape, **kw).bool()
        low = 0 if str(torch_dtype).startswith("torch.uint") else -2
        return torch.randint(low, 3, shape, **kw).to(torch_dtype)
    if kind == "uniform":
        return (torch.rand(shape, **kw) * 2 - 1).to(torch_dtype)
    if kind == "normal":
        return (torch.randn(shape, **kw) - 1).to(torch_dtype)
    return torch.randn(shape, **kw).to(torch_dtype)


def get_tensor_supply(supply_type=TensorSupplyType.Integer):
    """A function ``(shape, dtype) -> tensor`` on the current CUDA device, filled as
    ``supply_type`` says (see TensorSupplyType)."""
    kind = supply_name(supply_type)

    def supply(shape, dtype):
        import torch

        torch_dtype = map_torch_type(dtype) if not isinstance(dtype, torch.dtype) else dtype
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return make_tensor(kind, shape, torch_dtype, device)

    return supply


def torch_assert_close(
    tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, verbose=False,
    equal_nan=True, check_device=True, check_dtype=True, check_layout=True,
    check_stride=False, base_name="LHS", ref_name="RHS",
):
    """True when at most ``max_mismatched_ratio`` of the elements differ by more than
    ``atol + rtol * |b|``; else AssertionError with the count, the first mismatch and the
    largest errors."""
    import torch

    a = torch.as_tensor(tensor_a)
    b = torch.as_tensor(tensor_b)
    if tuple(a.shape) != tuple(b.shape):
        raise AssertionError(
            f"{base_name} has shape {tuple(a.shape)}, {ref_name} has shape {tuple(b.shape)}"
        )
    if check_device and a.device != b.device:
        raise AssertionError(f"{base_name} is on {a.device}, {ref_name} on {b.device}")
    if check_dtype and a.dtype != b.dtype:
        raise AssertionError(f"{base_name} is {a.dtype}, {ref_name} is {b.dtype}")
    if check_layout and a.layout != b.layout:
        raise AssertionError(f"{base_name} has layout {a.layout}, {ref_name} has {b.layout}")
    if check_stride and a.stride() != b.stride():
        raise AssertionError(f"{base_name} has strides {a.stride()}, {ref_name} has {b.stride()}")
    a64 = a.detach().to("cpu" if a.device != b.device else a.device).double()
    b64 = b.detach().to(a64.device).double()
    close = torch.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=equal_nan)
    mismatched = int((~close).sum())
    allowed = int(a.numel() * max_mismatched_ratio)
    if mismatched > allowed:
        index = tuple(int(i) for i in (~close).nonzero()[0])
        error = (a64 - b64).abs()
        relative = error / b64.abs().clamp_min(1e-30)
        raise AssertionError(
            f"{mismatched} of {a.numel()} elements differ (allowed {allowed}, "
            f"max_mismatched_ratio={max_mismatched_ratio}); first at {index}: "
            f"{base_name}={float(a64[index])} {ref_name}={float(b64[index])}; largest "
            f"absolute error {float(error[~close].max()):.4g}, relative "
            f"{float(relative[~close].max()):.4g} (rtol={rtol}, atol={atol})"
        )
    if verbose:
        print(f"{base_name} and {ref_name} agree: {mismatched} of {a.numel()} elements differ")
    return True
