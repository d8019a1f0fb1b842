"""T5: A2C on CartPole with the bit-exact fixed-point learner, one environment step per update.

The learner core learns from (x, target, learn-enable) samples and computes its error ``e = y_hat - t`` on chip
(:mod:`.emulate`). Actor-critic fits that interface with a small controller around it, modelled here in
integers so that the whole closed loop is reproducible bit for bit:

1. ``predict(s)``: logits ``l0, l1`` and the value ``V(s)`` (datapath codes); ``predict(s')`` gives ``V(s')``
   with the same, pre-update coefficients (a sample with learn-enable 0 in hardware).
2. Policy: ``p = sigmoid(l1 - l0)`` from a table (:data:`P_BITS`-bit probabilities indexed by the logit
   difference at :data:`SIGMOID_STEP`), action ``a = [u < p]`` with a :data:`P_BITS`-bit uniform ``u``.
3. TD error ``delta = r + gamma V(s') (1 - terminated) - V(s)`` with ``gamma = 1 - 2**-n`` (a subtract of a
   shifted copy; the reference's default is ``1 - 2**-7``, :func:`gamma_shift` refuses others) and ``r`` the
   config's ``reward`` in datapath LSBs (scaled down so that V, up to ``r / (1 - gamma)``, fits the datapath).
4. Targets so that the learner's own error is the A2C feedback: value ``t_V = V + w delta`` (so ``e = -w delta``,
   the LMS step on the critic loss ``w delta^2``; ``w = 2**-n``, 1 by default: ``t_V = r + gamma V(s')``); logits ``t_1 = l1 - (p - a) delta / 2``, ``t_0 = l0 + (p - a) delta /
   2`` (``e`` is half the policy-gradient feedback ``(pi - onehot(a)) delta``; the learner doubles it).
   Then ``step(s, t)`` updates (the same coefficients predict s again: the prediction equals step 1's).

The float reference is :func:`bitforge.models.online_learners.run_a2c`, same learner, same eta = 2**-lr_shift.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from .. import fixed
from . import emulate as emulate_learn
from ..fixed import FixedType
from .spec import LearnerError, LearnerFormats, LearnerSpec, build_learner

P_BITS = 12
SIGMOID_STEP = 2.0 ** -5
SIGMOID_RANGE = 8.0


@dataclass(frozen=True)
class A2CFixedResult:
    """As :class:`bitforge.models.online_learners.A2CResult`, plus the formats it ran at."""

    returns: tuple[tuple[float, ...], ...]
    solved_at: tuple[Optional[int], ...]
    steps: int
    datapath: str


def gamma_shift(gamma: float) -> int:
    """``n`` with ``gamma = 1 - 2**-n``: the discount the controller applies as a shifted subtract."""
    n = round(-math.log2(1.0 - gamma)) if gamma < 1.0 else 0
    if gamma >= 1.0 or 1.0 - 2.0 ** -n != gamma:
        raise LearnerError(f"A2C discount gamma = {gamma}: the fixed-point controller needs gamma = 1 - 2**-n "
                           f"(e.g. {1 - 2.0 ** -7} for n = 7)")
    return n


def sigmoid_table() -> np.ndarray:
    """``round(sigmoid(d) 2**P_BITS)`` for ``d`` in ``[-SIGMOID_RANGE, SIGMOID_RANGE)`` at ``SIGMOID_STEP``."""
    d = np.arange(-SIGMOID_RANGE, SIGMOID_RANGE, SIGMOID_STEP)
    return np.round(2.0 ** P_BITS / (1.0 + np.exp(-d))).astype(np.int64)


def a2c_spec(config, datapath: str, guard_bits: int = 8, rounding: str = "nearest", seed: int = 0) -> LearnerSpec:
    """``config.spec`` (the float reference's learner) at ``datapath``, with its update rounding and init seed."""
    return config.spec.replace(formats=LearnerFormats.make(datapath, guard_bits=guard_bits), rounding=rounding,
                               seed=seed)


def run_a2c_fixed(config, datapath: str = "fixed<16,6>", seeds: Sequence[int] = (0,), guard_bits: int = 8,
                  rounding: str = "nearest",
                  on_episode: Optional[Callable[[int, int, float], None]] = None) -> A2CFixedResult:
    """R independent fixed-point A2C runs (learner r starts from ``seeds[r]``), the protocol of ``run_a2c``:
    one CartPoleVec seeded by ``seeds[0]``, one action generator, a run stops learning once solved or at
    ``config.max_episodes``."""
    from bitforge.models.cartpole import CartPoleVec
    from bitforge.models.online_learners import CARTPOLE_OBS_SCALE, EpisodeLog

    learners = [build_learner(a2c_spec(config, datapath, guard_bits, rounding, s)) for s in seeds]
    st = emulate_learn.Stepper(learners)
    R, f = len(learners), learners[0].formats
    dp = f.datapath
    one = fixed.quantize(config.reward, dp).item()               # the reward per step, in datapath LSBs
    if one <= 0:
        raise LearnerError(f"A2C reward {config.reward} is below the datapath's LSB ({dp.lsb}); use a wider "
                           "datapath or a larger reward")
    table = sigmoid_table()
    idx_shift = dp.frac - round(-math.log2(SIGMOID_STEP))   # datapath LSBs per table step
    half = table.size // 2
    wide = FixedType(dp.width + 4, dp.integer + 4, True)    # the controller's sums before saturation
    gshift = gamma_shift(config.gamma)
    wshift = round(-math.log2(config.critic_weight))
    if not 0 <= wshift or 2.0 ** -wshift != config.critic_weight:
        raise LearnerError(f"A2C critic weight {config.critic_weight}: the fixed-point controller needs 2**-n, n >= 0")
    env = CartPoleVec(R, seed=int(seeds[0]))
    pick = np.random.default_rng((int(seeds[0]), 0xA2C))
    scale = np.asarray(CARTPOLE_OBS_SCALE)

    def codes(state):
        return fixed.quantize(np.clip(state / scale, f.input.min_value, f.input.max_value), f.input)

    state = env.state.copy()
    log = EpisodeLog(config, R, on_episode)
    while log.running():
        x = codes(state)
        out = st.predict(x)
        diff = out[:, 1] - out[:, 0]
        k = np.clip((diff >> idx_shift) if idx_shift >= 0 else (diff << -idx_shift), -half, half - 1) + half
        p = table[k]                                              # P_BITS-bit probability of action 1
        u = pick.integers(0, 1 << P_BITS, size=R)
        action = (u < p).astype(np.int64)
        nxt, _, term, trunc = env.step(action)
        v_next = st.predict(codes(nxt))[:, 2]
        boot = np.where(term, 0, v_next - (v_next >> gshift))      # gamma V(s') as a shifted subtract
        delta = one + boot - out[:, 2]                            # r + gamma V(s') - V(s), datapath LSBs
        # critic: e = -w delta (w = 2**-wshift), the LMS step on w (V - target)^2; w = 1 gives t_V = r + gamma V(s')
        t_v = fixed.requantize(out[:, 2] + ((delta + ((1 << wshift) >> 1)) >> wshift), wide, dp)
        # (p - a) delta / 2 in datapath LSBs, rounded half up: one product and a shift
        adv = ((p - (action << P_BITS)) * delta + (1 << P_BITS)) >> (P_BITS + 1)
        target = np.stack([fixed.requantize(out[:, 0] + adv, wide, dp), fixed.requantize(out[:, 1] - adv, wide, dp),
                           t_v], axis=1)
        st.step(x, target, log.active)
        log.step(term | trunc)
        state = env.reset(term | trunc) if (term | trunc).any() else nxt
    r = log.result()
    return A2CFixedResult(r.returns, r.solved_at, r.steps, datapath)


__all__ = ["A2CFixedResult", "a2c_spec", "gamma_shift", "run_a2c_fixed", "sigmoid_table"]
