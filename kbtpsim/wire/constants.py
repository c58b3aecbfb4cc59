"""KBTP numbers: version, opcodes, flags, features, statuses, entry flags, sizes.

Each enum cites the section of ``shared/spec/kbtp-draft.txt`` that defines it.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

#: Protocol version carried in every common header (draft, "Common Header").
VERSION = 1

HEADER_SIZE = 24  # draft, "KBTP Common Header (24 Octets)"
DESCRIPTOR_SIZE = 16  # draft, "Descriptors"
TABLE_ENTRY_SIZE = 16  # draft, "Block Table"
RING_SLOT_SIZE = 16  # draft, "Free-Block Ring"
COMPLETION_RECORD_SIZE = 24  # draft, "Completion"
INITIATOR_ID_SIZE = 16  # draft, "HELLO Body": 128 bits

#: A ring slot whose Block Offset is all ones is empty (consumed) (draft, "Free-Block Ring").
CONSUMED = (1 << 64) - 1


class Opcode(IntEnum):
    """KBTP opcodes (draft, table "KBTP Opcodes")."""

    HELLO = 0x01
    HELLO_ACK = 0x02
    LOAD = 0x10
    STORE = 0x11  #: Block Mapped Store
    ALLOC_STORE = 0x12  #: Block Unmapped Store
    FREE = 0x13
    BIND = 0x14
    COMPLETION = 0x20
    GOODBYE = 0x30


class RequestFlag(IntFlag):
    """Flags of LOAD, STORE, ALLOC_STORE and FREE (draft, "Common Header")."""

    INLINE = 0x0001  #: data follows the request
    SEAL = 0x0002  #: seal the block after the store
    RECORD = 0x0004  #: complete with a completion record; a Completion Descriptor is present
    INVALIDATE = 0x0008  #: complete with Send with Invalidate of the Data Descriptor's STag
    ALLOW_UNSEALED = 0x0010  #: a load may return an unsealed block


class GoodbyeFlag(IntFlag):
    """Flags of GOODBYE (draft, "IANA Considerations" and HELLO_ACK text)."""

    RELEASE = 0x0001  #: free all handles bound by the initiator


class Feature(IntFlag):
    """Features of HELLO and HELLO_ACK (draft, "HELLO_ACK Body")."""

    DIRECT_LOAD = 0x0001
    DIRECT_ALLOC = 0x0002
    RECORD_COMPLETION = 0x0004
    ADDR_LE = 0x0008


class EntryFlag(IntFlag):
    """Flags of a block table entry (draft, "Block Table")."""

    VALID = 0x0001
    SEALED = 0x0002


class Status(IntEnum):
    """KBTP status codes (draft, table "KBTP Status Codes")."""

    OK = 0  #: success
    INVALID_HANDLE = 1  #: handle outside the authorized range
    STALE_GENERATION = 2  #: generation mismatch
    NOT_VALID = 3  #: entry not bound
    ALREADY_BOUND = 4  #: unmapped store to a bound handle
    NO_SPACE = 5  #: quota exceeded or ring empty
    SEALED = 6  #: store to a sealed block
    NOT_SEALED = 7  #: load of an unsealed block
    TOO_LARGE = 8  #: length exceeds block or buffer
    MALFORMED = 9  #: request cannot be parsed
    INTERNAL = 10  #: target failure
    TICKET_ABANDONED = 11  #: BIND for a ticket that was reclaimed


#: Opcodes whose Flags field holds RequestFlag bits.
REQUEST_OPCODES = frozenset({Opcode.LOAD, Opcode.STORE, Opcode.ALLOC_STORE, Opcode.FREE})


def flag_type(opcode: Opcode) -> type[IntFlag] | None:
    """The flag enum of an opcode's Flags field, or None where no flag is defined."""
    if opcode in REQUEST_OPCODES:
        return RequestFlag
    if opcode is Opcode.GOODBYE:
        return GoodbyeFlag
    return None


_STATUSES: dict[int, Status] = {int(s): s for s in Status}


def status_of(value: int) -> Status | int:
    """A Status member, or the plain int for a value no registry entry names."""
    return _STATUSES.get(value, value)
