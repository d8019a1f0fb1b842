"""Quantized models as the ecosystem exports them, built in the tests (no downloads).

* Brevitas with its defaults (``Int8WeightPerTensorFloat``: a float, non-power-of-two weight scale; a float
  bias; ``Int8ActPerTensorFloat`` activations with a learned float scale), exported both ways Brevitas offers:
  ``export_qonnx`` (QONNX ``Quant`` nodes) and ``export_onnx_qcdq`` (QuantizeLinear / Clip / DequantizeLinear).
* ONNX Runtime's ``quantize_static`` (QDQ format, int8, asymmetric activations with zero points, int32 biases),
  the path PyTorch users take when they want a quantized ONNX file.

Every builder is deterministic (seeded training data and calibration) and returns the ONNX path and a batch of
float inputs drawn like the calibration data.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

FEATURES, HIDDEN, CLASSES = 6, 12, 4


def _calibrate(model: torch.nn.Module, x: torch.Tensor) -> None:
    """Brevitas' activation scales come from statistics collected in training mode; a few batches settle them."""
    from brevitas.graph.calibrate import calibration_mode

    model.eval()
    with torch.no_grad(), calibration_mode(model):
        for chunk in x.split(64):
            model(chunk)


def _inputs(shape, seed: int, n: int = 512) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, (n, *shape)).astype(np.float32)


def _export(model: torch.nn.Module, example: torch.Tensor, path: Path, kind: str) -> Path:
    from brevitas.export import export_onnx_qcdq, export_qonnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "qonnx":
            export_qonnx(model, example, str(path))
        elif kind == "qcdq":
            export_onnx_qcdq(model, example, export_path=str(path))
        else:
            raise ValueError(f"kind must be 'qonnx' or 'qcdq', got {kind!r}")
    return path


def brevitas_mlp(folder: Path, kind: str, seed: int = 0) -> tuple[Path, np.ndarray]:
    """QuantIdentity -> QuantLinear -> ReLU -> QuantIdentity -> QuantLinear, every quantizer at its default."""
    import brevitas.nn as qnn

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        qnn.QuantIdentity(return_quant_tensor=True), qnn.QuantLinear(FEATURES, HIDDEN, bias=True),
        torch.nn.ReLU(), qnn.QuantIdentity(return_quant_tensor=True), qnn.QuantLinear(HIDDEN, CLASSES, bias=True))
    x = _inputs((FEATURES,), seed)
    _calibrate(model, torch.from_numpy(x))
    return _export(model, torch.from_numpy(x[:2]), Path(folder) / f"brevitas_mlp_{kind}.onnx", kind), x


def brevitas_cnn(folder: Path, kind: str, seed: int = 0) -> tuple[Path, np.ndarray]:
    """QuantIdentity -> QuantConv2d -> ReLU -> MaxPool -> QuantIdentity -> Flatten -> QuantLinear, defaults."""
    import brevitas.nn as qnn

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        qnn.QuantIdentity(return_quant_tensor=True), qnn.QuantConv2d(1, 4, 3, padding=1, bias=True),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), qnn.QuantIdentity(return_quant_tensor=True), torch.nn.Flatten(),
        qnn.QuantLinear(4 * 4 * 4, CLASSES, bias=True))
    x = _inputs((1, 8, 8), seed)
    _calibrate(model, torch.from_numpy(x))
    return _export(model, torch.from_numpy(x[:2]), Path(folder) / f"brevitas_cnn_{kind}.onnx", kind), x


def ort_static_cnn(folder: Path, seed: int = 0) -> tuple[Path, np.ndarray]:
    """A float CNN with a softmax head, exported by torch and quantized by ONNX Runtime's ``quantize_static``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, CLASSES), torch.nn.Softmax(dim=-1)).eval()
    x = _inputs((1, 8, 8), seed)
    folder = Path(folder)
    float_path, q_path = folder / "ort_float_cnn.onnx", folder / "ort_static_cnn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.from_numpy(x[:1]), str(float_path), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"x": x[i:i + 32]} for i in range(0, len(x), 32)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(float_path), str(q_path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return q_path, x
