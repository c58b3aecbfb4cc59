"""Random and mutated octets make decode raise DecodeError and nothing else."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbtpsim.wire import DecodeError, Message, Status, decode, encode
from tests.wire.strategies import messages


def _decode_or_error(data: bytes, addr_le: bool) -> None:
    try:
        msg = decode(data, addr_le=addr_le)
    except DecodeError as err:
        assert err.status is Status.MALFORMED
        assert 0 <= err.offset <= len(data)
        assert err.reason
        return
    assert isinstance(msg, Message)
    # Whatever decodes re-encodes to a message that decodes the same.
    assert decode(encode(msg, addr_le=addr_le), addr_le=addr_le) == msg


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_random_bytes(data: bytes, addr_le: bool) -> None:
    _decode_or_error(data, addr_le)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.sampled_from([0x01, 0x02, 0x10, 0x11, 0x12, 0x13, 0x14,
                                                 0x20, 0x30]), st.booleans())
def test_random_bodies_of_known_opcodes(tail: bytes, opcode: int, addr_le: bool) -> None:
    _decode_or_error(bytes([1, opcode]) + tail, addr_le)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.booleans(), st.data())
def test_mutated_messages(msg: Message, addr_le: bool, data: st.DataObject) -> None:
    raw = bytearray(encode(msg, addr_le=addr_le))
    action = data.draw(st.sampled_from(["flip", "truncate", "extend", "splice"]))
    if action == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
    elif action == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    elif action == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=32))
    else:
        i = data.draw(st.integers(0, len(raw)))
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=16))
    _decode_or_error(bytes(raw), addr_le)
