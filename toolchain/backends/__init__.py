"""Backends: IR -> ONNX (``onnx_backend``) and IR -> Verilog (``rtl/``); an HLS C++ backend is planned."""
