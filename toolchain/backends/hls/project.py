"""The HLS project: hls4ml's ModelGraph built from the IR, written to ``OUT/hls``, and its C simulation.

hls4ml's ``compile()`` builds its C-simulation library with g++ alone (no vendor tool), so the check that
matters, golden model vs firmware bit for bit, runs anywhere. The project is written twice: once into OUT/hls
for the user (normalised so that it holds no temporary path and no random stamp: same graph and options, same
bytes), and once into a scratch folder where g++ builds the library that ``predict`` calls.
"""
from __future__ import annotations

import contextlib
import io
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ...fixed import FixedType
from ...ir import Graph
from .convert import BACKEND_NAMES, Conversion, HlsError, HlsOptions, to_layer_list

__all__ = ["HlsModel", "build_model", "write_project", "CsimLibrary", "compile_csim", "csim_codes",
           "DEFAULT_PART", "STAMP"]

#: hls4ml's default part for Vivado/Vitis (a Virtex UltraScale+); --hls-config's Part overrides it.
DEFAULT_PART = "xcvu13p-flga2577-2-e"
#: The stamp of the written project's library name: fixed, so that the files are reproducible.
STAMP = "bitforge"


@dataclass
class HlsModel:
    """hls4ml's model of a graph, with the conversion it came from."""

    graph: Graph
    options: HlsOptions
    conversion: Conversion
    model: object  # hls4ml.model.ModelGraph
    log: str


def _hls4ml():
    try:
        import hls4ml  # noqa: F401 - a missing install is reported here, by name
    except ImportError as e:
        raise HlsError(f"the HLS backend needs hls4ml ({e}); pip install 'hls4ml==1.3.0'") from None
    from hls4ml.converters import create_config
    from hls4ml.model import ModelGraph
    return create_config, ModelGraph


def build_model(g: Graph, options: HlsOptions, output_dir: Path, tb_data: Optional[tuple[Path, Path]] = None
                ) -> HlsModel:
    """Convert ``g`` and let hls4ml run its optimizer flows; then check that every type hls4ml kept is the one
    the IR asked for (an hls4ml pass that re-typed a layer would make the C simulation differ)."""
    create_config, ModelGraph = _hls4ml()
    conversion = to_layer_list(g, options)
    if conversion.extensions:
        from .extensions import register_extensions
        register_extensions()
    extra = {} if tb_data is None else {"input_data_tb": str(tb_data[0]), "output_data_tb": str(tb_data[1])}
    config = create_config(output_dir=str(output_dir), project_name=options.project,
                           backend=BACKEND_NAMES[options.backend], io_type=f"io_{options.io}",
                           part=options.part or DEFAULT_PART, clock_period=options.clock_period)
    config.update({"InputData": extra.get("input_data_tb"), "OutputPredictions": extra.get("output_data_tb")})
    config["HLSConfig"] = {"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": options.reuse,
                                     "Strategy": options.strategy.capitalize()},
                           "LayerName": conversion.layer_config}
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            model = ModelGraph.from_layer_list(config, conversion.layers, inputs=[conversion.input_layer],
                                               outputs=[conversion.output_layer])
    except HlsError:
        raise
    except Exception as e:  # noqa: BLE001 - hls4ml's own exceptions are plain; say which model and why
        raise HlsError(f"graph '{g.name}': hls4ml could not build the model: {type(e).__name__}: {e}") from e
    _check_types(g, conversion, model)
    return HlsModel(g, options, conversion, model, log.getvalue())


def _check_types(g: Graph, conversion: Conversion, model) -> None:
    """Every precision bitforge set must have survived hls4ml's flows unchanged."""
    from hls4ml.model.types import FixedPrecisionType, IntegerPrecisionType

    def same(p, want: FixedType) -> bool:
        if isinstance(p, (FixedPrecisionType, IntegerPrecisionType)):
            integer = p.width if isinstance(p, IntegerPrecisionType) else p.integer
            rounding = getattr(p, "rounding_mode", None)
            saturation = getattr(p, "saturation_mode", None)
            r = getattr(rounding, "name", "TRN") if rounding is not None else "TRN"
            s = getattr(saturation, "name", "WRAP") if saturation is not None else "WRAP"
            return (p.width, integer, bool(p.signed), r, s) == (want.width, want.integer, want.signed,
                                                                  want.rounding.value, want.overflow.value)
        return False

    by_name = {layer.name: layer for layer in model.get_layers()}
    for name, entry in conversion.layer_config.items():
        layer = by_name.get(name)
        if layer is None:  # removed by hls4ml (a cast to the same type, a Transpose pair): nothing to compute
            continue
        for key, text in entry["Precision"].items():
            var = layer.get_output_variable() if key == "result" else layer.weights.get(key)
            if var is None:
                var_type = layer.types.get(f"{key}_t")
                precision = var_type.precision if var_type is not None else None
            else:
                precision = var.type.precision
            from ...fixed import parse_type
            if precision is None or not same(precision, parse_type(text)):
                raise HlsError(f"layer '{name}': hls4ml turned its {key} type {text} into {precision}; its C "
                               "simulation would round differently from the golden model. This is a bitforge "
                               "bug (the converter must set what hls4ml keeps)")


