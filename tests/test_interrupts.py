"""Signals sent to a running ``bitforge compile`` and ``bitforge flow`` (real processes, as a user's Ctrl-C, a
scheduler's SIGTERM or an OOM killer's SIGKILL would): the previous output stays byte-identical, no temporary
folder is left (a killed run's is removed by the next run), no child tool of the run stays alive, and the exit
status is 128 + the signal with one line and no traceback.

The model is a 4-3-2 float ONNX MLP (tests/test_cli.py), so a compile takes seconds; a large --vectors keeps
the ONNX check (and so the temporary folder) going long enough to be interrupted at a chosen moment.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import float_mlp

BITFORGE = str(Path(sys.executable).with_name("bitforge"))
MODEL_FLAGS = ["--precision", "w8a16", "--input-range=-2,2"]
CHILD_TOOLS = ("yowasp", "iverilog", "vvp", "verilator", "make")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return float_mlp(tmp_path_factory.mktemp("model") / "m.onnx")


@pytest.fixture(scope="module")
def previous(model, tmp_path_factory) -> Path:
    """An earlier bitforge output of the same model, copied into each test's OUT."""
    out = tmp_path_factory.mktemp("previous") / "out"
    done = subprocess.run([BITFORGE, "compile", str(model), "-o", str(out), *MODEL_FLAGS, "--vectors", "500"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def out(previous, tmp_path) -> tuple[Path, dict[str, bytes]]:
    target = tmp_path / "work" / "out"
    shutil.copytree(previous, target)
    return target, snapshot(target)


class Run:
    """A bitforge process in a session of its own (as a terminal job), its output in files."""

    def __init__(self, args: list[str], cwd: Path):
        self.log = cwd / "bitforge.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([BITFORGE, *args], cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.seen: dict[int, tuple[int, str]] = {}  # descendant pid -> (process group, command line)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def watch(self) -> None:
        """Record every descendant of the run (its process group and command) as it appears."""
        table = proc_table()
        family, frontier = set(), {self.proc.pid}
        while frontier:
            children = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - family
            family |= children
            frontier = children
        for pid in family:  # the latest command line: a child starts as the guard that execs the tool
            self.seen[pid] = (table[pid][1], table[pid][2])

    def wait_for(self, condition, what: str, timeout: float = 240) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.watch()
            if condition():
                return
            if self.proc.poll() is not None:
                pytest.fail(f"bitforge ended (exit {self.proc.returncode}) before {what}:\n{self.text()[-3000:]}")
            time.sleep(0.05)
        self.proc.kill()
        pytest.fail(f"no {what} within {timeout} s:\n{self.text()[-3000:]}")

    def signal(self, signum: int, group: bool = False) -> int:
        self.watch()
        (os.killpg if group else os.kill)(self.proc.pid, signum)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"bitforge did not stop within 120 s of signal {signum}:\n{self.text()[-3000:]}")

    def tools_seen(self) -> list[str]:
        return [cmd for _, cmd in self.seen.values() if any(t in cmd for t in CHILD_TOOLS)]

    def survivors(self) -> list[str]:
        """Processes still alive in a process group (or with a pid) that belonged to the run."""
        groups = {pgid for pgid, _ in self.seen.values()} - {os.getpgid(0)}
        return [f"{pid} {cmd}" for pid, (_, pgid, cmd) in proc_table().items()
                if pgid in groups or self.seen.get(pid, (None, None))[1] == cmd]


def proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, command line) of every live (not zombie) process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[2]), cmd)
    return table


def gone_within(run: Run, seconds: float) -> list[str]:
    end = time.monotonic() + seconds
    while (left := run.survivors()) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def assert_stopped_cleanly(code: int, signum: int, run: Run, out: Path, before: dict[str, bytes]) -> None:
    text = run.text()
    assert code == 128 + signum, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert text.strip().splitlines()[-1] == f"stopped by {signal.Signals(signum).name}", text[-3000:]
    assert snapshot(out) == before, "the previous output is byte-identical"
    assert leftovers(out.parent) == [], "no temporary folder left"
    assert gone_within(run, 5) == [], "no child process of the run left alive"


