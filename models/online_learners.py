"""Float reference of the on-chip online learners: KAN (any depth) and MLP, one sample per step.

Protocol (arXiv 2602.02056; docs/references.md): for every sample, predict y_hat, then take one plain SGD step on that
same sample's loss L = sum_o (y_hat_o - t_o)^2, whose feedback is dL/dy_hat = 2 (y_hat - t). For the
last KAN layer this is exactly the LMS update of the hardware, c_{o,i,c+m} -= eta 2 e_o b_m(u_i), on the
k+1 active coefficients per edge; hidden KAN layers receive dL/dx_i = sum_o g_o phi'_{o,i}(x_i) from
the PRE-update coefficients (one backward pass, then all layers update), as the chip does.

Independent runs (seeds, learning rates) are one tensor program: every parameter carries a leading run
axis R, and since the runs share nothing, the gradient of the SUM of their losses is each run's own
gradient. A 1500-step T1 run costs the same whether R is 1 or 64.

The basis is :func:`bitforge.models.kan.bspline_basis` (the compiler's, inputs clamped into the grid;
the clamp's zero derivative outside it is the hardware's too), and :meth:`OnlineLearner.to_modules`
returns one run's trained network as :class:`~bitforge.models.kan.KANLayer` / ``nn.Linear`` modules
for the compiler. A learner is described by the one spec of every learner,
:class:`bitforge.toolchain.learn.spec.LearnerSpec` (the float reference reads its kind, sizes, grid, init
and eta = 2**-lr_shift, and ignores its fixed-point formats); initial parameters come from its
:func:`~bitforge.toolchain.learn.spec.init_params`, so the fixed-point golden learner starts from the same
numbers.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from bitforge.toolchain.learn.spec import LearnerError, LearnerSpec, UpdateRule, init_params
from torch import nn

from .kan import KANLayer, bspline_basis
from .online_tasks import Task

__all__ = [
    "CARTPOLE_OBS_SCALE",
    "REFERENCE_CONFIGS",
    "A2CConfig",
    "A2CResult",
    "LearnerError",
    "LearnerSpec",
    "OnlineLearner",
    "a2c_loss",
    "reference_spec",
    "rollout_next_values",
    "run_a2c",
    "run_prequential",
    "run_prequential_batch",
]

MODELS = ("kan", "mlp")


#: The benchmark's reference learners per task (arXiv 2602.02056); ``bitforge learn`` defaults.
#: Learning rates are the best power of two of a float sweep over task seeds 0..4 (lower eta when two
#: are close: fixed point has less headroom), measured by ``python -m bitforge.models.online_learners``:
#: - T1 KAN: on [-2, 2] the edge coefficients (b_0 <= 1/6 at the grid's ends) learn too slowly for the
#:   regime-1 steady window (0.0015 at any eta); a grid 1/16 wider per side, [-2.25, 2.25] (h = 0.9, lo
#:   exact in binary), reaches 0.0003/0.0007/0.0001 with the same G = 5.
#: - T2 KAN: the plant's state stays in (-1.5, 1.5); a grid on [-2, 2] wastes 2 of its 8 cells and gives
#:   0.0017, the tight grid (h = 0.375) 0.0002.
#: - T2 MLP: diverges at eta = 2^-2; 2^-4 (0.0018 median) keeps a factor 4 from the edge.
#: - T4: G = 8 on [-1, 1] (h = 1/4: cell index by bit slicing); G = 4..8 all err on ~7 %.
REFERENCE_CONFIGS: dict[str, dict[str, LearnerSpec]] = {
    "t1": {
        "kan": LearnerSpec("kan", (1, 1), grid_size=5, order=3, grid_range=(-2.25, 2.25), rule=UpdateRule(1)),
        "mlp": LearnerSpec("mlp", (1, 32, 1), rule=UpdateRule(6)),
    },
    "t2": {
        "kan": LearnerSpec("kan", (2, 1), grid_size=8, order=3, grid_range=(-1.5, 1.5), rule=UpdateRule(3)),
        "mlp": LearnerSpec("mlp", (2, 16, 1), rule=UpdateRule(4)),
    },
    "t4": {
        "kan": LearnerSpec("kan", (16, 1), grid_size=8, order=3, grid_range=(-1.0, 1.0), rule=UpdateRule(7)),
        "mlp": LearnerSpec("mlp", (16, 16, 1), rule=UpdateRule(7)),
    },
}


def reference_spec(task: str, model: str = "kan", **overrides) -> LearnerSpec:
    """The reference learner for ``task`` and ``model``, with any field overridden (:meth:`LearnerSpec.replace`:
    e.g. ``lr_shift=3``, ``formats=LearnerFormats.make("fixed<8,4>")``, ``seed=2``)."""
    try:
        spec = REFERENCE_CONFIGS[task.lower()][model.lower()]
    except KeyError:
        raise LearnerError(f"no reference learner for task {task!r}, model {model!r}; tasks "
                           f"{sorted(REFERENCE_CONFIGS)}, models {list(MODELS)}") from None
    return spec.replace(**overrides)


class OnlineLearner:
    """R independent runs of one :class:`LearnerSpec`, stepped one sample at a time.

    ``params[p]`` has shape ``(R,) + spec.param_shapes()[p]``; ``eta`` is per run ``(R,)``: by default the
    spec's 2**-lr_shift, or any positive ``etas`` (the float reference is free to sweep what the chip cannot).
    Run r starts from ``init_params(spec, seeds[r])``.
    """

    def __init__(self, spec: LearnerSpec, seeds: Sequence[int] = (0,), etas: Sequence[float] | None = None,
                 dtype: torch.dtype = torch.float64):
        self.spec = spec
        seeds = [int(s) for s in seeds]
        if not seeds:
            raise LearnerError("OnlineLearner needs at least one run (seeds is empty)")
        etas = [spec.eta] * len(seeds) if etas is None else [float(e) for e in etas]
        if len(etas) != len(seeds) or not all(e > 0 and math.isfinite(e) for e in etas):
            raise LearnerError(f"OnlineLearner: {len(etas)} learning rates {etas[:4]}... for {len(seeds)} runs; "
                               f"give one positive finite eta per seed")
        self.runs = len(seeds)
        self.dtype = dtype
        per_run = [init_params(spec, s) for s in seeds]
        self.params = [torch.tensor(np.stack([p[j] for p in per_run]), dtype=dtype).requires_grad_(True)
                       for j in range(len(per_run[0]))]
        self.eta = torch.tensor(etas, dtype=dtype)

    # ------------------------------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(R, *batch, d_in)`` -> ``(R, *batch, d_out)``: run r's network on its own inputs."""
        s, h = self.spec, x
        if s.kind == "kan":
            lo, hi = s.grid_range
            for c in self.params:
                b = bspline_basis(h, lo, hi, s.grid_size, s.order)  # (R, *batch, in, G+k)
                h = torch.einsum("r...ij,roij->r...o", b, c)
            return h
        n_layers = len(self.params) // 2
        lift = (1,) * (x.dim() - 2)  # the bias broadcasts over the batch dims
        for layer in range(n_layers):
            w, bias = self.params[2 * layer], self.params[2 * layer + 1]
            h = torch.einsum("r...i,roi->r...o", h, w) + bias.view(bias.shape[:1] + lift + bias.shape[1:])
            if layer < n_layers - 1:
                h = torch.relu(h)
        return h

    def step(self, x: torch.Tensor, target: torch.Tensor, learn: bool = True) -> torch.Tensor:
        """Predict ``(R, d_out)`` for ``(R, d_in)`` inputs, then (``learn``) one SGD step per run."""
        y = self.forward(x)
        if learn:
            loss = ((y - target) ** 2).sum()  # runs are independent: d(sum)/d(params of r) = run r's grad
            grads = torch.autograd.grad(loss, self.params)
            with torch.no_grad():
                for p, g in zip(self.params, grads):
                    p.sub_(self.eta.view((-1,) + (1,) * (p.dim() - 1)) * g)
        return y.detach()

    def apply_gradient(self, grads: Sequence[torch.Tensor]) -> None:
        """p -= eta g for externally computed per-run gradients (A2C combines two losses)."""
        with torch.no_grad():
            for p, g in zip(self.params, grads):
                p.sub_(self.eta.view((-1,) + (1,) * (p.dim() - 1)) * g)

    # -------------------------------------------------------------------------------------- export
    def to_modules(self, run: int = 0, dtype: torch.dtype = torch.float32) -> nn.Sequential:
        """Run ``run``'s current network as ordinary modules (KANLayer / Linear + ReLU) of ``dtype``."""
        s = self.spec
        mods: list[nn.Module] = []
        pairs = list(zip(s.sizes[:-1], s.sizes[1:]))
        for layer, (i, o) in enumerate(pairs):
            if s.kind == "kan":
                m = KANLayer(i, o, s.grid_size, s.order, s.grid_range).to(dtype)
                with torch.no_grad():
                    m.coeffs.copy_(self.params[layer][run])
                mods.append(m)
            else:
                m = nn.Linear(i, o, dtype=dtype)
                with torch.no_grad():
                    m.weight.copy_(self.params[2 * layer][run])
                    m.bias.copy_(self.params[2 * layer + 1][run])
                mods += [m, nn.ReLU()] if layer < len(pairs) - 1 else [m]
        return nn.Sequential(*mods)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Per-sample steps are tensors of a few dozen numbers: intra-op threads only add synchronisation,
    and on a loaded machine they make a step ~10x slower. The caller's setting comes back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_fit(spec: LearnerSpec, task: Task) -> None:
    if spec.sizes[0] != task.d_in or spec.sizes[-1] != task.d_out:
        raise LearnerError(f"learner sizes {list(spec.sizes)} do not fit task {task.name} "
                           f"({task.d_in} -> {task.d_out}); use [{task.d_in}, ..., {task.d_out}]")


