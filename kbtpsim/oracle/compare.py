"""Comparisons of the live offloaded target with its shadow, as :class:`Divergence`\\ s.

* every message each initiator received on each connection equals the shadow's, in
  order (a connection that failed may have lost the tail: a prefix); for a LOAD, the
  octets delivered to the initiator's buffer, and whether its STag was invalidated;
* at quiescent points: the block table (every entry's 16 octets), every ring slot, the
  Head and Tail words, deferred frees, the pool (every block), each initiator's bound
  handles, tickets, frees in progress, usage (quota), session and direct-mode state,
  the completion counters, and the invariant of both targets.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from kbtpsim.oracle.events import Event
from kbtpsim.oracle.shadow import Expected, Shadow
from kbtpsim.system.results import OpResult
from kbtpsim.target import Target
from kbtpsim.wire import Status, decode


@dataclass
class Divergence:
    """One difference between the live target and the shadow."""

    kind: str  #: completion, missing, extra, load-data, invalidate, state, invariant, shadow
    detail: str
    conn: int | None = None
    request_id: int | None = None
    expected: str = ""
    observed: str = ""
    event: Event | None = None  #: the event that produced the expected message
    order: int = 1 << 62  #: position in the shadow's order (first divergence = lowest)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "conn": self.conn,
                "request_id": self.request_id, "expected": self.expected,
                "observed": self.observed,
                "event": None if self.event is None else self.event.describe()}


def _msg(raw: bytes, addr_le: bool) -> str:
    try:
        m = decode(raw, addr_le)
    except Exception:  # undecodable: show the octets
        return raw.hex()
    fields = {k: getattr(m, k) for k in ("request_id", "handle", "generation", "status",
                                          "data_length", "block_offset") if hasattr(m, k)}
    if "status" in fields:
        with contextlib.suppress(ValueError):
            fields["status"] = Status(fields["status"]).name
    parts = [f"{k}={v:#x}" if k in ("handle", "block_offset") else f"{k}={v}"
             for k, v in fields.items()]
    return f"{type(m).__name__}(" + ", ".join(parts) + ")"


def compare_messages(shadow: Shadow, received: dict[int, list[bytes]],
                     up: dict[int, bool], results: dict[tuple[int, int], OpResult],
                     addr_le: dict[int, bool], strip_hello: bool,
                     order: dict[int, int]) -> list[Divergence]:
    """Messages per connection (see the module docstring). ``order`` maps an event's id
    to its position in the shadow's order."""
    out: list[Divergence] = []
    for conn in sorted(set(shadow.sent) | set(received)):
        want: list[Expected] = shadow.sent.get(conn, [])
        got = received.get(conn, [])
        le = addr_le.get(conn, False)
        for i in range(max(len(want), len(got))):
            w = want[i] if i < len(want) else None
            g = got[i] if i < len(got) else None
            if w is None:
                assert g is not None
                out.append(Divergence("extra", f"connection {conn}: message {i} the shadow "
                                      "never sent", conn, None, "", _msg(g, le)))
                break
            pos = order.get(id(w.event), 1 << 61)
            if g is None:
                if up.get(conn, False):
                    out.append(Divergence(
                        "missing", f"connection {conn}: message {i} never arrived", conn,
                        w.request_id, _msg(w.data, le), "nothing", w.event, pos))
                break
            if g != w.data and not (strip_hello and g[1:2] == b"\x02" and
                                    _same_hello_ack(g, w.data)):
                out.append(Divergence("completion", f"connection {conn}: message {i}", conn,
                                      w.request_id, _msg(w.data, le), _msg(g, le),
                                      w.event, pos))
                continue
            res = results.get((conn, w.request_id)) if w.request_id is not None else None
            if res is None:
                continue
            if w.load_data is not None and res.data != w.load_data:
                out.append(Divergence(
                    "load-data", f"connection {conn}: LOAD request {w.request_id}: the "
                    "octets delivered to the initiator's buffer differ", conn, w.request_id,
                    _digest(w.load_data), _digest(res.data), w.event, pos))
            if res.stag is not None and res.stag_revoked is not None and \
                    res.stag_revoked != (w.invalidate_stag is not None):
                out.append(Divergence(
                    "invalidate", f"connection {conn}: request {w.request_id}: STag "
                    "invalidation", conn, w.request_id,
                    f"invalidated={w.invalidate_stag is not None}",
                    f"invalidated={res.stag_revoked}", w.event, pos))
    return out


def _digest(data: bytes | None) -> str:
    if data is None:
        return "nothing"
    head = data[:16].hex()
    return f"{len(data)} octets {head}{'...' if len(data) > 16 else ''}"


