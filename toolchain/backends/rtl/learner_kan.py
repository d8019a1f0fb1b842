"""RTL of an online KAN learner: predict, error, back-propagate, sparse update, one sample per clock (II = 1).

The generated core is bit-exact with :func:`bitforge.toolchain.learn.emulate.run` over whole trajectories.
Per layer and input i the G+k coefficients of every output live in k+1 *cyclic banks* (bank j holds
coefficient p with p mod (k+1) = j, at address p div (k+1), all outputs side by side in one word), so the
k+1 active coefficients of a cell are always in k+1 different banks: one read and one write per bank per sample.

Pipeline (``latency`` = front + 1 register stages, II 1 while nothing stalls):

* **front** (the first layer): cell and local coordinate (``bf_kan_index``, a bit slice or one constant
  multiply), the k+1 basis weights (a ROM of the golden table, rotated into bank order, in the same cycle;
  or the pipelined closed-form circuit ``bf_kan_basis_closed``), and the banks read (synchronous, the
  block-RAM form) at ``cell div (k+1) + (j < cell mod (k+1))``;
* **learn** (one cycle): coefficients read storage -> coeff, products, exact sum, layer output; hidden
  layers (any number) follow inside the same cycle with combinational index, ROM and bank reads (their
  inputs are this cycle's outputs); then ``e = y - t``, back-propagation from the last layer down
  (``g_x = round((1/h) sum_o g_o sum_m c_m db_m/du)`` with the pre-update coefficients, zero where the
  input was clamped), and per bank ``c - round((2 g b) >> lr_shift)`` saturated, written back.

The loop-carried dependency (sample t+1 must see sample t's update) closes inside the learn cycle. For the
first layer through **write-to-read forwarding**: the bank read for sample t+1 happens on the same edge as
sample t's write and returns the old word, so the learn stage keeps sample t's written words and takes them
where the addresses matched (decided a cycle early, off the loop). Hidden layers read asynchronously inside
the cycle, after the previous edge's write. Stalls freeze the whole pipeline (one clock enable).

The core streams ``{learn_enable, t[d_out], x[d_in]}`` in (AXI4-Stream, tlast passed through) and the
predictions out; a read-back port returns every output's coefficient p of layer l, input i (storage codes)
while the pipeline is drained, for checkpointing. Reset restarts the pipeline and the LFSRs; the
coefficients are the learned state and keep their values (the bitstream holds the initial ones).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...bspline import CLOSED_FORM_POLYNOMIALS, basis_table
from ...fixed import clog2
from ...learn.spec import Learner, LearnerError, kan_accum_type, lane_seeds
from .kan import CLOSED_FORM_LATENCY
from .verilog import (
    balanced_sum,
    mode_codes,
    pack_word,
    packed_parameter,
    sign_extend,
    signed_width,
    templates,
    unpack_word,
    verilog_literal,
    verilog_name,
)

LIBRARY = ("bf_kan_index.v", "bf_kan_basis_closed.v", "bf_kan_div3.v", "bf_requant.v",
           "bf_lfsr_lane.v", "bf_deserialize.v", "bf_serialize.v")
BASIS_CHOICES = ("auto", "rom", "circuit")
#: The ROM is the default up to this many u bits (2**U rows of (k+1) weights); the circuit above it.
ROM_MAX_U_BITS = 10
#: Basis ROMs of more bits than this (all inputs together) are read synchronously, the form yosys maps to block
#: RAM, with the bank rotation in the learn stage; smaller ones are LUTs read in the front cycle, off the loop.
#: T1's one 256-row ROM is 17 kbit (about 1,500 LUT4); T4's sixteen would be 38k LUT4s of an ECP5-85F.
ROM_LUT_MAX_BITS = 32_768
#: First-layer coefficient banks deeper than this ask synthesis for block RAM (``ram_style = "block"``); shallower
#: ones are left to it (they become LUT RAM). 16 words is ECP5's LUT RAM primitive (DPR16X4): a deeper bank was two
#: of them plus a read multiplexer per bit, logic that grows with G. Measured on the T4 KAN [16, 1] post-route on
#: ECP5: G = 96 (banks of 25 words) took 24,522 LUTs against 19,641 at G = 6 (1.25x; LUT4 cells alone 1.15x).
#: Such banks also carry ``no_rw_check``: the word read on the edge that writes the same address is never used
#: (write-to-read forwarding replaces it, and a read-back only fires with the pipeline drained, when nothing
#: writes), so synthesis need not build the bypass that makes a block RAM return the old word (at G = 96 without
#: it: +1,900 flip-flops, 6,022 against 4,101). Hidden layers read their banks combinationally (LUT RAM only).
BANK_LUTRAM_MAX_DEPTH = 16


@dataclass(frozen=True)
class LearnerRtl:
    """A generated learner core: files, and what is known by construction."""

    name: str
    files: dict[str, str]
    library: tuple[str, ...]
    latency_cycles: int
    ii: int
    in_width: int
    out_width: int
    rb_addr_width: int
    rb_data_width: int
    resources: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        return {"name": self.name, "top": f"{self.name}_board", "core_top": self.name,
                "latency_cycles": self.latency_cycles, "ii": self.ii, "in_width": self.in_width,
                "out_width": self.out_width, "rb_addr_width": self.rb_addr_width,
                "rb_data_width": self.rb_data_width, "resources": self.resources,
                "files": [f"rtl/{n}" for n in sorted(set(self.files) | set(self.library))]}


def _check(learner: Learner) -> None:
    spec = learner.spec
    if spec.kind != "kan":
        raise LearnerError(f"learner '{learner.graph.name}' is a {spec.kind}; this generator builds KAN learners "
                           "(bitforge.toolchain.backends.rtl.learner_mlp builds MLPs)")


def basis_choice(learner: Learner, basis: str = "auto") -> bool:
    """True for the closed-form circuit, False for a ROM of the spec's own basis table (bit-exact either way)."""
    if basis not in BASIS_CHOICES:
        raise LearnerError(f"basis option {basis!r} unknown; expected one of {', '.join(BASIS_CHOICES)}")
    n = learner.layers()[0]
    circuit_ok = n.basis_impl == "closed_form" and n.order in CLOSED_FORM_POLYNOMIALS and n.u_bits >= 1
    if basis == "circuit" and not circuit_ok:
        raise LearnerError(f"the closed-form basis circuit computes basis_impl 'closed_form' with k = 1..3 and "
                           f"u_bits >= 1; this learner has basis_impl {n.basis_impl!r}, k = {n.order}, u_bits "
                           f"{n.u_bits}: use basis 'rom'")
    if basis == "auto":
        return circuit_ok and n.u_bits > ROM_MAX_U_BITS
    return basis == "circuit"


