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


def layout_json(learner: Learner, word_bits: int, words: int) -> dict:
    """The read-back layout as a bundle records it, for clients that do not run bitforge: ``word_bits`` and
    ``words`` (the device's state word and address space, as ``hello`` reports them), the ``storage`` format of
    every code, and per layer and array its ``shape`` and where each element lies: in the word at
    ``first + sum(strides[k] * index[k])``, at bits ``index[packed] * storage width`` and up when ``packed`` names
    an axis (a KAN word holds every output of one coefficient: axis 0), at bit 0 otherwise. Built from the same
    address functions :func:`state_from_words` reads with, and checked against them element by element."""
    st = learner.formats.storage
    storage = {"type": st.to_short(), "width": st.width, "integer": st.integer, "signed": st.signed}
    arrays = []
    if learner.spec.kind == "kan":
        from bitforge.toolchain.backends.rtl.learner_kan import coefficient_address
        for layer, n in enumerate(learner.layers()):
            first = coefficient_address(learner, 0, 0, layer)
            strides = [0, coefficient_address(learner, 1, 0, layer) - first,
                       coefficient_address(learner, 0, 1, layer) - first]
            arrays.append({"layer": layer, "array": "coeffs",
                           "shape": [n.out_features, n.in_features, n.grid_size + n.order], "first": first,
                           "strides": strides, "packed": 0})
        for address, layer, i, p in _kan_addresses(learner):
            a = arrays[layer]
            assert address == a["first"] + i * a["strides"][1] + p * a["strides"][2], (layer, i, p)
    else:
        from bitforge.toolchain.backends.rtl.learner_mlp import parameter_order
        order = parameter_order(learner)
        for layer, n in enumerate(learner.layers()):
            w = order.index((layer, "w", (0, 0)))
            b = order.index((layer, "b", (0,)))
            arrays.append({"layer": layer, "array": "weight", "shape": [n.out_features, n.in_features], "first": w,
                           "strides": [n.in_features, 1], "packed": None})
            arrays.append({"layer": layer, "array": "bias", "shape": [n.out_features], "first": b, "strides": [1],
                           "packed": None})
        by_key = {(a["layer"], a["array"][0]): a for a in arrays}
        for address, (layer, kind, idx) in enumerate(order):
            a = by_key[(layer, kind)]
            assert address == a["first"] + sum(s * k for s, k in zip(a["strides"], idx)), (layer, kind, idx)
    return {"word_bits": int(word_bits), "words": int(words), "storage": storage, "arrays": arrays}
