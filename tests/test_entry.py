"""The console script: a Ctrl-C at any moment of start-up ends the run with one line, never a traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BITFORGE = Path(sys.executable).with_name("bitforge")


def test_ctrl_c_while_the_cli_imports_is_one_line_and_exit_130():
    """A KeyboardInterrupt raised by the import of the CLI module itself (numpy, rich and the parser load there)."""
    code = ("import sys, importlib.abc\n"
            "class Stop(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'bitforge.toolchain.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Stop())\n"
            "from bitforge.toolchain.entry import main\n"
            "sys.exit(main())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == "stopped by SIGINT"


@pytest.mark.parametrize("delay", [0.15, 0.4, 0.8, 1.5])
def test_sigint_early_in_a_real_run_never_prints_a_traceback(tmp_path, delay):
    """Before Python installs its handler the default action ends the process (-2, silent); after, bitforge's
    one line and 130. Either way, no traceback."""
    assert BITFORGE.exists(), f"{BITFORGE}: the console script is missing; make setup installs it"
    proc = subprocess.Popen([str(BITFORGE), "compile", "jet-mlp", "-o", str(tmp_path / "out")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert not (tmp_path / "out").exists()


def test_a_signal_that_lands_in_a_callback_python_swallows_still_stops_the_run():
    """Python prints "Exception ignored" and carries on when the handler raises inside a weakref or gc callback
    (seen with importlib's module-lock callback); bitforge sends the signal again, so the run still stops."""
    code = ("import os, signal, time, weakref\n"
            "from bitforge.toolchain.processes import signals_raise\n"
            "class A: pass\n"
            "def cb(_):\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    for _ in range(1000): pass\n"
            "try:\n"
            "    with signals_raise():\n"
            "        a = A(); r = weakref.ref(a, cb); del a\n"
            "        end = time.monotonic() + 10\n"
            "        while time.monotonic() < end: pass\n"
            "    print('not interrupted')\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "interrupted" and "Traceback" not in p.stderr, (p.stdout, p.stderr)


def test_an_interrupt_an_extension_turned_into_an_import_error_is_still_an_interrupt(capsys, monkeypatch):
    """Ctrl-C during onnxruntime's pybind11 initialisation surfaces as ``ImportError: initialization failed``
    raised from the KeyboardInterrupt: bitforge stops with its one line and 130, not a traceback."""
    from bitforge.toolchain import cli

    def import_fails(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["inspect"].set_defaults(func=import_fails)
    assert cli.main(["inspect"]) == 130
    assert capsys.readouterr().err.strip() == "stopped by SIGINT"
