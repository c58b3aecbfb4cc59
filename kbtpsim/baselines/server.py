"""Baseline target servers: the same host, NIC model, CPU model and links as the KBTP
servers, speaking the three current practices the draft compares KBTP with.

* :class:`OneSidedStaticServer`: at start, the pool is carved into one region per
  initiator with a quota (``quota x block_size`` octets, its worst case) and each region
  is registered for remote read and write. Initiators write and read it directly; the
  target CPU does nothing per operation.
* :class:`OneSidedDynamicServer`: an RPC (a Send) asks the target CPU to allocate a region
  of the request's size (rounded up to ``granularity``) from the pool; the reply carries
  its address and the pool's STag (the pool is registered once, ``register_cost`` models
  a per-allocation registration); the initiator then RDMA-writes it. Loads are RDMA Reads
  at the address the storing initiator published; FREE is an RPC.
* :class:`TwoSidedServer`: the initiator Sends the data; the target CPU allocates, copies
  it out of the receive buffer into the pool (at ``copy_rate``) and replies. LOAD is an
  RPC whose reply Send carries the data (sent from the pool, no copy); FREE is an RPC.

Every request is processed like the KBTP software server's (``kbtpsim.system.server``):
on a core of a :class:`~kbtpsim.system.cpu.TargetCpu`, in order per connection, charged
``cpu_poll_ns`` + the operation's cost (``CpuCosts``: ALLOC_STORE for an allocation,
STORE for an overwrite, LOAD, FREE) + extra work (copy, registration) + ``cpu_post_ns``
per WR (the receive re-post included) + ``cpu_doorbell_ns``, to the account of the
workload operation it serves, so ``targets.<name>.cpu.per_op`` reads the same.

Memory (:meth:`BaselineServer.memory`): ``reserved`` is target memory no other allocation
can use at that instant (the static regions whole; the allocator's live ranges), and
``allocated`` what is actually handed out (static: the initiators' own placements).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.baselines.alloc import RangeAllocator
from kbtpsim.baselines.wire import (
    REPLY_SIZE,
    REQUEST_SIZE,
    Rpc,
    RpcOp,
    decode,
    encode_reply,
)
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
from kbtpsim.nic.qpstate import QpState
from kbtpsim.scenario.schema import BaselineSpec
from kbtpsim.system.cpu import CpuCosts, TargetCpu
from kbtpsim.system.staging import Staging
from kbtpsim.target import TargetConfig
from kbtpsim.target.stats import TargetStats
from kbtpsim.wire import Status

if TYPE_CHECKING:
    from kbtpsim.baselines.client import BaselineClient

Gen = Generator[simpy.Event, Any, Any]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a handle's data is in target memory (published out of band for one-sided
    loads: the address a KV-cache index would carry with the sequence)."""

    stag: int
    addr: int
    length: int  #: valid data octets
    size: int  #: octets the region holds


@dataclass(frozen=True, slots=True)
class Memory:
    """A snapshot of target memory, in octets."""

    reserved: int  #: unusable by any other allocation now (the utilisation denominator)
    allocated: int  #: handed out to data (static: the initiators' own placements)
    pool: int  #: the target's data memory in total (F x Block Size)
    buffers: int  #: receive buffers for data (two-sided), not in ``reserved``


@dataclass(eq=False)
class BaselineConnection:
    conn_id: int
    qp: QueuePair
    name: str
    recv_mr: MemoryRegion
    inbox: deque[tuple[bytes, int]] = field(default_factory=deque)
    wake: simpy.Event | None = None
    ended: str | None = None

    @property
    def up(self) -> bool:
        return self.ended is None


@dataclass(slots=True)
class _Wr:
    kind: str  # "recv" or "send"
    conn: BaselineConnection
    addr: int = 0  # receive buffer, or staging piece to free (0: none)


class _TargetView:
    """What the scenario runner reads of a KBTP target (``stats()``, ``internal_errors``),
    for a baseline: no rings or quotas; ``ops`` counts replies by operation and status."""

    def __init__(self, server: BaselineServer) -> None:
        self._server = server
        self.internal_errors: list[str] = []

    def stats(self) -> TargetStats:
        return TargetStats(ops=dict(self._server.counts), rings=(), quotas=(),
                           pool_blocks_materialized=0, pool_bytes_materialized=0)


