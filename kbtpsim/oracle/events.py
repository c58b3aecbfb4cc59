"""What the oracle records of a run: target calls and chain work requests, as events.

Every request the offloaded target serves reaches the shadow as one or two
:class:`Event`\\ s, each at its *linearisation point*:

* a request the CPU serves: the CPU's call into its :class:`~kbtpsim.target.Target`
  (recorded by :class:`TargetTap`, which wraps the server's target);
* a LOAD a chain serves: the finish time of the WR that reads the table entry;
* a STORE a chain serves: the finish time of the WR that writes the table entry;
* an ALLOC_STORE a chain serves: its ticket (the masked FetchAdd on Head) and then the
  WR that reads the slot (the shadow takes the ticket with ``hold_after_ticket`` and
  reads the slot at the second point, so a free deferred in between is deferred in the
  shadow too: draft, "Block Unmapped Store" and the interleaving example).

Allocations are then put in ticket order (:func:`linearise`): a FetchAdd's WR may
finish after a later ticket's, but the ring hands blocks out by ticket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kbtpsim.target import Effect, ReadInitiator, Target


@dataclass
class Event:
    """One step of the shadow, at ``time`` (ps); ``seq`` breaks ties (record order)."""

    time: int
    seq: int
    kind: str  #: connect, handle, read_slot, read, advance, disconnect, ticket_taken,
    #: quiesced
    conn: int | None = None
    data: bytes = b""
    hold: bool = False  #: handle with hold_after_ticket (an allocation's first half)
    ticket: int | None = None  #: the Head ticket this event takes (ring ``ring``)
    ring: str | None = None
    initiator: str | None = None  #: ticket_taken: whose Head
    via: str = "cpu"  #: "cpu" or "nic" (a chain served the request)
    variant: str | None = None  #: the chain variant that served it
    credit: int | None = None  #: the chain credit (for the WR timeline)
    token: int | None = None  #: read: the live target's RDMA Read token
    block: int | None = None  #: quiesced: the Block Offset a free returns now (C13)

    def describe(self) -> str:
        who = f"conn {self.conn}" if self.conn is not None else (self.initiator or "-")
        by = f"NIC {self.variant}" if self.via == "nic" else "CPU"
        return f"t={self.time / 1e6:.3f}us {self.kind} {who} ({by})"


class Recorder:
    """Collects events in record order (``seq``); :meth:`take` empties it."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._seq = 0

    def add(self, time: int, kind: str, **kw: Any) -> Event:
        self._seq += 1
        ev = Event(int(time), self._seq, kind, **kw)
        self.events.append(ev)
        return ev

    def take(self) -> list[Event]:
        out, self.events = self.events, []
        return out


