"""Hand-written, parameterised Verilog library, shipped as package data (see importlib.resources)."""
