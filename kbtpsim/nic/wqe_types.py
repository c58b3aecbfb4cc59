"""Work requests, the Python form of a WQE: opcodes, control-segment flags, scatter/gather
entries, native conditions, the :class:`WorkRequest` and the decoded :class:`Wqe`.

The binary format they encode to is described in :mod:`kbtpsim.nic.wqe`. The frozen
dataclasses are built through their slots (``_SGE_SET``, ``_WR_SET``, ``_WQE_SET``): one is
built per WQE posted and per WQE decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

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

