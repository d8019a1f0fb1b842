"""T5: A2C on CartPole with the fixed-point golden learner (``bitforge.toolchain.learn.a2c``)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from bitforge.models.online_learners import A2CConfig, rollout_next_values
from bitforge.toolchain.learn.a2c import a2c_spec, gamma_shift, run_a2c_fixed, sigmoid_table, t5_config
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
    with pytest.raises(LearnerError, match="entropy bonus 0.01: .* has none"):
        run_a2c_fixed(A2CConfig(entropy=0.01, max_episodes=1), "fixed<16,6>")
    with pytest.raises(LearnerError, match="advantage clip 0.001 is below the datapath's LSB"):
        run_a2c_fixed(A2CConfig(advantage_clip=0.001, max_episodes=1), "fixed<8,4>")


def test_rollout_returns_bootstrap_at_truncations_and_the_rollout_end():
    """Run 0 terminates at step 1 and is truncated at step 2 (bootstrap 10); run 1 runs through (bootstrap 20 after
    the last step). What follows step t's reward is the bootstrap where there is one, else G_{t+1} = 1 + gamma
    (what follows step t + 1), with nothing after a termination."""
    gamma = 0.5
    term = [np.array([False, False]), np.array([True, False]), np.array([False, False]), np.array([False, False])]
    mask = [np.array([False, False]), np.array([False, False]), np.array([True, False]), np.array([True, True])]
    boot = [np.zeros(2), np.zeros(2), np.array([10.0, 0.0]), np.array([4.0, 20.0])]
    nexts = rollout_next_values(term, mask, boot, lambda v, t: 1.0 + gamma * v * (1.0 - t))
    after3 = [4.0, 20.0]                                          # the bootstraps of the last step
    after2 = [10.0, 1 + gamma * 20.0]                             # run 0 truncated: its own bootstrap
    after1 = [1 + gamma * 10.0, 1 + gamma * after2[1]]            # (run 0 terminates here: dropped by step_return)
    after0 = [1.0, 1 + gamma * after1[1]]                         # run 0: G_1 = r alone
    np.testing.assert_allclose(np.stack(nexts), [after0, after1, after2, after3])
    with pytest.raises(LearnerError, match="last step needs a bootstrap"):
        rollout_next_values(term, mask[:3], boot[:3], lambda v, t: v)


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
    returns grow within 150 episodes (about 20 steps at the start)."""
    cfg = t5_config("kan", 150)
    a = run_a2c_fixed(replace(cfg, max_episodes=20), "fixed<16,6>", seeds=(0,))
    b = run_a2c_fixed(replace(cfg, max_episodes=20), "fixed<16,6>", seeds=(0,))
    assert a.returns == b.returns and a.steps == b.steps
    r = np.asarray(run_a2c_fixed(cfg, "fixed<16,6>", seeds=(0,)).returns[0])
    assert r.size == 150 and r[-50:].mean() > 2 * r[:50].mean()


@pytest.mark.slow
def test_fixed_point_kan_solves_cartpole():
    """The T5 result on the learner itself: KAN [4, 3] at <16,6> with the benchmark's configuration reaches a
    100-episode mean of 475 (seed 0 alone: at episode 564; minutes)."""
    res = run_a2c_fixed(t5_config("kan", 1000), "fixed<16,6>", seeds=(0,))
    assert res.solved_at[0] is not None and np.mean(res.returns[0][-100:]) >= 475


def test_a2c_command_runs_one_configuration_and_refuses_bad_options(tmp_path, capsys):
    """``python -m bitforge.toolchain.learn.a2c``: per seed a line and the JSON rows; bad options exit 2 naming
    the option."""
    from bitforge.toolchain.learn.a2c import main

    out = tmp_path / "t5.json"
    assert main(["--datapath", "fixed<16,6>", "--seeds", "0,1", "--episodes", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["seed"] for r in doc["runs"]] == [0, 1] and all(r["episodes"] == 2 for r in doc["runs"])
    assert "seed 1: 2 episodes, not solved" in capsys.readouterr().out
    for argv, message in ((["--datapath", "fixed<16,x>"], "argument --datapath: 'fixed<16,x>'"),
                          (["--seeds", "a"], "argument --seeds"),
                          (["--lr-shift", "2"], "argument --lr-shift: expected a whole number from 4")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err
    assert main(["--datapath", "fixed<8,6>"]) == 2                 # the scaled reward, 2**-4, is below its LSB
    assert "error: A2C reward 0.0625 is below the datapath's LSB" in capsys.readouterr().err
    with pytest.raises(LearnerError, match="advantage_clip = 0"):
        A2CConfig(advantage_clip=0)
