"""What the software target keeps for a request that waits (an allocation for its slot,
a store for its RDMA Read data, a free for its ring write)."""

from __future__ import annotations

from dataclasses import dataclass

from kbtpsim.target.ring import FreeRing, Ticket
from kbtpsim.target.session import InitiatorState
from kbtpsim.wire import AllocStore, Free, Store, TableEntry


@dataclass(slots=True)
class PendingAlloc:
    """A target-executed allocation that has its ticket but not yet its block.

    ``msg`` None means a reclaim: the block goes straight back to the ring (an abandoned
    direct ticket, or an allocation whose connection failed).
    """

    conn_id: int | None
    sess: InitiatorState
    msg: AllocStore | None
    ring: FreeRing
    ticket: Ticket
    held: bool = False  #: stopped before reading the slot until read_slot()


@dataclass(slots=True)
class PendingRead:
    """A non-inline store waiting for the RDMA Read data of its Data Descriptor."""

    conn_id: int
    sess: InitiatorState
    msg: Store | AllocStore
    block: int | None = None  #: for ALLOC_STORE, the block already taken from the ring


@dataclass(slots=True)
class PendingFree:
    """A free whose slot write is deferred; completes when the slot is consumed."""

    conn_id: int | None
    sess: InitiatorState
    msg: Free | None
    entry: TableEntry | None


__all__ = ["PendingAlloc", "PendingFree", "PendingRead"]
