"""The device top: a core's 8-bit board top behind the wire protocol's frame engine and a UART.

``<name>_device`` (ports ``clk``, ``rst`` (active-high, synchronous), ``uart_rx``, ``uart_tx``, ``busy``;
parameters ``CLKS_PER_BIT`` and ``TIMEOUT_CLKS``) is what a board flow and the simulated board build. Inside it,
``<name>_protocol`` is the same design at the byte level (the UART's byte streams instead of its pins): the
frame engine (``rtl/bf_frame_engine.v`` and the modules it uses) around the board top. Tests drive that one for
speed; it is the same logic.

Everything model-specific is a parameter of the hand-written engine, generated here from the protocol's one
Python home (:mod:`bitforge.runtime.protocol`): the type and error codes, and the ``hello`` answer, packed by
:class:`~bitforge.runtime.protocol.Hello` itself, with the offsets of the two fields the engine patches at run
time (``clks_per_bit``, from the ``CLKS_PER_BIT`` parameter, and ``model_id``, which ``write_weights`` /
``commit_weights`` change) found by packing, so the RTL and the host cannot drift apart.

Buffers: the RX buffer holds a payload and its CRC; the TX buffer holds the kept answer COBS-encoded, plus 16
bytes at its top for an error frame (so an error never overwrites the kept answer). Both are 2**AW bytes, at
least 512 (one iCE40 block RAM each); ``max_payload`` is the largest payload whose encoded frame fits, 488 at
512 bytes, and AW grows for models whose words or ``hello`` need more.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from ...fixed import FixedType, clog2
from ...identity import arch_id, learner_arch_id, learner_model_id, model_id
from ...ir import Graph
from ...version import bitforge_version
from .verilog import RtlError, templates, verilog_name
from bitforge.runtime.protocol import (
    ID_BYTES, PROTOCOL_VERSION, RESPONSE_BIT, Capability, ErrorCode, FrameType, Hello, wire_bytes, word_bytes)

__all__ = ["DeviceSpec", "DeviceDesign", "DEFAULT_CLKS_PER_BIT", "TIMEOUT_BIT_TIMES", "ENGINE_LIBRARY",
           "UART_LIBRARY", "write_device", "device_for_model", "device_for_learner", "generate_device", "buffer_sizes",
           "hello_field_offset"]

#: The default of the device top's CLKS_PER_BIT: the simulated board's (its UART runs at clk / 4, the least
#: bf_uart_rx accepts, so a simulated frame costs the fewest clocks). Board flows set their own.
DEFAULT_CLKS_PER_BIT = 4
#: TIMEOUT_CLKS = TIMEOUT_BIT_TIMES * CLKS_PER_BIT by default: 50 byte times of silence inside a frame. At
#: 115200 baud that is 4.3 ms, several USB full-speed frames (1 ms), so a host whose write is split across USB
#: packets is not cut off, yet far below any host's answer timeout, so a lost partial frame costs little.
TIMEOUT_BIT_TIMES = 500
#: Buffer address bits at least: 512-byte buffers, one block RAM each on iCE40, ECP5 and Gowin.
MIN_BUFFER_AW = 9
#: Bytes at the top of the TX buffer for an error frame (10 body bytes, 11 encoded).
ERROR_SLOT = 16
ENGINE_LIBRARY = ("bf_frame_engine.v", "bf_frame_rx.v", "bf_cobs_decode.v", "bf_cobs_encode.v", "bf_crc16.v",
                  "bf_ram_sdp.v")
UART_LIBRARY = ("bf_uart_rx.v", "bf_uart_tx.v")


@dataclass(frozen=True)
class DeviceSpec:
    """What the device top needs to know about the design inside it."""

    name: str                   # the core's Verilog name; the tops are <name>_protocol and <name>_device
    board_top: str
    board_files: tuple[str, ...]  # the board top's files, relative to the output folder
    in_bits: int
    out_bits: int
    in_count: int
    in_type: FixedType
    out_count: int
    out_type: FixedType
    latency_cycles: int
    ii: int
    model_id: str               # hex digests (identity.model_id / arch_id; a learner's learner_model_id / _arch_id)
    arch_id: str
    learner: bool = False
    rb_addr_bits: int = 0       # learners: the read-back port
    rb_data_bits: int = 0
    weights: Optional[dict] = None  # the manifest's "weights" section of a --weights ram build


@dataclass(frozen=True)
class DeviceDesign:
    """The generated device: files (name -> text), library modules, and the manifest's ``device`` section."""

    files: dict
    library: tuple[str, ...]
    manifest: dict


