"""The initiator's RPC plumbing: :class:`RpcPlumbing`, a mixin of
:class:`~kbtpsim.system.initiator.Initiator`.

The request/completion exchange (:meth:`~RpcPlumbing._rpc`: take a request credit, expose
the request's buffer through a memory window, optionally a completion record slot, send
the request, wait for its COMPLETION or record, revoke the windows) and the connection QP
under it: Sends (inline when they fit), receive buffers for completions (re-posted once
read), the dispatch of CQEs to one-sided waiters, messages and records, and failing
everything outstanding when the connection breaks (:class:`ConnectionLost`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import Any

import simpy

from kbtpsim.nic import (
    Access,
    Cqe,
    Nic,
    Opcode,
    QueuePair,
    Sge,
    WcOpcode,
    WcStatus,
    WorkRequest,
    WqeFlags,
)
from kbtpsim.system.results import ConnectionLost, OpResult, RdmaError
from kbtpsim.system.staging import Staging
from kbtpsim.wire import (
    COMPLETION_RECORD_SIZE,
    Completion,
    CompletionDescriptor,
    CompletionRecord,
    DataDescriptor,
    HelloAck,
    Message,
    RequestFlag,
    Status,
    decode,
    encode,
)

Gen = Generator[simpy.Event, Any, Any]
RECV_SIZE = 256  #: a COMPLETION is 40 octets, the largest HELLO_ACK 152
NO_ACCESS = Access(0)


class RpcPlumbing:
    """Requests and completions on an initiator's connection QP (mixed into ``Initiator``,
    which sets these attributes)."""

    env: simpy.Environment
    name: str
    nic: Nic
    qp: QueuePair | None
    buffers: Staging
    post_ps: int
    ack: HelloAck | None
    addr_le: bool
    broken: str | None
    outstanding: int
    max_outstanding: int
    bound: set[int]
    results: list[OpResult]
    received: list[bytes]
    sources: dict[int, tuple[int, bytes]]
    _keep_sources: bool
    _credits: simpy.Resource | None
    _request_ids: Iterator[int]
    _wr_ids: Iterator[int]
    _pending: dict[int, simpy.Event]
    _records: dict[int, tuple[int, int, int]]
    _hello: simpy.Event | None
    _wrs: dict[int, simpy.Event | _Chain | None]
    _recv_bufs: dict[int, int]

    # --- the request/completion exchange ----------------------------------------------
    def _rpc_checked(self, op: str, handle: int,
                     build: Callable[[int, DataDescriptor], Message],
                     record: bool = False) -> Gen:
        self._session()
        return (yield from self._rpc(op, handle, build, record=record))

    def _rpc(self, op: str, handle: int, build: Callable[[int, DataDescriptor], Message], *,
             length: int = 0, access: Access = NO_ACCESS, source: bytes | None = None,
             direct: bool = False, attempts: int = 1, ticket: int | None = None,
             record: bool = False) -> Gen:
        """Take a request credit, expose a buffer (if ``length``), send the request and
        wait for its COMPLETION (or, with ``record``, its completion record)."""
        assert self._credits is not None
        with self._credits.request() as credit:
            yield credit
            self._up()
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
            posted = int(self.env.now)
            rid = next(self._request_ids)
            buf = window = None
            dd = DataDescriptor()
            if length:
                buf = self.buffers.alloc(length)
                if source is not None:
                    self.nic.host.memory.write(buf, source)
                    if self._keep_sources:
                        self.sources[rid] = (buf, source)
                assert self.qp is not None
                window = self.nic.bind_mw(self.buffers.mr, self.qp, buf, length, access)
                dd = DataDescriptor(window.stag, buf, length)
            msg = build(rid, dd)
            slot = slot_window = None
            if record:  # a 24-octet record slot, writable for this request only
                assert self.qp is not None
                slot = self.buffers.alloc(COMPLETION_RECORD_SIZE)
                slot_window = self.nic.bind_mw(self.buffers.mr, self.qp, slot,
                                               COMPLETION_RECORD_SIZE, Access.REMOTE_WRITE)
                msg = replace(msg, flags=msg.flags | RequestFlag.RECORD,  # type: ignore[call-arg]
                              completion_descriptor=CompletionDescriptor(slot_window.stag,
                                                                         slot))
                self._records[rid & 0xFFFF_FFFF] = (rid, slot, handle)
            ev = self._pending[rid] = self.env.event()
            done = False
            try:
                yield from self._send(encode(msg, self.addr_le))
                completion, invalidated = yield ev
                done = True
            finally:
                self.outstanding -= 1
                self._pending.pop(rid, None)
                if not done and window is not None and buf is not None:
                    self.nic.invalidate(window.stag)  # the connection is gone
                    self.buffers.free(buf)
                if slot is not None and slot_window is not None:
                    self._records.pop(rid & 0xFFFF_FFFF, None)
                    self.nic.invalidate(slot_window.stag)
                    self.buffers.free(slot)
            data = None
            revoked = None
            if window is not None and buf is not None:
                revoked = invalidated == window.stag and self.nic.pt.get(window.stag) is None
                self.nic.invalidate(window.stag)  # no-op if the target revoked it
                if op == "LOAD" and completion.status == Status.OK:
                    data = self.nic.host.memory.read(buf, completion.data_length)
                self.buffers.free(buf)
        result = OpResult(op, handle, completion, posted, int(self.env.now), data,
                          None if window is None else window.stag, revoked, direct, attempts,
                          ticket)
        if completion.status == Status.OK:
            if op in ("ALLOC_STORE", "BIND"):
                self.bound.add(handle)
            elif op == "FREE":
                self.bound.discard(handle)
        self.results.append(result)
        return result

    # --- the connection QP ------------------------------------------------------------
    def _session(self) -> HelloAck:
        self._up()
        if self.ack is None:
            raise RuntimeError(f"{self.name} has no session (connect first)")
        return self.ack

    def _up(self) -> None:
        if self.broken is not None:
            raise ConnectionLost(f"{self.name}: connection {self.broken}")

    def _check(self, cqe: Cqe | None, what: str) -> None:
        if cqe is None:
            raise ConnectionLost(f"{self.name}: connection {self.broken}")
        if cqe.status is not WcStatus.SUCCESS:
            raise RdmaError(what, cqe.status)

    def _send(self, data: bytes, waiter: simpy.Event | None = None) -> Gen:
        """Post ``data`` as a Send (inline when it fits the NIC's inline limit)."""
        self._up()
        assert self.qp is not None
        wr_id = next(self._wr_ids)
        self._wrs[wr_id] = waiter
        yield self.env.timeout(self.post_ps)
        if len(data) <= self.nic.profile.max_inline:
            wr = WorkRequest(Opcode.SEND, flags=WqeFlags.SIGNALED, inline_data=data,
                             wr_id=wr_id)
        else:
            addr = self.buffers.put(data)
            wr = WorkRequest(Opcode.SEND, (Sge(addr, len(data), self.buffers.lkey),),
                             WqeFlags.SIGNALED, wr_id=wr_id)
            done = self.env.event()
            done.callbacks.append(_freer(self.buffers, addr))
            self._wrs[wr_id] = _Chain(done, waiter)
        self.qp.post_send(wr)
        self.qp.ring_doorbell()

    def _post_recv(self, addr: int) -> None:
        assert self.qp is not None
        wr_id = next(self._wr_ids)
        self._recv_bufs[wr_id] = addr
        self.qp.post_recv([Sge(addr, RECV_SIZE, self.buffers.lkey)], wr_id)

    def _dispatch(self, cqe: Cqe) -> None:
        current = self.qp is not None and cqe.qpn == self.qp.qpn
        if cqe.wr_id in self._recv_bufs:
            addr = self._recv_bufs.pop(cqe.wr_id)
            if cqe.status is not WcStatus.SUCCESS or not current:
                self.buffers.free(addr)  # flushed (or of an earlier connection)
                if current:
                    self._break(cqe.status.name)
                return
            if cqe.opcode is WcOpcode.RECV_RDMA_WITH_IMM:  # a completion record
                self._post_recv(addr)
                self._on_record(cqe)
                return
            raw = self.nic.host.memory.read(addr, cqe.byte_len)
            self.received.append(raw)
            self._post_recv(addr)  # give the completion credit back
            self._on_message(raw, cqe)
            return
        waiter = self._wrs.pop(cqe.wr_id, None)
        if isinstance(waiter, _Chain):
            waiter.done.succeed(cqe)
            waiter = waiter.waiter
        if waiter is not None and not waiter.triggered:
            waiter.succeed(cqe)
        if cqe.status is not WcStatus.SUCCESS and current:
            self._break(cqe.status.name)

    def _on_message(self, raw: bytes, cqe: Cqe) -> None:
        addr_le = self.addr_le if self._hello is None or self._hello.triggered else False
        msg = decode(raw, addr_le)
        if isinstance(msg, HelloAck):
            if self._hello is not None and not self._hello.triggered:
                self._hello.succeed(msg)
            return
        if isinstance(msg, Completion):
            ev = self._pending.pop(msg.request_id, None)
            if ev is not None and not ev.triggered:
                ev.succeed((msg, cqe.invalidated_stag))

    def _on_record(self, cqe: Cqe) -> None:
        """A completion record arrived (RDMA Write with Immediate = its Request ID)."""
        got = self._records.pop((cqe.imm or 0) & 0xFFFF_FFFF, None)
        if got is None:
            return
        rid, slot, handle = got
        raw = self.nic.host.memory.read(slot, COMPLETION_RECORD_SIZE)
        rec = CompletionRecord.decode(raw, self.addr_le)
        completion = Completion(request_id=rec.request_id, handle=handle,
                                generation=rec.generation, status=rec.status,
                                data_length=rec.data_length, block_offset=rec.block_offset)
        ev = self._pending.pop(rid, None)
        if ev is not None and not ev.triggered:
            ev.succeed((completion, None))

    def _break(self, why: str) -> None:
        """The connection is unusable: fail everything outstanding."""
        if self.broken is None:
            self.broken = why
        for ev in list(self._pending.values()):
            if not ev.triggered:
                ev.fail(ConnectionLost(f"{self.name}: connection {why}"))
                ev.defused = True
        self._pending.clear()
        if why == "closed":  # torn down locally: no CQE will come for posted WRs
            for wr_id, w in list(self._wrs.items()):
                waiter = w.waiter if isinstance(w, _Chain) else w
                if waiter is not None and not waiter.triggered:
                    waiter.succeed(None)
                del self._wrs[wr_id]
        # otherwise every posted WR still completes (with its error or WR_FLUSH_ERR)
        if self._hello is not None and not self._hello.triggered:
            self._hello.fail(ConnectionLost(f"{self.name}: connection {why}"))
            self._hello.defused = True


class _Chain:
    """A Send's CQE event that also frees its buffer, then wakes ``waiter``."""

    __slots__ = ("done", "waiter")

    def __init__(self, done: simpy.Event, waiter: simpy.Event | None) -> None:
        self.done = done
        self.waiter = waiter


def _freer(buffers: Staging, addr: int) -> Callable[[simpy.Event], None]:
    def free(_ev: simpy.Event) -> None:
        buffers.free(addr)
    return free
