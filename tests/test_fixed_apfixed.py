"""``fixed.quantize`` and ``fixed.requantize`` against the ap_fixed C++ headers that hls4ml ships, bit for bit.

``tests/apfixed_probe.cpp`` instantiates ``ap_fixed``/``ap_ufixed`` for every rounding and overflow mode on a
table of shapes (I < 0, I > W, one bit, widths 63/70/80 for the big-int path) and answers conversion requests
with raw bits. It is compiled once per source/header/compiler hash into a cache under the temp folder, so only
the first session pays the compile (about 30 s on 2 cores). A missing g++ or hls4ml is a failure, not a skip:
these headers are the reference the HLS backend is checked against.
"""
from __future__ import annotations

import fcntl
import hashlib
import math
import os
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain import fixed
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding

PROBE_SOURCE = Path(__file__).with_name("apfixed_probe.cpp")
# NDEBUG: ap_private's get_bit asserts "Attempting to read bit beyond MSB" when a conversion's right shift
# exceeds the source width (ap_fixed_base::operator= reads the rounding bit before it decides to use the
# sign instead); the bit it reads is discarded, so the release build gives ap_fixed's defined result.
CXXFLAGS = ["-O1", "-std=c++14", "-w", "-DNDEBUG"]
MODE_PAIRS = [(r, o) for r in Rounding for o in Overflow]
PAIR_IDS = [f"{r.value}-{o.value}" for r, o in MODE_PAIRS]


# -- building and talking to the probe ------------------------------------------------------------

def _ap_types_dir() -> Path:
    try:
        import hls4ml
    except ImportError:
        pytest.fail("hls4ml is not installed; it ships the ap_fixed headers these tests use as the reference "
                    "(pip install 'bitforge[test]')")
    d = Path(hls4ml.__file__).parent / "templates" / "vivado" / "ap_types"
    if not (d / "ap_fixed.h").is_file():
        pytest.fail(f"{d}/ap_fixed.h not found: this hls4ml version no longer ships the ap_types headers")
    return d


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.fail("g++ not found on PATH: the ap_fixed reference tests compile hls4ml's ap_fixed headers; "
                    "install g++ (Debian/Ubuntu: apt-get install -y g++)")
    return gxx


def _probe_key(gxx: str, headers: Path) -> str:
    h = hashlib.sha256(PROBE_SOURCE.read_bytes())
    h.update(subprocess.run([gxx, "--version"], capture_output=True, text=True).stdout.encode())
    h.update(" ".join(CXXFLAGS).encode())
    for f in sorted(headers.rglob("*.h")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def _compile(gxx: str, headers: Path, out: Path) -> None:
    """Compile the two halves of the case table and the main part in parallel, then link."""
    work = Path(tempfile.mkdtemp(prefix="build-", dir=out.parent))
    try:
        jobs = []
        for part in ("1", "2", ""):
            obj = work / f"part{part or 'main'}.o"
            cmd = [gxx, *CXXFLAGS, f"-I{headers}", *([f"-DPROBE_PART={part}"] if part else []), "-c",
                   str(PROBE_SOURCE), "-o", str(obj)]
            jobs.append((cmd, obj, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                    text=True)))
        logs = [proc.communicate()[0] for _, _, proc in jobs]  # wait for all before failing on one
        for (cmd, _, proc), log in zip(jobs, logs):
            if proc.returncode:
                pytest.fail(f"compiling the ap_fixed probe failed ({' '.join(cmd)}):\n{log[-4000:]}")
        exe = work / "apfixed_probe"
        link = subprocess.run([gxx, *(str(o) for _, o, _ in jobs), "-o", str(exe)], capture_output=True, text=True)
        if link.returncode:
            pytest.fail(f"linking the ap_fixed probe failed:\n{link.stderr[-4000:]}")
        os.replace(exe, out)  # atomic: a concurrent session sees no binary or the finished one
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class ProbeCase:
    """One destination type of the probe's table and the source types it converts from."""

    index: int
    dst: FixedType
    sources: tuple[FixedType, ...]


def _mode(text: str, enum):
    return enum(text.removeprefix("AP_"))


def _parse_case(line: str) -> ProbeCase:
    f = line.split()
    idx, w, i, s = (int(v) for v in f[:4])
    dst = FixedType(w, i, bool(s), _mode(f[4], Rounding), _mode(f[5], Overflow))
    rest = [int(v) for v in f[6:]]
    sources = tuple(FixedType(rest[k], rest[k + 1], bool(rest[k + 2])) for k in range(0, len(rest), 3))
    return ProbeCase(idx, dst, sources)