ACCOUNT = {RpcOp.ALLOC: "ALLOC_STORE", RpcOp.LOAD: "LOAD", RpcOp.FREE: "FREE"}


class BaselineServer:
    """Common part: host, NIC, CPU, pool, connections, the per-connection RPC worker."""

    mode = ""
    #: pool access rights (remote ones for the one-sided baselines)
    pool_access = Access.LOCAL_WRITE
    #: data octets a request receive buffer holds after the header
    recv_data = 0

    def __init__(self, sim: Simulation, config: TargetConfig, *, name: str = "target",
                 profile: str | NicProfile = "cx5", cores: int = 1,
                 costs: CpuCosts | None = None, spec: BaselineSpec | None = None,
                 staging_bytes: int = 16 << 20) -> None:
        self.sim = sim
        self.env = sim.env
        self.config = config
        self.name = name
        self.nic: Nic = sim.add_nic(name, profile)
        self.cpu = TargetCpu(self.env, self.nic.profile, cores, costs)
        self.spec = spec or BaselineSpec()
        self.cq = self.nic.create_cq(1 << 16)
        self.staging = Staging(self.nic, staging_bytes)
        self.pool_bytes = config.blocks * config.block_size
        self.pool_addr = self.nic.host.alloc(self.pool_bytes, 4096)
        self.pool_mr = self.nic.register_mr(self.pool_addr, self.pool_bytes, self.pool_access)
        self.recv_size = REQUEST_SIZE + self.recv_data
        self.connections: dict[int, BaselineConnection] = {}
        #: handle -> where its data is (published by whoever stored it)
        self.directory: dict[int, Placement] = {}
        #: replies sent, by (operation, status name)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.clients: list[BaselineClient] = []
        self.target = _TargetView(self)
        self.buffer_bytes = 0
        self._conn_ids = itertools.count(1)
        self._wr_ids = itertools.count(1)
        self._wrs: dict[int, _Wr] = {}
        self.env.process(self.cq.serve(self._dispatch))

    # ------------------------------------------------------------------ connections
    def accept(self, peer: QueuePair, link: Link | None = None, *,
               name: str = "") -> BaselineConnection:
        credits = self.config.request_credits
        qp = self.nic.create_qp(self.cq, self.cq, sq_depth=max(64, 4 * credits + 16),
                                rq_depth=credits + 2)
        connect(qp, peer, link)
        n = credits + 1
        arena = self.nic.host.alloc(n * self.recv_size, 4096)
        mr = self.nic.register_mr(arena, n * self.recv_size, Access.LOCAL_WRITE)
        conn = BaselineConnection(next(self._conn_ids), qp, name or f"conn{qp.qpn}", mr)
        self.connections[conn.conn_id] = conn
        if self.recv_data:
            self.buffer_bytes += n * self.recv_size
        for k in range(n):
            self.post_recv(conn, arena + k * self.recv_size)
        self.env.process(self._worker(conn))
        return conn

    def close(self, conn: BaselineConnection, reason: str = "closed") -> None:
        if not conn.up:
            return
        conn.ended = reason
        if conn.qp.state is not QpState.ERROR:
            conn.qp.to_error()
        if conn.wake is not None and not conn.wake.triggered:
            conn.wake.succeed()

    def post_recv(self, conn: BaselineConnection, addr: int) -> None:
        wr_id = next(self._wr_ids)
        self._wrs[wr_id] = _Wr("recv", conn, addr)
        conn.qp.post_recv([Sge(addr, self.recv_size, conn.recv_mr.lkey)], wr_id)

    # ------------------------------------------------------------------ memory
    def memory(self) -> Memory:
        raise NotImplementedError

    # ------------------------------------------------------------------ processing
    def handle(self, conn: BaselineConnection, req: Rpc, data: bytes,
               buf: int) -> tuple[str, int, list[WorkRequest]]:
        """Serve one request (on a held core, after its cost): the CPU account, extra
        CPU time (ps) spent before the receive buffer is re-posted, and the reply WRs."""
        raise NotImplementedError

    def reply(self, req: Rpc, status: Status, length: int = 0, addr: int = 0,
              stag: int = 0, data: tuple[int, int] | None = None) -> WorkRequest:
        """The reply Send (inline header; ``data`` = (pool offset, length) follows it
        from the pool, zero-copy)."""
        self.counts[(ACCOUNT.get(req.op, "STORE"), status.name)] += 1
        head = encode_reply(req, status, length, addr, stag)
        wr_id = next(self._wr_ids)
        if data is None and len(head) <= self.nic.profile.max_inline:
            return WorkRequest(Opcode.SEND, flags=WqeFlags.SIGNALED, inline_data=head,
                               wr_id=wr_id)
        piece = self.staging.put(head)
        sges = [Sge(piece, len(head), self.staging.lkey)]
        if data is not None and data[1]:
            sges.append(Sge(self.pool_addr + data[0], data[1], self.pool_mr.lkey))
        return WorkRequest(Opcode.SEND, tuple(sges), WqeFlags.SIGNALED, wr_id=wr_id)

    def _worker(self, conn: BaselineConnection) -> Gen:
        cpu = self.cpu
        while conn.up:
            if not conn.inbox:
                conn.wake = self.env.event()
                yield conn.wake
                continue
            data, buf = conn.inbox.popleft()
            req = decode(data)
            with cpu.request() as core:
                yield core
                if not conn.up:
                    break
                account, extra_ps, wrs = self.handle(conn, req, data, buf)
                cpu.count(account)
                yield from cpu.spend(account, cpu.poll_ps + cpu.costs.op_ps(account))
                yield from cpu.spend(account, extra_ps)
                yield from cpu.spend(account, cpu.post_ps)
                self.post_recv(conn, buf)
                for wr in wrs:
                    yield from cpu.spend(account, cpu.post_ps)
                    if not conn.up:
                        break
                    piece = wr.sges[0].addr if wr.sges else 0
                    self._wrs[wr.wr_id] = _Wr("send", conn, piece)
                    conn.qp.post_send(wr)
                if wrs and conn.up:
                    yield from cpu.spend(account, cpu.doorbell_ps)
                    conn.qp.ring_doorbell()

    def _dispatch(self, cqe: Cqe) -> None:
        wr = self._wrs.pop(cqe.wr_id, None)
        if wr is None:
            return
        conn = wr.conn
        if wr.kind == "send" and wr.addr:
            self.staging.free(wr.addr)
        if cqe.status is not WcStatus.SUCCESS:
            self.close(conn, cqe.status.name)
            return
        if wr.kind == "recv" and conn.up:
            data = self.nic.host.memory.read(wr.addr, cqe.byte_len)
            conn.inbox.append((data, wr.addr))
            if conn.wake is not None and not conn.wake.triggered:
                conn.wake.succeed()


