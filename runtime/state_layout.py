"""Where a learner's coefficients sit in a device's state address space, and how words become the golden
model's state arrays.

The addresses are the learner core's read-back port's, which the device wrapper's ``read_state`` serves
unchanged: a KAN learner's word at ``{layer, i, p}`` holds coefficient ``p`` of input ``i`` for every output
of that layer (output 0 in the least significant bits, :func:`~bitforge.toolchain.backends.rtl.learner_kan.
coefficient_address`); an MLP learner's word ``a`` holds one parameter, per layer the weights row by row, then
the biases (:func:`~bitforge.toolchain.backends.rtl.learner_mlp.parameter_order`). Codes are the storage
format's, two's complement.
"""
from __future__ import annotations

import numpy as np

from bitforge.toolchain.learn.spec import Learner

from .protocol import unpack_word


def _kan_addresses(learner: Learner) -> list[tuple[int, int, int, int]]:
    """(address, layer, input, coefficient) of every KAN read-back word."""
    from bitforge.toolchain.backends.rtl.learner_kan import coefficient_address
    out = []
    for layer, n in enumerate(learner.layers()):
        for i in range(n.in_features):
            for p in range(n.grid_size + n.order):
                out.append((coefficient_address(learner, i, p, layer), layer, i, p))
    return out


def addresses(learner: Learner) -> list[int]:
    """Every state address the learner's coefficients occupy, in the order :func:`state_from_words` reads."""
    if learner.spec.kind == "kan":
        return [a for a, *_ in _kan_addresses(learner)]
    from bitforge.toolchain.backends.rtl.learner_mlp import parameter_order
    return list(range(len(parameter_order(learner))))


def state_words_needed(learner: Learner) -> list[tuple[int, int]]:
    """The addresses as ``(first, count)`` runs of consecutive words (one ``read_state`` request each, split
    further by the payload limit)."""
    runs: list[tuple[int, int]] = []
    for a in sorted(set(addresses(learner))):
        if runs and runs[-1][0] + runs[-1][1] == a:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((a, 1))
    return runs


def state_from_words(learner: Learner, words: dict[int, int]) -> list[dict[str, np.ndarray]]:
    """The learner's state (as ``learn.emulate`` keeps it) from ``address -> word``."""
    st = learner.formats.storage
    layers = learner.layers()
    if learner.spec.kind == "kan":
        state = [{"coeffs": np.zeros((n.out_features, n.in_features, n.grid_size + n.order), dtype=np.int64)}
                 for n in layers]
        for a, layer, i, p in _kan_addresses(learner):
            codes = unpack_word(words[a], layers[layer].out_features, st.width, True)
            state[layer]["coeffs"][:, i, p] = codes
        return state
    from bitforge.toolchain.backends.rtl.learner_mlp import parameter_order
    state = [{"weight": np.zeros((n.out_features, n.in_features), dtype=np.int64),
              "bias": np.zeros((n.out_features,), dtype=np.int64)} for n in layers]
    for a, (layer, kind, idx) in enumerate(parameter_order(learner)):
        state[layer]["weight" if kind == "w" else "bias"][idx] = unpack_word(words[a], 1, st.width, True)[0]
    return state
