"""T5: A2C on CartPole with the bit-exact fixed-point learner, per-sample updates after each rollout.

The learner core learns from (x, target, learn-enable) samples and computes its error ``e = y_hat - t`` on chip
(:mod:`.emulate`). Actor-critic fits that interface with a small controller around it, modelled here in
integers so that the whole closed loop is reproducible bit for bit:

1. Act for ``config.rollout`` steps with the coefficients held (samples with learn-enable 0): ``predict(s)``
   gives the logits ``l0, l1``; the policy ``p = sigmoid(l1 - l0)`` comes from a table (:data:`P_BITS`-bit
   probabilities indexed by the logit difference at :data:`SIGMOID_STEP`), action ``a = [u < p]`` with a
   :data:`P_BITS`-bit uniform ``u``. The controller keeps each step's input codes, action and termination flag
   (512 x 66 bits at <16,6>: two ECP5 block RAMs), and ``predict(s')`` gives the bootstrap ``V(s')`` at a
   truncation (at most two in 512 steps: episodes end after 500) and after the last step.
2. Returns, backwards over the rollout (:func:`bitforge.models.online_learners.rollout_next_values`):
   ``G_t = r + gamma G_{t+1}`` (``r`` alone after a termination; the bootstrap value in place of ``G_{t+1}``
   where there is one), ``gamma = 1 - 2**-n`` a subtract of a shifted copy (:func:`gamma_shift` refuses
   others), ``r`` the config's ``reward`` in datapath LSBs (scaled down so that V, up to ``r / (1 - gamma)``,
   fits the datapath), each sum saturated into the datapath.
3. Per sample, in order: ``predict(s)`` with the current coefficients gives ``V(s)`` and ``p``, the advantage
   is ``A = G - V(s)`` saturated at ``config.advantage_clip`` (a comparator), and the targets make the learner's
   own error the A2C feedback: value ``t_V = V + w A`` (so ``e = -w A``, the LMS step on the critic loss
   ``w A^2``; ``w = 2**-n``, 1 by default: ``t_V = G`` when A is not clipped); logits
   ``t_1 = l1 - (p - a) A / 2``, ``t_0 = l0 + (p - a) A / 2`` (``e`` is half the policy-gradient feedback
   ``(pi - onehot(a)) A``; the learner doubles it). Then ``step(s, t)`` updates (the same coefficients predict s
   again: the prediction equals this step's).

``rollout = 1`` is one-step TD(0), ``A = r + gamma V(s') - V(s)``. The float reference is
:func:`bitforge.models.online_learners.run_a2c`: same learner, same eta = 2**-lr_shift, same protocol.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np

from .. import fixed
from . import emulate as emulate_learn
from ..fixed import FixedType
from .spec import LearnerError, LearnerFormats, LearnerSpec, UpdateRule, build_learner

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
    from bitforge.models.online_learners import CARTPOLE_OBS_SCALE, EpisodeLog, rollout_next_values

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
    if config.entropy:
        raise LearnerError(f"A2C entropy bonus {config.entropy}: the fixed-point controller has none; use entropy=0")
    wshift = round(-math.log2(config.critic_weight))
    if not 0 <= wshift or 2.0 ** -wshift != config.critic_weight:
        raise LearnerError(f"A2C critic weight {config.critic_weight}: the fixed-point controller needs 2**-n, n >= 0")
    # the advantage's saturation in datapath LSBs (none: the controller's own range)
    clip = fixed.quantize(config.advantage_clip, wide).item() if config.advantage_clip is not None else wide.max_code
    if clip <= 0:
        raise LearnerError(f"A2C advantage clip {config.advantage_clip} is below the datapath's LSB ({dp.lsb}): "
                           "nothing would be learned; use a larger clip (scaled with the reward) or None")
    env = CartPoleVec(R, seed=int(seeds[0]))
    pick = np.random.default_rng((int(seeds[0]), 0xA2C))
    scale = np.asarray(CARTPOLE_OBS_SCALE)

    def codes(state):
        return fixed.quantize(np.clip(state / scale, f.input.min_value, f.input.max_value), f.input)

    def policy(logits):
        """P_BITS-bit probability of action 1: the table at the logit difference."""
        diff = logits[:, 1] - logits[:, 0]
        k = np.clip((diff >> idx_shift) if idx_shift >= 0 else (diff << -idx_shift), -half, half - 1) + half
        return table[k]

    def step_return(value, term):
        """r + gamma value (0 after a termination) in datapath codes: gamma value is a shifted subtract, and the
        sum saturates into the datapath as the controller's return register does."""
        return fixed.requantize(one + np.where(term, 0, value - (value >> gshift)), wide, dp)

    state = env.state.copy()
    log = EpisodeLog(config, R, on_episode)
    while log.running():
        xs, actions, terms, lives, masks, boots = [], [], [], [], [], []
        while len(xs) < config.rollout and log.running():    # act with the coefficients held (learn-enable 0)
            x = codes(state)
            u = pick.integers(0, 1 << P_BITS, size=R)
            action = (u < policy(st.predict(x))).astype(np.int64)
            nxt, _, term, trunc = env.step(action)
            boot = trunc | (len(xs) == config.rollout - 1)
            boots.append(st.predict(codes(nxt))[:, 2] if boot.any() else np.zeros(R, dtype=np.int64))
            xs.append(x)
            actions.append(action)
            terms.append(term)
            lives.append(log.active.copy())                       # what it played while learning
            masks.append(boot)
            log.step(term | trunc)
            state = env.reset(term | trunc) if (term | trunc).any() else nxt
        if len(xs) < config.rollout:
            break                           # every run stopped (solved, out of episodes, max_steps) before its end
        nexts = rollout_next_values(terms, masks, boots, step_return)
        for x, action, term, live, nv in zip(xs, actions, terms, lives, nexts):
            out = st.predict(x)                                   # V(s) and pi with the current coefficients
            p = policy(out)
            adv = np.clip(step_return(nv, term) - out[:, 2], -clip, clip)  # A = G - V(s), datapath LSBs, saturated
            # critic: e = -w A (w = 2**-wshift), the LMS step on w (V - G)^2; w = 1 gives t_V = G
            t_v = fixed.requantize(out[:, 2] + ((adv + ((1 << wshift) >> 1)) >> wshift), wide, dp)
            # (p - a) A / 2 in datapath LSBs, rounded half up: one product and a shift
            g = ((p - (action << P_BITS)) * adv + (1 << P_BITS)) >> (P_BITS + 1)
            target = np.stack([fixed.requantize(out[:, 0] + g, wide, dp), fixed.requantize(out[:, 1] - g, wide, dp),
                               t_v], axis=1)
            st.step(x, target, live)
    r = log.result()
    return A2CFixedResult(r.returns, r.solved_at, r.steps, datapath)