def device_for_model(g: Graph, manifest: dict) -> DeviceSpec:
    """The device of a compiled model from its graph and the RTL manifest ``generate`` produced."""
    if manifest.get("bus_width", 8) != 8:
        raise RtlError(f"the device wrapper needs the board top's 8-bit streams, this design has "
                       f"{manifest['bus_width']}-bit ones; generate it with bus_width 8")
    x, y = g.tensors[manifest["input_tensor"]], g.tensors[manifest["output_tensor"]]
    weights = manifest.get("weights")
    return DeviceSpec(
        verilog_name(g.name), manifest["board_top"], tuple(manifest["files"]), manifest["in_width"],
        manifest["out_width"], math.prod(x.shape), x.dtype, math.prod(y.shape), y.dtype, manifest["latency_cycles"],
        manifest["ii"], model_id(g), arch_id(g),
        weights=weights if isinstance(weights, dict) and weights.get("mode") == "ram" else None)


def device_for_learner(learner, design) -> DeviceSpec:
    """The device of an online learner (``learn.spec.Learner``) from its generated core (``LearnerRtl``); its ids
    cover the update rule and every format (:func:`~bitforge.toolchain.identity.learner_arch_id`)."""
    f = learner.formats
    d_in, d_out = learner.spec.sizes[0], learner.spec.sizes[-1]
    man = design.manifest()
    return DeviceSpec(
        design.name, man["top"], tuple(man["files"]), design.in_width, design.out_width, d_in, f.input, d_out,
        f.datapath, design.latency_cycles, design.ii, learner_model_id(learner), learner_arch_id(learner), learner=True,
        rb_addr_bits=design.rb_addr_width, rb_data_bits=design.rb_data_width)


def buffer_sizes(need_payload: int) -> tuple[int, int]:
    """(address bits, max_payload) of the smallest buffers (at least 2**MIN_BUFFER_AW bytes) whose payload
    holds ``need_payload`` bytes: the TX buffer keeps an encoded answer plus the error slot, the RX buffer a
    payload and its CRC."""
    aw = MIN_BUFFER_AW
    while True:
        size = 1 << aw
        mp = size - 2
        while mp > 0 and wire_bytes(mp) - 1 + ERROR_SLOT > size:  # wire_bytes counts the 0x00, the buffer not
            mp -= 1
        if mp >= need_payload:
            return aw, mp
        aw += 1


def hello_field_offset(hello: Hello, field: str, size: int) -> int:
    """Where ``field`` (``size`` bytes) sits in ``hello.pack()``: the bytes that change when only it changes."""
    value = getattr(hello, field)
    ones = b"\xff" * size if isinstance(value, bytes) else (1 << (8 * size)) - 1
    zeros = bytes(size) if isinstance(value, bytes) else 0
    a = dataclasses.replace(hello, **{field: zeros}).pack()
    b = dataclasses.replace(hello, **{field: ones}).pack()
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    if len(diff) != size or diff != list(range(diff[0], diff[0] + size)):
        raise RtlError(f"hello field {field} is not {size} contiguous bytes in runtime/protocol.py's layout")
    return diff[0]


def _hello(spec: DeviceSpec, max_payload: int, clks_per_bit: int) -> Hello:
    caps = Capability.INFER
    if spec.learner:
        caps |= Capability.LEARN | Capability.READ_STATE
    w = spec.weights
    if w:
        caps |= Capability.WRITE_WEIGHTS
    return Hello(
        PROTOCOL_VERSION, int(caps), max_payload, spec.in_bits, spec.out_bits,
        spec.in_count, spec.in_type.width, spec.in_type.frac, spec.in_type.signed,
        spec.out_count, spec.out_type.width, spec.out_type.frac, spec.out_type.signed,
        spec.latency_cycles, spec.ii, spec.rb_data_bits, (1 << spec.rb_addr_bits) if spec.learner else 0,
        int(w["word_bits"]) if w else 0, int(w["words"]) if w else 0, clks_per_bit,
        bytes.fromhex(spec.model_id)[:ID_BYTES], bytes.fromhex(spec.arch_id)[:ID_BYTES], bitforge_version())


