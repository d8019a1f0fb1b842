"""cocotb test bench for a generated online learner: a whole trajectory, every prediction and the coefficient
memory compared bit for bit with the golden model.

Loaded by the simulator as a plain top-level module (absolute imports only). ``BITFORGE_LEARNER_BENCH`` names
a JSON file with the input words (hex), the expected predictions (.npz, int64 codes), read-back checkpoints
(after how many samples, which addresses, which expected words), stall probabilities, the seed and where to
write the result.

The sample and prediction streams go through the shared :mod:`bitforge.toolchain.verify.axis` source (random
gaps), sink (random stalls) and protocol monitors. At each checkpoint the source holds, the bench reads every
coefficient back through the read-back port while the pipeline drains, and the source resumes, so a
checkpoint also proves that reading back does not disturb learning.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import unpack_word
from bitforge.toolchain.verify.axis import (
    AxisSink,
    AxisSource,
    axis_ports,
    clock_cycle,
    protocol_error_count,
    protocol_errors,
    random_pauses,
    read,
    start_clock_and_reset,
)


class ReadbackPort:
    """Fires the queued coefficient addresses on ``rb_req``/``rb_addr`` and collects ``rb_data`` in order."""

    def __init__(self, dut):
        self.dut = dut
        self.queue: list[int] = []
        self.in_flight = 0
        self.data: list[int] = []
        self.active = False
        dut.rb_req.value = 0
        dut.rb_addr.value = 0

    def start(self, addresses) -> None:
        self.queue, self.in_flight, self.data, self.active = list(addresses), 0, [], True

    @property
    def finished(self) -> bool:
        return self.active and not self.queue and not self.in_flight

    def drive(self) -> None:
        self.dut.rb_req.value = int(bool(self.queue))
        if self.queue:
            self.dut.rb_addr.value = self.queue[0]

    def sample(self) -> None:
        if read(self.dut.rb_valid):  # one without a request still counts: the word counts then differ
            self.data.append(read(self.dut.rb_data))
            self.in_flight = max(0, self.in_flight - 1)
        if self.queue and read(self.dut.rb_ready):
            self.queue.pop(0)
            self.in_flight += 1


@cocotb.test()
async def learner_trajectory(dut):
    with open(os.environ["BITFORGE_LEARNER_BENCH"]) as f:
        cfg = json.load(f)
    words = [int(w, 16) for w in cfg["words"]]
    with np.load(cfg["expected"]) as data:
        expected = data["predictions"]
    checkpoints = {int(c["after"]): c for c in cfg["checkpoints"]}
    rng = random.Random(cfg["seed"])
    n, n_out, width = len(words), cfg["out_count"], cfg["out_width"]

    source = AxisSource(axis_ports(dut, "s_axis"), random_pauses(cfg["p_input_gap"], rng))
    sink = AxisSink(axis_ports(dut, "m_axis"), random_pauses(cfg["p_output_stall"], rng))
    readback = ReadbackPort(dut)
    for i, w in enumerate(words):
        source.send(w, int(i == n - 1))
    await start_clock_and_reset(dut, 3)

    mismatches, first, checked = 0, None, 0
    rb_results: dict[int, list[int]] = {}
    cycles = 0
    for cycles in range(1, cfg["max_cycles"] + 1):
        after = source.accepted
        at_checkpoint = after in checkpoints and after not in rb_results
        if at_checkpoint and not readback.active:
            readback.start(checkpoints[after]["addresses"])
        source.hold = at_checkpoint
        await clock_cycle(dut.clk, source, sink, readback)
        if readback.finished:
            rb_results[after] = readback.data
            readback.active = False
        for data, _ in sink.received[checked:]:
            y = unpack_word(data or 0, n_out, width)
            if checked < n and ([int(v) for v in expected[checked]] != y or data is None):
                mismatches += 1
                if first is None:
                    first = {"sample": checked, "expected": [int(v) for v in expected[checked]], "got": y}
            checked += 1
        if checked >= n and len(rb_results) == len(checkpoints):
            break

    rb_mismatches = {}
    for after, c in checkpoints.items():
        want = [int(w, 16) for w in c["words"]]
        have = rb_results.get(after, [])
        rb_mismatches[str(after)] = sum(int(a != b) for a, b in zip(want, have)) + abs(len(want) - len(have))
    errors = protocol_errors(source, sink)
    result = {"samples": n, "predictions": checked, "mismatches": mismatches, "first_mismatch": first,
              "cycles": cycles, "protocol_errors": protocol_error_count(source, sink),
              "readback": {k: {"words": len(checkpoints[int(k)]["words"]), "mismatches": v}
                           for k, v in rb_mismatches.items()}}
    if errors:
        result["first_protocol_error"] = errors[0].to_json()
    with open(cfg["result"], "w") as f:
        json.dump(result, f, indent=2)
    assert not errors, f"{result['protocol_errors']} AXI4-Stream protocol error(s); first: {errors[0]}"
    assert checked == n, f"{checked} of {n} predictions came out in {cfg['max_cycles']} cycles"
    assert mismatches == 0, f"{mismatches} of {n} predictions differ from the golden model; first: {first}"
    assert not any(rb_mismatches.values()), f"coefficient read-back differs from the golden state: {rb_mismatches}"
