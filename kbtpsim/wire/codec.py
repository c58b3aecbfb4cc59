"""Byte-exact encoding and decoding of KBTP messages (draft, "Messages").

``encode(msg, addr_le)`` and ``decode(data, addr_le)`` are paired: for every message
``decode(encode(m, le), le) == m``. ``decode`` raises only :class:`DecodeError` (status
MALFORMED, with the octet offset and a reason); nothing else escapes it.

ADDR_LE (draft, "HELLO_ACK Body") makes the Block Handle and the STag, Tagged Offset and
Length of Data and Completion Descriptors little-endian; by decision D3 the Block Offset of
COMPLETION and BIND follows it too, and HELLO and HELLO_ACK, which negotiate it, are always
big-endian (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from kbtpsim.wire import shapes
from kbtpsim.wire.constants import (
    DESCRIPTOR_SIZE,
    HEADER_SIZE,
    VERSION,
    Feature,
    Opcode,
    RequestFlag,
    flag_type,
    status_of,
)
from kbtpsim.wire.errors import DecodeError
from kbtpsim.wire.messages import (
    MESSAGE_TYPES,
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    DirectDescriptor,
    Free,
    Goodbye,
    Hello,
    HelloAck,
    Load,
    Message,
    Store,
    _DataRequest,
    _StoreRequest,
)
from kbtpsim.wire.structures import ByteOrder, addr_order

_NEGOTIATION = (Opcode.HELLO, Opcode.HELLO_ACK)


# --- writer ---------------------------------------------------------------------------


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def uint(self, value: int, size: int, order: ByteOrder = "big") -> None:
        self.buf += int(value).to_bytes(size, order)

    def raw(self, data: bytes) -> None:
        self.buf += data


def _push_data_descriptor(w: _Writer, dd: DataDescriptor, order: ByteOrder) -> None:
    w.uint(dd.stag, 4, order)
    w.uint(dd.tagged_offset, 8, order)
    w.uint(dd.length, 4, order)


def _push_completion_descriptor(w: _Writer, cd: CompletionDescriptor, order: ByteOrder) -> None:
    w.uint(cd.stag, 4, order)
    w.uint(cd.tagged_offset, 8, order)
    w.uint(0, 4)


def _push_direct(w: _Writer, d: DirectDescriptor) -> None:
    w.uint(d.stag, 4)
    w.uint(d.tagged_offset, 8)
    w.uint(d.count, 4)


def _push_body(w: _Writer, msg: Message, order: ByteOrder) -> None:
    if isinstance(msg, Hello):
        w.uint(msg.requested_features, 2)
        w.uint(msg.completion_credits, 2)
        w.raw(msg.initiator_id)
    elif isinstance(msg, HelloAck):
        for value, size in (
            (msg.features, 2),
            (msg.request_credits, 2),
            (msg.block_size, 4),
            (msg.max_inline, 4),
            (msg.allocation_quota, 4),
            (msg.handle_base, 8),
            (msg.handle_count, 4),
            (msg.ticket_timeout_ms, 4),
        ):
            w.uint(value, size)
        if msg.table is not None and msg.pool is not None and msg.table_base_handle is not None:
            _push_direct(w, msg.table)
            w.uint(msg.table_base_handle, 8)
            w.uint(0, 8)
            _push_direct(w, msg.pool)
        if msg.partition is not None and msg.ring is not None and msg.head is not None:
            _push_direct(w, msg.partition)
            _push_direct(w, msg.ring)
            _push_direct(w, msg.head)
    elif isinstance(msg, _DataRequest):
        _push_data_descriptor(w, msg.data_descriptor, order)
        if msg.completion_descriptor is not None:
            _push_completion_descriptor(w, msg.completion_descriptor, order)
        if isinstance(msg, _StoreRequest) and msg.inline_data is not None:
            w.raw(msg.inline_data)
    elif isinstance(msg, Free):
        if msg.completion_descriptor is not None:
            _push_completion_descriptor(w, msg.completion_descriptor, order)
    elif isinstance(msg, Bind):
        w.uint(msg.ticket, 4)
        w.uint(msg.data_length, 4)
        w.uint(msg.block_offset, 8, order)
    elif isinstance(msg, Completion):
        w.uint(msg.data_length, 4)
        w.uint(0, 4)
        w.uint(msg.block_offset, 8, order)
    elif isinstance(msg, Goodbye):
        pass
    else:  # pragma: no cover - MESSAGE_TYPES lists every class
        raise TypeError(f"not a KBTP message: {msg!r}")


def encode(msg: Message, addr_le: bool = False) -> bytes:
    """The octets of ``msg``; ``addr_le`` selects ADDR_LE field order."""
    if not addr_le:
        fixed = shapes.write(msg)  # the common messages, one struct each
        if fixed is not None:
            return fixed
    return encode_fields(msg, addr_le)


def encode_fields(msg: Message, addr_le: bool = False) -> bytes:
    """:func:`encode`, field by field: every message, either byte order."""
    if not isinstance(msg, Message) or type(msg) not in MESSAGE_TYPES.values():
        raise TypeError(f"not a KBTP message: {msg!r}")
    order = "big" if msg.OPCODE in _NEGOTIATION else addr_order(addr_le)
    w = _Writer()
    w.uint(VERSION, 1)
    w.uint(msg.OPCODE, 1)
    w.uint(msg.flags, 2)
    w.uint(msg.request_id, 8)
    w.uint(msg.handle, 8, order)
    w.uint(msg.generation, 2)
    w.uint(msg.status, 2)
    _push_body(w, msg, order)
    return bytes(w.buf)


# --- reader ---------------------------------------------------------------------------


class _Reader:
    """Pulls fields off a buffer, raising DecodeError with the offset on truncation."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, size: int, what: str) -> bytes:
        if self.left < size:
            raise DecodeError(
                self.pos, f"truncated {what}: need {size} octets, {self.left} left"
            )
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def uint(self, size: int, what: str, order: ByteOrder = "big") -> int:
        return int.from_bytes(self.take(size, what), order)

    def fail(self, reason: str, offset: int | None = None) -> DecodeError:
        return DecodeError(self.pos if offset is None else offset, reason)


