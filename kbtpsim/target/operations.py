"""The software target's operations once a request has passed validation (draft,
"Operations"): LOAD, STORE, ALLOC_STORE, FREE and BIND, and the steps they share (the
RDMA Read of a store's data, the block and entry writes that finish a store, an
allocation going on once it has read its slot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.target.effects import ReadInitiator, WriteInitiator
from kbtpsim.target.pending import PendingAlloc, PendingFree, PendingRead
from kbtpsim.wire import AllocStore, Bind, Free, Load, RequestFlag, Status, Store

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kbtpsim.target.config import TargetConfig
    from kbtpsim.target.effects import Effect
    from kbtpsim.target.pool import Pool
    from kbtpsim.target.ring import FreeRing
    from kbtpsim.target.session import Connection, InitiatorState
    from kbtpsim.target.table import BlockTable
    from kbtpsim.wire import Message, TableEntry


class Operations:
    """Mixed into :class:`~kbtpsim.target.processor.Target`: the ``_exec_*`` methods of its
    dispatch table (each returns True if the request waits: for its slot, its RDMA Read
    data, or its block's ring write) and the steps they share."""

    config: TargetConfig
    table: BlockTable
    pool: Pool
    shared_ring: FreeRing
    held_blocks: dict[int, str]
    _tokens: Iterator[int]
    _waiters: list[PendingAlloc]
    _reads: dict[int, PendingRead]

    if TYPE_CHECKING:
        def _complete(self, conn_id: int, sess: InitiatorState | None, msg: Message,
                      status: Status, entry: TableEntry | None, out: list[Effect]) -> None: ...
        def _consume(self, ring: FreeRing, slot_offset: int, out: list[Effect]) -> None: ...
        def _park(self, sess: InitiatorState, block: int, pending: PendingFree) -> None: ...
        def _free_block(self, sess: InitiatorState, block: int, pending: PendingFree | None,
                        clear: bool = True, ticket: int | None = None,
                        park: bool = True) -> bool: ...

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
