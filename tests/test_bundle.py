"""Deployment bundles (``runtime/bundle.py``, ``toolchain/deploy.py``, ``bitforge deploy``): built from a real
compiled output folder, they round-trip byte for byte, are reproducible, and every kind of damage, tampering or
unsafe entry is refused with a message naming the bundle, the member and the problem, without writing anything.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bitforge.runtime import bundle as bf
from bitforge.runtime.bundle import MANIFEST, Bundle, BundleError
from bitforge.runtime.protocol import PROTOCOL_VERSION
from bitforge.toolchain import identity, ir
from bitforge.toolchain.cli import main
from bitforge.toolchain.deploy import DeployError, write_bundle
from bitforge.toolchain.errors import OutputError

BOARD = "icebreaker"
BITSTREAM = "impl/ice40-up5k/kan_tracker_device.bin"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, " ".join((cap.out + cap.err).split())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """kan-tracker compiled to ONNX and RTL (a few seconds): a real output folder, never modified by a test."""
    out = tmp_path_factory.mktemp("kt") / "out"
    assert main(["compile", "kan-tracker", "--to", "onnx", "--to", "rtl", "--vectors", "50", "-o", str(out)]) == 0
    path = out / "rtl" / "manifest.json"
    man = json.loads(path.read_text())
    if "device" not in man:  # a compile that does not write the device wrapper yet: the wrapper's own writer
        from bitforge.toolchain.backends.rtl.device import device_for_model, write_device
        man["device"] = write_device(out / "rtl", device_for_model(ir.load(out), man))
        path.write_text(json.dumps(man, indent=1))
    return out


@pytest.fixture(scope="module")
def with_board(compiled, tmp_path_factory) -> Path:
    """A copy of ``compiled`` with a board entry in report.json as 'bitforge flow --board' writes it, and a small
    stand-in bitstream (the bundle does not look inside a bitstream; place and route belongs to the slow tests)."""
    out = tmp_path_factory.mktemp("board") / "out"
    shutil.copytree(compiled, out)
    (out / BITSTREAM).parent.mkdir(parents=True)
    (out / BITSTREAM).write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    (out / "impl/ice40-up5k/board.pcf").write_text("set_io clk 35\n")
    report = json.loads((out / "report.json").read_text())
    report["boards"] = {BOARD: {"board": BOARD, "target": "ice40-up5k", "top": "kan_tracker_device_icebreaker",
                                "clock_hz": 12_000_000, "core_clock_hz": 12_000_000, "pll": None,
                                "baud": 115_384.615, "baud_requested": 115_200, "clks_per_bit": 104,
                                "bitstream": BITSTREAM, "constraints": "impl/ice40-up5k/board.pcf",
                                "resources": {"lut": 1200, "ff": 400, "dsp": 7, "bram": 1}, "fmax_mhz": 31.5,
                                "seconds": None, "status": "ok",
                                "sha256": hashlib.sha256((out / BITSTREAM).read_bytes()).hexdigest()}}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return out


@pytest.fixture(scope="module")
def bundle_bytes(with_board, tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("bfb") / "kt.bfb"
    write_bundle(with_board, BOARD, path)
    return path.read_bytes()


def _members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def _zip(members, mode: int = bf.FILE_MODE) -> bytes:
    """An archive written the way bitforge writes bundles (so only what a test changes differs)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in members:
            info = zipfile.ZipInfo(name, date_time=bf.TIMESTAMP)
            info.create_system = 3
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, body)
    return buf.getvalue()


