"""Decoding WQE bytes into work requests (the format is described in
:mod:`kbtpsim.nic.wqe`): send WQEs, memoised by their bytes less the WQE index, with
:class:`~kbtpsim.nic.errors.WqeDecodeError` for a malformed one, and receive WQEs.
"""

from __future__ import annotations

from typing import Any

from kbtpsim.nic.errors import WqeDecodeError
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.protection import INVALID_STAG
from kbtpsim.nic.wqe_layout import _CACHE_MAX, _S, CTRL_SIZE, SEG
from kbtpsim.nic.wqe_types import (
    INLINE_BIT,
    MASKED_OPS,
    RADDR_OPS,
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


_DECODED: dict[tuple[str, bytes], WorkRequest] = {}


def decode_wqe(raw: bytes, order: ByteOrder) -> Wqe:
    """Decode WQE bytes; raises :class:`WqeDecodeError` for a malformed WQE.

    Decoded work requests are cached by their bytes less the WQE index (octets 1-2), so a
    ring of repeated WQEs decodes each shape once."""
    key = (order, raw[:1] + raw[3:])
    wr = _DECODED.get(key)
    if wr is not None:
        index = int.from_bytes(raw[1:3], order)
        return _wqe(wr, index, int.from_bytes(raw[4:7], order), raw[3])
    wqe = _decode_wqe(raw, order)
    if len(_DECODED) >= _CACHE_MAX:
        _DECODED.clear()
    _DECODED[key] = wqe.wr
    return wqe


def _decode_wqe(raw: bytes, order: ByteOrder) -> Wqe:
    s = _S[order]
    if len(raw) < CTRL_SIZE:
        raise WqeDecodeError("shorter than a control segment")
    _opmod, index, op_b, qpn_b, ds, _sig, flags_b, imm = s["ctrl"].unpack_from(raw, 0)
    opcode = _OPCODES.get(op_b)
    if opcode is None:
        raise WqeDecodeError(f"unknown opcode {op_b:#04x}")
    qpn = int.from_bytes(qpn_b, order)
    flags = _FLAGS[flags_b]
    if opcode in (Opcode.NOP, Opcode.LOCAL_INV):
        return _wqe(WorkRequest(opcode, flags=flags, imm=imm), index, qpn, op_b)
    if ds * SEG > len(raw) or ds < 1:
        raise WqeDecodeError(f"ds {ds} does not fit the {len(raw)}-octet slot")
    end = ds * SEG
    off = CTRL_SIZE
    kw: dict[str, Any] = {"flags": flags, "imm": imm}
    if flags_b & 0x01:
        if off + 32 > end:
            raise WqeDecodeError("conditional segment missing")
        addr, lkey, cmp_, mask = s["cond"].unpack_from(raw, off)
        kw["cond"] = Condition(addr, lkey, cmp_, mask)
        off += 32
    if opcode in RADDR_OPS:
        if off + 16 > end:
            raise WqeDecodeError("remote address segment missing")
        kw["remote_addr"], kw["rkey"] = s["raddr"].unpack_from(raw, off)
        off += 16
    if opcode in (Opcode.CAS, Opcode.FETCH_ADD):
        if off + 16 > end:
            raise WqeDecodeError("atomic segment missing")
        kw["swap_add"], kw["compare"] = s["atomic"].unpack_from(raw, off)
        off += 16
    elif opcode in MASKED_OPS:
        if off + 32 > end:
            raise WqeDecodeError("masked atomic segment missing")
        a, b, c, d = s["masked"].unpack_from(raw, off)
        if opcode == Opcode.MASKED_FETCH_ADD:
            kw["swap_add"], kw["swap_mask"] = a, b
        else:
            kw["swap_add"], kw["compare"], kw["swap_mask"], kw["compare_mask"] = a, b, c, d
        off += 32
    if opcode in (Opcode.WAIT, Opcode.ENABLE):
        if off + 16 > end:
            raise WqeDecodeError("wait/enable segment missing")
        kw["count"], kw["target"] = s["wait"].unpack_from(raw, off)
        off += 16
    sges: list[Sge] = []
    unpack_data = s["data"].unpack_from
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
    kw["sges"] = tuple(sges)
    try:
        wr = WorkRequest(opcode, **kw)
    except ValueError as exc:
        raise WqeDecodeError(str(exc)) from None
    return _wqe(wr, index, qpn, op_b)


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

