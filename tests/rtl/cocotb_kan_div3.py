"""cocotb bench for bf_kan_div3: floor(t / 3) for every t of its width (combinational, so no clock)."""
from __future__ import annotations

import cocotb
from cocotb.triggers import Timer


@cocotb.test()
async def every_input_divides_exactly(dut):
    width = len(dut.t)
    for t in range(1 << width):
        dut.t.value = t
        await Timer(1, unit="ns")
        q = int(dut.q.value)
        assert q == t // 3, f"W={width}: t=0x{t:x} ({t}): q={q}, floor(t/3)={t // 3}"
