"""Benchmark tasks of the on-chip online learners (arXiv 2602.02056), generated in closed form.

Every task is a fixed stream of samples, seeded, in float64, identical on every machine, with no
download: the protocol is prequential (the learner predicts sample t, then updates on that same sample),
so a task is just the stream ``x[t] -> target[t]`` plus the windows its metrics are taken over.

- ``t1``: regime-switching function tracking (1 -> 1, n = 1500). x ~ U(-2, 2); the target function
  switches twice, at n//3 and 2n//3: f1 = sin x + 0.3 x^2, f2 = -cos 2x + 0.1 x^3 + 1,
  f3 = exp(-(x-1)^2 / 2) + 0.05 x^3. Metrics: mean MSE, steady MSE (last 100 of each regime),
  recovery MSE (first 50 after each switch).
- ``t2``: Narendra-Parthasarathy plant identification (2 -> 1, n = 5000). y(k+1) = y(k)/(1 + y(k)^2) +
  u(k)^3, u ~ U(-1, 1), y(0) = 0; inputs [y(k), u(k)], target y(k+1). |y/(1+y^2)| <= 1/2 and |u^3| <= 1,
  so |y| < 1.5 always. Metric: MSE over the last 1000 samples.
- ``t4``: non-stationary qubit-readout stand-in (16 -> 1, n = 10000). See :func:`_t4`. Metric: error
  rate of sign(prediction) over the last 5000 samples.

A user's own stream (``bitforge learn --data``; files read by :mod:`bitforge.models.streams`) becomes a task
through :func:`stream_task`: scored like T2, by the MSE over its last quarter (``STREAM_EVAL_FRACTION``).

``Task.segments`` names the windows (half-open index ranges) the metrics use, so
:func:`prequential_metrics` is a function of the task alone and a plot can shade the regimes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import math

import numpy as np
from bitforge.toolchain.errors import BitforgeError

__all__ = [
    "T4_BINS",
    "T4_DECAY_PROB",
    "T4_NOISE_SIGMA",
    "TASKS",
    "Task",
    "TaskError",
    "make_task",
    "prequential_metrics",
    "stream_task",
]


class TaskError(BitforgeError):
    """An unknown task name, a stream too short for its metric windows, or predictions of the wrong shape."""


@dataclass(frozen=True, eq=False)
class Task:
    """One prequential stream: ``x`` ``(n, d_in)`` and ``target`` ``(n, d_out)``, float64.

    ``input_range`` bounds every input (all inputs share it; the learners' grid defaults cover it).
    ``segments`` maps window names to half-open ``(start, end)`` sample ranges; ``metric`` names how
    :func:`prequential_metrics` scores the stream ("regime_mse", "tail_mse" or "tail_error_rate").
    """

    name: str
    x: np.ndarray
    target: np.ndarray
    input_range: tuple[float, float]
    segments: dict[str, tuple[int, int]]
    metric: str

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def d_in(self) -> int:
        return int(self.x.shape[1])

    @property
    def d_out(self) -> int:
        return int(self.target.shape[1])


# ----------------------------------------------------------------------------------------------- T1
T1_FUNCTIONS: tuple[Callable[[np.ndarray], np.ndarray], ...] = (
    lambda x: np.sin(x) + 0.3 * x ** 2,
    lambda x: -np.cos(2.0 * x) + 0.1 * x ** 3 + 1.0,
    lambda x: np.exp(-((x - 1.0) ** 2) / 2.0) + 0.05 * x ** 3,
)
T1_STEADY, T1_RECOVERY = 100, 50


def _t1(rng: np.random.Generator, n: int) -> Task:
    if n < 3 * T1_STEADY:
        raise TaskError(f"t1: n = {n} is too short for three regimes with a {T1_STEADY}-sample steady window "
                        f"each; use n >= {3 * T1_STEADY} (the benchmark uses 1500)")
    x = rng.uniform(-2.0, 2.0, size=(n, 1))
    bounds = [0, n // 3, 2 * n // 3, n]
    target = np.empty_like(x)
    segments: dict[str, tuple[int, int]] = {}
    for r, f in enumerate(T1_FUNCTIONS):
        lo, hi = bounds[r], bounds[r + 1]
        target[lo:hi] = f(x[lo:hi])
        segments[f"regime{r + 1}"] = (lo, hi)
        segments[f"steady{r + 1}"] = (hi - T1_STEADY, hi)
        if r > 0:
            segments[f"recovery{r + 1}"] = (lo, lo + T1_RECOVERY)
    return Task("t1", x, target, (-2.0, 2.0), segments, "regime_mse")


# ----------------------------------------------------------------------------------------------- T2
T2_TAIL = 1000


def _t2(rng: np.random.Generator, n: int) -> Task:
    if n <= T2_TAIL:
        raise TaskError(f"t2: n = {n} leaves nothing before the {T2_TAIL}-sample scoring window; use n > "
                        f"{T2_TAIL} (the benchmark uses 5000)")
    u = rng.uniform(-1.0, 1.0, size=n)
    y = np.zeros(n + 1)
    for k in range(n):  # a scalar recursion: 5000 steps is ~5 ms
        y[k + 1] = y[k] / (1.0 + y[k] ** 2) + u[k] ** 3
    x = np.stack([y[:-1], u], axis=1)
    return Task("t2", x, y[1:, None], (-1.5, 1.5), {"warmup": (0, n - T2_TAIL), "eval": (n - T2_TAIL, n)},
                "tail_mse")


# ----------------------------------------------------------------------------------------------- T4
T4_BINS = 8
#: Per-bin, per-quadrature Gaussian noise. The centres are 1.0 apart, so a matched filter over the 8
#: bins that knows theta(t) would separate them at d' = sqrt(8)/0.7 = 4.0 (2 % error) without the
#: clipping and the decays; with them, that oracle errs on ~6 % of shots, a fixed I-axis filter that
#: ignores the drift on ~8 %, chance is 50 %: neither trivial nor impossible, and tracking the drift
#: pays (measured in tests/test_online_tasks.py).
T4_NOISE_SIGMA = 0.7
T4_DECAY_PROB = 0.15
T4_PERIOD = 8000.0
T4_AMPLITUDE = 0.6
T4_TAIL_FRACTION = 2  # score the last n // 2 samples (5000 of 10000)


def t4_theta(t: np.ndarray) -> np.ndarray:
    """The readout axis drift theta(t) = 0.6 sin(2 pi t / 8000), t the sample (shot) index."""
    return T4_AMPLITUDE * np.sin(2.0 * np.pi * np.asarray(t, dtype=np.float64) / T4_PERIOD)


def _t4(rng: np.random.Generator, n: int) -> Task:
    """Dispersive readout of one qubit, shot by shot, with a slowly rotating IQ plane.

    Shot t prepares s ~ Bernoulli(1/2); each of the 8 time bins reports (I, Q) = centre + N(0, sigma^2 I)
    with the ground centre -0.5 (cos theta, sin theta) and the excited one +0.5 (cos theta, sin theta),
    theta = theta(t). An excited shot decays with probability 0.15 at a bin tau ~ U{0..7}: bins >= tau
    show the ground centre (the label stays "excited": what was prepared is what a readout must tell).
    Inputs are interleaved per bin, x = [I_0, Q_0, I_1, Q_1, ..., I_7, Q_7], clipped to [-1, 1].
    Target +1 for excited, -1 for ground, so MSE regression with feedback 2(y_hat - t) is the learner's
    loss and sign(y_hat) its decision (a zero prediction counts as ground).
    """
    if n < 2:
        raise TaskError(f"t4: n = {n} is too short; use n >= 2 (the benchmark uses 10000)")
    t = np.arange(n)
    s = rng.integers(0, 2, size=n)
    decays = (s == 1) & (rng.random(n) < T4_DECAY_PROB)
    tau = rng.integers(0, T4_BINS, size=n)
    bins = np.arange(T4_BINS)
    excited_now = (s[:, None] == 1) & ~(decays[:, None] & (bins[None, :] >= tau[:, None]))  # (n, 8)
    sign = np.where(excited_now, 0.5, -0.5)
    theta = t4_theta(t)[:, None]
    iq = np.stack([sign * np.cos(theta), sign * np.sin(theta)], axis=2)  # (n, 8, 2)
    iq = iq + rng.normal(0.0, T4_NOISE_SIGMA, size=iq.shape)
    x = np.clip(iq.reshape(n, 2 * T4_BINS), -1.0, 1.0)
    target = np.where(s == 1, 1.0, -1.0)[:, None]
    tail = n // T4_TAIL_FRACTION
    return Task("t4", x, target, (-1.0, 1.0), {"warmup": (0, n - tail), "eval": (n - tail, n)},
                "tail_error_rate")


# ------------------------------------------------------------------------------------------ registry
_GENERATORS: dict[str, tuple[Callable[[np.random.Generator, int], Task], int]] = {
    "t1": (_t1, 1500), "t2": (_t2, 5000), "t4": (_t4, 10000),
}
#: Task names and their benchmark lengths.
TASKS: dict[str, int] = {name: n for name, (_, n) in _GENERATORS.items()}


def make_task(name: str, seed: int = 0, n: int | None = None) -> Task:
    """The task ``name`` ("t1", "t2", "t4") drawn from ``np.random.default_rng(seed)``; ``n`` defaults to
    the benchmark length. Arrays are read-only so that learners sharing a task cannot corrupt it."""
    key = name.lower()
    if key not in _GENERATORS:
        raise TaskError(f"unknown online task {name!r}; expected one of {sorted(_GENERATORS)} "
                        f"(T5 CartPole lives in bitforge.models.cartpole)")
    gen, default_n = _GENERATORS[key]
    n = default_n if n is None else int(n)
    task = gen(np.random.default_rng(seed), n)
    for a in (task.x, task.target):
        a.setflags(write=False)
    return task


# ------------------------------------------------------------------------------------------- streams
#: A user stream is scored over its last 1/STREAM_EVAL_FRACTION ("eval"), after a warm-up: a prequential learner
#: starts from nothing, so the whole-stream mean mixes learning with tracking.
STREAM_EVAL_FRACTION = 4
#: Fewest samples a stream may have: a warm-up and an evaluation window of at least a few samples each.
MIN_STREAM_SAMPLES = 8
#: A stream's ``input_range`` is its inputs' range widened to multiples of this (exact in binary: a KAN grid on
#: it starts on an input code of any format with 2 or more fractional bits).
INPUT_RANGE_STEP = 0.25


def stream_task(name: str, x, target) -> Task:
    """A prequential task from a user's stream: ``x`` ``(n, d_in)`` (or ``(n,)``) and ``target`` ``(n, d_out)``
    (or ``(n,)``), float, in time order, already checked (:func:`bitforge.models.streams.load_stream` checks
    files). Metric "tail_mse" over the last ``n // STREAM_EVAL_FRACTION`` samples; ``input_range`` covers every
    input (the default grid of a learner for it)."""
    x = np.array(x, dtype=np.float64)
    t = np.array(target, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    t = t[:, None] if t.ndim == 1 else t
    n = x.shape[0]
    if x.ndim != 2 or t.ndim != 2 or t.shape[0] != n:
        raise TaskError(f"{name}: inputs {x.shape} and targets {t.shape} are not (n, d_in) and (n, d_out) arrays of "
                        "the same length n")
    if n < MIN_STREAM_SAMPLES:
        raise TaskError(f"{name}: {n} samples; a stream needs at least {MIN_STREAM_SAMPLES} (a warm-up and the "
                        f"last 1/{STREAM_EVAL_FRACTION} to score)")
    if not (np.isfinite(x).all() and np.isfinite(t).all()):
        raise TaskError(f"{name}: inputs or targets are not finite (NaN or Inf); remove or fill those samples")
    step = INPUT_RANGE_STEP
    lo, hi = math.floor(float(x.min()) / step) * step, math.ceil(float(x.max()) / step) * step
    if hi <= lo:
        hi = lo + step
    tail = max(1, n // STREAM_EVAL_FRACTION)
    for a in (x, t):
        a.setflags(write=False)
    return Task(name, x, t, (lo, hi), {"warmup": (0, n - tail), "eval": (n - tail, n)}, "tail_mse")


# ------------------------------------------------------------------------------------------- metrics
def _mse(err2: np.ndarray, window: tuple[int, int]) -> float:
    lo, hi = window
    return float(err2[lo:hi].mean())


def prequential_metrics(task: Task, predictions: np.ndarray) -> dict:
    """Scores of a prequential run: ``predictions[t]`` is what the learner said BEFORE updating on t.

    Always ``mean_mse`` (the whole stream, averaged over outputs) and ``score`` (the task's headline
    number, lower is better). T1 adds ``steady_mse`` and ``recovery_mse`` (lists, one per regime /
    switch); T2 adds ``tail_mse`` (= score); T4 adds ``error_rate`` (= score, sign(prediction) vs label)
    and ``tail_mse``. Non-finite predictions give non-finite MSEs (a diverged learner is not hidden).
    """
    p = np.asarray(predictions, dtype=np.float64)
    if p.ndim == 1 and task.d_out == 1:
        p = p[:, None]
    if p.shape != task.target.shape:
        raise TaskError(f"{task.name}: predictions have shape {p.shape}, expected {task.target.shape} "
                        f"(one prediction per sample and output)")
    with np.errstate(over="ignore", invalid="ignore"):
        err2 = ((p - task.target) ** 2).mean(axis=1)
    out: dict = {"mean_mse": float(err2.mean())}
    if task.metric == "regime_mse":
        out["steady_mse"] = [_mse(err2, w) for k, w in task.segments.items() if k.startswith("steady")]
        out["recovery_mse"] = [_mse(err2, w) for k, w in task.segments.items() if k.startswith("recovery")]
        out["score"] = out["mean_mse"]
    elif task.metric == "tail_mse":
        out["tail_mse"] = out["score"] = _mse(err2, task.segments["eval"])
    elif task.metric == "tail_error_rate":
        lo, hi = task.segments["eval"]
        decided = np.where(p[lo:hi, 0] > 0.0, 1.0, -1.0)
        out["error_rate"] = out["score"] = float((decided != task.target[lo:hi, 0]).mean())
        out["tail_mse"] = _mse(err2, task.segments["eval"])
    else:  # pragma: no cover - every generator sets a known metric
        raise TaskError(f"{task.name}: unknown metric {task.metric!r}")
    return out
