"""cocotb test bench for a generated online learner: a whole trajectory, every prediction and the coefficient
memory compared bit for bit with the golden model.

Loaded by the simulator as a plain top-level module (absolute imports only). ``BITFORGE_LEARNER_BENCH`` names
a JSON file with the input words (hex), the expected predictions (.npz, int64 codes), read-back checkpoints
(after how many samples, which addresses, which expected words), stall probabilities, the seed and where to
write the result.

One coroutine, one step per clock, sampled as in :mod:`bitforge.toolchain.verify.cocotb_bench`: drive at the
falling edge, settle (ReadOnly), record the handshakes the next rising edge performs. The input stream has
random gaps (tvalid low), the output random stalls (tready low); at each checkpoint the bench stops feeding,
reads every coefficient back through the read-back port while the pipeline drains, and resumes, so a
checkpoint also proves that reading back does not disturb learning.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import unpack_word
from bitforge.toolchain.verify.cocotb_bench import start_and_reset
from cocotb.triggers import FallingEdge, ReadOnly


@cocotb.test()
async def learner_trajectory(dut):
    with open(os.environ["BITFORGE_LEARNER_BENCH"]) as f:
        cfg = json.load(f)
    words = [int(w, 16) for w in cfg["words"]]
    with np.load(cfg["expected"]) as data:
        expected = data["predictions"]
    checkpoints = {int(c["after"]): c for c in cfg["checkpoints"]}
    rng = random.Random(cfg["seed"])
    p_gap, p_stall = cfg["p_input_gap"], cfg["p_output_stall"]
    n, n_out, width = len(words), cfg["out_count"], cfg["out_width"]

    dut.rb_req.value = 0
    dut.rb_addr.value = 0
    await start_and_reset(dut, 3)

    sent, got, holding = 0, [], False
    mismatches, first = 0, None
    rb_results: dict[int, list[int]] = {}
    rb_queue: list[int] = []   # addresses still to fire at the current checkpoint
    rb_fired: list[int] = []   # fired, data not yet seen
    rb_data: list[int] = []
    done_checkpoints = set()
    cycles = 0
    for cycles in range(cfg["max_cycles"]):
        await FallingEdge(dut.clk)
        at_checkpoint = sent in checkpoints and sent not in done_checkpoints
        if at_checkpoint and not rb_queue and not rb_fired and not rb_data:
            rb_queue = list(checkpoints[sent]["addresses"])
        if at_checkpoint and not holding:
            dut.s_axis_tvalid.value = 0
            dut.rb_req.value = 1 if rb_queue else 0
            if rb_queue:
                dut.rb_addr.value = rb_queue[0]
        else:
            dut.rb_req.value = 0
            if holding or (sent < n and rng.random() >= p_gap):
                holding = True
                dut.s_axis_tvalid.value = 1
                dut.s_axis_tdata.value = words[sent]
                dut.s_axis_tlast.value = int(sent == n - 1)
            else:
                dut.s_axis_tvalid.value = 0
        dut.m_axis_tready.value = int(rng.random() >= p_stall)
        await ReadOnly()
        if int(dut.rb_valid.value):
            rb_data.append(int(dut.rb_data.value))
            rb_fired.pop(0)
        if holding and int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
            sent += 1
            holding = False
        if int(dut.rb_req.value) and int(dut.rb_ready.value):
            rb_fired.append(rb_queue.pop(0))
        if at_checkpoint and not rb_queue and not rb_fired and rb_data:
            rb_results[sent] = rb_data
            rb_data = []
            done_checkpoints.add(sent)
        if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
            y = unpack_word(int(dut.m_axis_tdata.value), n_out, width)
            i = len(got)
            got.append(y)
            if i < n and [int(v) for v in expected[i]] != y:
                mismatches += 1
                if first is None:
                    first = {"sample": i, "expected": [int(v) for v in expected[i]], "got": y}
        if len(got) >= n and len(done_checkpoints) == len(checkpoints):
            break

    rb_mismatches = {}
    for after, c in checkpoints.items():
        want = [int(w, 16) for w in c["words"]]
        have = rb_results.get(after, [])
        rb_mismatches[str(after)] = sum(int(a != b) for a, b in zip(want, have)) + abs(len(want) - len(have))
    result = {"samples": n, "predictions": len(got), "mismatches": mismatches, "first_mismatch": first,
              "cycles": cycles + 1, "readback": {k: {"words": len(checkpoints[int(k)]["words"]), "mismatches": v}
                                                 for k, v in rb_mismatches.items()}}
    with open(cfg["result"], "w") as f:
        json.dump(result, f, indent=2)
    assert len(got) == n, f"{len(got)} of {n} predictions came out in {cfg['max_cycles']} cycles"
    assert mismatches == 0, f"{mismatches} of {n} predictions differ from the golden model; first: {first}"
    assert not any(rb_mismatches.values()), f"coefficient read-back differs from the golden state: {rb_mismatches}"
