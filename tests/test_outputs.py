"""What bitforge writes and never deletes (toolchain/outputs.py, toolchain/processes.py): one test per rule.

Most tests drive the output module directly (milliseconds); the CLI ones stop before any model is loaded,
except the emulate ones, which run on a small hand-built graph.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain import ir, outputs, processes
from bitforge.toolchain.cli import main
from bitforge.toolchain.errors import OutputError
from bitforge.toolchain.outputs import MARKER, check_output, clean_stale, install, keep_failed, output_folder


def user_files(folder: Path) -> dict[str, bytes]:
    """A folder of the user's: thesis.txt and data/a.csv, as in the issue's report."""
    (folder / "data").mkdir(parents=True)
    (folder / "thesis.txt").write_text("three years of work\n")
    (folder / "data" / "a.csv").write_text("1,2,3\n")
    return snapshot(folder)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def bitforge_output(out: Path, text: str = "old") -> Path:
    with output_folder(out, kind="test") as tmp:
        (tmp / "result.txt").write_text(text)
    return out


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, " ".join((cap.out + cap.err).split())


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- a folder bitforge did not write --------------------------------------------------------------------------

def test_a_foreign_folder_is_refused_with_exit_2_and_left_intact(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = user_files(tmp_path / "myproj")
    code, text = run_cli(capsys, "compile", "jet-mlp", "-o", "myproj")
    assert code == 2 and "Traceback" not in text
    assert "myproj" in text and "bitforge did not write" in text and "--force" in text
    assert snapshot(tmp_path / "myproj") == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", [["compile", "jet-mlp"], ["flow", "jet-mlp", "--target", "ecp5-85f"],
                                     ["demo"], ["learn", "t1"], ["quantize", "smollm2", "--method", "rtn"]])
def test_every_folder_writing_command_refuses_a_foreign_folder(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    before = user_files(tmp_path / "myproj")
    code, text = run_cli(capsys, *command, "-o", "myproj")
    assert code == 2 and "bitforge did not write" in text and "Traceback" not in text, text
    assert snapshot(tmp_path / "myproj") == before


def test_force_replaces_a_foreign_folder(tmp_path):
    user_files(tmp_path / "myproj")
    with output_folder(tmp_path / "myproj", kind="test", force=True) as tmp:
        (tmp / "result.txt").write_text("new")
    assert sorted(p.name for p in (tmp_path / "myproj").iterdir()) == [MARKER, "result.txt"]
    assert leftovers(tmp_path) == []


def test_an_empty_folder_is_not_foreign(tmp_path):
    (tmp_path / "empty").mkdir()
    bitforge_output(tmp_path / "empty", "new")
    assert (tmp_path / "empty" / "result.txt").read_text() == "new"


def test_the_marker_names_the_command_and_version_and_no_time(tmp_path):
    out = bitforge_output(tmp_path / "o")
    m = json.loads((out / MARKER).read_text())
    assert m == {"written_by": "bitforge", "command": "test", "version": m["version"]} and m["version"]
    first = (out / MARKER).read_bytes()
    time.sleep(1.1)
    bitforge_output(out)
    assert (out / MARKER).read_bytes() == first  # byte-reproducible outputs


# -- an earlier bitforge output --------------------------------------------------------------------------------

def test_an_earlier_bitforge_output_is_replaced_atomically(tmp_path):
    out = bitforge_output(tmp_path / "o", "old")
    (out / "stale.txt").write_text("from an older run")
    with output_folder(out, kind="test") as tmp:
        (tmp / "result.txt").write_text("new")
        assert (out / "result.txt").read_text() == "old", "the previous output stays until the new one is whole"
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "result.txt"]
    assert (out / "result.txt").read_text() == "new"
    assert leftovers(tmp_path) == []


def test_a_failed_run_leaves_the_previous_output_and_no_temporary_folder(tmp_path):
    out = bitforge_output(tmp_path / "o", "old")
    before = snapshot(out)
    with pytest.raises(ZeroDivisionError):
        with output_folder(out, kind="test") as tmp:
            (tmp / "result.txt").write_text("half")
            1 / 0
    assert snapshot(out) == before and leftovers(tmp_path) == []


def test_a_failed_first_run_leaves_nothing_not_even_the_parents_it_made(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with output_folder(tmp_path / "a" / "b" / "o", kind="test"):
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_between_the_two_renames_is_delivered_after_them(tmp_path, monkeypatch):
    """SIGINT while the previous output is renamed aside: without holding it, OUT would not exist at all."""
    out = bitforge_output(tmp_path / "o", "old")
    real_rename = os.rename

    def rename_then_interrupt(src, dst):
        real_rename(src, dst)
        if ".old-" in str(dst):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # let the handler run if it is going to

    monkeypatch.setattr(outputs.os, "rename", rename_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with output_folder(out, kind="test") as tmp:
            (tmp / "result.txt").write_text("new")
    assert (out / "result.txt").read_text() == "new"
    assert leftovers(tmp_path) == []


def test_a_verification_failure_goes_to_out_failed_and_never_over_a_foreign_one(tmp_path):
    out = bitforge_output(tmp_path / "o", "good")
    user = user_files(tmp_path / "o.failed")
    with output_folder(tmp_path / "staging", kind="test") as tmp:
        (tmp / "evidence.txt").write_text("mismatch")
    where = keep_failed(tmp_path / "staging", out)
    assert where == tmp_path / "o.failed-2" and (where / "evidence.txt").read_text() == "mismatch"
    assert snapshot(tmp_path / "o.failed") == user and (out / "result.txt").read_text() == "good"


def _flow(tmp_path, monkeypatch, implement=None, simulate=None):
    """run_flow on a 4-3-2 MLP with the long stages replaced: what OUT holds when they fail."""
    from test_cli import float_mlp

    from bitforge.toolchain.compiler import CompileOptions, run_flow
    from bitforge.toolchain.flows import implement as implement_module
    from bitforge.toolchain.verify import simulate as simulate_module

    monkeypatch.setattr(implement_module, "implement", implement or (lambda out, target, **kw: {"status": "ok"}))
    monkeypatch.setattr(simulate_module, "simulate", simulate or (lambda out, *a, **kw: {}))
    opts = CompileOptions(to=("onnx", "rtl"), precision="w8a16", input_range=(-2, 2), vectors=200,
                          target="ice40-up5k", reuse="auto")
    return run_flow(str(float_mlp(tmp_path / "m.onnx")), tmp_path / "o", opts, "icarus", 100, 1)


def test_a_flow_whose_tool_fails_still_puts_the_verified_design_in_place(tmp_path, monkeypatch):
    from bitforge.toolchain.flows.tools import ToolFailed

    def implement(out, target, **kw):
        raise ToolFailed(f"nextpnr failed; full log: {out}/impl/pnr.log", Path(out) / "impl" / "pnr.log")

    bitforge_output(tmp_path / "o", "old")
    with pytest.raises(ToolFailed) as e:
        _flow(tmp_path, monkeypatch, implement=implement)
    assert f"full log: {tmp_path / 'o'}/impl/pnr.log" in str(e.value), "the message names OUT, not the temp folder"
    assert e.value.log == tmp_path / "o" / "impl" / "pnr.log"
    assert (tmp_path / "o" / "model.onnx").is_file() and not (tmp_path / "o" / "result.txt").exists()
    assert leftovers(tmp_path) == []


def test_a_flow_whose_simulation_disagrees_keeps_the_previous_output_and_writes_out_failed(tmp_path, monkeypatch):
    from bitforge.toolchain.verify.simulators import SimulationFailed

    def simulate(out, *a, **kw):
        raise SimulationFailed(f"icarus: 3 mismatches (log: {out}/sim/icarus/build/sim.log)")

    before = snapshot(bitforge_output(tmp_path / "o", "old"))
    with pytest.raises(SimulationFailed) as e:
        _flow(tmp_path, monkeypatch, simulate=simulate)
    assert snapshot(tmp_path / "o") == before
    assert (tmp_path / "o.failed" / "model.onnx").is_file()
    assert f"{tmp_path / 'o.failed'}/sim/icarus" in str(e.value) and "artefacts are in" in str(e.value)
    assert leftovers(tmp_path) == []


# -- folders never written, --force or not ---------------------------------------------------------------------

@pytest.mark.parametrize("where,why", [
    (".", "is the current folder"), ("", "is empty"), ("/", "is the root folder"),
    ("..", "holds the current folder"), ("HOME", "is your home folder"), ("HOME_PARENT", "holds your home folder"),
])
def test_root_home_current_folder_and_its_parents_are_refused_even_with_force(tmp_path, monkeypatch, where, why):
    cwd = tmp_path / "home" / "me" / "work" / "sub"
    cwd.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home" / "me"))
    monkeypatch.chdir(cwd)
    path = {"HOME": str(tmp_path / "home" / "me"), "HOME_PARENT": str(tmp_path / "home")}.get(where, where)
    with pytest.raises(OutputError, match=why):
        check_output(path, force=True)


def test_the_folder_holding_the_input_model_is_refused_even_with_force(tmp_path, capsys):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "model.onnx").write_bytes(b"my only copy")
    code, text = run_cli(capsys, "compile", tmp_path / "proj" / "model.onnx", "-o", tmp_path / "proj", "--force")
    assert code == 2 and "holds the input" in text and "Traceback" not in text
    assert (tmp_path / "proj" / "model.onnx").read_bytes() == b"my only copy"
    with pytest.raises(OutputError, match="is the input"):
        check_output(tmp_path / "proj" / "model.onnx", inputs=[tmp_path / "proj" / "model.onnx"], force=True)


def test_a_symlink_is_resolved_and_the_folder_it_points_to_follows_the_same_rules(tmp_path):
    mine = tmp_path / "mine"
    before = user_files(mine)
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(OutputError, match=r"link \(= .*mine\): a folder bitforge did not write"):
        check_output(tmp_path / "link")
    assert snapshot(mine) == before and (tmp_path / "link").is_symlink()

    out = bitforge_output(tmp_path / "out", "old")
    (tmp_path / "to-out").symlink_to(out)
    bitforge_output(tmp_path / "to-out", "new")
    assert (tmp_path / "to-out").is_symlink(), "the link stays a link"
    assert (out / "result.txt").read_text() == "new" and leftovers(tmp_path) == []

    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match="which does not exist"):
        check_output(tmp_path / "dangling")


def test_a_parent_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "notes").write_text("x")
    code, text = run_cli(capsys, "compile", "jet-mlp", "-o", tmp_path / "notes" / "out")
    assert code == 2 and "is a file, not a folder" in text and "Traceback" not in text
    with pytest.raises(OutputError, match="exists and is a file"):
        check_output(tmp_path / "notes", force=True)


def test_a_name_too_long_for_the_file_system_is_refused(tmp_path, capsys):
    code, text = run_cli(capsys, "compile", "jet-mlp", "-o", tmp_path / ("a" * 300))
    assert code == 2 and "300 bytes long" in text and "Traceback" not in text
    limit = os.pathconf(tmp_path, "PC_NAME_MAX") - outputs.NAME_RESERVE
    check_output(tmp_path / ("b" * limit))
    with pytest.raises(OutputError, match=f"keep it to {limit} bytes"):
        check_output(tmp_path / ("b" * (limit + 1)))


def _without_root_overrides() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so a root
    process obeys permission bits like any user (PR_CAPBSET_DROP = 24)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_read_only_parent_is_refused(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    code = textwrap.dedent(f"""
        from bitforge.toolchain.outputs import check_output
        from bitforge.toolchain.errors import OutputError
        try:
            check_output({str(parent / 'out')!r})
        except OutputError as e:
            print(e)
    """)
    as_user = {"preexec_fn": _without_root_overrides} if os.geteuid() == 0 else {}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, **as_user)
    finally:
        parent.chmod(0o755)
    assert "cannot write in" in done.stdout and "permission denied" in done.stdout, done.stdout + done.stderr


# -- permissions, stale temporary folders ----------------------------------------------------------------------

def test_outputs_have_the_users_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        with output_folder(tmp_path / "o", kind="test") as tmp:
            fd = os.open(tmp / "private", os.O_WRONLY | os.O_CREAT, 0o600)  # as safetensors writes its files
            os.close(fd)
            fd = os.open(tmp / "tool", os.O_WRONLY | os.O_CREAT, 0o700)
            os.close(fd)
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "o") == 0o755
    assert mode(tmp_path / "o" / "private") == 0o644 and mode(tmp_path / "o" / "tool") == 0o755


def test_stale_temporary_folders_of_dead_runs_are_removed_by_the_next_run(tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".o.tmp-{dead}-0123abcd"
    stale.mkdir()
    (stale / MARKER).write_text(json.dumps(outputs.marker("compile")))
    (stale / "half.json").write_text("{")
    stale_file = tmp_path / f".y.npy.tmp-{dead}-0123abcd"
    stale_file.write_bytes(b"half")
    alive = tmp_path / f".o.tmp-{os.getppid()}-0123abcd"  # a run still going
    alive.mkdir()
    (alive / MARKER).write_text(json.dumps(outputs.marker("compile")))
    foreign = tmp_path / f".o.tmp-{dead}-89abcdef"  # our name pattern, but not our content
    user_files(foreign)
    bitforge_output(tmp_path / "o")
    assert not stale.exists() and not stale_file.exists()
    assert alive.is_dir() and (foreign / "thesis.txt").is_file()


def test_a_previous_output_renamed_aside_by_a_killed_run_is_put_back(tmp_path):
    dead = dead_pid()
    bitforge_output(tmp_path / "x", "previous").rename(tmp_path / f".o.old-{dead}-0123abcd")
    assert clean_stale(tmp_path) == []
    assert (tmp_path / "o" / "result.txt").read_text() == "previous"


def test_install_refuses_a_folder_bitforge_did_not_write_as_its_source(tmp_path):
    user_files(tmp_path / "mine")
    with pytest.raises(OutputError, match="not a folder bitforge wrote"):
        install(tmp_path / "mine", tmp_path / "o")
    assert (tmp_path / "mine" / "thesis.txt").is_file()


# -- emulate -o: a file ----------------------------------------------------------------------------------------

@pytest.fixture
def compiled(tmp_path, graph):
    out = tmp_path / "model"
    out.mkdir()
    ir.save(graph, out)
    x = np.random.default_rng(0).uniform(-2, 2, size=(5, 4))
    np.save(tmp_path / "x.npy", x)
    return out, tmp_path / "x.npy"


def test_emulate_writes_its_file_atomically(compiled, capsys, monkeypatch):
    out, x = compiled
    y = x.with_name("y.npy")
    y.write_bytes(b"previous")
    def interrupted_save(f, a):
        f.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", interrupted_save)
    assert main(["emulate", str(out), "--input", str(x), "-o", str(y)]) == 130
    assert y.read_bytes() == b"previous" and leftovers(y.parent) == []
    monkeypatch.undo()
    code, text = run_cli(capsys, "emulate", out, "--input", x, "-o", y)
    assert code == 0 and np.load(y).shape == (5, 3), text
    assert stat.S_IMODE(y.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_emulate_refuses_an_output_that_names_its_input(compiled, capsys):
    out, x = compiled
    before = x.read_bytes()
    for given in (x, x.with_suffix("")):  # np.save's naming: Y becomes Y.npy
        code, text = run_cli(capsys, "emulate", out, "--input", x, "-o", given)
        assert code == 2 and "is the input" in text and "Traceback" not in text, text
        assert x.read_bytes() == before
    (out.parent / "y.npy").mkdir()
    code, text = run_cli(capsys, "emulate", out, "--input", x, "-o", out.parent / "y.npy")
    assert code == 2 and "is a folder" in text


# -- child processes -------------------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_child_runs_in_its_own_process_group_that_ends_with_an_interrupt():
    proc = processes.start(["sh", "-c", "sleep 60 & sleep 60; wait"])
    try:
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
        time.sleep(0.3)
        grandchildren = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) ==
                         proc.pid and int(p.name) != proc.pid]
        assert grandchildren, "sh started its sleeps"
        timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            processes.wait(proc)
    finally:
        processes.end(proc)
    assert all(_gone_within(pid, 5) for pid in grandchildren), "the whole group, not only the leader"
    assert processes.running() == []


def _pgid(pid: int):
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_a_child_dies_with_a_killed_bitforge():
    """SIGKILL runs no cleanup: the kernel ends the child (PR_SET_PDEATHSIG, set before exec)."""
    code = ("import sys, time; from bitforge.toolchain import processes; "
            "p = processes.start(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    assert _gone_within(child, 5)


def test_an_interrupt_ends_the_worker_threads_children_at_once():
    """flow implements in a worker thread: an interrupt of the main thread must not wait for its yosys."""
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with processes.worker_thread("test") as pool:
            job = pool.submit(processes.run, ["sleep", "60"])
            while not processes.running():
                time.sleep(0.02)
            child = processes.running()[0].pid
            raise KeyboardInterrupt
    assert time.monotonic() - t0 < 10 and not _alive(child)
    assert job.result() == -signal.SIGKILL
    assert processes.run(["true"]) == 0, "new children start again once the worker has stopped"


def test_sigterm_raises_like_ctrl_c_and_the_cli_exits_128_plus_the_signal():
    code = ("import os, signal, sys; from bitforge.toolchain import cli\n"
            "cli.cmd_inspect = lambda args: os.kill(os.getpid(), signal.SIGTERM) or 0\n"
            "sys.exit(cli.main(['inspect']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 143 and "Traceback" not in done.stderr
    assert (done.stdout + done.stderr).strip().splitlines()[-1] == "stopped by SIGTERM"
