"""The simulated board (runtime/sim_board.py + runtime/simboard/sim_main.cpp) with the UART echo fixture
(tests/sim_board/uart_echo.v), reached through pyserial like a real port.

Builds go to the user cache (``$BITFORGE_CACHE``/simboard), so only the first run pays Verilator's 10-30 s per
fixture build; pytest-xdist workers building the same hash at once is one of the cases the build handles."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import serial

from bitforge.runtime.sim_board import (SimBoard, SimBoardBuildError, SimBoardError, build_sim_board,
                                        default_cache_dir)

FIXTURE = Path(__file__).parent / "sim_board" / "uart_echo.v"
TOP = "uart_echo"
DELAY = 100_000   # the stamp fixture's reply delay, in cycles (busy high): far beyond the idle tail
IDLE_TAIL = 256   # the harness's default for CLKS_PER_BIT <= 12


def echo_board(clks_per_bit: int, **params) -> Path:
    return build_sim_board([FIXTURE], TOP, clks_per_bit, params=params)


@pytest.fixture(scope="module")
def echo4() -> Path:
    return echo_board(4)


@pytest.fixture(scope="module")
def stamp4() -> Path:
    return echo_board(4, DELAY=DELAY, STAMP=1)


def read_exactly(port: serial.Serial, n: int) -> bytes:
    data = port.read(n)
    assert len(data) == n, f"got {len(data)} of {n} bytes before the timeout"
    return data


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaps yet (an orphan in a container whose init does not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_every_byte_value_passes_untouched(echo4):
    # The bytes a cooked terminal would translate or swallow: NUL, LF, CR, XON/XOFF, Ctrl-C/D/Z, ESC, DEL, 0xFF.
    special = bytes([0x00, 0xFF, 0x0A, 0x0D, 0x11, 0x13, 0x03, 0x04, 0x1A, 0x1B, 0x7F, 0x0D, 0x0A, 0x13, 0x11])
    data = special + bytes(range(256)) + bytes(range(255, -1, -1))
    with SimBoard(echo4) as board:
        with serial.Serial(board.port, timeout=10) as port:
            port.write(data)
            assert read_exactly(port, len(data)) == data
            port.timeout = 0.2
            assert port.read(1) == b""  # and nothing more
    stats = board.stats
    assert stats.bytes_to_device == stats.bytes_from_device == len(data)
    assert (stats.framing_errors, stats.flipped_to_device, stats.flipped_from_device) == (0, 0, 0)


def test_many_kilobytes_in_one_write_arrive_back_to_back(echo4):
    data = os.urandom(64 * 1024)
    with SimBoard(echo4) as board:
        with serial.Serial(board.port, timeout=20) as port:
            port.write(data)
            assert read_exactly(port, len(data)) == data
    # Each frame is 10 bits of 4 cycles, back to back: the simulated time is the frames, the reset, and an idle
    # tail each time the harness ran out of host bytes and slept (the host's writes came in pieces), and the
    # echo of the last frame, which ends about 45 cycles after that frame. One idle cycle between frames would
    # add 65,536 cycles.
    stats = board.stats
    assert stats.bytes_to_device == len(data)
    assert len(data) * 40 <= stats.cycles <= 16 + len(data) * 40 + (stats.sleeps + 1) * (IDLE_TAIL + 1) + 100


def test_the_board_outlives_a_closed_port(echo4):
    with SimBoard(echo4) as board:
        for round_ in range(3):
            with serial.Serial(board.port, timeout=10) as port:
                msg = bytes([round_]) * 100 + b"\r\n"
                port.write(msg)
                assert read_exactly(port, len(msg)) == msg


def flipped_run(exe: Path, data: bytes, rate: float, seed: int) -> tuple[bytes, object]:
    with SimBoard(exe, flip_rate=rate, seed=seed) as board:
        with serial.Serial(board.port, timeout=20) as port:
            port.write(data)
            got = read_exactly(port, len(data))
    return got, board.stats


def test_flip_rate_flips_the_expected_share_reproducibly(echo4):
    n, rate = 20_000, 0.01
    data = bytes((i * 37 + 11) & 0xFF for i in range(n))
    got, stats = flipped_run(echo4, data, rate, seed=7)
    again, stats_again = flipped_run(echo4, data, rate, seed=7)
    other, stats_other = flipped_run(echo4, data, rate, seed=8)
    assert again == got and (stats_again.flipped_to_device, stats_again.flipped_from_device) == (
        stats.flipped_to_device, stats.flipped_from_device)
    assert other != got
    # Binomial(20000, 0.01): mean 200, standard deviation 14; five of them either way.
    for flips in (stats.flipped_to_device, stats.flipped_from_device, stats_other.flipped_to_device):
        assert 130 <= flips <= 270, flips
    # One bit per flip: a byte flipped on one way differs in one bit, on both ways in 0 or 2; every flip toggles
    # one bit, so the total number of differing bits has the parity of the number of flips.
    bits = [bin(a ^ b).count("1") for a, b in zip(data, got)]
    assert max(bits) <= 2
    assert sum(bits) <= stats.flipped_to_device + stats.flipped_from_device
    assert sum(bits) % 2 == (stats.flipped_to_device + stats.flipped_from_device) % 2
    assert stats.framing_errors == 0  # data bits are flipped, never the start or stop bit


def test_flip_rate_one_flips_every_byte_both_ways(echo4):
    data = bytes(range(256)) * 4
    got, stats = flipped_run(echo4, data, 1.0, seed=1)
    assert stats.flipped_to_device == stats.flipped_from_device == len(data)
    assert all(bin(a ^ b).count("1") in (0, 2) for a, b in zip(data, got))
    assert got != data


def test_busy_keeps_the_clock_running_and_a_host_pause_is_not_time(stamp4):
    """The stamp fixture answers each byte DELAY cycles later with the cycles since the previous byte. The reply
    needs DELAY cycles of busy (far beyond the idle tail); the 0.5 s the host sleeps between two bytes would be
    millions of cycles if idle time were simulated, and is none."""
    with SimBoard(stamp4) as board:
        with serial.Serial(board.port, timeout=10) as port:
            port.write(b"\x01")
            read_exactly(port, 4)
            time.sleep(0.5)
            port.write(b"\x02")
            (gap,) = struct.unpack("<I", read_exactly(port, 4))
    # From the first byte's arrival: DELAY, four reply frames (160 cycles), the idle tail, then the second frame
    # (40 cycles) once the host sends it, plus the fixture's input synchroniser and the check interval.
    assert DELAY + 160 <= gap <= DELAY + 160 + IDLE_TAIL + 40 + 1024, gap
    assert board.stats.cycles < 2 * (DELAY + 160 + IDLE_TAIL + 40 + 1024)


def test_a_bad_stop_bit_is_counted_and_reported_not_forwarded(stamp4):
    # 0xF0 makes the fixture send 0xA5 with a low stop bit, then a good 0x55.
    with SimBoard(stamp4) as board:
        with serial.Serial(board.port, timeout=10) as port:
            port.write(b"\xf0")
            assert read_exactly(port, 1) == b"\x55"
            port.timeout = 0.3
            assert port.read(1) == b""
    assert board.stats.framing_errors == 1
    assert board.stats.bytes_from_device == 1
    assert "framing error" in board.log and "0xa5" in board.log


def test_no_cpu_while_idle(echo4):
    with SimBoard(echo4) as board:
        with serial.Serial(board.port, timeout=10) as port:
            port.write(b"ping")
            assert read_exactly(port, 4) == b"ping"
            time.sleep(0.2)
            before = cpu_seconds(board.pid)
            time.sleep(1.0)
            used = cpu_seconds(board.pid) - before
    assert used < 0.05, f"the idle board used {used:.2f} s of CPU in 1 s"
    # ... and simulated nothing while idle: the reset, two 4-byte streams, a tail, a check interval.
    assert board.stats.cycles < 16 + 8 * 40 + 2 * IDLE_TAIL + 1024


def test_stop_ends_and_reaps_the_process(echo4):
    board = SimBoard(echo4).start()
    pid = board.pid
    assert board.running and Path(board.port).exists()
    stats = board.stop()
    assert not board.running and stats.cycles >= 16
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: not even a zombie is left
    with pytest.raises(SimBoardError, match="not running"):
        board.port


def test_sigint_ends_it_cleanly_with_statistics(echo4):
    board = SimBoard(echo4).start()
    os.killpg(board.pid, signal.SIGINT)
    deadline = time.monotonic() + 5
    while board.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not board.running
    stats = board.stop()
    assert stats.cycles >= 16
    assert "stopped by signal 2" in board.log


def test_it_dies_with_its_parent(echo4, tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from bitforge.runtime.sim_board import SimBoard
        board = SimBoard({str(echo4)!r}, log_dir={str(tmp_path)!r}).start()
        print(board.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert not gone(pid)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone(pid), "the simulated board outlived its parent"
    # SIGTERM from PR_SET_PDEATHSIG, handled: the statistics were written on the way out.
    assert (tmp_path / "stats.json").is_file()
    assert "stopped by signal 15" in (tmp_path / "board.log").read_text()


def test_a_cached_build_is_instant(echo4, stamp4):
    t0 = time.monotonic()
    again = echo_board(4)
    assert time.monotonic() - t0 < 1.0
    assert again == echo4 and echo4.is_file()
    assert echo4.parent.parent == default_cache_dir()
    assert stamp4 != echo4  # another parameter set is another build


def test_a_build_that_loses_the_race_uses_the_winners(tmp_path):
    """Another process finishes the same build while this one is compiling (it runs inside the progress message
    that starts this build): this build's rename finds the folder in place and returns the winner's executable
    untouched, leaving no temporary folder."""
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        from bitforge.runtime.sim_board import build_sim_board
        print(build_sim_board([{str(FIXTURE)!r}], {TOP!r}, 6, cache_dir={str(cache)!r}))
    """)
    winner = {}

    def another_process_builds_first(message: str) -> None:
        if message.startswith("building"):
            out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
            winner["path"] = Path(out.stdout.strip())
            winner["inode"] = winner["path"].stat().st_ino

    exe = build_sim_board([FIXTURE], TOP, 6, cache_dir=cache, progress=another_process_builds_first)
    assert exe == winner["path"] and exe.stat().st_ino == winner["inode"]
    assert [p.name for p in cache.iterdir()] == [exe.parent.name]
    with SimBoard(exe) as board, serial.Serial(board.port, timeout=10) as port:
        port.write(b"race")
        assert read_exactly(port, 4) == b"race"


