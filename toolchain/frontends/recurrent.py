"""Recurrent layers (LSTM, GRU, plain RNN) are out of bitforge's scope, and both frontends say so first.

bitforge compiles feed-forward graphs: every op maps one input tensor to one output tensor with no state carried
between samples (the online learners keep state, but as an update rule, not as a recurrence in the model). A
recurrent layer needs a sequence loop, hidden state and its own fixed-point analysis, so it is refused by name,
before the frontend trips over the shape plumbing exporters put around it (Shape, Gather, Expand, zeros).
"""
from __future__ import annotations

#: ONNX op types of recurrent layers.
ONNX_RECURRENT = ("LSTM", "GRU", "RNN")
#: ATen ops torch.export emits for nn.LSTM, nn.GRU and nn.RNN.
ATEN_RECURRENT = ("aten.lstm", "aten.gru", "aten.rnn_tanh", "aten.rnn_relu")


def recurrent_message(layer: str) -> str:
    """What to tell a user whose model holds a recurrent layer (``layer`` names the op)."""
    return (f"{layer} is a recurrent layer; recurrent layers (LSTM, GRU, RNN) are out of scope for bitforge, "
            "which compiles feed-forward models (dense, low-rank, KAN layers and the ops listed in docs/ir.md). "
            "Export the feed-forward part of the model on its own, or replace the recurrence with feed-forward "
            "layers over a fixed window of inputs")
