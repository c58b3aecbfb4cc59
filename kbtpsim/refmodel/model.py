"""A second, small executable model of the draft's target-side rules (docs/oracle.md,
"The reference model"), written from the text of "KV Cache Block Transfer Protocol".

Plain data: the table is a dict handle -> [Flags, Generation, Data Length, Block Offset],
the pool a dict Block Offset -> bytes (absent = zeros), each ring a dict
(:mod:`kbtpsim.refmodel.ring`), sessions and connections dicts. Sans-IO like the target:
``handle(conn, data, now)`` etc. return effects as plain tuples:

* ``("send", conn, message, octets, invalidate_stag or None)`` COMPLETION / HELLO_ACK;
* ``("write", conn, stag, tagged_offset, octets)`` RDMA Write of a LOAD's data;
* ``("read", conn, token, stag, tagged_offset, length)`` RDMA Read of a store's source,
  answered by ``complete_read(token, octets, now)``;
* ``("record", conn, stag, tagged_offset, CompletionRecord, octets)``;
* ``("invalidate", conn, stag, reason)`` the target invalidates its Partition STag.

Where the draft leaves a point open the model takes the project's documented decision
(docs/decisions.md, cited as D*/T*); everything else cites the draft's section.
"""

from __future__ import annotations

from typing import Any

from kbtpsim.errors import (
    AlreadyBound,
    DecodeError,
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
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionRecord,
    DirectDescriptor,
    Feature,
    Free,
    Goodbye,
    Hello,
    HelloAck,
    Load,
    Opcode,
    Status,
    Store,
    decode,
    encode,
)

PS_PER_MS = 10**9  # T1: now is in picoseconds, configuration in ms
VALID, SEALED = 0x0001, 0x0002  # draft, "Block Table": entry Flags
INLINE, SEAL, RECORD, INVALIDATE, ALLOW_UNSEALED = 0x01, 0x02, 0x04, 0x08, 0x10
RELEASE = 0x0001  # draft, "IANA Considerations": GOODBYE flag
#: flag bits the registry defines per opcode (draft, "Common Header", "IANA"); others: D5
DEFINED = {Opcode.LOAD: 0x1F, Opcode.STORE: 0x1F, Opcode.ALLOC_STORE: 0x1F,
           Opcode.FREE: 0x1F, Opcode.BIND: 0, Opcode.GOODBYE: RELEASE}
# STag names of exposed structures: the target's own choice (the draft names none)
TABLE_STAG, POOL_STAG = 0x7AB1, 0xB001
RING_STAG, PARTITION_STAG = 0x0100_0000, 0x0200_0000


def next_generation(g: int) -> int:
    """Incremented by one, skipping zero (draft, "Block Unmapped Store" step 4)."""
    return g % 0xFFFF + 1


def pow2(n: int) -> int:
    """Smallest power of two >= n, at least 2 (draft N = 2^n >= F; D9)."""
    return max(2, 1 << (n - 1).bit_length())


class ModelInvariant(AssertionError):
    """A block lost or handed out twice, or an initiator over its quota."""


