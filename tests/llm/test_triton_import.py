"""Triton is an optional extra: the LLM runtime's package imports without it, and a kernel module says how to get it."""
from __future__ import annotations

import subprocess
import sys


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_runtime_llm_does_not_import_triton():
    r = run("import sys, bitforge.runtime.llm; print('triton' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_kernel_module_without_triton_names_the_extra():
    r = run("import sys; sys.modules['triton'] = None\n"
            "from bitforge.toolchain.errors import BitforgeError\n"
            "try:\n    import bitforge.runtime.llm.triton_uniform\n"
            "except BitforgeError as e:\n    print(e)\n")
    assert r.returncode == 0, r.stderr
    assert "pip install 'bitforge[gpu]'" in r.stdout
