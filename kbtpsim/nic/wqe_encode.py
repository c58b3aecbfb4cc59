"""Encoding work requests into WQE bytes (the format is described in
:mod:`kbtpsim.nic.wqe`): send WQEs, with the WQE index patched in, and receive WQEs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.protection import INVALID_STAG
from kbtpsim.nic.wqe_layout import _CACHE_MAX, _S, CTRL_SIZE, SEG, SEG_FORMAT, _segments
from kbtpsim.nic.wqe_types import INLINE_BIT, MASK64, MASKED_OPS, Opcode, Sge, WorkRequest


def encode_wqe(wr: WorkRequest, order: ByteOrder, *, index: int = 0, qpn: int = 0,
               size: int | None = None) -> bytes:
    """The WQE bytes of ``wr`` (padded with zeros to ``size`` if given).

    One ``struct`` pack per WQE, its format built once per shape (:func:`_plan`). Not
    memoised by work request: a cache keyed by the work request hit 0.1 % of the
    quickstart's encodes and 1.5 % of an offloaded target's (every WR carries its own
    addresses and wr_id), and hashing the key cost more than it saved."""
    op = wr.opcode
    data = wr.inline_data
    key = (op, int(wr.flags) & 0x01, len(wr.sges), None if data is None else len(data),
           size, order)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(op, bool(key[1]), key[2], key[3], size, order)
    pack, segs, ds = plan
    values: list[object] = [0x09 if op in MASKED_OPS else 0,  # opmod: 0x08 | (log2(8) - 2)
                            index & 0xFFFF,
                            int(op if wr.armed else Opcode.NOP),
                            (qpn & 0xFF_FFFF).to_bytes(3, order), ds, 0, int(wr.flags),
                            wr.imm & 0xFFFF_FFFF]
    n_sge = 0
    for seg in segs:
        if seg == _DATA:
            sge = wr.sges[n_sge]
            n_sge += 1
            values += (sge.length & 0xFFFF_FFFF, sge.lkey & 0xFFFF_FFFF, sge.addr & MASK64)
        elif seg == _RADDR:
            values += (wr.remote_addr & MASK64, wr.rkey & 0xFFFF_FFFF)
        elif seg == _WAIT:
            values += (wr.count & 0xFFFF_FFFF, wr.target & 0xFFFF_FFFF)
        elif seg == _ATOMIC:
            values += (wr.swap_add & MASK64, wr.compare & MASK64)
        elif seg == _COND:
            c = wr.cond
            if c is None:
                raise ValueError("CONDITIONAL flag without a Condition")
            values += (c.addr, c.lkey, c.compare & MASK64, c.mask & MASK64)
        elif seg == _MASKED:
            if op == Opcode.MASKED_FETCH_ADD:
                values += (wr.swap_add & MASK64, wr.swap_mask & MASK64, 0, 0)
            else:
                values += (wr.swap_add & MASK64, wr.compare & MASK64,
                           wr.swap_mask & MASK64, wr.compare_mask & MASK64)
        else:  # inline
            payload = data or b""
            values += (len(payload) | INLINE_BIT, payload)
    return pack(*values)


_DATA, _RADDR, _WAIT, _ATOMIC, _COND, _MASKED, _INLINE = range(7)
_SEG_CODE = {"data": _DATA, "raddr": _RADDR, "wait": _WAIT, "atomic": _ATOMIC,
             "cond": _COND, "masked": _MASKED, "inline": _INLINE}
#: the packer of a WQE shape: (pack, segment codes, ds), by (opcode, conditional, SGEs,
#: inline length, slot size, byte order)
_PLANS: dict[tuple[object, ...], tuple[Callable[..., bytes], tuple[int, ...], int]] = {}


def _plan(opcode: Opcode, conditional: bool, n_sges: int, inline_len: int | None,
          size: int | None, order: ByteOrder
          ) -> tuple[Callable[..., bytes], tuple[int, ...], int]:
    """One struct for the whole WQE of this shape: the control segment, each segment
    (inline data as ``Ns`` zero-padded to its segment), zeros to ``size``."""
    segments = _segments(opcode, conditional, n_sges, inline_len)
    total = CTRL_SIZE + sum(seg_size for _name, seg_size in segments)
    if size is not None and total > size:
        raise ValueError(f"{opcode.name} WQE needs {total} octets, slot has {size}")
    fmt = [">" if order == "big" else "<", SEG_FORMAT["ctrl"]]
    for name, seg_size in segments:
        if name == "inline":
            fmt.append(f"I{seg_size - 4}s")  # ``s`` pads the data with zeros
        else:
            fmt.append(SEG_FORMAT[name])
    if size is not None and size > total:
        fmt.append(f"{size - total}x")
    plan = (struct.Struct("".join(fmt)).pack, tuple(_SEG_CODE[n] for n, _ in segments),
            total // SEG)
    if len(_PLANS) >= _CACHE_MAX:
        _PLANS.clear()
    _PLANS[(opcode, int(conditional), n_sges, inline_len, size, order)] = plan
    return plan


def encode_recv(sges: tuple[Sge, ...] | list[Sge], order: ByteOrder, size: int) -> bytes:
    """A receive WQE of ``size`` octets: the data segments, then an end marker if short."""
    if len(sges) * SEG > size:
        raise ValueError(f"{len(sges)} SGEs do not fit a {size}-octet receive WQE")
    pack = _S[order]["data"].pack
    out = bytearray()
    for sge in sges:
        out += pack(sge.length & 0xFFFF_FFFF, sge.lkey & 0xFFFF_FFFF, sge.addr & MASK64)
    if len(out) < size:
        out += pack(0, INVALID_STAG, 0)
    out += bytes(size - len(out))
    return bytes(out)
