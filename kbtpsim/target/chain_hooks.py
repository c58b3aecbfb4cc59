"""The software target's hooks for a NIC that runs requests in pre-posted chains.

The chains (:mod:`kbtpsim.chains`) serve LOAD, STORE, ALLOC_STORE and, with decision
C20, FREE in memory; the CPU tells the target what they did (``note_chain_*``) or hands a
request over part way (``finish_allocation``, ``finish_free``), and takes the target's own
shared-ring tickets through the NIC (``takes_shared_ticket``, ``allocate_with_ticket``),
so that one atomic unit orders every update of Head and Tail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from kbtpsim.errors import DecodeError, KbtpError
from kbtpsim.target.effects import Effect
from kbtpsim.target.pending import PendingAlloc, PendingFree
from kbtpsim.target.ring import Ticket
from kbtpsim.target.session import Connection, ConnState, InitiatorState
from kbtpsim.wire import AllocStore, EntryFlag, Free, Message, Status, decode

_M = TypeVar("_M", bound=Message)

if TYPE_CHECKING:
    from kbtpsim.target.config import TargetConfig
    from kbtpsim.target.ring import FreeRing
    from kbtpsim.target.stats import OpCounters
    from kbtpsim.target.table import BlockTable


class ChainHooks:
    """Mixed into :class:`~kbtpsim.target.processor.Target`: entry points for a target
    whose NIC runs requests in pre-posted chains (:mod:`kbtpsim.chains`). The chain does
    the draft's steps in memory (FetchAdd on Head or Tail, slot Read and Write, data,
    table entry); these keep the target's Python bookkeeping in step."""

    config: TargetConfig
    connections: dict[int, Connection]
    counters: OpCounters
    shared_ring: FreeRing
    table: BlockTable
    _waiters: list[PendingAlloc]
    _frees: dict[tuple[str, int], PendingFree]
    _done_frees: list[PendingFree]
    chain_allocations: int
    chain_frees: int
    chain_free_handovers: int
    slot_not_ready: int

    if TYPE_CHECKING:
        def _conn(self, connection_id: int) -> Connection: ...
        def _pump(self, now: int, out: list[Effect]) -> None: ...
        def _check_alloc_store(self, sess: InitiatorState, msg: AllocStore) -> object: ...
        def _got_block(self, alloc: PendingAlloc, block: int, out: list[Effect]) -> bool: ...
        def _park(self, sess: InitiatorState, block: int, pending: PendingFree) -> None: ...
        def _free_block(self, sess: InitiatorState, block: int, pending: PendingFree | None,
                        clear: bool = True, ticket: int | None = None,
                        park: bool = True) -> bool: ...

    def note_chain_op(self, op: str) -> None:
        """A NIC chain served a LOAD or STORE (fast paths complete with OK only): count
        its completion, as handling it here would have. The chain read or wrote the
        table and pool in memory; nothing else is kept for them."""
        if op not in ("LOAD", "STORE"):
            raise ValueError(f"note_chain_op: {op!r} (ALLOC_STORE: note_chain_alloc)")
        self.counters.bump(op, Status.OK.name)

    def note_chain_alloc(self, connection_id: int, data: bytes, ticket: int,
                         now: int) -> list[Effect]:
        """A NIC chain served the ALLOC_STORE ``data`` of this connection with ``ticket``:
        it took the ticket (FetchAdd on Head), consumed the ticket's slot, wrote the block
        and bound the handle, all in memory. Record the binding (quota usage) and the
        completion's counter, and perform a free deferred on that slot, as consuming it in
        software would (its FREE completes now). Returns the effects (such completions)."""
        _, sess, msg = self._chain_request(connection_id, data, AllocStore, "an ALLOC_STORE",
                                           "note_chain_alloc", established=False)
        ring = sess.direct.ring if sess.direct is not None else self.shared_ring
        out: list[Effect] = []
        self._consumed_elsewhere(ring, ring.slot_offset_of(ticket))
        sess.bound.add(msg.handle)
        self.counters.bump("ALLOC_STORE", Status.OK.name)
        self.chain_allocations += 1
        self._pump(now, out)
        return out

    def takes_shared_ticket(self, connection_id: int, data: bytes) -> bool:
        """Would :meth:`handle` take a Ticket of the shared ring for ``data`` now (an
        ALLOC_STORE that passes validation on an established, idle connection whose
        session allocates from the shared ring)? A server whose NIC also takes Tickets
        on that Head (chains) takes this one through the NIC instead and calls
        :meth:`finish_allocation` with ``handover=False``. No state changes."""
        conn = self.connections.get(connection_id)
        if conn is None or conn.busy or conn.queue:
            return False
        sess = conn.initiator
        if sess is None or conn.state is not ConnState.ESTABLISHED or \
                sess.direct is not None:
            return False
        try:
            msg = decode(data, conn.addr_le)
        except DecodeError:
            return False
        if not isinstance(msg, AllocStore):
            return False
        try:
            self._check_alloc_store(sess, msg)
        except KbtpError:
            return False
        return True

    def finish_allocation(self, connection_id: int, data: bytes, ticket: int,
                          now: int, *, handover: bool = True) -> list[Effect]:
        """A NIC chain took ``ticket`` for the ALLOC_STORE ``data`` (FetchAdd on Head) but
        found the slot not ready (Sequence != ticket: a free still writing it) and handed
        the request over. Finish the allocation of *that* ticket in software: wait for the
        slot if need be, consume it, write the data, bind, complete, exactly as
        :meth:`handle` would after its own FetchAdd. The request must pass validation (the
        chain checked it); a failure here is a chain/target disagreement and raises."""
        conn, sess, msg = self._chain_request(connection_id, data, AllocStore,
                                              "an ALLOC_STORE", "finish_allocation")
        self._check_alloc_store(sess, msg)  # raises KbtpError: the chain should not have run
        ring = sess.direct.ring if sess.direct is not None else self.shared_ring
        if not 0 <= ticket <= 0xFFFFFFFF:
            raise ValueError(f"bad ticket {ticket}")
        if handover:
            self.slot_not_ready += 1
        sess.tickets += 1
        alloc = PendingAlloc(connection_id, sess, msg, ring,
                             Ticket(ticket, ring.slot_offset_of(ticket)))
        out: list[Effect] = []
        block = ring.ready(alloc.ticket)
        if block is None or conn.busy:
            self._waiters.append(alloc)
            conn.busy = True
        elif self._got_block(alloc, block, out):
            conn.busy = True
        self._pump(now, out)
        return out

    def allocate_with_ticket(self, connection_id: int, data: bytes, ticket: int,
                             ticket_time: int, now: int) -> list[Effect]:
        """The server took ``ticket`` of the shared ring for the ALLOC_STORE ``data``
        itself, with a FetchAdd through its NIC at ``ticket_time`` (see
        :meth:`takes_shared_ticket`): finish the allocation as :meth:`handle` would
        after its own FetchAdd. ``ticket_time`` is for observers (the oracle's tap)."""
        return self.finish_allocation(connection_id, data, ticket, now, handover=False)

    def poll_waiting(self, now: int) -> list[Effect]:
        """Re-read the slots of allocations waiting for them (slot not ready: a free still
        writing it) and go on with those that are now ready; a CPU that finishes chain
        hand-overs calls this while :attr:`waiting_allocations` is non-zero."""
        out: list[Effect] = []
        self._pump(now, out)
        return out

    @property
    def waiting_allocations(self) -> int:
        """Allocations holding a ticket whose slot they have not read successfully yet."""
        return sum(1 for a in self._waiters if a.msg is not None and not a.held)

    def _consumed_elsewhere(self, ring: FreeRing, slot_offset: int) -> None:
        """A slot was consumed in memory by someone else (a chain): perform the free
        deferred on it, if any, as :meth:`FreeRing.consume` does after its own write."""
        index = slot_offset // 16
        waiting = ring._deferred.get(index)
        if not waiting:
            return
        next_ticket, block = waiting.popleft()
        if not waiting:
            del ring._deferred[index]
        ring._put(index, next_ticket, block)  # Block Offset first, then Sequence
        pending = self._frees.pop((ring.name, next_ticket))
        pending.sess.freeing -= 1
        if pending.msg is not None and pending.conn_id is not None:
            self._done_frees.append(pending)

    # --- FREE on the NIC (decision C20) ---------------------------------------------

    def _chain_request(self, connection_id: int, data: bytes, cls: type[_M], what: str,
                       hook: str, established: bool = True
                       ) -> tuple[Connection, InitiatorState, _M]:
        """The connection, its session and the decoded request a chain hook is told of;
        no session (or, with ``established``, one not established), or a request other
        than ``cls`` (``what``), is a chain/target disagreement and raises."""
        conn = self._conn(connection_id)
        sess = conn.initiator
        if sess is None or (established and conn.state is not ConnState.ESTABLISHED):
            raise ValueError(f"connection {connection_id} has no session")
        msg = decode(data, conn.addr_le)
        if not isinstance(msg, cls):
            raise ValueError(f"{hook}: not {what}")
        return conn, sess, msg

    def note_chain_free(self, connection_id: int, data: bytes, ticket: int,
                        now: int) -> list[Effect]:
        """A NIC chain served the FREE ``data`` of this connection: it unbound the entry
        (Flags cleared, Generation + 1), took Tail ticket ``ticket``, found that ticket's
        slot consumed and wrote it (Block Offset, then Sequence), and sent the
        COMPLETION, all in memory (draft, "Block Free" 1-4). Record the unbinding (quota
        usage) and the completion's counter; an allocation waiting for that slot goes
        on. Returns the effects."""
        _, sess, msg = self._chain_request(connection_id, data, Free, "a FREE",
                                           "note_chain_free")
        ring = self.shared_ring
        if not 0 < (ring.tail_ticket - ticket) & 0xFFFFFFFF <= ring.n_slots:
            raise ValueError(f"note_chain_free: Tail ticket {ticket} was not taken "
                             f"(Tail is at {ring.tail_ticket})")
        sess.bound.discard(msg.handle)
        self.counters.bump("FREE", Status.OK.name)
        self.chain_frees += 1
        out: list[Effect] = []
        self._pump(now, out)
        return out

    def finish_free(self, connection_id: int, data: bytes, ticket: int | None,
                    now: int) -> list[Effect]:
        """A NIC chain unbound the entry for the FREE ``data`` (in memory, draft "Block
        Free" 2) and handed the request over: with ``ticket`` None because a LOAD still
        counted itself a reader of the handle, so the block waits for :meth:`quiesced`
        (as a FREE this target ran itself waits: ``free_quiesce``); with a ``ticket``
        because that Tail ticket's slot was not consumed yet, so the slot write waits for
        the allocation that owns it (draft, "Free-Block Ring", Free: deferred). The FREE
        completes once its block is back. The entry must be unbound as the chain leaves
        it; anything else is a chain/target disagreement and raises."""
        conn, sess, msg = self._chain_request(connection_id, data, Free, "a FREE",
                                              "finish_free")
        entry = self.table.get(msg.handle)
        if entry.flags & EntryFlag.VALID:
            raise ValueError(f"finish_free: handle 0x{msg.handle:x} is still VALID")
        sess.bound.discard(msg.handle)
        self.chain_free_handovers += 1
        pending = PendingFree(connection_id, sess, msg, entry)
        out: list[Effect] = []
        if ticket is None:
            self._park(sess, entry.block_offset, pending)
            conn.busy = True
        elif self._free_block(sess, entry.block_offset, pending, ticket=ticket):
            conn.busy = True  # completes when the slot is consumed (_consume)
        else:
            conn.busy = True
            self._done_frees.append(pending)  # completed by _pump
        self._pump(now, out)
        return out


__all__ = ["ChainHooks"]
