"""Baseline initiators: the same request methods as :class:`kbtpsim.system.Initiator`
(``alloc_store``, ``store``, ``load``, ``free``, each a simpy process whose value is an
:class:`~kbtpsim.baselines.results.BaselineResult`), so the scenario driver runs a
workload against a baseline target unchanged.

=====================  ==================================  ===========================
approach               store (ALLOC_STORE)                 load / free
=====================  ==================================  ===========================
one-sided static       RDMA Write into its own region      RDMA Read / local (0 RTs)
one-sided dynamic      RPC ALLOC, then RDMA Write (2 RTs)  RDMA Read / RPC FREE
two-sided              Send with the data, reply           RPC LOAD (reply has data) /
                                                           RPC FREE
=====================  ==================================  ===========================

An initiator posts each WR after ``cpu_post_ns + cpu_doorbell_ns`` of its own CPU (as the
KBTP initiator does); RPCs are limited to the target's request credits.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from typing import Any

import simpy

from kbtpsim.baselines.alloc import RangeAllocator
from kbtpsim.baselines.results import BaselineResult
from kbtpsim.baselines.server import (
    BaselineConnection,
    BaselineServer,
    OneSidedStaticServer,
    Placement,
)
from kbtpsim.baselines.wire import REPLY_SIZE, Rpc, RpcOp, decode, encode_request
from kbtpsim.nic import (
    Access,
    Cqe,
    Link,
    Nic,
    NicProfile,
    Opcode,
    QueuePair,
    Sge,
    Simulation,
    WcStatus,
    WorkRequest,
    WqeFlags,
)
from kbtpsim.nic.qpstate import QpState
from kbtpsim.system.initiator import Initiator
from kbtpsim.system.results import ConnectionLost, RdmaError
from kbtpsim.system.staging import Staging
from kbtpsim.wire import Completion, Status

Gen = Generator[simpy.Event, Any, Any]


class BaselineClient:
    """An initiator host with NIC ``name`` for a :class:`BaselineServer`."""

    mode = ""

    def __init__(self, sim: Simulation, name: str, *, profile: str | NicProfile = "cx5",
                 seed: int = 0, initiator_id: bytes | None = None,
                 completion_credits: int = 64, buffer_bytes: int = 64 << 20) -> None:
        self.sim = sim
        self.env = sim.env
        self.name = name
        self.nic: Nic = sim.add_nic(name, profile)
        prof = self.nic.profile
        self.initiator_id = initiator_id or Initiator.random_id(seed, name)
        self.completion_credits = completion_credits
        self.cq = self.nic.create_cq(1 << 16)
        self.buffers = Staging(self.nic, buffer_bytes, Access.LOCAL_WRITE)
        self.post_ps = round((prof.cpu_post_ns + prof.cpu_doorbell_ns) * 1000)
        self.qp: QueuePair | None = None
        self.server: BaselineServer | None = None
        self.conn: BaselineConnection | None = None
        self.ack = None  # no KBTP session
        self.broken: str | None = None
        self.outstanding = 0
        self.max_outstanding = 0
        #: a workload's placement of a handle in this initiator's static region
        #: (``handle -> offset``), set by the driver; None: a block allocator of its own
        self.placement: Callable[[int], int] | None = None
        self._credits: simpy.Resource | None = None
        self._rids = itertools.count(1)
        self._wr_ids = itertools.count(1)
        self._pending: dict[int, simpy.Event] = {}
        self._waiters: dict[int, simpy.Event | None] = {}
        self._recv_bufs: dict[int, int] = {}
        self._send_bufs: dict[int, int] = {}
        self._recv_size = REPLY_SIZE
        self.env.process(self.cq.serve(self._dispatch))

    # ------------------------------------------------------------------ session
    def connect(self, server: BaselineServer, link: Link | None = None) -> simpy.Process:
        """Process: an RC connection to ``server`` (no session message: a baseline's
        setup is out of band); its value is None."""
        if server.mode != self.mode:
            raise ValueError(f"a {self.mode} client cannot use a {server.mode} server")
        credits = server.config.request_credits
        depth = min(self.completion_credits, credits) + 1
        self.qp = self.nic.create_qp(self.cq, self.cq, sq_depth=1024, rq_depth=depth + 1)
        self.server = server
        self.conn = server.accept(self.qp, link, name=self.name)
        server.clients.append(self)
        self._recv_size = REPLY_SIZE + server.recv_data
        for _ in range(depth):
            self._post_recv(self.buffers.alloc(self._recv_size))
        self._credits = simpy.Resource(self.env, capacity=credits)
        self.setup()
        return self.env.process(self._connected())

    def _connected(self) -> Gen:
        yield self.env.timeout(0)

    def setup(self) -> None:
        """After connecting (static: find the region)."""

    def close(self) -> None:
        if self.qp is not None and self.qp.state is not QpState.ERROR:
            self.qp.to_error()
        if self.server is not None and self.conn is not None:
            self.server.close(self.conn)
        self._break("closed")

    def allocated_bytes(self) -> int:
        """Octets of the static region this initiator has placed data in (0 otherwise)."""
        return 0

    # ------------------------------------------------------------------ requests
    def alloc_store(self, handle: int, data: bytes, **_: Any) -> simpy.Process:
        return self.env.process(self._op("ALLOC_STORE", self._store, handle, data, True))

    def store(self, handle: int, data: bytes, generation: int = 0,
              **_: Any) -> simpy.Process:
        return self.env.process(self._op("STORE", self._store, handle, data, False))

    def load(self, handle: int, generation: int = 0, **_: Any) -> simpy.Process:
        return self.env.process(self._op("LOAD", self._load, handle))

    def free(self, handle: int, generation: int = 0, **_: Any) -> simpy.Process:
        return self.env.process(self._op("FREE", self._free, handle))

    def _op(self, op: str, body: Callable[..., Gen], handle: int, *args: Any) -> Gen:
        self._up()
        posted = int(self.env.now)
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        try:
            status, length, data, rts = yield from body(handle, *args)
        finally:
            self.outstanding -= 1
        completion = Completion(handle=handle & (2**64 - 1), status=status,
                                data_length=length)
        return BaselineResult(op, handle, completion, posted, int(self.env.now), data,
                              round_trips=rts)

    # each body returns (status, data length, loaded data or None, round trips)
    def _store(self, handle: int, data: bytes, new: bool) -> Gen:
        raise NotImplementedError

    def _load(self, handle: int) -> Gen:
        place = self._server().directory.get(handle)
        if place is None:
            return Status.NOT_VALID, 0, None, 0
        data = yield from self._read(place.stag, place.addr, place.length)
        return Status.OK, place.length, data, 1

    def _free(self, handle: int) -> Gen:
        raise NotImplementedError

    # ------------------------------------------------------------------ plumbing
    def _server(self) -> BaselineServer:
        if self.server is None:
            raise RuntimeError(f"{self.name} is not connected")
        return self.server

    def _up(self) -> None:
        if self.broken is not None:
            raise ConnectionLost(f"{self.name}: connection {self.broken}")

    def _rpc(self, op: RpcOp, handle: int, length: int = 0,
             payload: bytes | None = None) -> Gen:
        """Send one request (with ``payload`` after the header) under a request credit;
        the value is the reply and the data that followed it."""
        assert self._credits is not None
        with self._credits.request() as credit:
            yield credit
            self._up()
            rid = next(self._rids)
            ev = self._pending[rid] = self.env.event()
            msg = encode_request(op, rid, handle & (2**64 - 1), length)
            if payload:
                msg += payload
            yield from self._post(WorkRequest(Opcode.SEND, flags=WqeFlags.SIGNALED), msg)
            reply, data = yield ev
            return reply, data

    def _read(self, stag: int, addr: int, length: int) -> Gen:
        buf = self.buffers.alloc(length)
        try:
            cqe = yield from self._post(WorkRequest(
                Opcode.RDMA_READ, (Sge(buf, length, self.buffers.lkey),), WqeFlags.SIGNALED,
                remote_addr=addr, rkey=stag), wait=True)
            self._check(cqe, "RDMA Read")
            return self.nic.host.memory.read(buf, length)
        finally:
            self.buffers.free(buf)

    def _write(self, stag: int, addr: int, data: bytes) -> Gen:
        cqe = yield from self._post(WorkRequest(Opcode.RDMA_WRITE, flags=WqeFlags.SIGNALED,
                                                remote_addr=addr, rkey=stag), data,
                                    wait=True)
        self._check(cqe, "RDMA Write")

    def _post(self, wr: WorkRequest, data: bytes | None = None, wait: bool = False) -> Gen:
        """Post ``wr`` (``data``: inline when it fits, else from a buffer); with ``wait``
        the value is its CQE."""
        self._up()
        assert self.qp is not None
        wr_id = next(self._wr_ids)
        done = self.env.event() if wait else None
        self._waiters[wr_id] = done
        yield self.env.timeout(self.post_ps)
        self._up()
        if data is not None:
            if len(data) <= self.nic.profile.max_inline:
                wr = WorkRequest(wr.opcode, (), wr.flags, wr.remote_addr, wr.rkey,
                                 inline_data=data, wr_id=wr_id)
            else:
                addr = self.buffers.put(data)
                self._send_bufs[wr_id] = addr
                wr = WorkRequest(wr.opcode, (Sge(addr, len(data), self.buffers.lkey),),
                                 wr.flags, wr.remote_addr, wr.rkey, wr_id=wr_id)
        else:
            wr = WorkRequest(wr.opcode, wr.sges, wr.flags, wr.remote_addr, wr.rkey,
                             wr_id=wr_id)
        self.qp.post_send(wr)
        self.qp.ring_doorbell()
        if done is None:
            return None
        cqe: Cqe = yield done
        return cqe

    def _check(self, cqe: Cqe | None, what: str) -> None:
        if cqe is None:
            raise ConnectionLost(f"{self.name}: connection {self.broken}")
        if cqe.status is not WcStatus.SUCCESS:
            raise RdmaError(what, cqe.status)

    def _post_recv(self, addr: int) -> None:
        assert self.qp is not None
        wr_id = next(self._wr_ids)
        self._recv_bufs[wr_id] = addr
        self.qp.post_recv([Sge(addr, self._recv_size, self.buffers.lkey)], wr_id)

    def _dispatch(self, cqe: Cqe) -> None:
        if cqe.wr_id in self._recv_bufs:
            addr = self._recv_bufs.pop(cqe.wr_id)
            if cqe.status is not WcStatus.SUCCESS:
                self.buffers.free(addr)
                self._break(cqe.status.name)
                return
            raw = self.nic.host.memory.read(addr, cqe.byte_len)
            self._post_recv(addr)
            reply: Rpc = decode(raw)
            ev = self._pending.pop(reply.request_id, None)
            if ev is not None and not ev.triggered:
                ev.succeed((reply, raw[REPLY_SIZE:]))
            return
        piece = self._send_bufs.pop(cqe.wr_id, None)
        if piece is not None:
            self.buffers.free(piece)
        waiter = self._waiters.pop(cqe.wr_id, None)
        if waiter is not None and not waiter.triggered:
            waiter.succeed(cqe)
        if cqe.status is not WcStatus.SUCCESS:
            self._break(cqe.status.name)

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
        for ev in list(self._pending.values()):
            if not ev.triggered:
                ev.fail(ConnectionLost(f"{self.name}: connection {why}"))
                ev.defused = True
        self._pending.clear()
        if why == "closed":
            for wr_id, w in list(self._waiters.items()):
                if w is not None and not w.triggered:
                    w.succeed(None)
                del self._waiters[wr_id]


class OneSidedStaticClient(BaselineClient):
    """Writes and reads its own region (registered up front); FREE is local."""

    mode = "one_sided_static"

    def setup(self) -> None:
        server = self._server()
        assert isinstance(server, OneSidedStaticServer)
        self.region = server.regions.get(self.name)
        self.block_size = server.config.block_size
        size = 0 if self.region is None else self.region.length
        #: its own block allocator (when no workload places the data)
        self._blocks = RangeAllocator(max(size, 1), self.block_size)
        self._placed: dict[int, int] = {}  # handle -> offset in the region

    def allocated_bytes(self) -> int:
        if self.placement is not None:
            slots = getattr(self.placement, "__self__", None)
            return int(getattr(slots, "allocated_bytes", 0))
        return self._blocks.allocated

    def _store(self, handle: int, data: bytes, new: bool) -> Gen:
        server = self._server()
        if self.region is None:
            return Status.NO_SPACE, 0, None, 0
        off = self._placed.get(handle)
        if off is None:
            if not new:
                return Status.NOT_VALID, 0, None, 0
            if self.placement is not None:
                off = self.placement(handle)
            else:
                got = self._blocks.alloc(self.block_size)
                if got is None:
                    return Status.NO_SPACE, 0, None, 0
                off = got
            self._placed[handle] = off
        elif new:
            return Status.ALREADY_BOUND, 0, None, 0
        addr = self.region.addr + off
        yield from self._write(self.region.rkey, addr, data)
        server.directory[handle] = Placement(self.region.rkey, addr, len(data),
                                             self.block_size)
        return Status.OK, len(data), None, 1

    def _free(self, handle: int) -> Gen:
        off = self._placed.pop(handle, None)
        if off is None:
            return Status.NOT_VALID, 0, None, 0
        self._server().directory.pop(handle, None)
        if self.placement is None:
            self._blocks.release(off)
        return Status.OK, 0, None, 0
        yield  # a generator


class OneSidedDynamicClient(BaselineClient):
    """RPC ALLOC, RDMA Write; RDMA Read; RPC FREE."""

    mode = "one_sided_dynamic"

    def _store(self, handle: int, data: bytes, new: bool) -> Gen:
        server = self._server()
        place = server.directory.get(handle)
        rts = 0
        if new or place is None:
            if not new:
                return Status.NOT_VALID, 0, None, 0
            reply, _ = yield from self._rpc(RpcOp.ALLOC, handle, len(data))
            rts += 1
            if reply.status != Status.OK:
                return Status(reply.status), 0, None, rts
            place = Placement(reply.stag, reply.addr, len(data), reply.length)
        elif len(data) > place.size:
            return Status.TOO_LARGE, 0, None, 0
        yield from self._write(place.stag, place.addr, data)
        server.directory[handle] = Placement(place.stag, place.addr, len(data), place.size)
        return Status.OK, len(data), None, rts + 1

    def _free(self, handle: int) -> Gen:
        reply, _ = yield from self._rpc(RpcOp.FREE, handle)
        return Status(reply.status), 0, None, 1


class TwoSidedClient(BaselineClient):
    """Every operation is an RPC; data travels in the Sends."""

    mode = "two_sided"

    def _store(self, handle: int, data: bytes, new: bool) -> Gen:
        reply, _ = yield from self._rpc(RpcOp.STORE, handle, len(data), data)
        return Status(reply.status), reply.length, None, 1

    def _load(self, handle: int) -> Gen:
        reply, data = yield from self._rpc(RpcOp.LOAD, handle)
        if reply.status != Status.OK:
            return Status(reply.status), 0, None, 1
        return Status.OK, reply.length, bytes(data[:reply.length]), 1

    def _free(self, handle: int) -> Gen:
        reply, _ = yield from self._rpc(RpcOp.FREE, handle)
        return Status(reply.status), 0, None, 1


CLIENTS: dict[str, type[BaselineClient]] = {
    cls.mode: cls for cls in (OneSidedStaticClient, OneSidedDynamicClient, TwoSidedClient)}

__all__ = ["CLIENTS", "BaselineClient", "OneSidedDynamicClient", "OneSidedStaticClient",
           "TwoSidedClient"]
