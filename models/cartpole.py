"""CartPole (Barto, Sutton and Anderson 1983) in closed form, vectorised over independent environments.

The dynamics, constants, Euler integration, termination thresholds and 500-step cap are those of gym's
CartPole-v1, so episode returns are comparable with published ones, without the gymnasium dependency:

    temp      = (F + m_p l theta_dot^2 sin theta) / (m_c + m_p)
    theta_acc = (g sin theta - cos theta temp) / (l (4/3 - m_p cos^2 theta / (m_c + m_p)))
    x_acc     = temp - m_p l theta_acc cos theta / (m_c + m_p)

then x += tau x_dot, x_dot += tau x_acc, theta += tau theta_dot, theta_dot += tau theta_acc (explicit
Euler: positions move with the OLD velocities). F = +10 N for action 1, -10 N for action 0; l is the
half pole length. Reward 1 every step, including the one that terminates. An episode terminates when
|x| > 2.4 or |theta| > 12 degrees, and is truncated after 500 steps. Resets draw each state component from
U(-0.05, 0.05) with the environment set's own ``np.random.default_rng(seed)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from bitforge.toolchain.errors import BitforgeError

__all__ = ["CARTPOLE_V1", "CartPoleConstants", "CartPoleError", "CartPoleVec", "cartpole_step"]


class CartPoleError(BitforgeError):
    """A bad environment count, action or state shape."""


@dataclass(frozen=True)
class CartPoleConstants:
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02
    theta_threshold: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_steps: int = 500
    reset_bound: float = 0.05

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length


CARTPOLE_V1 = CartPoleConstants()


def cartpole_step(state: np.ndarray, action: np.ndarray,
                  c: CartPoleConstants = CARTPOLE_V1) -> tuple[np.ndarray, np.ndarray]:
    """One Euler step of ``(N, 4)`` states [x, x_dot, theta, theta_dot] under ``(N,)`` actions in {0, 1}.

    Returns the next states and whether each one is outside the thresholds (terminated). Pure: the
    step cap is the environment's business (:class:`CartPoleVec`).
    """
    state = np.asarray(state, dtype=np.float64)
    action = np.asarray(action)
    if state.ndim != 2 or state.shape[1] != 4:
        raise CartPoleError(f"cartpole_step: state has shape {state.shape}, expected (N, 4)")
    if action.shape != state.shape[:1] or not ((action == 0) | (action == 1)).all():
        raise CartPoleError(f"cartpole_step: actions must be {state.shape[:1]} values in {{0, 1}}, got shape "
                            f"{action.shape} with values {np.unique(action)[:8]}")
    x, x_dot, theta, theta_dot = state.T
    force = np.where(action == 1, c.force_mag, -c.force_mag)
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + c.polemass_length * theta_dot ** 2 * sin) / c.total_mass
    theta_acc = (c.gravity * sin - cos * temp) / (c.length * (4.0 / 3.0 - c.masspole * cos ** 2 / c.total_mass))
    x_acc = temp - c.polemass_length * theta_acc * cos / c.total_mass
    nxt = np.stack([x + c.tau * x_dot, x_dot + c.tau * x_acc, theta + c.tau * theta_dot,
                    theta_dot + c.tau * theta_acc], axis=1)
    terminated = (np.abs(nxt[:, 0]) > c.x_threshold) | (np.abs(nxt[:, 2]) > c.theta_threshold)
    return nxt, terminated


class CartPoleVec:
    """``n_envs`` independent CartPole-v1 environments stepped together.

    ``step`` does not reset: it returns the true next states (a learner bootstraps from them on
    truncation) and the caller resets finished environments with :meth:`reset` (``mask``), so every
    environment's episode sequence depends only on its actions and on the shared reset stream.
    """

    def __init__(self, n_envs: int = 1, seed: int = 0, constants: CartPoleConstants = CARTPOLE_V1):
        if n_envs < 1:
            raise CartPoleError(f"CartPoleVec: n_envs must be >= 1, got {n_envs}")
        self.n_envs, self.c = int(n_envs), constants
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros((self.n_envs, 4))
        self.steps = np.zeros(self.n_envs, dtype=np.int64)
        self.reset()

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray:
        """Reset all environments (``mask`` None) or those where ``mask`` is True; returns all states."""
        idx = np.arange(self.n_envs) if mask is None else np.flatnonzero(mask)
        b = self.c.reset_bound
        self.state[idx] = self.rng.uniform(-b, b, size=(idx.size, 4))
        self.steps[idx] = 0
        return self.state.copy()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(next_state, reward, terminated, truncated)``, each over the environments."""
        self.state, terminated = cartpole_step(self.state, np.asarray(action).reshape(self.n_envs), self.c)
        self.steps += 1
        truncated = ~terminated & (self.steps >= self.c.max_steps)
        return self.state.copy(), np.ones(self.n_envs), terminated, truncated
