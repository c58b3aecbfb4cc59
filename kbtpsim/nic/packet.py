"""Packets of the reliable-connected transport between two QPs.

One message is segmented into MTU-sized packets; ``wire_len`` adds the extended transport
headers (RETH 16, AtomicETH 28, AETH 4 octets; IB spec vol. 1 ch. 9) to the payload, and the
link adds the per-packet base overhead. ``ready`` is the event a packet's payload waits for
(a DMA read); ``None`` means it is ready now.
"""

from __future__ import annotations

from enum import IntEnum

import simpy


class PktKind(IntEnum):
    SEND = 1
    WRITE = 2
    READ_REQ = 3
    ATOMIC_REQ = 4
    READ_RESP = 5
    ATOMIC_RESP = 6
    ACK = 7
    NAK = 8


_EXT = {PktKind.WRITE: 16, PktKind.READ_REQ: 16, PktKind.ATOMIC_REQ: 28,
        PktKind.READ_RESP: 4, PktKind.ATOMIC_RESP: 12, PktKind.ACK: 4, PktKind.NAK: 4,
        PktKind.SEND: 0}


class Packet:
    """One packet; fields not used by a kind stay at their defaults."""

    __slots__ = (
        "first",
        "imm",
        "kind",
        "last",
        "length",
        "offset",
        "opcode",
        "operands",
        "payload",
        "raddr",
        "ready",
        "ready_at",
        "rkey",
        "sampled",
        "seq",
        "status",
        "total",
        "wire_len",
    )

    def __init__(self, kind: PktKind, seq: int, *, first: bool = True, last: bool = True,
                 offset: int = 0, length: int = 0, total: int = 0, raddr: int = 0,
                 rkey: int = 0, imm: int = 0, opcode: int = 0, status: int = 0,
                 payload: bytes | memoryview | None = None, ready: simpy.Event | None = None,
                 operands: tuple[int, int, int, int] = (0, 0, 0, 0)) -> None:
        self.kind = kind
        self.seq = seq
        self.first = first
        self.last = last
        self.offset = offset
        self.length = length
        self.total = total
        self.raddr = raddr
        self.rkey = rkey
        self.imm = imm
        self.opcode = opcode
        self.status = status
        self.payload = payload
        self.ready = ready
        #: fast fidelity: when the payload DMA of this packet ends (ps; 0: ``ready`` decides)
        self.ready_at = 0
        self.operands = operands
        #: when the responder's DMA read this packet's payload (READ_RESP; ps)
        self.sampled: int | None = None
        ext = _EXT[kind] if first or kind is PktKind.READ_RESP else 0
        if kind in (PktKind.SEND, PktKind.WRITE) and last and opcode in (0x09, 0x0B, 0x01):
            ext += 4  # ImmDt / IETH
        carries = kind in (PktKind.SEND, PktKind.WRITE, PktKind.READ_RESP, PktKind.ATOMIC_RESP)
        self.wire_len = ext + (length if carries else 0)

    def label(self) -> str:
        return f"{self.kind.name}#{self.seq}"
