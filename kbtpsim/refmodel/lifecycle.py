"""The reference model's sessions (draft, "Session Establishment"; T5, T6): HELLO, the
end of a session by GOODBYE or a failed connection, and what ``advance`` expires: Ticket
Timeouts (draft, "Allocation Quotas"; T9) and retention times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbtpsim.refmodel.constants import POOL_STAG, SEALED, TABLE_STAG, VALID, next_generation
from kbtpsim.wire import DirectDescriptor, Feature, HelloAck, Status, encode

if TYPE_CHECKING:
    from kbtpsim.wire import Hello


class ModelLifecycle:
    """Mixed into :class:`~kbtpsim.refmodel.model.RefModel`: a session from HELLO to its
    end, and the expiries of :meth:`advance`."""

    bs: int
    max_inline: int
    credits: int
    timeout: int
    timeout_ms: int
    retention: int
    addr_le: bool
    records: bool
    offsets: list[int]
    tbase: int
    tcount: int
    table: dict[int, list[int]]
    sess: dict[str, dict[str, Any]]
    by_id: dict[bytes, str]
    waiters: list[dict[str, Any]]
    held: dict[int, str]
    quiesce: bool
    quiescing: dict[int, dict[str, Any]]
    _pstag: int

    if TYPE_CHECKING:
        def entry(self, h: int) -> list[int]: ...
        def _count(self, op: str, status: Status) -> None: ...
        def _settle(self, now: int, out: list[Any]) -> None: ...
        def _to_ring(self, s: dict[str, Any], bo: int, p: dict[str, Any] | None,
                     out: list[Any], park: bool = True) -> bool: ...

    def _hello(self, conn: dict[str, Any], msg: Hello, now: int, out: list[Any]) -> None:
        """draft, "Session Establishment"; rejections as T5."""
        name = self.by_id.get(msg.initiator_id)
        if conn["sess"] is not None or msg.flags or msg.request_id or msg.handle or \
                msg.generation or msg.status:
            status = Status.MALFORMED
        elif name is None:
            status = Status.INVALID_HANDLE
        elif self.sess[name]["conn"] is not None:
            status = Status.ALREADY_BOUND  # "MUST reject a HELLO whose Initiator ID belongs
        else:                               # to a session that is still active"
            status = Status.OK
        if status:
            ack = HelloAck(status=status)
            out.append(("send", conn["id"], ack, encode(ack), None))
            self._count("HELLO", status)
            return
        assert name is not None
        s = self.sess[name]
        # T5: requested & offered; no RECORD_COMPLETION on RDMAP ("Completion"); ADDR_LE
        # is the target's choice
        f = Feature(int(msg.requested_features)) & s["offered"] & ~Feature.ADDR_LE
        if not self.records:
            f &= ~Feature.RECORD_COMPLETION
        if self.addr_le:
            f |= Feature.ADDR_LE
        s["features"], s["conn"], s["retained_until"] = f, conn["id"], None  # bindings kept
        conn["sess"], conn["le"] = name, self.addr_le
        extra: dict[str, Any] = {}
        if f & Feature.DIRECT_LOAD:  # draft, "HELLO_ACK Body": Table, Base, Pool
            extra.update(table=DirectDescriptor(TABLE_STAG, 0, self.tcount),
                         table_base_handle=self.tbase,
                         pool=DirectDescriptor(POOL_STAG, self.offsets[0], len(self.offsets)))
        d = s["direct"]
        if d is not None:
            d["pstag"] = None
            if f & Feature.DIRECT_ALLOC:  # Partition (this connection only), Ring, Head
                d["pstag"] = self._pstag
                self._pstag += 1
                extra.update(partition=DirectDescriptor(d["pstag"], d["start"], s["quota"]),
                             ring=DirectDescriptor(d["ring_stag"], 0, d["ring"]["n"]),
                             head=DirectDescriptor(d["head_stag"], 0, 1))
        ack = HelloAck(features=f, request_credits=self.credits, block_size=self.bs,
                       max_inline=self.max_inline, allocation_quota=s["quota"],
                       handle_base=s["base"], handle_count=s["count"],
                       ticket_timeout_ms=self.timeout_ms, **extra)
        out.append(("send", conn["id"], ack, encode(ack), None))
        self._count("HELLO", Status.OK)

    def _end(self, s: dict[str, Any], conn: dict[str, Any], now: int, release: bool,
             invalidate: bool, out: list[Any]) -> None:
        """GOODBYE or connection failure (draft, "Session Establishment"; T6)."""
        d = s["direct"]
        if d is not None:
            if invalidate and d["pstag"] is not None:
                out.append(("invalidate", conn["id"], d["pstag"], "session ended"))
            d["pstag"] = None  # no RDMA Write can reach the partition any more
            for t in sorted(d["outstanding"]):
                self._abandon(s, t, out)
        p, conn["wait"] = conn["wait"], None
        if p is not None:
            if p["kind"] == "alloc" and p.get("block") is None:
                p.update(reclaim=True, held=False)  # its block returns once the slot is read
            elif p["kind"] == "alloc":
                p["gone"] = True  # block held for RDMA Read data: back to the ring
                del self.held[p["block"]]
                s["tickets"] -= 1
                self._to_ring(s, p["block"], None, out)
            elif p["kind"] == "store":
                p["gone"] = True
            else:  # a deferred free finishes without a completion
                p["conn"] = None
        conn["sess"], conn["le"] = None, False
        s["conn"] = None  # its features stay as granted until the next HELLO
        if release:  # draft: "With flag 0x0001 RELEASE, the target frees all handles"
            self._release_all(s, out)
        elif s["bound"]:  # "keeps the initiator's bindings for a retention time of its
            s["retained_until"] = now + self.retention  # choosing" (none: nothing to keep)

    def next_deadline(self) -> int | None:
        times = [at + self.timeout for s in self.sess.values() if s["direct"]
                 for at in s["direct"]["outstanding"].values()]
        times += [s["retained_until"] for s in self.sess.values()
                  if s["retained_until"] is not None]
        return min(times) if times else None

    def advance(self, now: int) -> list[Any]:
        """Ticket timeouts and retention due at ``now`` (T1)."""
        out: list[Any] = []
        for s in self.sess.values():
            d = s["direct"]
            due = sorted(t for t, at in d["outstanding"].items()
                         if at + self.timeout <= now) if d else []
            if due:
                # draft, "Allocation Quotas": invalidate the Partition STag, which disables
                # DIRECT_ALLOC for the rest of the session, before reclaiming (T9)
                if d["pstag"] is not None and s["conn"] is not None:
                    out.append(("invalidate", s["conn"], d["pstag"], "ticket timeout"))
                d["pstag"] = None
                for t in due:
                    self._abandon(s, t, out)
        for s in self.sess.values():
            if s["retained_until"] is not None and s["retained_until"] <= now:
                s["retained_until"] = None  # retention over: freed as by RELEASE (T6)
                self._release_all(s, out)
        self._settle(now, out)
        return out

    def _abandon(self, s: dict[str, Any], ticket: int, out: list[Any]) -> None:
        """An abandoned DIRECT_ALLOC ticket: reclaim its block once its slot is ready and
        reject a later BIND of it (draft, "Allocation Quotas")."""
        d = s["direct"]
        del d["outstanding"][ticket]
        d["abandoned"].add(ticket)
        self.waiters.append({"kind": "alloc", "conn": None, "s": s, "msg": None,
                             "ring": d["ring"], "ticket": ticket, "reclaim": True})

    def _release_all(self, s: dict[str, Any], out: list[Any]) -> None:
        for h in sorted(s["bound"]):
            e = self.entry(h)
            self.table[h] = [e[0] & ~(VALID | SEALED), next_generation(e[1]), e[2], e[3]]
            p = {"kind": "free", "conn": None, "s": s, "msg": None, "release": True}
            if self.quiesce:
                self.quiescing[e[3]] = p
                s["freeing"] += 1
            else:
                self._to_ring(s, e[3], p, out)
        s["bound"].clear()