def staging(out: Path):
    return lambda: any(p.name.startswith(f".{out.name}.tmp-") for p in out.parent.iterdir())


# -- compile ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("signum,moment,group", [
    (signal.SIGTERM, "loading", False),        # before the temporary folder exists
    (signal.SIGTERM, "verifying", False),      # the temporary folder holds the IR and model.onnx
    (signal.SIGINT, "staging", True),          # Ctrl-C in a terminal: SIGINT to the whole foreground group
], ids=["sigterm-loading", "sigterm-verifying", "ctrl-c-staging"])
def test_a_signal_to_a_running_compile_leaves_the_previous_output_and_no_temp_folder(model, out, signum, moment,
                                                                                      group):
    out, before = out
    run = Run(["compile", str(model), "-o", str(out), *MODEL_FLAGS, "--vectors", "1000000"], out.parent)
    if moment == "loading":
        run.wait_for(lambda: "loading" in run.text(), "loading line")
    elif moment == "staging":
        run.wait_for(staging(out), "temporary folder")
    else:
        run.wait_for(lambda: "verifying golden model" in run.text() and staging(out)(), "verification")
        time.sleep(0.5)
    assert_stopped_cleanly(run.signal(signum, group), signum, run, out, before)


def test_a_sigkilled_compile_leaves_its_temp_folder_to_the_next_run(model, out):
    out, _ = out
    run = Run(["compile", str(model), "-o", str(out), *MODEL_FLAGS, "--vectors", "1000000"], out.parent)
    run.wait_for(staging(out), "temporary folder")
    assert run.signal(signal.SIGKILL) == -signal.SIGKILL
    assert leftovers(out.parent), "SIGKILL runs no cleanup"
    done = subprocess.run([BITFORGE, "compile", str(model), "-o", str(out), *MODEL_FLAGS, "--vectors", "200"],
                          capture_output=True, text=True, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    assert leftovers(out.parent) == [], "the next run removed the dead run's temporary folder"
    assert '"vectors": 200' in (out / "report.json").read_text()


# -- flow ------------------------------------------------------------------------------------------------------

FLOW = ["flow", "--target", "ice40-up5k", "--simulator", "icarus", "--sim-vectors", "20000", "--vectors", "500"]


def _tools_running(run: Run):
    def both() -> bool:
        alive = proc_table()
        running = [cmd for pid, (_, cmd) in run.seen.items() if pid in alive and "prctl" not in cmd]
        return any("yowasp" in c for c in running) and any(("vvp" in c or "iverilog" in c) for c in running)
    return both


def test_sigterm_to_a_running_flow_ends_its_tools_and_keeps_the_previous_output(model, out):
    """SIGTERM while yosys (the worker thread's) and the simulator (the main thread's) run."""
    out, before = out
    run = Run([FLOW[0], str(model), *FLOW[1:], "-o", str(out), *MODEL_FLAGS], out.parent)
    run.wait_for(_tools_running(run), "yosys and a simulator running at once")
    assert_stopped_cleanly(run.signal(signal.SIGTERM), signal.SIGTERM, run, out, before)
    assert any("yowasp" in c for c in run.tools_seen())


@pytest.mark.slow
def test_ctrl_c_to_a_running_flow_ends_its_tools_and_keeps_the_previous_output(model, out):
    out, before = out
    run = Run([FLOW[0], str(model), *FLOW[1:], "-o", str(out), *MODEL_FLAGS], out.parent)
    run.wait_for(_tools_running(run), "yosys and a simulator running at once")
    assert_stopped_cleanly(run.signal(signal.SIGINT, group=True), signal.SIGINT, run, out, before)


@pytest.mark.slow
def test_a_sigkilled_flow_leaves_no_tool_running(model, out):
    """No cleanup runs after SIGKILL: the kernel ends each direct child (PR_SET_PDEATHSIG)."""
    out, before = out
    run = Run([FLOW[0], str(model), *FLOW[1:], "-o", str(out), *MODEL_FLAGS], out.parent)
    run.wait_for(_tools_running(run), "yosys and a simulator running at once")
    assert run.signal(signal.SIGKILL) == -signal.SIGKILL
    assert gone_within(run, 10) == []
    assert snapshot(out) == before
