"""PyTorch side of bitforge: quantization-aware, low-rank and KAN layers, recipes and task generators.

Importing this package registers the ``bitforge::fake_quant`` custom op, which ``torch.export.load``
needs to read archives of quantized models.
"""
from __future__ import annotations

from .datasets import jet_like, t1_regime1
from .kan import KANError, KANLayer, bspline_basis
from .lowrank import LowRankError, LowRankLinear
from .quant import InputQuant, QuantLinear, fake_quant
from .recipes import Recipe, RecipeError, get_recipe, list_recipes

__all__ = [
    "fake_quant", "InputQuant", "QuantLinear", "LowRankLinear", "LowRankError", "KANLayer", "KANError",
    "bspline_basis", "jet_like", "t1_regime1", "Recipe", "RecipeError", "get_recipe", "list_recipes",
]