def test_a_verilator_error_names_the_log(tmp_path):
    bad = tmp_path / "broken.v"
    bad.write_text("module broken(input clk, input rst, input uart_rx, output uart_tx, output busy);\n"
                   "  assign uart_tx = nosuchsignal;\nendmodule\n")
    messages = []
    with pytest.raises(SimBoardBuildError, match="broken") as err:
        build_sim_board([bad], "broken", 4, cache_dir=tmp_path / "cache", progress=messages.append)
    assert err.value.log.is_file() and str(err.value.log) in str(err.value)
    assert "nosuchsignal" in err.value.log.read_text()
    assert "%Error" in str(err.value)
    assert len(messages) == 1 and "Verilator" in messages[0]
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]  # no half-built folder left


def test_a_top_without_the_boards_ports_says_which_ports(tmp_path):
    no_busy = tmp_path / "no_busy.v"
    no_busy.write_text("module no_busy #(parameter integer CLKS_PER_BIT = 4)\n"
                       "  (input clk, input rst, input uart_rx, output uart_tx);\n"
                       "  assign uart_tx = uart_rx;\nendmodule\n")
    with pytest.raises(SimBoardBuildError, match=r"no member named .busy.*needs a top with the ports"):
        build_sim_board([no_busy], "no_busy", 4, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("kwargs, match", [
    (dict(clks_per_bit=0), "clks_per_bit"),
    (dict(top="not a name"), "module name"),
    (dict(files=["/nonexistent/device.v"]), "/nonexistent/device.v"),
    (dict(params={"CLKS_PER_BIT": 8}), "pass CLKS_PER_BIT as clks_per_bit"),
    (dict(params={"W": 1.5}), "neither an integer nor a string"),
])
def test_bad_build_arguments_are_refused(kwargs, match, tmp_path):
    args = dict(files=[FIXTURE], top=TOP, clks_per_bit=4, cache_dir=tmp_path)
    args.update(kwargs)
    with pytest.raises(SimBoardError, match=match):
        build_sim_board(**args)


def test_a_board_that_cannot_start_says_why(echo4, tmp_path):
    # The echo board was built without waveform support; the harness refuses --trace with a reason.
    with pytest.raises(SimBoardError, match="trace=True"):
        SimBoard(echo4, trace=tmp_path / "w.fst").start()
    with pytest.raises(SimBoardError, match="does not exist"):
        SimBoard(tmp_path / "nothing").start()
    with pytest.raises(SimBoardError, match="flip_rate"):
        SimBoard(echo4, flip_rate=1.5)


@pytest.mark.parametrize("clks_per_bit", [4, 16])
def test_throughput(clks_per_bit, record_property):
    """Echoes 64 KiB and reports the host's bytes per second (each way) and the simulated cycles per second;
    ``pytest -s`` prints them. The floor is far below what a small design reaches (10-20 M cycles/s here)."""
    exe = echo_board(clks_per_bit)
    data = os.urandom(64 * 1024)
    with SimBoard(exe) as board:
        with serial.Serial(board.port, timeout=30) as port:
            t0 = time.perf_counter()
            port.write(data)
            assert read_exactly(port, len(data)) == data
            seconds = time.perf_counter() - t0
    cycles_per_s = board.stats.cycles / board.stats.run_seconds
    record_property("bytes_per_second", round(len(data) / seconds))
    record_property("cycles_per_second", round(cycles_per_s))
    print(f"\nCLKS_PER_BIT {clks_per_bit}: {len(data) / seconds / 1e3:.0f} kB/s each way, "
          f"{cycles_per_s / 1e6:.1f} M cycles/s")
    assert cycles_per_s > 1e6


@pytest.mark.slow
def test_trace_writes_a_waveform(tmp_path):
    exe = build_sim_board([FIXTURE], TOP, 4, trace=True)
    fst = tmp_path / "board.fst"
    with SimBoard(exe, trace=fst) as board:
        with serial.Serial(board.port, timeout=10) as port:
            port.write(b"wave")
            assert read_exactly(port, 4) == b"wave"
    assert board.stats.bytes_from_device == 4
    assert fst.is_file() and fst.stat().st_size > 100
