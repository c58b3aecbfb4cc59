"""The software target: KBTP's reference semantics as a sans-IO state machine.

Requests in (bytes or decoded messages, with ``now`` in integer picoseconds), effects out
(:mod:`kbtpsim.target.effects`: completions, RDMA Writes/Reads of initiator memory,
completion records, STag invalidations). No clock is read: :meth:`Target.next_deadline`
says when the target next needs :meth:`Target.advance` (ticket timeouts, retention).

Validation order (draft, "Operations": every failing check completes the request with its
status and has no other effect). Checks run top to bottom; the first failure wins.

====  =================  ===========================================================
step  status             check (opcodes)
====  =================  ===========================================================
1     MALFORMED          undecodable bytes; request before HELLO; Status field not 0;
                         flag bits the registry does not define for the opcode (D5);
                         RECORD without RECORD_COMPLETION in the session; BIND in a
                         session without DIRECT_ALLOC (all)
2     INVALID_HANDLE     handle outside the initiator's own range (STORE, ALLOC_STORE,
                         FREE, BIND) or outside every range it may read (LOAD)
3     TOO_LARGE          data length > Block Size, inline length > Max Inline (STORE,
                         ALLOC_STORE); Data Length > Block Size (BIND)
4     NOT_VALID          entry not VALID (LOAD, STORE, FREE)
4     ALREADY_BOUND      entry VALID (ALLOC_STORE, BIND)
5     STALE_GENERATION   request Generation != 0 and != entry Generation (all)
6     NOT_SEALED         entry not SEALED and no ALLOW_UNSEALED (LOAD)
6     SEALED             entry SEALED (STORE)
7     TOO_LARGE          entry Data Length > Data Descriptor Length (LOAD)
7     TICKET_ABANDONED   ticket reclaimed after its timeout (BIND)
8     MALFORMED          ticket not outstanding, or its slot does not hold the request's
                         Block Offset (BIND)
9     NO_SPACE           usage + 1 > quota (ALLOC_STORE); usage > quota (BIND, whose
                         ticket is already counted)
====  =================  ===========================================================

Completions carry the table entry as it stands after the operation (Generation, Data
Length, Block Offset; for FREE the new Generation and the unchanged Length and Offset). A
failed request's completion carries Data Length 0, Block Offset 0, and the entry's
current Generation, or 0 for INVALID_HANDLE and MALFORMED.

Requests of one connection are processed in order: while one waits (its allocation's
slot is not ready, its RDMA Read data has not arrived, its FREE is deferred), later
requests of that connection queue behind it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from kbtpsim.errors import (
    DecodeError,
    Internal,
    KbtpError,
    Malformed,
)
from kbtpsim.target.bytestore import ByteStore
from kbtpsim.target.chain_hooks import ChainHooks
from kbtpsim.target.config import PS_PER_MS, Binding, TargetConfig
from kbtpsim.target.direct import (
    PARTITION_STAG_BASE,
    POOL_STAG,
    RING_STAG_BASE,
    TABLE_STAG,
    DirectAccess,
)
from kbtpsim.target.effects import (
    Effect,
    InvalidateStag,
    ReadInitiator,
    SendMessage,
    WriteInitiator,
    WriteRecord,
)
from kbtpsim.target.invariant import check_invariant
from kbtpsim.target.layout import TargetLayout
from kbtpsim.target.memstore import MemBlockTable, MemFreeRing, MemPool
from kbtpsim.target.pending import PendingAlloc, PendingFree, PendingRead
from kbtpsim.target.pool import Pool
from kbtpsim.target.ring import FreeRing, Ticket
from kbtpsim.target.session import Connection, ConnState, DirectAlloc, InitiatorState
from kbtpsim.target.stats import OpCounters, QuotaStats, RingStats, TargetStats
from kbtpsim.target.table import BlockTable
from kbtpsim.target.validation import DEFINED_FLAGS, Validation
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
    Message,
    Opcode,
    RequestFlag,
    Status,
    Store,
    TableEntry,
    decode,
    encode,
)
from kbtpsim.wire.structures import addr_order


class Target(ChainHooks, Validation, DirectAccess):
    """The software KBTP target. All public methods take ``now`` in picoseconds."""

    def __init__(self, config: TargetConfig, store: ByteStore | None = None,
                 layout: TargetLayout | None = None) -> None:
        """Dict-backed without ``store``; with one, the table, ring slots, Head/Tail
        counters and pool live as bytes in ``store`` at ``layout``'s addresses (default
        :meth:`TargetLayout.plan`). ``self.layout`` is planned in both modes."""
        self.config = config
        self.layout = layout if layout is not None else TargetLayout.plan(config)
        self.layout.check(config)
        self.store = store
        if store is None:
            self.pool = Pool(config.first_block, config.blocks, config.block_size)
            self.table = BlockTable(self.layout.table_base_handle, self.layout.table_count)
        else:
            self.pool = MemPool(store, self.layout, config.first_block, config.blocks,
                                config.block_size)
            self.table = MemBlockTable(store, self.layout)
        inits = config.initiators
        offsets = self.pool.offsets
        shared_f = config.shared_blocks
        self.shared_ring = self._new_ring(0, offsets[:shared_f])
        self.rings: list[FreeRing] = [self.shared_ring]
        self.initiators: dict[str, InitiatorState] = {}
        self._by_id: dict[bytes, InitiatorState] = {}
        next_block = shared_f
        for index, ini in enumerate(inits):
            sess = InitiatorState(config=ini, index=index)
            if ini.features & Feature.DIRECT_ALLOC:
                part = offsets[next_block : next_block + ini.quota]
                next_block += ini.quota
                ring = self._new_ring(len(self.rings), part)
                self.rings.append(ring)
                stag = RING_STAG_BASE | index << 8
                sess.direct = DirectAlloc(ring, part, stag | 1, stag | 2)
            self.initiators[ini.name] = sess
            self._by_id[ini.initiator_id] = sess
        self._readable: dict[str, list[range]] = {
            i.name: [
                range(j.handle_base, j.handle_base + j.handle_count)
                for j in inits
                if j.trust_domain == i.trust_domain
            ]
            for i in inits
        }
        self.connections: dict[int, Connection] = {}
        self.counters = OpCounters()
        self._tokens = itertools.count(1)
        self._partition_stags = itertools.count(PARTITION_STAG_BASE)
        self._waiters: list[PendingAlloc] = []
        self._reads: dict[int, PendingRead] = {}
        self._frees: dict[tuple[str, int], PendingFree] = {}
        self._done_frees: list[PendingFree] = []
        #: free_quiesce (C13): block -> the free that unbound it, its ring write waiting
        #: for ``quiesced``
        self._quiescing: dict[int, PendingFree] = {}
        #: blocks taken from a ring and not yet bound (outstanding tickets' blocks)
        self.held_blocks: dict[int, str] = {}
        #: exceptions that escaped an operation and were answered with INTERNAL
        self.internal_errors: list[Exception] = []
        #: chain hooks: allocations a NIC chain served, and ones it handed over after
        #: taking a ticket whose slot was not ready
        self.chain_allocations = 0
        self.slot_not_ready = 0
        #: FREEs a NIC chain served, and ones it handed over after unbinding (C20)
        self.chain_frees = 0
        self.chain_free_handovers = 0

    def _new_ring(self, index: int, blocks: range) -> FreeRing:
        """The ring ``index`` of the layout (0: shared, then DIRECT_ALLOC partitions)."""
        where = self.layout.rings[index]
        if self.store is None:
            return FreeRing(where.name, where.n_slots, blocks, self.config.counter_mode)
        return MemFreeRing(self.store, where, blocks, self.config.counter_mode,
                           addr_le=self.layout.addr_le,
                           counter_byte_order=self.layout.counter_byte_order)

    # ================================================================ public API

    def connect(self, connection_id: int, now: int) -> None:
        """A new RDMA connection (no session until HELLO)."""
        if connection_id in self.connections:
            raise ValueError(f"connection {connection_id} already exists")
        self.connections[connection_id] = Connection(connection_id)

    def disconnect(self, connection_id: int, now: int) -> list[Effect]:
        """The connection failed or was closed: keep the session's bindings (retention)."""
        conn = self._conn(connection_id)
        out: list[Effect] = []
        del self.connections[connection_id]
        sess = conn.initiator
        if sess is not None and conn.state is ConnState.ESTABLISHED:
            self._end_session(sess, now, release=False, out=out, invalidate=False)
        self._pump(now, out)
        return out

    def handle(
        self, connection_id: int, data: bytes, now: int, *, hold_after_ticket: bool = False
    ) -> list[Effect]:
        """One received message. ``hold_after_ticket`` stops an ALLOC_STORE after its
        FetchAdd on Head, before it reads the slot, until :meth:`read_slot`."""
        conn = self._conn(connection_id)
        out: list[Effect] = []
        if conn.busy:
            conn.queue.append((bytes(data), hold_after_ticket))
        else:
            self._process(conn, bytes(data), now, hold_after_ticket, out)
        self._pump(now, out)
        return out

    def handle_message(
        self, connection_id: int, msg: Message, now: int, *, hold_after_ticket: bool = False
    ) -> list[Effect]:
        """Typed entry point: ``msg`` is encoded with the connection's byte order."""
        conn = self._conn(connection_id)
        return self.handle(
            connection_id, encode(msg, conn.addr_le), now, hold_after_ticket=hold_after_ticket
        )

    def read_slot(self, connection_id: int, now: int) -> list[Effect]:
        """Let a held ALLOC_STORE read its slot (it then waits for the slot if need be)."""
        for alloc in self._waiters:
            if alloc.conn_id == connection_id and alloc.held:
                alloc.held = False
                break
        else:
            raise ValueError(f"connection {connection_id} has no held allocation")
        out: list[Effect] = []
        self._pump(now, out)
        return out

    def read_block(self, token: int) -> int | None:
        """The block a pending Read-source ALLOC_STORE's data goes to (None for a STORE,
        or no such Read)."""
        pending = self._reads.get(token)
        return None if pending is None else pending.block

    def complete_read(self, token: int, data: bytes, now: int) -> list[Effect]:
        """The RDMA Read data a :class:`ReadInitiator` effect asked for."""
        pending = self._reads.pop(token, None)
        if pending is None:
            raise ValueError(f"no RDMA Read is pending with token {token}")
        dd = pending.msg.data_descriptor
        if len(data) != dd.length:
            self._reads[token] = pending
            raise ValueError(f"token {token}: expected {dd.length} octets, got {len(data)}")
        out: list[Effect] = []
        if isinstance(pending.msg, AllocStore):
            assert pending.block is not None
            del self.held_blocks[pending.block]
            self._finish_alloc_store(pending.conn_id, pending.sess, pending.msg,
                                     pending.block, bytes(data), out)
        else:
            self._finish_store(pending.conn_id, pending.sess, pending.msg, bytes(data), out)
        self._unblock(pending.conn_id, now, out)
        self._pump(now, out)
        return out

    def next_deadline(self) -> int | None:
        """The earliest ``now`` at which :meth:`advance` has work, or None."""
        timeout = self.config.ticket_timeout_ms * PS_PER_MS
        times: list[int] = []
        for sess in self.initiators.values():
            if sess.retained_until is not None:
                times.append(sess.retained_until)
            if sess.direct is not None and sess.direct.outstanding:
                times.append(min(sess.direct.outstanding.values()) + timeout)
        return min(times, default=None)

    def advance(self, now: int) -> list[Effect]:
        """Expire ticket timeouts and retention times that are due at ``now``."""
        out: list[Effect] = []
        timeout = self.config.ticket_timeout_ms * PS_PER_MS
        for sess in self.initiators.values():
            direct = sess.direct
            if direct is not None:
                expired = sorted(t for t, at in direct.outstanding.items() if at + timeout <= now)
                if expired and direct.partition_stag is not None and sess.connection_id is not None:
                    out.append(InvalidateStag(
                        sess.connection_id, direct.partition_stag, "ticket timeout"
                    ))
                if expired:
                    direct.partition_stag = None  # DIRECT_ALLOC off for this session
                for ticket in expired:
                    self._abandon(sess, ticket)
            if sess.retained_until is not None and sess.retained_until <= now:
                sess.retained_until = None
                self._release_all(sess)
        self._pump(now, out)
        return out

    # --- inspection ---------------------------------------------------------------------

    def stats(self) -> TargetStats:
        return TargetStats(
            ops=self.counters.snapshot(),
            rings=tuple(
                RingStats(r.name, r.n_slots, len(r.blocks), r.head_ticket, r.tail_ticket,
                          r.available, len(r.deferred_blocks()))
                for r in self.rings
            ),
            quotas=tuple(
                QuotaStats(s.name, s.config.quota, len(s.bound), s.tickets, s.freeing,
                           s.usage, s.active, s.retained_until is not None)
                for s in self.initiators.values()
            ),
            pool_blocks_materialized=self.pool.materialized_blocks,
            pool_bytes_materialized=self.pool.materialized_bytes,
        )

    def check_invariant(self) -> None:
        """Raise :class:`~kbtpsim.target.invariant.InvariantViolation` if a block is lost,
        duplicated, or an initiator is over its quota."""
        check_invariant(self)

    def state(self) -> tuple[object, ...]:
        """Everything a request may change (not the counters), for no-side-effect tests."""
        return (
            tuple(self.table.items()),
            tuple(r.snapshot() for r in self.rings),
            self.pool.digest(),
            tuple(
                (s.name, s.connection_id, int(s.features), s.retained_until,
                 tuple(sorted(s.bound)), s.tickets, s.freeing,
                 None if s.direct is None else (
                     s.direct.partition_stag, tuple(sorted(s.direct.outstanding.items())),
                     tuple(sorted(s.direct.abandoned)),
                 ))
                for s in self.initiators.values()
            ),
            tuple(sorted(self.held_blocks.items())),
            len(self._waiters), len(self._reads), len(self._frees),
            tuple(self._quiescing),
        )

    def ring_of(self, block_offset: int) -> FreeRing:
        """The ring a block was allocated from and returns to."""
        for ring in self.rings[1:]:
            if block_offset in ring.blocks:
                return ring
        return self.shared_ring

    # ================================================================ dispatch

    def _conn(self, connection_id: int) -> Connection:
        try:
            return self.connections[connection_id]
        except KeyError:
            raise ValueError(f"unknown connection {connection_id}") from None

    def _process(self, conn: Connection, data: bytes, now: int, hold: bool,
                 out: list[Effect]) -> None:
        try:
            msg = decode(data, conn.addr_le)
        except DecodeError as exc:
            self._undecodable(conn, data, exc, out)
            return
        _DISPATCH[msg.opcode](self, conn, msg, now, hold, out)

    def _undecodable(self, conn: Connection, data: bytes, exc: DecodeError,
                     out: list[Effect]) -> None:
        if len(data) > 1 and data[1] == Opcode.HELLO:
            self._send(conn, HelloAck(status=Status.MALFORMED), None, out, "HELLO")
            return
        request_id = int.from_bytes(data[4:12], "big") if len(data) >= 12 else 0
        order = addr_order(conn.addr_le)
        # T3/M1: echo the Block Handle whenever its 8 octets arrived (octets 12..19)
        handle = int.from_bytes(data[12:20], order) if len(data) >= 20 else 0
        msg = Completion(request_id=request_id, handle=handle, status=exc.status)
        op = _op_name(data[1]) if len(data) > 1 else "UNKNOWN"
        self._send(conn, msg, None, out, op)

    def _on_unexpected(self, conn: Connection, msg: Message, now: int, hold: bool,
                       out: list[Effect]) -> None:
        """HELLO_ACK and COMPLETION are never sent to a target."""
        self._complete(conn.connection_id, conn.initiator, msg, Malformed.status, None, out)

    def _on_hello(self, conn: Connection, msg: Message, now: int, hold: bool,
                  out: list[Effect]) -> None:
        assert isinstance(msg, Hello)
        sess = self._by_id.get(msg.initiator_id)
        if (conn.state is ConnState.ESTABLISHED or msg.flags or msg.request_id or msg.handle
                or msg.generation or msg.status):
            status = Status.MALFORMED
        elif sess is None:
            status = Status.INVALID_HANDLE  # no handle range is configured for this ID
        elif sess.active:
            status = Status.ALREADY_BOUND  # the ID belongs to a session still active
        else:
            status = Status.OK
        if status is not Status.OK or sess is None:
            self._send(conn, HelloAck(status=status), None, out, "HELLO")
            return
        cfg = sess.config
        offered = cfg.features & ~Feature.ADDR_LE
        if self.config.binding is Binding.RDMAP:
            offered &= ~Feature.RECORD_COMPLETION
        features = Feature(msg.requested_features & offered)
        if self.config.addr_le:
            features |= Feature.ADDR_LE
        sess.features = features
        sess.connection_id = conn.connection_id
        sess.retained_until = None
        conn.state = ConnState.ESTABLISHED
        conn.initiator = sess
        conn.addr_le = bool(features & Feature.ADDR_LE)
        extra: dict[str, object] = {}
        if features & Feature.DIRECT_LOAD:
            extra["table"] = DirectDescriptor(TABLE_STAG, 0, self.table.count)
            extra["table_base_handle"] = self.table.base
            extra["pool"] = DirectDescriptor(POOL_STAG, self.pool.offsets.start,
                                             self.config.blocks)
        direct = sess.direct
        if direct is not None:
            direct.partition_stag = None
            if features & Feature.DIRECT_ALLOC:
                direct.partition_stag = next(self._partition_stags)
                extra["partition"] = DirectDescriptor(
                    direct.partition_stag, direct.partition.start, cfg.quota
                )
                extra["ring"] = DirectDescriptor(direct.ring_stag, 0, direct.ring.n_slots)
                extra["head"] = DirectDescriptor(direct.head_stag, 0, 1)
        ack = HelloAck(
            features=features,
            request_credits=self.config.request_credits,
            block_size=self.config.block_size,
            max_inline=self.config.max_inline,
            allocation_quota=cfg.quota,
            handle_base=cfg.handle_base,
            handle_count=cfg.handle_count,
            ticket_timeout_ms=self.config.ticket_timeout_ms,
            **extra,  # type: ignore[arg-type]
        )
        self._send(conn, ack, None, out, "HELLO")

    def _on_goodbye(self, conn: Connection, msg: Message, now: int, hold: bool,
                    out: list[Effect]) -> None:
        assert isinstance(msg, Goodbye)
        sess = conn.initiator
        if (sess is None or conn.state is not ConnState.ESTABLISHED
                or msg.flags & ~DEFINED_FLAGS[Opcode.GOODBYE] or msg.status):
            self._complete(conn.connection_id, sess, msg, Status.MALFORMED, None, out)
            return
        self.counters.bump("GOODBYE", "OK")
        conn.state = ConnState.CONNECTED
        conn.initiator = None
        conn.addr_le = False
        self._end_session(sess, now, release=msg.release, out=out, invalidate=True)

    def _on_request(self, conn: Connection, msg: Message, now: int, hold: bool,
                    out: list[Effect]) -> None:
        sess = conn.initiator
        try:
            if sess is None or conn.state is not ConnState.ESTABLISHED:
                raise Malformed("request before HELLO")
            entry = _CHECKS[msg.opcode](self, sess, msg)
        except KbtpError as exc:
            self._complete(conn.connection_id, sess, msg, exc.status, None, out)
            return
        try:
            waiting = _EXECUTE[msg.opcode](self, conn, sess, msg, entry, now, hold, out)
        except Exception as exc:  # a target failure: answer INTERNAL, keep serving
            self.internal_errors.append(exc)
            self._complete(conn.connection_id, sess, msg, Internal.status, None, out)
            return
        if waiting:
            conn.busy = True

    # ================================================================ execution

    def _exec_load(self, conn: Connection, sess: InitiatorState, msg: Message,
                   entry: TableEntry, now: int, hold: bool, out: list[Effect]) -> bool:
        assert isinstance(msg, Load)
        if entry.data_length:
            dd = msg.data_descriptor
            data = self.pool.read(entry.block_offset, entry.data_length)
            out.append(WriteInitiator(conn.connection_id, dd.stag, dd.tagged_offset, data))
        self._complete(conn.connection_id, sess, msg, Status.OK, entry, out)
        return False

    def _exec_store(self, conn: Connection, sess: InitiatorState, msg: Message,
                    entry: TableEntry, now: int, hold: bool, out: list[Effect]) -> bool:
        assert isinstance(msg, Store)
        if msg.inline_data is not None:
            self._finish_store(conn.connection_id, sess, msg, msg.inline_data, out)
            return False
        self._request_read(PendingRead(conn.connection_id, sess, msg), out)
        return True

    def _exec_alloc_store(self, conn: Connection, sess: InitiatorState, msg: Message,
                          entry: TableEntry, now: int, hold: bool, out: list[Effect]) -> bool:
        assert isinstance(msg, AllocStore)
        ring = sess.direct.ring if sess.direct is not None else self.shared_ring
        sess.tickets += 1
        alloc = PendingAlloc(conn.connection_id, sess, msg, ring, ring.take_ticket(), held=hold)
        if not hold:
            block = ring.ready(alloc.ticket)
            if block is not None:
                return self._got_block(alloc, block, out)
        self._waiters.append(alloc)
        return True

    def _exec_free(self, conn: Connection, sess: InitiatorState, msg: Message,
                   entry: TableEntry, now: int, hold: bool, out: list[Effect]) -> bool:
        assert isinstance(msg, Free)
        new_entry = self.table.unbind(msg.handle)
        sess.bound.discard(msg.handle)
        pending = PendingFree(conn.connection_id, sess, msg, new_entry)
        if self.config.free_quiesce:  # draft "Block Free" 3 waits for quiescence (C13)
            self._park(sess, entry.block_offset, pending)
            return True
        if self._free_block(sess, entry.block_offset, pending):
            return True
        self._complete(conn.connection_id, sess, msg, Status.OK, new_entry, out)
        return False

    def _exec_bind(self, conn: Connection, sess: InitiatorState, msg: Message,
                   entry: TableEntry, now: int, hold: bool, out: list[Effect]) -> bool:
        assert isinstance(msg, Bind) and sess.direct is not None
        direct = sess.direct
        del direct.outstanding[msg.ticket]
        sess.tickets -= 1
        self._consume(direct.ring, direct.ring.slot_offset_of(msg.ticket), out)
        new_entry = self.table.bind(msg.handle, msg.block_offset, msg.data_length, sealed=False)
        sess.bound.add(msg.handle)
        self._complete(conn.connection_id, sess, msg, Status.OK, new_entry, out)
        return False

    # --- steps shared by the operations -------------------------------------------------

    def _request_read(self, pending: PendingRead, out: list[Effect]) -> None:
        token = next(self._tokens)
        self._reads[token] = pending
        dd = pending.msg.data_descriptor
        out.append(ReadInitiator(pending.conn_id, token, dd.stag, dd.tagged_offset, dd.length))

    def _finish_store(self, conn_id: int, sess: InitiatorState, msg: Store, data: bytes,
                      out: list[Effect]) -> None:
        entry = self.table.get(msg.handle)
        self.pool.write(entry.block_offset, data)
        seal = bool(msg.flags & RequestFlag.SEAL)
        new_entry = self.table.update(msg.handle, len(data), seal)
        self._complete(conn_id, sess, msg, Status.OK, new_entry, out)

    def _finish_alloc_store(self, conn_id: int, sess: InitiatorState, msg: AllocStore,
                            block: int, data: bytes, out: list[Effect]) -> None:
        self.pool.write(block, data)
        seal = bool(msg.flags & RequestFlag.SEAL)
        entry = self.table.bind(msg.handle, block, len(data), seal)
        sess.tickets -= 1
        sess.bound.add(msg.handle)
        self._complete(conn_id, sess, msg, Status.OK, entry, out)

    def _got_block(self, alloc: PendingAlloc, block: int, out: list[Effect]) -> bool:
        """An allocation read its slot: consume it and go on. True if still waiting."""
        self._consume(alloc.ring, alloc.ticket.slot_offset, out)
        msg = alloc.msg
        if msg is None or alloc.conn_id is None:  # a reclaim
            alloc.sess.tickets -= 1
            self._free_block(alloc.sess, block, None, clear=False)
            return False
        if msg.inline_data is not None:
            self._finish_alloc_store(alloc.conn_id, alloc.sess, msg, block, msg.inline_data, out)
            return False
        self.held_blocks[block] = alloc.sess.name
        self._request_read(PendingRead(alloc.conn_id, alloc.sess, msg, block), out)
        return True

    def _consume(self, ring: FreeRing, slot_offset: int, out: list[Effect]) -> None:
        """Mark a slot consumed; complete a FREE whose deferred write this lets through."""
        for write in ring.consume(slot_offset):
            pending = self._frees.pop((ring.name, write.ticket))
            pending.sess.freeing -= 1
            if pending.msg is not None and pending.conn_id is not None:
                self._done_frees.append(pending)  # completed by _pump, after the consumer

    def _free_block(self, sess: InitiatorState, block: int, pending: PendingFree | None,
                    clear: bool = True, ticket: int | None = None,
                    park: bool = True) -> bool:
        """Return a block to its ring (clearing it if needed). True if the write waits.

        ``ticket``: a Tail ticket already taken for it (by a FetchAdd through the NIC).
        With ``tail_via_nic`` every other return to the shared ring waits in
        :attr:`quiescing` instead, until the caller has taken a Tail ticket through the
        NIC and calls :meth:`quiesced` with it (decision C20); ``park=False`` is that
        call's own return."""
        ring = self.ring_of(block)
        if ticket is None and park and self.config.tail_via_nic and ring is self.shared_ring:
            self._park(sess, block, pending or PendingFree(None, sess, None, None))
            return True
        if clear and self._must_clear(ring, sess):
            self.pool.clear(block)
        write, deferred = ring.free(block, ticket)
        if deferred:
            sess.freeing += 1
            self._frees[(ring.name, write.ticket)] = pending or PendingFree(None, sess, None, None)
        return deferred

    def _must_clear(self, ring: FreeRing, owner: InitiatorState) -> bool:
        """Clear a freed block if the ring may hand it to another trust domain."""
        if ring is not self.shared_ring:
            return False  # a DIRECT_ALLOC partition serves only its owner
        domain = owner.config.trust_domain
        return any(
            s.config.trust_domain != domain
            for s in self.initiators.values()
            if s.direct is None
        )

    def _abandon(self, sess: InitiatorState, ticket: int) -> None:
        direct = sess.direct
        assert direct is not None
        del direct.outstanding[ticket]
        direct.abandoned.add(ticket)
        ring = direct.ring
        self._waiters.append(
            PendingAlloc(None, sess, None, ring, Ticket(ticket, ring.slot_offset_of(ticket)))
        )

    def _release_all(self, sess: InitiatorState) -> None:
        for handle in sorted(sess.bound):
            entry = self.table.get(handle)
            self.table.unbind(handle)
            if self.config.free_quiesce:
                self._park(sess, entry.block_offset, PendingFree(None, sess, None, None))
            else:
                self._free_block(sess, entry.block_offset, None)
        sess.bound.clear()

    def _park(self, sess: InitiatorState, block: int, pending: PendingFree) -> None:
        """free_quiesce: the entry is unbound; the block waits for :meth:`quiesced`
        (usage until then, as a deferred free's)."""
        sess.freeing += 1
        self._quiescing[block] = pending

    @property
    def quiescing(self) -> list[int]:
        """free_quiesce: blocks unbound by a free whose ring write waits for
        :meth:`quiesced`, oldest first."""
        return list(self._quiescing)

    def quiesced(self, block_offset: int, now: int, ticket: int | None = None,
                 ticket_time: int | None = None) -> list[Effect]:
        """free_quiesce (decision C13): nothing reads ``block_offset`` under the entry
        its free unbound any more. Return it to its ring (draft, "Block Free" 3: cleared
        first if need be; the slot write deferred while the slot is unconsumed) and
        complete the FREE (4) if its connection is still there. ``ticket``: the Tail
        ticket the caller took for it through the NIC (``tail_via_nic``, decision C20),
        at ``ticket_time`` (for observers); None: the target takes one itself."""
        pending = self._quiescing.pop(block_offset, None)
        if pending is None:
            raise ValueError(f"block 0x{block_offset:x} does not wait for quiescence")
        pending.sess.freeing -= 1
        out: list[Effect] = []
        deferred = self._free_block(pending.sess, block_offset,
                                    pending if pending.msg is not None else None,
                                    ticket=ticket, park=False)
        if not deferred and pending.msg is not None and pending.conn_id is not None:
            self._done_frees.append(pending)
        self._pump(now, out)
        return out

    def _end_session(self, sess: InitiatorState, now: int, release: bool,
                     out: list[Effect], invalidate: bool) -> None:
        """GOODBYE or connection failure: detach, abandon direct tickets, drop waits."""
        conn_id = sess.connection_id
        sess.connection_id = None
        direct = sess.direct
        if direct is not None:
            if invalidate and direct.partition_stag is not None and conn_id is not None:
                out.append(InvalidateStag(conn_id, direct.partition_stag, "session ended"))
            direct.partition_stag = None
            for ticket in sorted(direct.outstanding):
                self._abandon(sess, ticket)
        for alloc in self._waiters:
            if alloc.conn_id == conn_id:
                alloc.conn_id, alloc.msg, alloc.held = None, None, False
        for token, read in list(self._reads.items()):
            if read.conn_id == conn_id:
                del self._reads[token]
                if read.block is not None:
                    del self.held_blocks[read.block]
                    sess.tickets -= 1
                    self._free_block(sess, read.block, None, clear=False)
        self._done_frees = [f for f in self._done_frees if f.conn_id != conn_id]
        for pending in [*self._frees.values(), *self._quiescing.values()]:
            if pending.conn_id == conn_id:
                pending.conn_id, pending.msg = None, None
        if release:
            self._release_all(sess)
            sess.retained_until = None
        else:
            sess.retained_until = now + self.config.retention_ms * PS_PER_MS
            if not sess.bound:
                sess.retained_until = None  # nothing to retain

    def _pump(self, now: int, out: list[Effect]) -> None:
        """Let waiting allocations read slots that are now written; drain queues."""
        progress = True
        while progress:
            progress = False
            while self._done_frees:
                pending = self._done_frees.pop(0)
                assert pending.msg is not None and pending.conn_id is not None
                assert pending.entry is not None
                self._complete(pending.conn_id, pending.sess, pending.msg, Status.OK,
                               pending.entry, out)
                conn = self.connections.get(pending.conn_id)
                if conn is not None:
                    conn.busy = False
                progress = True
            for alloc in list(self._waiters):
                if alloc.held:
                    continue
                block = alloc.ring.ready(alloc.ticket)
                if block is None:
                    continue
                self._waiters.remove(alloc)
                progress = True
                if not self._got_block(alloc, block, out) and alloc.conn_id is not None:
                    conn = self.connections.get(alloc.conn_id)
                    if conn is not None:
                        conn.busy = False
                break  # complete the frees it let through before anything else
            if progress:
                continue
            for conn in list(self.connections.values()):
                if not conn.busy and conn.queue:
                    progress = True
                    self._drain(conn, now, out)

    def _drain(self, conn: Connection, now: int, out: list[Effect]) -> None:
        while not conn.busy and conn.queue and conn.connection_id in self.connections:
            data, hold = conn.queue.popleft()
            self._process(conn, data, now, hold, out)

    def _unblock(self, conn_id: int, now: int, out: list[Effect]) -> None:
        conn = self.connections.get(conn_id)
        if conn is not None:
            conn.busy = False
            self._drain(conn, now, out)

    # ================================================================ completions

    def _complete(self, conn_id: int, sess: InitiatorState | None, msg: Message,
                  status: Status, entry: TableEntry | None, out: list[Effect]) -> None:
        """Answer ``msg`` with ``status`` (COMPLETION message or completion record)."""
        if entry is not None:
            generation, length, offset = entry.generation, entry.data_length, entry.block_offset
        elif status in (Status.INVALID_HANDLE, Status.MALFORMED) or sess is None:
            generation, length, offset = 0, 0, 0
        else:
            generation, length, offset = self.table.get(msg.handle).generation, 0, 0
        conn = self.connections.get(conn_id)
        if conn is None:
            return  # the connection is gone: nobody to complete to
        op = msg.opcode.name
        cd = getattr(msg, "completion_descriptor", None)
        if (cd is not None and sess is not None and status is not Status.MALFORMED
                and sess.features & Feature.RECORD_COMPLETION):
            record = CompletionRecord(msg.request_id, status, generation, length, offset)
            out.append(WriteRecord(conn_id, cd.stag, cd.tagged_offset, record,
                                   record.encode(conn.addr_le)))
            self.counters.bump(op, status.name)
            return
        invalidate = None
        dd = getattr(msg, "data_descriptor", None)
        if (dd is not None and msg.flags & RequestFlag.INVALIDATE
                and not msg.flags & RequestFlag.INLINE):
            invalidate = dd.stag
        completion = Completion(
            request_id=msg.request_id, handle=msg.handle, generation=generation,
            status=status, data_length=length, block_offset=offset,
        )
        out.append(SendMessage(conn_id, completion, encode(completion, conn.addr_le),
                               invalidate))
        self.counters.bump(op, status.name)

    def _send(self, conn: Connection, msg: Message, invalidate: int | None,
              out: list[Effect], op: str) -> None:
        out.append(SendMessage(conn.connection_id, msg, encode(msg, conn.addr_le), invalidate))
        self.counters.bump(op, Status(msg.status).name)


