"""RTL of an online MLP learner, the KAN learner's baseline: fully parallel, one sample per clock (II 1).

Every weight and bias is a register; one combinational clock does the forward pass (Dense, ReLU, ...), the
error ``e = y - t``, the backward pass with the pre-update weights (``g_x = round(W^T g)`` and the ReLU mask),
and every update ``w -= round((2 g x) >> lr_shift)``, exactly as :func:`bitforge.toolchain.emulate_learn.run`.
Unlike the KAN, every parameter moves on every sample, so nothing can be forwarded around a memory: the whole
network is the loop. That costs 2 x (weights) + (hidden inputs x outputs) multipliers and a clock period of
four multiplies in series; designs that do not fit a part say so in the implementation report (a
time-multiplexed MLP learner is not generated yet).

Ports are the KAN learner's (:mod:`.learner_kan`); the read-back port addresses parameters by flat index
(per layer the weights row by row, then the biases) and is ready at any time.
"""
from __future__ import annotations

import numpy as np

from ...learner import Learner, LearnerError, dense_accum_type, lane_seeds
from .generate import _env, verilog_name
from .learner_kan import LearnerRtl, _balanced_sum, _clog2, _codes
from .stages import verilog_literal

LIBRARY = ("bf_requant.v", "bf_lfsr_lane.v", "bf_deserialize.v", "bf_serialize.v")


def _sext(name: str, w: int, to: int) -> str:
    return f"$signed({{{{{to - w}{{{name}[{w - 1}]}}}}, {name}}})" if to > w else f"$signed({name})"


def _aligned_bias(name: str, w: int, shift: int, to: int) -> str:
    """The bias code moved to the accumulator's binary point (``shift`` zeros below) and sign-extended."""
    zeros = f", {shift}'b0" if shift > 0 else ""
    return f"$signed({{{{{to - w - shift}{{{name}[{w - 1}]}}}}, {name}{zeros}}})"


def parameter_order(learner: Learner) -> list[tuple[int, str, tuple[int, ...]]]:
    """(layer, "w" | "b", index) of every parameter in read-back address order."""
    out = []
    for l, n in enumerate(learner.layers()):
        out += [(l, "w", (o, i)) for o in range(n.out_features) for i in range(n.in_features)]
        out += [(l, "b", (o,)) for o in range(n.out_features)]
    return out


def generate_mlp_learner(learner: Learner, name: str | None = None) -> LearnerRtl:
    spec, f = learner.spec, learner.formats
    if spec.kind != "mlp":
        raise LearnerError(f"learner '{learner.graph.name}' is a {spec.kind}; generate_mlp_learner builds MLPs")
    name = verilog_name(name or learner.graph.name)
    layers_ir = learner.layers()
    n_layers = len(layers_ir)
    st, co, dp, et = f.storage, f.coeff, f.datapath, f.error
    d = et.frac - 1 - st.frac + spec.rule.lr_shift
    stochastic = spec.rule.rounding == "stochastic"
    params, layers, seeds = [], [], {}
    lanes = lane_seeds(spec) if stochastic else None
    for l, n in enumerate(layers_ir):
        x_t = f.input if l == 0 else dp
        W, b = np.asarray(n.weight, dtype=np.int64), np.asarray(n.bias, dtype=np.int64)
        for o in range(n.out_features):
            for i in range(n.in_features):
                params.append({"name": f"w_{l}_{o}_{i}", "init": verilog_literal(int(W[o, i]), st.width)})
                if stochastic:
                    seeds[f"{l}_{o}_{i}"] = f"32'h{int(lanes[l][0][o, i]):08x}"
        for o in range(n.out_features):
            params.append({"name": f"b_{l}_{o}", "init": verilog_literal(int(b[o]), st.width)})
            if stochastic:
                seeds[f"{l}_{o}_b"] = f"32'h{int(lanes[l][1][o]):08x}"
        acc = dense_accum_type(f, x_t, n.in_features)
        prod_w = co.width + x_t.width
        acc_w = max(acc.width, prod_w + _clog2(n.in_features + 1) + 1, co.width + x_t.frac + 1) + 1
        assert acc.frac == co.frac + x_t.frac
        x_name = "h_in" if l == 0 else f"h_{l - 1}"
        sums = [_balanced_sum([_sext(f"pf_{l}_{o}_{i}", prod_w, acc_w) for i in range(n.in_features)]
                              + [_aligned_bias(f"bq_{l}_{o}", co.width, x_t.frac, acc_w)])
                for o in range(n.out_features)]
        relu = l < n_layers - 1
        gp_w = et.width + co.width
        gs_w = gp_w + _clog2(n.out_features) + 1
        g_name = f"gm_{l}" if relu else f"g_{l}"
        gsums = [_balanced_sum([_sext(f"gp_{l}_{o}_{i}", gp_w, gs_w) for o in range(n.out_features)])
                 for i in range(n.in_features)]
        layers.append(dict(l=l, n_in=n.in_features, n_out=n.out_features, relu=relu, x_name=x_name, prod_w=prod_w,
                           acc_w=acc_w, acc_frac=acc.frac, sums=sums, gp_w=gp_w, gs_w=gs_w, gsums=gsums,
                           g_name=g_name, up_w=et.width + x_t.width, d_w=d + x_t.frac, d_b=d))
    n_in, n_out = spec.sizes[0], spec.sizes[-1]
    in_w = n_in * f.input.width + n_out * dp.width + 1
    out_w = n_out * dp.width
    rb_addr_w = max(1, _clog2(len(params)))
    ctx = dict(name=name, graph=learner.graph.name, sizes=list(spec.sizes), n_in=n_in, n_out=n_out, layers=layers,
               last=n_layers - 1, params=params, seeds=seeds, n_params=len(params), x_w=f.input.width,
               dp_w=dp.width, dp_frac=dp.frac, co_w=co.width, co_frac=co.frac, st_w=st.width, st_frac=st.frac,
               e_w=et.width, e_frac=et.frac, co_codes=_codes(co), dp_codes=_codes(dp), e_codes=_codes(et),
               st_codes=_codes(st), stochastic=stochastic, rand_bits=spec.rule.rand_bits, lr_shift=spec.rule.lr_shift,
               in_w=in_w, out_w=out_w, rb_addr_w=rb_addr_w, latency=1, rb_data_w=st.width,
               rb_byte_w=max(1, _clog2(-(-st.width // 8))))
    env = _env()
    files = {f"{name}.v": env.get_template("learner_mlp.v.j2").render(**ctx),
             f"{name}_board.v": env.get_template("learner_board.v.j2").render(**ctx)}
    weights = sum(n.in_features * n.out_features for n in layers_ir)
    hidden_grads = sum(n.in_features * n.out_features for n in layers_ir[1:])
    resources = {"multipliers": 2 * weights + hidden_grads, "parameters": len(params),
                 "parameter_bits": len(params) * st.width, "lfsr_lanes": len(seeds),
                 "loop": "forward, error, backward and update in one clock"}
    return LearnerRtl(name, files, LIBRARY, 1, 1, in_w, out_w, rb_addr_w, st.width, resources)


def readback_words(learner: Learner, state) -> tuple[list[int], list[str]]:
    """(addresses, expected words as hex) of every parameter of ``state`` (a golden-model state)."""
    st = learner.formats.storage
    mask = (1 << st.width) - 1
    addresses, words = [], []
    for a, (l, kind, idx) in enumerate(parameter_order(learner)):
        arr = np.asarray(state[l]["weight" if kind == "w" else "bias"], dtype=np.int64)
        addresses.append(a)
        words.append(f"{int(arr[idx]) & mask:x}")
    return addresses, words
