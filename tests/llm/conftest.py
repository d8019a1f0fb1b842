"""Triton kernel tests run in Triton's interpreter unless the caller chose otherwise.

``TRITON_INTERPRET`` must be set before Triton is imported (``triton.jit`` reads it when a kernel is defined),
and a conftest is imported before the test modules it covers, also in each pytest-xdist worker. On a GPU machine
``TRITON_INTERPRET=0 pytest tests/llm`` runs the same tests on the compiled kernels (:func:`device`).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
