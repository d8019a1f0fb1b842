"""LLM-scale compression: weight quantizers, quantization + low-rank, outlier suppression, binary low-rank, NVFP4.

Every method is a function ``(W, LayerStats, CompressConfig) -> CompressedLayer`` registered by name in
:mod:`.api`; :mod:`.methods` imports the method modules so that the registry is complete. The packed formats
themselves live in :mod:`bitforge.runtime.formats` (one home per format: the planned GPU runtime will read what this writes).
"""
