"""RTL of an online MLP learner, the KAN learner's baseline: fully parallel, one sample per clock (II 1).

Every weight and bias is a register; one combinational clock does the forward pass (Dense, ReLU, ...), the
error ``e = y - t``, the backward pass with the pre-update weights (``g_x = round(W^T g)`` and the ReLU mask),
and every update ``w -= round((2 g x) >> lr_shift)``, exactly as :func:`bitforge.toolchain.learn.emulate.run`.
Unlike the KAN, every parameter moves on every sample, so nothing can be forwarded around a memory: the whole
network is the loop. That costs 2 x (weights) + (hidden inputs x outputs) multipliers and a clock period of
four multiplies in series; designs that do not fit a part say so in the implementation report (a
time-multiplexed MLP learner is not generated yet).

Ports are the KAN learner's (:mod:`.learner_kan`); the read-back port addresses parameters by flat index
(per layer the weights row by row, then the biases) and is ready at any time.
"""
from __future__ import annotations

import math

import numpy as np

from ...learn.spec import Learner, LearnerError, dense_accum_type, lane_seeds
from ...fixed import clog2
from .learner_kan import LearnerRtl
from .reuse import DSP_SHARE
from .verilog import balanced_sum, mode_codes, sign_extend, templates, verilog_literal, verilog_name

