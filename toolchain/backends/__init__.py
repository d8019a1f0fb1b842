"""Backends: IR -> ONNX (``onnx_backend``), IR -> Verilog (``rtl/``), IR -> HLS C++ through hls4ml (``hls/``)."""
