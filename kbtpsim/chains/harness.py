"""A two-NIC harness: an initiator sends KBTP requests; the target NIC runs pre-posted chains;
a small CPU model serves fallbacks; a dict-backed software :class:`Target` is the reference.

The target's table, ring slots, Head/Tail counters and pool are bytes in the target NIC's
host memory, laid out by :class:`~kbtpsim.target.layout.TargetLayout`: the chains and the
CPU's *memory-backed* :class:`Target` work on the same octets. The target CPU (a simpy
process) polls the :class:`~kbtpsim.chains.post.ChainServer`:

* a credit the NIC served costs the CPU nothing but its share of the refill batch (the
  CPU's target sees the NIC's writes in memory: nothing is replayed);
* a credit the NIC did not serve (``needs_cpu``) is processed by the CPU's target, whose
  effects go out on a second QP to the initiator (``cpu_qp``); then the CPU releases the
  credit's gate so the next request runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import dataclass, field

import simpy

from kbtpsim.chains.layout import ChainLayout, register_readers, register_ring
from kbtpsim.chains.plan import plan_connection, stages_reads
from kbtpsim.chains.post import Finished
from kbtpsim.chains.v2 import chain_server_class, prepare_chain
from kbtpsim.nic import (
    Access,
    Opcode,
    Sge,
    Simulation,
    WcOpcode,
    WorkRequest,
    WqeFlags,
)
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.profiles import get_profile
from kbtpsim.target import (
    InitiatorConfig,
    ReadInitiator,
    SendMessage,
    Target,
    TargetConfig,
    WriteInitiator,
)
from kbtpsim.target.effects import Effect
from kbtpsim.target.layout import TargetLayout
from kbtpsim.wire import Feature, Hello, Message, TableEntry, encode

S = WqeFlags.SIGNALED
CONN = 1
IBUF = 1 << 24  #: initiator buffer size (data below 12 MiB, requests, receives)


def iid(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()[:16]


@dataclass
class RunResult:
    """What a run produced, per Request ID, and what it cost the target CPU."""

    completions: dict[int, bytes] = field(default_factory=dict)
    invalidated: dict[int, int | None] = field(default_factory=dict)
    latency_ps: dict[int, int] = field(default_factory=dict)
    served: dict[int, str | None] = field(default_factory=dict)
    cpu_requests: int = 0
    cpu_request_ps: int = 0  #: CPU busy time serving fallbacks
    refill_ps: int = 0  #: CPU busy time re-posting chains
    refills: int = 0


class Harness:
    """One initiator "A" (handles ``handle_base`` .., quota ``quota``) on one connection."""

    def __init__(self, profile: str | NicProfile = "ideal", addr_le: bool = True,
                 block_size: int = 4096,
                 blocks: int = 8, credits: int = 4, max_inline: int | None = None,
                 handle_base: int = 0x4000, handle_count: int = 16, quota: int = 8,
                 variants: tuple[str, ...] | None = None, cpu_request_ns: float = 1000.0,
                 device_memory: bool = True, refill_batch: int = 1, first_block: int = 0,
                 others: tuple[InitiatorConfig, ...] = (), chains: str = "v1") -> None:
        """``others``: more initiators (same shared ring), served by the CPU's target
        directly (see :meth:`other`), not through the NIC. ``chains``: "v1" (re-posted
        by the CPU) or "v2" (re-armed by the NIC: :mod:`kbtpsim.chains.v2`)."""
        prof = get_profile(profile) if isinstance(profile, str) else profile
        self.config = TargetConfig(
            blocks=blocks, block_size=block_size, addr_le=addr_le, first_block=first_block,
            max_inline=block_size if max_inline is None else max_inline,
            initiators=(InitiatorConfig("A", iid("A"), quota, handle_base, handle_count),
                        *others),
        )
        #: the CPU does nothing (busy elsewhere) until this time (ps): :meth:`pause_cpu`
        self.cpu_paused_until = 0
        #: credits served by the CPU whose request still waits in its target (gate held)
        self._held: list[int] = []
        self.addr_le = addr_le
        self.sim = Simulation()
        self.tnic = self.sim.add_nic("target", prof)
        self.inic = self.sim.add_nic("initiator", prof)
        counters: ByteOrder = "big" if prof.atomic_byte_order == "big" else "little"
        self.target_layout = TargetLayout.plan(self.config, 1 << 40,
                                               counter_byte_order=counters)
        self.layout = ChainLayout.of(self.target_layout, self.config)
        table_key, pool_key = self.layout.register(self.tnic)
        # chains v2's LOADs do not re-read the entry (decision C13): the target must not
        # return a freed block while a chain may still read it. Here the one chain
        # connection is the one that frees (others are served by the CPU, synchronously),
        # so a FREE's block has no chain reader left: it returns at once, as a quiescing
        # target does with nothing in flight
        # FREE on the NIC (decision C20): the LOADs count their readers
        readers = chains == "v2" and variants is not None and "free" in variants
        self.plan = plan_connection(prof, self.config, self.layout, "A", variants,
                                    seqlock=chains != "v2", readers=readers,
                                    stage_reads=stages_reads(chains, prof,
                                                             self.config.block_size))
        ring = None
        if any(v.startswith("alloc") or v == "free" for v in self.plan.offloaded):
            ring = register_ring(self.tnic, self.target_layout.rings[0])
        self.quota = quota
        server_class = chain_server_class(chains)
        chain = prepare_chain(chains, self.plan.chain, prof)
        self.server = server_class(self.tnic, chain, self.layout, credits,
                                   table_key, pool_key, device_memory, ring,
                                   readers=register_readers(self.tnic, self.layout)
                                   if readers else None)
        self.cpu_request_ps = round(cpu_request_ns * 1000)
        self.refill_batch = refill_batch
        # target CPU's own QP to the initiator, and a bounce buffer
        tcq = self.tnic.create_cq(1 << 12)
        self.cpu_qp = self.tnic.create_qp(tcq, tcq, sq_depth=256)
        self.cpu_cq = tcq
        self.bounce = self.tnic.host.alloc(2 * block_size + 4096, 4096)
        self.bounce_mr = self.tnic.register_mr(self.bounce, 2 * block_size + 4096,
                                               Access.LOCAL_WRITE)
        # initiator: two QPs (chain connection, CPU connection), buffers, receives
        icq = self.inic.create_cq(1 << 12)
        self.icq = icq
        self.qp_i = self.inic.create_qp(icq, icq, sq_depth=256, rq_depth=256)
        self.qp_c = self.inic.create_qp(icq, icq, sq_depth=16, rq_depth=256)
        self.sim.connect(self.qp_i, self.server.conn)
        self.sim.connect(self.qp_c, self.cpu_qp)
        self.ibuf = self.inic.host.alloc(IBUF, 4096)
        self.imr = self.inic.register_mr(
            self.ibuf, IBUF, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
            | Access.MW_BIND)
        #: STags of the windows :meth:`window` bound (to the chain connection's QP)
        self.windows: set[int] = set()
        self.recv_area = self.ibuf + IBUF - (1 << 16)
        self._recv_next = 0
        for qp in (self.qp_i, self.qp_c):
            for _ in range(64):
                self._post_irecv(qp)
        # the CPU's target and the reference target
        self.cpu_target = Target(self.config, self.tnic.host.memory, self.target_layout)
        self.cpu_target.connect(CONN, 0)
        self.reference = Target(self.config)
        self.reference.connect(CONN, 0)
        self.ref_ibuf: dict[int, bytes] = {}  #: initiator writes the reference made
        self.result = RunResult()
        self._sent: dict[int, int] = {}
        self._done: simpy.Event | None = None
        self.sim.env.process(self._cpu())

    # ------------------------------------------------------------------ initiator
    @property
    def stag(self) -> int:
        return self.imr.rkey

    def buf(self, offset: int) -> int:
        """Tagged Offset of octet ``offset`` of the initiator's data buffer."""
        return self.ibuf + offset

    def window(self, offset: int, length: int) -> int:
        """A memory window over ``length`` octets at ``offset`` of the data buffer, bound
        to the chain connection's QP (as the system Initiator exposes each request's
        buffer; Tagged Offsets as :meth:`buf`): a Send with Invalidate of its STag on that
        connection revokes it and the initiator's CQE reports it (draft, "Completion")."""
        w = self.inic.bind_mw(self.imr, self.qp_i, self.ibuf + offset, length,
                              Access.REMOTE_READ | Access.REMOTE_WRITE)
        self.windows.add(w.stag)
        return w.stag

    def _cpu_key(self, stag: int) -> int:
        """The key the CPU's side QP (``cpu_qp`` -> ``qp_c``, not the connection a window
        is bound to) uses for ``stag``: a *valid* window's parent region (same Tagged
        Offsets), so the access succeeds exactly when it would on the connection."""
        if stag in self.windows and self.inic.pt.get(stag) is not None:
            return self.imr.rkey
        return stag

    def write_ibuf(self, offset: int, data: bytes) -> None:
        self.inic.host.memory.write(self.ibuf + offset, data)
        self.ref_ibuf[offset] = data

    def read_ibuf(self, offset: int, length: int) -> bytes:
        return self.inic.host.memory.read(self.ibuf + offset, length)

    def _post_irecv(self, qp: object) -> None:
        addr = self.recv_area + 64 * (self._recv_next % 512)
        self._recv_next += 1
        qp.post_recv([Sge(addr, 64, self.imr.lkey)], wr_id=addr)  # type: ignore[attr-defined]

    def send(self, msg: Message | bytes, ref_hold: bool = False) -> simpy.Event:
        """Send ``msg`` now (a message, or raw octets: e.g. a malformed request); the event
        fires with the completion octets. ``ref_hold``: the reference processes it with
        ``hold_after_ticket`` (an ALLOC_STORE stalled after its FetchAdd, until
        ``reference.read_slot``)."""
        data = msg if isinstance(msg, bytes) else encode(msg, self.addr_le)
        env = self.sim.env
        # two send buffers, alternating: two requests may be in flight (pipelined)
        self._send_n = getattr(self, "_send_n", 0) + 1
        at = self.ibuf + IBUF - (1 << 22) + (self._send_n % 2) * (1 << 21)
        self.inic.host.memory.write(at, data)
        self.qp_i.post_send(WorkRequest(Opcode.SEND, (Sge(at, len(data), self.imr.lkey),), S))
        self.qp_i.ring_doorbell()
        rid = int.from_bytes(data[4:12], "big") if isinstance(msg, bytes) else msg.request_id
        self._sent[rid] = int(env.now)
        self._done = env.event()
        self._ref(data, ref_hold)
        return self._done

    def _ref(self, data: bytes, hold: bool = False) -> None:
        effects = self.reference.handle(CONN, data, 0, hold_after_ticket=hold)
        self._apply_ref(effects)

    def unbound_at(self, handle: int, generation: int) -> int:
        """Make ``handle``'s entry unbound at ``generation`` (its Flags 0), in the table in
        memory and in the reference (a test near the Generation's wrap); the entry's
        address."""
        entry = self.layout.entry_addr(handle)
        self.tnic.host.memory.write(entry, bytes(2) + generation.to_bytes(2, "big")
                                    + bytes(12))
        self.reference.table._put(handle, TableEntry(generation=generation))
        return entry

    def pause_cpu(self, until_ps: int) -> None:
        """Keep the target CPU away (busy elsewhere) until ``until_ps``: chains keep
        running, finished credits wait to be seen."""
        self.cpu_paused_until = until_ps

    def other(self, conn_id: int, msg: Message) -> tuple[list[bytes], list[bytes]]:
        """Process ``msg`` of another initiator's connection ``conn_id`` on the CPU's
        target (in memory, now) and on the reference; returns the octets each sent."""
        now = int(self.sim.env.now)
        for t in (self.cpu_target, self.reference):
            if conn_id not in t.connections:
                t.connect(conn_id, now)
        mine = self.cpu_target.handle(conn_id, encode(msg, self.addr_le), now)
        ref = self.reference.handle(conn_id, encode(msg, self.addr_le), 0)
        return ([e.data for e in mine if isinstance(e, SendMessage)],
                [e.data for e in ref if isinstance(e, SendMessage)])

    def _apply_ref(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, WriteInitiator):
                self.ref_ibuf[e.tagged_offset - self.ibuf] = e.data
            elif isinstance(e, ReadInitiator):
                data = self.inic.host.memory.read(e.tagged_offset, e.length)
                self._apply_ref(self.reference.complete_read(e.token, data, 0))
            elif isinstance(e, SendMessage):
                rid = e.message.request_id
                self.expected[rid] = (e.data, e.invalidate_stag)

    expected: dict[int, tuple[bytes, int | None]]

    def _initiator_poll(self) -> None:
        for c in self.icq.poll(64):
            if c.opcode is not WcOpcode.RECV:
                continue
            raw = self.inic.host.memory.read(c.wr_id, c.byte_len)
            qp = self.qp_i if c.qpn == self.qp_i.qpn else self.qp_c
            self._post_irecv(qp)
            rid = int.from_bytes(raw[4:12], "big")
            self.result.completions[rid] = raw
            if c.invalidated_stag is not None:
                self.result.invalidated[rid] = c.invalidated_stag
            self.result.latency_ps[rid] = c.time - self._sent.get(rid, c.time)
            if self._done is not None and not self._done.triggered:
                self._done.succeed(raw)

    def run(self, messages: list[Message | bytes], hello: bool = True) -> RunResult:
        """Send ``messages`` one after another (each after the previous completion)."""
        self.expected = getattr(self, "expected", {})
        env = self.sim.env

        def driver() -> Generator[simpy.Event, object, None]:
            msgs: list[Message | bytes] = list(messages)
            if hello:
                msgs.insert(0, Hello(requested_features=Feature.ADDR_LE,
                                     completion_credits=8, initiator_id=iid("A")))
            for m in msgs:
                done = self.send(m)
                while not done.triggered:
                    yield env.timeout(100_000)
                    self._initiator_poll()

        proc = env.process(driver())
        env.run(until=proc)
        # let the CPU see the last credits finish (it learns of fast paths from CQEs)
        for _ in range(1000):
            if len(self.result.served) >= len(self._sent):
                break
            env.run(until=env.now + 1_000_000)
        return self.result

    # ------------------------------------------------------------------ target CPU
    def _cpu(self) -> Generator[simpy.Event, object, None]:
        env = self.sim.env
        server = self.server
        prof = self.tnic.profile
        while True:
            if env.now < self.cpu_paused_until:
                yield env.timeout(self.cpu_paused_until - env.now)
            if self.cpu_target.waiting_allocations:  # a hand-over waits for its slot
                effects = self.cpu_target.poll_waiting(int(env.now))
                if effects:
                    yield from self._execute(effects)
            self._release_done()
            finished = server.poll(int(env.now))
            for f in finished:
                yield from self._serve(f)
            if finished:
                server.alloc_budget = self._allowed() - len(server.armed_credits())
                n = server.refill(self.refill_batch)
                if n:
                    cost = round((n * server.repost_wrs_per_credit * prof.cpu_post_ns
                                  + prof.cpu_doorbell_ns) * 1000)
                    self.result.refill_ps += cost
                    self.result.refills += n
                    yield env.timeout(cost)
            yield env.timeout(round(prof.cpu_poll_ns * 1000))

    def _serve(self, f: Finished) -> Generator[simpy.Event, object, None]:
        env = self.sim.env
        rid = int.from_bytes(f.request[4:12], "big") if len(f.request) >= 12 else 0
        if not f.needs_cpu:
            self.result.served[rid] = f.served
            if f.unbound is not None:  # a FREE (C20): unbound, slot written, completed
                assert f.ticket is not None
                effects = self.cpu_target.note_chain_free(CONN, f.request, f.ticket,
                                                          int(env.now))
                yield from self._execute(effects)
            elif f.ticket is not None:  # the chain bound a handle: the CPU's bookkeeping
                effects = self.cpu_target.note_chain_alloc(CONN, f.request, f.ticket,
                                                           int(env.now))
                yield from self._execute(effects)  # e.g. a FREE deferred on that slot
            return
        self.result.cpu_requests += 1
        # busy time: processing plus posting; waiting for the NIC is not counted
        self.result.cpu_request_ps += self.cpu_request_ps
        yield env.timeout(self.cpu_request_ps)
        if f.unbound is not None:  # a FREE the chain unbound, then handed over (C20);
            now = int(env.now)  # one connection: no LOAD chain of another can read it
            effects = self.cpu_target.finish_free(CONN, f.request, f.ticket, now)
            for block in self.cpu_target.quiescing:
                effects += self.cpu_target.quiesced(block, now)
        elif f.ticket is not None:  # the chain took a ticket, its slot was not ready
            effects = self.cpu_target.finish_allocation(CONN, f.request, f.ticket,
                                                        int(env.now))
        else:
            effects = self.cpu_target.handle(CONN, f.request, int(env.now))
        yield from self._execute(effects)
        self._held.append(f.credit)
        self._release_done()
        self.result.served[rid] = None

    def _release_done(self) -> None:
        """Release the gates of served credits whose request is no longer waiting in the
        CPU's target (an allocation waiting for its slot, a deferred FREE): later requests
        of the connection stay behind it, as the software target queues them."""
        conn = self.cpu_target.connections.get(CONN)
        if self._held and (conn is None or not conn.busy):
            for credit in self._held:
                self._sync_credits(credit)
                self.server.release(credit)
            self._held.clear()

    def _allowed(self) -> int:
        """ALLOC_STORE allowances the CPU may hand out: quota - usage, 0 without session."""
        conn = self.cpu_target.connections.get(CONN)
        sess = conn.initiator if conn is not None else None
        if sess is None:
            return 0
        return max(0, sess.config.quota - sess.usage)

    def _sync_credits(self, after: int) -> None:
        """After the CPU served credit ``after`` (later credits wait for its gate): set the
        later credits' session octets, and arm or disarm their ALLOC_STORE allowance so at
        most quota - usage of them are armed (an allocation in software may have used one,
        a FREE returned one)."""
        conn = self.cpu_target.connections.get(CONN)
        self.server.sync_credits(after, conn is not None and conn.initiator is not None,
                                 self._allowed())

    def _execute(self, effects: list[Effect]) -> Generator[simpy.Event, object, None]:
        env = self.sim.env
        mem = self.tnic.host.memory
        prof = self.tnic.profile
        for e in effects:
            if isinstance(e, WriteInitiator):
                mem.write(self.bounce, e.data)
                self.cpu_qp.post_send(WorkRequest(
                    Opcode.RDMA_WRITE, (Sge(self.bounce, len(e.data), self.bounce_mr.lkey),),
                    remote_addr=e.tagged_offset, rkey=self._cpu_key(e.stag)))
            elif isinstance(e, SendMessage):
                at = self.bounce + 2 * self.config.block_size
                mem.write(at, e.data)
                op = Opcode.SEND if e.invalidate_stag is None else Opcode.SEND_WITH_INVALIDATE
                if e.invalidate_stag is not None:  # what the target sent: it goes to qp_c,
                    # not the QP a window is bound to, so its CQE cannot report it (the
                    # window is revoked below, once the Send has been delivered)
                    self.result.invalidated[e.message.request_id] = e.invalidate_stag
                self.cpu_qp.post_send(WorkRequest(
                    op, (Sge(at, len(e.data), self.bounce_mr.lkey),), S,
                    imm=e.invalidate_stag or 0))
            elif isinstance(e, ReadInitiator):
                self.cpu_qp.post_send(WorkRequest(
                    Opcode.RDMA_READ, (Sge(self.bounce, e.length, self.bounce_mr.lkey),), S,
                    remote_addr=e.tagged_offset, rkey=self._cpu_key(e.stag)))
                self.cpu_qp.ring_doorbell()
                cost = round((prof.cpu_post_ns + prof.cpu_doorbell_ns) * 1000)
                self.result.cpu_request_ps += cost
                yield env.timeout(cost)
                yield from self.cpu_cq.wait(1)
                data = mem.read(self.bounce, e.length)
                more = self.cpu_target.complete_read(e.token, data, int(env.now))
                yield from self._execute(more)
                continue
            self.cpu_qp.ring_doorbell()
            cost = round((prof.cpu_post_ns + prof.cpu_doorbell_ns) * 1000)
            self.result.cpu_request_ps += cost
            yield env.timeout(cost)
            if isinstance(e, SendMessage):  # the bounce buffer is free again
                yield from self.cpu_cq.wait(1)
                if e.invalidate_stag in self.windows:  # delivered: as on the connection
                    self.inic.invalidate(e.invalidate_stag)

    # ------------------------------------------------------------------ comparison
    def mismatches(self) -> list[str]:
        """Every difference from the reference: completions, initiator buffer, table, pool."""
        out: list[str] = []
        for rid, (data, inval) in sorted(self.expected.items()):
            got = self.result.completions.get(rid)
            if got != data:
                out.append(f"request {rid}: completion {got.hex() if got else None} != "
                           f"{data.hex()}")
            if self.result.invalidated.get(rid) != inval:
                out.append(f"request {rid}: invalidate {self.result.invalidated.get(rid)} "
                           f"!= {inval}")
        # windows: revoked exactly when the reference sent a Send with Invalidate of them
        revoked = {inval for _, inval in self.expected.values()}
        for stag in sorted(self.windows):
            if (self.inic.pt.get(stag) is None) != (stag in revoked):
                out.append(f"window {stag:#x}: "
                           + ("revoked" if stag not in revoked else "still valid")
                           + " at the initiator, the reference "
                           + ("did not invalidate it" if stag not in revoked
                              else "invalidated it"))
        for off, data in sorted(self.ref_ibuf.items()):
            if self.read_ibuf(off, len(data)) != data:
                out.append(f"initiator buffer at {off:#x} differs")
        lay, mem = self.layout, self.tnic.host.memory
        for h in range(lay.table_base, lay.table_base + lay.table_count):
            want = self.reference.table.get(h).encode(self.addr_le)
            if mem.read(lay.entry_addr(h), 16) != want:
                out.append(f"entry {h:#x}: {mem.read(lay.entry_addr(h), 16).hex()} != "
                           f"{want.hex()}")
        bs = self.config.block_size
        for bo in self.reference.pool.offsets:
            if mem.read(lay.block_addr(bo), bs) != self.reference.pool.read(bo, bs):
                out.append(f"block {bo:#x} differs")
        order = self.target_layout.counter_byte_order
        for ring, where in zip(self.reference.rings, self.target_layout.rings, strict=True):
            for s in range(ring.n_slots):
                want = ring.slot(16 * s).encode(self.addr_le)
                if mem.read(where.slot_addr(16 * s), 16) != want:
                    out.append(f"ring {ring.name} slot {s} differs")
            for name, want_word in (("head", ring.head), ("tail", ring.tail)):
                word = mem.read_u64(getattr(where, f"{name}_addr"), order)
                if word != want_word:
                    out.append(f"ring {ring.name} {name} {word:#x} != {want_word:#x}")
        for name, sess in self.reference.initiators.items():
            mine = self.cpu_target.initiators[name]
            for what in ("bound", "tickets", "freeing", "usage"):
                if getattr(mine, what) != getattr(sess, what):
                    out.append(f"initiator {name}: {what} {getattr(mine, what)} != "
                               f"{getattr(sess, what)}")
        for ring, ref in zip(self.cpu_target.rings, self.reference.rings, strict=True):
            if ring.deferred_blocks() != ref.deferred_blocks():
                out.append(f"ring {ring.name}: deferred frees differ")
        try:
            self.cpu_target.check_invariant()
        except Exception as exc:  # the CPU's target must stay consistent with memory
            out.append(f"invariant: {exc}")
        return out
