"""A Vivado project for the synthesis-only Xilinx targets, for users who have Vivado.

bitforge does not run Vivado: its numbers for these targets are yosys ``synth_xilinx`` estimates. The
project (``vivado/project.tcl``) reads the same Verilog, constrains the clock at the requested frequency and
runs synthesis, implementation and ``write_bitstream`` in batch mode.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from . import render_template
from .cache import write_atomic
from .targets import Target

FOLDER = "vivado"
SCRIPT = "project.tcl"
XDC = "constraints.xdc"
PRE_BITSTREAM = "pre_bitstream.tcl"


def write_vivado_project(work: Path, target: Target, top: str, sources: Sequence[str], clock_mhz: float,
                         clock_port: Optional[str]) -> dict[str, str]:
    """Write the project files into ``work/vivado``; ``sources`` are relative to ``work``.

    Returns the written files (relative to ``work``) by role, and the command that runs them.
    """
    assert target.vivado_part is not None, f"{target.name} has no Vivado part"
    folder = work / FOLDER
    values = dict(top=top, part=target.vivado_part, target=target.name)
    write_atomic(folder / XDC, render_template("vivado_constraints.xdc.j2", clock_port=clock_port,
                                               period_ns=1000.0 / clock_mhz, **values))
    write_atomic(folder / PRE_BITSTREAM, render_template("vivado_pre_bitstream.tcl.j2"))
    write_atomic(folder / SCRIPT, render_template(
        "vivado_project.tcl.j2", project=f"{top}_vivado", script_name=SCRIPT, xdc=XDC, pre_bitstream=PRE_BITSTREAM,
        sources=[str(Path("..") / s) for s in sources], **values))
    return {"project": f"{FOLDER}/{SCRIPT}", "constraints": f"{FOLDER}/{XDC}",
            "pre_bitstream": f"{FOLDER}/{PRE_BITSTREAM}", "run": f"cd {FOLDER} && vivado -mode batch -source {SCRIPT}"}
