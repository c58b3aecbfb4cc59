"""The baselines' RPC messages (not KBTP): a fixed header, data after it.

Request (24 octets): opcode (1), status (1, zero), reserved (2), length (4), request id
(8), handle (8); a two-sided STORE carries ``length`` data octets after it. Reply (40
octets): opcode | 0x80, status (a :class:`kbtpsim.wire.Status` value), reserved, length,
request id, handle, address (8), STag (4), reserved (4); a two-sided LOAD's reply carries
``length`` data octets after it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

_REQ = struct.Struct(">BBHIQQ")
_REPLY = struct.Struct(">BBHIQQQI4x")
REQUEST_SIZE = _REQ.size  # 24
REPLY_SIZE = _REPLY.size  # 40
REPLY_BIT = 0x80


class RpcOp(IntEnum):
    ALLOC = 1  #: one-sided dynamic: allocate a region of ``length`` octets for ``handle``
    STORE = 2  #: two-sided: data follows; allocate (or overwrite) and copy
    LOAD = 3  #: two-sided: send the handle's data back
    FREE = 4  #: free the handle's region


@dataclass(frozen=True, slots=True)
class Rpc:
    op: RpcOp
    request_id: int
    handle: int
    length: int = 0
    status: int = 0
    addr: int = 0
    stag: int = 0
    reply: bool = False


def encode_request(op: RpcOp, request_id: int, handle: int, length: int = 0) -> bytes:
    return _REQ.pack(op, 0, 0, length, request_id, handle)


def encode_reply(req: Rpc, status: int, length: int = 0, addr: int = 0, stag: int = 0) -> bytes:
    return _REPLY.pack(req.op | REPLY_BIT, status, 0, length, req.request_id, req.handle,
                       addr, stag)


def decode(data: bytes) -> Rpc:
    """A request or a reply (by the opcode's high bit)."""
    if data and data[0] & REPLY_BIT:
        op, status, _, length, rid, handle, addr, stag = _REPLY.unpack_from(data)
        return Rpc(RpcOp(op & ~REPLY_BIT), rid, handle, length, status, addr, stag, True)
    op, _status, _, length, rid, handle = _REQ.unpack_from(data)
    return Rpc(RpcOp(op), rid, handle, length)


__all__ = ["REPLY_SIZE", "REQUEST_SIZE", "Rpc", "RpcOp", "decode", "encode_reply",
           "encode_request"]
