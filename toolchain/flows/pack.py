"""Bitstream packing: icepack (iCE40), ecppack (ECP5), gowin_pack (apycula, Gowin)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .cache import StageCache, StageRun, run_stage, sha256_file, stage_key
from .targets import Target
from .tools import TOOLS, Progress, command_line, run_tool

LOG = "pack.log"


@dataclass
class PackResult:
    bitstream: str  # file name in the work folder
    sha256: str
    bytes: int
    run: StageRun


def pack_bitstream(work: Path, target: Target, placed: str, top: str, *, cache: StageCache,
                   progress: Progress) -> PackResult:
    flow = target.flow
    assert flow is not None, f"{target.name} makes no bitstream"
    bitstream = f"{top}{flow.bitstream_suffix}"
    args = [a.format(placed=placed, bitstream=bitstream) for a in flow.pack_args]
    key = stage_key({"stage": "pack", "target": target.name, "args": args, "placed": sha256_file(work / placed),
                     "packer": TOOLS[flow.packer].version()})
    label = f"{flow.packer} {placed} -> {bitstream}"

    def execute() -> tuple[list[str], dict, float]:
        run = run_tool(flow.packer, args, work, work / LOG, progress=progress, label=label)
        path = work / bitstream
        if not path.is_file() or path.stat().st_size == 0:
            raise RuntimeError(f"{flow.packer} exited 0 but wrote no bitstream {path}; see {work / LOG}")
        return [bitstream], {"sha256": sha256_file(path), "bytes": path.stat().st_size}, run.seconds

    result, run = run_stage(cache, "pack", key, execute, command=command_line(flow.packer, args), log=LOG,
                            label=label, progress=progress)
    return PackResult(bitstream, result["sha256"], result["bytes"], run)
