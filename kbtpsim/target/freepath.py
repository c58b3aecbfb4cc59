"""The software target's free path and the progress of waiting requests (draft, "Block
Free" 3-4, "Free-Block Ring"): a block's return to its ring (cleared first if need be,
its slot write deferred while the slot is unconsumed), blocks parked until
:meth:`~kbtpsim.target.processor.Target.quiesced` (free_quiesce, decision C13;
``tail_via_nic``, decision C20), consumed slots letting deferred frees through, and
:meth:`_pump`, which lets waiting allocations read their slots, completes the frees they
let through and drains the connections' queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.target.pending import PendingFree
from kbtpsim.wire import Status

if TYPE_CHECKING:
    from kbtpsim.target.config import TargetConfig
    from kbtpsim.target.effects import Effect
    from kbtpsim.target.pending import PendingAlloc
    from kbtpsim.target.pool import Pool
    from kbtpsim.target.ring import FreeRing
    from kbtpsim.target.session import Connection, InitiatorState
    from kbtpsim.wire import Message, TableEntry


class FreePath:
    """Mixed into :class:`~kbtpsim.target.processor.Target`: blocks going back to their
    rings, and the loop that lets waiting requests go on."""

    config: TargetConfig
    pool: Pool
    shared_ring: FreeRing
    initiators: dict[str, InitiatorState]
    connections: dict[int, Connection]
    _waiters: list[PendingAlloc]
    _frees: dict[tuple[str, int], PendingFree]
    _done_frees: list[PendingFree]
    _quiescing: dict[int, PendingFree]

    if TYPE_CHECKING:
        def ring_of(self, block_offset: int) -> FreeRing: ...
        def _process(self, conn: Connection, data: bytes, now: int, hold: bool,
                     out: list[Effect]) -> None: ...
        def _got_block(self, alloc: PendingAlloc, block: int, out: list[Effect]) -> bool: ...
        def _complete(self, conn_id: int, sess: InitiatorState | None, msg: Message,
                      status: Status, entry: TableEntry | None, out: list[Effect]) -> None: ...

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
