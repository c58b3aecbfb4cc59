"""A session's lifecycle in the software target (draft, "Session Establishment"): HELLO
and GOODBYE, the end of a session (GOODBYE or a failed connection: its direct tickets
abandoned, its waits dropped, its bindings released or retained), and what
:meth:`~kbtpsim.target.processor.Target.advance` expires (Ticket Timeouts of DIRECT_ALLOC
tickets, retention times).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.target.config import PS_PER_MS, Binding
from kbtpsim.target.direct import POOL_STAG, TABLE_STAG
from kbtpsim.target.effects import InvalidateStag
from kbtpsim.target.pending import PendingAlloc, PendingFree
from kbtpsim.target.ring import Ticket
from kbtpsim.target.session import ConnState
from kbtpsim.target.validation import DEFINED_FLAGS
from kbtpsim.wire import DirectDescriptor, Feature, Goodbye, Hello, HelloAck, Opcode, Status

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kbtpsim.target.config import TargetConfig
    from kbtpsim.target.effects import Effect
    from kbtpsim.target.pending import PendingRead
    from kbtpsim.target.pool import Pool
    from kbtpsim.target.session import Connection, InitiatorState
    from kbtpsim.target.stats import OpCounters
    from kbtpsim.target.table import BlockTable
    from kbtpsim.wire import Message, TableEntry


class SessionLifecycle:
    """Mixed into :class:`~kbtpsim.target.processor.Target`: a session from HELLO to its
    end, and the expiries of :meth:`advance` (Ticket Timeouts, retention)."""

    config: TargetConfig
    table: BlockTable
    pool: Pool
    counters: OpCounters
    initiators: dict[str, InitiatorState]
    held_blocks: dict[int, str]
    _by_id: dict[bytes, InitiatorState]
    _partition_stags: Iterator[int]
    _waiters: list[PendingAlloc]
    _reads: dict[int, PendingRead]
    _frees: dict[tuple[str, int], PendingFree]
    _done_frees: list[PendingFree]
    _quiescing: dict[int, PendingFree]

    if TYPE_CHECKING:
        def _pump(self, now: int, out: list[Effect]) -> None: ...
        def _send(self, conn: Connection, msg: Message, invalidate: int | None,
                  out: list[Effect], op: str) -> None: ...
        def _complete(self, conn_id: int, sess: InitiatorState | None, msg: Message,
                      status: Status, entry: TableEntry | None, out: list[Effect]) -> None: ...
        def _park(self, sess: InitiatorState, block: int, pending: PendingFree) -> None: ...
        def _free_block(self, sess: InitiatorState, block: int, pending: PendingFree | None,
                        clear: bool = True, ticket: int | None = None,
                        park: bool = True) -> bool: ...

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
