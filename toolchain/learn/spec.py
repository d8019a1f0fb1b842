"""Online learners as IR: a graph of KAN (or Dense + ReLU) nodes holding the INITIAL state, plus its update rule.

A learner predicts, computes its error on chip and updates, one sample per step (arXiv 2602.02056).
``learn.emulate.run`` defines its trajectory bit for bit; the RTL learner generator implements the same
arithmetic. Everything a hardware learner needs to be generated lives in :class:`LearnerSpec`:

* **Storage with guard bits.** Coefficients (MLP: weights and biases) are *stored* in ``formats.storage``, which
  has more fractional bits than the multiplier's operand ``formats.coeff``; every read requantizes storage ->
  coeff with coeff's rounding (default TRN: the guard bits are simply not wired to the multiplier). Small
  updates accumulate in the guard bits instead of vanishing in the dead zone (|update| < 1/2 LSB).
* **Learning rate as a shift** on the full-width product: ``c -= round((2 g b) >> lr_shift)``, one rounding
  into the storage LSB, then a saturating subtract. A quantized constant eta would itself underflow at narrow
  formats (the public MLP fails at <8,4> for that reason).
* **Update rounding** "nearest" = RND_CONV (ties to even: symmetric about zero, so half-LSB updates of either
  sign are treated alike and the dead zone has no drift; RND would round +1/2 up and -1/2 toward zero), or
  "stochastic" with an LFSR per update lane (see :class:`UpdateRule`), unbiased: E[update] is exact.
* **Saturation everywhere**: every format must overflow with SAT or SAT_SYM.

On disk a learner is an ordinary IR folder (``model.json`` + ``weights.safetensors``) whose arrays are the
*storage* codes and whose ``metadata["learner"]`` holds the spec (``docs/ir.md``, section "Learners"). The
stored graph's nodes carry ``accum_type = None`` on purpose: the inference graph of a learner is
:meth:`Learner.inference_graph` (coefficients read into ``formats.coeff``), not the storage graph.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from .. import ir
from ..bspline import BASIS_IMPLS, CLOSED_FORM_POLYNOMIALS, basis_table, index_params
from ..errors import BitforgeError
from ..fixed import FixedType, Overflow, Rounding, clog2, out_of_range, parse_type, quantize, requantize

__all__ = [
    "LearnerError", "LearnerWarning", "UpdateRule", "LearnerFormats", "LearnerSpec", "Learner", "build_learner",
    "save_learner", "load_learner", "lane_seeds", "dead_zone_error", "LFSR_WIDTH", "LFSR_TAPS", "ROUNDINGS",
    "init_params", "greville", "nearest_lr_shift", "find_learner", "learner_from_graph",
]

#: Update roundings: "nearest" is RND_CONV on the discarded bits; "stochastic" adds an LFSR word first.
ROUNDINGS = ("nearest", "stochastic")
#: Fibonacci LFSR, shift left, feedback into bit 0: new = s[31] ^ s[21] ^ s[1] ^ s[0]. The polynomial
#: x^32 + x^22 + x^2 + x + 1 (Xilinx XAPP052) is primitive: period 2**32 - 1 from any non-zero state.
LFSR_WIDTH = 32
LFSR_TAPS = (32, 22, 2, 1)
METADATA_KEY = "learner"
LEARNER_VERSION = 1
_SATURATING = (Overflow.SAT, Overflow.SAT_SYM)


class LearnerError(BitforgeError):
    """A learner spec, state or file that cannot be built, run or generated; the message says what to change."""


class LearnerWarning(UserWarning):
    """A learner that runs but will learn badly (e.g. a wide dead zone); the message gives the numbers."""


@dataclass(frozen=True)
class UpdateRule:
    """How coefficients move: ``c -= round((2 g b) >> lr_shift)`` in the storage LSB, saturating.

    ``g`` is the back-propagated error in ``formats.error`` (the output layer's g is e = y_hat - t, i.e. half
    the MSE gradient; the feedback's factor 2 is a free left shift), ``b`` the basis weight (MLP: the layer
    input, or 1 for a bias). eta = 2**-lr_shift.

    Stochastic rounding: every update lane (KAN: layer, output o, input i, slot m = 0..k of the k+1 active
    coefficients c+m; MLP: each weight, then each bias) owns a 32-bit Fibonacci LFSR (:data:`LFSR_TAPS`)
    seeded with :func:`lane_seeds`. Sample t uses the word ``w = state & (2**rand_bits - 1)`` of the state
    *before* the sample, then every lane's LFSR leaps ``rand_bits`` single steps (one XOR network per lane,
    one clock: II = 1), on every sample, whether ``learn_enable`` is set or not. So a lane's words are
    consecutive disjoint ``rand_bits``-bit chunks of its bit stream. With d discarded bits,
    ``r = (w << d) >> rand_bits`` (w placed at the top of the discarded field) and the update is
    ``(p + r) >> d`` (floor): unbiased to within 2**-rand_bits LSB.
    """

    lr_shift: int = 4
    rounding: str = "nearest"
    lfsr_seed: int = 1
    rand_bits: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.lr_shift, (int, np.integer)) or isinstance(self.lr_shift, bool) \
                or not 0 <= self.lr_shift <= 40:
            raise LearnerError(f"lr_shift must be an integer in 0..40 (eta = 2**-lr_shift), got {self.lr_shift!r}")
        if self.rounding not in ROUNDINGS:
            raise LearnerError(f"update rounding {self.rounding!r} unknown; expected one of {', '.join(ROUNDINGS)}")
        if not 1 <= int(self.rand_bits) <= LFSR_WIDTH:
            raise LearnerError(f"rand_bits must be in 1..{LFSR_WIDTH} (bits of the {LFSR_WIDTH}-bit LFSR used per "
                               f"sample), got {self.rand_bits}")
        if int(self.lfsr_seed) < 0:
            raise LearnerError(f"lfsr_seed must be >= 0, got {self.lfsr_seed}")
        object.__setattr__(self, "lr_shift", int(self.lr_shift))

    @property
    def eta(self) -> float:
        return math.ldexp(1.0, -self.lr_shift)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _type(t: Union[str, FixedType], defaults: bool = True) -> FixedType:
    """Parse a type; ``fixed<W,I>`` without modes means RND_CONV, SAT here (saturation everywhere)."""
    if isinstance(t, FixedType):
        return t
    if defaults and re.fullmatch(r"\s*u?fixed\s*<\s*-?\d+\s*,\s*-?\d+\s*>\s*", str(t)):
        return parse_type(t).with_(rounding=Rounding.RND_CONV, overflow=Overflow.SAT)
    return parse_type(t)


@dataclass(frozen=True)
class LearnerFormats:
    """Every fixed-point type of a learner. Build with :meth:`make`; all must saturate.

    input: the sample's x codes. datapath: layer outputs, predictions and targets. coeff: the coefficient
    (weight) operand of the multipliers, read from storage with coeff's rounding. storage: the coefficient
    memory, ``guard_bits`` more fractional bits than coeff. basis: unsigned B-spline weights (KAN only).
    error: e = y_hat - t and the back-propagated g of hidden layers.
    """

    input: FixedType
    datapath: FixedType
    coeff: FixedType
    storage: FixedType
    basis: FixedType
    error: FixedType

    @classmethod
    def make(cls, datapath: Union[str, FixedType] = "fixed<16,6>", guard_bits: int = 8, *,
             input: Union[str, FixedType, None] = None, coeff: Union[str, FixedType, None] = None,
             error: Union[str, FixedType, None] = None, basis: Union[str, FixedType, None] = None) -> "LearnerFormats":
        """Defaults from the datapath: coeff = datapath read with TRN, storage = coeff + guard bits, basis =
        ``ufixed<min(W_coeff + 1, 18), 1>`` (the quantize pass's rule, capped at an 18-bit multiplier port),
        error = datapath + 1 integer bit (y_hat - t exact)."""
        dp = _type(datapath)
        co = _type(coeff) if coeff is not None else dp.with_(rounding=Rounding.TRN, overflow=Overflow.SAT)
        if guard_bits < 0:
            raise LearnerError(f"guard_bits must be >= 0, got {guard_bits}")
        st = FixedType(co.width + guard_bits, co.integer, True, Rounding.RND_CONV, Overflow.SAT)
        bt = _type(basis) if basis is not None else FixedType(min(co.width + 1, 18), 1, False, Rounding.RND_CONV,
                                                              Overflow.SAT)
        et = _type(error) if error is not None else FixedType(dp.width + 1, dp.integer + 1, True, Rounding.RND_CONV,
                                                             Overflow.SAT)
        return cls(_type(input) if input is not None else dp, dp, co, st, bt, et)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            t = getattr(self, f.name)
            if not isinstance(t, FixedType):
                object.__setattr__(self, f.name, t := _type(t))
            if t.overflow not in _SATURATING:
                raise LearnerError(f"learner format '{f.name}' is {t}: a learner saturates everywhere (a wrapped "
                                   "coefficient or error flips sign and diverges); use overflow SAT or SAT_SYM")
            if f.name != "basis" and not t.signed:
                raise LearnerError(f"learner format '{f.name}' is {t}: it must be signed")
        if self.basis.signed or self.basis.integer < 1:
            raise LearnerError(f"basis format {self.basis} must be unsigned with >= 1 integer bit (bases lie in "
                               "[0, 1]), e.g. ufixed<17,1,RND_CONV,SAT>")
        if self.storage.frac < self.coeff.frac or self.storage.integer < self.coeff.integer:
            raise LearnerError(f"coefficient storage {self.storage} must cover the coefficient operand {self.coeff} "
                               f"(frac {self.storage.frac} >= {self.coeff.frac} and integer bits "
                               f"{self.storage.integer} >= {self.coeff.integer}): storage adds guard bits")

    @property
    def guard_bits(self) -> int:
        return self.storage.frac - self.coeff.frac

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name).to_short() for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, doc: dict) -> "LearnerFormats":
        return cls(**{f.name: parse_type(doc[f.name]) for f in dataclasses.fields(cls)})


KINDS = ("kan", "mlp")
INITS = ("linear", "normal", "uniform", "zeros")


@dataclass(frozen=True)
class LearnerSpec:
    """A learner: model kind, layer sizes, KAN grid, formats and update rule, initial state's seed.

    The one spec of an online learner: the bit-accurate learner (:func:`build_learner`) and the float reference
    (``bitforge.models.online_learners.OnlineLearner``, which reads the kind, sizes, grid, init and
    ``rule.eta`` and ignores the formats) take the same object, so a comparison cannot drift apart.

    ``sizes`` lists the widths ``[d_in, hidden..., d_out]``. KAN: every layer has G cells on ``grid_range``
    and order k (1..3 for "closed_form", 1..5 for "table"). MLP: Dense + ReLU between layers, none after
    the last. The learning rate is ``rule.lr_shift``: eta = 2**-lr_shift, a right shift on chip, so only
    powers of two exist (:func:`nearest_lr_shift` rounds any other eta). ``init`` (drawn by
    :func:`init_params` from ``np.random.default_rng(seed)``): "linear" (the KAN default: hidden edges
    phi(x) = w x, w ~ N(0, 1/d_in), through the Greville abscissae; the output layer zero, the LMS starting
    point), "uniform" (the MLP default: U(+-1/sqrt(fan_in)), PyTorch's Linear), "normal" (N(0, init_scale^2),
    scale 0.1 by default), "zeros".
    """

    kind: str = "kan"
    sizes: tuple[int, ...] = (1, 1)
    grid_range: tuple[float, float] = (-1.0, 1.0)
    grid_size: int = 5
    order: int = 3
    basis_impl: str = "closed_form"
    formats: LearnerFormats = field(default_factory=LearnerFormats.make)
    rule: UpdateRule = field(default_factory=UpdateRule)
    seed: int = 0
    init: Optional[str] = None
    init_scale: Optional[float] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        object.__setattr__(self, "grid_range", tuple(float(v) for v in self.grid_range))
        if self.kind not in KINDS:
            raise LearnerError(f"learner kind {self.kind!r} unknown; expected one of {', '.join(KINDS)}")
        if len(self.sizes) < 2 or min(self.sizes) < 1:
            raise LearnerError(f"layer sizes {list(self.sizes)} invalid; expected [d_in, (hidden...,) d_out], all >= 1")
        if self.init is None:
            object.__setattr__(self, "init", "linear" if self.kind == "kan" else "uniform")
        if self.init not in INITS or (self.kind == "mlp" and self.init == "linear"):
            raise LearnerError(f"init {self.init!r} unknown; expected one of {', '.join(INITS)}")
        if self.kind == "kan":
            lo, hi = self.grid_range
            if not hi > lo:
                raise LearnerError(f"grid range {list(self.grid_range)} is empty; expected [lo, hi] with hi > lo")
            if self.grid_size < 1:
                raise LearnerError(f"grid size G must be >= 1, got {self.grid_size}")
            if self.basis_impl not in BASIS_IMPLS:
                raise LearnerError(f"basis_impl {self.basis_impl!r} unknown; expected one of {', '.join(BASIS_IMPLS)}")
            top = max(CLOSED_FORM_POLYNOMIALS) if self.basis_impl == "closed_form" else 5
            if not 1 <= self.order <= top:
                raise LearnerError(f"spline order k={self.order} unsupported with basis_impl {self.basis_impl!r}; "
                                   f"expected 1..{top}")
            for x_t, where in ((self.formats.input, "input"), (self.formats.datapath, "datapath")):
                h = (hi - lo) / self.grid_size
                if h < x_t.lsb:
                    raise LearnerError(f"grid step h = {h:g} on [{lo:g}, {hi:g}) with G={self.grid_size} is finer "
                                       f"than the {where} LSB {x_t.lsb:g} ({x_t}): cells would be skipped; add "
                                       "fractional bits or lower G")

    @property
    def n_layers(self) -> int:
        return len(self.sizes) - 1

    @property
    def eta(self) -> float:
        """The learning rate, 2**-lr_shift."""
        return self.rule.eta

    def param_shapes(self) -> list[tuple[int, ...]]:
        """KAN: one ``(out, in, G+k)`` coefficient array per layer; MLP: ``(out, in)`` weight, ``(out,)`` bias."""
        shapes: list[tuple[int, ...]] = []
        for d_in, d_out in zip(self.sizes[:-1], self.sizes[1:]):
            shapes += [(d_out, d_in, self.grid_size + self.order)] if self.kind == "kan" else [(d_out, d_in), (d_out,)]
        return shapes

    @property
    def n_params(self) -> int:
        """Learned values: every coefficient (KAN) or weight and bias (MLP) the update rule writes."""
        return sum(math.prod(s) for s in self.param_shapes())

    def replace(self, **changes) -> "LearnerSpec":
        """A copy with fields changed; ``lr_shift=``, ``rounding=``, ``lfsr_seed=`` change the rule."""
        rule_keys = {f.name for f in dataclasses.fields(UpdateRule)}
        rule_changes = {k: changes.pop(k) for k in list(changes) if k in rule_keys}
        if rule_changes:
            changes["rule"] = dataclasses.replace(changes.get("rule", self.rule), **rule_changes)
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return {"kind": self.kind, "sizes": list(self.sizes), "grid_range": list(self.grid_range),
                "grid_size": self.grid_size, "order": self.order, "basis_impl": self.basis_impl,
                "formats": self.formats.to_json(), "rule": self.rule.to_json(), "seed": self.seed,
                "init": self.init, "init_scale": self.init_scale}

    @classmethod
    def from_json(cls, doc: dict) -> "LearnerSpec":
        try:
            return cls(kind=doc["kind"], sizes=tuple(doc["sizes"]), grid_range=tuple(doc["grid_range"]),
                       grid_size=int(doc["grid_size"]), order=int(doc["order"]), basis_impl=doc["basis_impl"],
                       formats=LearnerFormats.from_json(doc["formats"]), rule=UpdateRule(**doc["rule"]),
                       seed=int(doc["seed"]), init=doc["init"], init_scale=doc["init_scale"])
        except (KeyError, TypeError) as e:
            raise LearnerError(f"learner spec in model.json metadata is incomplete or malformed ({e!r})") from None


# -- derived types -----------------------------------------------------------------------------------

def kan_accum_type(f: LearnerFormats, n_in: int) -> FixedType:
    """Exact, non-overflowing sum over inputs: each edge's sum_m c_m b_m is a convex combination (bases >= 0,
    sum exactly 1), so it stays within the coefficient range; ``n_in`` edges add ceil(log2 n_in) bits."""
    g = clog2(n_in)
    frac = f.coeff.frac + f.basis.frac
    return FixedType(f.coeff.integer + g + frac, f.coeff.integer + g, True, Rounding.TRN, Overflow.SAT)


def dense_accum_type(f: LearnerFormats, x_t: FixedType, n_in: int) -> FixedType:
    """Exact sum of ``n_in`` products plus the bias (at frac(x) + frac(W))."""
    g = clog2(n_in + 1)
    frac = x_t.frac + f.coeff.frac
    integer = x_t.integer + f.coeff.integer + g
    return FixedType(integer + frac, integer, True, Rounding.TRN, Overflow.SAT)


# -- the learner -------------------------------------------------------------------------------------

#: A learner's state: per layer, its arrays of storage codes (KAN: "coeffs"; MLP: "weight", "bias").
State = list[dict[str, np.ndarray]]


@dataclass
class Learner:
    """An IR graph whose arrays are the storage codes of the initial state, and its spec (rule, formats)."""

    graph: ir.Graph
    spec: LearnerSpec

    @property
    def rule(self) -> UpdateRule:
        return self.spec.rule

    @property
    def formats(self) -> LearnerFormats:
        return self.spec.formats

    def layers(self) -> list[ir.Node]:
        """The learning nodes (KANLayer or Dense) in order."""
        return [n for n in self.graph.nodes if isinstance(n, (ir.KANLayer, ir.Dense))]

    def state(self) -> State:
        return [{k: v.copy() for k, v in n.array_fields().items()} for n in self.layers()]

    @property
    def n_params(self) -> int:
        """Learned values: every coefficient (KAN) or weight and bias (MLP) the update rule writes."""
        return int(sum(v.size for n in self.layers() for v in n.array_fields().values()))

    def with_state(self, state: State, run: Optional[int] = None) -> "Learner":
        """A learner starting from ``state`` (e.g. a trajectory's final state; ``run`` picks one of a batch)."""
        layers = self.layers()
        if len(state) != len(layers):
            raise LearnerError(f"state has {len(state)} layers, learner '{self.graph.name}' has {len(layers)}")
        new_nodes, it = [], iter(state)
        for n in self.graph.nodes:
            if isinstance(n, (ir.KANLayer, ir.Dense)):
                arrays = next(it)
                changes = {}
                for k, old in n.array_fields().items():
                    a = np.asarray(arrays[k])
                    a = a[run] if run is not None else a
                    if a.shape != old.shape:
                        raise LearnerError(f"{n.describe()}: state array '{k}' has shape {a.shape}, expected "
                                           f"{old.shape} (pass run= to pick one run of a batched trajectory)")
                    changes[k] = a.astype(np.int64)
                n = dataclasses.replace(n, **changes)
            new_nodes.append(n)
        g = self.graph.copy()
        g.nodes = new_nodes
        return Learner(ir.validate(g), self.spec)  # codes must fit the storage type

    def with_rule(self, **changes) -> "Learner":
        """Same state, rule fields changed (``lr_shift=``, ``rounding=``, ``lfsr_seed=``, ``rand_bits=``)."""
        return Learner(self.graph, self.spec.replace(**changes))

    def inference_graph(self, float_input: bool = False) -> ir.Graph:
        """The graph the learner predicts with: coefficients read into ``formats.coeff`` (storage -> coeff with
        coeff's rounding and overflow), accumulators set. ``emulate.run`` on it gives the learner's predictions.

        ``float_input``: the graph takes real values, as a compiled model does, and its first node quantizes them
        into ``formats.input`` (the rounding and saturation a learning stream's inputs get); without it the graph
        takes input codes."""
        f = self.formats
        g = self.graph.copy()
        if float_input:
            x = g.inputs[0]
            q = f"{x}_q"
            g.nodes = [ir.Quantize("quantize_input", (x,), (q,))] + [
                dataclasses.replace(n, inputs=tuple(q if t == x else t for t in n.inputs)) for n in g.nodes]
            g.tensors = {x: ir.TensorSpec(x, g.tensors[x].shape, None),
                         q: ir.TensorSpec(q, g.tensors[x].shape, g.tensors[x].dtype),
                         **{k: v for k, v in g.tensors.items() if k != x}}
        nodes = []
        for n in g.nodes:
            x_t = g.tensors[n.input].dtype
            if isinstance(n, ir.KANLayer):
                n = dataclasses.replace(n, coeffs=requantize(n.coeffs, f.storage, f.coeff), coeff_type=f.coeff,
                                        accum_type=kan_accum_type(f, n.in_features))
            elif isinstance(n, ir.Dense):
                n = dataclasses.replace(n, weight=requantize(n.weight, f.storage, f.coeff),
                                        bias=requantize(n.bias, f.storage, f.coeff), weight_type=f.coeff,
                                        bias_type=f.coeff, accum_type=dense_accum_type(f, x_t, n.in_features))
            nodes.append(n)
        g.nodes = nodes
        g.metadata = {k: v for k, v in g.metadata.items() if k != METADATA_KEY}
        return ir.validate(g)


def greville(spec: LearnerSpec) -> np.ndarray:
    """Knot averages of the G+k bases: sum_j greville_j B_j(x) = x on the grid (linear precision).

    Basis j spans knots t_j..t_{j+k+1}, t_j = lo + (j - k) h; its Greville point is the mean of the k inner knots
    t_{j+1}..t_{j+k}, i.e. lo + (j - (k - 1) / 2) h."""
    lo, hi = spec.grid_range
    h = (hi - lo) / spec.grid_size
    return lo + (np.arange(spec.grid_size + spec.order) - (spec.order - 1) / 2.0) * h


def init_params(spec: LearnerSpec, seed: Optional[int] = None) -> list[np.ndarray]:
    """The initial parameters in float64, in :meth:`LearnerSpec.param_shapes` order, drawn from
    ``np.random.default_rng(seed)`` (default ``spec.seed``) layer by layer (see :class:`LearnerSpec`'s ``init``).

    The float reference and :func:`build_learner` both start here, so they start from the same numbers (the
    fixed-point learner rounds them into its storage format)."""
    rng = np.random.default_rng(spec.seed if seed is None else seed)
    out: list[np.ndarray] = []
    for layer in range(spec.n_layers):
        out += _initial(spec, layer, rng)
    return out


def _initial(spec: LearnerSpec, layer: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Float initial arrays of one layer (KAN: [coeffs]; MLP: [weight, bias])."""
    d_in, d_out = spec.sizes[layer], spec.sizes[layer + 1]
    shapes = [(d_out, d_in, spec.grid_size + spec.order)] if spec.kind == "kan" else [(d_out, d_in), (d_out,)]
    if spec.init == "zeros":
        return [np.zeros(s) for s in shapes]
    if spec.init == "linear":
        if layer == spec.n_layers - 1:
            return [np.zeros(shapes[0])]
        w = rng.normal(0.0, 1.0 / math.sqrt(d_in), size=(d_out, d_in))
        return [w[:, :, None] * greville(spec)[None, None, :]]
    if spec.init == "normal":
        return [rng.normal(0.0, 0.1 if spec.init_scale is None else spec.init_scale, size=s) for s in shapes]
    bound = 1.0 / math.sqrt(d_in) if spec.init_scale is None else spec.init_scale
    return [rng.uniform(-bound, bound, size=s) for s in shapes]


def nearest_lr_shift(eta: float) -> int:
    """The shift whose 2**-shift is nearest to ``eta`` on a log scale (0.1 -> 3, i.e. 0.125): the learner applies
    its learning rate as a right shift, so only powers of two exist."""
    try:
        eta = float(eta)
    except (TypeError, ValueError):
        raise LearnerError(f"learning rate {eta!r} is not a number") from None
    if not (math.isfinite(eta) and eta > 0):
        raise LearnerError(f"learning rate {eta} must be a positive number (eta = 2**-N, N = 0..40)")
    shift = round(-math.log2(eta))
    if not 0 <= shift <= 40:
        raise LearnerError(f"learning rate {eta} is outside 2**-40..1 (eta = 2**-N, N = 0..40: a right shift by N)")
    return shift


def _storage_codes(values, spec: LearnerSpec, where: str, shape: tuple[int, ...]) -> np.ndarray:
    st = spec.formats.storage
    v = np.asarray(values, dtype=np.float64)
    if v.shape != shape:
        raise LearnerError(f"{where}: initial values have shape {v.shape}, expected {shape}")
    bad = out_of_range(v, st)
    if bad.any():
        raise LearnerError(f"{where}: initial values up to {np.abs(v).max():g} do not fit the coefficient storage "
                           f"{st} (range [{st.min_value:g}, {st.max_value:g}]); add integer bits to the coeff format "
                           "or scale the initial values down")
    return quantize(v, st)


def _split_initial(spec: LearnerSpec, initial: Sequence) -> list[list]:
    """Per-layer lists from either per-layer entries or the flat :func:`init_params` list."""
    per = 1 if spec.kind == "kan" else 2
    flat = list(initial)
    if len(flat) == spec.n_layers * per:  # KAN: one array per layer; MLP: the flat [w0, b0, w1, b1, ...]
        return [flat[per * j: per * (j + 1)] for j in range(spec.n_layers)]
    if per == 2 and len(flat) == spec.n_layers:  # MLP: [(w0, b0), (w1, b1), ...]
        return [list(v) for v in flat]
    raise LearnerError(f"initial values: expected {spec.n_layers} layers (or {spec.n_layers * per} arrays in "
                       f"init_params order), found {len(flat)} entries")


def build_learner(spec: LearnerSpec, initial: Optional[Sequence] = None, name: Optional[str] = None) -> Learner:
    """The learner's graph with its initial state.

    ``initial`` optionally gives float initial values per layer (KAN: the ``(out, in, G+k)`` coefficients;
    MLP: ``(weight (out, in), bias (out,))``), or the flat :func:`init_params` list, e.g. another seed's or a
    trained float network's; otherwise :func:`init_params` draws them from ``spec.seed`` (the float reference's
    starting point). Values are rounded into the storage format.
    """
    f = spec.formats
    per_layer = _split_initial(spec, init_params(spec) if initial is None else initial)
    x = ir.TensorSpec("x", (spec.sizes[0],), f.input)
    layers: list[tuple[ir.Node, ir.TensorSpec]] = []
    x_t = f.input
    for j, (d_in, d_out) in enumerate(zip(spec.sizes[:-1], spec.sizes[1:])):
        last = j == spec.n_layers - 1
        vals = per_layer[j]
        if spec.kind == "kan":
            shape = (d_out, d_in, spec.grid_size + spec.order)
            lo, hi = spec.grid_range
            index_lo, mult, shift, u_bits = index_params(lo, hi, spec.grid_size, x_t)
            node = ir.KANLayer(f"kan{j}", ("",), ("",), coeffs=_storage_codes(vals[0], spec, f"KAN layer {j}", shape),
                               grid_lo=lo, grid_hi=hi, grid_size=spec.grid_size, order=spec.order,
                               coeff_type=f.storage, basis_type=f.basis, u_bits=u_bits, index_lo=index_lo,
                               index_mult=mult, index_shift=shift, accum_type=None, basis_impl=spec.basis_impl)
            layers.append((node, ir.TensorSpec("y" if last else f"h{j}", (d_out,), f.datapath)))
        else:
            node = ir.Dense(f"fc{j}", ("",), ("",),
                            weight=_storage_codes(vals[0], spec, f"Dense layer {j} weight", (d_out, d_in)),
                            bias=_storage_codes(vals[1], spec, f"Dense layer {j} bias", (d_out,)),
                            weight_type=f.storage, bias_type=f.storage, accum_type=None)
            layers.append((node, ir.TensorSpec("y" if last else f"z{j}", (d_out,), f.datapath)))
            if not last:
                layers.append((ir.ReLU(f"relu{j}", ("",), ("",)), ir.TensorSpec(f"h{j}", (d_out,), f.datapath)))
        x_t = f.datapath
    g = ir.sequential(name or f"{spec.kind}-learner", x, layers)
    learner = Learner(ir.validate(g), spec)
    _check_dead_zone(spec)
    return learner


# -- dead zone ---------------------------------------------------------------------------------------

def _basis_max(spec: LearnerSpec) -> float:
    """Largest basis weight a KAN update multiplies by (2/3 for cubic), from the hardware's own table."""
    if spec.kind != "kan":
        return 1.0
    _, _, _, u_bits = index_params(*spec.grid_range, spec.grid_size, spec.formats.input)
    t = basis_table(spec.order, u_bits, spec.formats.basis, spec.basis_impl)
    return float(t.max()) * spec.formats.basis.lsb


def dead_zone_error(spec: LearnerSpec) -> float:
    """|e| below which a round-to-nearest update of the output layer is lost even at the largest basis weight:
    2 |e| b_max 2**-lr_shift < LSB_storage / 2, i.e. |e| < LSB_storage 2**(lr_shift - 2) / b_max (arXiv 2602.02056:
    ~3 2**(-F-3) / eta for cubic). The MLP's largest "basis" is its input; we report the bias's (input 1)."""
    return spec.formats.storage.lsb * math.ldexp(1.0, spec.rule.lr_shift - 2) / _basis_max(spec)


def _check_dead_zone(spec: LearnerSpec) -> None:
    dz = dead_zone_error(spec)
    e_max = spec.formats.error.max_value
    if spec.rule.rounding == "nearest" and dz > e_max:
        raise LearnerError(f"lr_shift {spec.rule.lr_shift} underflows every update: errors below {dz:g} round to no "
                           f"change with storage {spec.formats.storage} (LSB {spec.formats.storage.lsb:g}), and the "
                           f"error format {spec.formats.error} cannot exceed {e_max:g}; lower lr_shift, add guard "
                           "bits, or use stochastic rounding")
    lsb = spec.formats.datapath.lsb
    if spec.rule.rounding == "nearest" and dz > 16 * lsb:
        warnings.warn(f"dead zone: with lr_shift {spec.rule.lr_shift} and storage {spec.formats.storage}, updates "
                      f"vanish once |error| < {dz:g} = {dz / lsb:.0f} datapath LSBs (MSE floor ~{dz * dz:.2g}); add "
                      "guard bits, lower lr_shift, or use stochastic rounding", LearnerWarning, stacklevel=3)


# -- stochastic rounding seeds -----------------------------------------------------------------------

def lane_counts(spec: LearnerSpec) -> list[tuple[int, ...]]:
    """Per layer, the shapes of its update lanes: KAN ``[(out, in, k+1)]``; MLP ``[(out, in), (out,)]``."""
    out = []
    for d_in, d_out in zip(spec.sizes[:-1], spec.sizes[1:]):
        out.append(((d_out, d_in, spec.order + 1),) if spec.kind == "kan" else ((d_out, d_in), (d_out,)))
    return out


def lane_seeds(spec: LearnerSpec) -> list[tuple[np.ndarray, ...]]:
    """Initial 32-bit LFSR states of every update lane, in the shapes of :func:`lane_counts`.

    Lanes are numbered 0, 1, ... over layers in order, each layer's lanes in C order (MLP: weights, then
    biases). Lane n's seed is the splitmix64 finaliser of ``(lfsr_seed << 32) + n + 1``, top 32 bits; 0 -> 1.
    The RTL generator bakes these constants into the lanes' reset values.
    """
    M = (1 << 64) - 1
    lane = 0
    out = []
    for shapes in lane_counts(spec):
        arrays = []
        for shape in shapes:
            seeds = np.empty(int(np.prod(shape)), dtype=np.uint64)
            for j in range(seeds.size):
                z = ((int(spec.rule.lfsr_seed) << 32) + lane + 1 + 0x9E3779B97F4A7C15) & M
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
                z = (z ^ (z >> 31)) >> 32
                seeds[j] = z or 1
                lane += 1
            arrays.append(seeds.reshape(shape))
        out.append(tuple(arrays))
    return out


# -- files ---------------------------------------------------------------------------------------------

def save_learner(learner: Learner, folder: Union[str, os.PathLike]) -> Path:
    """An IR folder (``model.json`` + ``weights.safetensors``) with the spec in ``metadata["learner"]``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    g = learner.graph.copy()
    g.metadata[METADATA_KEY] = {"version": LEARNER_VERSION, **learner.spec.to_json()}
    ir.save(g, folder)
    return folder


def load_learner(folder: Union[str, os.PathLike]) -> Learner:
    """Read a learner written by :func:`save_learner` and check its graph against its spec."""
    return learner_from_graph(ir.load(folder), folder)


def learner_from_graph(g: ir.Graph, folder: Union[str, os.PathLike]) -> Learner:
    """The learner an IR graph with ``metadata["learner"]`` describes (read from ``folder``, which messages
    name; a bundle's ``learner/`` member folder too), its graph checked against its spec."""
    doc = g.metadata.get(METADATA_KEY)
    if not isinstance(doc, dict):
        raise LearnerError(f"{folder}: model.json has no metadata['{METADATA_KEY}']: this IR folder is a plain model, "
                           "not a learner (write one with bitforge.toolchain.learn.spec.save_learner)")
    if doc.get("version") != LEARNER_VERSION:
        raise LearnerError(f"{folder}: learner format version {doc.get('version')} is not supported (this bitforge "
                           f"reads {LEARNER_VERSION})")
    spec = LearnerSpec.from_json({k: v for k, v in doc.items() if k != "version"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LearnerWarning)
        ref = build_learner(spec, initial=None, name=g.name)
    got = [(n.OP, n.name, n.attributes(), {k: a.shape for k, a in n.array_fields().items()}) for n in g.nodes]
    want = [(n.OP, n.name, n.attributes(), {k: a.shape for k, a in n.array_fields().items()}) for n in ref.graph.nodes]
    if got != want or json.dumps(ir.to_json(_strip(g))["tensors"]) != json.dumps(ir.to_json(ref.graph)["tensors"]):
        raise LearnerError(f"{folder}: the graph does not match its learner spec (nodes {got}, the spec builds "
                           f"{want}); the files were edited by hand or come from another bitforge")
    g.metadata = {k: v for k, v in g.metadata.items() if k != METADATA_KEY}
    return Learner(ir.validate(g), spec)


def find_learner(path: Union[str, os.PathLike]) -> Optional[Path]:
    """The learner IR folder that ``path`` names, or None when it names none: ``path`` itself when its
    ``model.json`` holds a learner, or ``path/final`` (the state after the stream) when ``path`` is a
    ``bitforge learn`` output folder."""
    path = Path(path)
    for folder in (path, path / "final"):
        mj = folder / "model.json"
        if mj.is_file():
            try:
                doc = json.loads(mj.read_text())
            except (OSError, json.JSONDecodeError):
                return None  # ir.load says what is wrong with it
            if isinstance(doc, dict) and METADATA_KEY in (doc.get("metadata") or {}):
                return folder
            return None
    return None


def _strip(g: ir.Graph) -> ir.Graph:
    h = g.copy()
    h.metadata = {}
    return h
