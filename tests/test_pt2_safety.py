"""A crafted .pt2 archive runs no code: every way torch.export.load would run code from an archive is refused,
naming the entry, with exit 2 and no traceback.

Each attack writes a marker file when its payload runs. ``test_plain_torch_runs_the_payload`` shows that the
payload is live (torch.export.load itself creates the marker), so the refusal tests cannot pass vacuously.
"""
from __future__ import annotations

import io
import json
import pickle
import shutil
import sys
import zipfile

import pytest
import torch
from torch import nn

from bitforge.toolchain.cli import main
from bitforge.toolchain.frontends.pt2_archive import ArchiveError, check_archive
from bitforge.toolchain.frontends.torch_frontend import FrontendError, load_pt2


class Payload:
    """Unpickling this opens (creates) ``marker``: the smallest visible effect of running code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def torch_save(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def clean_pt2(tmp_path_factory):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).eval()
    path = tmp_path_factory.mktemp("pt2") / "clean.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), str(path))
    return path


def rewrite(src, dst, change=lambda rel, data: data, extra=None) -> None:
    """Copy archive ``src`` to ``dst``, passing each member's (name inside the root folder, bytes) through
    ``change``, then add the ``extra`` members (names inside the root folder; a leading '/' puts one at the top)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        root = zin.namelist()[0].split("/", 1)[0]
        for info in zin.infolist():
            zout.writestr(info, change(info.filename.split("/", 1)[1], zin.read(info)))
        for rel, data in (extra or {}).items():
            zout.writestr(rel[1:] if rel.startswith("/") else f"{root}/{rel}", data)


def edit_json(want, edit):
    """A ``change`` for :func:`rewrite` that edits the JSON member ``want`` in place."""
    def change(rel, data):
        if rel != want:
            return data
        doc = json.loads(data)
        edit(doc)
        return json.dumps(doc).encode()
    return change


def attack_sample_inputs(marker):
    return (lambda rel, data: torch_save(((Payload(marker),), {})) if rel == "data/sample_inputs/model.pt"
            else data), {}


def attack_pickled_weight(marker):
    to_pickle = edit_json("data/weights/model_weights_config.json",
                          lambda d: d["config"]["0.weight"].update(use_pickle=True))
    return (lambda rel, data: torch_save(Payload(marker)) if rel == "data/weights/weight_0"
            else to_pickle(rel, data)), {}


def attack_opaque_constant(marker):
    meta = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
    return (edit_json("data/constants/model_constants_config.json", lambda d: d["config"].update(evil=meta)),
            {"data/constants/opaque_obj_0": pickle.dumps(Payload(marker))})


def attack_sympy_size(marker):
    def edit(doc):
        values = doc["graph_module"]["graph"]["tensor_values"]
        values[next(iter(values))]["sizes"][0] = {"as_expr": {
            "expr_str": f"__import__('builtins').open({str(marker)!r}, 'w') and 2", "hint": {"as_int": 2}}}
    return edit_json("models/model.json", edit), {}


def attack_enum_spec(marker):
    """``marker`` is made by the probe module's import; the spec only names that module."""
    def edit(doc):
        sig = doc["graph_module"]["module_call_graph"][0]["signature"]
        spec = json.loads(sig["in_spec"])
        spec[1]["children_spec"][1]["context"] = json.dumps({"__enum__": True, "fqn": "bitforge_pt2_probe:E",
                                                             "name": "A"})
        sig["in_spec"] = json.dumps(spec)
    return edit_json("models/model.json", edit), {}


#: kind -> (attack, what the refusal names)
ATTACKS = {
    "pickled sample inputs": (attack_sample_inputs, "data/sample_inputs/model.pt"),
    "use_pickle weight": (attack_pickled_weight, "data/weights/weight_0"),
    "opaque constant": (attack_opaque_constant, "data/constants/opaque_obj_0"),
    "sympy symbolic size": (attack_sympy_size, "models/model.json"),
    "enum in the input spec": (attack_enum_spec, "in_spec"),
}


def build(kind, clean, tmp_path, marker):
    change, extra = ATTACKS[kind][0](marker)
    path = tmp_path / f"{kind.replace(' ', '_')}.pt2"
    rewrite(clean, path, change, extra)
    return path


@pytest.fixture
def probe_module(tmp_path, monkeypatch):
    """A module that creates a marker when imported (the enum attack makes torch import it by name)."""
    marker = tmp_path / "imported"
    (tmp_path / "bitforge_pt2_probe.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nimport enum\nclass E(enum.Enum):\n    A = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bitforge_pt2_probe", raising=False)
    return marker


@pytest.mark.parametrize("kind", list(ATTACKS))
def test_plain_torch_runs_the_payload(kind, clean_pt2, tmp_path, probe_module, caplog):
    marker = probe_module if kind == "enum in the input spec" else tmp_path / "ran"
    path = build(kind, clean_pt2, tmp_path, marker)
    try:
        torch.export.load(str(path))
    except Exception:  # noqa: BLE001 - some payloads break the load after they ran; the marker is the point
        pass
    assert marker.exists(), f"the {kind} payload did not run in torch.export.load: the attack is stale"


