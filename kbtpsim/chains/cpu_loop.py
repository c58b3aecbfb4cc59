"""The offloaded target's CPU process per connection (mixed into
:class:`~kbtpsim.chains.server.OffloadedTargetServer`): it polls the connection's
:class:`~kbtpsim.chains.post.ChainServer`, takes a request no chain can serve as soon as
it arrives, serves what the NIC did not (a pass on a core: finished credits, RDMA Reads
of stores, waiting allocations, quiesced frees), releases gates, refills, charges its
MMIO writes, and sleeps until a CQE or a kick; the target calls and the posting of
their effects go through it."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.chains.dispatch import CHAIN_TESTS, SLOT_NOT_READY, static_miss
from kbtpsim.chains.post import Finished
from kbtpsim.chains.serving import CHAIN
from kbtpsim.system.server import SoftwareTargetServer
from kbtpsim.target import Effect
from kbtpsim.target.memstore import TableMeter

if TYPE_CHECKING:
    from kbtpsim.chains.chain_conn import _ChainConn

Gen = Generator[simpy.Event, Any, Any]

if TYPE_CHECKING:
    _Base = SoftwareTargetServer
else:
    _Base = object


class ChainCpuLoop(_Base):
    """The CPU side of each connection's chains (module docstring)."""

    _chain_conns: dict[int, _ChainConn]
    fallback_reasons: dict[str, dict[str, int]]
    before_chain: int
    _early_reasons: dict[tuple[int, int], str]
    log_tickets: dict[int, int]
    _grace: dict[int, dict[int, int]]
    _table_meter: TableMeter | None
    mmio_read_ps: int

    if TYPE_CHECKING:
        def _quiesce(self, now: int) -> list[Effect]: ...
        def _serve_nic(self, cc: _ChainConn, f: Finished) -> Gen: ...
        def _serve_cpu(self, cc: _ChainConn, f: Finished) -> Gen: ...
        def _release_done(self, cc: _ChainConn) -> None: ...
        def _refill(self, cc: _ChainConn) -> Gen: ...
        def _refill_due(self, cc: _ChainConn) -> bool: ...
        def _recover(self, cc: _ChainConn) -> Gen: ...

    def _call(self, entry: tuple[Any, ...], now: int) -> list[Effect]:
        head = self.target.shared_ring.head_ticket
        out = super()._call(entry, now)
        if self.target.shared_ring.head_ticket != head:  # the call took a ticket
            self._log_ticket(head)
        if self.config.free_quiesce:
            out = out + self._quiesce(now)
        self._kick()  # a target call may let another connection's held credit go
        return out

    def _log_ticket(self, ticket: int) -> None:
        """The last log entry took ``ticket`` of the shared ring (for replay())."""
        if self.log:
            self.log_tickets[len(self.log) - 1] = ticket

    def _kick(self) -> None:
        for cc in self._chain_conns.values():
            if cc.wake is not None and not cc.wake.triggered:
                cc.wake.succeed()

    def _chain_cpu(self, cc: _ChainConn) -> Gen:
        """The connection's CPU side: poll, serve, release, refill; sleep otherwise."""
        env, cpu, cs = self.env, self.cpu, cc.chains
        conn = cc.conn
        assert conn is not None
        while conn.up:
            cc.wakeups += 1
            finished = cs.poll(int(env.now))
            if not finished and not cc.held and cc.holding is None and not cs.software:
                finished = self._take_early(cc)
            for cqe in cs.take_cpu_cqes():  # the CPU's own WRs: base bookkeeping
                self._dispatch(cqe)
            if cs.errors:
                self.close(conn, cs.errors[0])
            if not conn.up:
                cc.orphans.extend(finished)
                break
            if finished or conn.inbox or cc.held or self._refill_due(cc) \
                    or self.target.waiting_allocations:
                with cpu.request() as core:
                    yield core
                    yield from self._pass(cc, finished)
                if finished or conn.inbox:
                    continue
            # nothing to do: sleep until a CQE, a kick, or a CQE still in flight lands
            cc.wake = env.event()
            woken = env.event()  # fired by the next CQE it acts on
            cs.arm_wake(woken)  # (ChainServer._acts_on), or a receive
            events = [woken, cc.wake]
            delay = cs.wake_delay(int(env.now), max(1, cpu.poll_ps))
            if delay is not None:  # such a CQE is landing: poll when it has
                events.append(env.timeout(delay))
            yield env.any_of(events)
        yield from self._recover(cc)

    def _take_early(self, cc: _ChainConn) -> list[Finished]:
        """The next request, if it has arrived and no chain variant can serve it (judged
        from its octets: :func:`~kbtpsim.chains.dispatch.static_miss`), taken by the CPU
        now rather than when its chain has run to its end. Only with no credit held: the
        CPU's work requests go into this credit's slots, after every earlier one's."""
        credit = cc.chains.arrived()
        if credit is None or cc.checked == credit:  # none, or judged at an earlier
            return []  # wake-up: its octets are the same
        request = cc.chains.request_bytes(cc.chains.live[credit])
        reason = static_miss(request, cc.plan.offloaded, self.config.block_size,
                             self.config.addr_le, cc.plan.software)
        if reason is None:
            cc.checked = credit
            return []
        self.before_chain += 1
        self._early_reasons[(cc.conn_id, credit)] = reason
        return [cc.chains.take_early(credit, int(self.env.now))]

    def _count_reason(self, cc: _ChainConn, f: Finished, op: str) -> None:
        """Why the CPU serves a LOAD, STORE or ALLOC_STORE (results.json
        ``fallbacks.reasons``)."""
        reason = self._early_reasons.pop((cc.conn_id, f.credit), None)
        if op not in ("LOAD", "STORE", "ALLOC_STORE"):
            return
        if reason is None:  # decided before the chain ran, or by it
            reason = static_miss(f.request, cc.plan.offloaded, self.config.block_size,
                                 self.config.addr_le, cc.plan.software)
        if reason is None:
            reason = SLOT_NOT_READY if f.ticket is not None else CHAIN_TESTS
        by_op = self.fallback_reasons.setdefault(op, {})
        by_op[reason] = by_op.get(reason, 0) + 1

    def _pass(self, cc: _ChainConn, finished: list[Finished]) -> Gen:
        cpu, conn = self.cpu, cc.conn
        assert conn is not None
        for i, f in enumerate(finished):
            if not conn.up:  # the rest is salvaged after the failure (_recover)
                cc.orphans.extend(finished[i:])
                return
            if f.needs_cpu:
                if f.no_chain:  # taken as it arrived, as _take_early takes a request
                    self.before_chain += 1  # no chain can serve (C30: none ran)
                yield from self._serve_cpu(cc, f)
            else:
                yield from self._serve_nic(cc, f)
        while conn.inbox and conn.up:  # an RDMA Read of a store came back
            _, token, data, account = conn.inbox.popleft()
            yield from cpu.spend(account, cpu.poll_ps + cpu.costs.op_ps("READ_DONE"))
            effects = self._call(("read", token, data), int(self.env.now))
            yield from self.carry_out(effects, account)
        if self.target.waiting_allocations:  # a hand-over waits for its slot
            effects = self.target.poll_waiting(int(self.env.now))
            if effects:
                yield from self.carry_out(effects, "ALLOC_STORE")
        if self._grace and finished:  # frees waiting for chains that may have ended (C13)
            yield from cpu.spend("FREE", cpu.poll_ps)
            effects = self._quiesce(int(self.env.now))
            if effects:
                yield from self.carry_out(effects, "FREE")
        # only the connection's own CPU process releases its gates; another connection's
        # pass that freed it (a deferred FREE performed, a slot written) kicks it instead
        self._release_done(cc)
        yield from self._charge_mmio(cc)
        yield from self._refill(cc)
        yield from self._charge_mmio(cc)  # the octets the refill wrote into the slots'
        # pristine images (session, quota) in NIC device memory: charged now, not at the
        # next pass (which a run's last refill never had)

    def _charge_mmio(self, cc: _ChainConn) -> Gen:
        """Charge the CPU's MMIO writes on the connection's chains since the last charge
        (gate ENABLEs, session and quota octets in NIC device memory) at one doorbell
        write each, to ``CHAIN``; and the table entries it accessed since its last
        posting, if the table is in device memory."""
        n = cc.chains.mmio_writes - cc.mmio_charged
        if n > 0:
            cc.mmio_charged += n
            yield from self.cpu.spend(CHAIN, n * self.cpu.doorbell_ps)
        yield from self._charge_table(CHAIN)

    def _charge_table(self, account: str) -> Gen:
        """Decision C29: with the block table in NIC device memory, each entry the CPU
        read since the last charge costs an MMIO read (``mmio_read_ps``: it waits for
        the answer), each entry it wrote an MMIO write (a doorbell write's cost)."""
        meter = self._table_meter
        if meter is None:
            return
        reads, writes = meter.take()
        if reads or writes:
            yield from self.cpu.spend(account, reads * self.mmio_read_ps
                                      + writes * self.cpu.doorbell_ps)

    def carry_out(self, effects: Iterable[Effect], account: str) -> Gen:
        """The base server's posting, with each connection the effects go to marked as
        being posted on (``_ChainConn.posting``) until its WRs are in its CPU slots."""
        effects = list(effects)
        ccs = {self._chain_conns[e.connection_id] for e in effects
               if getattr(e, "connection_id", None) in self._chain_conns}
        for c in ccs:
            c.posting += 1
        try:  # C29: first the table's MMIO, before what the accesses decided leaves
            yield from self._charge_table(account)
            yield from super().carry_out(effects, account)
        finally:
            for c in ccs:
                c.posting -= 1
        if ccs:
            self._kick()

