"""IR -> a Verilog design: one stage per node, chained by valid/ready streams, plus a board-level top.

The core top (``<name>``) has AXI4-Stream style ports with the full tensors on ``tdata``; the board top
(``<name>_board``) wraps it in a narrow byte stream (deserialize -> core -> serialize) so that even a
256-bit-wide core fits the pins of a small FPGA. Latency and II are known by construction: the sum of the
stage latencies (plus one cycle per skid buffer) and the largest stage II.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, Optional, Union

from ...ir import Graph, Quantize
from ...resources import rtl_library
from . import conv, dense, elementwise, kan, stages  # noqa: F401  (the emitter modules register their ops on import)
from .stages import Ports, Stage, StageRequest
from .verilog import RtlError, templates, verilog_name
from .weights_layout import WEIGHT_MODES, rom_weights, weight_layout, write_ports

__all__ = ["RtlError", "RtlOptions", "RtlDesign", "LayerReport", "SKID_LATENCY", "generate", "hardware_chain",
           "library_source"]

#: Cycles a bf_skid_buffer adds between two stages (it registers data and valid).
SKID_LATENCY = 1


@dataclass(frozen=True)
class RtlOptions:
    """How to build the hardware. ``reuse``: 1 = fully parallel, N = every layer folded by N, a mapping
    node -> N, or ``"auto"`` (needs ``target``: the smallest reuse per layer that fits the target)."""

    reuse: Union[int, str, Mapping[str, int]] = 1
    target: Optional[str] = None
    bus_width: int = 8
    skid: bool = True
    #: Fold a ReLU that follows a dense layer into that layer's output register: it saves the ReLU's
    #: register, the skid buffer after it and a cycle (on jet-mlp about 6,000 flip-flops).
    fuse_relu: bool = True
    #: "rom": parameters are constants (shift-add graphs, ROMs); "ram": every Dense, LowRankDense and KAN layer
    #: reads them from memories behind one write port, so another model of the same architecture loads at run
    #: time (weights_layout.py has the address map).
    weights: str = "rom"

    def __post_init__(self) -> None:
        if self.weights not in WEIGHT_MODES:
            raise RtlError(f"--weights must be one of {', '.join(WEIGHT_MODES)}, got {self.weights!r}")
        r = self.reuse
        if isinstance(r, str) and r != "auto":
            raise RtlError(f"--reuse must be a positive integer or 'auto', got {r!r}")
        if isinstance(r, int) and r < 1:
            raise RtlError(f"--reuse must be at least 1, got {r}")
        if r == "auto" and self.target is None:
            raise RtlError("--reuse auto needs a --target to size the layers for")
        if self.bus_width not in (8, 16, 32):
            raise RtlError(f"board bus width must be 8, 16 or 32 bits, got {self.bus_width}")


@dataclass
class LayerReport:
    node: str
    op: str
    reuse: int
    latency: int
    ii: int
    resources: dict
    fused: list[str] = field(default_factory=list)  # nodes built inside this stage (a ReLU after a dense)


@dataclass
class RtlDesign:
    """Generated files (name -> text) and what is known by construction."""

    name: str
    top: str
    board_top: str
    files: dict[str, str]
    library: list[str]
    latency_cycles: int
    ii: int
    input_tensor: str
    output_tensor: str
    in_width: int
    out_width: int
    bus_width: int
    layers: list[LayerReport] = field(default_factory=list)
    #: The manifest's "weights": {"mode": "rom", "arch_id"} or the ram layout (weights_layout.Layout.to_json).
    weights: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("files", "layers", "top")}
        # Implementation builds the board top; simulation drives the core.
        d["top"], d["core_top"] = self.board_top, self.top
        d["files"] = [f"rtl/{n}" for n in sorted(set(self.files) | set(self.library))]
        d["layers"] = [asdict(x) for x in self.layers]
        return d


def hardware_chain(g: Graph) -> list:
    """The nodes that become hardware: everything after the input Quantize (done by the host), as a chain."""
    nodes = list(g.nodes)
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise RtlError(f"graph '{g.name}' has {len(g.inputs)} inputs and {len(g.outputs)} outputs; the RTL backend "
                       "builds single-input, single-output models")
    if nodes and isinstance(nodes[0], Quantize):
        nodes = nodes[1:]
    if not nodes:
        raise RtlError(f"graph '{g.name}' has no layers to build in hardware")
    prev = nodes[0].inputs[0]
    for n in nodes:
        if len(n.inputs) != 1 or n.inputs[0] != prev:
            raise RtlError(f"{n.describe()}: the RTL backend builds chains of layers for now; this node reads "
                           f"{list(n.inputs)} but the previous layer produced '{prev}'")
        for t in (*n.inputs, *n.outputs):
            if g.tensors[t].is_float:
                raise RtlError(f"{n.describe()}: tensor '{t}' is float; hardware needs fixed point (compile with "
                               "--precision, e.g. --precision 8)")
        prev = n.output
    return nodes


def generate(g: Graph, options: RtlOptions = RtlOptions(),
             progress: Callable[[str], None] = lambda msg: None) -> RtlDesign:
    """Generate the design; ``options.reuse`` must be resolved (an integer or a node -> factor mapping).
    ``progress`` hears of each layer before it is built (a wide layer takes seconds)."""
    if options.reuse == "auto":
        raise RtlError("resolve --reuse auto with reuse.choose_reuse before generating (the compiler does)")
    chain = hardware_chain(g)
    name = verilog_name(g.name)
    env = templates()
    instances, generated, layers = [], {}, []
    library = {"bf_skid_buffer.v", "bf_serialize.v", "bf_deserialize.v"}
    nets = []
    latency, ii = 0, 1
    fused = _fuse_relus(chain, options)
    ram, ports_of = None, {}
    if options.weights == "ram":
        layout = weight_layout(g, options.reuse)
        ports_of = write_ports(layout)
        ram = {"addr_bits": layout.addr_bits, "word_bits": layout.word_bits, "words": layout.words}
    for i, (n, relu) in enumerate(fused):
        emit = stages.EMITTERS.get(n.OP)
        if emit is None:
            raise RtlError(f"{n.describe()}: no RTL form for op {n.OP}; ops with one: {', '.join(sorted(stages.EMITTERS))}")
        x, y = g.tensors[n.inputs[0]], g.tensors[(relu or n).output]
        r = _reuse_for(n, options)
        ports = Ports("clk", "rst", f"s{i}_in_valid", f"s{i}_in_ready", f"s{i}_in_data",
                      f"s{i}_out_valid", f"s{i}_out_ready", f"s{i}_out_data")
        req = StageRequest(g, n, x.dtype, math.prod(x.shape), g.tensors[n.output].dtype, math.prod(y.shape), ports,
                           f"u{i}_{verilog_name(n.name)}", r, relu_type=y.dtype if relu else None,
                           write_port=ports_of.get(n.name))
        progress(f"Verilog for layer {i + 1}/{len(fused)}: {n.describe()}{' + ReLU' if relu else ''} "
                 f"({req.in_count} -> {req.out_count}, reuse {r})")
        st: Stage = emit(req)
        instances.append(st.instance)
        library.update(st.library)
        generated.update(st.generated)
        # A skid buffer cuts the ready path between stages; a folded stage (II > 1) already holds its result in
        # an output register for R cycles, so a skid after it would only add registers and a cycle.
        skid = options.skid and st.ii == 1
        nets.append({"i": i, "in_w": req.in_count * x.dtype.width, "out_w": req.out_count * y.dtype.width,
                     "skid": skid})
        layers.append(LayerReport(n.name, n.OP + ("+ReLU" if relu else ""), st.reuse, st.latency, st.ii,
                                  st.resources, [relu.name] if relu else []))
        latency += st.latency + (SKID_LATENCY if skid else 0)
        ii = max(ii, st.ii)
    first, last = g.tensors[chain[0].inputs[0]], g.tensors[chain[-1].output]
    in_w, out_w = nets[0]["in_w"], nets[-1]["out_w"]
    # The tlast FIFO must hold one bit per sample in flight: every pipeline register and skid entry.
    in_flight = latency + 2 * len(nets) + 2
    ctx = dict(name=name, stages=nets, instances=instances, n=len(nets), in_w=in_w, out_w=out_w,
               fifo_depth_log2=max(2, math.ceil(math.log2(in_flight))), bus_w=options.bus_width,
               in_tensor=first.name, out_tensor=last.name, in_type=first.dtype.to_short(),
               out_type=last.dtype.to_short(), latency=latency, ii=ii, graph=g.name, ram=ram)
    files = {f"{name}.v": env.get_template("top.v.j2").render(**ctx),
             f"{name}_board.v": env.get_template("board.v.j2").render(**ctx)}
    files.update(generated)
    weights = layout.to_json() if ram else rom_weights(g)
    return RtlDesign(name, name, f"{name}_board", files, sorted(library), latency, ii, first.name, last.name, in_w,
                     out_w, options.bus_width, layers, weights)


def _fuse_relus(chain: list, options: RtlOptions) -> list:
    """Pair each stage's node with the ReLU it absorbs (or None): a ReLU right after an op that fuses one."""
    out, i = [], 0
    while i < len(chain):
        n = chain[i]
        nxt = chain[i + 1] if i + 1 < len(chain) else None
        if options.fuse_relu and nxt is not None and nxt.OP == "ReLU" and n.OP in stages.FUSES_RELU:
            out.append((n, nxt))
            i += 2
        else:
            out.append((n, None))
            i += 1
    return out


def _reuse_for(n, options: RtlOptions) -> int:
    r = options.reuse
    return int(r.get(n.name, 1)) if isinstance(r, Mapping) else int(r)


def library_source(name: str) -> str:
    """Text of an ``rtl/`` library module shipped as package data."""
    f = rtl_library().joinpath(name)
    if not f.is_file():
        raise RtlError(f"rtl library file {name} is missing from the installed package")
    return f.read_text()
