"""How the offloaded target's CPU serves a connection's finished credits (mixed into
:class:`~kbtpsim.chains.server.OffloadedTargetServer`): a credit the NIC served is
noted (a CQ poll, an allocation's bookkeeping); one it did not is served by the software
target, its effects in the credit's CPU slots and its gate held while the request waits
in the target; then the gates released, the later credits' session and quota octets
set, and finished credits handed back to the NIC (re-posted, or granted their
re-arming)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.chains.post import Finished
from kbtpsim.system.server import op_name

if TYPE_CHECKING:
    from kbtpsim.chains.server import _ChainConn

Gen = Generator[simpy.Event, Any, Any]

#: CPU accounts that are not KBTP operations
REFILL = "REFILL"  #: re-posting chains (per-WR posting and doorbells)
#: noticing credits the NIC served (a CQ poll, ALLOC_STORE bookkeeping) and the CPU's
#: MMIO writes on the chains: gate ENABLEs, session and quota octets in device memory
CHAIN = "CHAIN"


class CreditServing:
    """Serving finished credits, releasing gates, refilling (module docstring)."""

    cpu: Any
    target: Any
    env: simpy.Environment
    log: list[Any]
    refill_batch: int
    repost_ps: int | None
    _tickets: Any
    _hold: Any

    if TYPE_CHECKING:
        def _count(self, op: str, where: str) -> None: ...
        def _count_reason(self, cc: _ChainConn, f: Finished, op: str) -> None: ...
        def _log_ticket(self, ticket: int) -> None: ...
        def _kick(self) -> None: ...
        def carry_out(self, effects: Any, account: str) -> Gen: ...
        def on_request(self, conn: Any, data: bytes, now: int) -> list[Any]: ...
        def _quiesce(self, now: int) -> list[Any]: ...

    def _serve_nic(self, cc: _ChainConn, f: Finished) -> Gen:
        """The NIC served ``f``: note it (the target sees the NIC's writes in memory)."""
        conn = cc.conn
        assert conn is not None
        now = int(self.env.now)
        op = op_name(f.request)
        self._count(op, "nic")
        conn.received.append(f.request)
        if f.unbound is not None:  # a FREE (C20): unbound, Tail ticket, slot written
            assert f.ticket is not None and f.ticket_time is not None
            # for replay(): the FREE at its unbind, its block's return at its Tail ticket
            self.log.append(("nic", cc.conn_id, f.request, f.unbound))
            self.log.append(("quiesced", self._freed_block(cc, f.request), f.ticket_time))
            self.cpu.count(CHAIN)
            yield from self.cpu.spend(CHAIN, self.cpu.poll_ps)
            effects = self.target.note_chain_free(cc.conn_id, f.request, f.ticket, now)
            self._kick()
            yield from self.carry_out(effects, CHAIN)
            return
        # for replay(): the request took effect when the NIC ran it (the reference sorts
        # the log by time); its store data, if any, is the initiator's (read_source)
        # an allocation: its ticket at its FetchAdd on Head, the rest (slot, data, entry)
        # when its entry turned VALID (decision R1)
        two = f.ticket is not None and f.bound is not None
        self.log.append(("nic_hold" if two else "nic", cc.conn_id, f.request,
                         now if f.nic_time is None else f.nic_time))
        if f.ticket is not None:
            self._log_ticket(f.ticket)
        if two:
            self.log.append(("nic_slot", cc.conn_id, f.request, f.bound))
        self.cpu.count(CHAIN)
        yield from self.cpu.spend(CHAIN, self.cpu.poll_ps)
        if f.ticket is None:  # LOAD, STORE: only the completion counter
            self.target.note_chain_op(op)
        else:  # the chain bound a handle: the CPU's bookkeeping
            effects = self.target.note_chain_alloc(cc.conn_id, f.request, f.ticket, now)
            self._kick()
            yield from self.carry_out(effects, CHAIN)  # e.g. a FREE deferred on that slot

    def _serve_cpu(self, cc: _ChainConn, f: Finished) -> Gen:
        """The CPU serves ``f``: the target runs the request, the effects go out in the
        credit's CPU slots, the gate stays held until the request no longer waits."""
        cpu, conn = self.cpu, cc.conn
        assert conn is not None
        cc.holding = f.credit
        op = op_name(f.request)
        self._count(op, "cpu")
        self._count_reason(cc, f, op)
        cpu.count(op)
        yield from cpu.spend(op, cpu.poll_ps + cpu.costs.op_ps(op))
        now = int(self.env.now)
        if f.unbound is not None:  # a FREE the chain unbound, then handed over (C20)
            effects = self._finish_free(cc, f, now)
        elif f.ticket is not None:  # the chain took a ticket, its slot was not ready
            # the reference takes the ticket when the chain's FetchAdd took it
            self._log_allocation(cc, f.request, f.ticket,
                                 now if f.nic_time is None else f.nic_time)
            effects = self.target.finish_allocation(cc.conn_id, f.request, f.ticket, now)
            self.note_reads(effects)
            self._kick()
        elif self._tickets is not None and cc.conn_id not in self._hold and \
                self.target.takes_shared_ticket(cc.conn_id, f.request):
            effects = yield from self._alloc_through_nic(cc, f.request)
        else:
            effects = self.on_request(conn, f.request, now)
        yield from self.carry_out(effects, op)
        cc.held.append(f.credit)

    def _freed_block(self, cc: _ChainConn, request: bytes) -> int:
        """The Block Offset of the entry a FREE chain unbound (it keeps it)."""
        tconn = self.target.connections[cc.conn_id]
        handle = int.from_bytes(request[12:20], "little" if tconn.addr_le else "big")
        with self.target.unmetered():  # the replay log's, not the CPU's (C29)
            return int(self.target.table.get(handle).block_offset)

    def _finish_free(self, cc: _ChainConn, f: Finished, now: int) -> list[Any]:
        """A FREE the chain unbound and handed over (decision C20): readers were still
        counted (no ticket: the block waits for quiescence and a Tail ticket the CPU takes
        through the NIC), or its Tail ticket's slot was not consumed (the write waits for
        the allocation that owns it). For replay(): it took effect at its unbind, its
        block's return (if its ticket was taken) at the ticket."""
        assert cc.conn is not None and f.unbound is not None
        cc.conn.received.append(f.request)
        self.log.append(("handle", cc.conn_id, f.request, f.unbound))
        if f.ticket is not None:
            assert f.ticket_time is not None
            self.log.append(("quiesced", self._freed_block(cc, f.request), f.ticket_time))
        effects = self.target.finish_free(cc.conn_id, f.request, f.ticket, now)
        effects = effects + self._quiesce(now)
        self._kick()
        return list(effects)

    def _alloc_through_nic(self, cc: _ChainConn, request: bytes) -> Gen:
        """A CPU-served ALLOC_STORE while chains also take Tickets on the shared Head:
        the CPU takes its Ticket with a FetchAdd through its own NIC (``cpu_ticket``),
        which the NIC's atomic unit orders against the chains' FetchAdds, then finishes
        the allocation of that Ticket in software. Returns the effects."""
        conn = cc.conn
        assert conn is not None and self._tickets is not None
        ticket, at = yield from self._tickets.take(self.cpu, "ALLOC_STORE")
        now = int(self.env.now)
        self._log_allocation(cc, request, ticket, at)
        effects = self.target.allocate_with_ticket(cc.conn_id, request, ticket, at, now)
        self.note_reads(effects)  # logged at its Ticket: replay() finds its Read by this
        self._kick()
        return effects

    def _log_allocation(self, cc: _ChainConn, request: bytes, ticket: int, at: int) -> None:
        """An ALLOC_STORE whose Ticket a FetchAdd took at ``at`` (a chain's, or the CPU's
        through the NIC) and that the CPU finishes: for replay(), it took effect there,
        in Ticket order."""
        assert cc.conn is not None
        cc.conn.received.append(request)
        self.log.append(("handle", cc.conn_id, request, at))
        self._log_ticket(ticket)

    def _release_done(self, cc: _ChainConn) -> None:
        """Release the gates of served credits whose request no longer waits in the
        target (later requests of the connection stay behind it, as in software)."""
        tconn = self.target.connections.get(cc.conn_id)
        if cc.held and not cc.posting and (tconn is None or not tconn.busy):
            for credit in cc.held:
                self._sync_credits(cc, credit)
                cc.chains.release(credit)
            cc.held.clear()
            cc.holding = None

    def _allowed(self, cc: _ChainConn) -> int:
        """ALLOC_STORE allowances the CPU may hand out: quota - usage, 0 without an
        established session of the planned initiator."""
        tconn = self.target.connections.get(cc.conn_id)
        sess = tconn.initiator if tconn is not None else None
        if sess is None or sess.name != cc.initiator:
            return 0
        return max(0, sess.config.quota - sess.usage)

    def _sync_credits(self, cc: _ChainConn, after: int) -> None:
        """Before releasing credit ``after``: the later credits' session octets, and at
        most quota - usage of them armed for ALLOC_STORE."""
        tconn = self.target.connections.get(cc.conn_id)
        sess = tconn.initiator if tconn is not None else None
        cc.chains.sync_credits(after, sess is not None and sess.name == cc.initiator,
                               self._allowed(cc), cc.no_arm)

    def _refill_due(self, cc: _ChainConn) -> bool:
        """Enough finished chains for a refill: ``refill_batch`` (at most the credits)."""
        return len(cc.chains.free_slots) >= min(self.refill_batch, cc.chains.credits)

    def _refill(self, cc: _ChainConn) -> Gen:
        """Re-post finished chains, at least ``refill_batch`` at a time (one doorbell)."""
        cs = cc.chains
        if not self._refill_due(cc):
            return
        batch = min(self.refill_batch, cs.credits)
        cs.alloc_budget = self._allowed(cc) - len(cs.armed_credits()) if cs.session else 0
        n = cs.refill(batch)
        if n:
            per_credit = cs.repost_wrs_per_credit
            self.cpu.count(REFILL, n)
            post = self.cpu.post_ps if self.repost_ps is None else self.repost_ps
            yield from self.cpu.spend(REFILL, n * per_credit * post
                                      + cs.grant_doorbells * self.cpu.doorbell_ps)


__all__ = ["CHAIN", "REFILL", "CreditServing"]
