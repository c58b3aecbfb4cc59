"""Target memory structures read by remote peers (draft, "Target Memory Structures").

Block table entries and ring slots are 16 octets, completion records 24; their fields are
big-endian except the Block Offset under ADDR_LE (draft, "HELLO_ACK Body": "the Block
Offset fields of table entries and ring slots are in little-endian byte order"). Ring
counters are in the target's host byte order (RFC 7306), never in network order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kbtpsim.wire.constants import (
    COMPLETION_RECORD_SIZE,
    CONSUMED,
    RING_SLOT_SIZE,
    TABLE_ENTRY_SIZE,
    EntryFlag,
    Status,
    status_of,
)
from kbtpsim.wire.errors import DecodeError
from kbtpsim.wire.messages import U16, U32, U64, _check_uint

ByteOrder = Literal["big", "little"]


def addr_order(addr_le: bool) -> ByteOrder:
    """Byte order of the address fields ADDR_LE governs."""
    return "little" if addr_le else "big"


def _need(data: bytes, size: int, what: str) -> None:
    if len(data) < size:
        raise DecodeError(len(data), f"truncated {what}: need {size} octets, got {len(data)}")
    if len(data) > size:
        raise DecodeError(size, f"{len(data) - size} trailing octets after {what}")


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A block table entry: Flags, Generation, Data Length, Block Offset (draft, "Block Table")."""

    flags: EntryFlag = EntryFlag(0)
    generation: int = 0
    data_length: int = 0
    block_offset: int = 0

    def __post_init__(self) -> None:
        _check_uint("TableEntry", "flags", int(self.flags), U16)
        _check_uint("TableEntry", "generation", self.generation, U16)
        _check_uint("TableEntry", "data_length", self.data_length, U32)
        _check_uint("TableEntry", "block_offset", self.block_offset, U64)

    @property
    def valid(self) -> bool:
        return bool(self.flags & EntryFlag.VALID)

    @property
    def sealed(self) -> bool:
        return bool(self.flags & EntryFlag.SEALED)

    def encode(self, addr_le: bool = False) -> bytes:
        return (
            int(self.flags).to_bytes(2, "big")
            + self.generation.to_bytes(2, "big")
            + self.data_length.to_bytes(4, "big")
            + self.block_offset.to_bytes(8, addr_order(addr_le))
        )

    @classmethod
    def decode(cls, data: bytes, addr_le: bool = False) -> TableEntry:
        _need(data, TABLE_ENTRY_SIZE, "table entry")
        return cls(
            flags=EntryFlag(int.from_bytes(data[0:2], "big")),
            generation=int.from_bytes(data[2:4], "big"),
            data_length=int.from_bytes(data[4:8], "big"),
            block_offset=int.from_bytes(data[8:16], addr_order(addr_le)),
        )


@dataclass(frozen=True, slots=True)
class RingSlot:
    """A free-block ring slot: Sequence (Ticket), Reserved, Block Offset (draft, "Free-Block Ring").

    ``block_offset == CONSUMED`` (all ones) marks an empty slot.
    """

    sequence: int = 0
    block_offset: int = CONSUMED

    def __post_init__(self) -> None:
        _check_uint("RingSlot", "sequence", self.sequence, U32)
        _check_uint("RingSlot", "block_offset", self.block_offset, U64)

    @property
    def consumed(self) -> bool:
        return self.block_offset == CONSUMED

    def encode(self, addr_le: bool = False) -> bytes:
        return (
            self.sequence.to_bytes(4, "big")
            + bytes(4)
            + self.block_offset.to_bytes(8, addr_order(addr_le))
        )

    @classmethod
    def decode(cls, data: bytes, addr_le: bool = False) -> RingSlot:
        _need(data, RING_SLOT_SIZE, "ring slot")
        return cls(
            sequence=int.from_bytes(data[0:4], "big"),
            block_offset=int.from_bytes(data[8:16], addr_order(addr_le)),
        )


@dataclass(frozen=True, slots=True)
class CompletionRecord:
    """A 24-octet completion record (draft, "Completion").

    Request ID (64), Status (16), Generation (16), Data Length (32), Block Offset (64).
    Under ADDR_LE the Block Offset is little-endian, as in the table entry it is copied
    from (docs/decisions.md, D3).
    """

    request_id: int = 0
    status: Status | int = Status.OK
    generation: int = 0
    data_length: int = 0
    block_offset: int = 0

    def __post_init__(self) -> None:
        _check_uint("CompletionRecord", "request_id", self.request_id, U64)
        _check_uint("CompletionRecord", "status", int(self.status), U16)
        _check_uint("CompletionRecord", "generation", self.generation, U16)
        _check_uint("CompletionRecord", "data_length", self.data_length, U32)
        _check_uint("CompletionRecord", "block_offset", self.block_offset, U64)

    def encode(self, addr_le: bool = False) -> bytes:
        return (
            self.request_id.to_bytes(8, "big")
            + int(self.status).to_bytes(2, "big")
            + self.generation.to_bytes(2, "big")
            + self.data_length.to_bytes(4, "big")
            + self.block_offset.to_bytes(8, addr_order(addr_le))
        )

    @classmethod
    def decode(cls, data: bytes, addr_le: bool = False) -> CompletionRecord:
        _need(data, COMPLETION_RECORD_SIZE, "completion record")
        return cls(
            request_id=int.from_bytes(data[0:8], "big"),
            status=status_of(int.from_bytes(data[8:10], "big")),
            generation=int.from_bytes(data[10:12], "big"),
            data_length=int.from_bytes(data[12:16], "big"),
            block_offset=int.from_bytes(data[16:24], addr_order(addr_le)),
        )


def encode_counter(value: int, byte_order: ByteOrder) -> bytes:
    """A Head/Tail counter word in the target's host byte order (RFC 7306 atomics)."""
    _check_uint("counter", "value", value, U64)
    return value.to_bytes(8, byte_order)


def decode_counter(data: bytes, byte_order: ByteOrder) -> int:
    _need(data, 8, "ring counter")
    return int.from_bytes(data, byte_order)
