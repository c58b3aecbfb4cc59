"""What the target asks its caller to do: memory effects and messages (sans-IO output).

Every effect names the connection it belongs to. A simulator carries them out in list
order (for a LOAD, the RDMA Write of the data precedes the completion, as RDMAP rule 5
requires); a test inspects them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbtpsim.wire.messages import Message
from kbtpsim.wire.structures import CompletionRecord


@dataclass(frozen=True, slots=True)
class SendMessage:
    """Send ``message`` (COMPLETION or HELLO_ACK); ``data`` is its encoding.

    ``invalidate_stag`` set means Send with Invalidate of that initiator STag (INVALIDATE).
    """

    connection_id: int
    message: Message
    data: bytes
    invalidate_stag: int | None = None


@dataclass(frozen=True, slots=True)
class WriteInitiator:
    """RDMA Write ``data`` to the initiator buffer (STag, Tagged Offset): a LOAD's data."""

    connection_id: int
    stag: int
    tagged_offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ReadInitiator:
    """RDMA Read ``length`` octets at (STag, Tagged Offset) for a non-inline store.

    The caller answers with ``Target.complete_read(token, data, now)``; the request (and
    every later request of the connection) waits until then.
    """

    connection_id: int
    token: int
    stag: int
    tagged_offset: int
    length: int


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """RDMA Write (with Immediate on InfiniBand) of a 24-octet completion record."""

    connection_id: int
    stag: int
    tagged_offset: int
    record: CompletionRecord
    data: bytes


@dataclass(frozen=True, slots=True)
class InvalidateStag:
    """The target invalidates one of its own STags (a ticket timed out: Partition STag)."""

    connection_id: int
    stag: int
    reason: str


Effect = SendMessage | WriteInitiator | ReadInitiator | WriteRecord | InvalidateStag
