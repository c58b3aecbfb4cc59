"""The codec against the draft's own vectors, its layouts and its decode errors.

Vectors: draft section "Examples" (repeated in shared/spec/FORMATS.md).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    DecodeError,
    DirectDescriptor,
    Feature,
    Free,
    Goodbye,
    GoodbyeFlag,
    Hello,
    HelloAck,
    Load,
    Opcode,
    RequestFlag,
    Status,
    Store,
    decode,
    encode,
)
from tests.wire.strategies import MESSAGE_STRATEGIES

# draft, "Examples": ALLOC_STORE of "KVBLOCK!" to handle 0x4001, Request ID 7, INLINE.
ALLOC_STORE_VECTOR = bytes.fromhex(
    "01 12 00 01 00 00 00 00 00 00 00 07 00 00 00 00 00 00 40 01 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 08 4b 56 42 4c 4f 43 4b 21"
)
# draft, "Examples": its COMPLETION, Generation 5, OK, Data Length 8, Block Offset 0x150000.
COMPLETION_VECTOR = bytes.fromhex(
    "01 20 00 00 00 00 00 00 00 00 00 07 00 00 00 00 00 00 40 01 00 05 00 00"
    "00 00 00 08 00 00 00 00 00 00 00 00 00 15 00 00"
)
ALLOC_STORE_MESSAGE = AllocStore(
    flags=RequestFlag.INLINE,
    request_id=7,
    handle=0x4001,
    data_descriptor=DataDescriptor(0, 0, 8),
    inline_data=b"KVBLOCK!",
)
COMPLETION_MESSAGE = Completion(
    request_id=7, handle=0x4001, generation=5, status=Status.OK, data_length=8,
    block_offset=0x150000,
)


def test_draft_alloc_store_vector_decodes() -> None:
    assert decode(ALLOC_STORE_VECTOR) == ALLOC_STORE_MESSAGE


def test_draft_alloc_store_vector_encodes() -> None:
    assert encode(ALLOC_STORE_MESSAGE) == ALLOC_STORE_VECTOR


def test_draft_completion_vector_decodes() -> None:
    msg = decode(COMPLETION_VECTOR)
    assert msg == COMPLETION_MESSAGE
    assert isinstance(msg, Completion)
    assert msg.block_offset == 42 * 32 * 1024  # "block 42 of a pool of 32 KiB blocks"


def test_draft_completion_vector_encodes() -> None:
    assert encode(COMPLETION_MESSAGE) == COMPLETION_VECTOR


@pytest.mark.parametrize("name", sorted(MESSAGE_STRATEGIES))
@pytest.mark.parametrize("addr_le", [False, True], ids=["be", "addr_le"])
def test_round_trip_every_message(name: str, addr_le: bool) -> None:
    @settings(max_examples=150, deadline=None)
    @given(MESSAGE_STRATEGIES[name])
    def check(msg: object) -> None:
        data = encode(msg, addr_le=addr_le)  # type: ignore[arg-type]
        assert decode(data, addr_le=addr_le) == msg
        assert data[0] == 1 and data[1] == int(msg.OPCODE)  # type: ignore[attr-defined]

    check()


def test_sizes_follow_formats() -> None:
    dd = DataDescriptor(1, 2, 3)
    cd = CompletionDescriptor(4, 5)
    assert len(encode(Load(data_descriptor=dd))) == 24 + 16
    assert len(encode(Load(flags=RequestFlag.RECORD, data_descriptor=dd,
                           completion_descriptor=cd))) == 24 + 32
    assert len(encode(Free())) == 24
    assert len(encode(Free(flags=RequestFlag.RECORD, completion_descriptor=cd))) == 40
    assert len(encode(Bind())) == 24 + 16
    assert len(encode(Completion())) == 24 + 16
    assert len(encode(Goodbye(flags=GoodbyeFlag.RELEASE))) == 24
    assert len(encode(Hello())) == 24 + 20
    assert len(encode(HelloAck())) == 24 + 32
    full = HelloAck(
        features=Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC,
        table=DirectDescriptor(1, 2, 3), table_base_handle=9, pool=DirectDescriptor(4, 5, 6),
        partition=DirectDescriptor(7, 8, 9), ring=DirectDescriptor(1, 1, 4),
        head=DirectDescriptor(2, 8, 1),
    )
    assert len(encode(full)) == 24 + 32 + 16 + 16 + 16 + 48


def test_addr_le_fields() -> None:
    """ADDR_LE flips exactly the Block Handle and descriptor STag/Tagged Offset/Length."""
    msg = Load(
        flags=RequestFlag.RECORD,
        request_id=0x0102030405060708,
        handle=0x1112131415161718,
        generation=0x2122,
        data_descriptor=DataDescriptor(0x31323334, 0x4142434445464748, 0x51525354),
        completion_descriptor=CompletionDescriptor(0x61626364, 0x7172737475767778),
    )
    be, le = encode(msg), encode(msg, addr_le=True)
    assert be[:12] == le[:12]  # version, opcode, flags, request id
    assert le[12:20] == be[12:20][::-1]  # Block Handle
    assert be[20:24] == le[20:24]  # Generation, Status
    assert le[24:28] == be[24:28][::-1]  # STag
    assert le[28:36] == be[28:36][::-1]  # Tagged Offset
    assert le[36:40] == be[36:40][::-1]  # Length
    assert le[40:44] == be[40:44][::-1]  # Completion Descriptor STag
    assert le[44:52] == be[44:52][::-1]  # Completion Descriptor Tagged Offset
    assert le[52:56] == be[52:56] == bytes(4)  # Reserved


def test_addr_le_completion_and_bind_block_offset() -> None:
    """Decision D3: Block Offsets in COMPLETION and BIND follow ADDR_LE; the rest does not."""
    c = encode(COMPLETION_MESSAGE, addr_le=True)
    assert c[12:20] == (0x4001).to_bytes(8, "little")
    assert c[24:28] == (8).to_bytes(4, "big")
    assert c[32:40] == (0x150000).to_bytes(8, "little")
    b = encode(Bind(ticket=3, data_length=8, block_offset=0x8000), addr_le=True)
    assert b[24:28] == (3).to_bytes(4, "big")
    assert b[32:40] == (0x8000).to_bytes(8, "little")


def test_negotiation_messages_ignore_addr_le() -> None:
    """Decision D2: HELLO and HELLO_ACK are big-endian whatever addr_le says."""
    for msg in (Hello(handle=5, completion_credits=3), HelloAck(handle_base=0x4000)):
        assert encode(msg, addr_le=True) == encode(msg)


def test_unknown_status_is_kept_as_int() -> None:
    data = bytearray(COMPLETION_VECTOR)
    data[22:24] = (0xC001).to_bytes(2, "big")
    msg = decode(bytes(data))
    assert msg.status == 0xC001 and not isinstance(msg.status, Status)
    assert encode(msg) == bytes(data)


# --- decode errors: each names its offset and reason --------------------------------


def _error(data: bytes, addr_le: bool = False) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(data, addr_le=addr_le)
    assert info.value.status is Status.MALFORMED
    return info.value


def test_empty_input() -> None:
    err = _error(b"")
    assert err.offset == 0 and "truncated" in err.reason


def test_truncated_header() -> None:
    err = _error(ALLOC_STORE_VECTOR[:10])
    assert err.offset == 10 and "header" in err.reason


def test_truncated_body() -> None:
    err = _error(COMPLETION_VECTOR[:30])
    assert err.offset == 28 and "truncated" in err.reason


def test_trailing_bytes() -> None:
    err = _error(COMPLETION_VECTOR + b"\x00")
    assert err.offset == 40 and "trailing" in err.reason


def test_bad_version() -> None:
    err = _error(b"\x02" + COMPLETION_VECTOR[1:])
    assert err.offset == 0 and "Version 2" in err.reason


def test_unknown_opcode() -> None:
    err = _error(b"\x01\x77" + COMPLETION_VECTOR[2:])
    assert err.offset == 1 and "0x77" in err.reason


def test_record_flag_without_completion_descriptor() -> None:
    data = encode(Load(data_descriptor=DataDescriptor(1, 2, 3)))
    data = data[:2] + int(RequestFlag.RECORD).to_bytes(2, "big") + data[4:]
    err = _error(data)
    assert err.offset == 40 and "Completion Descriptor" in err.reason


def test_free_record_without_descriptor() -> None:
    data = bytearray(encode(Free()))
    data[2:4] = int(RequestFlag.RECORD).to_bytes(2, "big")
    assert "Completion Descriptor" in _error(bytes(data)).reason


def test_inline_length_mismatch() -> None:
    err = _error(ALLOC_STORE_VECTOR[:-1])
    assert err.offset == 40 and "inline length" in err.reason
    err = _error(ALLOC_STORE_VECTOR + b"!")
    assert "inline length" in err.reason


def test_inline_descriptor_with_stag() -> None:
    data = bytearray(ALLOC_STORE_VECTOR)
    data[27] = 1
    err = _error(bytes(data))
    assert err.offset == 24 and "STag" in err.reason


@pytest.mark.parametrize("opcode", [Opcode.LOAD, Opcode.FREE])
def test_inline_on_load_or_free(opcode: Opcode) -> None:
    msg = Load(data_descriptor=DataDescriptor()) if opcode is Opcode.LOAD else Free()
    data = bytearray(encode(msg))
    data[3] |= RequestFlag.INLINE
    err = _error(bytes(data))
    assert err.offset == 2 and "INLINE" in err.reason


@pytest.mark.parametrize(
    ("features", "missing"),
    [(Feature.DIRECT_LOAD, "Table"), (Feature.DIRECT_ALLOC, "Partition")],
)
def test_hello_ack_descriptors_missing(features: Feature, missing: str) -> None:
    data = bytearray(encode(HelloAck()))
    data[24:26] = int(features).to_bytes(2, "big")
    err = _error(bytes(data))
    assert err.offset == 56 and missing in err.reason


def test_hello_ack_partial_descriptors() -> None:
    full = encode(HelloAck(
        features=Feature.DIRECT_ALLOC, partition=DirectDescriptor(1, 0, 4),
        ring=DirectDescriptor(2, 0, 8), head=DirectDescriptor(3, 0, 1),
    ))
    err = _error(full[:-16])
    assert "Head" in err.reason and err.offset == len(full) - 16


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([Store, AllocStore]), st.binary(max_size=40))
def test_inline_store_round_trip_both_orders(cls: type[Store], data: bytes) -> None:
    msg = cls(flags=RequestFlag.INLINE | RequestFlag.SEAL, handle=1,
              data_descriptor=DataDescriptor(length=len(data)), inline_data=data)
    for le in (False, True):
        assert decode(encode(msg, addr_le=le), addr_le=le) == msg


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"flags": 3.5}, "flags"), ({"flags": "3"}, "flags"), ({"status": 2.0}, "status"),
    ({"handle": True}, "handle"), ({"generation": 1 << 16}, "generation"),
])
def test_constructors_name_a_bad_header_field(kwargs: dict[str, object], field: str) -> None:
    """A value that is not an unsigned integer of the field's width is refused, naming
    the field, for every message (floats and strings are not coerced)."""
    for cls in (Load, Completion, Free):
        with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{field} must be an unsigned"):
            cls(**kwargs)  # type: ignore[arg-type]