Handler = Callable[[Target, Connection, Message, int, bool, list[Effect]], None]
Check = Callable[[Target, InitiatorState, Message], TableEntry]
Execute = Callable[
    [Target, Connection, InitiatorState, Message, TableEntry, int, bool, list[Effect]], bool
]

#: Opcode -> handler: the one place that says what each received message does.
_DISPATCH: dict[Opcode, Handler] = {
    Opcode.HELLO: Target._on_hello,
    Opcode.GOODBYE: Target._on_goodbye,
    Opcode.LOAD: Target._on_request,
    Opcode.STORE: Target._on_request,
    Opcode.ALLOC_STORE: Target._on_request,
    Opcode.FREE: Target._on_request,
    Opcode.BIND: Target._on_request,
    Opcode.HELLO_ACK: Target._on_unexpected,
    Opcode.COMPLETION: Target._on_unexpected,
}

#: Request opcode -> (validation, execution).
_CHECKS: dict[Opcode, Check] = {
    Opcode.LOAD: Target._check_load,
    Opcode.STORE: Target._check_store,
    Opcode.ALLOC_STORE: Target._check_alloc_store,
    Opcode.FREE: Target._check_free,
    Opcode.BIND: Target._check_bind,
}
_EXECUTE: dict[Opcode, Execute] = {
    Opcode.LOAD: Target._exec_load,
    Opcode.STORE: Target._exec_store,
    Opcode.ALLOC_STORE: Target._exec_alloc_store,
    Opcode.FREE: Target._exec_free,
    Opcode.BIND: Target._exec_bind,
}


def _op_name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"0x{opcode:02x}"

