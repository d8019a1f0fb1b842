"""The vendor hand-off: a README in the written HLS project saying how to synthesise it and where the reports land.

bitforge runs hls4ml's C simulation with g++ and never Vivado or Vitis (they are not installed here): the README
states that plainly, so no one mistakes the project for a synthesised design.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["write_readme", "readme_text"]

_TOOL = {"vitis": ("Vitis HLS", "vitis_hls"), "vivado": ("Vivado HLS", "vivado_hls")}


def readme_text(hm) -> str:
    """The README of an :class:`~.project.HlsModel`'s project."""
    o = hm.options
    tool, exe = _TOOL[o.backend]
    name = o.project
    layers = "\n".join(f"| `{ir}` | {', '.join(f'`{h}`' for h in hls)} |"
                       for ir, hls in hm.conversion.layer_names.items())
    return f"""# {name}: HLS project for {tool} (written by bitforge through hls4ml)

Graph `{hm.graph.name}`, converted with hls4ml's Python API; every layer's weight, bias, accumulator and result type
is set explicitly to bitforge's fixed-point types, so this firmware computes the golden model's bits. bitforge
checked that with hls4ml's C simulation (g++ only); the numbers are in `../report.json` under
`verification.golden_vs_hls_csim`. **{tool} was not run by bitforge**: no synthesis, latency or resource
number in this folder comes from it.

Options: backend {o.backend}, io_{o.io}, strategy {o.strategy}, reuse factor {o.reuse}, part
`{o.part or "xcvu13p-flga2577-2-e"}`, clock period {o.clock_period} ns (per-layer overrides are in
`hls4ml_config.yml`).

## Synthesise it (with {tool} installed and on PATH)

```sh
cd hls
{exe} -f build_prj.tcl "reset=1 csim=1 synth=1 cosim=0 validation=0 export=0 vsynth=0"
```

`csim=1` runs the testbench `{name}_test.cpp` on `tb_data/tb_input_features.dat` and writes
`tb_data/csim_results.log`; `tb_data/tb_output_predictions.dat` holds the golden model's outputs for the same
inputs, so the two files must agree exactly. `synth=1` runs C synthesis; its reports land in
`{name}_prj/solution1/syn/report/{name}_csynth.rpt` (latency, II, resources: estimates of the HLS tool) and
`{name}_prj/solution1/syn/report/csynth.xml`. `cosim=1` adds RTL co-simulation, `vsynth=1` a Vivado
logic synthesis (`vivado_synth.tcl`, reports in `vivado_synth.rpt`). hls4ml's own readers parse them:
`python -c "import hls4ml; hls4ml.report.read_vivado_report('.')"`.

## Run the C simulation without a vendor tool

```sh
cd hls && ./build_lib.sh    # g++ -> firmware/{name}-bitforge.so, the library hls4ml's predict() loads
```

## Layers (bitforge IR node -> hls4ml layers)

| IR node | hls4ml layer(s) |
|---|---|
{layers}
"""


def write_readme(folder: Path, hm) -> None:
    (folder / "README.md").write_text(readme_text(hm))
