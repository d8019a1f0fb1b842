"""The small convolutional classifiers of the CNN recipes, as plain PyTorch modules.

They are built from stock ``torch.nn`` layers (Conv, BatchNorm, ReLU/LeakyReLU, pooling, Flatten, Linear,
Softmax), the way people write them, with no bitforge quantizers inside: the compiler's ``--precision``
pass chooses the fixed-point types. The softmax head is part of the module, so the compiled model ends in
it too; training reads the logits before it (:func:`logits`).

Sizes are chosen for the ECP5-85F (156 DSPs, 84k LUTs): a few thousand weights in all.
"""
from __future__ import annotations

from torch import nn

__all__ = ["digits_cnn", "signal_cnn", "logits", "DIGITS_SHAPE", "SIGNAL_SLOPE"]

#: One 8x8 grey-scale image, channels first.
DIGITS_SHAPE = (1, 8, 8)
#: signal_cnn's LeakyReLU slope: not a power of two, so the fixed-point slope is a rounded multiplier.
SIGNAL_SLOPE = 0.1


def digits_cnn(classes: int = 10) -> nn.Sequential:
    """(1, 8, 8) -> two 3x3 conv blocks (8 then 16 channels; BatchNorm, ReLU, 2x2 max pool) -> (16, 2, 2)
    -> Linear(64, classes) -> Softmax: 1,864 weights."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 2 * 2, classes), nn.Softmax(dim=1),
    )


def signal_cnn(classes: int = 4) -> nn.Sequential:
    """(1, L) -> Conv1d(1, 8, 5) -> BatchNorm -> LeakyReLU -> max pool 4 -> Conv1d(8, 16, 5, dilation 2)
    -> BatchNorm -> LeakyReLU -> global average pool -> Linear(16, classes) -> Softmax: 744 weights.

    The second convolution's dilation widens its view to 9 pooled samples (36 input samples) at the cost
    of 5 taps; the global average makes the decision independent of where in the window a feature is."""
    return nn.Sequential(
        nn.Conv1d(1, 8, 5, padding=2), nn.BatchNorm1d(8), nn.LeakyReLU(SIGNAL_SLOPE), nn.MaxPool1d(4),
        nn.Conv1d(8, 16, 5, padding=4, dilation=2), nn.BatchNorm1d(16), nn.LeakyReLU(SIGNAL_SLOPE),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, classes), nn.Softmax(dim=1),
    )


def logits(model: nn.Sequential) -> nn.Sequential:
    """The model without its softmax head (shares its layers): what cross-entropy training reads."""
    return model[:-1]
