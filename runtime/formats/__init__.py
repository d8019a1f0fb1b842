"""Packed weight formats of the LLM-scale half, one module per format.

One home per format: ``bitforge.toolchain.compress`` writes these layouts, the GPU runtime's kernels and the
PyTorch reference path read them, and both import the pack/unpack code from here.
"""