def _hello_json(h: Hello) -> dict:
    return {k: (v.hex() if isinstance(v, bytes) else v) for k, v in dataclasses.asdict(h).items()}


def generate_device(spec: DeviceSpec, folder: str = "rtl") -> DeviceDesign:
    """The device top's Verilog and the manifest's ``device`` section (files relative to the output folder,
    the generated and library files living in ``folder``). Deterministic: the same spec gives the same text."""
    in_bytes, out_bytes = word_bytes(spec.in_bits), word_bytes(spec.out_bits)
    state_bytes = word_bytes(spec.rb_data_bits) if spec.learner else 0
    w = spec.weights
    w_bytes = word_bytes(int(w["word_bits"])) if w else 0
    probe = _hello(spec, 0, 0)
    hello_len = len(probe.pack())
    aw, max_payload = buffer_sizes(max(hello_len, in_bytes, out_bytes, 6, state_bytes, 4 + w_bytes, ID_BYTES))
    hello = _hello(spec, max_payload, 0)
    hello_bytes = hello.pack()
    le_bit = spec.in_bits - 1
    ctx = dict(
        name=spec.name, board_top=spec.board_top, learner=spec.learner, ram=bool(w),
        cpb=DEFAULT_CLKS_PER_BIT, timeout_bits=TIMEOUT_BIT_TIMES,
        max_payload=max_payload, aw=aw, hello_len=hello_len,
        hello_hex=f"{8 * hello_len}'h{hello_bytes[::-1].hex()}",
        cpb_at=hello_field_offset(hello, "clks_per_bit", 4), mid_at=hello_field_offset(hello, "model_id", ID_BYTES),
        in_bytes=in_bytes, out_bytes=out_bytes, le_byte=le_bit // 8 if spec.learner else 0,
        le_mask=(1 << (le_bit % 8)) if spec.learner else 0,
        state_words=(1 << spec.rb_addr_bits) if spec.learner else 0, state_bytes=max(1, state_bytes),
        rb_aw=max(1, spec.rb_addr_bits), rb_bw=max(1, clog2(max(1, state_bytes))),
        w_bytes=max(1, w_bytes), w_dw=int(w["word_bits"]) if w else 8, w_aw=int(w["addr_bits"]) if w else 1,
        w_words=int(w["words"]) if w else 0,
        types={t.name: t.value for t in FrameType}, errors={e.name: e.value for e in ErrorCode},
        response_bit=RESPONSE_BIT)
    text = templates().get_template("device.v.j2").render(**ctx)
    name = f"{spec.name}_device.v"
    library = tuple(sorted(ENGINE_LIBRARY + UART_LIBRARY))
    files = sorted(set(spec.board_files) | {f"{folder}/{name}"} | {f"{folder}/{n}" for n in library})
    manifest = {
        "top": f"{spec.name}_device", "protocol_top": f"{spec.name}_protocol", "files": files,
        "protocol_version": PROTOCOL_VERSION, "hello": _hello_json(dataclasses.replace(
            hello, clks_per_bit=DEFAULT_CLKS_PER_BIT)),
        "max_payload": max_payload, "in_bytes": in_bytes, "out_bytes": out_bytes,
        "clks_per_bit_default": DEFAULT_CLKS_PER_BIT, "timeout_clks": TIMEOUT_BIT_TIMES * DEFAULT_CLKS_PER_BIT,
        "timeout_bit_times": TIMEOUT_BIT_TIMES, "buffer_bytes": 1 << aw}
    if w:
        manifest["weights"] = {k: w[k] for k in ("mode", "word_bits", "addr_bits", "words", "arch_id") if k in w}
    return DeviceDesign({name: text}, library, manifest)


def write_device(rtl_folder, spec: DeviceSpec) -> dict:
    """Write the device top and the library modules it adds into ``rtl_folder`` (an output folder's ``rtl/``,
    beside the board top's files); returns the manifest's ``device`` section."""
    from pathlib import Path

    from .generate import library_source

    folder = Path(rtl_folder)
    design = generate_device(spec, folder.name)
    for name, text in sorted(design.files.items()):
        (folder / name).write_text(text)
    for name in design.library:
        (folder / name).write_text(library_source(name))
    return design.manifest
