"""Small synthetic tasks, generated in closed form: nothing to download, identical on every machine.

``jet_like`` stands in for the hls4ml jet-tagging benchmark (16 features, 5 classes): the same shapes
and roughly the same difficulty for a small MLP, without the data set. ``t1_regime1`` is the 1-D
regression target of the KAN tracker recipe. ``waveforms`` are the 1-D signals of the signal-cnn recipe.

One real data set: ``digits``, scikit-learn's bundled 8x8 handwritten digits (read from the package, never
downloaded), split once into fixed train and test parts.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["jet_like", "t1_regime1", "JET_FEATURES", "JET_CLASSES", "digits", "DIGITS_CLASSES", "DIGITS_SPLITS",
           "waveforms", "WAVEFORM_CLASSES", "WAVEFORM_LENGTH"]

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


# -- digits -------------------------------------------------------------------------------------------

DIGITS_CLASSES = 10
DIGITS_SPLITS = ("train", "test")
#: The train/test split is drawn once from this seed, so every build seed trains on the same images and is
#: scored on the same held-out ones.
_DIGITS_SPLIT_SEED = 0xD161
#: A quarter of the 1,797 images (450) are held out.
_DIGITS_TEST = 450


@functools.lru_cache(maxsize=1)
def _digits_all() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # imported here: only this data set needs scikit-learn

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]  # pixels 0..16 -> [0, 1], one channel
    return x, bunch.target.astype(np.int64)


def digits(split: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of one split: ``x`` float32 ``(n, 1, 8, 8)`` in [0, 1], ``y`` int64 labels 0..9.

    The 1,797 images are permuted once by a fixed seed; the first 450 are ``"test"``, the other 1,347
    ``"train"``. Fresh arrays on every call (the caller may modify them).
    """
    if split not in DIGITS_SPLITS:
        raise ValueError(f"digits: split must be one of {', '.join(DIGITS_SPLITS)}, got {split!r}")
    x, y = _digits_all()
    order = np.random.default_rng(_DIGITS_SPLIT_SEED).permutation(len(y))
    part = order[:_DIGITS_TEST] if split == "test" else order[_DIGITS_TEST:]
    return x[part].copy(), y[part].copy()


# -- waveforms ------------------------------------------------------------------------------------------

WAVEFORM_CLASSES = ("sine", "square", "sawtooth", "burst")
WAVEFORM_LENGTH = 64


def waveforms(n: int, seed: int = 0, length: int = WAVEFORM_LENGTH) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: ``x`` float32 ``(n, 1, length)`` within [-2, 2], ``y`` int64 indices of :data:`WAVEFORM_CLASSES`.

    Every class has a random amplitude (0.5 to 1.5), a random number of periods in the window (1.5 to 6) and
    phase, and Gaussian noise (sigma 0.05 to 0.3) on top. Sine, square and sawtooth are periodic; a burst is
    Gaussian noise (sigma 0.6 of the amplitude) under a window covering 20 to 60 % of the length, silent
    elsewhere. The square and sawtooth are band-limited to their first few harmonics on some samples (2, 3 or
    4 terms of the Fourier series, else the ideal wave), so that neither is told from a sine by its
    sharp edges alone.
    """
    if n < 1:
        raise ValueError(f"waveforms: n must be >= 1, got {n}")
    if length < 8:
        raise ValueError(f"waveforms: length must be >= 8, got {length}")
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(WAVEFORM_CLASSES), size=n)
    amp = rng.uniform(0.5, 1.5, size=(n, 1))
    periods = rng.uniform(1.5, 6.0, size=(n, 1))
    phase = rng.uniform(0.0, 1.0, size=(n, 1))
    sigma = rng.uniform(0.05, 0.3, size=(n, 1))
    harmonics = rng.choice([2, 3, 4, 0], size=(n, 1))  # 0: the ideal (infinitely many harmonics) wave
    start = rng.uniform(0.0, 0.8, size=(n, 1))
    width = rng.uniform(0.2, 0.6, size=(n, 1))
    burst_noise = rng.normal(0.0, 0.6, size=(n, length))
    noise = rng.normal(0.0, 1.0, size=(n, length))

    t = np.arange(length)[None, :] / length  # [0, 1)
    cycles = periods * t + phase  # in periods
    angle = 2 * np.pi * cycles
    sine = np.sin(angle)
    square_ideal = np.where((cycles % 1.0) < 0.5, 1.0, -1.0)
    saw_ideal = 2.0 * (cycles % 1.0) - 1.0
    square_bl = np.zeros_like(angle)
    saw_bl = np.zeros_like(angle)
    for k in range(1, 5):  # Fourier series: square 4/(pi m) sin(m a) for odd m, sawtooth -2/(pi k) sin(k a)
        on = harmonics >= k
        m = 2 * k - 1
        square_bl += on * (4 / (np.pi * m)) * np.sin(m * angle)
        saw_bl += on * (-2 / (np.pi * k)) * np.sin(k * angle)
    square = np.where(harmonics == 0, square_ideal, square_bl)
    saw = np.where(harmonics == 0, saw_ideal, saw_bl)
    inside = (t >= start) & (t < start + width)
    burst = burst_noise * inside
    clean = np.choose(y[:, None], [sine, square, saw, burst])
    x = amp * clean + sigma * noise
    return np.clip(x, -2.0, 2.0).astype(np.float32)[:, None, :], y.astype(np.int64)
