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

from dataclasses import dataclass
from typing import Any

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
    import dataclasses

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


def check_oracle(system: System) -> list[Divergence]:
    out: list[Divergence] = []
    for tname, server in system.servers.items():
        cfg = server.config  # the offloaded target may widen the table (table_range)
        try:
            ref, effects = replay(cfg, server.log, _read_source(system, tname),
                                  getattr(server, "log_tickets", None))
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
                out.append(Divergence(tname, name, i, f"got {g.hex()[:80]} want "
                                      f"{w.hex()[:80]}"))
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
