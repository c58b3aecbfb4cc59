"""Where a WQE's segments and fields lie (the format is described in
:mod:`kbtpsim.nic.wqe`): the segments' struct formats in each byte order, the segments of
an opcode's WQE (memoised), field offsets (:func:`field_layout`, :data:`RECV_FIELDS`), the
encoded size, and the control word an atomic on a WQE sees.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType

from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.wqe_types import ATOMIC_OPS, DATA_OPS, MASKED_OPS, RADDR_OPS, Opcode, WorkRequest

SEG = 16
CTRL_SIZE = 16
_CACHE_MAX = 4096


_FMT = {"big": ">", "little": "<"}


def _st(order: ByteOrder, fmt: str) -> struct.Struct:
    return struct.Struct(_FMT[order] + fmt)


#: each segment's struct format, without byte order (an inline segment is a ``u32``
#: byte count and the data)
SEG_FORMAT = {
    "ctrl": "BHB3sBB2xBI",
    "raddr": "QI4x",
    "data": "IIQ",
    "atomic": "QQ",
    "masked": "QQQQ",
    "wait": "II8x",
    "cond": "QI4xQQ",
    "u32": "I",
}
_S = {order: {name: _st(order, fmt) for name, fmt in SEG_FORMAT.items()}
      for order in ("big", "little")}


_SEGMENTS: dict[tuple[Opcode, bool, int, int | None], tuple[tuple[str, int], ...]] = {}


def _segments(opcode: Opcode, conditional: bool, n_data: int,
              inline_len: int | None) -> tuple[tuple[str, int], ...]:
    """Segment names and sizes after the control segment (memoised: a pure function of
    its arguments, of which few combinations occur)."""
    key = (opcode, conditional, n_data, inline_len)
    segs = _SEGMENTS.get(key)
    if segs is None:
        if len(_SEGMENTS) >= _CACHE_MAX:
            _SEGMENTS.clear()
        segs = _SEGMENTS[key] = tuple(_layout(opcode, conditional, n_data, inline_len))
    return segs


def _layout(opcode: Opcode, conditional: bool, n_data: int,
            inline_len: int | None) -> list[tuple[str, int]]:
    segs: list[tuple[str, int]] = []
    if conditional:
        segs.append(("cond", 32))
    if opcode in RADDR_OPS:
        segs.append(("raddr", 16))
    if opcode in (Opcode.CAS, Opcode.FETCH_ADD):
        segs.append(("atomic", 16))
    elif opcode in MASKED_OPS:
        segs.append(("masked", 32))
    if opcode in (Opcode.WAIT, Opcode.ENABLE):
        segs.append(("wait", 16))
    if opcode in DATA_OPS or opcode in ATOMIC_OPS:
        if inline_len is not None:
            segs.append(("inline", (4 + inline_len + SEG - 1) // SEG * SEG))
        else:
            segs.extend(("data", 16) for _ in range(n_data))
    return segs


_FIELD_IN_SEG = {
    "cond": {"cond_addr": (0, 8), "cond_lkey": (8, 4), "cond_compare": (16, 8),
             "cond_mask": (24, 8)},
    "raddr": {"raddr": (0, 8), "rkey": (8, 4)},
    "atomic": {"swap_add": (0, 8), "compare": (8, 8)},
    "masked": {"swap_add": (0, 8), "compare": (8, 8), "add_mask": (8, 8), "swap_mask": (16, 8),
               "compare_mask": (24, 8)},
    "wait": {"wait_index": (0, 4), "wait_object": (4, 4)},
    "inline": {"inline_count": (0, 4), "inline": (4, 0)},
}
_CTRL_FIELDS = {
    "ctrl": (0, 16), "ctrl_word": (0, 8), "opmod": (0, 1), "wqe_index": (1, 2),
    "opcode": (3, 1), "qpn": (4, 3), "ds": (7, 1), "flags": (11, 1), "imm": (12, 4),
}


def field_layout(wr: WorkRequest) -> Mapping[str, tuple[int, int]]:
    """Field name -> (offset in the WQE, size) for the WQE ``wr`` encodes to.

    Data segment ``i`` has ``sgeI.count``, ``sgeI.lkey`` and ``sgeI.addr``; ``sge.addr`` etc.
    name segment 0. Byte order of every multi-octet field is the profile's WQE byte order.
    The mapping is shared by every WR of the same shape, hence read-only.
    """
    inline_len = None if wr.inline_data is None else len(wr.inline_data)
    shape = (wr.opcode, bool(int(wr.flags) & 0x01), len(wr.sges), inline_len)
    out = _LAYOUTS.get(shape)
    if out is None:
        out = _LAYOUTS[shape] = MappingProxyType(_field_offsets(*shape))
    return out


#: field layouts by WQE shape (opcode, conditional, SGE count, inline length)
_LAYOUTS: dict[tuple[Opcode, bool, int, int | None], Mapping[str, tuple[int, int]]] = {}


def _field_offsets(opcode: Opcode, conditional: bool, n_sges: int,
                   inline_len: int | None) -> dict[str, tuple[int, int]]:
    out = dict(_CTRL_FIELDS)
    off = CTRL_SIZE
    n_data = 0
    for name, size in _segments(opcode, conditional, n_sges, inline_len):
        if name == "data":
            for key, (o, s) in (("count", (0, 4)), ("lkey", (4, 4)), ("addr", (8, 8))):
                out[f"sge{n_data}.{key}"] = (off + o, s)
                if n_data == 0:
                    out[f"sge.{key}"] = (off + o, s)
            n_data += 1
        else:
            for key, (o, s) in _FIELD_IN_SEG[name].items():
                out[key] = (off + o, s if s else size - 4)
        off += size
    return out


def wqe_size(wr: WorkRequest) -> int:
    """Encoded size in octets (16 x ds)."""
    inline_len = None if wr.inline_data is None else len(wr.inline_data)
    return CTRL_SIZE + sum(
        size for _, size in _segments(wr.opcode, bool(int(wr.flags) & 0x01),
                                      len(wr.sges), inline_len)
    )


RECV_FIELDS = {"count": (0, 4), "lkey": (4, 4), "addr": (8, 8)}


def ctrl_word(raw: bytes, atomic_order: ByteOrder) -> int:
    """The first 8 octets of a WQE as the u64 an atomic on them sees."""
    return int.from_bytes(raw[:8], atomic_order)


def field_mask(offset: int, size: int, atomic_order: ByteOrder) -> int:
    """Mask selecting octets ``[offset, offset + size)`` of an 8-octet word read as a u64."""
    if offset < 0 or size <= 0 or offset + size > 8:
        raise ValueError("field must lie inside the 8-octet word")
    word = bytes(offset) + b"\xff" * size + bytes(8 - offset - size)
    return int.from_bytes(word, atomic_order)