def best_window_mean(returns: Sequence[float], window: int) -> Optional[float]:
    """The best ``window``-episode mean of a run's returns (None before ``window`` episodes)."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size < window:
        return None
    c = np.concatenate([[0.0], np.cumsum(r)])
    return float(np.max(c[window:] - c[:-window]) / window)


#: log2 of T5's reward scale: V reaches reward / (1 - gamma) = 4 instead of 64, inside every datapath.
T5_REWARD_SHIFT = 4
#: The MLP [4, 16, 3]'s eta = 2**-N at reward 1 in T5 (1,000 float episodes, seeds 0-2: 2**-10 collapses all three
#: runs to one action; 2**-11 and 2**-12 solve one each, 2**-12 with the best means of the other two).
T5_MLP_LR_SHIFT = 12


def t5_config(model: str, episodes: int):
    """T5's A2C configuration per model: :class:`A2CConfig`'s defaults (512-step rollouts, gamma 1 - 2**-6,
    advantages saturated at 16, KAN [4, 3] at eta 2**-10; the MLP [4, 16, 3] at T5_MLP_LR_SHIFT) with the reward
    scaled to 2**-4 per step, so that V stays inside the narrow datapaths. Eta 2**4 times larger, critic weight
    and advantage clip 2**-4 times then give exactly the dynamics of reward 1 (the actor's step scales with the
    advantage, the critic's relative step does not)."""
    from bitforge.models.online_learners import A2CConfig

    base = A2CConfig()
    spec = base.spec if model == "kan" else LearnerSpec("mlp", (4, 16, 3), rule=UpdateRule(T5_MLP_LR_SHIFT))
    spec = spec.replace(lr_shift=spec.rule.lr_shift - T5_REWARD_SHIFT)
    return A2CConfig(spec=spec, reward=base.reward * 2.0 ** -T5_REWARD_SHIFT,
                     critic_weight=base.critic_weight * 2.0 ** -T5_REWARD_SHIFT,
                     advantage_clip=base.advantage_clip * 2.0 ** -T5_REWARD_SHIFT, max_episodes=episodes)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """T5 outside the benchmark: one A2C configuration on CartPole, float or fixed point, over seeds; per seed the
    episodes run, the episode at which the 100-episode mean first reached 475 (the run stops there) and the best
    100-episode mean. The defaults are the benchmark's (``bitforge bench online --online-parts t5``); the options
    change one thing at a time, in CartPole's own units (reward 1; the run scales the reward to 2**-4 and eta
    and the critic weight with it, which changes nothing but the datapath's range)."""
    import argparse
    import json
    import sys
    import time
    from pathlib import Path

    from ..cli_types import bounded_int, non_negative_int, output_file, positive_int, seed
    from ..errors import BitforgeError

    def seeds_arg(text: str) -> tuple[int, ...]:
        parts = [t.strip() for t in text.split(",") if t.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated seeds, e.g. 0,1,2, got {text!r}")
        return tuple(seed(t) for t in parts)

    ap = argparse.ArgumentParser(
        prog="python -m bitforge.toolchain.learn.a2c", description=main.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: python -m bitforge.toolchain.learn.a2c --datapath 'fixed<16,6>' --seeds 0,1,2\n"
               "         python -m bitforge.toolchain.learn.a2c --rollout 1 --episodes 1000   (one-step TD(0))")
    ap.add_argument("--model", choices=("kan", "mlp"), default="kan", help="KAN [4, 3] (default) or MLP [4, 16, 3]")
    ap.add_argument("--datapath", default="float", metavar="TYPE",
                    help="float (the reference, default) or a fixed-point datapath such as 'fixed<16,6>'")
    ap.add_argument("--seeds", type=seeds_arg, default=(0, 1, 2), metavar="S,S", help="learner seeds (default 0,1,2)")
    ap.add_argument("--episodes", type=positive_int, default=3000, metavar="N",
                    help="episode cap per run (default 3000; a run stops once solved)")
    ap.add_argument("--rollout", type=positive_int, default=None, metavar="N",
                    help="steps acted with the parameters held before the per-sample updates (default 512; 1 is TD(0))")
    ap.add_argument("--lr-shift", type=bounded_int(T5_REWARD_SHIFT, 40), default=None, metavar="N",
                    help=f"eta = 2**-N at reward 1 (default: KAN 10, MLP the benchmark's; N >= {T5_REWARD_SHIFT}: the "
                         f"run's eta is 2**{T5_REWARD_SHIFT} times larger)")
    ap.add_argument("--gamma-shift", type=bounded_int(1, 16), default=None, metavar="N",
                    help="discount gamma = 1 - 2**-N (default 6)")
    ap.add_argument("--critic-shift", type=bounded_int(-T5_REWARD_SHIFT, 16), default=None, metavar="N",
                    help=f"critic weight w = 2**-N at reward 1 (default 0; -{T5_REWARD_SHIFT} to 16)")
    ap.add_argument("--advantage-clip", type=non_negative_int, default=None, metavar="N",
                    help="saturate the advantage at +-N at reward 1 (default 16; 0: no saturation)")
    ap.add_argument("--json", type=output_file, default=None, metavar="FILE", help="also write the returns here")
    args = ap.parse_args(argv)
    if args.datapath != "float":
        try:
            fixed.parse_type(args.datapath)
        except BitforgeError as e:
            ap.error(f"argument --datapath: {e} (e.g. 'fixed<16,6>', or float)")
    try:
        cfg = t5_config(args.model, args.episodes)
        over = {}
        if args.rollout is not None:
            over["rollout"] = args.rollout
        if args.gamma_shift is not None:
            over["gamma"] = 1.0 - 2.0 ** -args.gamma_shift
        if args.critic_shift is not None:
            over["critic_weight"] = 2.0 ** -(args.critic_shift + T5_REWARD_SHIFT)
        if args.advantage_clip is not None:
            over["advantage_clip"] = args.advantage_clip * 2.0 ** -T5_REWARD_SHIFT if args.advantage_clip else None
        if args.lr_shift is not None:
            over["spec"] = cfg.spec.replace(lr_shift=args.lr_shift + (-T5_REWARD_SHIFT))
        cfg = replace(cfg, **over)
        t0 = last = time.monotonic()

        def progress(run: int, episode: int, ret: float) -> None:
            nonlocal last
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                print(f"  {last - t0:5.0f} s: seed {args.seeds[run]} episode {episode:,}, return {ret:.0f}",
                      file=sys.stderr, flush=True)

        unit = 2.0 ** T5_REWARD_SHIFT                     # the run's scaled reward back to CartPole's 1
        clip = "none" if cfg.advantage_clip is None else f"{cfg.advantage_clip * unit:g}"
        print(f"T5 {args.model} at {args.datapath}: rollout {cfg.rollout}, gamma 1 - 2**-{gamma_shift(cfg.gamma)}, "
              f"eta 2**-{cfg.spec.rule.lr_shift + T5_REWARD_SHIFT}, critic weight {cfg.critic_weight * unit:g}, "
              f"advantage clip {clip} (at reward 1), seeds {list(args.seeds)}, up to {cfg.max_episodes:,} episodes",
              file=sys.stderr, flush=True)
        if args.datapath == "float":
            from bitforge.models.online_learners import run_a2c
            res = run_a2c(cfg, seeds=args.seeds, on_episode=progress)
        else:
            res = run_a2c_fixed(cfg, args.datapath, args.seeds, on_episode=progress)
    except BitforgeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = []
    for s, returns, solved in zip(args.seeds, res.returns, res.solved_at):
        best = best_window_mean(returns, cfg.window)
        rows.append({"seed": s, "episodes": len(returns), "solved_at": solved, "best_100_mean": best})
        print(f"seed {s}: {len(returns):,} episodes, " + (f"100-episode mean >= {cfg.target:.0f} at episode "
              f"{solved:,}" if solved else "not solved") + (f", best 100-episode mean {best:.1f}" if best else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "datapath": args.datapath, "config": repr(cfg),
                                         "runs": rows, "returns": [list(r) for r in res.returns]}) + "\n")
    return 0


__all__ = ["A2CFixedResult", "a2c_spec", "best_window_mean", "gamma_shift", "main", "run_a2c_fixed", "sigmoid_table"]


if __name__ == "__main__":
    raise SystemExit(main())
