"""Decoding WQE bytes into work requests (the format is described in
:mod:`kbtpsim.nic.wqe`): send WQEs, with :class:`~kbtpsim.nic.errors.WqeDecodeError`
for a malformed one, and receive WQEs.
"""

from __future__ import annotations

import struct
from typing import Any

from kbtpsim.nic.errors import WqeDecodeError
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.protection import INVALID_STAG
from kbtpsim.nic.wqe_layout import _S, CTRL_SIZE, SEG, SEG_FORMAT, _segments
from kbtpsim.nic.wqe_types import (
    INLINE_BIT,
    Condition,
    Opcode,
    Sge,
    WorkRequest,
    Wqe,
    WqeFlags,
    _sge,
    _wqe,
)

_OPCODES = {int(op): op for op in Opcode}
_FLAGS = [WqeFlags(i & 0x4B) for i in range(256)]


def decode_wqe(raw: bytes, order: ByteOrder) -> Wqe:
    """Decode WQE bytes; raises :class:`WqeDecodeError` for a malformed WQE.

    The segments an opcode's WQE has before its data segments are unpacked with one
    ``struct`` per shape (:func:`_fixed`). Not memoised: a cache keyed by the bytes (less
    the WQE index) hit 0.06 % of the quickstart's decodes and 4 to 7 % of an offloaded
    target's (a chain's WQEs carry their own addresses, and every round advances their
    counts), and building its key cost more than the hits saved."""
    if len(raw) < CTRL_SIZE:
        raise WqeDecodeError("shorter than a control segment")
    _opmod, index, op_b, qpn_b, ds, _sig, flags_b, imm = _S[order]["ctrl"].unpack_from(raw, 0)
    opcode = _OPCODES.get(op_b)
    if opcode is None:
        raise WqeDecodeError(f"unknown opcode {op_b:#04x}")
    qpn = int.from_bytes(qpn_b, order)
    flags = _FLAGS[flags_b]
    if opcode is Opcode.NOP or opcode is Opcode.LOCAL_INV:
        return _wqe(WorkRequest(opcode, flags=flags, imm=imm), index, qpn, op_b)
    if ds * SEG > len(raw) or ds < 1:
        raise WqeDecodeError(f"ds {ds} does not fit the {len(raw)}-octet slot")
    end = ds * SEG
    cond = flags_b & 0x01
    shape = _FIXED.get((order, opcode, cond))
    if shape is None:
        shape = _fixed(order, opcode, cond)
    unpack, size, names = shape
    off = CTRL_SIZE + size
    if off > end:
        raise WqeDecodeError(_missing(opcode, cond, end))
    kw: dict[str, Any] = {"flags": flags, "imm": imm}
    if size:
        values = unpack(raw, CTRL_SIZE)
        if cond:
            kw["cond"] = Condition(values[0], values[1], values[2], values[3])
        for name, value in zip(names, values, strict=True):
            if name:
                kw[name] = value
    sges: list[Sge] = []
    unpack_data = _S[order]["data"].unpack_from
    while off < end:
        count, lkey, addr = unpack_data(raw, off)
        if count & INLINE_BIT:
            n = count & 0x7FFF_FFFF
            if off + 4 + n > end:
                raise WqeDecodeError("inline data runs past the WQE")
            kw["inline_data"] = bytes(raw[off + 4 : off + 4 + n])
            off += (4 + n + SEG - 1) // SEG * SEG
            continue
        sges.append(_sge(addr, count, lkey))
        off += SEG
    try:
        wr = WorkRequest(opcode, tuple(sges), **kw)
    except ValueError as exc:
        raise WqeDecodeError(str(exc)) from None
    return _wqe(wr, index, qpn, op_b)


#: what a segment before the data segments is called when it is missing, and the
#: WorkRequest field each of its values sets ("" for none; a conditional segment's
#: values make the Condition)
_BEFORE_DATA = {
    "cond": ("conditional segment", ("", "", "", "")),
    "raddr": ("remote address segment", ("remote_addr", "rkey")),
    "atomic": ("atomic segment", ("swap_add", "compare")),
    "masked": ("masked atomic segment", ("swap_add", "compare", "swap_mask", "compare_mask")),
    "wait": ("wait/enable segment", ("count", "target")),
}
#: a masked FetchAdd's segment: the add and its mask, then nothing
_MASKED_ADD = ("swap_add", "swap_mask", "", "")


def _segments_before_data(opcode: Opcode, cond: int
                          ) -> list[tuple[str, int, str, tuple[str, ...]]]:
    """The segments before the data segments (the WQE layout's, :func:`_segments`): what
    a missing one is called, its size, its struct format, the field of each value."""
    out = []
    for name, size in _segments(opcode, bool(cond), 0, None):
        what, fields = _BEFORE_DATA[name]
        if opcode == Opcode.MASKED_FETCH_ADD and name == "masked":
            fields = _MASKED_ADD
        out.append((what, size, SEG_FORMAT[name], fields))
    return out


#: by (byte order, opcode, conditional): (unpack, octets, field per value)
_FIXED: dict[tuple[str, Opcode, int], tuple[Any, int, tuple[str, ...]]] = {}


def _fixed(order: ByteOrder, opcode: Opcode, cond: int) -> tuple[Any, int, tuple[str, ...]]:
    segs = _segments_before_data(opcode, cond)
    st = struct.Struct((">" if order == "big" else "<") + "".join(f for _, _, f, _ in segs))
    shape = (st.unpack_from, st.size, tuple(n for *_, names in segs for n in names))
    _FIXED[(order, opcode, cond)] = shape
    return shape


def _missing(opcode: Opcode, cond: int, end: int) -> str:
    """The first segment that does not fit in ``end`` octets."""
    off = CTRL_SIZE
    for what, size, _, _ in _segments_before_data(opcode, cond):
        off += size
        if off > end:
            return f"{what} missing"
    raise AssertionError("every segment fits")  # pragma: no cover


def decode_recv(raw: bytes, order: ByteOrder) -> tuple[Sge, ...]:
    """The scatter list of a receive WQE (up to the end marker)."""
    unpack = _S[order]["data"].unpack_from
    sges = []
    for off in range(0, len(raw) - SEG + 1, SEG):
        count, lkey, addr = unpack(raw, off)
        if count == 0 and lkey == INVALID_STAG:
            break
        if count & INLINE_BIT:
            raise ValueError(f"SGE length must be in [0, 2^31), got {count!r}")
        sges.append(_sge(addr, count, lkey))
    return tuple(sges)

