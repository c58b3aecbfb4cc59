"""The binary WQE format: mlx5 layout, byte orders, field addresses, decode errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbtpsim.nic import (
    Condition,
    Opcode,
    Sge,
    WorkRequest,
    WqeDecodeError,
    WqeFlags,
    decode_recv,
    decode_wqe,
    encode_recv,
    encode_wqe,
    field_layout,
    field_mask,
)
from kbtpsim.nic.protection import INVALID_STAG

U64 = st.integers(0, 2**64 - 1)
U32 = st.integers(0, 2**32 - 1)
ORDERS = st.sampled_from(["big", "little"])


def test_control_segment_is_mlx5_shaped() -> None:
    wr = WorkRequest(Opcode.RDMA_WRITE, (Sge(0x1122334455667788, 64, 0xAABBCCDD),),
                     WqeFlags.SIGNALED, remote_addr=0x0102030405060708, rkey=0x0A0B0C0D,
                     imm=0x11223344)
    raw = encode_wqe(wr, "big", index=0x1234, qpn=0xABCDEF)
    assert raw[0] == 0 and raw[1:3] == b"\x12\x34" and raw[3] == 0x08
    assert raw[4:7] == b"\xab\xcd\xef" and raw[7] == 3  # ds: ctrl + raddr + data
    assert raw[11] == 0x08 and raw[12:16] == b"\x11\x22\x33\x44"
    assert raw[16:24] == bytes(range(1, 9)) and raw[24:28] == b"\x0a\x0b\x0c\x0d"
    assert raw[32:36] == (64).to_bytes(4, "big") and raw[40:48] == bytes.fromhex(
        "1122334455667788")
    little = encode_wqe(wr, "little", index=0x1234, qpn=0xABCDEF)
    assert little[16:24] == bytes(range(8, 0, -1)) and little[1:3] == b"\x34\x12"


def test_field_layout_points_at_the_encoded_bytes() -> None:
    wr = WorkRequest(Opcode.MASKED_CAS, (Sge(7, 8, 9),), remote_addr=0xDEAD, rkey=5,
                     swap_add=0x5555, compare=0x6666, swap_mask=0x7777, compare_mask=0x8888)
    raw = encode_wqe(wr, "big")
    lay = field_layout(wr)
    for name, value in (("raddr", 0xDEAD), ("swap_add", 0x5555), ("compare", 0x6666),
                        ("swap_mask", 0x7777), ("compare_mask", 0x8888), ("sge.addr", 7)):
        off, size = lay[name]
        assert int.from_bytes(raw[off : off + size], "big") == value, name
    assert raw[0] == 0x09  # masked opmod for 8-octet operands


@given(
    op=st.sampled_from([Opcode.SEND, Opcode.RDMA_WRITE, Opcode.RDMA_READ, Opcode.SEND_WITH_IMM,
                        Opcode.RDMA_WRITE_WITH_IMM, Opcode.SEND_WITH_INVALIDATE]),
    sges=st.lists(st.builds(Sge, U64, st.integers(0, 2**31 - 1), U32), max_size=5),
    raddr=U64, rkey=U32, imm=U32, order=ORDERS,
    flags=st.sampled_from([WqeFlags.NONE, WqeFlags.SIGNALED, WqeFlags.SIGNALED | WqeFlags.FENCE]),
)
def test_roundtrip_data_ops(op, sges, raddr, rkey, imm, order, flags) -> None:  # type: ignore[no-untyped-def]
    if op not in (Opcode.RDMA_WRITE, Opcode.RDMA_READ, Opcode.RDMA_WRITE_WITH_IMM):
        raddr = rkey = 0
    wr = WorkRequest(op, tuple(sges), flags, remote_addr=raddr, rkey=rkey, imm=imm)
    wqe = decode_wqe(encode_wqe(wr, order, index=3, qpn=9, size=256), order)
    assert wqe.wr == wr and (wqe.index, wqe.qpn) == (3, 9)


@given(op=st.sampled_from([Opcode.CAS, Opcode.FETCH_ADD, Opcode.MASKED_CAS]), a=U64, b=U64,
       c=U64, d=U64, order=ORDERS)
def test_roundtrip_atomics(op, a, b, c, d, order) -> None:  # type: ignore[no-untyped-def]
    if op is not Opcode.MASKED_CAS:
        c = d = 0
    if op is Opcode.FETCH_ADD:
        b = 0
    wr = WorkRequest(op, (Sge(1, 8, 2),), remote_addr=8, rkey=1, swap_add=a, compare=b,
                     swap_mask=c, compare_mask=d)
    assert decode_wqe(encode_wqe(wr, order), order).wr == wr


def test_roundtrip_masked_fetch_add_wait_enable_inline_cond() -> None:
    for wr in (
        WorkRequest(Opcode.MASKED_FETCH_ADD, (Sge(1, 8, 2),), swap_add=0x10, swap_mask=1 << 31),
        WorkRequest(Opcode.WAIT, target=3, count=77),
        WorkRequest(Opcode.ENABLE, target=0x101, count=5, flags=WqeFlags.SIGNALED),
        WorkRequest(Opcode.SEND, inline_data=b"hello, inline world"),
        WorkRequest(Opcode.RDMA_WRITE, inline_data=b"", remote_addr=1, rkey=2),
        WorkRequest(Opcode.RDMA_WRITE, (Sge(1, 2, 3),), remote_addr=1, rkey=2,
                    cond=Condition(0x40, 7, 5, 0xFF)),
    ):
        for order in ("big", "little"):
            assert decode_wqe(encode_wqe(wr, order, size=128), order).wr == wr


def test_disarmed_wqe_decodes_as_nop_and_keeps_its_segments() -> None:
    wr = WorkRequest(Opcode.RDMA_WRITE_WITH_IMM, (Sge(1, 2, 3),), remote_addr=4, rkey=5,
                     armed=False)
    raw = encode_wqe(wr, "big", size=64)
    assert raw[3] == Opcode.NOP and raw[7] == 3
    assert decode_wqe(raw, "big").wr.opcode is Opcode.NOP
    armed = bytearray(raw)
    armed[3] = Opcode.RDMA_WRITE_WITH_IMM
    assert decode_wqe(bytes(armed), "big").wr.remote_addr == 4


def test_decode_errors() -> None:
    with pytest.raises(WqeDecodeError, match="opcode"):
        decode_wqe(bytes([0, 0, 0, 0x7E]) + bytes(60), "big")
    with pytest.raises(WqeDecodeError, match="ds"):
        raw = bytearray(encode_wqe(WorkRequest(Opcode.SEND, (Sge(1, 2, 3),)), "big"))
        raw[7] = 9
        decode_wqe(bytes(raw), "big")
    with pytest.raises(WqeDecodeError, match="short"):
        decode_wqe(b"\0" * 8, "big")
    with pytest.raises(ValueError, match="slot"):
        encode_wqe(WorkRequest(Opcode.SEND, (Sge(1, 2, 3),) * 8), "big", size=64)


@pytest.mark.parametrize(("wr", "ds", "missing"), [
    (WorkRequest(Opcode.RDMA_READ, (Sge(1, 8, 3),), remote_addr=4, rkey=5), 1,
     "remote address segment"),
    (WorkRequest(Opcode.FETCH_ADD, (Sge(1, 8, 3),), remote_addr=8, rkey=5), 2,
     "atomic segment"),
    (WorkRequest(Opcode.MASKED_FETCH_ADD, (Sge(1, 8, 3),), remote_addr=8, rkey=5), 3,
     "masked atomic segment"),
    (WorkRequest(Opcode.WAIT, target=3, count=4), 1, "wait/enable segment"),
    (WorkRequest(Opcode.ENABLE, target=3, count=4, cond=Condition(1, 2, 3, 4)), 2,
     "conditional segment"),
    (WorkRequest(Opcode.ENABLE, target=3, count=4, cond=Condition(1, 2, 3, 4)), 3,
     "wait/enable segment"),
])
def test_decode_names_the_segment_a_short_ds_leaves_out(wr: WorkRequest, ds: int,
                                                        missing: str) -> None:
    """A WQE whose ds ends before a segment its opcode has (a chain's Write over its
    control segment can do that): the error names the first segment missing."""
    raw = bytearray(encode_wqe(wr, "little", size=128))
    raw[7] = ds
    with pytest.raises(WqeDecodeError, match=f"^{missing} missing$"):
        decode_wqe(bytes(raw), "little")


def test_receive_wqe_and_end_marker() -> None:
    sges = (Sge(0x10, 8, 0x15A), Sge(0x20, 3, 0x25A))
    raw = encode_recv(sges, "little", 64)
    assert decode_recv(raw, "little") == sges
    assert int.from_bytes(raw[36:40], "little") == INVALID_STAG
    assert decode_recv(encode_recv((), "big", 32), "big") == ()


def test_field_mask() -> None:
    assert field_mask(3, 1, "big") == 0xFF << 32
    assert field_mask(3, 1, "little") == 0xFF << 24
    with pytest.raises(ValueError):
        field_mask(6, 4, "big")


def test_hand_written_inits_cover_every_field() -> None:
    """WorkRequest's and Sge's __init__ set their fields through the slots: every field,
    in the dataclass's order, with its default, and the checks of __post_init__."""
    import dataclasses

    from kbtpsim.nic.wqe import _WR_FIELDS

    assert tuple(f.name for f in dataclasses.fields(WorkRequest)) == _WR_FIELDS
    assert tuple(f.name for f in dataclasses.fields(Sge)) == ("addr", "length", "lkey")
    wr = WorkRequest(Opcode.MASKED_CAS, (Sge(64, 8, 3),), WqeFlags.SIGNALED, 4096, 5, 6, 7,
                     8, 9, 10, 11, 12, None, False, Condition(1, 2, 3), 99)
    values = [getattr(wr, name) for name in _WR_FIELDS]
    assert values[:2] == [Opcode.MASKED_CAS, (Sge(64, 8, 3),)]
    assert values[2] == WqeFlags.SIGNALED | WqeFlags.CONDITIONAL  # added for the cond
    assert values[3:] == [4096, 5, 6, 7, 8, 9, 10, 11, 12, None, False, Condition(1, 2, 3), 99]
    assert dataclasses.replace(wr, rkey=1) == WorkRequest(**{
        **{name: getattr(wr, name) for name in _WR_FIELDS}, "rkey": 1})
    default = WorkRequest(Opcode.NOP)
    assert [getattr(default, f.name) for f in dataclasses.fields(WorkRequest)] == [
        Opcode.NOP, *(f.default for f in dataclasses.fields(WorkRequest)[1:])]
    with pytest.raises(dataclasses.FrozenInstanceError):
        wr.rkey = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        Sge(0, 1 << 31, 0)
