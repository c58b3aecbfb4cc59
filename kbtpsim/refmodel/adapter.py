""":class:`ModelTarget`: the reference model behind the interface of
:class:`kbtpsim.target.Target`, for the oracle's shadow (``kbtpsim check --reference
model``) and the differential tests.

The model's plain-tuple effects become the effect dataclasses of
:mod:`kbtpsim.target.effects` (the interface, no logic), and its dicts are shown through
small read-only views with the attribute names the oracle compares (``table.get``,
``rings``, ``pool``, ``initiators``, ``held_blocks``, ``counters``). Nothing here decides
a rule: every rule is in :mod:`kbtpsim.refmodel.model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbtpsim.refmodel import ring as R
from kbtpsim.refmodel.model import RefModel
from kbtpsim.target.effects import (
    Effect,
    InvalidateStag,
    ReadInitiator,
    SendMessage,
    WriteInitiator,
    WriteRecord,
)
from kbtpsim.wire import EntryFlag, Feature, RingSlot, TableEntry

_EFFECTS = {"send": SendMessage, "write": WriteInitiator, "read": ReadInitiator,
            "record": WriteRecord, "invalidate": InvalidateStag}


def effects(raw: list[Any]) -> list[Effect]:
    return [_EFFECTS[e[0]](*e[1:]) for e in raw]


@dataclass(frozen=True)
class _Ticket:
    ticket: int
    slot_offset: int


class RingView:
    def __init__(self, r: dict[str, Any]) -> None:
        self.r = r
        self.name: str = r["name"]
        self.n_slots: int = r["n"]

    head = property(lambda self: int(self.r["head"]))
    tail = property(lambda self: int(self.r["tail"]))
    head_ticket = property(lambda self: self.head >> 32)
    tail_ticket = property(lambda self: self.tail >> 32)

    def slot(self, slot_offset: int) -> RingSlot:
        return RingSlot(*R.slot(self.r, slot_offset // 16))

    def deferred_blocks(self) -> list[int]:
        return R.deferred_blocks(self.r)

    def take_ticket(self) -> _Ticket:
        """A FetchAdd on Head (the oracle's shadow does this for a DIRECT_ALLOC one)."""
        t, i = R.fetch_add(self.r, "head")
        return _Ticket(t, 16 * i)


class _Table:
    def __init__(self, m: RefModel) -> None:
        self.m = m
        self.base, self.count = m.tbase, m.tcount

    def get(self, h: int) -> TableEntry:
        f, g, n, bo = self.m.entry(h)
        return TableEntry(EntryFlag(f), g, n, bo)


class _Pool:
    def __init__(self, m: RefModel) -> None:
        self.m = m
        self.offsets = range(m.offsets[0], m.offsets[-1] + m.bs, m.bs)

    def read(self, bo: int, length: int, offset: int = 0) -> bytes:
        return self.m.block(bo)[offset:offset + length]


class _Direct:
    def __init__(self, d: dict[str, Any], ring: RingView) -> None:
        self.d, self.ring = d, ring

    outstanding = property(lambda self: dict(self.d["outstanding"]))
    abandoned = property(lambda self: set(self.d["abandoned"]))
    partition_stag = property(lambda self: self.d["pstag"])


class _Session:
    def __init__(self, m: RefModel, s: dict[str, Any], rings: list[RingView]) -> None:
        self.m, self.s = m, s
        self.name: str = s["name"]
        self.direct = None if s["direct"] is None else _Direct(
            s["direct"], next(v for v in rings if v.r is s["direct"]["ring"]))

    def __getattr__(self, what: str) -> Any:
        s = self.__dict__["s"]
        if what == "usage":
            return self.__dict__["m"].usage(s)
        if what == "connection_id":
            return s["conn"]
        if what == "bound":
            return set(s["bound"])
        if what == "features":
            return Feature(s["features"])
        if what in ("tickets", "freeing", "retained_until", "overdrawn"):
            return s[what]
        raise AttributeError(what)


class _Conn:
    def __init__(self, c: dict[str, Any]) -> None:
        self.connection_id: int = c["id"]
        self.addr_le: bool = c["le"]


class _Counters:
    def __init__(self, m: RefModel) -> None:
        self.snapshot = lambda: dict(m.counts)


class ModelTarget:
    """The model with :class:`kbtpsim.target.Target`'s method names and effects."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.model = m = RefModel(config)
        self.table = _Table(m)
        self.pool = _Pool(m)
        self.rings = [RingView(r) for r in m.rings]
        self.shared_ring = self.rings[0]
        self.initiators = {n: _Session(m, s, self.rings) for n, s in m.sess.items()}
        self.counters = _Counters(m)
        self.internal_errors: list[Exception] = []

    @property
    def connections(self) -> dict[int, _Conn]:
        return {c: _Conn(v) for c, v in self.model.conns.items()}

    @property
    def held_blocks(self) -> dict[int, str]:
        return dict(self.model.held)

    def connect(self, connection_id: int, now: int) -> None:
        self.model.connect(connection_id, now)

    def disconnect(self, connection_id: int, now: int) -> list[Effect]:
        return effects(self.model.disconnect(connection_id, now))

    def handle(self, connection_id: int, data: bytes, now: int, *,
               hold_after_ticket: bool = False) -> list[Effect]:
        return effects(self.model.handle(connection_id, data, now, hold_after_ticket))

    def read_slot(self, connection_id: int, now: int) -> list[Effect]:
        return effects(self.model.read_slot(connection_id, now))

    def complete_read(self, token: int, data: bytes, now: int) -> list[Effect]:
        return effects(self.model.complete_read(token, data, now))

    def quiesced(self, block_offset: int, now: int, ticket: int | None = None) -> list[Effect]:
        if ticket is not None:
            raise ValueError("the reference model takes its own Tail tickets")
        return effects(self.model.quiesced(block_offset, now))

    @property
    def quiescing(self) -> list[int]:
        return list(self.model.quiescing)

    def advance(self, now: int) -> list[Effect]:
        return effects(self.model.advance(now))

    def next_deadline(self) -> int | None:
        return self.model.next_deadline()

    def remote_fetch_add(self, connection_id: int, stag: int, tagged_offset: int,
                         now: int) -> int:
        return self.model.remote_fetch_add(connection_id, stag, tagged_offset, now)

    def ticket_taken(self, initiator: str, ticket: int, now: int) -> None:
        if self.model.sess.get(initiator, {}).get("direct") is None:
            raise ValueError(f"{initiator!r} has no DIRECT_ALLOC ring")
        self.model.ticket_taken(initiator, ticket, now)

    def check_invariant(self) -> None:
        self.model.check_invariant()