LIBRARY = ("bf_requant.v", "bf_lfsr_lane.v", "bf_deserialize.v", "bf_serialize.v")



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
        acc_w = max(acc.width, prod_w + clog2(n.in_features + 1) + 1, co.width + x_t.frac + 1) + 1
        assert acc.frac == co.frac + x_t.frac
        x_name = "h_in" if l == 0 else f"h_{l - 1}"
        sums = [balanced_sum([sign_extend(f"pf_{l}_{o}_{i}", prod_w, acc_w) for i in range(n.in_features)]
                              + [_aligned_bias(f"bq_{l}_{o}", co.width, x_t.frac, acc_w)])
                for o in range(n.out_features)]
        relu = l < n_layers - 1
        gp_w = et.width + co.width
        gs_w = gp_w + clog2(n.out_features) + 1
        g_name = f"gm_{l}" if relu else f"g_{l}"
        gsums = [balanced_sum([sign_extend(f"gp_{l}_{o}_{i}", gp_w, gs_w) for o in range(n.out_features)])
                 for i in range(n.in_features)]
        layers.append(dict(l=l, n_in=n.in_features, n_out=n.out_features, relu=relu, x_name=x_name, prod_w=prod_w,
                           acc_w=acc_w, acc_frac=acc.frac, sums=sums, gp_w=gp_w, gs_w=gs_w, gsums=gsums,
                           g_name=g_name, up_w=et.width + x_t.width, d_w=d + x_t.frac, d_b=d))
    n_in, n_out = spec.sizes[0], spec.sizes[-1]
    in_w = n_in * f.input.width + n_out * dp.width + 1
    out_w = n_out * dp.width
    rb_addr_w = max(1, clog2(len(params)))
    ctx = dict(name=name, graph=learner.graph.name, sizes=list(spec.sizes), n_in=n_in, n_out=n_out, layers=layers,
               last=n_layers - 1, params=params, seeds=seeds, n_params=len(params), x_w=f.input.width,
               dp_w=dp.width, dp_frac=dp.frac, co_w=co.width, co_frac=co.frac, st_w=st.width, st_frac=st.frac,
               e_w=et.width, e_frac=et.frac, co_codes=mode_codes(co), dp_codes=mode_codes(dp),
               e_codes=mode_codes(et), st_codes=mode_codes(st), stochastic=stochastic,
               rand_bits=spec.rule.rand_bits, lr_shift=spec.rule.lr_shift,
               in_w=in_w, out_w=out_w, rb_addr_w=rb_addr_w, latency=1, rb_data_w=st.width,
               rb_byte_w=max(1, clog2(-(-st.width // 8))))
    env = templates()
    files = {f"{name}.v": env.get_template("learner_mlp.v.j2").render(**ctx),
             f"{name}_board.v": env.get_template("learner_board.v.j2").render(**ctx)}
    resources = {"multipliers": parallel_multipliers(learner), "parameters": len(params),
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


# -- time-multiplexed ---------------------------------------------------------------------------------------

def folded_multipliers(sizes: tuple[int, ...], lanes: int) -> int:
    """Multipliers of the time-multiplexed learner with ``lanes`` lanes: per lane the hidden unit's n_in
    products and its n_out output products (forward), its n_out gradient products and n_out + n_in updates."""
    n_in, _, n_out = sizes
    return lanes * (2 * n_in + 3 * n_out)


def lanes_for(sizes: tuple[int, ...], dsp: int) -> int:
    """The fewest rounds whose lanes fit ``dsp`` multipliers: rounds R = ceil(H / most lanes), lanes ceil(H / R)."""
    n_in, hidden, n_out = sizes
    most = max(1, dsp // (2 * n_in + 3 * n_out))
    rounds = -(-hidden // min(most, hidden))
    return -(-hidden // rounds)


def parallel_multipliers(learner: Learner) -> int:
    """Multipliers of the fully parallel form: two per weight (forward, update) and the hidden gradients."""
    layers = learner.layers()
    weights = sum(n.in_features * n.out_features for n in layers)
    return 2 * weights + sum(n.in_features * n.out_features for n in layers[1:])


def choose_lanes(learner: Learner, dsp: int) -> int | None:
    """None (fully parallel, II 1) when that fits ``dsp`` multipliers, else the time-multiplexed form's lanes
    (one hidden layer, round-to-nearest) within half of them: as for folded inference layers
    (:data:`.reuse.DSP_SHARE`), the other half is routing headroom (T1's MLP with 80 of an ECP5-85F's 156
    DSP blocks still had 3,000 overused wires after 24 router2 iterations). None too when neither form
    applies (the fit check then says why)."""
    if learner.spec.kind != "mlp" or parallel_multipliers(learner) <= dsp:
        return None
    if len(learner.spec.sizes) != 3 or learner.spec.rule.rounding != "nearest":
        return None
    return lanes_for(tuple(learner.spec.sizes), math.floor(dsp * DSP_SHARE))


def generate_mlp_folded(learner: Learner, lanes: int, name: str | None = None) -> LearnerRtl:
    """The time-multiplexed MLP learner ([d_in, H, d_out], round-to-nearest updates): ``lanes`` hidden units per
    round, II = 2 ceil(H / lanes) + 2. Bit-exact with the golden model like the fully parallel form."""
    spec, f = learner.spec, learner.formats
    if spec.kind != "mlp" or len(spec.sizes) != 3:
        raise LearnerError(f"the time-multiplexed MLP learner builds one hidden layer [d_in, H, d_out]; learner "
                           f"'{learner.graph.name}' is a {spec.kind} {list(spec.sizes)}")
    if spec.rule.rounding != "nearest":
        raise LearnerError("the time-multiplexed MLP learner rounds updates to nearest; stochastic rounding (one LFSR "
                           "per weight, stepped every sample) is generated by the fully parallel form only")
    n_in, H, n_out = spec.sizes
    if not 1 <= lanes <= H:
        raise LearnerError(f"lanes must be in 1..{H} (the hidden units), got {lanes}")
    P, R = lanes, -(-H // lanes)
    name = verilog_name(name or learner.graph.name)
    st, co, dp, et, xt = f.storage, f.coeff, f.datapath, f.error, f.input
    l0, l1 = learner.layers()
    W0, b0 = np.asarray(l0.weight, dtype=np.int64), np.asarray(l0.bias, dtype=np.int64)
    W1, b1 = np.asarray(l1.weight, dtype=np.int64), np.asarray(l1.bias, dtype=np.int64)
    mask = (1 << st.width) - 1

    def word(codes) -> str:
        v = 0
        for k, c in enumerate(codes):
            v |= (int(c) & mask) << (k * st.width)
        return f"{len(codes) * st.width}'h{v:0{(len(codes) * st.width + 3) // 4}x}"

    init0 = [[word([*W0[h], b0[h]] if h < H else [0] * (n_in + 1)) for h in range(p, R * P, P)] for p in range(P)]
    init1 = [[word(W1[:, h] if h < H else [0] * n_out) for h in range(p, R * P, P)] for p in range(P)]
    acc0 = dense_accum_type(f, xt, n_in)
    acc0_w = max(acc0.width, co.width + xt.width + clog2(n_in + 1) + 1) + 1
    acc1 = dense_accum_type(f, dp, H)
    acc1_w = max(acc1.width, co.width + dp.width + clog2(H + 1) + 1) + 1
    gs_w = et.width + co.width + clog2(n_out) + 1
    sums0 = [balanced_sum([sign_extend(f"f0_{p}_{i}", co.width + xt.width, acc0_w) for i in range(n_in)]
                           + [_aligned_bias(f"w0q_{p}_{n_in}", co.width, xt.frac, acc0_w)]) for p in range(P)]
    sums1 = [balanced_sum([sign_extend(f"f1_{p}_{o}", co.width + dp.width, acc1_w) for p in range(P)])
             for o in range(n_out)]
    gsums = [balanced_sum([sign_extend(f"gp_{p}_{o}", et.width + co.width, gs_w) for o in range(n_out)])
             for p in range(P)]
    readback, rb_words = [], []  # read-back: each parameter's slice of its lane's word, and that word's index
    for a, (l, kind, idx) in enumerate(parameter_order(learner)):
        if l == 0 and kind == "w":
            h, i = idx
            readback.append((a, f"w0w_{h % P}[{i * st.width} +: {st.width}]"))
        elif l == 0:
            h, = idx
            readback.append((a, f"w0w_{h % P}[{n_in * st.width} +: {st.width}]"))
        elif kind == "w":
            o, h = idx
            readback.append((a, f"w1w_{h % P}[{o * st.width} +: {st.width}]"))
        else:
            o, = idx
            readback.append((a, f"b1_{o}"))
        if l == 0 or kind == "w":
            rb_words.append((a, (idx[0] if l == 0 else idx[1]) // P))
    n_params = len(readback)
    rb_addr_w = max(1, clog2(n_params))
    in_w = n_in * xt.width + n_out * dp.width + 1
    out_w = n_out * dp.width
    d = et.frac - 1 - st.frac + spec.rule.lr_shift
    ctx = dict(name=name, graph=learner.graph.name, sizes=list(spec.sizes), n_in=n_in, H=H, n_out=n_out, P=P, R=R,
               r_w=max(1, clog2(R)), init0=init0, init1=init1,
               init_b1=[verilog_literal(int(v), st.width) for v in b1], x_w=xt.width, x_frac=xt.frac,
               dp_w=dp.width, dp_frac=dp.frac, co_w=co.width, co_frac=co.frac, st_w=st.width, st_frac=st.frac,
               e_w=et.width, e_frac=et.frac, co_codes=mode_codes(co), dp_codes=mode_codes(dp), e_codes=mode_codes(et),
               st_codes=mode_codes(st), acc0_w=acc0_w, acc0_frac=acc0.frac, acc1_w=acc1_w, acc1_frac=acc1.frac,
               sums0=sums0, sums1=sums1, gs_w=gs_w, gsums=gsums,
               bias1=[_aligned_bias(f"b1q_{o}", co.width, dp.frac, acc1_w) for o in range(n_out)], d=d,
               pad_from=[-(-(H - p) // P) for p in range(P)], readback=readback, rb_words=rb_words, n_params=n_params,
               rb_addr_w=rb_addr_w, in_w=in_w, out_w=out_w, rb_data_w=st.width,
               rb_byte_w=max(1, clog2(-(-st.width // 8))))
    env = templates()
    files = {f"{name}.v": env.get_template("learner_mlp_folded.v.j2").render(**ctx),
             f"{name}_board.v": env.get_template("learner_board.v.j2").render(**ctx)}
    resources = {"multipliers": folded_multipliers(tuple(spec.sizes), P), "parameters": n_params,
                 "parameter_bits": n_params * st.width, "lanes": P, "rounds": R,
                 "loop": f"{P} hidden units per round, {R} forward and {R} backward rounds per sample"}
    return LearnerRtl(name, files, LIBRARY, R + 1, 2 * R + 2, in_w, out_w, rb_addr_w, st.width, resources)
