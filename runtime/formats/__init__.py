"""Packed weight formats of the LLM-scale half, one module per format.

One home per format: ``bitforge.toolchain.compress`` writes these layouts and its checkpoint decoders (the
PyTorch reference path) read them; the planned GPU kernels will read the same layouts, importing the
pack/unpack code from here.
"""
