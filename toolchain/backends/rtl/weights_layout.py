"""``--weights ram``: the device's parameter address space, and the words that load any model of its architecture.

A design compiled with ``--weights ram`` keeps every Dense (both halves of a LowRankDense) and KAN layer's
parameters in memories with one flat write port (``wr_en``, ``wr_addr``, ``wr_data``: one parameter code a
word, two's complement sign-extended to ``word_bits``). :func:`weight_layout` decides where each parameter
array lives: layers in chain order, each array one contiguous region, inside it the order of the layer's own
memories (lane-major, with power-of-two row fields, so the hardware decodes an address by bit slicing and one
range compare; words that no parameter fills are padding, written as zero and never read by the datapath).
That layout goes into ``rtl/manifest.json`` under ``"weights"`` (:meth:`Layout.to_json`) and back
(:meth:`Layout.from_json`), and :func:`pack_weight_words` turns any graph of the same architecture into the
word list to write, refusing one whose architecture differs (naming the node and array) before anything is sent.

The architecture is :func:`bitforge.toolchain.identity.arch_id`: types, shapes and attributes are the hardware;
parameter values are data. Each region's ``order`` names its scheme:

* ``folded_lanes`` (a dense half's weights, ``bf_dense_folded_ram``): word ``lane * rows + c`` is the weight
  lane ``lane = g * lanes_per_group + s`` multiplies in issue cycle ``c``: row ``(c // cycles_per_row) * groups
  + g``, column ``s * cycles_per_row + c % cycles_per_row`` (padding past the matrix or past ``cycles``);
* ``folded_groups`` (its biases): word ``g * rows + p`` is the bias of row ``p * groups + g``;
* ``kan_banks`` (a KAN layer's coefficients, ``bf_kan_layer_ram``): word ``((i * banks + j) * out_stride + o) *
  row_stride + r`` is ``coeffs[o, i, j + banks * r]``.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ...errors import BitforgeError
from ...fixed import clog2
from ...identity import arch_id, architecture
from ...ir import Dense, Graph, KANLayer, LowRankDense
from .dense import folded_ram
from .kan import kan_banks
from .stages import WritePort

__all__ = ["WEIGHT_MODES", "WeightsError", "LayoutEntry", "Layout", "weight_layout", "pack_weight_words",
           "rom_weights", "write_ports", "TYPE_FIELDS", "describe"]

#: ``--weights``: ``rom`` (parameters are constants of the bitstream) or ``ram`` (loaded at run time).
WEIGHT_MODES = ("rom", "ram")
SCHEMES = ("folded_lanes", "folded_groups", "kan_banks")


class WeightsError(BitforgeError):
    """A weight layout that cannot be built, read, or used for this graph (the message names the node/array)."""


@dataclass(frozen=True)
class LayoutEntry:
    """One parameter array's region: ``count`` words from ``offset``, in the order ``order`` describes."""

    node: str
    array: str
    offset: int
    count: int
    shape: tuple[int, ...]
    type: str
    order: Mapping[str, object]

    def to_json(self) -> dict:
        return {"node": self.node, "array": self.array, "offset": self.offset, "count": self.count,
                "shape": list(self.shape), "type": self.type, "order": dict(self.order)}

    def index_map(self) -> np.ndarray:
        """For each of the ``count`` words, the flat (C order) index of its element in the array, -1 for padding."""
        o = self.order
        scheme = o["scheme"]
        if scheme == "folded_lanes":
            n_out, n_in = self.shape
            s_, g_, t_, cycles, rows = (int(o[k]) for k in ("lanes_per_group", "groups", "cycles_per_row", "cycles",
                                                              "rows"))
            lane, c = np.divmod(np.arange(self.count), rows)
            g, s = np.divmod(lane, s_)
            row, col = (c // t_) * g_ + g, s * t_ + c % t_
            ok = (c < cycles) & (row < n_out) & (col < n_in)
            return np.where(ok, row * n_in + col, -1)
        if scheme == "folded_groups":
            (n_out,) = self.shape
            g, p = np.divmod(np.arange(self.count), int(o["rows"]))
            row = p * int(o["groups"]) + g
            return np.where(row < n_out, row, -1)
        if scheme == "kan_banks":
            n_out, n_in, n_basis = self.shape
            banks, out_stride, row_stride = (int(o[k]) for k in ("banks", "out_stride", "row_stride"))
            rest, r = np.divmod(np.arange(self.count), row_stride)
            rest, out = np.divmod(rest, out_stride)
            i, j = np.divmod(rest, banks)
            p = j + banks * r
            ok = (out < n_out) & (p < n_basis) & (i < n_in)
            return np.where(ok, (out * n_in + i) * n_basis + p, -1)
        raise WeightsError(f"weights layout of {self.node}.{self.array}: unknown order scheme {scheme!r}")


@dataclass(frozen=True)
class Layout:
    """The device's weight address space: ``words`` words of ``word_bits`` (address ``addr_bits`` wide), the
    regions, the architecture they were built for, and a digest of each hardware node's architecture (so a
    mismatch can be named)."""

    word_bits: int
    addr_bits: int
    words: int
    arch_id: str
    entries: tuple[LayoutEntry, ...]
    nodes: tuple[tuple[str, str], ...]

    @property
    def word_bytes(self) -> int:
        """Bytes of one word on the wire (little-endian): ceil(word_bits / 8)."""
        return -(-self.word_bits // 8)

    def to_json(self) -> dict:
        """The manifest's ``"weights"`` object."""
        return {"mode": "ram", "word_bits": self.word_bits, "addr_bits": self.addr_bits, "words": self.words,
                "arch_id": self.arch_id, "layout": [e.to_json() for e in self.entries],
                "nodes": [list(n) for n in self.nodes]}

    @classmethod
    def from_json(cls, doc: object, source: str = "rtl/manifest.json") -> "Layout":
        """The layout in a manifest's ``"weights"`` object; a missing or damaged field names itself."""
        where = f"{source}: \"weights\""
        if not isinstance(doc, dict):
            raise WeightsError(f"{where}: expected an object, found {type(doc).__name__}")
        if doc.get("mode") != "ram":
            raise WeightsError(f"{where}: mode is {doc.get('mode')!r}: this design's parameters are constants of its "
                               "bitstream (compile with --weights ram to load weights at run time)")
        try:
            entries = tuple(LayoutEntry(str(e["node"]), str(e["array"]), _int(e["offset"]), _int(e["count"]),
                                        tuple(_int(v) for v in e["shape"]), str(e["type"]), dict(e["order"]))
                            for e in doc["layout"])
            layout = cls(_int(doc["word_bits"]), _int(doc["addr_bits"]), _int(doc["words"]), str(doc["arch_id"]),
                         entries, tuple((str(n), str(d)) for n, d in doc["nodes"]))
        except (KeyError, TypeError, ValueError) as e:
            what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            raise WeightsError(f"{where}: malformed ({what}); compile the design again") from None
        for e in layout.entries:
            if e.order.get("scheme") not in SCHEMES or e.offset < 0 or e.offset + e.count > layout.words:
                raise WeightsError(f"{where}: region {e.node}.{e.array} is malformed (scheme "
                                   f"{e.order.get('scheme')!r}, words {e.offset}..{e.offset + e.count}); compile the "
                                   "design again")
        return layout


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, found {v!r}")
    return v


# -- building the layout -------------------------------------------------------------------------------------

def _node_digest(g: Graph, doc: dict, node: dict) -> str:
    """A node's architecture (its IR entry without values, and the specs of the tensors it reads and writes)."""
    tensors = {t["name"]: t for t in doc["tensors"]}
    entry = {"node": node, "tensors": [tensors[t] for t in (*node["inputs"], *node["outputs"])]}
    return hashlib.sha256(json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _node_digests(g: Graph, names: list[str]) -> tuple[tuple[str, str], ...]:
    doc = architecture(g)
    by_name = {n["name"]: n for n in doc["nodes"]}
    return tuple((name, _node_digest(g, doc, by_name[name])) for name in names)


def _regions(n, reuse: int) -> list[tuple[str, tuple[int, ...], object, dict]]:
    """(array, shape, type, order without offsets) for each parameter array of ``n``, in address order."""
    def lanes(matrix: np.ndarray) -> dict:
        ram = folded_ram(int(matrix.shape[1]), int(matrix.shape[0]), reuse)
        t = ram.tiling
        return {"scheme": "folded_lanes", "lanes": t.lanes, "rows": ram.weight_rows, "lanes_per_group": t.s,
                "groups": t.g, "cycles_per_row": t.t, "cycles": t.cycles}

    def groups(matrix: np.ndarray) -> dict:
        ram = folded_ram(int(matrix.shape[1]), int(matrix.shape[0]), reuse)
        return {"scheme": "folded_groups", "groups": ram.tiling.g, "rows": ram.bias_rows}

    if isinstance(n, Dense):
        out = [("weight", n.weight, n.weight_type, lanes(n.weight))]
        if n.bias is not None:
            out.append(("bias", n.bias, n.bias_type, groups(n.weight)))
    elif isinstance(n, LowRankDense):
        out = [("v", n.v, n.v_type, lanes(n.v)), ("u", n.u, n.u_type, lanes(n.u))]
        if n.bias is not None:
            out.append(("bias", n.bias, n.bias_type, groups(n.u)))
    elif isinstance(n, KANLayer):
        b = kan_banks(n)
        out = [("coeffs", n.coeffs, n.coeff_type, {"scheme": "kan_banks", "banks": b.k1, "rows": b.rows,
                                                   "row_stride": b.row_stride, "out_stride": b.out_stride})]
    elif n.array_fields():
        raise WeightsError(f"{n.describe()}: --weights ram loads the parameters of Dense, LowRankDense and KANLayer "
                           f"layers; this {n.OP} has arrays {', '.join(sorted(n.array_fields()))} and no writable "
                           "form: compile with --weights rom")
    else:
        return []
    for array, values, t, _ in out:
        if t is None:
            raise WeightsError(f"{n.describe()}: {array} has no fixed-point type; run the precision pass before "
                               "laying out its weights")
    return [(array, tuple(int(d) for d in values.shape), t, order) for array, values, t, order in out]


def _region_words(shape: tuple[int, ...], order: dict) -> int:
    s = order["scheme"]
    if s == "folded_lanes":
        return order["lanes"] * order["rows"]
    if s == "folded_groups":
        return order["groups"] * order["rows"]
    return shape[1] * order["banks"] * order["out_stride"] * order["row_stride"]


def weight_layout(g: Graph, reuse: Mapping[str, int] | int = 1) -> Layout:
    """Where every parameter of ``g`` lives when compiled with ``--weights ram`` at ``reuse`` (resolved: an
    integer or node -> factor, as :func:`.generate.generate` takes it in ``RtlOptions.reuse``; it decides the
    dense memories' shapes). Raises :class:`WeightsError` for a layer with parameters but no writable form."""
    entries, offset, bits = [], 0, 1
    for n in g.nodes:
        r = int(reuse.get(n.name, 1)) if isinstance(reuse, Mapping) else int(reuse)
        for array, shape, t, order in _regions(n, r):
            count = _region_words(shape, order)
            entries.append(LayoutEntry(n.name, array, offset, count, shape, t.to_short(), order))
            offset += count
            bits = max(bits, t.width)
    if not entries:
        raise WeightsError(f"graph '{g.name}' has no layer with parameters to load: --weights ram would build a "
                           "write port that writes nothing; compile with --weights rom")
    return Layout(bits, max(1, clog2(offset)), offset, arch_id(g), tuple(entries),
                  _node_digests(g, [n.name for n in g.nodes]))


def write_ports(layout: Layout) -> dict[str, WritePort]:
    """Each node's :class:`~.stages.WritePort`: the port's widths and where its arrays start."""
    bases: dict[str, dict[str, int]] = {}
    for e in layout.entries:
        bases.setdefault(e.node, {})[e.array] = e.offset
    return {node: WritePort(layout.addr_bits, layout.word_bits, b) for node, b in bases.items()}


def rom_weights(g: Graph) -> dict:
    """The manifest's ``"weights"`` object of a ``--weights rom`` design: nothing to load, the architecture."""
    return {"mode": "rom", "arch_id": arch_id(g)}


# -- packing a graph into words --------------------------------------------------------------------------------

def pack_weight_words(g: Graph, layout: Layout) -> list[int]:
    """The ``layout.words`` words that make a device built with ``layout`` compute ``g``: each word the code of
    one parameter (or 0 for padding) as an unsigned ``word_bits``-bit integer (two's complement sign-extended).

    Refuses, before anything is sent, a graph whose architecture is not the device's: a missing or extra layer,
    an array of another shape or type, other attributes or wiring (:class:`WeightsError`, naming the node and
    array), and codes outside their type."""
    _check_architecture(g, layout)
    words = np.zeros(layout.words, dtype=object)
    mask = (1 << layout.word_bits) - 1
    for e in layout.entries:
        node = g.node(e.node)
        codes = np.asarray(node.array_fields()[e.array])
        t = getattr(node, TYPE_FIELDS[(node.OP, e.array)])
        if codes.dtype.kind not in "iuO":
            raise WeightsError(f"{node.describe()}: {e.array} holds {codes.dtype} values, not integer codes of {t}; "
                               "quantize the model first")
        flat = [int(v) for v in codes.ravel()]
        lo, hi = min(flat), max(flat)
        if lo < t.min_code or hi > t.max_code:
            raise WeightsError(f"{node.describe()}: {e.array} codes span [{lo}, {hi}], outside {t.to_short()} "
                               f"[{t.min_code}, {t.max_code}]")
        index = e.index_map()
        region = [flat[k] & mask if k >= 0 else 0 for k in index.tolist()]
        words[e.offset:e.offset + e.count] = region
    return [int(w) for w in words]


#: (op, array) -> the node field holding that array's fixed-point type.
TYPE_FIELDS = {("Dense", "weight"): "weight_type", ("Dense", "bias"): "bias_type", ("LowRankDense", "u"): "u_type",
               ("LowRankDense", "v"): "v_type", ("LowRankDense", "bias"): "bias_type",
               ("KANLayer", "coeffs"): "coeff_type"}


def _check_architecture(g: Graph, layout: Layout) -> None:
    device = f"the device's (arch_id {layout.arch_id[:12]}...)"
    names = [n.name for n in g.nodes]
    for e in layout.entries:
        if e.node not in names:
            raise WeightsError(f"graph '{g.name}' has no node '{e.node}', whose {e.array} the device loads: not the "
                               f"architecture the device was built for; compile this model for its own device")
        node = g.node(e.node)
        arrays = node.array_fields()
        if e.array not in arrays:
            raise WeightsError(f"{node.describe()}: has no array '{e.array}' (the device loads one there): another "
                               "architecture")
        shape = tuple(int(d) for d in arrays[e.array].shape)
        if shape != e.shape:
            raise WeightsError(f"{node.describe()}: {e.array} has shape {shape}, the device's has {e.shape}: "
                               "another architecture")
        t = getattr(node, TYPE_FIELDS.get((node.OP, e.array), ""), None)
        if t is None or t.to_short() != e.type:
            raise WeightsError(f"{node.describe()}: {e.array} has type {t.to_short() if t else None}, the device's "
                               f"has {e.type}: another architecture (types are hardware)")
    here = dict(_node_digests(g, [n for n, _ in layout.nodes if n in names]))
    for name, digest in layout.nodes:
        if name not in here:
            raise WeightsError(f"graph '{g.name}' has no node '{name}', which the device computes: another "
                               "architecture")
        if here[name] != digest:
            raise WeightsError(f"{g.node(name).describe()}: its attributes, tensor types or wiring differ from "
                               f"{device}; parameter values may change, nothing else")
    mine = arch_id(g)
    if mine != layout.arch_id:
        raise WeightsError(f"graph '{g.name}' has arch_id {mine[:12]}..., not {device}: the layers match but the "
                           "graph around them differs (extra nodes, inputs, outputs or tensors)")


def describe(layout: Layout) -> str:
    """One line for logs: words, bits, bytes on the wire."""
    return (f"{layout.words} words of {layout.word_bits} bits ({layout.words * layout.word_bytes:,} bytes on the wire, "
            f"{math.ceil(layout.words * layout.word_bits / 8):,} packed)")
