"""RTL form of ``KANLayer`` (inference): a generated wrapper around ``rtl/bf_kan_layer.v``.

The wrapper fixes every parameter of the library module from the IR node: the index map (a pure bit
slice when ``index_mult == 1``), the coefficients as one packed constant (the hardware's coefficient banks),
and the basis: the closed-form circuit (``rtl/bf_kan_basis_closed.v``) when the node's ``basis_impl`` is
"closed_form", else a ROM holding the golden model's own ``bspline.basis_table``. Either way the hardware
computes exactly ``emulate.kan_fixed``. The layer is fully parallel; it is not folded (reuse is always 1).

With ``--weights ram`` (a :class:`~.stages.WritePort` in the request) the wrapper instantiates
``rtl/bf_kan_layer_ram.v`` instead: the same arithmetic and latency, the coefficients in the online learner's
cyclic banks (:class:`KanBanks`), initialised to the node's and written through the device's write port.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...bspline import CLOSED_FORM_POLYNOMIALS, basis_table
from ...fixed import FixedType, clog2
from ...ir import KANLayer
from .stages import Stage, StageRequest, WritePort, emitter
from .verilog import (
    OVERFLOW_CODE,
    ROUNDING_CODE,
    UNTYPED,
    RtlError,
    packed_parameter,
    signed_width,
    templates,
    verilog_literal,
    verilog_name,
)

#: Library files every KAN stage needs (the ROM and the closed-form circuit are both listed: one is unused).
LIBRARY = ("bf_kan_layer.v", "bf_kan_index.v", "bf_kan_basis_closed.v", "bf_kan_div3.v", "bf_kan_basis_rom.v",
           "bf_requant.v")
#: Register stages of the closed-form basis circuit per spline order (u^2, u^3, numerators, division by 3).
CLOSED_FORM_LATENCY = {1: 1, 2: 2, 3: 4}
#: Cycles after the basis: products, exact sum, overflow + requantize into the output register.
TAIL_LATENCY = 3
BASIS_CHOICES = ("auto", "rom")
#: The writable form's library: bf_kan_layer_ram in place of bf_kan_layer.
RAM_LIBRARY = ("bf_kan_layer_ram.v",) + LIBRARY[1:]
#: Coefficient banks of at least this many rows ask synthesis for block RAM; shallower ones are LUT RAM or
#: flip-flops (16 words is ECP5's LUT RAM primitive, as for the learner's banks).
BLOCK_RAM_MIN_ROWS = 16


@dataclass(frozen=True)
class KanBanks:
    """bf_kan_layer_ram's coefficient memories: per input ``k1`` banks (bank j holds coefficient p with
    p mod k1 = j at row p div k1) of ``rows`` words of every output's coefficient. In the write address space
    bank (i, j) occupies ``out_stride * row_stride`` words, output o's rows at ``o * row_stride``: both strides
    are powers of two, so the hardware decodes an address by bit slicing."""

    k1: int
    rows: int
    row_stride: int
    out_stride: int

    def words(self, n_in: int) -> int:
        return n_in * self.k1 * self.out_stride * self.row_stride


def kan_banks(n: KANLayer) -> KanBanks:
    k1 = n.order + 1
    rows = -(-n.n_basis // k1)
    return KanBanks(k1, rows, 1 << clog2(rows), 1 << clog2(n.out_features))


@dataclass(frozen=True)
class KanPlan:
    """What the wrapper instantiates, and what that costs, decided once from the node."""

    closed_form: bool
    index_latency: int
    basis_latency: int

    @property
    def latency(self) -> int:
        return self.index_latency + self.basis_latency + TAIL_LATENCY


def kan_products(n: KANLayer) -> int:
    """Coefficient x basis products per sample: k + 1 per edge, whatever the grid size."""
    return n.out_features * n.in_features * (n.order + 1)


def kan_multipliers(n: KANLayer, p: KanPlan | None = None) -> int:
    """Every multiplier the stage builds: the products, plus per input u^2 and u^3 (closed form) and the
    index multiply (when the cell is not a power of two of input LSBs). The layer is never folded, so this
    is what it costs whatever reuse is asked for."""
    p = p or plan(n)
    basis = {1: 0, 2: 1, 3: 2}[n.order] if p.closed_form else 0
    return kan_products(n) + n.in_features * (basis + (n.index_mult != 1))


def plan(n: KANLayer, basis: str = "auto") -> KanPlan:
    """Closed-form circuit when the node asks for that arithmetic and the circuit exists, else the ROM.

    ``basis="rom"`` forces the ROM (it holds whichever table ``basis_impl`` names, so it stays bit-exact).
    """
    if basis not in BASIS_CHOICES:
        raise RtlError(f"{n.describe()}: KAN basis option {basis!r} unknown; expected one of {', '.join(BASIS_CHOICES)}")
    closed = (basis == "auto" and n.basis_impl == "closed_form" and n.order in CLOSED_FORM_POLYNOMIALS
              and n.u_bits >= 1)
    return KanPlan(closed, 1 if n.index_mult == 1 else 2, CLOSED_FORM_LATENCY[n.order] if closed else 1)


def _check(n: KANLayer) -> None:
    for field in ("coeff_type", "basis_type", "accum_type"):
        n.need(field, *UNTYPED)
    if n.basis_type.frac < 0:
        raise RtlError(f"{n.describe()}: basis type {n.basis_type} has {n.basis_type.frac} fractional bits; "
                       "the RTL needs at least 0 (use e.g. ufixed<13,1>)")
    if n.accum_type.frac != n.coeff_type.frac + n.basis_type.frac:
        raise RtlError(f"{n.describe()}: accumulator {n.accum_type} must have frac(coeff) + frac(basis) = "
                       f"{n.coeff_type.frac + n.basis_type.frac} fractional bits")
    span = n.grid_size << n.u_bits
    if span >= 1 << 31:
        raise RtlError(f"{n.describe()}: G * 2**u_bits = {span} positions do not fit the RTL's 32-bit index "
                       "(use fewer u_bits or a smaller grid)")


def layer_parameters(n: KANLayer, x: FixedType, y: FixedType, p: KanPlan) -> list[tuple[str, str]]:
    """``bf_kan_layer`` parameters, in declaration order, as Verilog text."""
    k, c, b, acc = n.order, n.coeff_type, n.basis_type, n.accum_type
    lo_w = signed_width(n.index_lo)
    mult_w = max(1, n.index_mult.bit_length())
    params = [
        ("N_IN", n.in_features), ("N_OUT", n.out_features), ("X_W", x.width), ("X_SIGNED", int(x.signed)),
        ("G", n.grid_size), ("K", k), ("U", n.u_bits), ("CELL_W", max(1, (n.grid_size - 1).bit_length())),
        ("LO_W", lo_w), ("INDEX_LO", verilog_literal(n.index_lo, lo_w)),
        ("MULT_W", mult_w), ("INDEX_MULT", verilog_literal(n.index_mult, mult_w)), ("INDEX_SHIFT", n.index_shift),
        ("C_W", c.width), ("C_SIGNED", int(c.signed)),
        ("COEFFS", packed_parameter(np.asarray(n.coeffs, dtype=np.int64).ravel(), c.width)),
        ("B_W", b.width), ("B_FRAC", b.frac), ("BASIS_CLOSED", int(p.closed_form)),
    ]
    if not p.closed_form:
        table = basis_table(k, n.u_bits, b, n.basis_impl)  # the golden model's table, row-major (u, m)
        params.append(("BASIS_TABLE", packed_parameter(table.ravel(), b.width)))
    params += [
        ("ACC_W", acc.width), ("ACC_FRAC", acc.frac), ("ACC_SIGNED", int(acc.signed)),
        ("ACC_OVERFLOW", OVERFLOW_CODE[acc.overflow.value]),
        ("Y_W", y.width), ("Y_FRAC", y.frac), ("Y_SIGNED", int(y.signed)),
        ("Y_ROUNDING", ROUNDING_CODE[y.rounding.value]), ("Y_OVERFLOW", OVERFLOW_CODE[y.overflow.value]),
    ]
    return [(name, str(v)) for name, v in params]


def _resources(n: KANLayer, p: KanPlan) -> dict:
    out = {"multipliers": kan_multipliers(n, p),
           "coefficient_bits": int(n.coeffs.size) * n.coeff_type.width,
           "basis": "closed_form circuit" if p.closed_form else "rom"}
    if not p.closed_form:
        out["rom_bits"] = n.in_features * (1 << n.u_bits) * (n.order + 1) * n.basis_type.width
    return out


def _index_note(n: KANLayer) -> str:
    if n.index_mult != 1:
        return f"((x - lo) * {n.index_mult}) >> {n.index_shift}"
    return f"bit slice of (x - lo) >> {n.index_shift} (no multiplier)" if n.index_shift else \
        "bit slice of x - lo (no multiplier)"


@emitter("KANLayer", multiplies=kan_multipliers)
def emit_kan(req: StageRequest) -> Stage:
    """One generated wrapper module per KAN node, instantiated on the request's ports."""
    n = req.node
    if not isinstance(n, KANLayer):
        raise RtlError(f"{n.describe()}: the KAN emitter got a {n.OP} node")
    _check(n)
    p = plan(n, req.options.get("kan_basis", "auto"))
    module = f"{verilog_name(req.graph.name)}_{req.instance_name}"
    env = templates()
    notes = {"index_note": _index_note(n),
             "basis_note": "closed-form circuit" if p.closed_form else f"ROM of the '{n.basis_impl}' table"}
    parameters = layer_parameters(n, req.in_type, req.out_type, p)
    extra, library, resources = {}, LIBRARY, _resources(n, p)
    if req.write_port is not None:
        banks = kan_banks(n)
        parameters += _ram_parameters(banks, req.write_port)
        extra = {"ram": {"banks": banks, "addr_bits": req.write_port.addr_bits,
                         "word_bits": req.write_port.word_bits}}
        library = RAM_LIBRARY
        resources = {**resources, "ram_bits": banks.words(n.in_features) * n.coeff_type.width}
    text = env.get_template("kan_layer.v.j2").render(
        module=module, node=n.name, graph=req.graph.name, n_in=n.in_features, n_out=n.out_features,
        in_type=req.in_type.to_short(), out_type=req.out_type.to_short(), grid_size=n.grid_size, order=n.order,
        grid_lo=n.grid_lo, grid_hi=n.grid_hi, latency=p.latency, in_w=req.in_count * req.in_type.width,
        out_w=req.out_count * req.out_type.width, parameters=parameters, **notes, **extra)
    instance = env.get_template("kan_instance.v.j2").render(module=module, instance=req.instance_name,
                                                             ports=req.ports, **extra)
    return Stage(instance=instance, latency=p.latency, ii=1, library=library, generated={f"{module}.v": text},
                 resources=resources, reuse=1)


def _ram_parameters(banks: KanBanks, port: WritePort) -> list[tuple[str, str]]:
    """bf_kan_layer_ram's parameters beyond bf_kan_layer's: memory style and where its region starts."""
    return [("RAM_STYLE", str(int(banks.rows >= BLOCK_RAM_MIN_ROWS))), ("ADDR_W", str(port.addr_bits)),
            ("DATA_W", str(port.word_bits)), ("C_BASE", str(port.bases["coeffs"]))]
