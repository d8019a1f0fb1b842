"""LSTM, GRU and RNN layers are refused by name, in both frontends and on the command line, before the frontend
meets the shape plumbing exporters put around them."""
import warnings

import pytest
import torch
from torch import nn

from bitforge.toolchain.cli import main
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.frontends.onnx_frontend import load_onnx
from bitforge.toolchain.frontends.torch_frontend import from_torch

LAYERS = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}


class Recurrent(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.rnn = LAYERS[kind](4, 3, batch_first=True)
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def onnx_file(kind: str, path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Recurrent(kind).eval(), (torch.randn(1, 5, 4),), str(path), dynamo=False)
    return str(path)


@pytest.mark.parametrize("kind", LAYERS)
def test_onnx_recurrent_layer_is_refused_by_name(kind, tmp_path):
    with pytest.raises(BitforgeError) as e:
        load_onnx(onnx_file(kind, tmp_path / "r.onnx"))
    assert f"({kind}): {kind} is a recurrent layer" in str(e.value)
    assert "out of scope" in str(e.value)


@pytest.mark.parametrize("kind", LAYERS)
def test_torch_recurrent_layer_is_refused_by_name(kind):
    with pytest.raises(BitforgeError) as e:
        from_torch(Recurrent(kind).eval(), torch.randn(1, 5, 4))
    assert "module 'rnn'" in str(e.value) and "is a recurrent layer" in str(e.value)


def test_compile_of_an_lstm_is_one_message_and_exit_2(tmp_path, capsys):
    model = onnx_file("LSTM", tmp_path / "lstm.onnx")
    assert main(["compile", model, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "recurrent layers (LSTM, GRU, RNN) are out of scope" in err
    assert not (tmp_path / "out").exists()
