"""The ``learner`` section of an online learner's ``bundle.json``, from the learner itself.

One function for both ends: ``bitforge deploy`` writes the section with it, and the host, opening a bundle,
computes it again from the learner the bundle carries and refuses a bundle whose section differs. So the
formats, the update rule and the read-back layout a client in another language reads from ``bundle.json`` are
the ones the golden learner and the device use.
"""
from __future__ import annotations

from typing import Optional

from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.learn.spec import Learner

from .bundle import LearnerInfo, TensorFormat
from .state_layout import layout_json

__all__ = ["fixed_format", "learner_words", "learner_info"]


def fixed_format(name: str, shape: tuple[int, ...], t: Optional[FixedType]) -> TensorFormat:
    """A tensor's format as bundles spell it: the IR's type string and, for fixed point, its fields."""
    if t is None:
        return TensorFormat(name, tuple(shape), "float32")
    return TensorFormat(name, tuple(shape), t.to_short(), width=t.width, integer=t.integer, signed=t.signed,
                        rounding=t.rounding.value, overflow=t.overflow.value)


def learner_words(learner: Learner) -> tuple[TensorFormat, TensorFormat, TensorFormat]:
    """The formats of the inputs ``x``, the targets ``t`` and the predictions ``y``."""
    f = learner.formats
    d_in, d_out = learner.spec.sizes[0], learner.spec.sizes[-1]
    return (fixed_format("x", (d_in,), f.input), fixed_format("t", (d_out,), f.datapath),
            fixed_format("y", (d_out,), f.datapath))


def learner_info(learner: Learner, state_word_bits: int, state_words: int) -> LearnerInfo:
    """The section for ``learner`` on a device that reads back ``state_words`` words of ``state_word_bits``."""
    x, t, y = learner_words(learner)
    return LearnerInfo(kind=learner.spec.kind, sizes=tuple(learner.spec.sizes), x=x, t=t, y=y,
                       rule=learner.rule.to_json(), state=layout_json(learner, state_word_bits, state_words))