def _relisted(members) -> list[tuple[str, bytes]]:
    """``members`` with bundle.json's member list rewritten to match them: a tampered archive whose hash list
    is consistent, so that the one thing wrong is the thing under test."""
    doc = json.loads(dict(members)[MANIFEST])
    doc["members"] = [{"path": n, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                      for n, b in members if n != MANIFEST]
    return [(n, json.dumps(doc).encode() if n == MANIFEST else b) for n, b in members]


def _open(data: bytes, tmp_path: Path) -> Bundle:
    path = tmp_path / "t.bfb"
    path.write_bytes(data)
    return Bundle.open(path)


def _refused(data: bytes, tmp_path: Path, *words: str) -> str:
    """Open ``data`` (expecting a refusal naming the bundle and ``words``) and try to extract it: nothing may be
    written anywhere under ``tmp_path``."""
    path = tmp_path / "t.bfb"
    path.write_bytes(data)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(BundleError) as e:
        Bundle.open(path).extract(tmp_path / "dest")
    msg = str(e.value)
    assert str(path) in msg
    for w in words:
        assert w in msg, msg
    assert sorted(tmp_path.rglob("*")) == before
    return msg


# -- building ------------------------------------------------------------------------------------------------

def test_bundle_holds_the_output_folder_and_a_manifest_that_describes_it(compiled, tmp_path):
    done = write_bundle(compiled, None, tmp_path / "kt.bfb")
    b = Bundle.open(tmp_path / "kt.bfb")
    g = ir.load(compiled)
    rtl = json.loads((compiled / "rtl/manifest.json").read_text())
    m = b.manifest
    assert (m.model_id, m.arch_id) == (identity.model_id(g), identity.arch_id(g))
    assert m.model_name == g.name and m.board is None and b.bitstream is None
    assert m.protocol_version == rtl["device"].get("protocol_version", PROTOCOL_VERSION)
    assert b.sha256 == done.sha256 == hashlib.sha256((tmp_path / "kt.bfb").read_bytes()).hexdigest()
    assert [t.name for t in m.inputs] == g.inputs and [t.name for t in m.outputs] == g.outputs
    assert m.device.input.type == g.tensors[rtl["input_tensor"]].type_str()
    assert m.device.output.type == g.tensors[rtl["output_tensor"]].type_str()
    t = g.tensors[rtl["input_tensor"]].dtype
    assert (m.device.input.width, m.device.input.integer, m.device.input.signed) == (t.width, t.integer, t.signed)
    assert (m.device.latency_cycles, m.device.ii, m.device.top) == (rtl["latency_cycles"], rtl["ii"],
                                                                    rtl["device"]["top"])
    expected = {*bf.REQUIRED, *rtl["files"], *rtl["device"]["files"]}
    assert {mem.path for mem in m.members} == expected
    for name in expected:  # every member is the output folder's file, byte for byte
        assert b.read(name) == (compiled / name).read_bytes(), name
    assert b.names[0] == MANIFEST and b.names[1:] == sorted(expected)


def test_round_trip_through_extract_gives_a_loadable_model(compiled, tmp_path):
    write_bundle(compiled, None, tmp_path / "kt.bfb")
    b = Bundle.open(tmp_path / "kt.bfb")
    dest = b.extract(tmp_path / "x")
    for name in b.names:
        assert (dest / name).read_bytes() == b.read(name), name
        assert stat.S_ISREG(os.lstat(dest / name).st_mode)
    assert identity.model_id(ir.load(dest)) == b.manifest.model_id
    assert json.loads((dest / MANIFEST).read_text()) == b.manifest.to_json()


def test_same_output_folder_gives_the_same_bytes(compiled, tmp_path):
    write_bundle(compiled, None, tmp_path / "a.bfb")
    moved = tmp_path / "elsewhere" / "out"
    shutil.copytree(compiled, moved)
    for p in moved.rglob("*"):  # other times and another path: neither may reach the bundle
        os.utime(p, (1_700_000_000, 1_700_000_000))
    write_bundle(moved, None, tmp_path / "b.bfb")
    assert (tmp_path / "a.bfb").read_bytes() == (tmp_path / "b.bfb").read_bytes()


def test_board_bundle_carries_the_bitstream_and_the_board(with_board, bundle_bytes, tmp_path):
    b = _open(bundle_bytes, tmp_path)
    board = b.manifest.board
    entry = json.loads((with_board / "report.json").read_text())["boards"][BOARD]
    assert b.bitstream == (with_board / BITSTREAM).read_bytes()
    assert (board.board, board.target, board.bitstream, board.clock_hz, board.baud, board.clks_per_bit) == (
        BOARD, "ice40-up5k", BITSTREAM, 12_000_000, 115_384.615, 104)
    assert board.resources == entry["resources"] and board.fmax_mhz == 31.5
    assert b.read("impl/ice40-up5k/board.pcf") == (with_board / "impl/ice40-up5k/board.pcf").read_bytes()


# -- deploy's own errors --------------------------------------------------------------------------------------

def test_board_not_built_names_the_flow_command(with_board, tmp_path):
    with pytest.raises(DeployError, match=r"no bitstream for board 'ulx3s' \(built for: icebreaker\); run "
                                          r"'bitforge flow kan-tracker --board ulx3s -o .*' first"):
        write_bundle(with_board, "ulx3s", tmp_path / "x.bfb")
    assert not (tmp_path / "x.bfb").exists()


@pytest.mark.parametrize("change, words", [
    (lambda out: (out / BITSTREAM).unlink(), [BITSTREAM, "is missing", "bitforge flow kan-tracker --board"]),
    (lambda out: _set_board(out, bitstream="../../etc/passwd"), ["'..' component"]),
    (lambda out: _set_board(out, bitstream="/etc/passwd"), ["absolute path"]),
    (lambda out: _link_bitstream(out), ["symbolic link"]),
    (lambda out: _set_board(out, clks_per_bit=0), ["clks_per_bit should be a positive integer"]),
    (lambda out: (out / BITSTREAM).write_bytes(b"rebuilt"), ["SHA-256 differs", "changed after it was built"]),
    (lambda out: _set_board(out, status="failed", error="does not fit"), ["did not produce a bitstream",
                                                                            "does not fit"]),
])
def test_a_bad_board_entry_is_refused(with_board, tmp_path, change, words):
    out = tmp_path / "out"
    shutil.copytree(with_board, out)
    change(out)
    with pytest.raises(DeployError) as e:
        write_bundle(out, BOARD, tmp_path / "x.bfb")
    assert all(w in str(e.value) for w in words), str(e.value)
    assert not (tmp_path / "x.bfb").exists()


def _set_board(out: Path, **fields) -> None:
    report = json.loads((out / "report.json").read_text())
    report["boards"][BOARD].update(fields)
    (out / "report.json").write_text(json.dumps(report))


def _link_bitstream(out: Path) -> None:
    secret = out.parent / "secret.bin"
    secret.write_bytes(b"not part of the output")
    (out / BITSTREAM).unlink()
    (out / BITSTREAM).symlink_to(secret)


@pytest.mark.parametrize("change, words", [
    (lambda out: (out / ".bitforge.json").unlink(), ["not a bitforge output folder"]),
    (lambda out: (out / "model.onnx").unlink(), ["model.onnx is missing", "--to onnx --to rtl"]),
    (lambda out: shutil.rmtree(out / "rtl"), ["rtl/manifest.json is missing", "--to onnx --to rtl"]),
    (lambda out: _drop_device(out), ["no 'device' section", "bitforge compile kan-tracker --to onnx --to rtl"]),
    (lambda out: (out / "rtl" / "kan_tracker.v").unlink(), ["kan_tracker.v", "is missing"]),
    (lambda out: _edit_rtl_manifest(out, weights={"mode": "rom", "arch_id": "0" * 64}), ["mixes two compiles"]),
    (lambda out: _edit_rtl_manifest(out, input_tensor="nope"), ["input_tensor 'nope' is not a tensor"]),
    (lambda out: _edit_device(out, protocol_version="1"), ["device.protocol_version should be a positive integer"]),
])
def test_an_incomplete_output_folder_is_refused(compiled, tmp_path, change, words):
    out = tmp_path / "out"
    shutil.copytree(compiled, out)
    change(out)
    with pytest.raises(DeployError) as e:
        write_bundle(out, None, tmp_path / "x.bfb")
    assert str(out) in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    assert not (tmp_path / "x.bfb").exists()


def test_an_online_learner_without_its_device_is_refused(tmp_path):
    out = tmp_path / "learner"
    assert main(["learn", "t1", "--samples", "300", "-o", str(out)]) == 0
    with pytest.raises(DeployError, match="run without --rtl, so there is no device to deploy"):
        write_bundle(out, None, tmp_path / "x.bfb")
    assert not (tmp_path / "x.bfb").exists()


def _drop_device(out: Path) -> None:
    man = json.loads((out / "rtl/manifest.json").read_text())
    del man["device"]
    (out / "rtl/manifest.json").write_text(json.dumps(man))


def _edit_device(out: Path, **fields) -> None:
    man = json.loads((out / "rtl/manifest.json").read_text())
    man["device"].update(fields)
    (out / "rtl/manifest.json").write_text(json.dumps(man))


def _edit_rtl_manifest(out: Path, **fields) -> None:
    man = json.loads((out / "rtl/manifest.json").read_text())
    man.update(fields)
    (out / "rtl/manifest.json").write_text(json.dumps(man))


def test_a_failed_deploy_leaves_the_previous_bundle(with_board, tmp_path):
    target = tmp_path / "kt.bfb"
    write_bundle(with_board, BOARD, target)
    before = target.read_bytes()
    with pytest.raises(DeployError):
        write_bundle(with_board, "other-board", target)
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["kt.bfb"]


def test_bundle_inside_the_output_folder_is_refused(compiled):
    with pytest.raises(DeployError, match="inside the output folder"):
        write_bundle(compiled, None, compiled / "kt.bfb")
    assert not (compiled / "kt.bfb").exists()


# -- the command line -----------------------------------------------------------------------------------------

def test_deploy_and_inspect_commands(with_board, tmp_path, capsys):
    target = tmp_path / "kt.bfb"
    code, text = run_cli(capsys, "deploy", with_board, "--board", BOARD, "-o", target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    assert code == 0 and f"sha256 {digest}" in text and BITSTREAM in text
    code, text = run_cli(capsys, "inspect", target, "--expect-sha256", digest.upper())
    m = Bundle.open(target).manifest
    assert code == 0 and "matches --expect-sha256" in text
    for word in (m.model_id, m.arch_id, "fixed<16,6,RND_CONV,SAT>", "core clock 12,000,000 Hz",
                 "115,384.6 baud (115,200 requested, 104 clocks per bit)", BITSTREAM, "weights.safetensors"):
        assert word in text, word
    code, text = run_cli(capsys, "inspect", target, "--expect-sha256", "0" * 64)
    assert code == 2 and f"SHA-256 {digest}, expected {'0' * 64}" in text
    code, text = run_cli(capsys, "deploy", with_board, "--board", "ulx3s", "-o", tmp_path / "n.bfb")
    assert code == 2 and "bitforge flow kan-tracker --board ulx3s" in text and not (tmp_path / "n.bfb").exists()
    code, text = run_cli(capsys, "deploy", with_board, "--board", "nope", "-o", tmp_path / "n.bfb")
    assert code == 2 and "unknown board 'nope'" in text and not (tmp_path / "n.bfb").exists()


@pytest.mark.parametrize("argv, says", [
    ("deploy {tmp}/nowhere -o {tmp}/x.bfb", "nowhere: no such folder"),
    ("deploy {tmp} -o {tmp}/x.bfb", "not a bitforge output folder"),
    ("deploy {out} -o {out}/x.bfb", "inside the output folder"),
    ("deploy {out} --board ulx3s -o {tmp}/x.bfb", "run 'bitforge flow kan-tracker --board ulx3s -o"),
    ("deploy {out}", "the following arguments are required: -o/--output"),
    ("inspect {tmp}/missing.bfb", "missing.bfb: no such file"),
    ("inspect {tmp}/junk.bfb", "not a bitforge bundle"),
    ("inspect {out} --expect-sha256 " + "0" * 64, "--expect-sha256 checks a bundle"),
    ("inspect {tmp}/junk.bfb --expect-sha256 12ab", "'12ab' is not a SHA-256 digest"),
])
def test_bad_command_lines_are_one_message_and_write_nothing(compiled, tmp_path, capsys, argv, says):
    out = tmp_path / "out"
    shutil.copytree(compiled, out)
    (tmp_path / "junk.bfb").write_bytes(b"junk")
    before = sorted(tmp_path.rglob("*"))
    try:
        code = main(argv.format(tmp=tmp_path, out=out).split())
    except SystemExit as e:  # argparse
        code = e.code
    cap = capsys.readouterr()
    err = " ".join(cap.err.split())
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err and says in err, err
    assert cap.out == "" and sorted(tmp_path.rglob("*")) == before


def test_deploy_help_has_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["deploy", "--help"])
    assert e.value.code == 0 and "examples:" in capsys.readouterr().out


# -- damage and tampering -------------------------------------------------------------------------------------

def _data_offset(data: bytes, name: str) -> tuple[int, int]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.getinfo(name)
    nlen, elen = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    return info.header_offset + 30 + nlen + elen, info.compress_size


@pytest.mark.parametrize("member", [MANIFEST, "model.json", "weights.safetensors", "model.onnx", "report.json",
                                    "rtl/manifest.json", "rtl/kan_tracker.v", BITSTREAM])
def test_a_flipped_byte_in_any_member_is_refused_naming_it(bundle_bytes, tmp_path, member):
    start, size = _data_offset(bundle_bytes, member)
    data = bytearray(bundle_bytes)
    data[start + size // 2] ^= 0x5A
    _refused(bytes(data), tmp_path, repr(member))


def test_a_changed_member_with_a_consistent_zip_fails_its_hash(bundle_bytes, tmp_path):
    members = [(n, b.replace(b"module", b"mod_le") if n == "rtl/kan_tracker.v" else b)
               for n, b in _members(bundle_bytes)]
    _refused(_zip(members), tmp_path, "'rtl/kan_tracker.v'", "SHA-256", "does not match")


def test_an_edited_hash_in_bundle_json_is_refused(bundle_bytes, tmp_path):
    members = _members(bundle_bytes)
    doc = json.loads(dict(members)[MANIFEST])
    doc["members"][2]["sha256"] = "0" * 64
    name = doc["members"][2]["path"]
    _refused(_zip([(n, json.dumps(doc).encode() if n == MANIFEST else b) for n, b in members]), tmp_path,
             repr(name), "does not match")


@pytest.mark.parametrize("at", [0, 1, 30, 1000, 0.5, -23, -22, -1])
def test_a_truncated_bundle_is_refused(bundle_bytes, tmp_path, at):
    cut = int(len(bundle_bytes) * at) if isinstance(at, float) else at % len(bundle_bytes)
    _refused(bundle_bytes[:cut], tmp_path)


def test_bytes_added_before_or_after_the_archive_are_refused(bundle_bytes, tmp_path):
    _refused(bundle_bytes + b"\0" * 16, tmp_path, "end record")
    _refused(b"#!/bin/sh\n" + bundle_bytes, tmp_path, "unaccounted bytes")


def test_an_appended_member_is_refused(bundle_bytes, tmp_path):
    buf = io.BytesIO(bundle_bytes)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("extra.txt", b"hello")
    _refused(buf.getvalue(), tmp_path, "'extra.txt'", "not listed")


def test_a_removed_member_is_refused(bundle_bytes, tmp_path):
    _refused(_zip([(n, b) for n, b in _members(bundle_bytes) if n != "model.onnx"]), tmp_path,
             "'model.onnx'", "missing from the archive")


def test_a_renamed_member_is_refused(bundle_bytes, tmp_path):
    members = [("rtl/other.v" if n == "rtl/kan_tracker.v" else n, b) for n, b in _members(bundle_bytes)]
    _refused(_zip(members), tmp_path, "'rtl/other.v'", "not listed")


def test_a_member_the_manifest_needs_but_does_not_list_is_refused(bundle_bytes, tmp_path):
    members = _relisted([(n, b) for n, b in _members(bundle_bytes) if n != BITSTREAM])
    _refused(_zip(members), tmp_path, repr(BITSTREAM), "does not list it")


def test_a_newer_format_or_another_format_is_refused(bundle_bytes, tmp_path):
    members = _members(bundle_bytes)
    for key, value, words in (("format_version", 2, ["format version 2", "upgrade bitforge"]),
                              ("format", "something-else", ["not a bitforge bundle"])):
        doc = json.loads(dict(members)[MANIFEST])
        doc[key] = value
        _refused(_zip([(n, json.dumps(doc).encode() if n == MANIFEST else b) for n, b in members]), tmp_path,
                 *words)


def test_a_manifest_field_of_the_wrong_type_is_refused(bundle_bytes, tmp_path):
    members = _members(bundle_bytes)
    doc = json.loads(dict(members)[MANIFEST])
    doc["board"]["baud"] = "fast"
    _refused(_zip([(n, json.dumps(doc).encode() if n == MANIFEST else b) for n, b in members]), tmp_path,
             "board.baud should be a positive number")


def test_a_consistently_rewritten_bundle_opens_but_fails_the_expected_digest(bundle_bytes, tmp_path):
    """The limit the module's docstring states: bundle.json rewritten with matching hashes is not detectable
    from inside the archive; the bundle's own digest, obtained separately, is."""
    members = _members(bundle_bytes)
    doc = json.loads(dict(members)[MANIFEST])
    doc["board"]["baud"] = 9600
    forged = _zip([(n, json.dumps(doc).encode() if n == MANIFEST else b) for n, b in members])
    path = tmp_path / "forged.bfb"
    path.write_bytes(forged)
    assert Bundle.open(path).manifest.board.baud == 9600
    good = hashlib.sha256(bundle_bytes).hexdigest()
    with pytest.raises(BundleError, match=f"expected {good}"):
        Bundle.open(path, expect_sha256=good)
    (tmp_path / "good.bfb").write_bytes(bundle_bytes)
    assert Bundle.open(tmp_path / "good.bfb", expect_sha256=good).sha256 == good
    with pytest.raises(BundleError, match="not a SHA-256 digest"):
        Bundle.open(path, expect_sha256="abc")


def test_no_flipped_byte_anywhere_changes_what_opens(bundle_bytes, tmp_path):
    """Flip bytes all over the file (headers, directory, data): each flip is refused, or it touched bytes that
    carry no content (a version field, say) and the bundle opens with exactly the original members."""
    original = {n: b for n, b in _members(bundle_bytes)}
    offsets = np.random.default_rng(1).choice(len(bundle_bytes), size=300, replace=False)
    refused = 0
    for at in offsets:
        data = bytearray(bundle_bytes)
        data[at] ^= 0xFF
        try:
            b = Bundle.from_bytes(bytes(data), "flipped.bfb")
        except BundleError:
            refused += 1
            continue
        assert {n: b.read(n) for n in b.names} == original, at
    assert refused >= 290  # almost every byte of a bundle is checked content or checked structure


# -- unsafe entries -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, words", [
    ("../x", ["'..' component"]),
    ("a/../../x", ["'..' component"]),
    ("/etc/x", ["absolute path"]),
    ("C:\\x", ["backslash"]),
    ("C:/x", ["drive letter"]),
    ("rtl\\x.v", ["backslash"]),
    ("a//x", ["empty or '.' component"]),
    ("./x", ["empty or '.' component"]),
    (".bitforge.json", ["starts with a dot"]),
    ("x\x01y", ["control character"]),
    ("a" * 300, ["longer than 255"]),
])
def test_unsafe_names_are_refused(bundle_bytes, tmp_path, name, words):
    members = _relisted(_members(bundle_bytes) + [(name, b"payload")])
    _refused(_zip(members), tmp_path, *words)


