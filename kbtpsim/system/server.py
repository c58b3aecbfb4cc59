"""A software KBTP target server: a host, its NIC and CPU, running :class:`Target`.

:class:`SoftwareTargetServer` accepts RC connections (one QP per initiator), pre-posts a
receive buffer per request credit, and for each received message runs the sans-IO
:class:`~kbtpsim.target.Target` on a CPU core (:mod:`kbtpsim.system.cpu`), then carries
out its effects with the NIC:

==================  ==========================================================
effect              work request(s) on the connection's QP
==================  ==========================================================
``SendMessage``     SEND (inline when it fits), or SEND_WITH_INVALIDATE of
                    ``invalidate_stag`` (the initiator asked for INVALIDATE)
``WriteInitiator``  RDMA_WRITE of the LOAD's data to the initiator's STag/offset
``ReadInitiator``   RDMA_READ of the store's data into a bounce buffer; its CQE
                    brings the data back to a core, which calls ``complete_read``
``WriteRecord``     RDMA_WRITE_WITH_IMM of the 24-octet record (InfiniBand)
``InvalidateStag``  invalidate the target's own STag (the Partition window)
==================  ==========================================================

Effects are posted in list order on one QP, so a LOAD's data WRITE precedes its
completion SEND: InfiniBand places them in order, and under RDMAP (``placement="rdmap"``)
the Send's delivery waits for earlier Write data (RFC 5040 rules 5 and 10).

Direct modes (``direct=True``, the default when the configuration offers them): the
target's table, ring slots, counters and pool are real bytes in the host memory
(a memory-backed :class:`Target` over :class:`~kbtpsim.target.layout.TargetLayout`), and
the server registers them with the NIC: table and pool for remote read, each DIRECT_ALLOC
ring for remote read and its Head for remote atomics, and per connection a memory window
over the initiator's partition, bound to that connection's QP, for remote write. The
HELLO_ACK the initiator receives carries those real STags (the server translates the
target's STags; see :meth:`SoftwareTargetServer.nic_stag`).

Hooks for a subclass that runs some requests inside the NIC (the offloaded chain target):
:meth:`post_receives` (pre-post receives, or receive-plus-chain), :meth:`on_receive`
(a receive CQE: default, queue it for a core), :meth:`on_request` (run the target on the
request bytes), :meth:`carry_out` (post the effects' work requests) and :meth:`run_on_cpu`
(run any callable on a core with accounting).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import simpy

from kbtpsim.nic import (
    Access,
    Cqe,
    Link,
    MemoryRegion,
    Nic,
    NicProfile,
    Opcode,
    QueuePair,
    Sge,
    Simulation,
    WcStatus,
    WorkRequest,
    WqeFlags,
    connect,
)
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.qpstate import QpState
from kbtpsim.system.cpu import CpuCosts, TargetCpu
from kbtpsim.system.direct_windows import DirectWindows
from kbtpsim.system.log_replay import ReadSource, replay
from kbtpsim.system.results import Discard
from kbtpsim.system.staging import Staging
from kbtpsim.target import (
    Effect,
    InvalidateStag,
    ReadInitiator,
    SendMessage,
    Target,
    TargetConfig,
    WriteInitiator,
    WriteRecord,
)
from kbtpsim.target.layout import TargetLayout
from kbtpsim.target.ring import FreeRing
from kbtpsim.target.session import InitiatorState
from kbtpsim.wire import HEADER_SIZE, Feature
from kbtpsim.wire import Opcode as KOp

Gen = Generator[simpy.Event, Any, Any]

#: Largest request: header, Data and Completion Descriptors, then inline data.
REQUEST_OVERHEAD = HEADER_SIZE + 16 + 16


def op_name(data: bytes) -> str:
    """The KBTP opcode name of a message's bytes (``OTHER`` if unknown)."""
    if len(data) < 2:
        return "OTHER"
    try:
        return KOp(data[1]).name
    except ValueError:
        return "OTHER"


@dataclass(slots=True)
class _Wr:
    """What a posted work request was for (by ``wr_id``)."""

    kind: str  # "recv", "send", "write", "read"
    conn: ServerConnection
    addr: int = 0  # staging/receive buffer
    length: int = 0
    token: int = 0
    account: str = ""