class TargetTap:
    """A transparent proxy of the live target that records every call the server makes
    (and, for each, the Head tickets it took), as events at the call's ``now``."""

    def __init__(self, target: Target, recorder: Recorder) -> None:
        self._t = target
        self._rec = recorder
        #: live RDMA Read token -> connection (from the ReadInitiator effects)
        self.read_conn: dict[int, int] = {}
        #: called as (slot address, octets before, after) when a call wrote the slot of
        #: a free's Tail ticket (the slot-write fault of kbtpsim.oracle.faults)
        self.slot_hook: Callable[[int, bytes, bytes], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)

    @property
    def inner(self) -> Target:
        """The live target itself."""
        return self._t

    # -- helpers -------------------------------------------------------------------
    def _heads(self) -> dict[str, int]:
        return {r.name: r.head_ticket for r in self._t.rings}

    def _tickets(self, before: dict[str, int]) -> tuple[int | None, str | None]:
        for r in self._t.rings:
            taken = (r.head_ticket - before[r.name]) & 0xFFFF_FFFF
            if taken:
                return before[r.name], r.name
        return None, None

    def _effects(self, out: list[Effect]) -> list[Effect]:
        for e in out:
            if isinstance(e, ReadInitiator):
                self.read_conn[e.token] = e.connection_id
        return out

    def _slots_at_tails(self) -> list[tuple[int, int, bytes]]:
        """(ring index, Tail ticket, slot octets) of the slot each ring's next free
        writes (memory-backed targets only)."""
        t = self._t
        if t.store is None or self.slot_hook is None:
            return []
        out = []
        for i, (r, where) in enumerate(zip(t.rings, t.layout.rings, strict=True)):
            addr = where.slot_addr(r.slot_offset_of(r.tail_ticket))
            out.append((i, r.tail_ticket, t.store.read(addr, 16)))
        return out

    def _tracked(self, kind: str, now: int, call: Callable[[], list[Effect]],
                 **kw: Any) -> list[Effect]:
        before = self._heads()
        slots = self._slots_at_tails()
        out = call()
        for i, tail, old in slots:  # a free wrote its slot: tell the slot-write fault
            r, where = self._t.rings[i], self._t.layout.rings[i]
            addr = where.slot_addr(r.slot_offset_of(tail))
            new = self._t.store.read(addr, 16)  # type: ignore[union-attr]
            if r.tail_ticket != tail and new != old and self.slot_hook is not None:
                self.slot_hook(addr, old, new)
        ticket, ring = self._tickets(before)
        self._rec.add(now, kind, ticket=ticket, ring=ring, **kw)
        return self._effects(out)

    # -- the calls the servers make ------------------------------------------------
    def connect(self, connection_id: int, now: int) -> None:
        self._t.connect(connection_id, now)
        self._rec.add(now, "connect", conn=connection_id)

    def disconnect(self, connection_id: int, now: int) -> list[Effect]:
        return self._tracked("disconnect", now,
                             lambda: self._t.disconnect(connection_id, now),
                             conn=connection_id)

    def handle(self, connection_id: int, data: bytes, now: int, *,
               hold_after_ticket: bool = False) -> list[Effect]:
        return self._tracked(
            "handle", now,
            lambda: self._t.handle(connection_id, data, now, hold_after_ticket=hold_after_ticket),
            conn=connection_id, data=bytes(data), hold=hold_after_ticket)

    def read_slot(self, connection_id: int, now: int) -> list[Effect]:
        return self._tracked("read_slot", now, lambda: self._t.read_slot(connection_id, now),
                             conn=connection_id)

    def complete_read(self, token: int, data: bytes, now: int) -> list[Effect]:
        conn = self.read_conn.pop(token, None)
        return self._tracked("read", now, lambda: self._t.complete_read(token, data, now),
                             conn=conn, data=bytes(data), token=token)

    def advance(self, now: int) -> list[Effect]:
        return self._tracked("advance", now, lambda: self._t.advance(now))

    def quiesced(self, block_offset: int, now: int, ticket: int | None = None,
                 ticket_time: int | None = None) -> list[Effect]:
        """A free's ring return; with ``ticket`` the CPU took that Tail ticket through
        the NIC at ``ticket_time`` (decision C20): the return took effect there, and the
        event names the ticket (in Tail order, ring ``NAME/tail``)."""
        if ticket is None:
            return self._tracked("quiesced", now,
                                 lambda: self._t.quiesced(block_offset, now), block=block_offset)
        self._rec.add(now if ticket_time is None else ticket_time, "quiesced",
                      block=block_offset, ticket=ticket,
                      ring=f"{self._t.shared_ring.name}{TAIL}")
        return self._effects(self._t.quiesced(block_offset, now, ticket))

    def note_chain_free(self, connection_id: int, data: bytes, ticket: int,
                        now: int) -> list[Effect]:
        # bookkeeping of a FREE whose events came from the chain's WRs (C20)
        return self._effects(self._t.note_chain_free(connection_id, data, ticket, now))

    def finish_free(self, connection_id: int, data: bytes, ticket: int | None,
                    now: int) -> list[Effect]:
        # a FREE the chain unbound (its event at the unbind) and handed over (C20)
        return self._effects(self._t.finish_free(connection_id, data, ticket, now))

    def ticket_taken(self, initiator: str, ticket: int, now: int) -> None:
        self._t.ticket_taken(initiator, ticket, now)
        ring = self._t.initiators[initiator].direct
        self._rec.add(now, "ticket_taken", initiator=initiator, ticket=ticket,
                      ring=ring.ring.name if ring is not None else None)

    def finish_allocation(self, connection_id: int, data: bytes, ticket: int,
                          now: int, *, handover: bool = True) -> list[Effect]:
        # the chain took the ticket (an event at its FetchAdd); the CPU reads the slot now
        return self._tracked(
            "read_slot", now,
            lambda: self._t.finish_allocation(connection_id, data, ticket, now,
                                              handover=handover),
            conn=connection_id)

    def allocate_with_ticket(self, connection_id: int, data: bytes, ticket: int,
                             ticket_time: int, now: int) -> list[Effect]:
        """A CPU-served ALLOC_STORE whose Ticket the CPU took through its NIC (a FetchAdd
        at ``ticket_time``): the request took effect there (an event holding after its
        ticket); the CPU reads the slot now."""
        self._rec.add(ticket_time, "handle", conn=connection_id, data=bytes(data),
                      hold=True, ticket=ticket, ring=self._t.shared_ring.name,
                      via="cpu", variant="cpu-ticket")
        return self._tracked(
            "read_slot", now,
            lambda: self._t.finish_allocation(connection_id, data, ticket, now,
                                              handover=False),
            conn=connection_id)

    def note_chain_alloc(self, connection_id: int, data: bytes, ticket: int,
                         now: int) -> list[Effect]:
        # bookkeeping of an allocation whose events came from the chain's WRs
        return self._effects(self._t.note_chain_alloc(connection_id, data, ticket, now))

    def poll_waiting(self, now: int) -> list[Effect]:
        return self._effects(self._t.poll_waiting(now))


#: suffix of a ring's name in the events that take its Tail tickets (decision C20)
TAIL = "/tail"


def linearise(events: Iterable[Event]) -> list[Event]:
    """Order events by time, then put the ticket-taking ones of each ring in ticket order:
    a ticket's event is emitted no later than the event of any higher ticket (it is
    pulled forward; nothing of its own connection lies in between, since a chain holds
    the connection's gate from its receive to its commit)."""
    ordered = sorted(events, key=lambda e: (e.time, e.seq))
    by_ring: dict[str, list[Event]] = {}
    for e in ordered:
        if e.ticket is not None and e.ring is not None:
            by_ring.setdefault(e.ring, []).append(e)
    for evs in by_ring.values():
        evs.sort(key=lambda e: e.ticket if e.ticket is not None else 0)
    out: list[Event] = []
    done: set[int] = set()
    nxt = dict.fromkeys(by_ring, 0)  # per ring: the lowest ticket not emitted yet
    for e in ordered:
        if id(e) in done:
            continue
        if e.ticket is not None and e.ring is not None:
            evs = by_ring[e.ring]
            while nxt[e.ring] < len(evs) and evs[nxt[e.ring]] is not e:
                first = evs[nxt[e.ring]]
                nxt[e.ring] += 1
                if id(first) not in done:
                    done.add(id(first))
                    out.append(first)
            nxt[e.ring] += 1
        done.add(id(e))
        out.append(e)
    return out
