"""``--oracle``: check every completion and the final state against a reference target.

For each target server, :func:`kbtpsim.system.replay` feeds its log of target calls (in
time order, with the same ``now``) into a fresh dict-backed :class:`kbtpsim.target.Target`.
An offloaded target logs a request its NIC served with the time its chain ran it (the
FetchAdd that took an ALLOC_STORE's Ticket, else the chain's last completion); such a
store's data is what the initiator exposed for that request (``Initiator.sources``);
shared-ring Tickets order the allocations (``replay(tickets=)``). The run is first
drained (``runner.quiesce``): no new requests, those in flight complete, the targets'
CPUs notice what their NICs served. Every message an initiator received must equal the
reference's message to that connection, in order (messages the reference sent that had
not arrived when the run stopped are in flight, not divergences); HELLO_ACKs of
direct-mode sessions are compared without their STags (the NIC assigns those). The final
state and counters must be equal; the pool digest is skipped when initiators wrote the
pool one-sidedly (DIRECT_ALLOC), which the log does not carry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kbtpsim.errors import DecodeError
from kbtpsim.run.build import System
from kbtpsim.system import replay
from kbtpsim.system.server import ReadSource
from kbtpsim.target import ReadInitiator, SendMessage
from kbtpsim.wire import Feature, decode


@dataclass(frozen=True)
class Divergence:
    target: str
    where: str  #: initiator name, or "state"/"stats"/"invariant"
    index: int  #: message index at that initiator (-1 for state)
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "where": self.where, "index": self.index,
                "detail": self.detail}

    def __str__(self) -> str:
        at = f" message {self.index}" if self.index >= 0 else ""
        return f"{self.target}: {self.where}{at}: {self.detail}"


def _same_hello_ack(got: bytes, want: bytes) -> bool:
    strip = {"table", "pool", "partition", "ring", "head"}
    return _fields(decode(got), strip) == _fields(decode(want), strip)


def _fields(msg: Any, strip: set[str]) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if f.name in strip and value is not None:
            value = (value.tagged_offset, value.count)
        out[f.name] = value
    return out


def _read_source(system: System, target: str) -> ReadSource:
    """What an RDMA Read of a NIC-served store fetched: the source the initiator exposed
    for that request (``Initiator.sources``), at the Read's offset."""
    by_conn = {ini.conn.conn_id: ini for name, ini in system.initiators.items()
               if system.expanded[name].target == target and ini.conn is not None}

    def read(conn_id: int, request: bytes, e: ReadInitiator) -> bytes:
        rid = int.from_bytes(request[4:12], "big")  # Request ID, header octets 4..11
        ini = by_conn.get(conn_id)
        if ini is None or rid not in ini.sources:
            return b""  # no such exposure: the reference completes it as a bad read
        base, data = ini.sources[rid]
        start = e.tagged_offset - base
        return data[start:start + e.length] if start >= 0 else b""

    return read


def _decoded(raw: bytes, addr_le: bool) -> Any:
    try:
        return decode(raw, addr_le)
    except DecodeError:
        return None


def _kind(msg: Any) -> str:
    return type(msg).__name__.upper() if msg is not None else "undecodable"


def _show(name: str, value: Any) -> str:
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, int) and name in ("handle", "block_offset", "flags"):
        return f"{value:#x}"
    return repr(value) if isinstance(value, bytes) else str(value)


def _request_of(server: Any, conn_id: int, request_id: int, addr_le: bool
                ) -> tuple[str, Any, int] | None:
    """The logged request of ``conn_id`` with ``request_id``: (who served it, the decoded
    request, when it took effect); the last such entry (Request IDs may be reused)."""
    found = None
    for entry in getattr(server, "log", ()):
        if entry[0] not in ("handle", "nic", "nic_hold") or entry[1] != conn_id:
            continue
        msg = _decoded(entry[2], addr_le)
        if msg is not None and msg.request_id == request_id:
            found = ("the NIC chain" if entry[0] != "handle" else "the target CPU", msg,
                     entry[3])
    return found