@pytest.mark.parametrize("command", ["compile", "inspect"])
@pytest.mark.parametrize("kind", list(ATTACKS))
def test_bitforge_refuses_the_archive_and_runs_nothing(kind, command, clean_pt2, tmp_path, probe_module, capsys):
    marker = probe_module if kind == "enum in the input spec" else tmp_path / "ran"
    path = build(kind, clean_pt2, tmp_path, marker)
    out = tmp_path / "out"
    argv = ["compile", str(path), "-o", str(out)] if command == "compile" else ["inspect", str(path)]
    code = main(argv)
    cap = capsys.readouterr()
    text = " ".join((cap.out + cap.err).split())
    assert code == 2, text
    assert not marker.exists(), f"{kind}: the payload ran"
    assert "Traceback" not in text and str(path) in text and ATTACKS[kind][1] in text and "refused" in text, text
    assert not out.exists()


def test_clean_archive_still_loads(clean_pt2):
    g = load_pt2(clean_pt2)
    assert [n.OP for n in g.nodes] == ["Dense", "ReLU", "Dense"]


def test_dynamic_batch_archive_with_symbolic_sizes_loads(tmp_path):
    """torch.export writes symbolic sizes as sympy srepr (``Symbol('s31', positive=True, integer=True)``): the
    expression check accepts what torch writes."""
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=2, max=1024)
    ep = torch.export.export(model, (torch.randn(8, 4),), dynamic_shapes=({0: batch},))
    path = tmp_path / "dyn.pt2"
    torch.export.save(ep, str(path))
    assert "Symbol(" in zipfile.ZipFile(path).read("dyn/models/model.json").decode()
    assert [n.OP for n in load_pt2(path).nodes] == ["Dense", "ReLU"]


def test_aotinductor_entries_are_refused(clean_pt2, tmp_path):
    path = tmp_path / "aoti.pt2"
    rewrite(clean_pt2, path, extra={"data/aotinductor/model/model.so": b"\x7fELF"})
    with pytest.raises(FrontendError, match="refused: entry 'data/aotinductor/model/model.so'"):
        load_pt2(path)


def test_top_level_members_are_refused(clean_pt2, tmp_path):
    """torch's fallback for older archives reads top-level members (serialized_state_dict.pt, ...)."""
    path = tmp_path / "legacy.pt2"
    rewrite(clean_pt2, path, extra={"/version": b"8.0", "/serialized_state_dict.pt": b""})
    with pytest.raises(FrontendError, match="not all inside one root folder"):
        load_pt2(path)


@pytest.mark.parametrize("expr", ["Symbol('s0', positive=True, integer=True)",
                                  "Add(Mul(Integer(2), Symbol('s0', integer=True)), Integer(1))",
                                  "FloorDiv(Symbol('s12', positive=True), Integer(4))",
                                  "Max(Integer(1), Symbol('u3', integer=True))"])
def test_symbolic_sizes_that_torch_writes_pass(expr, clean_pt2, tmp_path):
    path = tmp_path / "ok.pt2"
    rewrite(clean_pt2, path, edit_json("models/model.json", lambda d: d.update(extra={"expr_str": expr})))
    check_archive(path.read_bytes())


@pytest.mark.parametrize("expr", ["Symbol('s0').__class__", "exec('x')", "lambda: 1", "Symbol('os.system')",
                                  "Symbol('s0')[0]", "getattr(Integer(1), 'x')", "s0; 1"])
def test_symbolic_sizes_with_python_are_refused(expr, clean_pt2, tmp_path):
    path = tmp_path / "bad.pt2"
    rewrite(clean_pt2, path, edit_json("models/model.json", lambda d: d.update(extra={"expr_str": expr})))
    with pytest.raises(ArchiveError, match="symbolic size"):
        check_archive(path.read_bytes())


def test_archive_changed_after_the_check_is_not_reread(clean_pt2, tmp_path, monkeypatch):
    """The bytes that were checked are the bytes torch loads: swapping the file after the check changes nothing."""
    from bitforge.toolchain.frontends import torch_frontend

    path = tmp_path / "swap.pt2"
    shutil.copy(clean_pt2, path)
    evil = build("pickled sample inputs", clean_pt2, tmp_path, tmp_path / "ran")
    real = torch_frontend.read_archive

    def read_then_swap(p):
        data = real(p)
        shutil.copy(evil, path)
        return data

    monkeypatch.setattr(torch_frontend, "read_archive", read_then_swap)
    load_pt2(path)
    assert not (tmp_path / "ran").exists()


def test_a_corrupt_archive_is_one_line_without_torchs_log_traceback(clean_pt2, tmp_path, capsys):
    path = tmp_path / "broken.pt2"
    rewrite(clean_pt2, path, lambda rel, data: data[: len(data) // 2] if rel == "models/model.json" else data)
    code = main(["inspect", str(path)])
    cap = capsys.readouterr()
    text = cap.out + cap.err
    assert code == 2 and "Traceback" not in text and "broken.pt2" in text and "models/model.json" in text, text
    assert len(text.strip().splitlines()) <= 4, text


def test_torchs_own_log_traceback_is_not_printed(clean_pt2, tmp_path, capfd):
    """An archive that passes the checks but that torch's deserializer rejects (here a schema version from the
    future): torch logs a warning with a 20-line traceback before raising; bitforge prints the cause in one line.
    ``capfd``: torch's log handler writes to the process's stderr, not to sys.stderr's replacement."""
    path = tmp_path / "future.pt2"
    rewrite(clean_pt2, path, edit_json("models/model.json", lambda d: d["schema_version"].update(major=999)))
    code = main(["inspect", str(path)])
    text = "".join(capfd.readouterr())
    assert code == 2 and "Traceback" not in text and "SerializeError" in text and "future.pt2" in text, text
    assert len(text.strip().splitlines()) == 1, text
