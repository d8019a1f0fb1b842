"""bitforge program BUNDLE: the bundle's checked bitstream is what the programmer gets; wrong bundles are refused."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain.cli import main
from bitforge.toolchain.deploy import write_bundle
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.flows.program import bitstream_from_bundle

BITSTREAM = "impl/icebreaker/kan_tracker_device_icebreaker.bin"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """kan-tracker compiled, with an iCEBreaker entry as the board flow writes it around a stand-in bitstream
    (place and route belongs to the slow tests), deployed with and without the board."""
    root = tmp_path_factory.mktemp("program")
    out = root / "kt"
    assert main(["compile", "kan-tracker", "--to", "onnx", "--to", "rtl", "--vectors", "50", "-o", str(out)]) == 0
    (out / BITSTREAM).parent.mkdir(parents=True)
    (out / BITSTREAM).write_bytes(np.random.default_rng(1).integers(0, 256, 2048, dtype=np.uint8).tobytes())
    report = json.loads((out / "report.json").read_text())
    report["boards"] = {"icebreaker": {
        "board": "icebreaker", "target": "ice40-up5k", "top": "kan_tracker_device_icebreaker", "clock_hz": 12e6,
        "core_clock_hz": 12e6, "pll": None, "baud": 115_384.615, "baud_requested": 115_200, "clks_per_bit": 104,
        "bitstream": BITSTREAM, "constraints": None, "resources": {"lut": 1, "ff": 1, "dsp": 0, "bram": 0},
        "fmax_mhz": 30.0, "seconds": None, "status": "ok",
        "sha256": hashlib.sha256((out / BITSTREAM).read_bytes()).hexdigest()}}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    paths = {"board": root / "board.bfb", "none": root / "none.bfb"}
    write_bundle(out, "icebreaker", paths["board"])
    write_bundle(out, None, paths["none"])
    return {**paths, "out": out}


def test_the_programmer_gets_the_bundles_own_bitstream(bundles, tmp_path, monkeypatch):
    monkeypatch.setenv("BITFORGE_CACHE", str(tmp_path))
    path = bitstream_from_bundle(bundles["board"], "icebreaker")
    assert path.read_bytes() == (bundles["out"] / BITSTREAM).read_bytes()
    assert path.is_relative_to(tmp_path) and path.suffix == ".bin"


def test_dry_run_prints_a_command_for_the_cached_bitstream(bundles, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BITFORGE_CACHE", str(tmp_path))
    assert main(["program", str(bundles["board"]), "--board", "icebreaker", "--dry-run"]) == 0
    digest = hashlib.sha256((bundles["out"] / BITSTREAM).read_bytes()).hexdigest()
    assert f"{digest}.bin" in capsys.readouterr().out


def test_a_bundle_for_another_board_is_refused_by_name(bundles):
    with pytest.raises(BitforgeError, match="for the icebreaker, not the ulx3s"):
        bitstream_from_bundle(bundles["board"], "ulx3s")


def test_a_bundle_without_a_bitstream_says_how_to_build_one(bundles):
    with pytest.raises(BitforgeError, match="no bitstream.*--board icebreaker"):
        bitstream_from_bundle(bundles["none"], "icebreaker")


def test_expect_sha256_refuses_another_bundle(bundles, capsys):
    wrong = hashlib.sha256(bundles["none"].read_bytes()).hexdigest()
    assert main(["program", str(bundles["board"]), "--board", "icebreaker", "--dry-run",
                 "--expect-sha256", wrong]) == 2
    assert "not the bundle the digest was given for" in capsys.readouterr().err


def test_a_tampered_bundle_is_refused_before_anything_runs(bundles, tmp_path, monkeypatch):
    monkeypatch.setenv("BITFORGE_CACHE", str(tmp_path / "cache"))
    data = bytearray(bundles["board"].read_bytes())
    start = data.index(np.random.default_rng(1).integers(0, 256, 2048, dtype=np.uint8).tobytes()[:32])
    data[start + 100] ^= 0xFF  # one byte of the stored bitstream
    bad = tmp_path / "bad.bfb"
    bad.write_bytes(bytes(data))
    with pytest.raises(BitforgeError):
        bitstream_from_bundle(bad, "icebreaker")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.bin"))