class ApFixedProbe:
    """The compiled probe: one process per batch of requests (it starts in milliseconds)."""

    def __init__(self, exe: Path) -> None:
        self.exe = exe
        lines = self._run(["L"], expect=None)
        if lines[-1] != "END":
            pytest.fail(f"{exe}: case listing not terminated by END")
        self.cases = [_parse_case(line) for line in lines[:-1]]

    def _run(self, requests: list[str], expect: int | None) -> list[str]:
        r = subprocess.run([str(self.exe)], input="\n".join(requests) + "\n", capture_output=True, text=True,
                           timeout=300)
        if r.returncode:
            pytest.fail(f"{self.exe} exited with {r.returncode}: {r.stderr[-2000:]}")
        lines = r.stdout.splitlines()
        if expect is not None and len(lines) != expect:
            pytest.fail(f"{self.exe}: {len(lines)} answers for {expect} requests")
        return lines

    def ask(self, requests: list[str]) -> list[str]:
        return self._run(requests, expect=len(requests))


@pytest.fixture(scope="session")
def probe() -> ApFixedProbe:
    gxx, headers = _gxx(), _ap_types_dir()
    root = Path(tempfile.gettempdir()) / "bitforge-apfixed-probe"
    root.mkdir(parents=True, exist_ok=True)
    exe = root / f"apfixed_probe-{_probe_key(gxx, headers)}"
    with open(root / f"{exe.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel workers wait for one compile instead of repeating it
        if not exe.is_file():
            _compile(gxx, headers, exe)
    return ApFixedProbe(exe)


# -- raw bits <-> codes -----------------------------------------------------------------------------

def code_from_hex(text: str, t: FixedType) -> int:
    v = int(text, 16)
    return v - (1 << t.width) if t.signed and v >> (t.width - 1) else v


def hex_from_code(q: int, t: FixedType) -> str:
    return format(q & ((1 << t.width) - 1), "x")


def describe(t: FixedType, q: int) -> str:
    return f"code {q} (raw 0x{hex_from_code(q, t)}, value {float(fixed.to_float(np.array([q], dtype=object), t)[0])!r})"


# -- inputs ------------------------------------------------------------------------------------------

def tie_codes(t: FixedType, rng: random.Random) -> list[int]:
    """k for the ties (k + 1/2) LSB: around zero, around both ends of the range and beyond, and at random."""
    lo, hi = t.min_code, t.max_code
    ks = list(range(-4, 4))
    for edge in (lo, hi, -hi, 2 * lo - 1, 2 * hi + 1):
        ks += range(edge - 2, edge + 3)
    ks += [rng.randint(2 * min(lo, -hi) - 8, 2 * hi + 8) for _ in range(60)]
    return ks


def double_inputs(t: FixedType, rng: random.Random) -> list[float]:
    """Exact ties (k + 1/2 LSB), their float neighbours, random reals over 4x the range, and extremes."""
    lsb_exp = -t.frac
    ties = [math.ldexp(2 * k + 1, lsb_exp - 1) for k in tie_codes(t, rng)]
    neighbours = [float(np.nextafter(v, s)) for v in ties for s in (-math.inf, math.inf)]
    span = math.ldexp(1.0, t.integer)
    uniform = [rng.uniform(-4 * span, 4 * span) for _ in range(80)]
    dyadic = [math.ldexp(rng.randint(-(1 << 12), 1 << 12), lsb_exp - rng.randint(0, 4)) for _ in range(60)]
    extremes = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -2.2250738585072014e-308, 1e300, -1e300,
                1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, 0.5, -0.5]
    extremes += [s * math.ldexp(1.0, lsb_exp + e) for s in (1, -1) for e in (-60, -1, 0, t.width, t.width + 70)]
    values = ties + neighbours + uniform + dyadic + extremes
    return list({v.hex(): v for v in values}.values())  # distinct, -0.0 kept apart from 0.0


def source_codes(src: FixedType, dst: FixedType, rng: random.Random) -> list[int]:
    """Codes of ``src``: ties and their neighbours at dst's rounding point near dst's range ends, and random."""
    if src.width <= 10:
        return list(range(src.min_code, src.max_code + 1))
    d = src.frac - dst.frac
    bases = [dst.min_code, dst.max_code, -dst.max_code, 0, 1, -1, dst.max_code + 1, dst.min_code - 1]
    bases += [rng.randint(dst.min_code - 4, dst.max_code + 4) for _ in range(24)]
    codes = []
    for b in bases:
        if d > 0:
            half = 1 << (d - 1)
            codes += [(b << d) + off for off in (-half - 1, -half, -half + 1, -1, 0, 1, half - 1, half, half + 1)]
        else:
            codes += [(b >> -d) + off for off in (-1, 0, 1)]
    codes += [rng.randint(src.min_code, src.max_code) for _ in range(80)]
    codes += [src.min_code, src.max_code, src.min_code + 1, src.max_code - 1]
    return sorted({c for c in codes if src.min_code <= c <= src.max_code})


# -- comparisons ---------------------------------------------------------------------------------------