class RefModel:
    """The draft's target as plain data. ``config`` is read by attribute only (a
    :class:`kbtpsim.target.TargetConfig` works); nothing of kbtpsim.target is used."""

    def __init__(self, config: Any) -> None:
        c = config
        self.bs, self.max_inline, self.credits = c.block_size, c.max_inline, c.request_credits
        self.timeout = c.ticket_timeout_ms * PS_PER_MS
        self.timeout_ms, self.retention = c.ticket_timeout_ms, c.retention_ms * PS_PER_MS
        self.addr_le = bool(c.addr_le)
        self.records = str(getattr(c.binding, "value", c.binding)) != "rdmap"  # "Completion"
        masked = str(getattr(c.counter_mode, "value", c.counter_mode)) == "masked"
        offsets = [(c.first_block + i) * c.block_size for i in range(c.blocks)]
        self.offsets = offsets
        inis = list(c.initiators)
        if c.table_range is not None:
            self.tbase, self.tcount = c.table_range
        else:  # from the lowest to the end of the highest range
            lo = min((i.handle_base for i in inis), default=0)
            self.tbase = lo
            self.tcount = max((i.handle_base + i.handle_count for i in inis), default=lo) - lo
        # T8: DIRECT_ALLOC partitions from the end of the pool, in configuration order
        shared_f = c.blocks - sum(i.quota for i in inis if i.features & Feature.DIRECT_ALLOC)
        self.rings = [R.new_ring("shared", c.ring_slots or pow2(c.blocks),
                                 offsets[:shared_f], masked)]
        self.table: dict[int, list[int]] = {}
        self.pool: dict[int, bytes] = {}
        self.sess: dict[str, dict[str, Any]] = {}
        self.by_id: dict[bytes, str] = {}
        self.ring_of_block: dict[int, dict[str, Any]] = dict.fromkeys(offsets[:shared_f],
                                                                      self.rings[0])
        nxt = shared_f
        for index, i in enumerate(inis):
            s: dict[str, Any] = {
                "name": i.name, "quota": i.quota, "base": i.handle_base,
                "count": i.handle_count, "offered": Feature(int(i.features)),
                "domain": i.trust_domain, "conn": None, "features": Feature(0),
                "retained_until": None, "bound": set(), "tickets": 0, "freeing": 0,
                "overdrawn": False, "direct": None, "ring": self.rings[0],
                # T7: readable = the ranges of every initiator of its trust domain
                "readable": [(j.handle_base, j.handle_base + j.handle_count)
                             for j in inis if j.trust_domain == i.trust_domain]}
            if i.features & Feature.DIRECT_ALLOC:  # draft, "Allocation Quotas"
                part = offsets[nxt:nxt + i.quota]
                nxt += i.quota
                r = R.new_ring(f"direct:{i.name}", pow2(i.quota), part, masked)
                self.rings.append(r)
                s["ring"] = r
                self.ring_of_block.update(dict.fromkeys(part, r))
                s["direct"] = {"ring": r, "start": part[0], "ring_stag": RING_STAG | index << 8 | 1,
                               "head_stag": RING_STAG | index << 8 | 2, "pstag": None,
                               "outstanding": {}, "abandoned": set()}
            self.sess[i.name] = s
            self.by_id[i.initiator_id] = i.name
        self.conns: dict[int, dict[str, Any]] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.waiters: list[dict[str, Any]] = []  # allocations whose slot is not ready
        self.reads: dict[int, dict[str, Any]] = {}  # token -> store waiting for its data
        self.held: dict[int, str] = {}  # blocks taken from a ring, not bound yet
        # free_quiesce (C13): Block Offset -> the free whose ring return waits for the
        # caller's ``quiesced`` (draft, "Block Free": the entry first, then the ring)
        self.quiesce = bool(getattr(c, "free_quiesce", False))
        # tail_via_nic (C20): every return to the shared ring waits for ``quiesced``
        self.tail_via_nic = bool(getattr(c, "tail_via_nic", False))
        self.quiescing: dict[int, dict[str, Any]] = {}
        self._token = 0
        self._pstag = PARTITION_STAG

    # ------------------------------------------------------------ table and pool
    def entry(self, h: int) -> list[int]:
        """The entry of h; a never-bound entry has Generation 1 (D1: never 0)."""
        return self.table.get(h, [0, 1, 0, 0])

    def block(self, bo: int) -> bytes:
        return self.pool.get(bo, bytes(self.bs))

    def _write_block(self, bo: int, data: bytes) -> None:
        self.pool[bo] = data + self.block(bo)[len(data):]

    # ---------------------------------------------------------------- public API
    def connect(self, cid: int, now: int) -> None:
        if cid in self.conns:
            raise ValueError(f"connection {cid} already exists")
        self.conns[cid] = {"id": cid, "sess": None, "le": False, "wait": None, "queue": []}

    def disconnect(self, cid: int, now: int) -> list[Any]:
        """A failed or closed connection: the bindings are retained (draft, "Session
        Establishment": "when a connection fails, the target keeps ...")."""
        conn = self.conns.pop(cid)
        out: list[Any] = []
        if conn["sess"] is not None:
            self._end(self.sess[conn["sess"]], conn, now, release=False, invalidate=False,
                      out=out)
        self._settle(now, out)
        return out

    def handle(self, cid: int, data: bytes, now: int, hold: bool = False) -> list[Any]:
        """One received message; requests of a connection are processed in order (draft,
        "Operations"): while one waits, later ones queue behind it (T4)."""
        conn = self.conns[cid]
        out: list[Any] = []
        conn["queue"].append((bytes(data), hold))
        self._settle(now, out)
        return out

    def read_slot(self, cid: int, now: int) -> list[Any]:
        """Let an allocation stopped after its FetchAdd on Head read its slot (T4)."""
        out: list[Any] = []
        a = self.conns[cid]["wait"]
        assert a is not None and a.get("held"), f"connection {cid} holds no allocation"
        a["held"] = False
        self._settle(now, out)
        return out

    def complete_read(self, token: int, data: bytes, now: int) -> list[Any]:
        """The data of an RDMA Read (draft, Mapped/Unmapped Store step "obtains the data")."""
        p = self.reads.pop(token)
        out: list[Any] = []
        if p.get("gone"):
            return out
        conn = self.conns[p["conn"]]
        conn["wait"] = None
        self._store_data(p, bytes(data), out)
        self._settle(now, out)
        return out

    def remote_fetch_add(self, cid: int, stag: int, offset: int, now: int) -> int:
        """DIRECT_ALLOC: the initiator's FetchAdd on its Head (draft, "Direct Modes")."""
        s = self.sess[self.conns[cid]["sess"]]
        d = s["direct"]
        if not (s["features"] & Feature.DIRECT_ALLOC and d["pstag"] is not None
                and stag == d["head_stag"] and offset == 0):
            raise PermissionError(f"FetchAdd on STag {stag:#x} not allowed")
        old = d["ring"]["head"]
        ticket, _ = R.fetch_add(d["ring"], "head")
        self.ticket_taken(s["name"], ticket, now)
        return int(old)

    def ticket_taken(self, name: str, ticket: int, now: int) -> None:
        """A ticket taken on the initiator's Head: counted in its usage (draft, "Allocation
        Quotas") and timed from now (Ticket Timeout)."""
        s = self.sess[name]
        s["direct"]["outstanding"][ticket] = now
        s["tickets"] += 1
        s["overdrawn"] |= self.usage(s) > s["quota"]

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

    def usage(self, s: dict[str, Any]) -> int:
        """Handles bound plus tickets taken and not bound (draft, "Allocation Quotas"); a
        FREE releases its unit when it completes, so a deferred one still counts (T4)."""
        return len(s["bound"]) + int(s["tickets"]) + int(s["freeing"])

    # ------------------------------------------------------------------ processing
    def _settle(self, now: int, out: list[Any]) -> None:
        """Run until nothing can progress: allocations whose slot is now ready, then the
        queued requests of connections no longer waiting."""
        moved = True
        while moved:
            moved = False
            for a in list(self.waiters):
                if not a.get("held") and R.ready(a["ring"], a["ticket"]) is not None:
                    self.waiters.remove(a)
                    self._take(a, out)
                    moved = True
            for conn in list(self.conns.values()):
                if conn["wait"] is None and conn["queue"] and conn["id"] in self.conns:
                    data, hold = conn["queue"].pop(0)
                    self._process(conn, data, now, hold, out)
                    moved = True

    def _process(self, conn: dict[str, Any], data: bytes, now: int, hold: bool,
                 out: list[Any]) -> None:
        try:
            msg = decode(data, conn["le"])
        except DecodeError:
            if len(data) > 1 and data[1] == Opcode.HELLO:  # "Status reports an error in
                ack = HelloAck(status=Status.MALFORMED)    # HELLO_ACK" (Session Est.)
                out.append(("send", conn["id"], ack, encode(ack), None))
                self._count("HELLO", Status.MALFORMED)
                return
            # MALFORMED: "Request cannot be parsed" (draft, "Status Codes"); echo what the
            # header holds of Request ID and Block Handle (T3)
            rid = int.from_bytes(data[4:12], "big") if len(data) >= 12 else 0
            h = int.from_bytes(data[12:20], "little" if conn["le"] else "big") \
                if len(data) >= 20 else 0
            try:
                op = Opcode(data[1]).name
            except ValueError:
                op = f"0x{data[1]:02x}"
            except IndexError:
                op = "UNKNOWN"
            fake = Completion(request_id=rid, handle=h)
            self._complete(conn["id"], None, fake, Status.MALFORMED, op=op, out=out)
            return
        if isinstance(msg, Hello):
            self._hello(conn, msg, now, out)
        elif isinstance(msg, Goodbye) and conn["sess"] is not None and not (
                msg.flags & ~RELEASE or msg.status):
            self._end(self.sess[conn["sess"]], conn, now, bool(msg.flags & RELEASE),
                      True, out)
            self._count("GOODBYE", Status.OK)  # "counters per operation and status"
        elif isinstance(msg, Load | Store | AllocStore | Free | Bind):
            self._request(conn, msg, now, hold, out)
        else:  # GOODBYE outside a session, or a message a target never receives
            self._complete(conn["id"], None, msg, Status.MALFORMED, out=out)

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

    def _abandon(self, s: dict[str, Any], ticket: int, out: list[Any]) -> None:
        """An abandoned DIRECT_ALLOC ticket: reclaim its block once its slot is ready and
        reject a later BIND of it (draft, "Allocation Quotas")."""
        d = s["direct"]
        del d["outstanding"][ticket]
        d["abandoned"].add(ticket)
        self.waiters.append({"kind": "alloc", "conn": None, "s": s, "msg": None,
                             "ring": d["ring"], "ticket": ticket, "reclaim": True})

    def _consume(self, r: dict[str, Any], i: int, out: list[Any]) -> None:
        for p in R.consume(r, i):
            self._freed(p, out)

    def _to_ring(self, s: dict[str, Any], bo: int, p: dict[str, Any] | None,
                 out: list[Any], park: bool = True) -> bool:
        """Return a block to the ring it was allocated from (draft, "Block Free" 3),
        cleared first if it may next go to another trust domain (T7). True if deferred.
        With ``tail_via_nic`` a return to the shared ring waits for ``quiesced`` (whose
        own return has ``park`` False)."""
        r = self.ring_of_block[bo]
        if park and self.tail_via_nic and r is self.rings[0]:
            self.quiescing[bo] = p if p is not None else {"kind": "free", "conn": None,
                                                          "s": s, "msg": None}
            s["freeing"] += 1
            return True
        if r is self.rings[0] and any(o["domain"] != s["domain"] for o in self.sess.values()
                                      if o["ring"] is r):
            self.pool.pop(bo, None)  # "clears its contents before returning it"
        p = p if p is not None else {"kind": "free", "conn": None, "s": s, "msg": None}
        deferred = R.free(r, bo, p)
        if (deferred and p["msg"] is not None) or (deferred and p.get("release")):
            s["freeing"] += 1
        return deferred

    def _freed(self, p: dict[str, Any], out: list[Any]) -> None:
        """A deferred free's slot write is done: it completes and releases its unit."""
        s = p["s"]
        if p["msg"] is not None or p.get("release"):
            s["freeing"] -= 1
        if p["msg"] is not None and p["conn"] is not None:
            self.conns[p["conn"]]["wait"] = None
            msg = p["msg"]
            # the entry as the FREE left it (T3); nothing else changes the handle meanwhile
            self._complete(p["conn"], s, msg, Status.OK, self.entry(msg.handle), out=out)

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

    def quiesced(self, bo: int, now: int) -> list[Any]:
        """free_quiesce (C13): nothing reads block ``bo`` under its old entry any more:
        return it to the ring (draft, "Block Free" 3) and complete the FREE (4)."""
        p = self.quiescing.pop(bo)
        s = p["s"]
        s["freeing"] -= 1
        out: list[Any] = []
        if not self._to_ring(s, bo, p, out, park=False) and p["msg"] is not None \
                and p["conn"] is not None:
            self.conns[p["conn"]]["wait"] = None
            self._complete(p["conn"], s, p["msg"], Status.OK, self.entry(p["msg"].handle),
                           out=out)
        self._settle(now, out)
        return out

    def _complete(self, cid: int, s: dict[str, Any] | None, msg: Any, status: Status,
                  e: list[int] | None = None, op: str | None = None,
                  out: list[Any] | None = None) -> None:
        """A COMPLETION (draft, "Completion"), or a completion record with RECORD. On
        failure: Data Length 0, Block Offset 0, the entry's Generation (0 for
        INVALID_HANDLE and MALFORMED) (T3)."""
        assert out is not None
        op = op or msg.opcode.name
        self._count(op, status)
        if e is None:
            gen = 0 if status in (Status.INVALID_HANDLE, Status.MALFORMED) or not (
                self.tbase <= msg.handle < self.tbase + self.tcount) else self.entry(
                    msg.handle)[1]
            e = [0, gen, 0, 0]
        f = int(msg.flags) if op in ("LOAD", "STORE", "ALLOC_STORE", "FREE") else 0
        le = self.conns[cid]["le"]
        if f & RECORD and status != Status.MALFORMED:
            cd = msg.completion_descriptor
            rec = CompletionRecord(msg.request_id, status, e[1], e[2], e[3])
            out.append(("record", cid, cd.stag, cd.tagged_offset, rec, rec.encode(le)))
            return
        inv = msg.data_descriptor.stag if f & INVALIDATE and not f & (INLINE | RECORD) \
            and op != "FREE" else None  # T10
        c = Completion(request_id=msg.request_id, handle=msg.handle, generation=e[1],
                       status=status, data_length=e[2], block_offset=e[3])
        out.append(("send", cid, c, encode(c, le), inv))

    def _count(self, op: str, status: Status) -> None:
        key = (op, Status(status).name)
        self.counts[key] = self.counts.get(key, 0) + 1

    # ------------------------------------------------------------------ invariant
    def check_invariant(self) -> None:
        """No block lost or handed out twice (draft, "Free-Block Ring": "With these
        rules ..."), and no initiator over its quota unless it overdrew it."""
        where: list[int] = list(self.held) + list(self.quiescing)
        for r in self.rings:
            where += R.ring_blocks(r) + R.deferred_blocks(r)
        for s in self.sess.values():
            where += [self.entry(h)[3] for h in s["bound"]]
            if self.usage(s) > s["quota"] and not s["overdrawn"]:
                raise ModelInvariant(f"{s['name']} uses {self.usage(s)} of {s['quota']}")
        if sorted(where) != self.offsets:
            raise ModelInvariant(f"blocks lost or duplicated: {sorted(where)}")
