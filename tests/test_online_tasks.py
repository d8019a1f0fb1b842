"""Online benchmark tasks (T1, T2, T4), their metrics, and the closed-form CartPole (T5)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from bitforge.models.cartpole import (
    CARTPOLE_V1,
    CartPoleError,
    CartPoleVec,
    cartpole_step,
)
from bitforge.models.online_tasks import (
    TASKS,
    TaskError,
    make_task,
    prequential_metrics,
    t4_theta,
)


@pytest.mark.parametrize("name, n, d_in", [("t1", 1500, 1), ("t2", 5000, 2), ("t4", 10000, 16)])
def test_shapes_defaults_and_determinism(name, n, d_in):
    a, b, c = make_task(name, 3), make_task(name, 3), make_task(name, 4)
    assert TASKS[name] == n and a.x.shape == (n, d_in) and a.target.shape == (n, 1)
    assert a.x.dtype == np.float64 and a.target.dtype == np.float64
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.target, b.target)
    assert not np.array_equal(a.x, c.x)
    lo, hi = a.input_range
    assert lo <= a.x.min() and a.x.max() <= hi
    with pytest.raises(ValueError):
        a.x[0, 0] = 1.0  # read-only: learners sharing a task cannot corrupt it


def test_t1_regimes_follow_the_definitions():
    t = make_task("t1", 0)
    x, y = t.x[:, 0], t.target[:, 0]
    assert -2.0 <= x.min() and x.max() < 2.0 and abs(x.mean()) < 0.1  # U(-2, 2)
    np.testing.assert_allclose(y[:500], np.sin(x[:500]) + 0.3 * x[:500] ** 2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(y[500:1000], -np.cos(2 * x[500:1000]) + 0.1 * x[500:1000] ** 3 + 1, atol=1e-15)
    np.testing.assert_allclose(y[1000:], np.exp(-(x[1000:] - 1) ** 2 / 2) + 0.05 * x[1000:] ** 3, atol=1e-15)
    s = t.segments
    assert [s[f"regime{r}"] for r in (1, 2, 3)] == [(0, 500), (500, 1000), (1000, 1500)]
    assert [s[f"steady{r}"] for r in (1, 2, 3)] == [(400, 500), (900, 1000), (1400, 1500)]
    assert [s[f"recovery{r}"] for r in (2, 3)] == [(500, 550), (1000, 1050)]
    assert make_task("t1", 0, n=600).segments["regime2"] == (200, 400)


def test_t2_is_the_narendra_parthasarathy_plant():
    t = make_task("t2", 1)
    y, u = t.x[:, 0], t.x[:, 1]
    assert y[0] == 0.0 and -1.0 <= u.min() and u.max() <= 1.0
    np.testing.assert_array_equal(t.target[:-1, 0], y[1:])  # the target is the next input's y
    np.testing.assert_allclose(t.target[:, 0], y / (1 + y ** 2) + u ** 3, atol=1e-15)
    assert np.abs(t.target).max() < 1.5
    assert t.segments["eval"] == (4000, 5000)


def test_t4_readout_statistics():
    t = make_task("t4", 0)
    x, s = t.x.reshape(-1, 8, 2), t.target[:, 0]
    assert set(np.unique(s)) == {-1.0, 1.0} and abs((s > 0).mean() - 0.5) < 0.02
    assert x.min() >= -1.0 and x.max() <= 1.0 and (np.abs(x) == 1.0).mean() > 0.01  # clipped, not rescaled
    # The state axis rotates: Q carries +-0.5 sin(theta) with the label's sign.
    rising, falling = slice(0, 4000), slice(4000, 8000)  # theta > 0, then theta < 0
    assert (x[rising, :, 1] * s[rising, None]).mean() > 0.1 and (x[falling, :, 1] * s[falling, None]).mean() < -0.1
    # Decays: the excited shots' I component fades from the first bin to the last by ~0.5 * 0.15 * 7/8.
    i_exc = x[s > 0, :, 0] * np.cos(t4_theta(np.arange(t.n)))[s > 0, None]
    assert 0.03 < i_exc[:, 0].mean() - i_exc[:, 7].mean() < 0.1
    # Neither trivial nor impossible; tracking the drift pays.
    th = t4_theta(np.arange(t.n))
    oracle = np.sign((x[:, :, 0] * np.cos(th)[:, None] + x[:, :, 1] * np.sin(th)[:, None]).sum(1))
    fixed = np.sign(x[:, :, 0].sum(1))
    err_oracle, err_fixed = (oracle != s).mean(), (fixed != s).mean()
    assert 0.03 < err_oracle < 0.1 and err_fixed > err_oracle + 0.005


def test_bad_task_requests():
    with pytest.raises(TaskError, match="unknown online task"):
        make_task("t3")
    with pytest.raises(TaskError, match="too short"):
        make_task("t1", n=200)
    with pytest.raises(TaskError, match="scoring window"):
        make_task("t2", n=1000)
    with pytest.raises(TaskError, match="shape"):
        prequential_metrics(make_task("t1", n=300), np.zeros(299))


def test_t1_metrics_on_known_predictions():
    t = make_task("t1", 0)
    p = t.target.copy()
    p[500:1000] += 0.1  # wrong by 0.1 throughout regime 2 only
    m = prequential_metrics(t, p)
    np.testing.assert_allclose(m["steady_mse"], [0.0, 0.01, 0.0], atol=1e-15)
    np.testing.assert_allclose(m["recovery_mse"], [0.01, 0.0], atol=1e-15)
    assert m["mean_mse"] == pytest.approx(0.01 / 3) and m["score"] == m["mean_mse"]
    assert prequential_metrics(t, t.target[:, 0])["mean_mse"] == 0.0  # 1-D predictions are accepted


def test_t2_and_t4_metrics_score_only_the_tail():
    t2 = make_task("t2", 0)
    p = t2.target.copy()
    p[:4000] += 1.0
    p[4000:] += 0.2
    m = prequential_metrics(t2, p)
    assert m["tail_mse"] == m["score"] == pytest.approx(0.04) and m["mean_mse"] == pytest.approx(0.808)
    t4 = make_task("t4", 0)
    p = t4.target.copy() * 0.3
    p[:100] *= -1.0  # warm-up mistakes do not count
    p[5000:5250] *= -1.0
    p[6000] = 0.0  # a zero prediction says "ground"
    expected = (250 + (t4.target[6000, 0] > 0)) / 5000
    assert prequential_metrics(t4, p)["error_rate"] == pytest.approx(expected)
    assert math.isnan(prequential_metrics(t4, np.full((10000, 1), np.nan))["tail_mse"])


# ----------------------------------------------------------------------------------------- CartPole
def test_cartpole_step_matches_hand_computation():
    # From rest, push right: temp = 10/1.1, theta_acc = -temp / (0.5 (4/3 - 0.1/1.1)) = -600/41,
    # x_acc = temp - 0.05 theta_acc / 1.1 = 4400/451; Euler moves positions with the old (zero) velocities.
    nxt, term = cartpole_step(np.zeros((1, 4)), np.array([1]))
    np.testing.assert_allclose(nxt[0], [0.0, 0.02 * 4400 / 451, 0.0, -0.02 * 600 / 41], rtol=1e-14, atol=1e-15)
    assert not term[0]
    s = np.array([[0.1, 0.2, 0.05, -0.1]])
    nxt, _ = cartpole_step(s, np.array([0]))
    assert nxt[0, 0] == pytest.approx(0.1 + 0.02 * 0.2) and nxt[0, 2] == pytest.approx(0.05 - 0.02 * 0.1)
    # Mirror symmetry: the mirrored state under the mirrored action steps to the mirrored state.
    mirrored, _ = cartpole_step(-s, np.array([1]))
    np.testing.assert_allclose(mirrored, -nxt, rtol=1e-14)


def test_cartpole_termination_and_truncation():
    th = CARTPOLE_V1.theta_threshold
    states = np.array([[0, 0, th - 1e-4, 0.0], [0, 0, th - 1e-4, 1.0], [2.399, 1.0, 0, 0], [0, 0, 0, 0.0]])
    _, term = cartpole_step(states, np.array([1, 1, 1, 1]))
    assert term.tolist() == [False, True, True, False]
    env = CartPoleVec(2, seed=5)
    env.steps[:] = [CARTPOLE_V1.max_steps - 1, 0]
    _, reward, term, trunc = env.step(np.array([0, 1]))
    assert trunc.tolist() == [True, False] and not term.any() and reward.tolist() == [1.0, 1.0]


def test_cartpole_resets_are_seeded_and_random_policy_matches_gym():
    a, b = CartPoleVec(3, seed=7), CartPoleVec(3, seed=7)
    np.testing.assert_array_equal(a.state, b.state)
    assert np.abs(a.state).max() <= 0.05 and not np.array_equal(a.state, CartPoleVec(3, seed=8).state)
    # A uniformly random policy lasts ~22 steps on CartPole-v1.
    env, rng = CartPoleVec(50, seed=0), np.random.default_rng(0)
    lengths, steps = [], np.zeros(50)
    while len(lengths) < 400:
        _, _, term, trunc = env.step(rng.integers(0, 2, 50))
        steps += 1
        done = term | trunc
        lengths += steps[done].tolist()
        steps[done] = 0
        env.reset(done)
    assert 18 < np.mean(lengths) < 27


def test_cartpole_bad_input():
    with pytest.raises(CartPoleError, match="values in"):
        cartpole_step(np.zeros((2, 4)), np.array([0, 2]))
    with pytest.raises(CartPoleError, match="expected"):
        cartpole_step(np.zeros((2, 3)), np.array([0, 1]))
    with pytest.raises(CartPoleError, match="n_envs"):
        CartPoleVec(0)
