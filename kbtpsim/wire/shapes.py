"""The common messages' fixed layouts as single structs: the codec's fast path.

A LOAD, STORE or ALLOC_STORE without a Completion Descriptor is the 24-octet Common
Header and a 16-octet Data Descriptor (then, with INLINE, the data); a FREE without one is
the header alone; a COMPLETION is the header, Data Length, Reserved and Block Offset
(draft, "Common Header", "Descriptors", "COMPLETION Body"). In network byte order each is
one :class:`struct.Struct`, packed or unpacked in one call instead of field by field.

Only what decodes cleanly takes this way: a reader that meets anything else (ADDR_LE,
RECORD, INLINE where it is not defined, a length that does not match, another opcode)
returns None, and :func:`kbtpsim.wire.codec.decode` reads the message field by field,
which alone words the errors. Both ways give equal messages (``tests/wire/test_shapes.py``).
"""

from __future__ import annotations

import struct

from kbtpsim.wire.constants import VERSION, Opcode, RequestFlag, status_of
from kbtpsim.wire.messages import AllocStore, Completion, DataDescriptor, Free, Load, Message, Store

#: Version, Opcode, Flags, Request ID, Block Handle, Generation, Status (draft, "Common
#: Header"): 24 octets.
_HEADER = struct.Struct(">BBHQQHH")
#: The header and a Data Descriptor: STag, Tagged Offset, Length (40 octets).
_REQUEST = struct.Struct(">BBHQQHHIQI")
#: The header and COMPLETION's Data Length, Reserved, Block Offset (40 octets).
_COMPLETION = struct.Struct(">BBHQQHHIIQ")

_LOAD, _STORE, _ALLOC_STORE = int(Opcode.LOAD), int(Opcode.STORE), int(Opcode.ALLOC_STORE)
_FREE, _COMPLETION_OP = int(Opcode.FREE), int(Opcode.COMPLETION)
_INLINE, _RECORD = int(RequestFlag.INLINE), int(RequestFlag.RECORD)
_FLAGS: dict[int, RequestFlag] = {}  # raw Flags -> RequestFlag, as the codec builds it


def _request_flags(raw: int) -> RequestFlag:
    flags = _FLAGS.get(raw)
    if flags is None:
        flags = _FLAGS[raw] = RequestFlag(raw)
    return flags


def read(data: bytes) -> Message | None:
    """The message in ``data`` (network byte order), or None if it is not of a fixed
    layout above or anything in it is unexpected."""
    size = len(data)
    if size < _HEADER.size or data[0] != VERSION:
        return None
    opcode = data[1]
    try:
        if opcode == _COMPLETION_OP:
            if size != _COMPLETION.size:
                return None
            _, _, flags, rid, handle, gen, status, length, _, offset = _COMPLETION.unpack(data)
            return Completion(flags=flags, request_id=rid, handle=handle, generation=gen,
                              status=status_of(status), data_length=length,
                              block_offset=offset)
        if opcode == _FREE:
            if size != _HEADER.size:
                return None
            _, _, flags, rid, handle, gen, status = _HEADER.unpack(data)
            if flags & (_INLINE | _RECORD):
                return None
            return Free(flags=_request_flags(flags), request_id=rid, handle=handle,
                        generation=gen, status=status_of(status))
        if opcode != _LOAD and opcode != _STORE and opcode != _ALLOC_STORE:
            return None
        if size < _REQUEST.size:
            return None
        _, _, flags, rid, handle, gen, status, stag, to, length = _REQUEST.unpack_from(data)
        if flags & _RECORD:
            return None
        dd = DataDescriptor(stag, to, length)
        if opcode == _LOAD:
            if size != _REQUEST.size or flags & _INLINE:
                return None
            return Load(flags=_request_flags(flags), request_id=rid, handle=handle,
                        generation=gen, status=status_of(status),
                        data_descriptor=dd)
        inline: bytes | None = None
        if flags & _INLINE:
            if stag or to or size - _REQUEST.size != length:
                return None
            inline = data[_REQUEST.size:]
        elif size != _REQUEST.size:
            return None
        cls = Store if opcode == _STORE else AllocStore
        return cls(flags=_request_flags(flags), request_id=rid, handle=handle,
                   generation=gen, status=status_of(status), data_descriptor=dd,
                   inline_data=inline)
    except ValueError:  # a constructor's check: the field-by-field way words it
        return None


def write(msg: Message) -> bytes | None:
    """The octets of ``msg`` in network byte order, or None if it is not of a fixed
    layout above."""
    kind = type(msg)
    if kind is Completion:
        assert isinstance(msg, Completion)
        return _COMPLETION.pack(VERSION, _COMPLETION_OP, msg.flags, msg.request_id,
                                msg.handle, msg.generation, msg.status, msg.data_length, 0,
                                msg.block_offset)
    if kind is Load or kind is Store or kind is AllocStore:
        assert isinstance(msg, Load | Store | AllocStore)
        if msg.completion_descriptor is not None:
            return None
        dd = msg.data_descriptor
        head = _REQUEST.pack(VERSION, msg.OPCODE, msg.flags, msg.request_id, msg.handle,
                             msg.generation, msg.status, dd.stag, dd.tagged_offset,
                             dd.length)
        inline = None if kind is Load else msg.inline_data  # type: ignore[union-attr]
        return head if inline is None else head + inline
    if kind is Free:
        assert isinstance(msg, Free)
        if msg.completion_descriptor is not None:
            return None
        return _HEADER.pack(VERSION, _FREE, msg.flags, msg.request_id, msg.handle,
                            msg.generation, msg.status)
    return None