def _pull_data_descriptor(r: _Reader, order: ByteOrder) -> DataDescriptor:
    return DataDescriptor(
        stag=r.uint(4, "Data Descriptor STag", order),
        tagged_offset=r.uint(8, "Data Descriptor Tagged Offset", order),
        length=r.uint(4, "Data Descriptor Length", order),
    )


def _pull_completion_descriptor(r: _Reader, order: ByteOrder) -> CompletionDescriptor:
    if r.left < DESCRIPTOR_SIZE:
        raise r.fail(
            f"RECORD flag needs a 16-octet Completion Descriptor, {r.left} octets left"
        )
    stag = r.uint(4, "Completion Descriptor STag", order)
    tagged_offset = r.uint(8, "Completion Descriptor Tagged Offset", order)
    r.take(4, "Completion Descriptor Reserved")  # ignored on receipt (decision D6)
    return CompletionDescriptor(stag=stag, tagged_offset=tagged_offset)


def _pull_direct(r: _Reader, what: str) -> DirectDescriptor:
    if r.left < DESCRIPTOR_SIZE:
        raise r.fail(f"Features announce a {what} descriptor, but only {r.left} octets left")
    return DirectDescriptor(
        stag=r.uint(4, f"{what} STag"),
        tagged_offset=r.uint(8, f"{what} Tagged Offset"),
        count=r.uint(4, f"{what} Count"),
    )


Header = dict[str, object]
BodyReader = Callable[[_Reader, Header, ByteOrder], Message]


def _read_hello(r: _Reader, h: Header, order: ByteOrder) -> Message:
    return Hello(
        **h,  # type: ignore[arg-type]
        requested_features=Feature(r.uint(2, "Requested Features")),
        completion_credits=r.uint(2, "Completion Credits"),
        initiator_id=r.take(16, "Initiator ID"),
    )


def _read_hello_ack(r: _Reader, h: Header, order: ByteOrder) -> Message:
    features = Feature(r.uint(2, "Features"))
    fields: dict[str, object] = {"features": features}
    for name, size, what in (
        ("request_credits", 2, "Request Credits"),
        ("block_size", 4, "Block Size"),
        ("max_inline", 4, "Max Inline"),
        ("allocation_quota", 4, "Allocation Quota"),
        ("handle_base", 8, "Handle Base"),
        ("handle_count", 4, "Handle Count"),
        ("ticket_timeout_ms", 4, "Ticket Timeout"),
    ):
        fields[name] = r.uint(size, what)
    if features & Feature.DIRECT_LOAD:
        fields["table"] = _pull_direct(r, "Table")
        if r.left < 16:
            raise r.fail(f"DIRECT_LOAD needs Table Base Handle and Reserved, {r.left} left")
        fields["table_base_handle"] = r.uint(8, "Table Base Handle")
        r.take(8, "Reserved")
        fields["pool"] = _pull_direct(r, "Pool")
    if features & Feature.DIRECT_ALLOC:
        fields["partition"] = _pull_direct(r, "Partition")
        fields["ring"] = _pull_direct(r, "Ring")
        fields["head"] = _pull_direct(r, "Head")
    return HelloAck(**h, **fields)  # type: ignore[arg-type]


