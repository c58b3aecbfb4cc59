"""The reference model's requests (draft, "Operations"): validation, in the order of
decision T2, then LOAD, STORE, ALLOC_STORE, FREE and BIND (draft, "Block Load", "Block
Mapped Store", "Block Unmapped Store", "Block Free", "Direct Modes"), and the steps they
share: obtaining a store's data, writing the entry, an allocation taking its slot's block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbtpsim.errors import (
    AlreadyBound,
    InvalidHandle,
    KbtpError,
    Malformed,
    NoSpace,
    NotSealed,
    NotValid,
    Sealed,
    StaleGeneration,
    TicketAbandoned,
    TooLarge,
)
from kbtpsim.refmodel import ring as R
from kbtpsim.refmodel.constants import (
    ALLOW_UNSEALED,
    DEFINED,
    INLINE,
    RECORD,
    SEAL,
    SEALED,
    VALID,
    next_generation,
)
from kbtpsim.wire import AllocStore, Feature, Free, Load, Opcode, Status, Store


class ModelOperations:
    """Mixed into :class:`~kbtpsim.refmodel.model.RefModel`: a request's validation and
    execution."""

    bs: int
    max_inline: int
    table: dict[int, list[int]]
    sess: dict[str, dict[str, Any]]
    conns: dict[int, dict[str, Any]]
    waiters: list[dict[str, Any]]
    reads: dict[int, dict[str, Any]]
    held: dict[int, str]
    quiesce: bool
    quiescing: dict[int, dict[str, Any]]
    _token: int

    if TYPE_CHECKING:
        def entry(self, h: int) -> list[int]: ...
        def block(self, bo: int) -> bytes: ...
        def _write_block(self, bo: int, data: bytes) -> None: ...
        def usage(self, s: dict[str, Any]) -> int: ...
        def _complete(self, cid: int, s: dict[str, Any] | None, msg: Any, status: Status,
                      e: list[int] | None = None, op: str | None = None,
                      out: list[Any] | None = None) -> None: ...
        def _consume(self, r: dict[str, Any], i: int, out: list[Any]) -> None: ...
        def _to_ring(self, s: dict[str, Any], bo: int, p: dict[str, Any] | None,
                     out: list[Any], park: bool = True) -> bool: ...

    def _request(self, conn: dict[str, Any], msg: Any, now: int, hold: bool,
                 out: list[Any]) -> None:
        s = self.sess[conn["sess"]] if conn["sess"] is not None else None
        try:
            e = self._validate(s, msg)
        except KbtpError as exc:
            self._complete(conn["id"], s, msg, exc.status, out=out)
            return
        assert s is not None
        h = msg.handle
        if isinstance(msg, Load):
            # draft, "Block Load" 2-3: write Data Length octets, then complete
            dd = msg.data_descriptor
            if e[2]:  # zero octets: nothing to write
                out.append(("write", conn["id"], dd.stag, dd.tagged_offset,
                            self.block(e[3])[:e[2]]))
            self._complete(conn["id"], s, msg, Status.OK, e, out=out)
        elif isinstance(msg, Store):
            p = {"kind": "store", "conn": conn["id"], "s": s, "msg": msg}
            self._obtain(conn, p, out)
        elif isinstance(msg, AllocStore):
            # draft, "Block Unmapped Store" 2: allocate from the ring (FetchAdd on Head)
            ticket, _ = R.fetch_add(s["ring"], "head")
            s["tickets"] += 1
            a = {"kind": "alloc", "conn": conn["id"], "s": s, "msg": msg, "ring": s["ring"],
                 "ticket": ticket, "held": hold, "block": None}
            conn["wait"] = a
            self.waiters.append(a)
        elif isinstance(msg, Free):
            # draft, "Block Free" 2: clear VALID and SEALED, next Generation
            s["bound"].discard(h)
            self.table[h] = [e[0] & ~(VALID | SEALED), next_generation(e[1]), e[2], e[3]]
            p = {"kind": "free", "conn": conn["id"], "s": s, "msg": msg}
            if self.quiesce:  # step 3 waits until nothing reads the block (C13)
                self.quiescing[e[3]] = p
                s["freeing"] += 1  # usage until the FREE completes (T4)
                conn["wait"] = p
            elif self._to_ring(s, e[3], p, out):
                conn["wait"] = p
            else:
                self._complete(conn["id"], s, msg, Status.OK, self.table[h], out=out)
        else:  # BIND (draft, "Direct Modes"): mark the slot consumed, write the entry
            d = s["direct"]
            self._consume(d["ring"], msg.ticket % d["ring"]["n"], out)
            del d["outstanding"][msg.ticket]
            s["tickets"] -= 1
            self._bind(s, h, msg.data_length, msg.block_offset, 0)
            self._complete(conn["id"], s, msg, Status.OK, self.table[h], out=out)

    def _validate(self, s: dict[str, Any] | None, msg: Any) -> list[int]:
        """draft, "Operations": validate before touching memory; a failed check has no
        other effect. The order of the checks is decision T2."""
        op, f = msg.opcode, int(msg.flags)
        if s is None or msg.status or f & ~DEFINED[op]:
            raise Malformed  # before HELLO; Status is zero in requests; D5
        if f & RECORD and not s["features"] & Feature.RECORD_COMPLETION:
            raise Malformed  # "If the target advertised RECORD_COMPLETION" ("Completion")
        if op == Opcode.BIND and not s["features"] & Feature.DIRECT_ALLOC:
            raise Malformed
        h = msg.handle
        ranges = s["readable"] if op == Opcode.LOAD else [(s["base"], s["base"] + s["count"])]
        if not any(lo <= h < hi for lo, hi in ranges):
            raise InvalidHandle  # "its own range for stores and frees"
        if op in (Opcode.STORE, Opcode.ALLOC_STORE):
            n = msg.data_descriptor.length  # "lengths MUST NOT exceed Block Size"
            if n > self.bs or (f & INLINE and n > self.max_inline):
                raise TooLarge
        if op == Opcode.BIND and msg.data_length > self.bs:
            raise TooLarge
        e = self.entry(h)
        if op in (Opcode.LOAD, Opcode.STORE, Opcode.FREE) and not e[0] & VALID:
            raise NotValid  # Load 1, Mapped Store 1, Free 1
        if op in (Opcode.ALLOC_STORE, Opcode.BIND) and e[0] & VALID:
            raise AlreadyBound  # Unmapped Store 1: "its entry MUST NOT be VALID"
        if msg.generation and msg.generation != e[1]:
            raise StaleGeneration  # "if the request Generation is non-zero, it MUST equal"
        if op == Opcode.LOAD and not e[0] & SEALED and not f & ALLOW_UNSEALED:
            raise NotSealed  # Load 1: "SEALED unless ALLOW_UNSEALED is set"
        if op == Opcode.STORE and e[0] & SEALED:
            raise Sealed  # Mapped Store 1: "not SEALED"
        if op == Opcode.LOAD and e[2] > msg.data_descriptor.length:
            raise TooLarge  # Load 2: "MUST NOT exceed the descriptor Length"
        if op == Opcode.BIND:
            # "The target verifies that the ticket has not been abandoned, that the slot
            # of the ticket holds that Block Offset, and that the initiator is within its
            # quota" (draft, "Direct Modes")
            d = s["direct"]
            if msg.ticket in d["abandoned"]:
                raise TicketAbandoned
            if msg.ticket not in d["outstanding"] or \
                    R.ready(d["ring"], msg.ticket) != msg.block_offset:
                raise Malformed
            if self.usage(s) > s["quota"]:
                raise NoSpace  # the ticket is already counted in usage
        if op == Opcode.ALLOC_STORE and self.usage(s) + 1 > s["quota"]:
            raise NoSpace  # "An initiator MUST NOT exceed its quota"
        return e

    def _obtain(self, conn: dict[str, Any], p: dict[str, Any], out: list[Any]) -> None:
        """"obtains the data, from the inline payload or by RDMA Read" (Store step 2)."""
        msg = p["msg"]
        if msg.inline_data is not None:
            self._store_data(p, msg.inline_data, out)
            return
        self._token += 1
        self.reads[self._token] = p
        conn["wait"] = p
        dd = msg.data_descriptor
        out.append(("read", conn["id"], self._token, dd.stag, dd.tagged_offset, dd.length))

    def _store_data(self, p: dict[str, Any], data: bytes, out: list[Any]) -> None:
        s, msg = p["s"], p["msg"]
        h = msg.handle
        if p["kind"] == "store":  # Mapped Store 3: write, update Data Length, SEAL
            e = self.entry(h)
            self._write_block(e[3], data)
            self.table[h] = [e[0] | (SEALED if msg.flags & SEAL else 0), e[1], len(data), e[3]]
        else:  # Unmapped Store 3-4: data first, then the entry
            bo = p["block"]
            self._write_block(bo, data)
            del self.held[bo]
            s["tickets"] -= 1
            self._bind(s, h, len(data), bo, SEALED if msg.flags & SEAL else 0)
        self._complete(p["conn"], s, msg, Status.OK, self.table[h], out=out)

    def _bind(self, s: dict[str, Any], h: int, length: int, bo: int, sealed: int) -> None:
        """Write the entry: Data Length and Block Offset, then VALID (SEALED if requested)
        and the next Generation (draft, "Block Unmapped Store" 4, "Block Table")."""
        e = self.entry(h)
        self.table[h] = [VALID | sealed, next_generation(e[1]), length, bo]
        s["bound"].add(h)

    def _take(self, a: dict[str, Any], out: list[Any]) -> None:
        """The allocation's slot holds its ticket's block: take it, mark the slot consumed
        (draft, "Free-Block Ring", Allocation), then go on (or reclaim it)."""
        r, s = a["ring"], a["s"]
        bo = R.ready(r, a["ticket"])
        assert bo is not None
        self._consume(r, a["ticket"] % r["n"], out)
        if a.get("reclaim"):
            # draft, "Allocation Quotas": consume the slot, return the block to the ring
            # with a new ticket, release the unit of usage
            s["tickets"] -= 1
            self._to_ring(s, bo, None, out)
            return
        a["block"] = bo
        self.held[bo] = s["name"]
        conn = self.conns[a["conn"]]
        conn["wait"] = None
        self._obtain(conn, a, out)
