"""Every kind of malformed input, command by command: exit status 2, one message that names the file or option
(and says what to do), no traceback, and nothing written: no output folder or file appears, and every file that
existed (a compiled folder a command reads, the inputs) is left byte for byte.

Each case fails before any heavy work (no training, no synthesis, no model download): the compiled folders it
needs are built once per session and copied into the case's own folder, which is also the working directory, so
a default output path (``out/...``) would show up in the before/after comparison too.
"""
from __future__ import annotations

import hashlib
import io
import json
import shlex
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest

from bitforge.toolchain.cli import main
from qonnx_builders import float_mlp


# -- fixtures: built once ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``kt``: kan-tracker compiled to ONNX and RTL (a folder every reading command accepts); ``kt.bfb``: its
    simulated-board bundle; ``pt2``: a clean torch.export archive of a float MLP."""
    import torch
    from torch import nn

    root = tmp_path_factory.mktemp("built")
    assert main(["compile", "kan-tracker", "-o", str(root / "kt"), "--to", "onnx", "--to", "rtl",
                 "--vectors", "200"]) == 0
    assert main(["deploy", str(root / "kt"), "-o", str(root / "kt.bfb")]) == 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), str(root / "m.pt2"))
    return root


# -- what a case does to its folder before the command runs ---------------------------------------------------

Setup = Callable[[Path], None]


def write(name: str, data) -> Setup:
    def setup(tmp: Path) -> None:
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return setup


def npy(name: str, array) -> Setup:
    def setup(tmp: Path) -> None:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=True)
        (tmp / name).write_bytes(buf.getvalue())
    return setup


def onnx_file(name: str, **kw) -> Setup:
    return lambda tmp: float_mlp(tmp / name, **kw) and None


def edit_json(rel: str, edit: Callable) -> Setup:
    """Change the JSON file ``rel`` (e.g. ``kt/model.json``); ``edit`` returns the new document or changes it."""
    def setup(tmp: Path) -> None:
        p = tmp / rel
        doc = json.loads(p.read_text())
        new = edit(doc)
        p.write_text(json.dumps(doc if new is None else new))
    return setup


def remove(rel: str) -> Setup:
    def setup(tmp: Path) -> None:
        p = tmp / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return setup


def truncate(rel: str) -> Setup:
    def setup(tmp: Path) -> None:
        p = tmp / rel
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return setup


def pt2_member(rel: str, change: Callable[[bytes], bytes], name: str = "bad.pt2") -> Setup:
    """A copy of the clean archive with one member changed."""
    def setup(tmp: Path) -> None:
        with zipfile.ZipFile(tmp / "m.pt2") as zin, zipfile.ZipFile(tmp / name, "w") as zout:
            for info in zin.infolist():
                data = zin.read(info)
                zout.writestr(info, change(data) if info.filename.split("/", 1)[1] == rel else data)
    return setup


class _Payload:
    def __reduce__(self):
        return (open, ("ran", "w"))  # relative: inside the case folder, where the snapshot would see it


def _pickled_sample(_: bytes) -> bytes:
    import torch
    buf = io.BytesIO()
    torch.save(((_Payload(),), {}), buf)
    return buf.getvalue()


def node(i: int, **change) -> Callable:
    def edit(doc):
        doc["nodes"][i].update(change)
    return edit


def drop(key: str) -> Callable:
    def edit(doc):
        doc.pop(key)
    return edit


def both(*setups: Setup) -> Setup:
    def setup(tmp: Path) -> None:
        for s in setups:
            s(tmp)
    return setup


# -- the table ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bad:
    """One malformed command line: ``argv`` (shell syntax; {out} is a fresh path, {kt} a compiled folder, {m.pt2}
    a clean archive) and the words its message must contain."""

    argv: str
    says: tuple[str, ...]
    setup: Optional[Setup] = None


def bad(argv: str, *says: str, setup: Optional[Setup] = None) -> Bad:
    return Bad(argv, says, setup)


KT = "{kt}"
MJ = "kt/model.json"
MAN = "kt/rtl/manifest.json"
REPORT = "kt/report.json"
ONNX = "m.onnx"
X = npy("x.npy", np.zeros((8, 1)))
BIG = "100000000000"

CASES = {
    # -- compile: the model ---------------------------------------------------------------------------------
    "compile missing file": bad("compile nope.onnx -o {out}", "nope.onnx", "no such file"),
    "compile unknown recipe": bad("compile jet-mpl -o {out}", "jet-mpl", "jet-mlp", "kan-tracker"),
    "compile unknown extension": bad("compile m.txt -o {out}", "m.txt", ".onnx", setup=write("m.txt", "x")),
    "compile corrupt onnx": bad("compile bad.onnx -o {out}", "bad.onnx", setup=write("bad.onnx", b"\x08\x07junk" * 9)),
    "compile empty onnx": bad("compile empty.onnx -o {out}", "empty.onnx", setup=write("empty.onnx", b"")),
    "compile truncated onnx": bad("compile m.onnx -o {out}", "m.onnx", setup=both(onnx_file(ONNX), truncate(ONNX))),
    "compile unsupported op": bad("compile m.onnx -o {out}", "act1", "Sin", setup=onnx_file(ONNX, op2="Sin")),
    "compile shape mismatch": bad("compile m.onnx -o {out}", "mm1",
                                  setup=onnx_file(ONNX, w1=np.ones((5, 3), np.float32))),
    "compile nan weights": bad("compile m.onnx -o {out}", "w1", "NaN", setup=onnx_file(ONNX, nan=True)),
    "compile junk pt2": bad("compile junk.pt2 -o {out}", "junk.pt2", "not a zip file",
                            setup=write("junk.pt2", b"not a zip")),
    "compile truncated pt2": bad("compile m.pt2 -o {out}", "m.pt2", setup=truncate("m.pt2")),
    "compile pt2 pickled sample inputs": bad("compile bad.pt2 -o {out}", "bad.pt2", "data/sample_inputs/model.pt",
                                             "refused", setup=pt2_member("data/sample_inputs/model.pt",
                                                                         _pickled_sample)),
    "compile pt2 corrupt program": bad("compile bad.pt2 -o {out}", "bad.pt2", "models/model.json",
                                       setup=pt2_member("models/model.json", lambda d: d[:100])),
    "compile folder that is no output": bad("compile empty -o {out}", "model.json",
                                            setup=lambda t: (t / "empty").mkdir()),
    "compile output folder with broken model.json": bad("compile {kt} -o {out}", "model.json",
                                                        setup=edit_json(MJ, lambda d: [d])),
    # -- compile: options ------------------------------------------------------------------------------------
    "compile precision bad item": bad("compile m.onnx -o {out} --precision w8q3", "w8q3", setup=onnx_file(ONNX)),
    "compile precision empty": bad("compile m.onnx -o {out} --precision ''", "precision", "empty",
                                   setup=onnx_file(ONNX)),
    "compile precision width 1": bad("compile m.onnx -o {out} --precision w1a16", "width 1", setup=onnx_file(ONNX)),
    "compile precision width 64": bad("compile m.onnx -o {out} --precision w64a16", "64", setup=onnx_file(ONNX)),
    "compile precision bad type": bad("compile m.onnx -o {out} --precision 'weight=fixed<0,0>,act=8'", "fixed<0,0>",
                                      setup=onnx_file(ONNX)),
    "compile precision no act": bad("compile m.onnx -o {out} --precision weight=8", "activation",
                                    setup=onnx_file(ONNX)),
    "compile precision unknown node": bad("compile m.onnx -o {out} --input-range=-1,1 --precision w8a16,fc9.weight=4",
                                          "fc9", setup=onnx_file(ONNX)),
    "compile precision twice": bad("compile m.onnx -o {out} --precision 8,w8a16", "twice", setup=onnx_file(ONNX)),
    "compile precision accum width": bad("compile m.onnx -o {out} --precision 8,accum=16", "accum=16", "TYPE",
                                         setup=onnx_file(ONNX)),
    "compile precision auto act": bad("compile m.onnx -o {out} --precision w8a8,act=auto", "act=auto",
                                      "accumulators only", setup=onnx_file(ONNX)),
    "compile precision two bare types": bad("compile m.onnx -o {out} --precision 'ap_fixed<16,6>,ap_fixed<8,3>'",
                                            "ap_fixed<8,3>", "twice", setup=onnx_file(ONNX)),
    "compile precision without range": bad("compile m.onnx -o {out} --precision w8a16", "--input-range",
                                           setup=onnx_file(ONNX)),
    "compile type too narrow": bad("compile m.onnx -o {out} --input-range=-2,2 --precision "
                                   "'weight=fixed<4,1,RND_CONV,WRAP>,act=fixed<16,6,RND_CONV,SAT>'",
                                   "fixed<4,1", "too narrow", "mm1",
                                   setup=onnx_file(ONNX, w1=np.full((4, 3), 3.0, np.float32))),
    # -- compile --to hls: hls4ml's options and the HLSConfig (each fails before any g++ build) ----------------
    "compile hls backend unknown": bad("compile jet-mlp -o {out} --to hls --backend quartus", "--backend",
                                       "vitis", "vivado"),
    "compile hls io unknown": bad("compile jet-mlp -o {out} --to hls --io axi", "--io", "parallel", "stream"),
    "compile hls strategy unknown": bad("compile jet-mlp -o {out} --to hls --strategy fast", "--strategy",
                                        "latency", "resource"),
    "compile hls option without hls": bad("compile jet-mlp -o {out} --io stream", "only apply to the HLS backend",
                                          "--to hls"),
    "compile hls reuse zero": bad("compile jet-mlp -o {out} --to hls --reuse 0", "--reuse"),
    "compile hls config missing": bad("compile jet-mlp -o {out} --to hls --hls-config nope.yml", "nope.yml"),
    "compile hls config suffix": bad("compile jet-mlp -o {out} --to hls --hls-config c.txt", "c.txt", ".yml",
                                     setup=write("c.txt", "Model: {}")),
    "compile hls config broken yaml": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                          setup=write("c.yml", "Model: [unclosed")),
    "compile hls config precision key": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                            "LayerName.dense_1.Precision.mantissa", setup=write(
                                                "c.yml", "Model: {Precision: 'ap_fixed<16,6>'}\nLayerName:\n"
                                                         "  dense_1:\n    Precision: {mantissa: 'ap_fixed<18,8>'}\n")),
    "compile hls config layer type relu": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                              "LayerType.ReLU", "Activation", setup=write(
                                                  "c.yml", "Model: {Precision: 'ap_fixed<16,6>'}\nLayerType:\n"
                                                           "  ReLU: {Precision: 'ap_fixed<8,3>'}\n")),
    "compile hls config reuse zero": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                         "Model.ReuseFactor", setup=write(
                                             "c.yml", "Model: {Precision: 'ap_fixed<16,6>', ReuseFactor: 0}\n")),
    "compile hls config strategy": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                       "Model.Strategy", "Fast", setup=write(
                                           "c.yml", "Model: {Precision: 'ap_fixed<16,6>', Strategy: Fast}\n")),
    "compile hls config unknown layer": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                            "LayerName.fc9", "dense_1", setup=write(
                                                "c.yml", "Model: {Precision: 'ap_fixed<16,6>'}\nLayerName:\n"
                                                         "  fc9: {Precision: 'ap_fixed<8,3>'}\n")),
    "compile hls config unknown key": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml", "c.yml",
                                          "Model.Compression", setup=write(
                                              "c.yml", "Model: {Precision: 'ap_fixed<16,6>', Compression: true}\n")),
    "compile hls config and precision": bad("compile jet-mlp -o {out} --to hls --hls-config c.yml --precision 8",
                                            "--hls-config and --precision",
                                            setup=write("c.yml", "Model: {Precision: 'ap_fixed<16,6>'}\n")),
    "compile hls float model": bad("compile m.onnx -o {out} --to hls", "--precision SPEC or --hls-config",
                                   setup=onnx_file(ONNX)),
    # -- export --format gguf: a compressed checkpoint for llama.cpp ----------------------------------------------
    "export no checkpoint": bad("export nowhere --format gguf -o m.gguf", "nowhere", "manifest.json"),
    "export unknown format": bad("export ck --format onnx -o m.gguf", "argument --format", "invalid choice"),
    "export without output": bad("export ck --format gguf", "the following arguments are required: -o"),
    "export manifest not json": bad("export ck --format gguf -o m.gguf", "ck/manifest.json",
                                    setup=write("ck/manifest.json", "{")),
    "compile range reversed": bad("compile jet-mlp -o {out} --input-range=2,1", "argument --input-range", "LO < HI"),
    "compile range words": bad("compile jet-mlp -o {out} --input-range=a,b", "argument --input-range"),
    "compile range one number": bad("compile jet-mlp -o {out} --input-range=1", "argument --input-range"),
    "compile range nan": bad("compile jet-mlp -o {out} --input-range=nan,1", "argument --input-range", "finite"),
    "compile range infinite": bad("compile jet-mlp -o {out} --input-range=-inf,inf", "argument --input-range",
                                  "finite"),
    "compile range three numbers": bad("compile jet-mlp -o {out} --input-range=1,2,3", "argument --input-range"),
    "compile vectors 0": bad("compile jet-mlp -o {out} --vectors 0", "argument --vectors", "from 1"),
    "compile vectors negative": bad("compile jet-mlp -o {out} --vectors -5", "argument --vectors"),
    "compile vectors word": bad("compile jet-mlp -o {out} --vectors x", "argument --vectors", "whole number"),
    "compile vectors 1e11": bad("compile jet-mlp -o {out} --vectors 1e11", "argument --vectors", "whole number"),
    "compile vectors past the memory cap": bad(f"compile jet-mlp -o {{out}} --vectors {BIG}", "argument --vectors",
                                               "1,000,000", "memory"),
    "compile vectors fraction": bad("compile jet-mlp -o {out} --vectors 2.5", "argument --vectors"),
    "compile seed negative": bad("compile jet-mlp -o {out} --seed -1", "argument --seed", "4,294,967,295"),
    "compile seed 2**32": bad("compile jet-mlp -o {out} --seed 4294967296", "argument --seed", "32-bit"),
    "compile seed 2**70": bad(f"compile jet-mlp -o {{out}} --seed {2**70}", "argument --seed"),
    "compile seed word": bad("compile jet-mlp -o {out} --seed x", "argument --seed"),
    "compile unknown backend": bad("compile jet-mlp -o {out} --to vhdl", "argument --to", "vhdl"),
    "compile target without rtl": bad("compile jet-mlp -o {out} --target foo", "--target", "--to rtl"),
    "compile reuse without rtl": bad("compile jet-mlp -o {out} --reuse 4", "--reuse", "--to rtl"),
    "compile unknown target": bad("compile jet-mlp -o {out} --to rtl --target foo", "'foo'", "ecp5-85f"),
    "compile reuse 0": bad("compile jet-mlp -o {out} --to rtl --reuse 0", "argument --reuse"),
    "compile reuse word": bad("compile jet-mlp -o {out} --to rtl --reuse x", "argument --reuse"),
    "compile reuse auto without target": bad("compile jet-mlp -o {out} --to rtl --reuse auto", "--reuse auto",
                                             "--target"),
    "compile no output": bad("compile jet-mlp", "-o/--output"),
    "compile no model": bad("compile -o {out}", "MODEL"),
    "compile unknown option": bad("compile jet-mlp -o {out} --frobnicate", "--frobnicate"),
    "compile calibration missing": bad("compile m.onnx -o {out} --precision 8 --calibration gone.npy", "gone.npy",
                                       "no such file", setup=onnx_file(ONNX)),
    "compile calibration pickled": bad("compile m.onnx -o {out} --precision 8 --calibration x.npy", "x.npy",
                                       setup=both(onnx_file(ONNX), npy("x.npy", np.array([{"a": 1}], dtype=object)))),
    "compile calibration wrong shape": bad("compile m.onnx -o {out} --precision 8 --calibration x.npy", "x.npy",
                                           "shape", setup=both(onnx_file(ONNX), npy("x.npy", np.zeros((8, 3))))),
    "compile calibration nan": bad("compile m.onnx -o {out} --precision 8 --calibration x.npy", "x.npy", "NaN",
                                   setup=both(onnx_file(ONNX), npy("x.npy", np.array([[0.0, np.nan, 0.0, 0.0]])))),
    "compile calibration float model": bad("compile m.onnx -o {out} --calibration x.npy", "--calibration",
                                           "--precision", setup=both(onnx_file(ONNX), npy("x.npy", np.zeros((8, 4))))),
    "compile trace 0": bad("compile jet-mlp -o {out} --trace 0", "argument --trace", "from 1"),
    "compile trace word": bad("compile jet-mlp -o {out} --trace x", "argument --trace", "whole number"),
    "compile trace past the cap": bad(f"compile jet-mlp -o {{out}} --trace {BIG}", "argument --trace", "1,000,000"),
    "compile softmax choice": bad("compile jet-mlp -o {out} --softmax max", "argument --softmax", "argmax"),
    "compile softmax argmax without softmax": bad("compile jet-mlp -o {out} --softmax argmax", "--softmax argmax",
                                                  "Softmax", "outputs are"),
    "compile trace float model": bad("compile m.onnx -o {out} --trace 3", "--trace", "--precision",
                                     setup=onnx_file(ONNX)),
    "compile multiplier bits 15": bad("compile jet-mlp -o {out} --multiplier-bits 15", "argument --multiplier-bits",
                                      "from 16 to 32"),
    "compile multiplier bits 33": bad("compile jet-mlp -o {out} --multiplier-bits 33", "argument --multiplier-bits",
                                      "from 16 to 32"),
    "compile multiplier bits word": bad("compile jet-mlp -o {out} --multiplier-bits x", "argument --multiplier-bits",
                                        "whole number"),
    "compile strict with a value": bad("compile jet-mlp -o {out} --strict=yes", "argument --strict",
                                       "explicit argument"),
    # -- compile: where it writes (toolchain/outputs.py) -------------------------------------------------------
    "compile output empty": bad("compile jet-mlp -o ''", "empty"),
    "compile output is a file": bad("compile jet-mlp -o afile", "afile", "file", setup=write("afile", "x")),
    "compile output under a file": bad("compile jet-mlp -o afile/out", "afile", "file", setup=write("afile", "x")),
    "compile output foreign folder": bad("compile jet-mlp -o mine", "mine", "--force", setup=write("mine/keep", "x")),
    "compile output current folder": bad("compile jet-mlp -o .", "current folder"),
    "compile output parent folder": bad("compile jet-mlp -o ..", ".."),
    "compile output root": bad("compile jet-mlp -o /", "/"),
    "compile output holds the input": bad("compile inputs/m.onnx -o inputs", "inputs", "input",
                                          setup=both(lambda t: (t / "inputs").mkdir(), onnx_file("inputs/m.onnx"))),
    # -- inspect ---------------------------------------------------------------------------------------------
    "inspect missing file": bad("inspect nope.onnx", "nope.onnx", "no such file"),
    "inspect unknown recipe": bad("inspect jet-mpl", "jet-mpl", "jet-mlp"),
    "inspect corrupt onnx": bad("inspect bad.onnx", "bad.onnx", setup=write("bad.onnx", b"\x08\x07junk" * 9)),
    "inspect pt2 pickled sample inputs": bad("inspect bad.pt2", "data/sample_inputs/model.pt", "refused",
                                             setup=pt2_member("data/sample_inputs/model.pt", _pickled_sample)),
    "inspect pt2 not an archive": bad("inspect junk.pt2", "junk.pt2", setup=write("junk.pt2", b"PK\x03\x04junk")),
    "inspect model.json list": bad(f"inspect {KT}", "model.json", "JSON object", setup=edit_json(MJ, lambda d: [d])),
    "inspect model.json not json": bad(f"inspect {KT}", "model.json", "not valid JSON", setup=write(MJ, "{")),
    "inspect model.json binary": bad(f"inspect {KT}", "model.json", setup=write(MJ, b"\xff\xfe\x00garbage")),
    "inspect model.json dangling tensor": bad(f"inspect {KT}", "model.json", "ghost",
                                              setup=edit_json(MJ, node(1, inputs=["ghost"]))),
    "inspect model.json no nodes": bad(f"inspect {KT}", "model.json", "nodes",
                                       setup=edit_json(MJ, drop("nodes"))),
    "inspect model.json unknown op": bad(f"inspect {KT}", "model.json", "Conv9", setup=edit_json(MJ, node(1, op="Conv9"))),
    "inspect model.json bad type": bad(f"inspect {KT}", "model.json", "fixed<99",
                                       setup=edit_json(MJ, lambda d: d["tensors"][1].update(dtype="fixed<99"))),
    "inspect model.json wrong format": bad(f"inspect {KT}", "model.json", "format",
                                           setup=edit_json(MJ, lambda d: d.update(format="other"))),
    "inspect model.json future version": bad(f"inspect {KT}", "model.json", "version",
                                             setup=edit_json(MJ, lambda d: d.update(version=99))),
    "inspect model.json attribute wrong type": bad(f"inspect {KT}", "model.json",
                                                   setup=edit_json(MJ, lambda d: d["nodes"][1]["attributes"].update(
                                                       grid_size="x"))),
    "inspect model.json unknown attribute": bad(f"inspect {KT}", "model.json", "colour",
                                                setup=edit_json(MJ, lambda d: d["nodes"][1]["attributes"].update(
                                                    colour=1))),
    "inspect model.json missing array": bad(f"inspect {KT}", "model.json", "weights.safetensors",
                                            setup=edit_json(MJ, lambda d: d["nodes"][1]["arrays"].update(
                                                coeffs="nowhere"))),
    "inspect model.json duplicate output": bad(f"inspect {KT}", "model.json", "already produced",
                                               setup=edit_json(MJ, node(1, outputs=["quantize_0"]))),
    "inspect weights truncated": bad(f"inspect {KT}", "weights.safetensors", setup=truncate("kt/weights.safetensors")),
    "inspect weights missing": bad(f"inspect {KT}", "weights.safetensors", "missing",
                                   setup=remove("kt/weights.safetensors")),
    "inspect report.json not json": bad(f"inspect {KT}", "report.json", "not valid JSON", setup=write(REPORT, "{")),
    "inspect report.json list": bad(f"inspect {KT}", "report.json", "JSON object", setup=write(REPORT, "[]")),
    "inspect report.json bad verification": bad(f"inspect {KT}", "report.json", "verification",
                                                setup=edit_json(REPORT, lambda d: d.update(
                                                    verification={"golden_vs_onnxruntime": {}}))),
    "inspect unknown option": bad("inspect jet-mlp --frobnicate", "--frobnicate"),
    # -- emulate ---------------------------------------------------------------------------------------------
    "emulate missing folder": bad("emulate nope --input x.npy -o y.npy", "nope", setup=X),
    "emulate missing input": bad(f"emulate {KT} --input gone.npy -o y.npy", "gone.npy", "no such file"),
    "emulate input not npy": bad(f"emulate {KT} --input x.txt -o y.npy", "x.txt", "numpy.save",
                                 setup=write("x.txt", "1 2 3")),
    "emulate input truncated": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy", "numpy.save",
                                   setup=both(X, truncate("x.npy"))),
    "emulate input pickled": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy",
                                 setup=npy("x.npy", np.array([{"a": 1}], dtype=object))),
    "emulate input wrong width": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy", "shape",
                                     setup=npy("x.npy", np.zeros((8, 3)))),
    "emulate input 3-d": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy", "shape",
                             setup=npy("x.npy", np.zeros((2, 8, 1)))),
    "emulate input strings": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy",
                                 setup=npy("x.npy", np.array([["a"], ["b"]]))),
    "emulate input complex": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy",
                                 setup=npy("x.npy", np.ones((2, 1), dtype=complex))),
    "emulate input nan": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy", "NaN",
                             setup=npy("x.npy", np.array([[0.5], [np.nan]]))),
    "emulate input inf": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy", "Inf",
                             setup=npy("x.npy", np.array([[0.5], [np.inf]]))),
    "emulate input beyond float32": bad(f"emulate {KT} --input x.npy -o y.npy", "x.npy", "1e+300", "float32",
                                        setup=npy("x.npy", np.array([[0.5], [1e300]]))),
    "emulate model.json list": bad(f"emulate {KT} --input x.npy -o y.npy", "model.json",
                                   setup=both(X, edit_json(MJ, lambda d: [d]))),
    "emulate model.json dangling tensor": bad(f"emulate {KT} --input x.npy -o y.npy", "model.json", "ghost",
                                              setup=both(X, edit_json(MJ, node(1, inputs=["ghost"])))),
    "emulate weights truncated": bad(f"emulate {KT} --input x.npy -o y.npy", "weights.safetensors",
                                     setup=both(X, truncate("kt/weights.safetensors"))),
    "emulate output under a file": bad(f"emulate {KT} --input x.npy -o afile/y.npy", "afile",
                                       setup=both(X, write("afile", "x"))),
    "emulate no input option": bad(f"emulate {KT} -o y.npy", "--input"),
    # -- simulate ------------------------------------------------------------------------------------------------
    "simulate vectors 0": bad(f"simulate {KT} --vectors 0", "argument --vectors"),
    "simulate vectors negative": bad(f"simulate {KT} --vectors -1", "argument --vectors"),
    "simulate vectors word": bad(f"simulate {KT} --vectors x", "argument --vectors"),
    "simulate vectors past the cap": bad(f"simulate {KT} --vectors {BIG}", "argument --vectors", "1,000,000"),
    "simulate seed negative": bad(f"simulate {KT} --seed -1", "argument --seed"),
    "simulate unknown simulator": bad(f"simulate {KT} --simulator modelsim", "argument --simulator", "modelsim"),
    "simulate missing folder": bad("simulate nope", "nope"),
    "simulate no rtl": bad(f"simulate {KT}", "manifest.json", "--to rtl", setup=remove("kt/rtl")),
    "simulate manifest not json": bad(f"simulate {KT}", "manifest.json", "not valid JSON", setup=write(MAN, "{")),
    "simulate manifest list": bad(f"simulate {KT}", "manifest.json", "JSON object", setup=write(MAN, "[1]")),
    "simulate manifest without files": bad(f"simulate {KT}", "manifest.json", "'files'",
                                           setup=edit_json(MAN, drop("files"))),
    "simulate manifest ii word": bad(f"simulate {KT}", "manifest.json", "'ii'",
                                     setup=edit_json(MAN, lambda d: d.update(ii="x"))),
    "simulate deleted verilog": bad(f"simulate {KT}", "manifest.json", "kan_tracker.v",
                                    setup=remove("kt/rtl/kan_tracker.v")),
    "simulate manifest wrong tensor": bad(f"simulate {KT}", "manifest.json", "input_tensor", "ghost",
                                          setup=edit_json(MAN, lambda d: d.update(input_tensor="ghost"))),
    "simulate report.json not json": bad(f"simulate {KT}", "report.json", "not valid JSON", setup=write(REPORT, "{")),
    "simulate report.json list": bad(f"simulate {KT}", "report.json", "JSON object", setup=write(REPORT, "[]")),
    "simulate model.json list": bad(f"simulate {KT}", "model.json", setup=edit_json(MJ, lambda d: [d])),
    "simulate model.json dangling tensor": bad(f"simulate {KT}", "model.json", "ghost",
                                               setup=edit_json(MJ, node(1, inputs=["ghost"]))),
    # -- implement ---------------------------------------------------------------------------------------------
    "implement no target": bad(f"implement {KT}", "--target"),
    "implement unknown target": bad(f"implement {KT} --target foo", "'foo'", "ice40-up5k"),
    "implement clock 0": bad(f"implement {KT} --target ice40-up5k --clock 0", "argument --clock", "> 0"),
    "implement clock negative": bad(f"implement {KT} --target ice40-up5k --clock -5", "argument --clock"),
    "implement clock nan": bad(f"implement {KT} --target ice40-up5k --clock nan", "argument --clock", "finite"),
    "implement clock word": bad(f"implement {KT} --target ice40-up5k --clock fast", "argument --clock"),
    "implement seed negative": bad(f"implement {KT} --target ice40-up5k --seed -1", "argument --seed"),
    "implement missing folder": bad("implement nope --target ice40-up5k", "nope"),
    "implement no rtl": bad(f"implement {KT} --target ice40-up5k", "manifest.json", "--to rtl",
                            setup=remove("kt/rtl")),
    "implement manifest not json": bad(f"implement {KT} --target ice40-up5k", "manifest.json", "not valid JSON",
                                       setup=write(MAN, "{")),
    "implement manifest list": bad(f"implement {KT} --target ice40-up5k", "manifest.json", "JSON object",
                                   setup=write(MAN, "[]")),
    "implement manifest latency word": bad(f"implement {KT} --target ice40-up5k", "manifest.json", "latency_cycles",
                                           setup=edit_json(MAN, lambda d: d.update(latency_cycles="x"))),
    "implement deleted verilog": bad(f"implement {KT} --target ice40-up5k", "manifest.json", "kan_tracker.v",
                                     setup=remove("kt/rtl/kan_tracker.v")),
    "implement report.json not json": bad(f"implement {KT} --target ice40-up5k", "report.json", "not valid JSON",
                                          setup=write(REPORT, "{")),
    # -- flow ------------------------------------------------------------------------------------------------------
    "flow no target": bad("flow jet-mlp -o {out}", "--target"),
    "flow unknown target": bad("flow jet-mlp --target foo -o {out}", "'foo'", "ecp5-85f"),
    "flow vectors 0": bad("flow jet-mlp --target ecp5-85f -o {out} --vectors 0", "argument --vectors"),
    "flow multiplier bits 40": bad("flow jet-mlp --target ecp5-85f -o {out} --multiplier-bits 40",
                                   "argument --multiplier-bits", "from 16 to 32"),
    "flow strict with a value": bad("flow jet-mlp --target ecp5-85f -o {out} --strict=1", "argument --strict"),
    "flow sim-vectors 0": bad("flow jet-mlp --target ecp5-85f -o {out} --sim-vectors 0", "argument --sim-vectors"),
    "flow sim-vectors word": bad("flow jet-mlp --target ecp5-85f -o {out} --sim-vectors x", "argument --sim-vectors"),
    "flow seed negative": bad("flow jet-mlp --target ecp5-85f -o {out} --seed -1", "argument --seed"),
    "flow pnr-seed negative": bad("flow jet-mlp --target ecp5-85f -o {out} --pnr-seed -1", "argument --pnr-seed"),
    "flow reuse 0": bad("flow jet-mlp --target ecp5-85f -o {out} --reuse 0", "argument --reuse"),
    "flow bad precision": bad("flow jet-mlp --target ecp5-85f -o {out} --precision w8q3", "w8q3"),
    "flow range reversed": bad("flow jet-mlp --target ecp5-85f -o {out} --input-range=2,1", "argument --input-range"),
    "flow unknown simulator": bad("flow jet-mlp --target ecp5-85f -o {out} --simulator x", "argument --simulator"),
    "flow trace 0": bad("flow jet-mlp --target ecp5-85f -o {out} --trace 0", "argument --trace"),
    "flow calibration missing": bad("flow jet-mlp --target ecp5-85f -o {out} --calibration gone.npy", "gone.npy",
                                    "no such file"),
    "flow learner with trace": bad("flow learn:t1 --target ecp5-85f -o {out} --trace 2", "--trace", "learn:TASK"),
    "flow missing model": bad("flow nope.onnx --target ecp5-85f -o {out}", "nope.onnx"),
    "flow unknown recipe": bad("flow jet-mpl --target ecp5-85f -o {out}", "jet-mpl"),
    "flow output is a file": bad("flow jet-mlp --target ecp5-85f -o afile", "afile", setup=write("afile", "x")),
    # -- demo -------------------------------------------------------------------------------------------------------
    "demo unknown option": bad("demo --vectors 5", "--vectors"),
    "demo extra argument": bad("demo jet-mlp", "jet-mlp"),
    "demo output empty": bad("demo -o ''", "empty"),
    "demo output is a file": bad("demo -o afile", "afile", setup=write("afile", "x")),
    # -- bench emulate ---------------------------------------------------------------------------------------------
    "bench emulate batch 0": bad("bench emulate --batch 0", "argument --batch"),
    "bench emulate batch negative": bad("bench emulate --batch -1", "argument --batch"),
    "bench emulate batch word": bad("bench emulate --batch x", "argument --batch"),
    "bench emulate batch past the cap": bad(f"bench emulate --batch {BIG}", "argument --batch", "1,000,000"),
    "bench emulate repeats 0": bad("bench emulate --repeats 0", "argument --repeats"),
    "bench emulate repeats negative": bad("bench emulate --repeats -1", "argument --repeats"),
    "bench emulate repeats word": bad("bench emulate --repeats x", "argument --repeats"),
    "bench emulate json folder": bad("bench emulate --json sub", "argument --json", "folder",
                                     setup=lambda t: (t / "sub").mkdir()),
    "bench emulate json in missing folder": bad("bench emulate --json nowhere/b.json", "argument --json", "nowhere"),
    "bench emulate unknown recipe": bad("bench emulate --model jet-mpl --batch 10", "jet-mpl"),
    "bench emulate missing model": bad("bench emulate --model nope.onnx --batch 10", "nope.onnx"),
    "bench no suite": bad("bench", "SUITE"),
    "bench unknown suite": bad("bench fpga", "fpga"),
    # no CUDA GPU here (nor on CI): the suite refuses at once, naming the interpreter tests that run anyway
    "bench gpu without a GPU": bad("bench gpu --no-e2e --json b.json", "needs a CUDA GPU",
                                   "TRITON_INTERPRET=1 pytest tests/llm"),
    # -- bench rtl --------------------------------------------------------------------------------------------------
    "bench rtl unknown design": bad("bench rtl --designs foo", "--designs", "foo"),
    "bench rtl unknown target": bad("bench rtl --targets foo", "'foo'"),
    "bench rtl clock 0": bad("bench rtl --clock 0", "argument --clock"),
    "bench rtl latency cutoff 0": bad("bench rtl --latency-cutoff 0", "argument --latency-cutoff"),
    "bench rtl latency cutoff negative": bad("bench rtl --latency-cutoff -1", "argument --latency-cutoff"),
    "bench rtl json folder": bad("bench rtl --json sub", "argument --json", setup=lambda t: (t / "sub").mkdir()),
    "bench rtl unknown simulator": bad("bench rtl --simulate modelsim", "argument --simulate"),
    # -- bench compress / neuqi -------------------------------------------------------------------------------------
    "bench compress ctx 0": bad("bench compress --ctx 0", "argument --ctx"),
    "bench compress calib-chunks 0": bad("bench compress --calib-chunks 0", "argument --calib-chunks"),
    "bench compress eval-chunks 0": bad("bench compress --eval-chunks 0", "argument --eval-chunks"),
    "bench compress json folder": bad("bench compress --json sub", "argument --json",
                                      setup=lambda t: (t / "sub").mkdir()),
    "bench compress missing text": bad("bench compress --text gone.txt", "gone.txt"),
    "bench compress unknown statistics": bad("bench compress --statistics exact", "argument --statistics"),
    "bench compress missing merge": bad("bench compress --merge gone.json", "gone.json"),
    "bench neuqi blocks word": bad("bench neuqi --neuqi-blocks x", "--neuqi-blocks"),
    "bench neuqi bad settings": bad("bench neuqi --neuqi-settings x", "--neuqi-settings"),
    "bench neuqi ctx 0": bad("bench neuqi --ctx 0", "argument --ctx"),
    "bench neuqi json folder": bad("bench neuqi --json sub", "argument --json", setup=lambda t: (t / "sub").mkdir()),
    "bench neuqi missing text": bad("bench neuqi --text gone.txt", "gone.txt"),
    # -- bench online ------------------------------------------------------------------------------------------------
    "bench online kan-grids word": bad("bench online --kan-grids x", "argument --kan-grids"),
    "bench online kan-grids 0": bad("bench online --kan-grids 0,6", "argument --kan-grids"),
    "bench online kan-grids empty": bad("bench online --kan-grids ''", "argument --kan-grids"),
    "bench online mlp-widths word": bad("bench online --mlp-widths 16,x", "argument --mlp-widths"),
    "bench online t5-episodes 0": bad("bench online --t5-episodes 0", "argument --t5-episodes"),
    "bench online pnr-seed negative": bad("bench online --pnr-seed -1", "argument --pnr-seed"),
    "bench online unknown part": bad("bench online --online-parts speed", "--online-parts", "speed"),
    "bench online missing merge": bad("bench online --online-merge gone.json", "gone.json"),
    "bench online json folder": bad("bench online --json sub", "argument --json", setup=lambda t: (t / "sub").mkdir()),
    # -- learn --------------------------------------------------------------------------------------------------------
    "learn neither task nor data": bad("learn -o {out}", "--data"),
    "learn unknown task": bad("learn t9 -o {out}", "t9"),
    "learn task and data": bad("learn t1 --data s.npz -o {out}", "both"),
    "learn missing data": bad("learn --data gone.npz -o {out}", "gone.npz"),
    "learn mlp lanes 0": bad("learn t1 --model mlp --mlp-lanes 0 -o {out}", "argument --mlp-lanes"),
    "learn bad datapath": bad("learn t1 --datapath 'fixed<0,0>' -o {out}", "fixed<0,0>"),
    "learn layers word": bad("learn t1 --layers x -o {out}", "argument --layers"),
    "learn grid range reversed": bad("learn t1 --grid-range=2,1 -o {out}", "argument --grid-range"),
    "learn unknown target": bad("learn t1 --target foo -o {out}", "'foo'"),
    "learn unknown basis": bad("learn t1 --basis lut -o {out}", "argument --basis"),
    "learn output is a file": bad("learn t1 -o afile", "afile", setup=write("afile", "x")),
    "learn seed negative": bad("learn t1 --seed -1 -o {out}", "argument --seed"),
    "learn seed 2**70": bad(f"learn t1 --seed {2**70} -o {{out}}", "argument --seed"),
    "learn samples 0": bad("learn t1 --samples 0 -o {out}", "argument --samples"),
    "learn grid size 0": bad("learn t1 --grid-size 0 -o {out}", "argument --grid-size"),
    "learn order 0": bad("learn t1 --order 0 -o {out}", "argument --order"),
    "learn guard bits negative": bad("learn t1 --guard-bits -1 -o {out}", "argument --guard-bits"),
    "learn lr-shift negative": bad("learn t1 --lr-shift -1 -o {out}", "argument --lr-shift"),
    "learn lr 0": bad("learn t1 --lr 0 -o {out}", "learning rate", "positive"),
    "learn pnr-seed negative": bad("learn t1 --target ice40-up5k --pnr-seed -1 -o {out}", "argument --pnr-seed"),
    # -- quantize -------------------------------------------------------------------------------------------------
    "quantize unknown method": bad("quantize smollm2 --method foo -o {out}", "--method", "foo"),
    "quantize no method": bad("quantize smollm2 -o {out}", "--method"),
    "quantize bits 0": bad("quantize smollm2 --method rtn --bits 0 -o {out}", "argument --bits"),
    "quantize bits word": bad("quantize smollm2 --method rtn --bits four -o {out}", "argument --bits"),
    "quantize group 0": bad("quantize smollm2 --method rtn --group 0 -o {out}", "argument --group"),
    "quantize rank negative": bad("quantize smollm2 --method rtn --rank -1 -o {out}", "argument --rank"),
    "quantize bpw 0": bad("quantize smollm2 --method littlebit2 --bpw 0 -o {out}", "argument --bpw"),
    "quantize seed negative": bad("quantize smollm2 --method rtn --seed -1 -o {out}", "argument --seed"),
    "quantize ctx 0": bad("quantize smollm2 --method rtn --ctx 0 -o {out}", "argument --ctx"),
    "quantize eval-chunks 0": bad("quantize smollm2 --method rtn --eval-chunks 0 -o {out}", "argument --eval-chunks"),
    "quantize calib-chunks 0": bad("quantize smollm2 --method rtn --calib-chunks 0 -o {out}",
                                   "argument --calib-chunks"),
    "quantize batch-size 0": bad("quantize smollm2 --method rtn --batch-size 0 -o {out}", "argument --batch-size"),
    "quantize distill-steps negative": bad("quantize smollm2 --method littlebit2 --bpw 1 --distill-steps -1 -o {out}",
                                           "argument --distill-steps"),
    "quantize distill-lr 0": bad("quantize smollm2 --method littlebit2 --bpw 1 --distill-lr 0 -o {out}",
                                 "argument --distill-lr"),
    "quantize distill-batch 0": bad("quantize smollm2 --method littlebit2 --bpw 1 --distill-batch 0 -o {out}",
                                    "argument --distill-batch"),
    "quantize distill for rtn": bad("quantize smollm2 --method rtn --distill-steps 5 -o {out}", "--distill-steps",
                                    "rtn"),
    "quantize option without value": bad("quantize smollm2 --method rtn --option damp -o {out}", "argument --option",
                                         "KEY=VALUE"),
    "quantize missing text": bad("quantize smollm2 --method rtn --text gone.txt -o {out}", "gone.txt"),
    "quantize missing model": bad("quantize gone --method rtn -o {out}", "gone"),
    "quantize output is a file": bad("quantize smollm2 --method rtn -o afile", "afile", setup=write("afile", "x")),
    # -- eval-ppl ---------------------------------------------------------------------------------------------------
    "eval-ppl ctx 0": bad("eval-ppl smollm2 --ctx 0", "argument --ctx"),
    "eval-ppl eval-chunks 0": bad("eval-ppl smollm2 --eval-chunks 0", "argument --eval-chunks"),
    "eval-ppl batch-size 0": bad("eval-ppl smollm2 --batch-size 0", "argument --batch-size"),
    "eval-ppl json folder": bad("eval-ppl smollm2 --json sub", "argument --json", setup=lambda t: (t / "sub").mkdir()),
    "eval-ppl missing text": bad("eval-ppl smollm2 --text gone.txt", "gone.txt"),
    "eval-ppl missing model": bad("eval-ppl gone", "gone"),
    # -- deploy ----------------------------------------------------------------------------------------------------
    "deploy missing folder": bad("deploy gone -o x.bfb", "gone"),
    "deploy folder not bitforge's": bad("deploy plain -o x.bfb", "plain", setup=write("plain/a.txt", "x")),
    "deploy unknown board": bad(f"deploy {KT} --board foo -o x.bfb", "foo", "icebreaker"),
    "deploy board not built": bad(f"deploy {KT} --board icebreaker -o x.bfb", "icebreaker", "bitforge flow"),
    "deploy no device": bad(f"deploy {KT} -o x.bfb", "device", setup=edit_json(MAN, drop("device"))),
    "deploy no onnx": bad(f"deploy {KT} -o x.bfb", "model.onnx", setup=remove("kt/model.onnx")),
    "deploy bundle inside": bad(f"deploy {KT} -o kt/x.bfb", "kt/x.bfb"),
    "deploy output is a folder": bad(f"deploy {KT} -o sub", "sub", setup=lambda t: (t / "sub").mkdir()),
    # -- run -------------------------------------------------------------------------------------------------------
    "run missing bundle": bad("run gone.bfb --input x.npy -o y.npy", "gone.bfb", setup=X),
    "run not a bundle": bad("run bad.bfb --input x.npy -o y.npy", "bad.bfb", setup=both(X, write("bad.bfb", "hi"))),
    "run truncated bundle": bad("run kt.bfb --input x.npy -o y.npy", "kt.bfb",
                                setup=both(X, truncate("kt.bfb"))),
    "run missing input": bad("run kt.bfb --input gone.npy -o y.npy", "gone.npy"),
    "run input of another width": bad("run kt.bfb --input x.npy --device cpu -o y.npy", "x.npy", "(n, 1)",
                                      setup=npy("x.npy", np.zeros((4, 3)))),
    "run input with nan": bad("run kt.bfb --input x.npy --device cpu -o y.npy", "x.npy",
                              setup=npy("x.npy", np.full((4, 1), np.nan))),
    "run missing serial port": bad("run kt.bfb --input x.npy --device /dev/ttyNOPE0 -o y.npy", "/dev/ttyNOPE0",
                                   setup=X),
    "run wrong digest": bad(f"run kt.bfb --input x.npy --expect-sha256 {'0' * 64} -o y.npy", "kt.bfb",
                            setup=X),
    "run output is a folder": bad("run kt.bfb --input x.npy --device sim -o sub.npy", "sub.npy", "is a folder",
                                  setup=both(X, lambda t: (t / "sub.npy").mkdir())),
    "run output is the input": bad("run kt.bfb --input x.npy --device sim -o x.npy", "x.npy", "is the input",
                                   setup=X),
    # -- program ---------------------------------------------------------------------------------------------------
    "program unknown board": bad("program x.bin --board foo", "foo", setup=write("x.bin", b"\xff" * 8)),
    "program missing file": bad("program gone.bin --board icebreaker", "gone.bin"),
    "program bundle without bitstream": bad("program kt.bfb --board icebreaker --dry-run", "kt.bfb",
                                            "no bitstream"),
    "program sram and flash": bad("program x.bin --board icebreaker --sram --flash", "--flash",
                                  setup=write("x.bin", b"\xff" * 8)),
}


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder``: its kind and, for files, a hash of the bytes."""
    return {str(p.relative_to(folder)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*"))}


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def prepare(case: Bad, tmp: Path, built: Path) -> list[str]:
    if "{kt}" in case.argv:
        shutil.copytree(built / "kt", tmp / "kt")
    if "kt.bfb" in case.argv:
        shutil.copy(built / "kt.bfb", tmp / "kt.bfb")
    shutil.copy(built / "m.pt2", tmp / "m.pt2")
    if case.setup is not None:
        case.setup(tmp)
    return [a.format(out="out", kt="kt") for a in shlex.split(case.argv)]


def test_the_table_has_at_least_150_cases_over_every_command():
    commands = {c.argv.split()[0] + (" " + c.argv.split()[1] if c.argv.startswith("bench ") and len(c.argv.split()) > 1
                                     else "") for c in CASES.values()}
    assert len(CASES) >= 150
    assert {"compile", "inspect", "emulate", "simulate", "implement", "flow", "demo", "bench emulate", "bench rtl",
            "bench compress", "bench neuqi", "bench online", "learn", "quantize", "eval-ppl", "deploy", "run",
            "program"} <= commands


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_message_and_writes_nothing(name, built, tmp_path, monkeypatch, capsys):
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    argv = prepare(case, tmp_path, built)
    before = snapshot(tmp_path)
    code, out, err = run(argv, capsys)
    text = " ".join(err.split())
    assert code == 2, f"exit {code}: {text}"
    assert "Traceback" not in out + err, err
    assert err.count("error:") == 1, err  # one message (argparse: usage line + one error line)
    for needle in case.says:
        assert needle in text, (needle, text)
    assert out == "", f"output on stdout before the failure: {out}"
    assert snapshot(tmp_path) == before, "the command wrote or changed files"


def test_ctrl_c_while_onnxruntime_imports_is_exit_130_and_one_line(tmp_path, monkeypatch, capsys):
    """A KeyboardInterrupt raised by the import itself (the user pressed Ctrl-C while onnxruntime loads)."""
    class Interrupt:
        def find_spec(self, name, path=None, target=None):
            if name == "onnxruntime" or name.startswith("onnxruntime."):
                raise KeyboardInterrupt
            return None

    for mod in [m for m in sys.modules if m == "onnxruntime" or m.startswith("onnxruntime.")]:
        monkeypatch.delitem(sys.modules, mod)
    for mod in [m for m in sys.modules if m.startswith("bitforge.toolchain.backends.onnx_backend")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(sys, "meta_path", [Interrupt(), *sys.meta_path])
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["compile", "jet-mlp", "-o", "out", "--vectors", "10"], capsys)
    assert code == 130 and "Traceback" not in out + err and "error" not in err
    assert err.strip().splitlines()[-1] == "stopped by SIGINT", err  # progress lines, then one line saying so
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


# -- bitforge learn --to hls (the learner as HLS C++): its own table, since CASES is parametrized above -----------

HLS_CASES = {
    "learn to unknown backend": (bad("learn t1 --to vhdl -o {out}", "argument --to", "invalid choice: 'vhdl'"), {}),
    "learn to without a value": (bad("learn t1 -o {out} --to", "argument --to", "expected one argument"), {}),
    "learn to hls without g++": (bad("learn t1 --to hls -o {out}", "'no-such-gxx' not found on PATH",
                                     "apt-get install -y g++"), {"CXX": "no-such-gxx"}),
    "learn to hls without hls4ml": (bad("learn t1 --to hls -o {out}", "hls4ml is not installed", "pip install"),
                                    {"hls4ml": None}),
}


@pytest.mark.parametrize("name", list(HLS_CASES))
def test_bad_learn_to_hls_is_one_message_and_writes_nothing(name, tmp_path, monkeypatch, capsys):
    case, change = HLS_CASES[name]
    if "CXX" in change:
        monkeypatch.setenv("CXX", change["CXX"])
    if "hls4ml" in change:
        monkeypatch.setitem(sys.modules, "hls4ml", None)  # import hls4ml raises ImportError
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run([a.format(out="out") for a in shlex.split(case.argv)], capsys)
    text = " ".join(err.split())
    assert code == 2 and "Traceback" not in out + err and err.count("error:") == 1, err
    for needle in case.says:
        assert needle in text, (needle, text)
    assert out == "" and snapshot(tmp_path) == before


# -- bitforge generate (issue 20): its own block; wires the command in itself while cli.py may not yet -----------

FAKE_CKPT = write("ck/manifest.json", "{}")   # enough for the folder check: the device is refused before reading it
GENERATE_CASES = {
    "generate no such checkpoint": bad("generate nowhere --prompt hi", "nowhere: not a bitforge checkpoint folder",
                                       "bitforge quantize"),
    "generate without prompt": bad("generate ck", "the following arguments are required: --prompt"),
    "generate empty prompt": bad("generate ck --prompt ''", "--prompt is empty", setup=FAKE_CKPT),
    "generate zero tokens": bad("generate ck --prompt hi --max-new-tokens 0", "argument --max-new-tokens"),
    "generate negative temperature": bad("generate ck --prompt hi --temperature -1", "argument --temperature",
                                         "expected a finite number >= 0"),
    "generate unknown device": bad("generate ck --prompt hi --device tpu", "argument --device",
                                   "invalid choice: 'tpu'"),
    "generate unknown dtype": bad("generate ck --prompt hi --dtype float64", "argument --dtype",
                                  "invalid choice: 'float64'"),
    "generate cuda without a GPU": bad("generate ck --prompt hi --device cuda", "device 'cuda'", "no CUDA GPU",
                                       "--device cpu", setup=FAKE_CKPT),
    "generate manifest not json": bad("generate ck --prompt hi", "ck/manifest.json: not valid JSON",
                                      setup=write("ck/manifest.json", "{")),
}


@pytest.mark.parametrize("name", list(GENERATE_CASES))
def test_bad_generate_is_one_message_and_writes_nothing(name, tmp_path, monkeypatch, capsys):
    import torch

    case = GENERATE_CASES[name]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    if case.setup:
        case.setup(tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run(shlex.split(case.argv), capsys)
    text = " ".join(err.split())
    assert code == 2 and "Traceback" not in out + err and err.count("error:") == 1, err
    for needle in case.says:
        assert needle in text, (needle, text)
    assert out == "" and snapshot(tmp_path) == before
