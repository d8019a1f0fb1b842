"""Small synthetic tasks, generated in closed form: nothing to download, identical on every machine.

``jet_like`` stands in for the hls4ml jet-tagging benchmark (16 features, 5 classes): the same shapes
and roughly the same difficulty for a small MLP, without the data set. ``t1_regime1`` is the 1-D
regression target of the KAN tracker recipe.
"""
from __future__ import annotations

import numpy as np

__all__ = ["jet_like", "t1_regime1", "JET_FEATURES", "JET_CLASSES"]

JET_FEATURES = 16
JET_CLASSES = 5
_LATENT = 4
#: Each class is a mixture of this many clusters, so no single hyperplane separates it.
_CLUSTERS = 3
#: The task's geometry (class centres, mixing) is drawn from this fixed seed, so different ``seed``
#: arguments give independent samples of ONE task (train and test sets that belong together).
_GEOMETRY_SEED = 0x7E7


def _jet_geometry() -> tuple[np.ndarray, np.ndarray]:
    """Class sub-cluster centres ``(classes * clusters, latent)`` and the linear feature mix ``(latent, 8)``."""
    rng = np.random.default_rng(_GEOMETRY_SEED)
    centres = rng.normal(0.0, 1.0, size=(JET_CLASSES * _CLUSTERS, _LATENT))
    centres *= 2.0 / np.linalg.norm(centres, axis=1, keepdims=True)  # all on one sphere: no class is an outlier
    mixing = rng.normal(0.0, 1.0, size=(_LATENT, 8)) / np.sqrt(_LATENT)
    return centres, mixing


def jet_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: ``x`` float32 ``(n, 16)`` with features mostly within [-4, 4], ``y`` int64 labels 0..4.

    A 4-D latent point per sample (one of its class's 3 cluster centres + Gaussian noise) gives 8 linear
    features (a fixed random mix) and 8 nonlinear ones (products, magnitudes, a radius, saturating
    curves), each with a little noise: a linear classifier reaches about 80 %, a small MLP about 90 %.
    """
    if n < 1:
        raise ValueError(f"jet_like: n must be >= 1, got {n}")
    centres, mixing = _jet_geometry()
    rng = np.random.default_rng(seed)
    y = rng.integers(0, JET_CLASSES, size=n)
    cluster = rng.integers(0, _CLUSTERS, size=n)
    z = centres[y * _CLUSTERS + cluster] + rng.normal(0.0, 0.45, size=(n, _LATENT))
    linear = z @ mixing
    nonlinear = np.stack([
        z[:, 0] * z[:, 1],
        z[:, 2] * z[:, 3],
        np.abs(z[:, 0]) - np.abs(z[:, 3]),
        np.linalg.norm(z, axis=1) - 1.5,
        np.tanh(2.0 * z[:, 1]),
        np.sin(1.5 * z[:, 2]),
        z[:, 3] ** 2 - 1.0,
        np.maximum(z[:, 0], z[:, 2]),
    ], axis=1)
    x = np.concatenate([linear, nonlinear], axis=1) + rng.normal(0.0, 0.1, size=(n, JET_FEATURES))
    return np.clip(x, -4.0, 4.0).astype(np.float32), y.astype(np.int64)


def t1_regime1(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` float32 ``(n, 1)`` each: x ~ U(-2, 2), y = sin x + 0.3 x^2 (no noise)."""
    if n < 1:
        raise ValueError(f"t1_regime1: n must be >= 1, got {n}")
    x = np.random.default_rng(seed).uniform(-2.0, 2.0, size=(n, 1)).astype(np.float32)
    x64 = x.astype(np.float64)  # the target of the float32 sample actually returned
    return x, (np.sin(x64) + 0.3 * x64 ** 2).astype(np.float32)
