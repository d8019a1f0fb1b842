"""T5: A2C on CartPole with the fixed-point golden learner (``bitforge.toolchain.learn.a2c``)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from bitforge.models.online_learners import A2CConfig
from bitforge.toolchain.learn.bench import t5_config
from bitforge.toolchain.learn.a2c import a2c_spec, gamma_shift, run_a2c_fixed, sigmoid_table
from bitforge.toolchain.learn.spec import LearnerError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_discount_and_reward_must_be_what_the_controller_can_compute():
    assert gamma_shift(1 - 2.0 ** -7) == 7
    with pytest.raises(LearnerError, match=r"gamma = 0.99: .* 1 - 2\*\*-n"):
        run_a2c_fixed(A2CConfig(gamma=0.99, max_episodes=1), "fixed<16,6>")
    with pytest.raises(LearnerError, match="below the datapath's LSB"):
        run_a2c_fixed(A2CConfig(reward=2.0 ** -6, max_episodes=1), "fixed<8,4>")
    with pytest.raises(LearnerError, match="critic weight 0.3"):
        run_a2c_fixed(A2CConfig(critic_weight=0.3, max_episodes=1), "fixed<16,6>")


def test_fixed_point_twin_is_the_config_spec_at_a_datapath():
    """One spec: the fixed-point A2C learner is the float config's spec (sizes, grid, eta) at the given formats."""
    cfg = t5_config("kan", 10)
    s = a2c_spec(cfg, "fixed<10,4>", guard_bits=6, rounding="stochastic", seed=3)
    assert s.replace(formats=cfg.spec.formats, rounding="nearest", seed=cfg.spec.seed) == cfg.spec
    assert s.formats.datapath.width == 10 and s.formats.guard_bits == 6 and s.eta == cfg.spec.eta


def test_policy_table_is_a_monotone_sigmoid():
    t = sigmoid_table()
    assert t[0] >= 0 and t[-1] <= 4096 and (np.diff(t) >= 0).all() and t[t.size // 2] == 2048


def test_fixed_point_a2c_is_reproducible_and_learns():
    """KAN [4, 3] at <16,6> with the benchmark's T5 configuration: the same seeds give the same episodes, and the
    returns grow (a hand run of the float reference on the same configuration: about 20 -> 70-78 over 150
    episodes)."""
    cfg = t5_config("kan", 150)
    a = run_a2c_fixed(replace(cfg, max_episodes=20), "fixed<16,6>", seeds=(0,))
    b = run_a2c_fixed(replace(cfg, max_episodes=20), "fixed<16,6>", seeds=(0,))
    assert a.returns == b.returns and a.steps == b.steps
    r = np.asarray(run_a2c_fixed(cfg, "fixed<16,6>", seeds=(0,)).returns[0])
    assert r.size == 150 and r[-50:].mean() > 2 * r[:50].mean()
