"""Benchmarks: the golden model against ONNX Runtime (``emulate``), bitforge's RTL against da4ml's (``rtl``,
with the da4ml baseline in ``da4ml``). Each prints a table and writes JSON; ratios come from one run."""