def run_prequential_batch(spec: LearnerSpec, task: Task, seeds: Sequence[int] = (0,),
                          etas: Sequence[float] | None = None, dtype: torch.dtype = torch.float64) -> np.ndarray:
    """Predictions ``(R, n, d_out)`` of R independent runs (one per seed / eta) over the whole task."""
    _check_fit(spec, task)
    learner = OnlineLearner(spec, seeds, etas, dtype)
    x = torch.tensor(task.x, dtype=dtype)
    t = torch.tensor(task.target, dtype=dtype)
    preds = torch.empty((learner.runs, task.n, task.d_out), dtype=dtype)
    with _one_thread():
        for i in range(task.n):
            preds[:, i] = learner.step(x[i].expand(learner.runs, -1), t[i].expand(learner.runs, -1))
    return preds.numpy()


def run_prequential(spec: LearnerSpec | str, task: Task, seed: int = 0) -> np.ndarray:
    """Predictions ``(n, d_out)`` of one run; ``spec`` may be "kan"/"mlp" for the task's reference learner."""
    if isinstance(spec, str):
        spec = reference_spec(task.name, spec)
    return run_prequential_batch(spec, task, (seed,))[0]


# ------------------------------------------------------------------------------------ T5: A2C on CartPole
#: Divides the CartPole state [x, x_dot, theta, theta_dot] into about [-1, 1] (x and theta by their
#: termination thresholds, the velocities by what balancing episodes reach), so one grid serves all inputs.
CARTPOLE_OBS_SCALE = (2.4, 3.0, 0.21, 3.5)