class OneSidedStaticServer(BaselineServer):
    """Per-initiator regions registered up front; no target CPU per operation."""

    mode = "one_sided_static"

    def __init__(self, sim: Simulation, config: TargetConfig, **kwargs: Any) -> None:
        super().__init__(sim, config, **kwargs)
        carve = RangeAllocator(self.pool_bytes, config.block_size)
        #: initiator name -> its region (registered for remote read and write)
        self.regions: dict[str, MemoryRegion] = {}
        for ini in config.initiators:
            if ini.quota <= 0:
                continue
            off = carve.alloc(ini.quota * config.block_size)
            assert off is not None  # quotas sum to at most F (scenario rule)
            self.regions[ini.name] = self.nic.register_mr(
                self.pool_addr + off, ini.quota * config.block_size,
                Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE)
        self.reserved = sum(mr.length for mr in self.regions.values())

    def memory(self) -> Memory:
        allocated = sum(c.allocated_bytes() for c in self.clients)
        return Memory(self.reserved, allocated, self.pool_bytes, 0)

    def handle(self, conn: BaselineConnection, req: Rpc, data: bytes,
               buf: int) -> tuple[str, int, list[WorkRequest]]:  # pragma: no cover
        return "OTHER", 0, [self.reply(req, Status.MALFORMED)]


