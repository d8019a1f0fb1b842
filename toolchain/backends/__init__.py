"""Backends: IR -> ONNX (and later Verilog, HLS)."""
