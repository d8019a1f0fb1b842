"""The deploy benchmark's timing model: byte counts from real frames, cycles from the design."""
import pytest

from bitforge.runtime import protocol
from bitforge.toolchain.bench.wire_timing import DeviceShape, frame_bytes, round_trip

JET = DeviceShape(in_bytes=32, out_bytes=10, latency_cycles=12, ii=1, max_payload=256, clock_hz=12e6)


def test_frame_bytes_are_the_encoded_frame():
    payload = bytes(range(1, 33))  # no zero: COBS adds one code byte
    assert frame_bytes(payload) == len(payload) + 6 + 1 + 1


def test_one_sample_at_115200_is_wire_bound():
    rt = round_trip(JET, 1, 115_200)
    assert 32 + 6 + 2 <= rt.request_bytes <= protocol.wire_bytes(32)
    expected_wire = (rt.request_bytes + rt.answer_bytes) * 10 / 115_200
    assert rt.wire_s == pytest.approx(expected_wire)
    assert rt.core_s == pytest.approx(12 / 12e6)
    assert rt.wire_share > 0.99


def test_batches_amortise_the_frame_overhead():
    one, many = round_trip(JET, 1, 3e6), round_trip(JET, JET.max_batch(), 3e6)
    assert JET.max_batch() == 8
    assert many.samples_per_s > one.samples_per_s * 1.3
    assert many.core_s == pytest.approx((12 + 7) / 12e6)


def test_batch_beyond_max_payload_is_refused():
    with pytest.raises(ValueError, match="max_payload"):
        round_trip(JET, 9, 115_200)