def test_a_name_with_a_nul_is_refused(bundle_bytes, tmp_path):
    """zipfile cuts a name at a NUL (so 'x.v\\0../../evil' reads as 'x.v'); the raw name is what is checked."""
    data = _zip(_relisted(_members(bundle_bytes) + [("rtl/zz.vQ..Qevil", b"payload")]))
    _refused(data.replace(b"rtl/zz.vQ..Qevil", b"rtl/zz.v\0..\0evil"), tmp_path, "NUL or control character")


def test_a_symbolic_link_entry_is_refused(bundle_bytes, tmp_path):
    members = _relisted(_members(bundle_bytes) + [("rtl/link.v", b"/etc/passwd")])
    buf = io.BytesIO(_zip([m for m in members if m[0] != "rtl/link.v"]))
    with zipfile.ZipFile(buf, "a") as zf:
        info = zipfile.ZipInfo("rtl/link.v", date_time=bf.TIMESTAMP)
        info.create_system = 3
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, b"/etc/passwd")
    _refused(buf.getvalue(), tmp_path, "'rtl/link.v'", "symbolic link")


def test_a_folder_entry_is_refused(bundle_bytes, tmp_path):
    members = _members(bundle_bytes)
    buf = io.BytesIO(_zip(members))
    with zipfile.ZipFile(buf, "a") as zf:
        zf.mkdir("rtl2") if hasattr(zf, "mkdir") else zf.writestr("rtl2/", b"")
    _refused(buf.getvalue(), tmp_path, "folder entry")