def write_project(hm: HlsModel, folder: Path) -> list[str]:
    """hls4ml's project files into ``folder`` plus bitforge's README; returns the files, relative and sorted.

    The copy in ``folder`` is normalised: hls4ml records its output folder (here a temporary one) and a random
    library stamp; both are replaced, so the same graph and options give the same bytes."""
    model = hm.model
    scratch = Path(model.config.get_output_dir())
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        model.write()
    stamp = model.config.get_config_value("Stamp")
    replace = {str(scratch): ".", str(stamp): STAMP}
    for key, dat in (("InputData", "tb_input_features.dat"), ("OutputPredictions", "tb_output_predictions.dat")):
        path = model.config.get_config_value(key)
        if path:  # the .npy hls4ml converted into tb_data/ lies in a temporary folder
            replace[str(path)] = f"tb_data/{dat}"
    folder.mkdir(parents=True, exist_ok=True)
    for src in sorted(scratch.rglob("*")):
        if src.is_dir() or src.suffix in (".so", ".o"):
            continue
        dst = folder / src.relative_to(scratch)
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes()
        try:
            text = data.decode()
        except UnicodeDecodeError:
            dst.write_bytes(data)
            continue
        for old, new in replace.items():
            text = text.replace(old, new)
        dst.write_text(text)
        dst.chmod(src.stat().st_mode)
    from .handoff import write_readme
    write_readme(folder, hm)
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@dataclass
class CsimLibrary:
    """The compiled C-simulation library of a model and what the build cost."""

    hm: HlsModel
    compile_seconds: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Float inputs (the graph input's values, per sample flattened) -> float64 outputs."""
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(len(x), -1))
        y = self.hm.model.predict(x)
        return np.asarray(y, dtype=np.float64).reshape(len(x), -1)


def compile_csim(hm: HlsModel) -> CsimLibrary:
    """Build the C-simulation library (g++ only) in the model's own (scratch) output folder."""
    from .gxx import require_gxx
    require_gxx("g++")  # hls4ml's build_lib.sh calls g++ by name, whatever $CXX says
    log = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            hm.model.compile()
    except Exception as e:  # noqa: BLE001 - hls4ml raises a bare Exception with g++'s output printed
        raise HlsError(f"graph '{hm.graph.name}': g++ could not build hls4ml's C simulation: {e}\n"
                       f"{log.getvalue()[-3000:]}") from e
    return CsimLibrary(hm, time.perf_counter() - t0)


def csim_codes(lib: CsimLibrary, x: np.ndarray) -> np.ndarray:
    """The C simulation's outputs as integer codes of the graph's output type (exact: every ap_fixed value of up
    to 53 bits is a float64)."""
    g = lib.hm.graph
    out = g.tensors[g.outputs[0]].dtype
    if out.width > 53:
        raise HlsError(f"graph '{g.name}': output type {out} is wider than a double's 53 bits; hls4ml's predict "
                       "returns doubles, so its C simulation cannot be compared exactly")
    y = lib.predict(x)
    codes = np.ldexp(y, out.frac)
    if not np.array_equal(codes, np.rint(codes)):
        raise HlsError(f"graph '{g.name}': hls4ml's outputs are not codes of {out}: the C simulation's output "
                       "type differs from the graph's (a bitforge bug)")
    return np.rint(codes).astype(np.int64).reshape((len(x), *g.tensors[g.outputs[0]].shape))


@contextlib.contextmanager
def scratch_model(g: Graph, options: HlsOptions, tb_data: Optional[tuple[Path, Path]] = None):
    """An :class:`HlsModel` whose hls4ml output folder is a temporary one, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bitforge-hls-") as tmp:
        yield build_model(g, options, Path(tmp) / "prj", tb_data)