def generate_kan_learner(learner: Learner, name: str | None = None, basis: str = "auto") -> LearnerRtl:
    """Verilog of ``learner`` (one KAN layer), deterministic: the same learner gives byte-identical text."""
    _check(learner)
    spec, f = learner.spec, learner.formats
    n = learner.layers()[0]
    name = verilog_name(name or learner.graph.name)
    closed = basis_choice(learner, basis)
    nodes = learner.layers()
    n_in, n_out0, k, G = n.in_features, n.out_features, n.order, n.grid_size
    n_out = nodes[-1].out_features  # the predictions
    k1, n_coef = k + 1, G + k
    depth = -(-n_coef // k1)
    x_t, dp, co, st, bt, et = f.input, f.datapath, f.coeff, f.storage, f.basis, f.error
    # ROM: index, ROM and rotation in one front cycle; circuit: the registered index and the pipelined circuit.
    rom_bits = 0 if closed else n_in * (1 << n.u_bits) * (k + 1) * f.basis.width
    rom_sync = not closed and rom_bits > ROM_LUT_MAX_BITS
    index_latency = (1 if n.index_mult == 1 else 2) if closed else 0
    basis_latency = CLOSED_FORM_LATENCY[k] if closed else 1
    front = index_latency + basis_latency

    # widths of the learn stage
    prod_w = co.width + bt.width + 1  # signed coeff x (0, basis)
    sum_w = prod_w + clog2(n_in * k1) + 1
    db_w = bt.frac + 2  # a derivative code: signed, |db| <= 1
    acc = kan_accum_type(f, n_in)
    sum_frac = co.frac + bt.frac
    assert sum_frac == acc.frac
    upd_w = et.width + bt.width + 1  # signed error x (0, basis)
    d = et.frac + bt.frac - 1 - st.frac + spec.rule.lr_shift
    stochastic = spec.rule.rounding == "stochastic"
    rb_bits = spec.rule.rand_bits
    if d > 0:
        delta_w = max(upd_w, d + rb_bits) + 2
    else:
        delta_w = upd_w - d
    new_w = max(st.width, delta_w) + 1

    mems = _banks(n, depth, st.width)  # bank j of input i, word = every output's coefficient side by side
    all_seeds = lane_seeds(spec) if stochastic else None
    lanes = _lanes(all_seeds, 0, n_out0, n_in, k1)

    lo_w = signed_width(n.index_lo)
    mult_w = max(1, n.index_mult.bit_length())
    cell_w = max(1, (G - 1).bit_length())
    addr_w = max(1, clog2(depth))
    rb_i_w = max(1, clog2(max(m.in_features for m in nodes)))
    rb_l_w = clog2(len(nodes))  # 0 for one layer: the address is {i, p}
    rb_p_w = max(1, clog2(n_coef))
    table = None if closed else [packed_parameter(row, bt.width) for row in basis_table(k, n.u_bits, bt, n.basis_impl)]
    in_w = n_in * x_t.width + n_out * dp.width + 1
    out_w = n_out * dp.width
    rb_data_w = max(m.out_features for m in nodes) * st.width
    deep = [_deep_layer(learner, l, m, all_seeds, prod_w=prod_w, db_w=db_w, depth=depth)
            for l, m in enumerate(nodes) if l > 0]
    ctx = dict(
        name=name, graph=learner.graph.name, spec=spec, n_in=n_in, n_out=n_out, k=k, k1=k1, G=G, depth=depth,
        x_w=x_t.width, dp_w=dp.width, dp_frac=dp.frac, co_w=co.width, co_frac=co.frac, st_w=st.width,
        st_frac=st.frac, b_w=bt.width, b_frac=bt.frac, e_w=et.width, e_frac=et.frac,
        co_codes=mode_codes(co), dp_codes=mode_codes(dp), e_codes=mode_codes(et), st_codes=mode_codes(st),
        u_bits=n.u_bits, u_w=max(1, n.u_bits), cell_w=cell_w, lo_w=lo_w,
        index_lo=verilog_literal(n.index_lo, lo_w), mult_w=mult_w,
        index_mult=verilog_literal(n.index_mult, mult_w), index_shift=n.index_shift,
        closed=closed, rom_sync=rom_sync, rom_copies=(n_in + 1) // 2 if rom_sync else 1,
        rotate_in_loop=closed or rom_sync, table=table, front=front,
        index_latency=index_latency, basis_latency=basis_latency,
        latency=front + 1, prod_w=prod_w, sum_w=sum_w, sum_frac=sum_frac, upd_w=upd_w, d=d,
        delta_w=delta_w, new_w=new_w, stochastic=stochastic, rand_bits=rb_bits, lanes=lanes, mems=mems,
        addr_w=addr_w, rb_i_w=rb_i_w, rb_p_w=rb_p_w, rb_l_w=rb_l_w, rb_addr_w=rb_l_w + rb_i_w + rb_p_w,
        rb_data_w=rb_data_w, n_out0=n_out0, deep=deep, n_layers=len(nodes), db_w=db_w,
        y_last="y" if not deep else f"L{len(nodes) - 1}_y",
        in_w=in_w, out_w=out_w, sb_w=n_out * dp.width + 2, lr_shift=spec.rule.lr_shift,
        grid_lo=n.grid_lo, grid_hi=n.grid_hi, word_w=n_out0 * st.width, r_w=max(1, clog2(k1)),
        pow2=k1 & (k1 - 1) == 0, rb_byte_w=max(1, clog2(-(-rb_data_w // 8))), sizes=list(spec.sizes),
        bank_attr='(* ram_style = "block", no_rw_check *) ' if depth > BANK_LUTRAM_MAX_DEPTH else "",
    )
    ctx["sums"] = [balanced_sum([sign_extend(f"pr_{o}_{i}_{j}", prod_w, sum_w)
                                 for i in range(n_in) for j in range(k1)]) for o in range(n_out0)]
    env = templates()
    files = {f"{name}.v": env.get_template("learner_kan.v.j2").render(**ctx),
             f"{name}_board.v": env.get_template("learner_board.v.j2").render(**ctx)}
    products = sum(m.out_features * m.in_features * k1 for m in nodes)
    backprop = sum(m.out_features * m.in_features * (k1 + 1) + m.in_features for m in nodes[1:])
    index = sum(m.in_features * (m.index_mult != 1) for m in nodes)
    resources = {
        "multipliers": 2 * products + backprop + index + n_in * ({1: 0, 2: 1, 3: 2}[k] if closed else 0),
        "coefficient_bits": sum(m.in_features * k1 * depth * m.out_features * st.width for m in nodes),
        "coefficient_banks": ("block RAM" if depth > BANK_LUTRAM_MAX_DEPTH else "LUT RAM") + (
            ", hidden layers LUT RAM" if deep else ""),
        "basis": "closed_form circuit" if closed else
        f"{'block-RAM' if rom_sync else 'LUT'} rom ({n.basis_impl} table)",
        "rom_bits": (0 if closed else n_in * (1 << n.u_bits) * k1 * bt.width)
        + sum(m.in_features * (1 << m.u_bits) * k1 * (bt.width + db_w) for m in nodes[1:]),
        "lfsr_lanes": len(lanes) + sum(len(D["lanes"]) for D in deep),
        "parameters": int(sum(m.coeffs.size for m in nodes)),
    }
    return LearnerRtl(name, files, LIBRARY, front + 1, 1, in_w, out_w, rb_l_w + rb_i_w + rb_p_w, rb_data_w,
                      resources)


def _banks(n, depth: int, width: int) -> list[dict]:
    """Initial words of a KAN layer's cyclic banks: bank (i, j), address a holds every output's coefficient
    p = a (k+1) + j of input i (zero past the last coefficient)."""
    C = np.asarray(n.coeffs, dtype=np.int64)  # (out, in, G+k) storage codes
    k1, n_coef = n.order + 1, n.grid_size + n.order
    zero = np.zeros(n.out_features, dtype=np.int64)
    return [{"i": i, "j": j, "init": [packed_parameter(C[:, i, a * k1 + j] if a * k1 + j < n_coef else zero, width)
                                      for a in range(depth)]}
            for i in range(n.in_features) for j in range(k1)]


def _lanes(seeds, layer: int, n_out: int, n_in: int, k1: int) -> list[dict]:
    if seeds is None:
        return []
    s = seeds[layer][0]  # (out, in, k+1)
    return [{"o": o, "i": i, "m": m, "seed": f"32'h{int(s[o, i, m]):08x}"}
            for o in range(n_out) for i in range(n_in) for m in range(k1)]


def _deep_layer(learner: Learner, l: int, n, seeds, *, prod_w: int, db_w: int, depth: int) -> dict:
    """Everything layer ``l`` >= 1 (inside the learn cycle) needs: its index map, tables, banks and widths."""
    from ...learn.emulate import derivative_table

    f = learner.formats
    co, bt, et, st = f.coeff, f.basis, f.error, f.storage
    k1 = n.order + 1
    mems = _banks(n, depth, st.width)
    sum_w = prod_w + clog2(n.in_features * k1) + 1
    # backprop: pd = sum_m c db (frac coeff + basis), s = sum_o g pd, gx = round(s * mult * 2^-shift)
    pdp_w = co.width + db_w
    pd_w = pdp_w + clog2(k1) + 1
    gp_w = et.width + pd_w
    s_w = gp_w + clog2(n.out_features) + 1
    mult, shift = n.index_mult, co.frac + bt.frac + n.index_shift + n.u_bits - f.datapath.frac
    while mult % 2 == 0:  # as the golden model folds it
        mult, shift = mult // 2, shift - 1
    mult_lit_w = max(1, mult.bit_length())
    lo_w = signed_width(n.index_lo)
    mw = max(1, n.index_mult.bit_length())
    table = basis_table(n.order, n.u_bits, bt, n.basis_impl)
    dtable = derivative_table(n.order, n.u_bits, bt, n.basis_impl)
    return dict(
        l=l, n_in=n.in_features, n_out=n.out_features, x_name="y" if l == 1 else f"L{l - 1}_y",
        lo_w=lo_w, index_lo=verilog_literal(n.index_lo, lo_w), mult_w=mw, index_mult=verilog_literal(n.index_mult, mw),
        index_shift=n.index_shift, u_bits=n.u_bits, u_w=max(1, n.u_bits),
        table=[packed_parameter(r, bt.width) for r in table], dtable=[packed_parameter(r, db_w) for r in dtable],
        mems=mems, word_w=n.out_features * st.width, sum_w=sum_w,
        sums=[balanced_sum([sign_extend(f"L{l}_pr_{o}_{i}_{j}", prod_w, sum_w) for i in range(n.in_features)
                             for j in range(k1)]) for o in range(n.out_features)],
        pdp_w=pdp_w, pd_w=pd_w, gp_w=gp_w, s_w=s_w, gs_w=s_w + mult_lit_w + 1,
        pdsums=[[balanced_sum([sign_extend(f"L{l}_pp_{o}_{i}_{j}", pdp_w, pd_w) for j in range(k1)])
                 for i in range(n.in_features)] for o in range(n.out_features)],
        ssums=[balanced_sum([sign_extend(f"L{l}_gp_{o}_{i}", gp_w, s_w) for o in range(n.out_features)])
               for i in range(n.in_features)],
        inv_mult=mult, inv_shift=shift, inv_mult_lit=f"{mult_lit_w}'d{mult}",
        lanes=_lanes(seeds, l, n.out_features, n.in_features, k1),
    )


def pack_inputs(learner: Learner, x_codes: np.ndarray, target_codes: np.ndarray, learn_enable: np.ndarray) -> list[int]:
    """The core's input words ``{le, t[d_out], x[d_in]}`` (element 0 least significant), one per sample."""
    f = learner.formats
    xw, dw = f.input.width, f.datapath.width
    out = []
    for xs, ts, le in zip(np.asarray(x_codes), np.asarray(target_codes), np.asarray(learn_enable)):
        t_at, le_at = len(xs) * xw, len(xs) * xw + len(ts) * dw
        out.append(pack_word(xs, xw) | pack_word(ts, dw) << t_at | int(bool(le)) << le_at)
    return out


def coefficient_address(learner: Learner, i: int, p: int, layer: int = 0) -> int:
    """The read-back address of layer ``layer``'s input i, coefficient p (every output's at once):
    ``{layer, i, p}`` (``{i, p}`` for a one-layer learner)."""
    nodes = learner.layers()
    p_w = max(1, clog2(nodes[0].grid_size + nodes[0].order))
    i_w = max(1, clog2(max(m.in_features for m in nodes)))
    return (layer << (i_w + p_w)) | (i << p_w) | p


def readback_codes(learner: Learner, word: int) -> np.ndarray:
    """Every output's storage code from one read-back word."""
    st = learner.formats.storage
    return np.array(unpack_word(word, learner.layers()[0].out_features, st.width), dtype=np.int64)


__all__ = ["LearnerRtl", "generate_kan_learner", "pack_inputs", "coefficient_address", "readback_codes",
           "basis_choice", "BASIS_CHOICES"]
