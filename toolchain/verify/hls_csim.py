"""Golden model vs hls4ml's C simulation, bit for bit: the HLS backend's check.

The vectors are the ones every other check uses (:mod:`.vectors`: random rows plus the edge values where fixed
point goes wrong). The float inputs go to hls4ml's ``predict`` as doubles, so its input conversion (ap_fixed from
double, the input type's rounding and overflow) is the golden model's Quantize on the same values.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import VerificationFailed
from ..ir import Graph
from .compare import compare_outputs
from .vectors import make_vectors

__all__ = ["write_and_check_hls", "check_result", "TB_VECTORS"]

#: Vectors written into the project's tb_data (with the golden outputs) for the vendor tool's own csim.
TB_VECTORS = 100


def write_and_check_hls(g: Graph, folder: Path, options, vectors: int, seed: int,
                        progress: Callable[[str], None] = lambda msg: None) -> tuple[dict, dict]:
    """Write the HLS project into ``folder/hls``, build its C simulation, run ``vectors`` seeded vectors through it
    and the golden model. Returns the report's ``hls`` entry (reproducible: no times; ``golden_vs_hls_csim`` in
    it) and the wall times of each stage (for run.json). The caller raises on mismatches, after writing the
    report (:func:`check_result`)."""
    import tempfile

    from .. import emulate
    from ..backends.hls.project import build_model, compile_csim, csim_codes, write_project

    (name,) = g.inputs
    inputs = make_vectors(g, vectors, seed)
    x = np.asarray(inputs[name], dtype=np.float64).reshape(vectors, -1)
    with tempfile.TemporaryDirectory(prefix="bitforge-hls-") as tmp:
        tb_in, tb_out = Path(tmp) / "tb_input.npy", Path(tmp) / "tb_output.npy"
        np.save(tb_in, x[:TB_VECTORS])
        out = g.outputs[0]
        golden = emulate.run(g, {name: inputs[name][:TB_VECTORS]})[out]
        np.save(tb_out, np.ldexp(np.asarray(golden, dtype=np.float64), -g.tensors[out].dtype.frac)
                .reshape(len(golden), -1))
        progress(f"converting to hls4ml ({options.backend}, io_{options.io}, {options.strategy})")
        t0 = time.perf_counter()
        hm = build_model(g, options, Path(tmp) / "prj", (tb_in, tb_out))
        files = write_project(hm, folder / "hls")
        convert_s = time.perf_counter() - t0
        progress("building hls4ml's C simulation with g++")
        lib = compile_csim(hm)
        progress(f"verifying golden model vs hls4ml C simulation on {vectors:,} vectors")
        t1 = time.perf_counter()
        codes = csim_codes(lib, x)
        csim_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    result = compare_outputs(g, inputs, {f"{out}_code": codes}, "hls4ml C simulation")
    golden_s = time.perf_counter() - t2  # the golden model's run inside compare_outputs
    entry = {
        "backend": options.backend, "io": options.io, "strategy": options.strategy, "reuse": options.reuse,
        "project": options.project, "part": hm.model.config.get_config_value("Part"),
        "clock_period_ns": options.clock_period,
        "layers": hm.conversion.layer_names, "files": files,
        "vendor_tools_run": False,
        "golden_vs_hls_csim": result.to_json(),
    }
    timing = {"convert_write_s": round(convert_s, 3), "gxx_compile_s": round(lib.compile_seconds, 3),
              "csim_s": round(csim_s, 3), "golden_s": round(golden_s, 3)}
    return entry, timing


def check_result(entry: dict) -> None:
    """Raise :class:`VerificationFailed` when the C simulation disagreed with the golden model."""
    r = entry["golden_vs_hls_csim"]
    if r["mismatches"]:
        raise VerificationFailed(
            f"golden model and hls4ml's C simulation disagree on {r['mismatches']} of {r['vectors']} vectors; "
            f"first: {r.get('first_mismatch')}. This is a bitforge bug.")
