"""Tensors for tests and profiling, by TileLang's names: ``TensorSupplyType``,
``get_tensor_supply``, ``torch_assert_close``, ``map_torch_type``."""

from __future__ import annotations

import enum


class TensorSupplyType(enum.Enum):
    """How the profiler fills a kernel's inputs (``kernel.get_profiler(tensor_supply_type=...)``):
    Integer (small integers, exact in every dtype), Uniform (uniform in [-1, 1)), Normal and
    Randn (standard normal), Zero, One, Auto (Uniform for float dtypes, Integer otherwise)."""

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
        return {
            "Integer": "integer", "Uniform": "uniform", "Normal": "normal", "Randn": "normal",
            "Zero": "zero", "One": "one", "Auto": "auto",
        }[self.name]


def supply_name(supply_type) -> str:
    """A TensorSupplyType, or tilers' string, as tilers' string."""
    if isinstance(supply_type, TensorSupplyType):
        return supply_type.supply_name
    return supply_type


def map_torch_type(dtype):
    """The torch dtype of a tilers dtype or its name (``"float16"`` -> ``torch.float16``)."""
    from .. import _trace

    return _trace.DType(dtype).as_torch()


def get_tensor_supply(supply_type=TensorSupplyType.Integer):
    """A function ``(shape, dtype) -> tensor`` on the current CUDA device, filled as
    ``supply_type`` says (see TensorSupplyType)."""
    kind = supply_name(supply_type)

    def supply(shape, dtype):
        import torch

        torch_dtype = map_torch_type(dtype) if not isinstance(dtype, torch.dtype) else dtype
        shape = tuple(int(d) for d in shape)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        floating = torch_dtype.is_floating_point
        chosen = kind
        if chosen == "auto":
            chosen = "uniform" if floating else "integer"
        if chosen == "zero":
            return torch.zeros(shape, dtype=torch_dtype, device=device)
        if chosen == "one":
            return torch.ones(shape, dtype=torch_dtype, device=device)
        if chosen == "integer" or not floating:
            if torch_dtype is torch.bool:
                return torch.randint(0, 2, shape, device=device).bool()
            low = 0 if str(torch_dtype).startswith("torch.uint") else -2
            return torch.randint(low, 3, shape, device=device).to(torch_dtype)
        if chosen == "uniform":
            return (torch.rand(shape, device=device) * 2 - 1).to(torch_dtype)
        return torch.randn(shape, device=device).to(torch_dtype)

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
