"""The contract between the RTL generator and the per-op emitters.

Every IR node that has a hardware form becomes one *stage*: an instance of a library module from ``rtl/``
(or of a module the emitter generates), with a valid/ready stream on each side:

    clk, rst                       rst is synchronous, active high
    in_valid, in_ready, in_data    in_data packs element i at [i*W_in +: W_in], two's complement codes
    out_valid, out_ready, out_data of the tensor's FixedType (unsigned codes for ufixed)

A stage accepts a sample when ``in_valid && in_ready`` and presents its result when ``out_valid``; it
holds ``out_data`` stable until ``out_ready``. ``latency`` is cycles from acceptance to ``out_valid`` when
never stalled; ``ii`` is cycles between accepted samples at full rate. Both are known by construction
and go into ``report.json``.

Emitters register themselves with :func:`emitter` when their module is imported; :mod:`.generate` imports
every emitter module (``dense``, ``kan``) and calls them in graph order. This module imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ...fixed import FixedType
from ...ir import Graph, Node


@dataclass(frozen=True)
class Ports:
    """Net names the stage instance connects to (the generator declares them)."""

    clk: str
    rst: str
    in_valid: str
    in_ready: str
    in_data: str
    out_valid: str
    out_ready: str
    out_data: str


@dataclass(frozen=True)
class WritePort:
    """``--weights ram``: the device's parameter write port (``wr_en``, ``wr_addr``, ``wr_data`` in the top) and
    where this node's parameter arrays live in its address space (array name -> first word address). The
    order of the words inside each region is the emitter's memory layout; ``weights_layout`` packs it."""

    addr_bits: int
    word_bits: int
    bases: dict[str, int]


@dataclass(frozen=True)
class StageRequest:
    """What the generator asks of an emitter: the node, its tensors' types and the chosen reuse factor."""

    graph: Graph
    node: Node
    in_type: FixedType
    in_count: int
    out_type: FixedType
    out_count: int
    ports: Ports
    instance_name: str
    reuse: int = 1
    options: dict = field(default_factory=dict)
    #: A ReLU fused into this stage (emitters registered with ``fuses_relu``): the ReLU's output type, which
    #: is then the stage's output; ``out_type`` stays the node's own output type, requantized before the ReLU.
    relu_type: Optional[FixedType] = None
    #: None: the parameters are constants (``--weights rom``); else they come from memories written through
    #: this port, and the stage connects ``wr_en``/``wr_addr``/``wr_data``.
    write_port: Optional[WritePort] = None


@dataclass
class Stage:
    """An emitter's answer: the instance text and what it costs."""

    instance: str  # Verilog text instantiating the stage, connected to ``request.ports``
    latency: int
    ii: int
    library: tuple[str, ...] = ()  # rtl/ files the instance needs, e.g. ("bf_dense_parallel.v",)
    generated: dict[str, str] = field(default_factory=dict)  # extra files: name -> text (modules, .hex ROMs)
    resources: dict = field(default_factory=dict)  # e.g. {"multipliers": 64, "rom_bits": 8192}
    reuse: int = 1


Emitter = Callable[[StageRequest], Stage]
#: IR op -> its emitter.
EMITTERS: dict[str, Emitter] = {}
#: IR op -> its multiplies per sample, given a node (what ``--reuse auto`` counts).
MULTIPLIES: dict[str, Callable[[Node], int]] = {}
#: Ops whose stage honours a reuse factor > 1, with the multipliers their folded form builds at reuse R.
FOLDABLE: dict[str, Callable[[Node, int], int]] = {}
#: Ops whose stage can apply a following ReLU before its output register (see StageRequest.relu_type).
FUSES_RELU: set[str] = set()


def emitter(op: str, multiplies: Optional[Callable[[Node], int]] = None,
            folded_multipliers: Optional[Callable[[Node, int], int]] = None,
            fuses_relu: bool = False) -> Callable[[Emitter], Emitter]:
    """Register the RTL emitter of IR op ``op``, its multiplies per sample and, for ops that fold, the
    multipliers their folded form builds at a reuse factor (what ``--reuse auto`` budgets). ``fuses_relu``:
    the emitter honours ``StageRequest.relu_type``, so a ReLU after this op costs no stage of its own."""

    def register(fn: Emitter) -> Emitter:
        EMITTERS[op] = fn
        if fuses_relu:
            FUSES_RELU.add(op)
        if multiplies is not None:
            MULTIPLIES[op] = multiplies
        if folded_multipliers is not None:
            FOLDABLE[op] = folded_multipliers
        return fn

    return register
