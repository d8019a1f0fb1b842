"""The wire protocol's Python side: CRC, COBS framing, the decoder's resynchronisation, payload layouts."""
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bitforge.runtime import protocol as p


def test_crc_is_ccitt_false():
    # The check value of CRC-16/CCITT-FALSE (Greg Cook's CRC catalogue).
    assert p.crc16(b"123456789") == 0x29B1


def test_crc_of_a_whole_body_is_zero():
    body = p.encode_body(p.Frame(p.FrameType.INFER, 9, bytes(range(40))))
    assert p.crc16(body) == 0
    assert body[-2:] == p.crc16(body[:-2]).to_bytes(2, "big")


def test_header_is_little_endian():
    body = p.encode_body(p.Frame(0x05, 0x22, bytes(300)))
    assert body[:4] == bytes([0x05, 0x22, 0x2C, 0x01])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=700))
def test_frames_round_trip_and_hold_no_zero(kind, seq, payload):
    wire = p.encode_frame(p.Frame(kind, seq, payload))
    assert wire.index(0) == len(wire) - 1
    assert len(wire) <= p.wire_bytes(len(payload))
    assert p.FrameDecoder().feed(wire) == [p.Frame(kind, seq, payload)]


def test_decoder_resynchronises_after_garbage():
    good = p.encode_frame(p.Frame(p.FrameType.HELLO, 1))
    out = p.FrameDecoder().feed(b"\x13\x37\xff\x00" + good)
    assert isinstance(out[0], p.FrameError) and out[1] == p.Frame(p.FrameType.HELLO, 1)


def test_decoder_ignores_empty_frames():
    assert p.FrameDecoder().feed(b"\x00\x00\x00") == []


def test_decoder_across_chunk_boundaries():
    frames = [p.Frame(2, i, bytes([i, 0, i])) for i in range(20)]
    stream = b"".join(p.encode_frame(f) for f in frames)
    d, got = p.FrameDecoder(), []
    for i in range(0, len(stream), 3):
        got += d.feed(stream[i:i + 3])
    assert got == frames


@pytest.mark.parametrize("damage, code", [
    (lambda b: b[:3], p.ErrorCode.SHORT),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), p.ErrorCode.BAD_CRC),
    (lambda b: b[:2] + struct.pack("<H", 5) + b[4:-2], p.ErrorCode.BAD_LENGTH),
])
def test_bad_bodies_are_named(damage, code):
    body = p.encode_body(p.Frame(2, 3, b"abcdef"))
    bad = damage(body)
    if code == p.ErrorCode.BAD_LENGTH:  # a consistent CRC over a wrong length field
        bad = bad + p.crc16(bad).to_bytes(2, "big")
    with pytest.raises(p.FrameError) as e:
        p.decode_body(bad)
    assert e.value.code == code


def test_bad_cobs_is_named():
    out = p.FrameDecoder().feed(b"\x05\x01\x00")
    assert out[0].code == p.ErrorCode.BAD_COBS


def test_over_long_frame_is_dropped_up_to_its_delimiter():
    d = p.FrameDecoder(max_body=16)
    out = d.feed(b"\x01" * 100 + b"\x00" + p.encode_frame(p.Frame(1, 2)))
    assert out[0].code == p.ErrorCode.TOO_LONG and out[1] == p.Frame(1, 2)
    assert d.pending == 0


def test_decoder_survives_100k_random_and_mutated_frames():
    """Host-side fuzz: no exception escapes, memory stays bounded, and every intact frame is decoded exactly."""
    rng = random.Random(17)
    d = p.FrameDecoder(max_body=p.HEADER_BYTES + 512 + p.CRC_BYTES)
    good = bad = 0
    for i in range(100_000):
        frame = p.Frame(rng.randrange(256), rng.randrange(256), rng.randbytes(rng.randrange(0, 64)))
        wire = bytearray(p.encode_frame(frame))
        kind = rng.randrange(4)
        if kind == 1:  # flip bits
            for _ in range(rng.randrange(1, 4)):
                wire[rng.randrange(len(wire))] ^= 1 << rng.randrange(8)
        elif kind == 2:  # pure garbage
            wire = bytearray(rng.randbytes(rng.randrange(1, 80)))
        elif kind == 3:  # truncated or duplicated bytes
            cut = rng.randrange(len(wire))
            wire = wire[:cut] + wire[cut:][::2] if rng.random() < 0.5 else wire[:cut] + wire[cut - 1:]
        out = d.feed(bytes(wire) + (b"\x00" if kind else b""))
        assert d.pending <= d.max_encoded
        if kind == 0:
            assert out[-1] == frame, i
            good += 1
        bad += sum(isinstance(o, p.FrameError) for o in out)
        if i % 1000 == 999:  # still in step: a clean frame after a resync comes through
            probe = p.Frame(p.FrameType.HELLO, i & 0xFF)
            assert d.feed(b"\x00" + p.encode_frame(probe))[-1] == probe
    assert good > 20_000 and bad > 20_000


def _hello(**changes) -> p.Hello:
    fields = dict(protocol_version=1, capabilities=p.Capability.INFER | p.Capability.WRITE_WEIGHTS, max_payload=256,
                  in_bits=256, out_bits=80, in_count=16, in_elem_bits=16, in_frac=10, in_signed=True, out_count=5,
                  out_elem_bits=16, out_frac=5, out_signed=True, latency_cycles=12, ii=1, state_word_bits=0,
                  state_words=0, weight_word_bits=12, weight_words=4389, clks_per_bit=104,
                  model_id=bytes(range(16)), arch_id=bytes(range(16, 32)), version="0.1.0")
    fields.update(changes)
    return p.Hello(**fields)


def test_hello_round_trips_and_reports_sizes():
    h = _hello()
    payload = h.pack()
    assert len(payload) == 72 + 5
    back = p.Hello.parse(payload)
    assert back == h and back.in_bytes == 32 and back.out_bytes == 10 and back.weight_word_bytes == 2
    assert back.can(p.Capability.WRITE_WEIGHTS) and not back.can(p.Capability.LEARN)


def test_hello_of_another_protocol_version_is_refused_by_name():
    with pytest.raises(p.FrameError, match="protocol version 2"):
        p.Hello.parse(_hello(protocol_version=2).pack())


def test_words_pack_twos_complement_lsb_first():
    word = p.pack_word([-1, 2, -3], 5)
    assert word == 0b11101_00010_11111
    assert p.unpack_word(word, 3, 5) == [-1, 2, -3]
    assert p.words_to_bytes([word], 15) == word.to_bytes(2, "little")
    assert p.bytes_to_words(p.words_to_bytes([-2, 5], 12), 12) == [0xFFE, 5]
    with pytest.raises(p.FrameError):
        p.bytes_to_words(b"\x00\x01\x02", 12)


def test_error_payload_describes_itself():
    e = p.DeviceError.parse(p.DeviceError(p.ErrorCode.WRONG_SHAPE, p.FrameType.INFER, 32).pack())
    assert e.describe() == "wrong_shape (request infer, detail 32)"
