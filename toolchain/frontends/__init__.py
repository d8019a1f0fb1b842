"""Model frontends: PyTorch and ONNX (float, QDQ, QONNX) into the bitforge IR."""
