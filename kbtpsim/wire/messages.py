"""KBTP messages as immutable values (draft, sections "Messages" and "Session Establishment").

Every message carries the common header fields (draft, "Common Header"): Flags, Request
ID, Block Handle, Generation and Status; Version is always :data:`VERSION` and Opcode is
the class's ``OPCODE``. Constructors check that a message is self-consistent (the INLINE
flag goes with inline data, RECORD with a Completion Descriptor, HELLO_ACK descriptors
with its Features), so every value that exists can be encoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from kbtpsim.wire.constants import (
    INITIATOR_ID_SIZE,
    VERSION,
    Feature,
    GoodbyeFlag,
    Opcode,
    RequestFlag,
    Status,
)

U16 = (1 << 16) - 1
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1


#: RequestFlag bits as plain ints: the constructors test them without enum arithmetic.
_INLINE = int(RequestFlag.INLINE)
_RECORD = int(RequestFlag.RECORD)


def _check_uint(owner: str, name: str, value: int, limit: int) -> None:
    if value.__class__ is int and 0 <= value <= limit:  # the common case, tested first
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        bits = limit.bit_length()
        raise ValueError(f"{owner}.{name} must be an unsigned {bits}-bit integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class DataDescriptor:
    """An initiator buffer: STag, Tagged Offset, Length (draft, "Descriptors")."""

    stag: int = 0
    tagged_offset: int = 0
    length: int = 0

    def __post_init__(self) -> None:
        _check_uint("DataDescriptor", "stag", self.stag, U32)
        _check_uint("DataDescriptor", "tagged_offset", self.tagged_offset, U64)
        _check_uint("DataDescriptor", "length", self.length, U32)


@dataclass(frozen=True, slots=True)
class CompletionDescriptor:
    """A 24-octet completion record slot of the initiator (draft, "Descriptors")."""

    stag: int = 0
    tagged_offset: int = 0

    def __post_init__(self) -> None:
        _check_uint("CompletionDescriptor", "stag", self.stag, U32)
        _check_uint("CompletionDescriptor", "tagged_offset", self.tagged_offset, U64)


@dataclass(frozen=True, slots=True)
class DirectDescriptor:
    """A target structure exposed in HELLO_ACK: STag, Tagged Offset, Count."""

    stag: int = 0
    tagged_offset: int = 0
    count: int = 0

    def __post_init__(self) -> None:
        _check_uint("DirectDescriptor", "stag", self.stag, U32)
        _check_uint("DirectDescriptor", "tagged_offset", self.tagged_offset, U64)
        _check_uint("DirectDescriptor", "count", self.count, U32)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """Common header fields shared by every KBTP message."""

    OPCODE: ClassVar[Opcode]
    version: ClassVar[int] = VERSION

    flags: int = 0
    request_id: int = 0
    handle: int = 0
    generation: int = 0
    status: Status | int = Status.OK

    def __post_init__(self) -> None:
        owner = type(self).__name__
        _check_uint(owner, "flags", self.flags, U16)  # an IntFlag is an int
        _check_uint(owner, "request_id", self.request_id, U64)
        _check_uint(owner, "handle", self.handle, U64)
        _check_uint(owner, "generation", self.generation, U16)
        _check_uint(owner, "status", self.status, U16)

    @property
    def opcode(self) -> Opcode:
        return self.OPCODE


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello(Message):
    """HELLO (draft, "HELLO Body")."""

    OPCODE = Opcode.HELLO
    requested_features: Feature = Feature(0)
    completion_credits: int = 0
    initiator_id: bytes = bytes(INITIATOR_ID_SIZE)

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_uint("Hello", "requested_features", int(self.requested_features), U16)
        _check_uint("Hello", "completion_credits", self.completion_credits, U16)
        if not isinstance(self.initiator_id, bytes) or len(self.initiator_id) != 16:
            raise ValueError(f"Hello.initiator_id must be 16 bytes, got {self.initiator_id!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class HelloAck(Message):
    """HELLO_ACK, the Target Descriptor (draft, "HELLO_ACK Body").

    The direct-mode descriptors are present exactly when their Feature bit is set:
    DIRECT_LOAD gives ``table``, ``table_base_handle`` and ``pool``; DIRECT_ALLOC gives
    ``partition``, ``ring`` and ``head``.
    """

    OPCODE = Opcode.HELLO_ACK
    features: Feature = Feature(0)
    request_credits: int = 0
    block_size: int = 0
    max_inline: int = 0
    allocation_quota: int = 0
    handle_base: int = 0
    handle_count: int = 0
    ticket_timeout_ms: int = 0
    table: DirectDescriptor | None = None
    table_base_handle: int | None = None
    pool: DirectDescriptor | None = None
    partition: DirectDescriptor | None = None
    ring: DirectDescriptor | None = None
    head: DirectDescriptor | None = None

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        for name, limit in (
            ("features", U16),
            ("request_credits", U16),
            ("block_size", U32),
            ("max_inline", U32),
            ("allocation_quota", U32),
            ("handle_base", U64),
            ("handle_count", U32),
            ("ticket_timeout_ms", U32),
        ):
            _check_uint("HelloAck", name, getattr(self, name), limit)
        direct_load = bool(self.features & Feature.DIRECT_LOAD)
        for name in ("table", "table_base_handle", "pool"):
            if (getattr(self, name) is not None) != direct_load:
                raise ValueError(
                    f"HelloAck.{name} must be present exactly when DIRECT_LOAD is set"
                )
        if self.table_base_handle is not None:
            _check_uint("HelloAck", "table_base_handle", self.table_base_handle, U64)
        direct_alloc = bool(self.features & Feature.DIRECT_ALLOC)
        for name in ("partition", "ring", "head"):
            if (getattr(self, name) is not None) != direct_alloc:
                raise ValueError(
                    f"HelloAck.{name} must be present exactly when DIRECT_ALLOC is set"
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class _DataRequest(Message):
    """Requests with a Data Descriptor and an optional Completion Descriptor."""

    data_descriptor: DataDescriptor = field(default_factory=DataDescriptor)
    completion_descriptor: CompletionDescriptor | None = None

    def _check_record(self) -> None:
        record = bool(int(self.flags) & _RECORD)
        if record != (self.completion_descriptor is not None):
            raise ValueError(
                f"{type(self).__name__}.completion_descriptor must be present exactly "
                "when the RECORD flag is set"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Load(_DataRequest):
    """LOAD: Data Descriptor (destination) [, Completion Descriptor]."""

    OPCODE = Opcode.LOAD

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        self._check_record()
        if int(self.flags) & _INLINE:
            raise ValueError("Load.flags: INLINE is not defined for LOAD")


@dataclass(frozen=True, slots=True, kw_only=True)
class _StoreRequest(_DataRequest):
    """STORE and ALLOC_STORE: [inline data] after the descriptors."""

    inline_data: bytes | None = None

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        self._check_record()
        owner = type(self).__name__
        inline = bool(int(self.flags) & _INLINE)
        if inline != (self.inline_data is not None):
            raise ValueError(f"{owner}.inline_data must be present exactly when INLINE is set")
        if self.inline_data is not None:
            if not isinstance(self.inline_data, bytes):
                raise ValueError(f"{owner}.inline_data must be bytes")
            dd = self.data_descriptor
            if dd.stag or dd.tagged_offset or dd.length != len(self.inline_data):
                raise ValueError(
                    f"{owner}.data_descriptor must be (0, 0, {len(self.inline_data)}) "
                    f"with {len(self.inline_data)} octets of inline data, got {dd}"
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class Store(_StoreRequest):
    """STORE (Block Mapped Store)."""

    OPCODE = Opcode.STORE


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocStore(_StoreRequest):
    """ALLOC_STORE (Block Unmapped Store)."""

    OPCODE = Opcode.ALLOC_STORE


@dataclass(frozen=True, slots=True, kw_only=True)
class Free(Message):
    """FREE: [Completion Descriptor]."""

    OPCODE = Opcode.FREE
    completion_descriptor: CompletionDescriptor | None = None

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        if bool(int(self.flags) & _RECORD) != (self.completion_descriptor is not None):
            raise ValueError(
                "Free.completion_descriptor must be present exactly when RECORD is set"
            )
        if int(self.flags) & _INLINE:
            raise ValueError("Free.flags: INLINE is not defined for FREE")


@dataclass(frozen=True, slots=True, kw_only=True)
class Bind(Message):
    """BIND: Ticket (32), Data Length (32), Block Offset (64) (draft, "Direct Modes")."""

    OPCODE = Opcode.BIND
    ticket: int = 0
    data_length: int = 0
    block_offset: int = 0

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_uint("Bind", "ticket", self.ticket, U32)
        _check_uint("Bind", "data_length", self.data_length, U32)
        _check_uint("Bind", "block_offset", self.block_offset, U64)


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion(Message):
    """COMPLETION: Data Length (32), Reserved (32), Block Offset (64)."""

    OPCODE = Opcode.COMPLETION
    data_length: int = 0
    block_offset: int = 0

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_uint("Completion", "data_length", self.data_length, U32)
        _check_uint("Completion", "block_offset", self.block_offset, U64)


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodbye(Message):
    """GOODBYE: no body; flag RELEASE frees every handle of the initiator."""

    OPCODE = Opcode.GOODBYE

    @property
    def release(self) -> bool:
        return bool(self.flags & GoodbyeFlag.RELEASE)


#: Opcode -> message class, the codec's dispatch table.
MESSAGE_TYPES: dict[Opcode, type[Message]] = {
    cls.OPCODE: cls
    for cls in (Hello, HelloAck, Load, Store, AllocStore, Free, Bind, Completion, Goodbye)
}
