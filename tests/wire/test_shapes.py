"""The codec's struct fast path (kbtpsim.wire.shapes) equals its field-by-field way.

``encode``/``decode`` take the fast path for the common messages in network byte order;
these tests hold it to ``encode_fields``/``decode_fields``, which read and write every
message and word every error: the same octets, equal messages (field types included), and
for anything the fast path declines, the field-by-field result or error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbtpsim.wire import (
    AllocStore,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    DecodeError,
    Free,
    Load,
    Message,
    RequestFlag,
    Status,
    Store,
    decode,
    encode,
    shapes,
)
from kbtpsim.wire.codec import decode_fields, encode_fields
from tests.wire.strategies import messages


def _types(msg: Message) -> list[tuple[str, type]]:
    return [(name, type(getattr(msg, name))) for name in msg.__dataclass_fields__]


def _outcome(decoder, data: bytes):  # type: ignore[no-untyped-def]
    try:
        return decoder(data)
    except DecodeError as err:
        return ("error", err.offset, err.reason)


@settings(max_examples=500, deadline=None)
@given(messages, st.booleans())
def test_encode_equals_field_by_field(msg: Message, addr_le: bool) -> None:
    assert encode(msg, addr_le) == encode_fields(msg, addr_le)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.data())
def test_decode_equals_field_by_field(msg: Message, data: st.DataObject) -> None:
    raw = bytearray(encode_fields(msg))
    for _ in range(data.draw(st.integers(0, 3))):  # unchanged, or a few octets changed
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(raw)))
        raw = raw[:cut] + data.draw(st.binary(max_size=24))
    got, want = _outcome(decode, bytes(raw)), _outcome(decode_fields, bytes(raw))
    assert got == want
    if isinstance(want, Message):
        assert _types(got) == _types(want)


_DD = DataDescriptor(0x1234, 0x10_0000, 4096)
_COMMON = [
    Load(flags=RequestFlag.INVALIDATE | RequestFlag.ALLOW_UNSEALED, request_id=7,
         handle=0x4001, generation=3, data_descriptor=_DD),
    Store(flags=RequestFlag.SEAL | RequestFlag.INVALIDATE, request_id=8, handle=0x4002,
          data_descriptor=_DD),
    AllocStore(flags=RequestFlag.INLINE, request_id=9, handle=0x4003,
               data_descriptor=DataDescriptor(0, 0, 5), inline_data=b"hello"),
    Free(request_id=10, handle=0x4004, generation=2),
    Completion(request_id=11, handle=0x4005, generation=4, status=Status.NOT_SEALED,
               data_length=4096, block_offset=1 << 21),
]


def test_the_common_messages_take_the_fast_path() -> None:
    for msg in _COMMON:
        fixed = shapes.write(msg)
        assert fixed is not None and fixed == encode_fields(msg)
        assert shapes.read(fixed) == msg


def test_the_rest_goes_field_by_field() -> None:
    record = Load(flags=RequestFlag.RECORD, request_id=1, handle=2, data_descriptor=_DD,
                  completion_descriptor=CompletionDescriptor(3, 4))
    assert shapes.write(record) is None
    assert shapes.read(encode(record)) is None
    load = encode(_COMMON[0])
    assert shapes.read(load + b"\0") is None  # trailing octet: the error is worded elsewhere
    assert shapes.read(b"\x02" + load[1:]) is None  # Version 2
    inline = bytearray(encode(_COMMON[2]))
    inline[24] = 1  # the STag of an INLINE store's Data Descriptor
    assert shapes.read(bytes(inline)) is None
    with pytest.raises(DecodeError, match="INLINE Data Descriptor must have STag"):
        decode(bytes(inline))
    # ADDR_LE: field by field, both ways
    assert decode(encode(_COMMON[0], True), True) == _COMMON[0]
    assert encode(_COMMON[0], True) == encode_fields(_COMMON[0], True) != load
