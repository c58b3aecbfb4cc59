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
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kbtpsim.errors import (
    DecodeError,
    Internal,
    KbtpError,
    Malformed,
)
from kbtpsim.target.bytestore import ByteStore
from kbtpsim.target.chain_hooks import ChainHooks
from kbtpsim.target.completions import Completions
from kbtpsim.target.config import TargetConfig
from kbtpsim.target.direct import PARTITION_STAG_BASE, RING_STAG_BASE, DirectAccess
from kbtpsim.target.effects import Effect
from kbtpsim.target.freepath import FreePath
from kbtpsim.target.invariant import check_invariant
from kbtpsim.target.layout import TargetLayout
from kbtpsim.target.lifecycle import SessionLifecycle
from kbtpsim.target.memstore import MemBlockTable, MemFreeRing, MemPool
from kbtpsim.target.operations import Operations
from kbtpsim.target.pending import PendingAlloc, PendingFree, PendingRead
from kbtpsim.target.pool import Pool
from kbtpsim.target.ring import FreeRing
from kbtpsim.target.session import Connection, ConnState, DirectAlloc, InitiatorState
from kbtpsim.target.stats import OpCounters, QuotaStats, RingStats, TargetStats
from kbtpsim.target.table import BlockTable
from kbtpsim.target.validation import Validation
from kbtpsim.wire import (
    AllocStore,
    Completion,
    Feature,
    HelloAck,
    Message,
    Opcode,
    Status,
    TableEntry,
    decode,
    encode,
)
from kbtpsim.wire.structures import addr_order


class Target(ChainHooks, SessionLifecycle, Operations, FreePath, Completions, Validation,
             DirectAccess):
    """The software KBTP target. All public methods take ``now`` in picoseconds.

    This class holds the state, the public entry points, inspection and the dispatch of
    received messages; the rest comes from its mixins: sessions
    (:mod:`~kbtpsim.target.lifecycle`), validation (:mod:`~kbtpsim.target.validation`),
    execution (:mod:`~kbtpsim.target.operations`), the free path and the progress of
    waiting requests (:mod:`~kbtpsim.target.freepath`), completions
    (:mod:`~kbtpsim.target.completions`), one-sided direct accesses
    (:mod:`~kbtpsim.target.direct`) and the hooks of a NIC running chains
    (:mod:`~kbtpsim.target.chain_hooks`).
    """

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
        """The RDMA Read data a :class:`~kbtpsim.target.effects.ReadInitiator` effect asked
        for."""
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
        with self.unmetered():
            check_invariant(self)

    @contextmanager
    def unmetered(self) -> Iterator[None]:
        """Table reads inside are not the CPU's (a check, a snapshot): a table meter
        (decision C29) does not count them."""
        meter = getattr(self.table, "meter", None)
        if meter is None or meter.paused:
            yield
            return
        meter.paused = True
        try:
            yield
        finally:
            meter.paused = False

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

