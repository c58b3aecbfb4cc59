"""The shadow: a dict-backed software target fed the live target's requests in their
linearisation order, and what it says each initiator should have received.

:meth:`Shadow.apply` takes one :class:`~kbtpsim.oracle.events.Event`. The shadow answers
its own RDMA Reads: for a request a chain served, with the octets the initiator exposed
(the chain read them itself); for one the CPU served, with the octets the live target's
Read brought back (its ``read`` event). Each COMPLETION (and HELLO_ACK) it sends is kept
per connection with the event that produced it and, for a LOAD, the octets it wrote to
the initiator's buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbtpsim.oracle.events import TAIL, Event
from kbtpsim.target import (
    Effect,
    ReadInitiator,
    SendMessage,
    Target,
    TargetConfig,
    WriteInitiator,
)
from kbtpsim.wire import Status


@dataclass
class Expected:
    """One message the shadow sent to a connection."""

    data: bytes
    event: Event  #: the event whose application produced it
    request_id: int | None
    invalidate_stag: int | None = None
    load_data: bytes | None = None  #: the octets a LOAD wrote to the initiator's buffer


@dataclass
class Shadow:
    """A dict-backed :class:`Target` run in lockstep (see the module docstring)."""

    config: TargetConfig
    #: "target": a dict-backed :class:`Target`; "model": the independent reference model
    #: (:class:`kbtpsim.refmodel.ModelTarget`, docs/oracle.md "The reference model")
    reference: str = "target"
    #: (connection, Request ID) -> the octets the initiator exposed for an RDMA Read
    sources: dict[tuple[int, int], bytes] = field(default_factory=dict)
    target: Target = field(init=False)
    #: connection -> messages sent, in order
    sent: dict[int, list[Expected]] = field(default_factory=dict)
    #: problems applying events (a request the shadow cannot take as the live one did)
    errors: list[tuple[Event, str]] = field(default_factory=list)
    #: chain-served LOAD/STORE completions per (op, status): the live target never counts
    #: them (the NIC answered), so they are added to its counters for comparison
    nic_counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reference == "model":
            from kbtpsim.refmodel import ModelTarget

            self.target = ModelTarget(self.config)  # type: ignore[assignment]
        elif self.reference == "target":
            self.target = Target(self.config)
        else:
            raise ValueError(f"reference must be 'target' or 'model', got {self.reference!r}")
        self._reads: dict[int, int] = {}  # connection -> shadow token of its pending Read
        self._current: dict[int, Event] = {}  # connection -> event of its latest request
        self._writes: dict[int, bytes] = {}  # connection -> pending LOAD data
        self.applied = 0
        #: frees the shadow deferred (their slot not consumed yet)
        self.deferred = 0

    # ------------------------------------------------------------------ events
    def apply(self, e: Event) -> None:
        t, now = self.target, e.time
        self.applied += 1
        try:
            if e.kind == "connect":
                t.connect(e.conn, now)  # type: ignore[arg-type]
                return
            if e.kind == "handle":
                assert e.conn is not None
                self._current[e.conn] = e
                if e.ticket is not None:
                    ring = self._ring(e.ring)
                    if ring is not None and ring.head_ticket != e.ticket:
                        self.errors.append((e, f"ticket {e.ticket} taken, the shadow's "
                                               f"next ticket is {ring.head_ticket}"))
                out = t.handle(e.conn, e.data, now, hold_after_ticket=e.hold)
            elif e.kind == "read_slot":
                assert e.conn is not None
                out = t.read_slot(e.conn, now)
            elif e.kind == "read":
                token = self._reads.pop(e.conn, None) if e.conn is not None else None
                if token is None:
                    self.errors.append((e, "an RDMA Read came back that the shadow did not "
                                           "issue"))
                    return
                out = t.complete_read(token, e.data, now)
            elif e.kind == "advance":
                out = t.advance(now)
            elif e.kind == "quiesced":  # a free's ring return (C13)
                assert e.block is not None
                if e.ticket is not None:  # its Tail ticket, taken through the NIC (C20)
                    ring = self._ring(e.ring[:-len(TAIL)] if e.ring else None)
                    if ring is not None and ring.tail_ticket != e.ticket:
                        self.errors.append((e, f"Tail ticket {e.ticket} taken, the "
                                               f"shadow's next is {ring.tail_ticket}"))
                out = t.quiesced(e.block, now)
            elif e.kind == "disconnect":
                if e.conn not in t.connections:
                    return
                out = t.disconnect(e.conn, now)  # type: ignore[arg-type]
            elif e.kind == "ticket_taken":
                assert e.initiator is not None and e.ticket is not None
                sess = t.initiators[e.initiator]
                assert sess.direct is not None
                got = sess.direct.ring.take_ticket()
                if got.ticket != e.ticket:
                    self.errors.append((e, f"ticket {e.ticket} taken, the shadow's next "
                                           f"ticket is {got.ticket}"))
                t.ticket_taken(e.initiator, got.ticket, now)
                return
            else:  # pragma: no cover - recorder kinds are fixed
                raise ValueError(e.kind)
        except (ValueError, KeyError, AssertionError) as exc:
            self.errors.append((e, f"{type(exc).__name__}: {exc}"))
            return
        if e.kind == "handle" and e.data[1:2] == b"\x13" and any(
                r.deferred_blocks() for r in t.rings):  # a FREE whose slot write waits
            self.deferred += 1
        self._effects(e, out)

    def _ring(self, name: str | None):  # type: ignore[no-untyped-def]
        for r in self.target.rings:
            if r.name == name:
                return r
        return None

    def _effects(self, e: Event, out: list[Effect]) -> None:
        queue = list(out)
        while queue:
            eff = queue.pop(0)
            conn = eff.connection_id
            if isinstance(eff, ReadInitiator):
                cur = self._current.get(conn)
                if cur is not None and cur.via == "nic" and cur.variant != "hand-over":
                    rid = int.from_bytes(cur.data[4:12], "big")
                    data = self.sources.get((conn, rid))
                    if data is None:
                        self.errors.append((e, f"no exposed data for request {rid} of "
                                               f"connection {conn}"))
                        continue
                    queue[:0] = self.target.complete_read(eff.token, data, e.time)
                else:
                    self._reads[conn] = eff.token
            elif isinstance(eff, WriteInitiator):
                self._writes[conn] = eff.data
            elif isinstance(eff, SendMessage):
                msg = eff.message
                rid = getattr(msg, "request_id", None)
                cur = self._current.get(conn)
                load = self._writes.pop(conn, None)
                by = cur if cur is not None and rid is not None and \
                    int.from_bytes(cur.data[4:12], "big") == rid else e
                self.sent.setdefault(conn, []).append(
                    Expected(eff.data, by, rid, eff.invalidate_stag, load))
                if by.via == "nic" and by.variant in ("load", "store_inline", "store_read"):
                    op = "LOAD" if by.variant == "load" else "STORE"
                    status = getattr(msg, "status", 0)
                    key = (op, Status(status).name)
                    self.nic_counts[key] = self.nic_counts.get(key, 0) + 1