@dataclass(eq=False)
class ServerConnection:
    """One initiator's RC connection at the server."""

    conn_id: int
    qp: QueuePair
    name: str
    recv_size: int
    inbox: deque[tuple[Any, ...]] = field(default_factory=deque)
    wake: simpy.Event | None = None
    #: why the connection ended ("closed", or the WC status that broke it), None if up
    ended: str | None = None
    #: direct-mode windows bound to this connection's QP: "table", "pool",
    #: "partition", "ring", "head"
    windows: dict[str, MemoryRegion] = field(default_factory=dict)
    #: messages received and handed to the target, in order (for oracle checks)
    received: list[bytes] = field(default_factory=list)

    @property
    def up(self) -> bool:
        return self.ended is None


class SoftwareTargetServer(DirectWindows):
    """A KBTP target host: NIC ``name`` with profile ``profile``, ``cores`` CPU cores.

    ``sim`` is a :class:`~kbtpsim.nic.Simulation`. ``direct`` (default: whether any
    initiator is offered a direct mode) puts the target's structures in host memory and
    exposes them through the NIC. ``staging_bytes`` bounds data in flight (outgoing LOAD
    data and bounce buffers together). ``keep_log=False`` keeps neither :attr:`log` nor
    the connections' ``received`` (only the oracle's :func:`replay` needs them; they grow
    with the run).
    """

    def __init__(self, sim: Simulation, config: TargetConfig, *, name: str = "target",
                 profile: str | NicProfile = "cx5", cores: int = 1, costs: CpuCosts | None = None,
                 direct: bool | None = None, staging_bytes: int = 256 << 20,
                 base_addr: int = 0x40_0000_0000, keep_log: bool = True) -> None:
        self.sim = sim
        self.env = sim.env
        self.config = config
        self.nic: Nic = sim.add_nic(name, profile)
        self.name = name
        self.cpu = TargetCpu(self.env, self.nic.profile, cores, costs)
        if direct is None:
            direct = any(i.features & (Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC)
                         for i in config.initiators)
        self.direct = direct
        self.layout: TargetLayout | None = None
        self.target = self._make_target(direct, base_addr)
        self.cq = self.nic.create_cq(1 << 16)
        self.staging = Staging(self.nic, staging_bytes)
        self.connections: dict[int, ServerConnection] = {}
        self._conn_ids = itertools.count(1)
        self._wr_ids = itertools.count(1)
        self._wrs: dict[int, _Wr] = {}
        self._recv_arena = self.nic.host.alloc(1 << 30, 4096)
        self._recv_mr = self.nic.register_mr(self._recv_arena, 1 << 30, Access.LOCAL_WRITE)
        self._recv_next = self._recv_arena
        #: target STag -> NIC STag (direct modes)
        self._stags: dict[int, int] = {}
        #: DIRECT_ALLOC initiators: name -> (session, ring); the Head ticket last seen
        self._direct_rings: dict[str, tuple[InitiatorState, FreeRing]] = {}
        self._heads: dict[str, int] = {}
        #: target Ring/Head STag -> (parent region name, host address, length)
        self._direct: dict[int, tuple[str, int, int]] = {}
        #: registered parents of the direct-mode windows: "table", "pool",
        #: "<ring>.slots", "<ring>.head"
        self.mrs: dict[str, MemoryRegion] = {}
        if direct:
            self._register_direct()
        #: every target call in order, ``now`` last: ("connect", conn), ("handle", conn,
        #: data), ("read", token, data), ("advance",), ("disconnect", conn) -- see replay()
        self.keep_log = keep_log
        self.log: list[tuple[Any, ...]] = [] if keep_log else Discard()
        #: RDMA Read token of the target -> index of the log entry whose call issued it:
        #: replay() matches each logged Read with its request, whatever order the
        #: target's calls came in (an allocation may be logged at its Ticket's time)
        self.read_origin: dict[int, int] = {}
        self._timer_wake = self.env.event()
        self.env.process(self.cq.serve(self._dispatch))
        self.env.process(self._timer())

    # ================================================================ construction
    def _make_target(self, direct: bool, base_addr: int) -> Target:
        if not direct:
            return Target(self.config)
        order: ByteOrder = "little" if self.nic.profile.atomic_byte_order == "little" \
            else "big"
        self.layout = TargetLayout.plan(self.config, base_addr, counter_byte_order=order)
        return Target(self.config, store=self.nic.host.memory, layout=self.layout)

    # ================================================================ connections
    def accept(self, peer: QueuePair, link: Link | None = None, *,
               name: str = "") -> ServerConnection:
        """Accept an RC connection from the initiator QP ``peer`` (over ``link``, or a
        new point-to-point link built from this NIC's profile)."""
        credits = self.config.request_credits
        qp = self.nic.create_qp(self.cq, self.cq, sq_depth=max(64, 4 * credits + 16),
                                rq_depth=credits + 2)
        connect(qp, peer, link)
        conn = ServerConnection(next(self._conn_ids), qp, name or f"conn{qp.qpn}",
                                REQUEST_OVERHEAD + self.config.max_inline,
                                received=[] if self.keep_log else Discard())
        self.connections[conn.conn_id] = conn
        self.log.append(("connect", conn.conn_id, self.sim.now))
        self.target.connect(conn.conn_id, self.sim.now)
        self.post_receives(conn)
        self.env.process(self._worker(conn))
        return conn

    def close(self, conn: ServerConnection, reason: str = "closed") -> None:
        """The connection is torn down (a CM disconnect): the target keeps the session's
        bindings for its retention time (GOODBYE without RELEASE semantics)."""
        if not conn.up:
            return
        conn.ended = reason
        if conn.qp.state is not QpState.ERROR:
            conn.qp.to_error()
        self._revoke(conn)
        self.after_close(conn)

    def after_close(self, conn: ServerConnection) -> None:
        """Hook: the connection is down; tell the target on a core (a subclass whose NIC
        still runs work of the connection first takes stock of it)."""
        self.env.process(self.run_on_cpu(
            "DISCONNECT", lambda now: self._call(("disconnect", conn.conn_id), now)))

    # ================================================================ hooks
    def post_receives(self, conn: ServerConnection) -> None:
        """Pre-post one receive per request credit, plus one for HELLO/GOODBYE."""
        for _ in range(self.config.request_credits + 1):
            addr = self._recv_next
            self._recv_next += -(-conn.recv_size // 64) * 64
            self.post_recv(conn, addr)

    def on_receive(self, conn: ServerConnection, cqe: Cqe, data: bytes, buf: int) -> None:
        """A request arrived (its receive CQE is visible): queue it for a core."""
        self._enqueue(conn, ("request", data, buf))

    def on_other_cqe(self, cqe: Cqe) -> None:
        """A CQE of a work request the server did not post (a subclass's chain). By
        default an error on a connection's QP closes that connection."""
        if cqe.status is WcStatus.SUCCESS:
            return
        for conn in self.connections.values():
            if conn.qp.qpn == cqe.qpn and conn.up:
                self.close(conn, cqe.status.name)

    def on_request(self, conn: ServerConnection, data: bytes, now: int) -> list[Effect]:
        """Run the target on one received message (on a core, at ``now``)."""
        conn.received.append(data)
        effects = self._call(("handle", conn.conn_id, data), now)
        if conn.windows and op_name(data) == "GOODBYE" and \
                self.target.connections[conn.conn_id].initiator is None:
            self._revoke(conn)  # the session ended: its direct-mode STags go with it
        return effects

    def carry_out(self, effects: Iterable[Effect], account: str) -> Gen:
        """Process helper (on a held core): post each effect's work requests, charging
        ``cpu_post_ns`` per WR and ``cpu_doorbell_ns`` per QP rung to ``account``."""
        rung: dict[int, ServerConnection] = {}
        for eff in effects:
            conn = self.connections.get(eff.connection_id)
            if isinstance(eff, InvalidateStag):
                self._invalidate(eff)
                continue
            if conn is None or not conn.up:
                continue
            if isinstance(eff, SendMessage):
                eff = self._translate_send(conn, eff)
            yield from self.cpu.spend(account, self.cpu.post_ps)
            self._post_effect(conn, eff, account)
            rung[conn.conn_id] = conn
        for conn in rung.values():
            if conn.up:
                yield from self.cpu.spend(account, self.cpu.doorbell_ps)
                conn.qp.ring_doorbell()

    def run_on_cpu(self, account: str, work: Callable[[int], list[Effect]],
                   cost_ps: int | None = None) -> Gen:
        """Process: take a core, spend ``cost_ps`` (default: the account's cost), call
        ``work(now)`` and carry out the effects it returns."""
        with self.cpu.request() as core:
            yield core
            self.cpu.count(account)
            yield from self.cpu.spend(account, self.cpu.costs.op_ps(account)
                                      if cost_ps is None else cost_ps)
            effects = work(int(self.env.now))
            yield from self.carry_out(effects, account)

    # ================================================================ internals
    def _call(self, entry: tuple[Any, ...], now: int) -> list[Effect]:
        """One call into the target, logged (for replay into a reference target).

        First, tickets that initiators took with one-sided FetchAdds since the last call
        are made known to the target (:meth:`_observe_heads`)."""
        if self._heads:
            self._observe_heads(now)
        self.log.append((*entry, now))
        kind = entry[0]
        if kind == "handle":
            out = self.target.handle(entry[1], entry[2], now)
        elif kind == "read":
            out = self.target.complete_read(entry[1], entry[2], now)
        elif kind == "advance":
            out = self.target.advance(now)
        elif kind == "quiesced":  # a free's block may go back to the ring (C13)
            out = self.target.quiesced(entry[1], now)
        elif kind == "disconnect":
            out = self.target.disconnect(entry[1], now)
        elif kind == "observe":
            out = []  # the observation itself happened above
        else:  # pragma: no cover - internal misuse
            raise ValueError(kind)
        for name, (_sess, ring) in self._direct_rings.items():
            self._heads[name] = ring.head_ticket  # the target's own allocations
        self._poke_timer()
        self.note_reads(out)
        return out

    def note_reads(self, effects: Iterable[Effect]) -> None:
        """The RDMA Reads among ``effects`` were issued by the call of the last log entry
        (``read_origin``); call it right after that call."""
        if self.keep_log:
            at = len(self.log) - 1
            for e in effects:
                if isinstance(e, ReadInitiator):
                    self.read_origin[e.token] = at

    def post_recv(self, conn: ServerConnection, addr: int) -> None:
        """Post one request receive buffer at ``addr`` (``conn.recv_size`` octets)."""
        wr_id = next(self._wr_ids)
        self._wrs[wr_id] = _Wr("recv", conn, addr, conn.recv_size)
        conn.qp.post_recv([Sge(addr, conn.recv_size, self._recv_mr.lkey)], wr_id)

    def _enqueue(self, conn: ServerConnection, item: tuple[Any, ...]) -> None:
        conn.inbox.append(item)
        if conn.wake is not None and not conn.wake.triggered:
            conn.wake.succeed()

    def _dispatch(self, cqe: Cqe) -> None:
        wr = self._wrs.pop(cqe.wr_id, None)
        if wr is None:
            self.on_other_cqe(cqe)
            return
        conn = wr.conn
        if wr.kind in ("send", "write", "read"):
            self.staging.free(wr.addr)
        if cqe.status is not WcStatus.SUCCESS:
            if conn.up:
                self.close(conn, cqe.status.name)
            return
        if not conn.up:
            return
        if wr.kind == "recv":
            data = self.nic.host.memory.read(wr.addr, cqe.byte_len)
            self.on_receive(conn, cqe, data, wr.addr)
        elif wr.kind == "read":
            data = self.nic.host.memory.read(wr.addr, wr.length)
            self._enqueue(conn, ("read", wr.token, data, wr.account))

    def _worker(self, conn: ServerConnection) -> Gen:
        """The connection's messages, in order, each on a core."""
        cpu = self.cpu
        while conn.up:
            if not conn.inbox:
                conn.wake = self.env.event()
                yield conn.wake
                continue
            item = conn.inbox.popleft()
            with cpu.request() as core:
                yield core
                if not conn.up:
                    break
                if item[0] == "request":
                    _, data, buf = item
                    account = op_name(data)
                    cpu.count(account)
                    yield from cpu.spend(account, cpu.poll_ps + cpu.costs.op_ps(account))
                    yield from cpu.spend(account, cpu.post_ps)
                    self.post_recv(conn, buf)  # give the request credit back
                    effects = self.on_request(conn, data, int(self.env.now))
                else:
                    _, token, data, account = item
                    yield from cpu.spend(account, cpu.poll_ps + cpu.costs.op_ps("READ_DONE"))
                    effects = self._call(("read", token, data), int(self.env.now))
                yield from self.carry_out(effects, account)

    def _post_effect(self, conn: ServerConnection, eff: Effect, account: str) -> None:
        qp = conn.qp
        max_inline = self.nic.profile.max_inline
        wr_id = next(self._wr_ids)
        sig = WqeFlags.SIGNALED
        if isinstance(eff, SendMessage):
            op = Opcode.SEND if eff.invalidate_stag is None else Opcode.SEND_WITH_INVALIDATE
            imm = eff.invalidate_stag or 0
            if len(eff.data) <= max_inline:
                self._wrs[wr_id] = _Wr("send", conn)
                qp.post_send(WorkRequest(op, flags=sig, imm=imm, inline_data=eff.data,
                                         wr_id=wr_id))
            else:
                addr = self.staging.put(eff.data)
                self._wrs[wr_id] = _Wr("send", conn, addr)
                qp.post_send(WorkRequest(op, (Sge(addr, len(eff.data), self.staging.lkey),),
                                         sig, imm=imm, wr_id=wr_id))
        elif isinstance(eff, WriteInitiator | WriteRecord):
            op = Opcode.RDMA_WRITE if isinstance(eff, WriteInitiator) \
                else Opcode.RDMA_WRITE_WITH_IMM
            imm = eff.record.request_id & 0xFFFF_FFFF if isinstance(eff, WriteRecord) else 0
            data = eff.data
            if len(data) <= max_inline:
                self._wrs[wr_id] = _Wr("write", conn)
                qp.post_send(WorkRequest(op, flags=sig, remote_addr=eff.tagged_offset,
                                         rkey=eff.stag, imm=imm, inline_data=data,
                                         wr_id=wr_id))
            else:
                addr = self.staging.put(data)
                self._wrs[wr_id] = _Wr("write", conn, addr)
                qp.post_send(WorkRequest(op, (Sge(addr, len(data), self.staging.lkey),), sig,
                                         remote_addr=eff.tagged_offset, rkey=eff.stag,
                                         imm=imm, wr_id=wr_id))
        elif isinstance(eff, ReadInitiator):
            addr = self.staging.alloc(eff.length)
            self._wrs[wr_id] = _Wr("read", conn, addr, eff.length, eff.token, account)
            qp.post_send(WorkRequest(Opcode.RDMA_READ, (Sge(addr, eff.length,
                                                            self.staging.lkey),),
                                     sig, remote_addr=eff.tagged_offset, rkey=eff.stag,
                                     wr_id=wr_id))
        else:  # pragma: no cover - all effect types are handled above
            raise TypeError(f"unknown effect {eff!r}")

    def _poke_timer(self) -> None:
        if not self._timer_wake.triggered:
            self._timer_wake.succeed()

    def _timer(self) -> Gen:
        """Call ``Target.advance`` at ``next_deadline()`` (ticket timeouts, retention)."""
        env = self.env
        while True:
            self._timer_wake = env.event()
            deadline = self.target.next_deadline()
            if deadline is None:
                yield self._timer_wake
                continue
            if deadline > env.now:
                yield env.any_of([env.timeout(deadline - env.now), self._timer_wake])
                continue
            yield from self.run_on_cpu("TIMER", lambda now: self._call(("advance",), now))
            if self.target.next_deadline() == deadline:  # nothing expired (rounding)
                yield env.timeout(1)


__all__ = ["REQUEST_OVERHEAD", "ReadSource", "ServerConnection", "SoftwareTargetServer", "op_name",
           "replay"]