def test_a_duplicate_name_is_refused(bundle_bytes, tmp_path):
    members = _members(bundle_bytes)
    with pytest.warns(UserWarning, match="Duplicate name"):
        data = _zip(members + [("model.json", b"{}")])
    _refused(data, tmp_path, "'model.json' twice")
    _refused(_zip(_relisted(members + [("MODEL.json", b"{}")])), tmp_path, "differing only in case")


def test_a_huge_declared_size_is_refused_before_reading(bundle_bytes, tmp_path):
    data = bytearray(bundle_bytes)
    with zipfile.ZipFile(io.BytesIO(bundle_bytes)) as zf:
        at = zf.start_dir
    while True:  # find model.onnx's central directory entry; its uncompressed size is at offset 24
        nlen, elen, clen = struct.unpack("<HHH", data[at + 28:at + 34])
        if data[at + 46:at + 46 + nlen] == b"model.onnx":
            break
        at += 46 + nlen + elen + clen
    struct.pack_into("<L", data, at + 24, 4_000_000_000)
    _refused(bytes(data), tmp_path, "'model.onnx'", "declares 4,000,000,000 bytes")


def test_too_many_members_are_refused(tmp_path):
    _refused(_zip([(f"m{i}", b"") for i in range(bf.MAX_MEMBERS + 1)]), tmp_path, "members, more than")


