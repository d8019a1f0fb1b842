"""The compiled NeUQI search (``neuqi_search.c``): built once per machine with the system C compiler, loaded with
ctypes, run on ``torch.get_num_threads()`` threads over disjoint slices of groups.

Why C and not another library: the search is per group and branchy (a pattern search whose path differs per group,
an exact solver with a certificate), which batched tensor code pays for with many passes over ``[groups, n]``
temporaries; ``torch.compile`` fused the Lloyd scoring but compiled for many seconds in every process, numba is not a
dependency, and a C compiler is already one (Verilator builds its simulators with it). The PyTorch implementation in
``neuqi.py`` stays the reference, the path for ``exhaustive`` and ``compiled=false``, and the fallback when no
compiler works (a warning says so once).

The shared object is cached in ``<cache>/kernels/<key>/`` (:func:`model_io.cache_dir`), keyed by the source, the
flags, the compiler's version and the CPU's feature flags (``-march=native``), written to a temporary name and
renamed, so concurrent first uses do not see half a file.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("neuqi_search.c")
# -ffp-contract=off: no fused multiply-adds, so results do not depend on whether the CPU has FMA.
# -fno-trapping-math lets comparisons become vector blends; it changes no result.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-trapping-math", "-fPIC", "-shared")
LANES = 16          # neuqi_search.c's LANES: groups are padded to a multiple of it (with h = 0)

_F = ctypes.POINTER(ctypes.c_float)
_I = ctypes.POINTER(ctypes.c_int)


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    import platform
    return platform.processor() + platform.machine()


def _compiler() -> str | None:
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc)


def build(cache: Path) -> Path:
    """Compile the kernel into ``cache`` (if not there yet) and return the shared object's path."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError(f"no C compiler ({os.environ.get('CC', 'cc')!r} not on PATH)")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, version, _cpu_flags()]).encode()).hexdigest()[:16]
    target = cache / "kernels" / key / "neuqi_search.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / "neuqi_search.so"
        done = subprocess.run([cc, *FLAGS, "-o", str(out), str(SOURCE), "-lm"], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{cc} failed on {SOURCE.name}:\n{done.stderr[-2000:]}")
        os.replace(out, target)
    return target


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernel, or None (with one warning) where it cannot be built."""
    from .model_io import cache_dir

    try:
        lib = ctypes.CDLL(str(build(cache_dir())))
    except (OSError, RuntimeError) as err:
        warnings.warn(f"NeUQI: the compiled search is unavailable ({err}); using the PyTorch search (same results, "
                      f"several times slower)", RuntimeWarning, stacklevel=2)
        return None
    lib.neuqi_search.argtypes = [_F, _F, _F, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 _I, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, _F, _F]
    lib.neuqi_search.restype = ctypes.c_int
    lib.neuqi_exact.argtypes = [_F, _F, ctypes.c_long, ctypes.c_int, ctypes.c_int, _F, _F]
    lib.neuqi_exact.restype = ctypes.c_int
    return lib


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count for the process: neuqi+gptq calls the search once per group column of every layer,
    thousands of calls, too many to start threads for each."""
    return ThreadPoolExecutor(threads, thread_name_prefix="neuqi")


def _ptr(t: torch.Tensor, kind=_F):
    return ctypes.cast(t.data_ptr(), kind)


def _padded(t: torch.Tensor, npad: int) -> torch.Tensor:
    if t.shape[1] == npad:
        return t.to(torch.float32).contiguous()
    out = torch.zeros(t.shape[0], npad)
    out[:, :t.shape[1]] = t
    return out


def search(lib: ctypes.CDLL, w: torch.Tensor, h: torch.Tensor, smm: torch.Tensor, q: int, cfg,
           coarse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero) per row of ``w`` ([G, n]) for ``NeuqiConfig`` ``cfg`` (not exhaustive); ``coarse``: the
    coarse grid's steps, as the PyTorch search computes them."""
    G, n = w.shape
    npad = -(-n // LANES) * LANES
    w, h = _padded(w, npad), _padded(h, npad)
    smm = smm.to(torch.float32).contiguous()
    coarse = coarse.to(torch.int32).contiguous()
    scale, zero = torch.empty(G), torch.empty(G)
    threads = max(1, min(torch.get_num_threads(), G))
    bounds = [G * k // threads for k in range(threads + 1)]

    def run(k: int) -> int:
        a, b = bounds[k], bounds[k + 1]
        return lib.neuqi_search(_ptr(w[a:]), _ptr(h[a:]), _ptr(smm[a:]), b - a, n, npad, q, cfg.T,
                                _ptr(coarse, _I), coarse.numel(), cfg.refine, cfg.exact_top, cfg.lloyd_iters,
                                cfg.starts, _ptr(scale[a:]), _ptr(zero[a:]))

    # ctypes releases the GIL during the call
    codes = [run(0)] if threads == 1 else list(_pool(threads).map(run, range(threads)))
    if any(codes):
        raise MemoryError("NeUQI: the compiled search ran out of memory")
    return scale, zero


def exact_zero(lib: ctypes.CDLL, x: torch.Tensor, h: torch.Tensor, q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's exact zero-point solver on rows of ``x``, ``h`` ([G, n]): (loss, z), as ``neuqi.exact_zero``."""
    x = x.to(torch.float32).contiguous()
    h = h.to(torch.float32).contiguous()
    loss, z = torch.empty(x.shape[0]), torch.empty(x.shape[0])
    if lib.neuqi_exact(_ptr(x), _ptr(h), x.shape[0], x.shape[1], q, _ptr(loss), _ptr(z)):
        raise MemoryError("NeUQI: the compiled exact solver ran out of memory")
    return loss, z