@dataclass(frozen=True)
class A2CConfig:
    """Online advantage actor-critic with per-sample updates (no batches, no replay).

    The learner has 4 inputs (the scaled state) and 3 outputs: two action logits and the value V(s). The
    policy acts for ``rollout`` environment steps with its parameters held; then every step of the rollout, in
    order, is one learning sample with advantage A_t = G_t - V(s_t): G_t the discounted return to the rollout's
    end, r + gamma r + ... + gamma^n V(s_end) (0 after a termination; a truncated episode, 500 steps, and the
    rollout's last step bootstrap from V(s') predicted when it was collected), V(s_t) the learner's prediction
    when the sample is learned. The loss -log pi(a|s) A + w A^2 - beta H(pi) gives the feedback
    (pi - onehot(a)) A on the logits and -2 w A on the value: all computable on chip (w a power of two: a shift),
    and A is the error the learner core sees. ``rollout = 1`` is one-step TD(0), A = r + gamma V(s') - V(s).

    Why rollouts (docs/learners.md, T5): a KAN [4, 3] is additive, V(s) = sum_i phi_i(s_i), and cannot fit
    CartPole's value; TD(0) takes its advantage from that misfit critic (at gamma 1 - 2**-7 it stalls near a
    mean of 350, at 1 - 2**-6 it needs about 4,200 episodes). The return to a rollout's end bootstraps after up
    to ``rollout`` real rewards, so the critic is only a baseline; the defaults (rollout 512, gamma 1 - 2**-6,
    eta 2**-10, the public design's lr 0.001) solve CartPole in 343-456 episodes (seeds 0-2).

    ``advantage_clip``: A saturates at +-this (None: never) before both feedbacks, a comparator on chip. After a
    run of good episodes the critic overestimates, and the next bad rollout's large negative A pushes every
    sample away from its own action: per-sample steps that large turn some runs into one deterministic action
    (episodes of 9-10 steps) whose gradient, (pi - onehot(a)) A, is then zero. With the clip at 16 the runs that
    collapsed so solve as fast as the others (docs/learners.md).

    ``reward``: the reward per step the learner sees (CartPole's 1 scaled; a power of two on chip). V(s)
    approaches ``reward / (1 - gamma)``: 64 with reward 1 and gamma 1 - 2**-6, beyond a <16,6> datapath's +-32,
    so a fixed-point critic needs the reward scaled down (the episode returns reported are CartPole's own; scale
    ``advantage_clip`` with the reward).
    """

    spec: LearnerSpec = LearnerSpec("kan", (4, 3), grid_size=5, order=3, grid_range=(-1.0, 1.0), rule=UpdateRule(10))
    gamma: float = 1.0 - 2.0 ** -6  # 0.984: 1 - 2**-n is a shifted subtract on chip
    critic_weight: float = 1.0
    entropy: float = 0.0
    reward: float = 1.0
    rollout: int = 512
    advantage_clip: float | None = 16.0
    target: float = 475.0
    window: int = 100
    max_episodes: int = 3000
    max_steps: int = 2_000_000

    def __post_init__(self):
        if self.spec.sizes[0] != 4 or self.spec.sizes[-1] != 3:
            raise LearnerError(f"A2C on CartPole needs a learner [4, ..., 3] (2 logits + value), got "
                               f"{list(self.spec.sizes)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise LearnerError(f"A2C discount gamma = {self.gamma} must lie in [0, 1]")
        if self.advantage_clip is not None and not self.advantage_clip > 0:
            raise LearnerError(f"A2C advantage_clip = {self.advantage_clip} must be > 0 (or None: no clipping)")
        if self.window < 1 or self.max_episodes < 1 or self.rollout < 1:
            raise LearnerError(f"A2C window ({self.window}), max_episodes ({self.max_episodes}) and rollout "
                               f"({self.rollout}) must be >= 1")


@dataclass(frozen=True)
class A2CResult:
    """Per run: the return of every finished episode and the episode count at which the ``window``-episode
    mean first reached ``target`` (None when the cap came first)."""

    returns: tuple[tuple[float, ...], ...]
    solved_at: tuple[int | None, ...]
    steps: int


class EpisodeLog:
    """Episode returns of R runs stepped together (CartPole's reward 1 per step) and when each run stops: solved
    (a ``window``-episode mean >= ``target``) or out of episodes; all stop at ``max_steps`` environment steps.
    ``active`` is the live mask a learner multiplies its updates with (updated in place)."""

    def __init__(self, config: A2CConfig, runs: int, on_episode: Callable[[int, int, float], None] | None = None):
        self.config, self.on_episode = config, on_episode
        self.returns: list[list[float]] = [[] for _ in range(runs)]
        self.solved: list[int | None] = [None] * runs
        self.ep_return = np.zeros(runs)
        self.active = np.ones(runs, dtype=bool)
        self.steps = 0

    def running(self) -> bool:
        return bool(self.active.any()) and self.steps < self.config.max_steps

    def step(self, done: np.ndarray) -> None:
        """One environment step of every run; ``done`` marks the runs whose episode ended with it."""
        cfg = self.config
        self.steps += 1
        self.ep_return += 1.0
        for r in np.flatnonzero(done):
            if self.active[r]:
                ret = self.returns[r]
                ret.append(float(self.ep_return[r]))
                if self.on_episode is not None:
                    self.on_episode(int(r), len(ret), float(self.ep_return[r]))
                if len(ret) >= cfg.window and np.mean(ret[-cfg.window:]) >= cfg.target:
                    self.solved[r], self.active[r] = len(ret), False
                elif len(ret) >= cfg.max_episodes:
                    self.active[r] = False
            self.ep_return[r] = 0.0

    def result(self) -> A2CResult:
        return A2CResult(tuple(tuple(r) for r in self.returns), tuple(self.solved), self.steps)


def a2c_loss(out: torch.Tensor, action: torch.Tensor, v_next: torch.Tensor, terminated: torch.Tensor,
             config: A2CConfig) -> torch.Tensor:
    """Per-run loss ``(R,)`` of one sample (reward ``config.reward``); ``out`` = (logit_0, logit_1, V(s)) ``(R, 3)``.

    ``v_next`` is what follows the reward: V(s') for TD(0), the return of the next step within a rollout. Its
    gradient on ``out`` is the on-chip feedback: (pi - onehot(a)) A (- beta dH/dlogits) on the logits and -2 w A
    on the value, A = r + gamma v_next (1 - terminated) - V(s) held constant and saturated at
    +-``advantage_clip``.
    """
    delta = (config.reward + config.gamma * v_next * (1.0 - terminated) - out[:, 2]).detach()
    if config.advantage_clip is not None:
        delta = delta.clamp(-config.advantage_clip, config.advantage_clip)
    logp = torch.log_softmax(out[:, :2], dim=1)
    chosen = logp.gather(1, action.view(-1, 1))[:, 0]
    entropy = -(logp.exp() * logp).sum(1)
    # (v - stop_grad(v + delta))^2 has gradient -2 delta on v: the critic's LMS feedback.
    critic = config.critic_weight * (out[:, 2] - (out[:, 2].detach() + delta)) ** 2
    return -chosen * delta + critic - config.entropy * entropy


def run_a2c(config: A2CConfig = A2CConfig(), seeds: Sequence[int] = (0,), etas: Sequence[float] | None = None,
            on_episode: Callable[[int, int, float], None] | None = None) -> A2CResult:
    """Train R independent A2C learners, each on its own CartPole (learner r starts from ``seeds[r]``).

    The R environments are one :class:`CartPoleVec` seeded by ``seeds[0]``, and actions are sampled from
    pi with one generator seeded by ``(seeds[0], 0xA2C)``: reproducible as a batch. A run stops learning
    once solved or at ``max_episodes``; all stop at ``max_steps`` environment steps. ``on_episode(run,
    episode, return)`` is called as each learning run finishes an episode (progress reports).
    """
    with _one_thread():
        return _run_a2c(config, seeds, etas, on_episode)


def rollout_next_values(terminated: Sequence[np.ndarray], boot_mask: Sequence[np.ndarray],
                        boot_value: Sequence[np.ndarray],
                        step_return: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[np.ndarray]:
    """What follows each step's reward in a rollout, ``(R,)`` per step: ``boot_value[t]`` where ``boot_mask[t]``
    (V(s') predicted at a truncation, and for every run at the rollout's last step), else the return of step
    t + 1, ``step_return(value, terminated)`` (r + gamma value, or r after a termination). Shared by the float
    and the fixed-point controller, which differ only in ``step_return``'s arithmetic."""
    n = len(terminated)
    if n == 0 or not np.all(boot_mask[-1]):
        raise LearnerError("rollout_next_values: the rollout's last step needs a bootstrap value for every run")
    out: list[np.ndarray] = []
    following = boot_value[-1]
    for t in range(n - 1, -1, -1):
        following = np.where(boot_mask[t], boot_value[t], following)
        out.append(following)
        following = step_return(following, terminated[t])
    return out[::-1]


def _run_a2c(config: A2CConfig, seeds: Sequence[int], etas: Sequence[float] | None,
             on_episode: Callable[[int, int, float], None] | None) -> A2CResult:
    from .cartpole import CartPoleVec

    learner = OnlineLearner(config.spec, seeds, etas)
    runs, dt = learner.runs, learner.dtype
    env = CartPoleVec(runs, seed=int(seeds[0]))
    pick = np.random.default_rng((int(seeds[0]), 0xA2C))
    scale = torch.tensor(CARTPOLE_OBS_SCALE, dtype=dt)
    state = env.state.copy()
    log = EpisodeLog(config, runs, on_episode)
    while log.running():
        xs, actions, terms, lives, masks, boots = [], [], [], [], [], []
        with torch.no_grad():  # act with the parameters held
            while len(xs) < config.rollout and log.running():
                action_u = pick.random(runs)
                x = torch.tensor(state, dtype=dt) / scale
                p_right = torch.softmax(learner.forward(x)[:, :2], dim=1)[:, 1].numpy()
                action = (action_u < p_right).astype(np.int64)
                nxt, _, term, trunc = env.step(action)
                last = len(xs) == config.rollout - 1
                boot = trunc | last
                v = learner.forward(torch.tensor(nxt, dtype=dt) / scale)[:, 2].numpy() if boot.any() else None
                xs.append(x)
                actions.append(torch.from_numpy(action))
                terms.append(term)
                lives.append(torch.tensor(log.active, dtype=dt))  # a run learns from what it played while learning
                masks.append(boot)
                boots.append(np.zeros(runs) if v is None else v)
                log.step(term | trunc)
                state = env.reset(term | trunc) if (term | trunc).any() else nxt
        if len(xs) < config.rollout:
            break  # every run stopped (solved, out of episodes, max_steps) before the rollout's end
        nexts = rollout_next_values(terms, masks, boots,
                                    lambda v, term: config.reward + config.gamma * v * (1.0 - term))
        for x, action, term, live, nv in zip(xs, actions, terms, lives, nexts):
            loss = a2c_loss(learner.forward(x), action, torch.from_numpy(nv), torch.tensor(term, dtype=dt), config)
            learner.apply_gradient(torch.autograd.grad((live * loss).sum(), learner.params))
    return log.result()


def _main(argv: Sequence[str] | None = None) -> None:
    """Print the reference learners' float numbers over task seeds (``--sweep``: every power-of-two eta)."""
    import argparse

    from .online_tasks import make_task, prequential_metrics

    ap = argparse.ArgumentParser(prog="python -m bitforge.models.online_learners", description=_main.__doc__)
    ap.add_argument("--tasks", default="t1,t2,t4")
    ap.add_argument("--models", default="kan,mlp")
    ap.add_argument("--seeds", type=int, default=5, help="task seeds 0..N-1 (learner seed = task seed)")
    ap.add_argument("--sweep", default="", help="comma-separated log2(eta) values, e.g. -8,-7,-6")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.tasks.split(","):
        for model in args.models.split(","):
            spec = reference_spec(name, model)
            exps = [int(e) for e in args.sweep.split(",")] if args.sweep else [-spec.rule.lr_shift]
            rows: dict[int, list[dict]] = {e: [] for e in exps}
            for seed in range(args.seeds):
                task = make_task(name, seed)
                preds = run_prequential_batch(spec, task, [seed] * len(exps), [2.0 ** e for e in exps])
                for e, p in zip(exps, preds):
                    rows[e].append(prequential_metrics(task, p))
            for e, ms in rows.items():
                keys = [k for k in ms[0] if k != "score"]
                summary = {k: np.round(np.mean([m[k] for m in ms], axis=0), 5).tolist() for k in keys}
                grid = f" G={spec.grid_size} k={spec.order} grid={spec.grid_range}" if model == "kan" else ""
                print(f"{name} {model} sizes={list(spec.sizes)}{grid} eta=2^{e} (mean of {args.seeds} seeds): "
                      f"{summary}", flush=True)


if __name__ == "__main__":
    _main()