def test_not_a_bundle(tmp_path):
    _refused(b"just some text\n" * 10, tmp_path, "not a bitforge bundle")
    _refused(_zip([("data.pkl", b"\x80\x04K\x01.")]), tmp_path, "no bundle.json")


def test_extract_keeps_the_output_folder_rules(bundle_bytes, tmp_path):
    b = _open(bundle_bytes, tmp_path)
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="bitforge did not write"):
        b.extract(dest)
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]
    b.extract(tmp_path / "fresh")
    b.extract(tmp_path / "fresh")  # its own earlier extraction is replaced
    assert (tmp_path / "fresh" / BITSTREAM).read_bytes() == b.bitstream


@pytest.mark.slow
def test_a_real_board_build_deploys(compiled, tmp_path):
    """The board flow's own report entry and bitstream (place and route on the iCEBreaker's UP5K, about a minute)."""
    out = tmp_path / "out"
    shutil.copytree(compiled, out)
    assert main(["implement", str(out), "--board", "icebreaker"]) == 0
    entry = json.loads((out / "report.json").read_text())["boards"]["icebreaker"]
    done = write_bundle(out, "icebreaker", tmp_path / "kt.bfb")
    b = Bundle.open(tmp_path / "kt.bfb", expect_sha256=done.sha256)
    board = b.manifest.board
    assert b.bitstream == (out / entry["bitstream"]).read_bytes() and hashlib.sha256(b.bitstream).hexdigest() == \
        entry["sha256"]
    assert b.read(board.constraints) == (out / entry["constraints"]).read_bytes()
    assert (board.clock_hz, board.device_clock_hz, board.baud, board.clks_per_bit, board.resources) == (
        entry["clock_hz"], entry["core_clock_hz"], entry["baud"], entry["clks_per_bit"], entry["resources"])
