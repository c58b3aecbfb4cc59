"""The binary work-queue-element (WQE) format, modelled on mlx5's.

A send WQE is a sequence of 16-octet segments, control segment first, in a fixed-size ring
slot (``NicProfile.sq_wqe_size``, 128 octets by default: two mlx5 basic blocks). Multi-octet
fields are in the profile's WQE byte order (``"big"`` as mlx5, ``"little"`` as irdma).

Control segment (16 octets)::

    0  opmod          1-2 WQE index      3 opcode        4-6 QP number    7 ds (16-octet units)
    8  signature      9-10 reserved      11 flags        12-15 immediate / STag to invalidate

Segments after it, by opcode (``[cond]`` only when ``WqeFlags.CONDITIONAL`` is set)::

    NOP                         ctrl
    SEND, SEND_WITH_IMM/INV     ctrl [cond] data*|inline
    RDMA_WRITE(_WITH_IMM), READ ctrl [cond] raddr data*|inline
    CAS, FETCH_ADD              ctrl [cond] raddr atomic(16) data
    MASKED_CAS/FETCH_ADD        ctrl [cond] raddr masked-atomic(32) data
    WAIT, ENABLE                ctrl [cond] wait
    LOCAL_INV                   ctrl (immediate = STag)

    raddr   remote address (8), rkey (4), reserved (4)
    data    byte count (4), lkey (4), address (8)
    inline  byte count | 0x80000000 (4), data, padded to 16
    atomic  swap or add (8), compare (8)
    masked  swap or add (8), compare or add-mask (8), swap mask (8), compare mask (8)
    wait    index (4): the CQ count to wait for / the WQE index to enable up to,
            object (4): CQ number / QP number, reserved (8)
    cond    address (8), lkey (4), reserved (4), compare (8), mask (8)  (model extension)

A receive WQE is an array of data segments; a short list ends with an entry of byte count 0
and lkey ``INVALID_STAG``. A *disarmed* WR (``armed=False``) is encoded with the segments of
its opcode but NOP in the control segment: a CAS on its first 8 octets arms it (RedN).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

from kbtpsim.nic.errors import WqeDecodeError
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.protection import INVALID_STAG

SEG = 16
CTRL_SIZE = 16
INLINE_BIT = 0x8000_0000
MASK64 = (1 << 64) - 1


class Opcode(IntEnum):
    """Send-queue opcodes (mlx5 values; WAIT/ENABLE are the cross-channel ones)."""

    NOP = 0x00
    SEND_WITH_INVALIDATE = 0x01
    RDMA_WRITE = 0x08
    RDMA_WRITE_WITH_IMM = 0x09
    SEND = 0x0A
    SEND_WITH_IMM = 0x0B
    WAIT = 0x0F
    RDMA_READ = 0x10
    CAS = 0x11
    FETCH_ADD = 0x12
    MASKED_CAS = 0x14
    MASKED_FETCH_ADD = 0x15
    ENABLE = 0x17
    LOCAL_INV = 0x1B


class WqeFlags(IntFlag):
    """Control-segment flags (octet 11; mlx5 bits, CONDITIONAL is a model extension)."""

    NONE = 0
    CONDITIONAL = 0x01
    SOLICITED = 0x02
    SIGNALED = 0x08  #: generate a CQE (mlx5 CQ_UPDATE)
    FENCE = 0x40  #: wait for earlier READs and atomics to complete (mlx5 fence mode 2)


SEND_OPS = frozenset({Opcode.SEND, Opcode.SEND_WITH_IMM, Opcode.SEND_WITH_INVALIDATE})
WRITE_OPS = frozenset({Opcode.RDMA_WRITE, Opcode.RDMA_WRITE_WITH_IMM})
ATOMIC_OPS = frozenset({Opcode.CAS, Opcode.FETCH_ADD, Opcode.MASKED_CAS, Opcode.MASKED_FETCH_ADD})
MASKED_OPS = frozenset({Opcode.MASKED_CAS, Opcode.MASKED_FETCH_ADD})
RADDR_OPS = WRITE_OPS | ATOMIC_OPS | {Opcode.RDMA_READ}
DATA_OPS = SEND_OPS | WRITE_OPS | {Opcode.RDMA_READ}
_SEND_WRITE_OPS = SEND_OPS | WRITE_OPS
_OPCODES = {int(op): op for op in Opcode}
_CACHE_MAX = 4096
_FLAGS = [WqeFlags(i & 0x4B) for i in range(256)]
_WITH_COND: dict[int, WqeFlags] = {}


def _with_conditional(flags: WqeFlags) -> WqeFlags:
    """``flags | CONDITIONAL`` (memoised: enum arithmetic is slow, few values occur)."""
    out = _WITH_COND.get(flags)
    if out is None:
        out = _WITH_COND[flags] = flags | WqeFlags.CONDITIONAL
    return out


@dataclass(frozen=True, slots=True, init=False)
class Sge:
    """A scatter/gather entry: ``length`` bytes at ``addr`` of local STag ``lkey``."""

    addr: int
    length: int
    lkey: int

    def __init__(self, addr: int, length: int, lkey: int) -> None:
        # what the dataclass's __init__ would do, through the slots (_SGE_SET): a frozen
        # dataclass sets each field through object.__setattr__, and SGEs are many
        s = _SGE_SET
        s[0](self, addr)
        s[1](self, length)
        s[2](self, lkey)
        self.__post_init__()

    def __post_init__(self) -> None:
        if not 0 <= self.length < INLINE_BIT:
            raise ValueError(f"SGE length must be in [0, 2^31), got {self.length!r}")


@dataclass(frozen=True, slots=True)
class Condition:
    """Native conditional execution (``ideal`` profile): run the WR only if
    ``(u64 at addr ^ compare) & mask == 0`` (u64 in the profile's atomic byte order)."""

    addr: int
    lkey: int
    compare: int
    mask: int = MASK64


@dataclass(frozen=True, slots=True, init=False)
class WorkRequest:
    """One send-queue work request, the Python form of a WQE.

    Operand fields by opcode: ``remote_addr``/``rkey`` for READ/WRITE/atomics; ``swap_add``
    (swap value or add data), ``compare``, ``swap_mask`` (masked FetchAdd: the add mask) and
    ``compare_mask`` for atomics; ``target`` (CQ number for WAIT, QP number for ENABLE) and
    ``count`` (CQ count for WAIT, WQE index for ENABLE); ``imm`` (immediate data, or the STag
    to invalidate for SEND_WITH_INVALIDATE / LOCAL_INV). ``wr_id`` is not encoded: the QP keeps
    it beside the slot, as a verbs driver does.
    """

    opcode: Opcode
    sges: tuple[Sge, ...] = ()
    flags: WqeFlags = WqeFlags.NONE
    remote_addr: int = 0
    rkey: int = 0
    imm: int = 0
    swap_add: int = 0
    compare: int = 0
    swap_mask: int = 0
    compare_mask: int = 0
    target: int = 0
    count: int = 0
    inline_data: bytes | None = None
    armed: bool = True
    cond: Condition | None = None
    wr_id: int = field(default=0, compare=False)  #: not encoded, not compared

    def __init__(self, opcode: Opcode, sges: tuple[Sge, ...] = (),
                 flags: WqeFlags = WqeFlags.NONE, remote_addr: int = 0, rkey: int = 0,
                 imm: int = 0, swap_add: int = 0, compare: int = 0, swap_mask: int = 0,
                 compare_mask: int = 0, target: int = 0, count: int = 0,
                 inline_data: bytes | None = None, armed: bool = True,
                 cond: Condition | None = None, wr_id: int = 0) -> None:
        # the dataclass's __init__, through the slots (_WR_SET): one WR is built per WQE
        # posted and per WQE decoded, and a frozen dataclass's generated __init__ sets its
        # 16 fields through object.__setattr__
        s = _WR_SET
        s[0](self, opcode)
        s[1](self, sges)
        s[2](self, flags)
        s[3](self, remote_addr)
        s[4](self, rkey)
        s[5](self, imm)
        s[6](self, swap_add)
        s[7](self, compare)
        s[8](self, swap_mask)
        s[9](self, compare_mask)
        s[10](self, target)
        s[11](self, count)
        s[12](self, inline_data)
        s[13](self, armed)
        s[14](self, cond)
        s[15](self, wr_id)
        self.__post_init__()

    def __post_init__(self) -> None:
        opcode = self.opcode
        if not isinstance(opcode, Opcode):
            opcode = Opcode(opcode)
            object.__setattr__(self, "opcode", opcode)
        if self.inline_data is not None and opcode not in _SEND_WRITE_OPS:
            raise ValueError(f"inline data is only for SEND/WRITE, not {opcode.name}")
        if opcode in ATOMIC_OPS:
            if len(self.sges) != 1:
                raise ValueError(f"{opcode.name} needs exactly one 8-octet result SGE")
            if self.sges[0].length != 8:
                raise ValueError("the atomic result SGE must be 8 octets long")
        if self.cond is not None and not int(self.flags) & 0x01:  # CONDITIONAL
            object.__setattr__(self, "flags", _with_conditional(self.flags))

    @property
    def signaled(self) -> bool:
        return bool(int(self.flags) & 0x08)

    @property
    def length(self) -> int:
        """Payload length of the message (or of the READ)."""
        if self.inline_data is not None:
            return len(self.inline_data)
        return sum(s.length for s in self.sges)


@dataclass(frozen=True, slots=True)
class Wqe:
    """A decoded WQE: the work request plus the control segment's index and QP number."""

    wr: WorkRequest
    index: int
    qpn: int
    opcode_byte: int


_SGE_SET = tuple(getattr(Sge, name).__set__ for name in ("addr", "length", "lkey"))
#: WorkRequest's fields in their order (its __init__'s parameters)
_WR_FIELDS = ("opcode", "sges", "flags", "remote_addr", "rkey", "imm", "swap_add", "compare",
              "swap_mask", "compare_mask", "target", "count", "inline_data", "armed", "cond",
              "wr_id")
_WR_SET = tuple(getattr(WorkRequest, name).__set__ for name in _WR_FIELDS)


def _sge(addr: int, length: int, lkey: int) -> Sge:
    """``Sge(addr, length, lkey)`` for a decoded data segment, whose byte count (bit 31
    clear: not inline) always passes the length check; set through the slots."""
    sge = object.__new__(Sge)
    s = _SGE_SET
    s[0](sge, addr)
    s[1](sge, length)
    s[2](sge, lkey)
    return sge


_WQE_SET = tuple(getattr(Wqe, name).__set__ for name in ("wr", "index", "qpn", "opcode_byte"))


def _wqe(wr: WorkRequest, index: int, qpn: int, opcode_byte: int) -> Wqe:
    """``Wqe(wr, index, qpn, opcode_byte)``, set through the slots (one per executed WQE;
    a frozen dataclass's ``__init__`` goes through ``object.__setattr__``)."""
    wqe = object.__new__(Wqe)
    s = _WQE_SET
    s[0](wqe, wr)
    s[1](wqe, index)
    s[2](wqe, qpn)
    s[3](wqe, opcode_byte)
    return wqe


_FMT = {"big": ">", "little": "<"}


def _st(order: ByteOrder, fmt: str) -> struct.Struct:
    return struct.Struct(_FMT[order] + fmt)


_S = {
    order: {
        "ctrl": _st(order, "BHB3sBB2xBI"),
        "raddr": _st(order, "QI4x"),
        "data": _st(order, "IIQ"),
        "atomic": _st(order, "QQ"),
        "masked": _st(order, "QQQQ"),
        "wait": _st(order, "II8x"),
        "cond": _st(order, "QI4xQQ"),
        "u32": _st(order, "I"),
    }
    for order in ("big", "little")
}


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


def field_layout(wr: WorkRequest) -> dict[str, tuple[int, int]]:
    """Field name -> (offset in the WQE, size) for the WQE ``wr`` encodes to.

    Data segment ``i`` has ``sgeI.count``, ``sgeI.lkey`` and ``sgeI.addr``; ``sge.addr`` etc.
    name segment 0. Byte order of every multi-octet field is the profile's WQE byte order.
    """
    out = dict(_CTRL_FIELDS)
    off = CTRL_SIZE
    n_data = 0
    inline_len = None if wr.inline_data is None else len(wr.inline_data)
    for name, size in _segments(wr.opcode, bool(int(wr.flags) & 0x01),
                                len(wr.sges), inline_len):
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


_ENCODED: dict[tuple[WorkRequest, str, int, int | None], bytes] = {}


def encode_wqe(wr: WorkRequest, order: ByteOrder, *, index: int = 0, qpn: int = 0,
               size: int | None = None) -> bytes:
    """The WQE bytes of ``wr`` (padded with zeros to ``size`` if given)."""
    key = (wr, order, qpn, size)
    raw = _ENCODED.get(key)
    if raw is None:
        raw = _encode_wqe(wr, order, qpn, size)
        if len(_ENCODED) >= _CACHE_MAX:
            _ENCODED.clear()
        _ENCODED[key] = raw
    return raw[:1] + (index & 0xFFFF).to_bytes(2, order) + raw[3:]


def _encode_wqe(wr: WorkRequest, order: ByteOrder, qpn: int, size: int | None) -> bytes:
    index = 0
    s = _S[order]
    inline_len = None if wr.inline_data is None else len(wr.inline_data)
    segments = _segments(wr.opcode, bool(int(wr.flags) & 0x01), len(wr.sges), inline_len)
    total = CTRL_SIZE
    for _name, seg_size in segments:
        total += seg_size
    if size is not None and total > size:
        raise ValueError(f"{wr.opcode.name} WQE needs {total} octets, slot has {size}")
    ds = total // SEG
    opcode = wr.opcode if wr.armed else Opcode.NOP
    opmod = 0x09 if wr.opcode in MASKED_OPS else 0  # 0x08 | (log2(8) - 2)
    qpn_b = (qpn & 0xFF_FFFF).to_bytes(3, order)
    out = bytearray(s["ctrl"].pack(opmod, index & 0xFFFF, int(opcode), qpn_b, ds, 0,
                                   int(wr.flags), wr.imm & 0xFFFF_FFFF))
    sges = iter(wr.sges)
    for name, seg_size in segments:
        if name == "cond":
            c = wr.cond
            if c is None:
                raise ValueError("CONDITIONAL flag without a Condition")
            out += s["cond"].pack(c.addr, c.lkey, c.compare & MASK64, c.mask & MASK64)
        elif name == "raddr":
            out += s["raddr"].pack(wr.remote_addr & MASK64, wr.rkey & 0xFFFF_FFFF)
        elif name == "atomic":
            out += s["atomic"].pack(wr.swap_add & MASK64, wr.compare & MASK64)
        elif name == "masked":
            if wr.opcode == Opcode.MASKED_FETCH_ADD:
                out += s["masked"].pack(wr.swap_add & MASK64, wr.swap_mask & MASK64, 0, 0)
            else:
                out += s["masked"].pack(wr.swap_add & MASK64, wr.compare & MASK64,
                                        wr.swap_mask & MASK64, wr.compare_mask & MASK64)
        elif name == "wait":
            out += s["wait"].pack(wr.count & 0xFFFF_FFFF, wr.target & 0xFFFF_FFFF)
        elif name == "inline":
            data = wr.inline_data or b""
            out += s["u32"].pack(len(data) | INLINE_BIT) + data
            out += bytes(seg_size - 4 - len(data))
        else:  # data
            sge = next(sges)
            out += s["data"].pack(sge.length & 0xFFFF_FFFF, sge.lkey & 0xFFFF_FFFF,
                                  sge.addr & MASK64)
    if size is not None:
        out += bytes(size - len(out))
    return bytes(out)


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
    kw: dict = {"flags": flags, "imm": imm}
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
