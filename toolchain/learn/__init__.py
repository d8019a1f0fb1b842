"""Online learners: the learner as IR (``spec``), its bit-exact trajectory (``emulate``), a learner on a stream into an
output folder (``run``: golden, float reference, metrics, plot, RTL, implementation), actor-critic on the
fixed-point learner (``a2c``), the ``learn`` command (``commands``) and the online-learning benchmark (``bench``).

``spec`` and ``emulate`` import nothing from backends, verify or flows (the RTL backend imports them);
``run``, ``commands``, ``bench`` and ``a2c`` sit on top and may import everything below.

The public API in one place (loaded on first use, so that importing ``learn.spec`` stays light)::

    from bitforge.toolchain.learn import LearnerSpec, LearnerFormats, UpdateRule, learn, load_stream
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "LearnerSpec": ".spec", "LearnerFormats": ".spec", "UpdateRule": ".spec", "Learner": ".spec",
    "build_learner": ".spec", "save_learner": ".spec", "load_learner": ".spec", "init_params": ".spec",
    "nearest_lr_shift": ".spec", "learn": ".run", "LearnResult": ".run", "load_stream": "bitforge.models.streams",
    "stream_task": "bitforge.models.online_tasks",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