def explain(server: Any, conn_id: int, got: bytes, want: bytes, addr_le: bool) -> str:
    """A message that differs from the reference's, decoded field by field: the request
    it answers (opcode, handle, who served it and when it took effect) and each field
    that differs; raw octets only for what does not decode."""
    g, w = _decoded(got, addr_le), _decoded(want, addr_le)
    if g is None or w is None or type(g) is not type(w):
        return (f"got a {_kind(g)} message {got.hex()[:96]}, the reference sent a "
                f"{_kind(w)} {want.hex()[:96]}")
    diffs = [f"{f.name} got {_show(f.name, getattr(g, f.name))} want "
             f"{_show(f.name, getattr(w, f.name))}"
             for f in dataclasses.fields(g) if getattr(g, f.name) != getattr(w, f.name)]
    head = f"{type(g).__name__.upper()} for Request ID {w.request_id}"
    req = _request_of(server, conn_id, w.request_id, addr_le)
    if req is not None:
        who, msg, at = req
        head += (f" ({type(msg).__name__.upper()} of handle {msg.handle:#x} on connection "
                 f"{conn_id}, served by {who}, took effect at {at / 1e6:.3f} us)")
    return f"{head}: " + "; ".join(diffs or ["identical fields, different octets"])


def check_oracle(system: System) -> list[Divergence]:
    out: list[Divergence] = []
    for tname, server in system.servers.items():
        cfg = server.config  # the offloaded target may widen the table (table_range)
        try:
            ref, effects = replay(cfg, server.log, _read_source(system, tname),
                                  getattr(server, "log_tickets", None),
                                  getattr(server, "read_origin", None))
        except ValueError as exc:  # e.g. a NIC-served store read a wrong length
            out.append(Divergence(tname, "replay", -1, str(exc)))
            continue
        one_sided_writes = False
        for name, ini in system.initiators.items():
            if system.expanded[name].target != tname:
                continue
            if ini.ack is not None and ini.ack.features & Feature.DIRECT_ALLOC:
                one_sided_writes = True
            conn = ini.conn
            if conn is None:
                out.append(Divergence(tname, name, -1, "never connected"))
                continue
            spec = system.expanded[name].spec
            if ini.broken is not None and ini.broken != "closed" and \
                    not spec.workload.misbehave.hoard_tickets:
                # the reference never tears a well-behaved initiator's connection down
                out.append(Divergence(tname, name, -1, "the target broke the connection "
                                      f"of a well-behaved initiator ({ini.broken})"))
            expected = [e.data for e in effects
                        if isinstance(e, SendMessage) and e.connection_id == conn.conn_id]
            got = ini.received
            if len(got) > len(expected):
                out.append(Divergence(tname, name, len(expected),
                                      f"received {len(got)} messages, the reference sent "
                                      f"{len(expected)}"))
            for i, (g, w) in enumerate(zip(got, expected, strict=False)):
                if g == w:
                    continue
                if i == 0 and server.direct and _same_hello_ack(g, w):
                    continue
                out.append(Divergence(tname, name, i, explain(
                    server, conn.conn_id, g, w, ini.addr_le)))
        mine, theirs = server.target.state(), ref.state()
        if one_sided_writes:
            mine, theirs = mine[:2] + mine[3:], theirs[:2] + theirs[3:]
        if mine != theirs:
            out.append(Divergence(tname, "state", -1, "final state differs from the "
                                  "reference target"))
        if server.target.stats().ops != ref.stats().ops:
            out.append(Divergence(tname, "stats", -1, "completion counters differ"))
        try:
            server.target.check_invariant()
        except Exception as exc:  # an InvariantViolation, reported not raised
            out.append(Divergence(tname, "invariant", -1, str(exc)))
    return out