def _read_data_request(r: _Reader, h: Header, order: ByteOrder, opcode: Opcode) -> Message:
    flags = RequestFlag(cast(int, h["flags"]))
    dd_at = r.pos
    dd = _pull_data_descriptor(r, order)
    cd = _pull_completion_descriptor(r, order) if flags & RequestFlag.RECORD else None
    if opcode is Opcode.LOAD:
        if flags & RequestFlag.INLINE:
            raise r.fail("INLINE is not defined for LOAD", offset=2)
        return Load(**h, data_descriptor=dd, completion_descriptor=cd)  # type: ignore[arg-type]
    inline: bytes | None = None
    if flags & RequestFlag.INLINE:
        if dd.stag or dd.tagged_offset:
            raise r.fail("INLINE Data Descriptor must have STag and Tagged Offset 0", dd_at)
        if r.left != dd.length:
            raise r.fail(
                f"inline length mismatch: Data Descriptor Length is {dd.length}, "
                f"{r.left} octets of inline data follow"
            )
        inline = r.take(dd.length, "inline data")
    cls = Store if opcode is Opcode.STORE else AllocStore
    return cls(**h, data_descriptor=dd, completion_descriptor=cd, inline_data=inline)  # type: ignore[arg-type]


def _read_free(r: _Reader, h: Header, order: ByteOrder) -> Message:
    flags = RequestFlag(cast(int, h["flags"]))
    if flags & RequestFlag.INLINE:
        raise r.fail("INLINE is not defined for FREE", offset=2)
    cd = _pull_completion_descriptor(r, order) if flags & RequestFlag.RECORD else None
    return Free(**h, completion_descriptor=cd)  # type: ignore[arg-type]


def _read_bind(r: _Reader, h: Header, order: ByteOrder) -> Message:
    return Bind(
        **h,  # type: ignore[arg-type]
        ticket=r.uint(4, "Ticket"),
        data_length=r.uint(4, "Data Length"),
        block_offset=r.uint(8, "Block Offset", order),
    )


def _read_completion(r: _Reader, h: Header, order: ByteOrder) -> Message:
    data_length = r.uint(4, "Data Length")
    r.take(4, "Reserved")  # ignored on receipt (decision D6)
    return Completion(
        **h,  # type: ignore[arg-type]
        data_length=data_length,
        block_offset=r.uint(8, "Block Offset", order),
    )


def _read_goodbye(r: _Reader, h: Header, order: ByteOrder) -> Message:
    return Goodbye(**h)  # type: ignore[arg-type]


_BODY_READERS: dict[Opcode, BodyReader] = {
    Opcode.HELLO: _read_hello,
    Opcode.HELLO_ACK: _read_hello_ack,
    Opcode.LOAD: lambda r, h, o: _read_data_request(r, h, o, Opcode.LOAD),
    Opcode.STORE: lambda r, h, o: _read_data_request(r, h, o, Opcode.STORE),
    Opcode.ALLOC_STORE: lambda r, h, o: _read_data_request(r, h, o, Opcode.ALLOC_STORE),
    Opcode.FREE: _read_free,
    Opcode.BIND: _read_bind,
    Opcode.COMPLETION: _read_completion,
    Opcode.GOODBYE: _read_goodbye,
}


def decode(data: bytes | bytearray | memoryview, addr_le: bool = False) -> Message:
    """The message in ``data``, which must hold exactly one message.

    Raises :class:`DecodeError` (and nothing else) for truncated input, trailing octets,
    a Version other than 1, an unknown opcode, flags that need a descriptor the body lacks,
    inline data whose length does not match, or direct-mode descriptors missing for the
    advertised Features.
    """
    try:
        data = bytes(data)
    except TypeError as exc:
        raise DecodeError(0, f"not a byte string: {type(data).__name__}") from exc
    if not addr_le:
        fixed = shapes.read(data)  # the common messages, one struct each
        if fixed is not None:
            return fixed
    return decode_fields(data, addr_le)


def decode_fields(data: bytes, addr_le: bool = False) -> Message:
    """:func:`decode` of ``bytes``, field by field: every message, every error."""
    r = _Reader(data)
    version = r.uint(1, "header Version")
    if version != VERSION:
        raise DecodeError(0, f"unsupported Version {version} (expected {VERSION})")
    raw_opcode = r.uint(1, "header Opcode")
    try:
        opcode = Opcode(raw_opcode)
    except ValueError:
        raise DecodeError(1, f"unknown opcode 0x{raw_opcode:02x}") from None
    if len(data) < HEADER_SIZE:
        raise DecodeError(
            len(data), f"truncated header: need {HEADER_SIZE} octets, got {len(data)}"
        )
    order: ByteOrder = "big" if opcode in _NEGOTIATION else addr_order(addr_le)
    raw_flags = r.uint(2, "header Flags")
    kind = flag_type(opcode)
    header: Header = {
        "flags": kind(raw_flags) if kind is not None else raw_flags,
        "request_id": r.uint(8, "Request ID"),
        "handle": r.uint(8, "Block Handle", order),
        "generation": r.uint(2, "Generation"),
        "status": status_of(r.uint(2, "Status")),
    }
    try:
        message = _BODY_READERS[opcode](r, header, order)
    except ValueError as exc:  # a constructor check the readers above should pre-empt
        raise DecodeError(r.pos, f"inconsistent {opcode.name}: {exc}") from None
    if r.left:
        raise r.fail(f"{r.left} trailing octets after {opcode.name}")
    return message