def _cases_for(probe: ApFixedProbe, rounding: Rounding, overflow: Overflow) -> list[ProbeCase]:
    cases = [c for c in probe.cases if c.dst.rounding == rounding and c.dst.overflow == overflow]
    assert cases, f"the probe table has no type with {rounding.value}/{overflow.value}"
    return cases


def _report(what: str, bad: list[str], total: int) -> str:
    return f"{len(bad)} of {total} {what} differ from ap_fixed; first ones:\n" + "\n".join(bad[:12])


@pytest.mark.parametrize(("rounding", "overflow"), MODE_PAIRS, ids=PAIR_IDS)
def test_quantize_matches_ap_fixed_double_constructor(probe, rounding, overflow):
    requests, expected = [], []
    for case in _cases_for(probe, rounding, overflow):
        values = double_inputs(case.dst, random.Random(case.index))
        got = fixed.quantize(np.array(values), case.dst)
        requests += [f"D {case.index} {v.hex()}" for v in values]
        expected += [(case.dst, v, int(q)) for v, q in zip(values, got.ravel())]
    answers = probe.ask(requests)
    bad = []
    for (t, v, ours), raw in zip(expected, answers):
        ref = code_from_hex(raw, t)
        if ref != ours:
            bad.append(f"  {t.to_ap()}({v!r} = {v.hex()}): ap_fixed gives {describe(t, ref)}, "
                       f"fixed.quantize {describe(t, ours)}")
    assert not bad, _report("double conversions", bad, len(expected))


@pytest.mark.parametrize(("rounding", "overflow"), MODE_PAIRS, ids=PAIR_IDS)
def test_requantize_matches_ap_fixed_assignment(probe, rounding, overflow):
    requests, expected = [], []
    for case in _cases_for(probe, rounding, overflow):
        rng = random.Random(10_000 + case.index)
        for k, src in enumerate(case.sources):
            codes = source_codes(src, case.dst, rng)
            got = fixed.requantize(np.array(codes, dtype=object), src, case.dst)
            requests += [f"R {case.index} {k} {hex_from_code(c, src)}" for c in codes]
            expected += [(src, case.dst, c, int(q)) for c, q in zip(codes, got.ravel())]
    answers = probe.ask(requests)
    bad = []
    for (src, t, c, ours), raw in zip(expected, answers):
        ref = code_from_hex(raw, t)
        if ref != ours:
            bad.append(f"  {src.to_ap()} {describe(src, c)} -> {t.to_ap()}: ap_fixed gives {describe(t, ref)}, "
                       f"fixed.requantize {describe(t, ours)}")
    assert not bad, _report("fixed-to-fixed conversions", bad, len(expected))


def test_probe_table_covers_every_mode_and_shape(probe):
    pairs = {(c.dst.rounding, c.dst.overflow, c.dst.signed) for c in probe.cases}
    assert pairs == {(r, o, s) for r, o in MODE_PAIRS for s in (True, False)}
    shapes = {(c.dst.width, c.dst.integer) for c in probe.cases}
    assert any(i < 0 for _, i in shapes) and any(i > w for w, i in shapes)
    assert any(w > 64 for w, _ in shapes) and any(w == 1 for w, _ in shapes)


def test_probe_reads_and_writes_raw_bits_as_ap_fixed_defines_them(probe):
    """Hand-derived answers from the ap_fixed rules (UG1399), so a broken probe cannot pass silently."""
    def index(w, i, s, q, o):
        t = FixedType(w, i, s, q, o)
        return next(c.index for c in probe.cases if c.dst == t)

    rnd = index(8, 3, True, "RND", "SAT")
    conv = index(8, 3, True, "RND_CONV", "SAT")
    wrap = index(8, 3, True, "TRN", "WRAP")
    usat = index(8, 3, False, "TRN", "SAT")
    lsb = 2.0 ** -5
    answers = probe.ask([f"D {rnd} {0.5 * lsb}", f"D {conv} {0.5 * lsb}", f"D {conv} {1.5 * lsb}",
                         f"D {rnd} -{0.5 * lsb}", f"D {rnd} 100", f"D {rnd} -100", f"D {wrap} 4",
                         f"D {usat} -1", f"D {usat} 100", f"R {wrap} 0 3c000"])
    # 0.5 LSB: RND -> 1, RND_CONV -> 0 (even); 1.5 LSB: RND_CONV -> 2; -0.5 LSB: RND -> 0;
    # SAT: 0x7f / 0x80; WRAP of 4.0 in <8,3>: 4 * 32 = 128 -> 0x80; ap_ufixed SAT: 0x00 / 0xff;
    # source 0 is ap_fixed<18,6> (12 fraction bits): raw 0x30000 = -4.0 -> 0x80 in <8,3>.
    assert answers == ["01", "00", "02", "00", "7f", "80", "80", "00", "ff", "80"]
