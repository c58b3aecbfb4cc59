"""Per-initiator state (sessions survive their connection) and per-connection state.

An :class:`InitiatorState` exists for every configured initiator from the start; a HELLO
attaches it to a connection, GOODBYE or a connection failure detaches it (keeping its
bindings until ``retained_until`` unless GOODBYE had RELEASE).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from kbtpsim.target.config import InitiatorConfig
from kbtpsim.wire.constants import Feature

if TYPE_CHECKING:
    from kbtpsim.target.ring import FreeRing


class ConnState(Enum):
    CONNECTED = "connected"  #: transport up, no session (before HELLO or after GOODBYE)
    ESTABLISHED = "established"  #: HELLO accepted


@dataclass(slots=True)
class DirectAlloc:
    """DIRECT_ALLOC state of an initiator: its own ring over its partition of the pool."""

    ring: FreeRing
    partition: range  #: Block Offsets of the partition (len == quota)
    ring_stag: int
    head_stag: int
    partition_stag: int | None = None  #: of the current connection; None when invalid
    outstanding: dict[int, int] = field(default_factory=dict)  #: ticket -> taken_at (ps)
    abandoned: set[int] = field(default_factory=set)


@dataclass(slots=True)
class InitiatorState:
    """An initiator's session: its bindings and quota use, attached or retained."""

    config: InitiatorConfig
    index: int
    connection_id: int | None = None
    features: Feature = Feature(0)
    retained_until: int | None = None  #: ps; set while detached with bindings kept
    bound: set[int] = field(default_factory=set)  #: handles bound (VALID entries)
    tickets: int = 0  #: tickets taken and neither bound nor reclaimed
    freeing: int = 0  #: FREEs whose ring write is deferred (usage until they complete)
    overdrawn: bool = False  #: took direct tickets beyond its quota (misbehaviour)
    direct: DirectAlloc | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def usage(self) -> int:
        """Bound handles plus tickets taken and not bound (draft, "Allocation Quotas")."""
        return len(self.bound) + self.tickets + self.freeing

    @property
    def active(self) -> bool:
        return self.connection_id is not None

    @property
    def direct_alloc_enabled(self) -> bool:
        return (
            self.direct is not None
            and bool(self.features & Feature.DIRECT_ALLOC)
            and self.direct.partition_stag is not None
        )


@dataclass(slots=True)
class Connection:
    """One RDMA connection; requests are processed in order, one at a time."""

    connection_id: int
    state: ConnState = ConnState.CONNECTED
    initiator: InitiatorState | None = None
    addr_le: bool = False
    busy: bool = False  #: an operation is waiting (slot, RDMA Read data, deferred free)
    queue: deque[tuple[bytes, bool]] = field(default_factory=deque)
