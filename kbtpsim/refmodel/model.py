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

from kbtpsim.errors import DecodeError
from kbtpsim.refmodel import ring as R
from kbtpsim.refmodel.constants import (
    ALLOW_UNSEALED,
    DEFINED,
    INLINE,
    INVALIDATE,
    PARTITION_STAG,
    POOL_STAG,
    PS_PER_MS,
    RECORD,
    RELEASE,
    RING_STAG,
    SEAL,
    SEALED,
    TABLE_STAG,
    VALID,
    next_generation,
    pow2,
)
from kbtpsim.refmodel.lifecycle import ModelLifecycle
from kbtpsim.refmodel.operations import ModelOperations
from kbtpsim.refmodel.returns import ModelReturns
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionRecord,
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

# The constants and helpers of kbtpsim.refmodel.constants stay importable from here, and
# _complete below reads INLINE, RECORD and INVALIDATE through this module's namespace.
__all__ = [
    "ALLOW_UNSEALED",
    "DEFINED",
    "INLINE",
    "INVALIDATE",
    "PARTITION_STAG",
    "POOL_STAG",
    "PS_PER_MS",
    "RECORD",
    "RELEASE",
    "RING_STAG",
    "SEAL",
    "SEALED",
    "TABLE_STAG",
    "VALID",
    "ModelInvariant",
    "RefModel",
    "next_generation",
    "pow2",
]


class ModelInvariant(AssertionError):
    """A block lost or handed out twice, or an initiator over its quota."""


class RefModel(ModelLifecycle, ModelOperations, ModelReturns):
    """The draft's target as plain data. ``config`` is read by attribute only (a
    :class:`kbtpsim.target.TargetConfig` works); nothing of kbtpsim.target is used.

    This class holds the state, the public entry points, the processing loop and the
    completions; sessions are in :mod:`~kbtpsim.refmodel.lifecycle`, a request's
    validation and execution in :mod:`~kbtpsim.refmodel.operations`, ring returns in
    :mod:`~kbtpsim.refmodel.returns`, the constants in :mod:`~kbtpsim.refmodel.constants`.
    """

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
