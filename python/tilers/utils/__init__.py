"""TileLang's ``tilelang.utils`` names that its examples use: ``tilers.utils.tensor``."""

from . import tensor
from .tensor import TensorSupplyType, get_tensor_supply, map_torch_type, torch_assert_close

__all__ = ["TensorSupplyType", "get_tensor_supply", "map_torch_type", "tensor", "torch_assert_close"]
