"""Shared fixtures: small hand-built IR graphs that exercise every node type.

Also: the Triton kernel tests (tests/llm) run in Triton's interpreter unless the caller chose otherwise.
``TRITON_INTERPRET`` must be set before Triton is imported (``triton.jit`` reads it when a kernel is defined), and
this conftest is imported before any test module, in each pytest-xdist worker too. On a GPU machine
``TRITON_INTERPRET=0 pytest tests/llm`` runs the same tests on the compiled kernels. (A conftest.py in tests/llm
would shadow this one for the modules that ``from conftest import ...``.)
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from bitforge.toolchain import ir
from bitforge.toolchain.bspline import index_params
from bitforge.toolchain.fixed import FixedType, parse_type, quantize

os.environ.setdefault("TRITON_INTERPRET", "1")


def small_graph(seed: int = 0, act: str = "fixed<16,6,RND_CONV,SAT>", wt: str = "fixed<8,2,RND_CONV,SAT>") -> ir.Graph:
    """Quantize -> Dense -> ReLU -> LowRankDense -> KANLayer, plus an Add skip: every op once."""
    rng = np.random.default_rng(seed)
    X, W = parse_type(act), parse_type(wt)
    acc = FixedType(X.width + W.width + 8, X.integer + W.integer + 8)
    dense = ir.Dense("fc1", ("x",), ("h1",), weight=quantize(rng.normal(size=(6, 4)), W),
                     bias=quantize(rng.normal(size=6), W), weight_type=W, bias_type=W, accum_type=acc)
    lr = ir.LowRankDense("lr", ("r1",), ("h2",), u=quantize(rng.normal(size=(6, 2)), W),
                         v=quantize(rng.normal(size=(2, 6)), W), bias=quantize(rng.normal(size=6), W),
                         u_type=W, v_type=W, bias_type=W, mid_type=X, accum_v_type=acc, accum_type=acc)
    kt, bt = X, parse_type("ufixed<13,1,RND_CONV,SAT>")
    lo, mult, shift, ub = index_params(-4.0, 4.0, 5, X)
    kan = ir.KANLayer("kan", ("s",), ("y",), coeffs=quantize(rng.normal(size=(3, 6, 8)), kt), grid_lo=-4.0,
                      grid_hi=4.0, grid_size=5, order=3, coeff_type=kt, basis_type=bt, u_bits=ub, index_lo=lo,
                      index_mult=mult, index_shift=shift,
                      accum_type=FixedType(kt.width + bt.width + 6, kt.integer + bt.integer + 6))
    t = lambda name, n: ir.TensorSpec(name, (n,), X)  # noqa: E731
    tensors = {"in": ir.TensorSpec("in", (4,), None), "x": t("x", 4), "h1": t("h1", 6), "r1": t("r1", 6),
               "h2": t("h2", 6), "s": t("s", 6), "y": t("y", 3)}
    nodes = [ir.Quantize("q", ("in",), ("x",)), dense, ir.ReLU("relu", ("h1",), ("r1",)), lr,
             ir.Add("skip", ("h2", "r1"), ("s",)), kan]
    return ir.Graph("small", ["in"], ["y"], tensors, nodes, {"input_range": [-3.0, 3.0]})


@pytest.fixture
def graph() -> ir.Graph:
    return ir.validate(small_graph())


@pytest.fixture(scope="module")
def one_thread():
    """Small matrices: BLAS threads only contend on the shared 2-core runners (LittleBit's ITQ ran 15x slower with
    two). Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
