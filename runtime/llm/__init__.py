"""The LLM runtime: compressed checkpoints run as PyTorch modules (reference path on CPU; Triton kernels on GPU), generation, and GGUF export for edge CPUs (issue 20)."""
