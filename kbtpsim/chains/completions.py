"""What the CPU learns from a connection's completions (mixed into
:class:`~kbtpsim.chains.post.ChainServer`): :meth:`CreditCompletions.poll` reads the
chain and receive CQs and returns the credits whose chain ended, each as a
:class:`Finished` (served by the NIC, or ``needs_cpu``, with the request octets, the
ticket a chain took and when its part took effect in the NIC); the CPU may take a
request before its chain ends (:meth:`CreditCompletions.arrived`,
:meth:`CreditCompletions.take_early`). The CQs a sleeping CPU wakes on are here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from kbtpsim.chains.compiler import REQ_LEN, VARIANTS
from kbtpsim.chains.ir import Role, WrTemplate
from kbtpsim.chains.wr_build import COMMIT_TAG, CPU_WR, ROLE_BITS, _Credit
from kbtpsim.nic import CompletionQueue, Cqe, Nic, WcOpcode, WcStatus
from kbtpsim.nic.memory import ByteOrder


@dataclass
class Finished:
    """A credit whose chain has run to its end."""

    credit: int  #: absolute credit number (0, 1, 2, ... per connection)
    served: str | None  #: the variant the NIC served, or None: the CPU must serve it
    request: bytes  #: the request's octets as received
    time: int  #: when the CPU saw it (ps)
    #: ALLOC_STORE: the Ticket the chain took (its FetchAdd on Head ran), else None. With
    #: ``served`` the chain bound the handle (tell the target: ``Target.note_chain_alloc``);
    #: with ``needs_cpu`` the slot was not ready and the CPU must finish the allocation of
    #: *this* ticket (``Target.finish_allocation``)
    ticket: int | None = None
    #: when the NIC's part took effect (ps, from its CQEs): the FetchAdd that took the
    #: Ticket for ALLOC_STORE, the instant the table-entry Read sampled the entry for a
    #: served LOAD, the table-entry Write for a served STORE, else the chain's last
    #: completion; None if no chain WR completed. The order in which a reference target
    #: must apply NIC-served requests (their linearisation points).
    nic_time: int | None = None
    #: a Read-source request's data Read from the initiator completed (successfully,
    #: before any failure of the connection) at this time: the data is in the block
    data_read: int | None = None
    #: FREE (decision C20): when the chain's unbind ran (the entry is unbound in memory,
    #: whether the NIC served the FREE or handed it over), else None; ``ticket`` is then
    #: a Tail ticket, taken at ``ticket_time``
    unbound: int | None = None
    ticket_time: int | None = None
    #: ALLOC_STORE: when its Generation add landed in the table (the entry VALID: what
    #: other connections' LOADs observe), else None
    bound: int | None = None
    #: when the table-entry Read that the LOADs' tests use sampled the entry (its
    #: ``Cqe.sampled``), if its CQE came: a LOAD's linearisation point
    entry_read: int | None = None
    #: no variant took the request (chains v2 with per-operation dispatch): nothing of
    #: its chain ran, so the CPU learnt of it at its receive (decision C30)
    no_chain: bool = False

    @property
    def needs_cpu(self) -> bool:
        return self.served is None


class CreditCompletions:
    """Polling a connection's CQs for finished credits (module docstring)."""

    nic: Nic
    templates: list[WrTemplate]
    credits: int
    signaled: int
    chain_cq: CompletionQueue
    recv_cq: CompletionQueue
    gate_cq: CompletionQueue
    live: dict[int, _Credit]
    finished: int
    free_slots: list[int]
    errors: list[str]
    failed_at: int | None
    slot_not_ready: int
    _cpu_cqes: list[Cqe]
    _early: set[int]
    ticket_fas: set[int]
    binds: set[int]
    unbinds: set[int]
    entry_reads: set[int]
    entry_writes: set[int]
    data_reads: set[int]
    completion_sends: dict[int, str]
    per_credit: dict[Role, list[WrTemplate]]

    if TYPE_CHECKING:
        def drained(self) -> bool: ...
        def _loc(self, cr: _Credit, loc: str) -> tuple[int, int]: ...
        def unfinished(self, now: int) -> list[Finished]: ...

    def _poll_chain(self) -> list[Cqe]:
        """The chains' CQEs visible now (the CPU's poll of the chain CQ)."""
        return self.chain_cq.poll(1 << 12)

    def polled_cqs(self) -> tuple[CompletionQueue, ...]:
        """The CQs :meth:`poll` takes the chains' CQEs from (the CPU's own WRs' too)."""
        return (self.chain_cq,)

    def _watch_cqs(self) -> None:
        """Watch every CQE the CPU polls as it is generated: the CPU sleeps until one
        it acts on (:meth:`_acts_on`), not until any."""
        #: the sleeping CPU's wake-up event (:meth:`arm_wake`), None while it is awake
        self._wake_ev: simpy.Event | None = None
        #: landing times of the CQEs the CPU acts on, generated since its last poll
        self._due: list[int] = []
        self._polled_at = -1  #: when the CPU last polled (:meth:`poll`)
        for cq in self.polled_cqs():
            cq.hooks.append(self._chain_cqe)
        self.recv_cq.hooks.append(self._act)  # a request arrived: the CPU judges it

    def _chain_cqe(self, cqe: Cqe) -> None:
        if self._acts_on(cqe):
            self._act(cqe)

    def _act(self, cqe: Cqe) -> None:
        """A CQE the CPU acts on was generated: wake it (it polls on its grid until the
        CQE has landed: :meth:`wake_delay`)."""
        self._due.append(cqe.time)
        ev = self._wake_ev
        if ev is not None:
            self._wake_ev = None
            if not ev.triggered:
                ev.succeed()

    def _acts_on(self, cqe: Cqe) -> bool:
        """Whether a poll that finds ``cqe`` can do anything the polls before it did not:
        an error, one of the CPU's own WRs, or the CQE that completes its credit's count
        (the chain ended, or ran out after the CPU took its request). Every other CQE
        is counted (``_Credit.pushed``) and polled with the next one that matters."""
        if cqe.wr_id & CPU_WR:
            return True
        cr = self._live_credit(cqe.wr_id >> ROLE_BITS)
        if cr is None:
            return True
        cr.pushed += 1  # as poll() counts it in ``seen``
        if cqe.status is not WcStatus.SUCCESS:
            return True
        if cr.recv_len is None or self.failed_at is not None:
            return True  # its counts are not known yet (the variant it was dispatched to)
        if cr.number in self._early:  # finished (or taken early), its chain runs on
            return cr.pushed >= self._full_count(cr)
        return cr.pushed >= min(self._finish_count(cr), self._full_count(cr))

    def arm_wake(self, ev: simpy.Event) -> None:
        """Succeed ``ev`` at the next CQE the CPU acts on (:meth:`_acts_on`), or the next
        receive."""
        self._wake_ev = ev

    def wake_delay(self, now: int, step: int) -> int | None:
        """Until the sleeping CPU's next poll, if a CQE it acts on has been generated and
        not polled: it polls every ``step`` from ``now``, so at the first such instant at
        or after the CQE lands (None: nothing to wait for but the next such CQE)."""
        due = [t for t in self._due if t > self._polled_at]
        self._due = due
        if not due:
            return None
        land = min(due)
        if land <= now:
            return step
        return -(-(land - now) // step) * step

    def request_bytes(self, cr: _Credit) -> bytes:
        """The request as received: the receive's placements read back in message order
        (decision C21: the handle's address octets from the LOAD's entry Read)."""
        mem = self.nic.host.memory
        n = cr.recv_len if cr.recv_len is not None else REQ_LEN
        out = bytearray()
        for p in self.per_credit[Role.RECV][0].places:
            length = p.length if len(out) + p.length <= REQ_LEN else max(0, n - len(out))
            if length:
                addr, _ = self._loc(cr, p.dest + (f"+{p.offset}" if p.offset else ""))
                out += mem.read(addr, length)
        return bytes(out[:n])

    def _finish_count(self, cr: _Credit) -> int:
        """CQEs of credit ``cr`` after which the CPU learns that its chain ended."""
        return self.signaled

    def _full_count(self, cr: _Credit) -> int:
        """CQEs of credit ``cr`` once nothing of its chain runs any more."""
        return self.signaled

    def _note_cqe(self, cr: _Credit, template: int) -> None:
        """A CQE of template ``template`` of credit ``cr`` was polled (chains v2 note
        which connection WRs they were: :meth:`_after_finish`)."""

    def _after_finish(self, cr: _Credit) -> int:
        """CQEs of ``cr`` seen that are not among the :meth:`_finish_count` ones (WRs
        that run after its gate): they may arrive before some that are."""
        return 0

    def _live_credit(self, number: int) -> _Credit | None:
        """The live credit a CQE's ``wr_id`` names (the credit number it was posted with)."""
        return self.live.get(number)

    def poll(self, now: int) -> list[Finished]:
        """Credits whose chain ended since the last call, in order."""
        self._polled_at = now
        self.gate_cq.poll(1 << 12)  # gate NOP CQEs only feed WAITs: drain them
        for c in self.recv_cq.poll(1 << 12):
            cr = self._live_credit(c.wr_id)
            if cr is not None:
                cr.recv_len = c.byte_len
        for c in self._poll_chain():
            if c.status is not WcStatus.SUCCESS:
                self.errors.append(c.status.name)
                if self.failed_at is None or c.time < self.failed_at:
                    self.failed_at = c.time
            if c.wr_id & CPU_WR:  # one of the CPU's own work requests (cpu_post)
                self._cpu_cqes.append(c)
                continue
            cr = self._live_credit(c.wr_id >> ROLE_BITS)
            if cr is None:  # flushed after the failure, its credit already reported
                assert self.failed_at is not None, c.wr_id
                continue
            cr.seen += 1
            self._note_cqe(cr, c.wr_id & 0x3FFF)
            cr.last_time = c.time if cr.last_time is None else max(cr.last_time, c.time)
            if c.wr_id & COMMIT_TAG == COMMIT_TAG and c.opcode is WcOpcode.RDMA_WRITE:
                w = self.templates[c.wr_id & 0x3FFF]
                cr.served = w.name.removeprefix("commit_")
                cr.commit_time = c.time
            elif c.wr_id & 0x3FFF in self.ticket_fas and c.status is not WcStatus.SUCCESS:
                # an error CQE's opcode is not defined (ibv_poll_cq(3): only wr_id,
                # status, qp_num and vendor_err are), and a flushed FetchAdd took a
                # Ticket only if its result landed (:meth:`_finish`); counted as taken,
                # the untouched sentinel read as Ticket 0xFFFFFFFF (docs/oracle.md)
                cr.ticket_error_time = c.time
            elif (c.wr_id & 0x3FFF in self.ticket_fas
                  and c.opcode is WcOpcode.MASKED_FETCH_ADD):  # not skipped by its test
                cr.ticket_taken = True
                cr.ticket_time = c.time
            elif (c.wr_id & 0x3FFF in self.completion_sends and c.opcode is WcOpcode.SEND
                  and c.status is WcStatus.SUCCESS):
                cr.sent = (self.completion_sends[c.wr_id & 0x3FFF], c.time)
            elif (c.wr_id & 0x3FFF in self.binds and c.opcode is WcOpcode.MASKED_FETCH_ADD
                  and c.status is WcStatus.SUCCESS):
                cr.bound_time = c.time if c.sampled is None else c.sampled
            elif (c.wr_id & 0x3FFF in self.unbinds and c.opcode is WcOpcode.MASKED_FETCH_ADD
                  and c.status is WcStatus.SUCCESS):  # it ran (not skipped by its test):
                cr.unbound_time = c.time if c.sampled is None else c.sampled  # entry written
            elif (c.wr_id & 0x3FFF in self.entry_reads and c.opcode is WcOpcode.RDMA_READ
                  and c.status is WcStatus.SUCCESS):  # a flushed Read read nothing
                cr.entry_read_time = c.time if c.sampled is None else c.sampled
            elif c.wr_id & 0x3FFF in self.entry_writes and c.status is WcStatus.SUCCESS:
                cr.entry_write_time = c.time
            elif (c.wr_id & 0x3FFF in self.data_reads and c.opcode is WcOpcode.RDMA_READ
                  and c.status is WcStatus.SUCCESS):
                cr.data_read_time = c.time
        out = []
        while self.finished in self.live:
            cr = self.live[self.finished]
            if cr.recv_len is None or \
                    cr.seen - self._after_finish(cr) < self._finish_count(cr):
                break
            out.append(self._finish(cr, now))
            if cr.seen < self._full_count(cr):  # WRs run after its gate (dispatch): the
                self._early.add(cr.number)  # slot is re-posted once they ran
            else:
                del self.live[self.finished]
                self.free_slots.append(cr.number % self.credits)
            self.finished += 1
        for n in sorted(self._early):
            if self.live[n].seen >= self._full_count(self.live[n]):
                self._early.discard(n)  # its chain has run out: the slot can be re-posted
                del self.live[n]
                self.free_slots.append(n % self.credits)
        if self.failed_at is not None and self.drained():
            out.extend(self.unfinished(now))
        return out

    def _finish(self, cr: _Credit, now: int) -> Finished:
        """The credit's chain ended: what the CPU learns of it."""
        ticket = None
        served = cr.served
        if self.failed_at is not None and (cr.commit_time is None
                                           or cr.commit_time >= self.failed_at):
            # committed after the failure: once the connection QP flushed, its CQEs
            # satisfy the steps' WAIT counts early and the chain's order is lost. Unless
            # its COMPLETION went out: all it did before that ran in order. A Send that
            # completed with success was acknowledged, so it ran before the connection
            # QP failed (after, it is flushed), whenever its CQE came: a CQE can be
            # generated after the first error CQE of another CQ (the ``cqe`` fault)
            served = None
            if cr.sent is not None:
                served = cr.sent[0]
        taken = cr.ticket_taken or (self.failed_at is not None and "fa" in cr.bufs and
                                    self.nic.host.memory.read(cr.bufs["fa"], 8)
                                    != b"\xff" * 8)
        if taken:  # the FetchAdd's result: Ticket in the high half
            order: ByteOrder = "big" if self.nic.profile.atomic_byte_order == "big" \
                else "little"
            ticket = self.nic.host.memory.read_u64(cr.bufs["fa"], order) >> 32
            if served is None and self.failed_at is None:
                self.slot_not_ready += 1
        read = cr.data_read_time
        if read is not None and self.failed_at is not None and read >= self.failed_at:
            read = None
        unbound = cr.unbound_time
        if unbound is None and self.failed_at is not None and "fr_old" in cr.bufs and \
                self.nic.host.memory.read(cr.bufs["fr_old"], 8) != b"\xff" * 8:
            unbound = self.failed_at  # it ran; its CQE was lost with the connection
        # it ran: its CQE, else its error CQE (the FetchAdd had reached Head when the
        # connection failed), else none (lost with the connection: the failure's time)
        cqe_time = (cr.ticket_time if cr.ticket_taken else cr.ticket_error_time) \
            if taken else None
        ticket_time = self.failed_at if taken and cqe_time is None else cqe_time
        return Finished(cr.number, served, self.request_bytes(cr), now, ticket,
                        self._effect_time(cr, cqe_time), read, unbound,
                        ticket_time, cr.bound_time, cr.entry_read_time)

    def arrived(self) -> int | None:
        """The next credit to finish, if its request has arrived (receive CQE polled)
        and its chain has not ended yet (its octets: :meth:`request_bytes`)."""
        cr = self.live.get(self.finished)
        if cr is None or cr.recv_len is None or cr.early:
            return None
        return cr.number

    def take_early(self, credit: int, now: int) -> Finished:
        """The CPU takes ``credit``'s request before its chain ends (no variant can serve
        it: :func:`kbtpsim.chains.dispatch.static_miss`). It is reported now, as a
        credit the CPU must serve; its chain runs on (every test fails, nothing outside
        its scratch memory is written) and its slot is re-posted once it has ended."""
        cr = self.live[credit]
        assert credit == self.finished and not cr.early, credit
        cr.early = True
        self._early.add(credit)
        self.finished += 1
        return Finished(cr.number, None, self.request_bytes(cr), now)

    def _effect_time(self, cr: _Credit, ticket_time: int | None = None) -> int | None:
        """When the credit's request took effect in the NIC (``Finished.nic_time``): an
        allocation at its FetchAdd's CQE (``ticket_time``: None if none came or it took
        no Ticket), a LOAD when its table-entry Read sampled the entry (a FREE after that
        instant does not change what it delivers), a STORE at its table-entry Write,
        otherwise the chain's last completion."""
        if cr.unbound_time is not None:  # a FREE: at its unbind (C20)
            return cr.unbound_time
        if ticket_time is not None:
            return ticket_time
        op = VARIANTS[cr.served].op if cr.served in VARIANTS else None
        if op == "LOAD" and cr.entry_read_time is not None:
            return cr.entry_read_time
        if op == "STORE" and cr.entry_write_time is not None:
            return cr.entry_write_time
        return cr.last_time

