"""Where the package data lives: the Verilog library (``rtl/``).

Found through ``importlib.resources`` so an installed wheel works away from the checkout.
"""
from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable


def rtl_library() -> Traversable:
    """The folder of hand-written Verilog modules (package ``bitforge.rtl``)."""
    return resources.files("bitforge.rtl")