class _Allocating(BaselineServer):
    """Dynamic and two-sided: the target CPU allocates from the pool."""

    def __init__(self, sim: Simulation, config: TargetConfig, **kwargs: Any) -> None:
        super().__init__(sim, config, **kwargs)
        self.allocator = RangeAllocator(self.pool_bytes, self.spec.granularity)
        #: handle -> pool offset of its region
        self.regions: dict[int, int] = {}
        self.failed_allocations = 0

    def memory(self) -> Memory:
        a = self.allocator.allocated
        return Memory(a, a, self.pool_bytes, self.buffer_bytes)

    def _free(self, req: Rpc) -> tuple[str, int, list[WorkRequest]]:
        off = self.regions.pop(req.handle, None)
        if off is None:
            return "FREE", 0, [self.reply(req, Status.NOT_VALID)]
        self.allocator.release(off)
        self.directory.pop(req.handle, None)
        return "FREE", 0, [self.reply(req, Status.OK)]

    def _alloc(self, length: int) -> int | None:
        off = self.allocator.alloc(length)
        if off is None:
            self.failed_allocations += 1
        return off


class OneSidedDynamicServer(_Allocating):
    """ALLOC and FREE by RPC; data moves one-sidedly."""

    mode = "one_sided_dynamic"
    pool_access = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE

    def handle(self, conn: BaselineConnection, req: Rpc, data: bytes,
               buf: int) -> tuple[str, int, list[WorkRequest]]:
        if req.op is RpcOp.FREE:
            return self._free(req)
        if req.op is not RpcOp.ALLOC:
            return "OTHER", 0, [self.reply(req, Status.MALFORMED)]
        if req.handle in self.regions:
            return "ALLOC_STORE", 0, [self.reply(req, Status.ALREADY_BOUND)]
        off = self._alloc(req.length)
        if off is None:
            return "ALLOC_STORE", 0, [self.reply(req, Status.NO_SPACE)]
        self.regions[req.handle] = off
        size = self.allocator.live[off]
        return "ALLOC_STORE", self.spec.register_cost, [
            self.reply(req, Status.OK, size, self.pool_addr + off, self.pool_mr.rkey)]


class TwoSidedServer(_Allocating):
    """STORE with the data, LOAD returning it, FREE: all by Send, all on the CPU."""

    mode = "two_sided"

    def __init__(self, sim: Simulation, config: TargetConfig, **kwargs: Any) -> None:
        self.recv_data = config.block_size
        super().__init__(sim, config, **kwargs)
        self.copy_ps_per_octet = 8e12 / self.spec.copy_rate

    def handle(self, conn: BaselineConnection, req: Rpc, data: bytes,
               buf: int) -> tuple[str, int, list[WorkRequest]]:
        if req.op is RpcOp.FREE:
            return self._free(req)
        if req.op is RpcOp.LOAD:
            place = self.directory.get(req.handle)
            if place is None:
                return "LOAD", 0, [self.reply(req, Status.NOT_VALID)]
            off = place.addr - self.pool_addr
            return "LOAD", 0, [self.reply(req, Status.OK, place.length,
                                          data=(off, place.length))]
        if req.op is not RpcOp.STORE:
            return "OTHER", 0, [self.reply(req, Status.MALFORMED)]
        payload = data[REQUEST_SIZE:REQUEST_SIZE + req.length]
        cur: int | None = self.regions.get(req.handle)
        account = "STORE"
        if cur is not None and self.allocator.live[cur] < req.length:
            self.allocator.release(cur)
            del self.regions[req.handle]
            cur = None
        if cur is None:
            account = "ALLOC_STORE"
            cur = self._alloc(req.length)
            if cur is None:
                return account, 0, [self.reply(req, Status.NO_SPACE)]
            self.regions[req.handle] = cur
        off = cur
        self.nic.host.memory.write(self.pool_addr + off, payload)
        self.directory[req.handle] = Placement(self.pool_mr.rkey, self.pool_addr + off,
                                               req.length, self.allocator.live[off])
        copy_ps = round(len(payload) * self.copy_ps_per_octet)
        return account, copy_ps, [self.reply(req, Status.OK, req.length)]


SERVERS: dict[str, type[BaselineServer]] = {
    cls.mode: cls for cls in (OneSidedStaticServer, OneSidedDynamicServer, TwoSidedServer)}

__all__ = [
    "REPLY_SIZE",
    "SERVERS",
    "BaselineConnection",
    "BaselineServer",
    "Memory",
    "OneSidedDynamicServer",
    "OneSidedStaticServer",
    "Placement",
    "TwoSidedServer",
]
