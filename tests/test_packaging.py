"""A wheel built from the repo works away from the checkout (package-dir mapping + package data)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist),
                        str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next(dist.glob("bitforge-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in ("bitforge/toolchain/cli.py", "bitforge/toolchain/fixed.py", "bitforge/models/__init__.py",
                 "bitforge/runtime/__init__.py", "bitforge/rtl/README.md", "bitforge/hls/README.md",
                 "bitforge/toolchain/compress/neuqi_search.c", "bitforge/runtime/simboard/sim_main.cpp"):
        assert must in names, must

    # A fresh venv without pip whose only link to the dev environment is a .pth to its site-packages
    # for the dependencies (torch, onnx, ...); the editable install's finder is not loaded from there.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    zipfile.ZipFile(wheel).extractall(site)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    code = ("import bitforge.toolchain as t, bitforge.toolchain.resources as r; "
            "assert str(t.__file__).startswith(%r), t.__file__; "
            "print(r.rtl_library().joinpath('README.md').read_text()[:6])" % str(site))
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# rtl/")
    out = tmp_path / "demo"
    r = subprocess.run([str(py), "-m", "bitforge.toolchain.cli", "compile", "kan-tracker", "-o", str(out),
                        "--vectors", "500"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "model.onnx").is_file()