def _same_hello_ack(got: bytes, want: bytes) -> bool:
    import dataclasses

    def fields(raw: bytes) -> dict[str, Any]:
        m = decode(raw)
        out = {}
        for f in dataclasses.fields(m):
            v = getattr(m, f.name)
            if f.name in ("table", "pool", "partition", "ring", "head") and v is not None:
                v = (v.tagged_offset, v.count)
            out[f.name] = v
        return out

    try:
        return fields(got) == fields(want)
    except Exception:
        return False


def compare_state(live: Target, memory: Any, shadow: Shadow,
                  nic_served: dict[tuple[str, str], int],
                  unacknowledged: dict[tuple[str, str], int] | None = None
                  ) -> list[Divergence]:
    """The live target's memory and bookkeeping against the shadow's (quiescent).
    ``unacknowledged``: completions the NIC sent that the live target could not count
    (LOADs whose COMPLETION went out unacknowledged before their connection failed,
    ``ObservedServer.unacknowledged``), which the shadow, applying them, did count."""
    ref = shadow.target
    lay = live.layout
    addr_le = live.config.addr_le
    bs = live.config.block_size
    out: list[Divergence] = []

    def diff(what: str, want: object, got: object) -> None:
        out.append(Divergence("state", what, expected=str(want), observed=str(got)))

    for h in range(lay.table_base_handle, lay.table_base_handle + lay.table_count):
        want = ref.table.get(h).encode(addr_le)
        got = memory.read(lay.entry_addr(h), 16)
        if got != want:
            diff(f"table entry {h:#x}", want.hex(), got.hex())
    for ring, where in zip(ref.rings, lay.rings, strict=True):
        for s in range(ring.n_slots):
            want = ring.slot(16 * s).encode(addr_le)
            got = memory.read(where.slot_addr(16 * s), 16)
            if got != want:
                diff(f"ring {ring.name} slot {s}", want.hex(), got.hex())
        for name, want_word in (("Head", ring.head), ("Tail", ring.tail)):
            word = memory.read_u64(getattr(where, f"{name.lower()}_addr"),
                                   lay.counter_byte_order)
            if word != want_word:
                diff(f"ring {ring.name} {name}", f"{want_word:#x}", f"{word:#x}")
    for mine, theirs in zip(live.rings, ref.rings, strict=True):
        if sorted(mine.deferred_blocks()) != sorted(theirs.deferred_blocks()):
            diff(f"ring {mine.name} deferred frees", theirs.deferred_blocks(),
                 mine.deferred_blocks())
    for bo in ref.pool.offsets:
        want = ref.pool.read(bo, bs)
        got = memory.read(lay.block_addr(bo), bs)
        if got != want:
            diff(f"pool block {bo:#x}", _digest(want), _digest(got))
    for name, sess in ref.initiators.items():
        mine = live.initiators[name]
        for what in ("bound", "tickets", "freeing", "usage", "connection_id",
                     "retained_until", "features"):
            if getattr(mine, what) != getattr(sess, what):
                diff(f"initiator {name} {what}", getattr(sess, what), getattr(mine, what))
        if (mine.direct is None) != (sess.direct is None):
            diff(f"initiator {name} direct", sess.direct, mine.direct)
        elif mine.direct is not None and sess.direct is not None:
            for what in ("outstanding", "abandoned"):
                a, b = getattr(sess.direct, what), getattr(mine.direct, what)
                if sorted(a) != sorted(b):
                    diff(f"initiator {name} DIRECT_ALLOC {what}", sorted(a), sorted(b))
    if dict(live.held_blocks) != dict(ref.held_blocks):
        diff("blocks held by outstanding tickets", ref.held_blocks, live.held_blocks)
    counts = dict(live.counters.snapshot())
    if not hasattr(live, "note_chain_op"):  # a target that does not count NIC-served ops
        for key, n in nic_served.items():
            counts[key] = counts.get(key, 0) + n
    for key, n in (unacknowledged or {}).items():
        counts[key] = counts.get(key, 0) + n
    want_counts = ref.counters.snapshot()
    if counts != want_counts:
        keys = sorted(set(counts) | set(want_counts))
        bad = {f"{k[0]}/{k[1]}": (want_counts.get(k, 0), counts.get(k, 0)) for k in keys
               if counts.get(k, 0) != want_counts.get(k, 0)}
        diff("completion counters (op/status: shadow, live)", "", bad)
    for who, t in (("live", live), ("shadow", ref)):
        try:
            t.check_invariant()
        except AssertionError as exc:
            out.append(Divergence("invariant", f"{who} target: {exc}"))
    return out


__all__ = ["Divergence", "compare_messages", "compare_state"]
