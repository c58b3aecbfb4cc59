"""The initiator's direct modes (draft, "Direct Modes"): one-sided RDMA on the target.

:class:`DirectModes` is a mixin of :class:`~kbtpsim.system.initiator.Initiator`: DIRECT_LOAD
(entry, block, entry), DIRECT_ALLOC (FetchAdd on Head, slot reads, write into the
partition, BIND), and raw one-sided reads and writes (tests of protection). Everything
runs on the connection QP; a refused access raises :class:`RdmaError`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import Any

import simpy

from kbtpsim.atomics import (
    RING_ADD_DATA,
    UNMASKED_ADD_DATA,
    ring_add_mask,
    unmasked_slot_offset,
    unpack_counter,
)
from kbtpsim.nic import Cqe, Nic, Opcode, QueuePair, Sge, WorkRequest, WqeFlags
from kbtpsim.system.results import OpResult
from kbtpsim.system.staging import Staging
from kbtpsim.target.config import CounterMode
from kbtpsim.wire import CONSUMED, Completion, HelloAck, RingSlot, Status, TableEntry

Gen = Generator[simpy.Event, Any, Any]

_OTHER = {"target": "fetch_add", "fetch_add": "target"}


class HeadGate:
    """Keeps the two users of an initiator's DIRECT_ALLOC Head disjoint in time
    (docs/decisions.md, S1): the target's CPU, which takes a ticket with a read-modify-write
    of the Head for this initiator's ALLOC_STORE (``"target"``: from sending the request to
    its completion), and this initiator's own FetchAdds through the NIC (``"fetch_add"``:
    from posting to the CQE). A CPU's read-modify-write and a NIC atomic on the same word
    are not atomic with respect to each other, so one kind waits while the other is in
    flight; waiters are admitted in arrival order, a run of the same kind together."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.busy = {"target": 0, "fetch_add": 0}
        self._queue: deque[tuple[str, simpy.Event]] = deque()
        #: how many entries had to wait for the other kind
        self.waits = 0

    def enter(self, kind: str) -> Gen:
        """Process helper: wait until ``kind`` may use the Head, and count it in."""
        if self.busy[_OTHER[kind]] or self._queue:
            ev = self.env.event()
            self._queue.append((kind, ev))
            self.waits += 1
            yield ev  # admitted by leave(), already counted in
        else:
            self.busy[kind] += 1

    def leave(self, kind: str) -> None:
        self.busy[kind] -= 1
        if self.busy[kind] or not self._queue:
            return
        first = self._queue[0][0]
        while self._queue and self._queue[0][0] == first:
            k, ev = self._queue.popleft()
            self.busy[k] += 1
            ev.succeed()


class DirectModes:
    """One-sided operations of an initiator (mixed into ``Initiator``)."""

    env: simpy.Environment
    nic: Nic
    qp: QueuePair | None
    buffers: Staging
    addr_le: bool
    counter_mode: CounterMode
    post_ps: int
    results: list[OpResult]
    bound: set[int]
    tickets: int
    head_gate: HeadGate
    _wr_ids: Iterator[int]
    _wrs: dict[int, Any]

    # provided by Initiator
    def _session(self) -> HelloAck:
        raise NotImplementedError

    def _up(self) -> None:
        raise NotImplementedError

    def _check(self, cqe: Cqe | None, what: str) -> None:
        raise NotImplementedError

    def load(self, handle: int, generation: int = 0, *, length: int | None = None,
             invalidate: bool = True, allow_unsealed: bool = False,
             record: bool = False) -> simpy.Process:
        raise NotImplementedError

    def bind(self, handle: int, ticket: int, data_length: int,
             block_offset: int) -> simpy.Process:
        raise NotImplementedError

    def direct_load(self, handle: int, *, retries: int = 8,
                    fallback: bool = True) -> simpy.Process:
        """Process: DIRECT_LOAD ``handle``: RDMA-read its table entry, then the block,
        then the entry again, each after the previous completed; accept only if both
        entries show the same Generation with VALID and SEALED. Retries up to
        ``retries`` times, then falls back to a LOAD request (``fallback``) or returns
        a result with status NOT_VALID/NOT_SEALED as the last entry suggested."""
        return self.env.process(self._direct_load(handle, retries, fallback))

    def _direct_load(self, handle: int, retries: int, fallback: bool) -> Gen:
        ack = self._session()
        if ack.table is None or ack.pool is None or ack.table_base_handle is None:
            raise RuntimeError("DIRECT_LOAD was not granted in this session")
        posted = int(self.env.now)
        index = handle - ack.table_base_handle
        if not 0 <= index < ack.table.count:
            raise ValueError(f"handle {handle:#x} is outside the exposed table")
        entry_to = ack.table.tagged_offset + 16 * index
        buf = self.buffers.alloc(32 + ack.block_size)
        first = last = TableEntry()
        attempt = 0
        try:
            for attempt in range(1, retries + 1):
                raw = yield from self._read(ack.table.stag, entry_to, buf, 16, "table read")
                first = TableEntry.decode(raw, self.addr_le)
                if not (first.valid and first.sealed):
                    last = first
                    continue
                data = b""
                if first.data_length:
                    data = yield from self._read(ack.pool.stag, first.block_offset, buf + 32,
                                                 first.data_length, "pool read")
                raw = yield from self._read(ack.table.stag, entry_to, buf + 16, 16,
                                            "table re-read")
                last = TableEntry.decode(raw, self.addr_le)
                if last == first:
                    completion = Completion(handle=handle, generation=first.generation,
                                            data_length=first.data_length,
                                            block_offset=first.block_offset)
                    result = OpResult("DIRECT_LOAD", handle, completion, posted,
                                      int(self.env.now), data, direct=True, attempts=attempt)
                    self.results.append(result)
                    return result
        finally:
            self.buffers.free(buf)
        if fallback:
            res: OpResult = yield self.load(handle)
            result = OpResult("DIRECT_LOAD", handle, res.completion, posted, res.completed_at,
                              res.data, res.stag, res.stag_revoked, False, attempt)
        else:
            status = Status.NOT_VALID if not last.valid else Status.NOT_SEALED
            completion = Completion(handle=handle, generation=last.generation, status=status)
            result = OpResult("DIRECT_LOAD", handle, completion, posted, int(self.env.now),
                              direct=True, attempts=attempt)
        self.results.append(result)
        return result

    def direct_alloc(self, handle: int, data: bytes, *, bind: bool = True,
                     max_polls: int = 1000) -> simpy.Process:
        """Process: DIRECT_ALLOC: masked FetchAdd on the Head (Add Data and Add Mask of the
        ring), read the slot until its Sequence is the ticket and its Block Offset is not
        all ones, read it once more to confirm, RDMA-write ``data`` into the block through
        the Partition STag, then (``bind``) send BIND. The value is the BIND's result
        (or, without ``bind``, a result carrying the ticket and Block Offset)."""
        return self.env.process(self._direct_alloc(handle, data, bind, max_polls))

    def _direct_alloc(self, handle: int, data: bytes, bind: bool, max_polls: int) -> Gen:
        ack = self._session()
        if ack.head is None or ack.ring is None or ack.partition is None:
            raise RuntimeError("DIRECT_ALLOC was not granted in this session")
        posted = int(self.env.now)
        # the initiator MUST NOT exceed its quota, and a ticket it cannot bind is withheld
        # until the Ticket Timeout: check what it knows before taking one
        refused = None
        if handle in self.bound:
            refused = Status.ALREADY_BOUND
        elif len(self.bound) + self.tickets >= ack.allocation_quota:
            refused = Status.NO_SPACE
        if refused is not None:
            result = OpResult("DIRECT_ALLOC", handle, Completion(handle=handle,
                                                                 status=refused),
                              posted, posted, direct=True)
            self.results.append(result)
            return result
        self.tickets += 1
        try:
            return (yield from self._direct_alloc_ticket(ack, handle, data, bind, max_polls,
                                                         posted))
        finally:
            self.tickets -= 1

    def _direct_alloc_ticket(self, ack: HelloAck, handle: int, data: bytes, bind: bool,
                             max_polls: int, posted: int) -> Gen:
        assert ack.head is not None and ack.ring is not None and ack.partition is not None
        buf = self.buffers.alloc(64 + max(1, len(data)))
        try:
            sge = (Sge(buf, 8, self.buffers.lkey),)
            if self.counter_mode is CounterMode.MASKED:
                fetch_add = WorkRequest(Opcode.MASKED_FETCH_ADD, sge, WqeFlags.SIGNALED,
                                        remote_addr=ack.head.tagged_offset,
                                        rkey=ack.head.stag, swap_add=RING_ADD_DATA,
                                        swap_mask=ring_add_mask(ack.ring.count))
            else:  # InfiniBand's plain Fetch and Add: Ticket << 32
                fetch_add = WorkRequest(Opcode.FETCH_ADD, sge, WqeFlags.SIGNALED,
                                        remote_addr=ack.head.tagged_offset,
                                        rkey=ack.head.stag, swap_add=UNMASKED_ADD_DATA)
            yield from self.head_gate.enter("fetch_add")
            try:
                yield from self._one_sided(fetch_add, "FetchAdd on Head")
            finally:
                self.head_gate.leave("fetch_add")
            word = int.from_bytes(self.nic.host.memory.read(buf, 8),
                                  self.nic.profile.atomic_byte_order)  # type: ignore[arg-type]
            if self.counter_mode is CounterMode.MASKED:
                ticket, slot_offset = unpack_counter(word)
            else:
                ticket = word >> 32
                slot_offset = unmasked_slot_offset(ticket, ack.ring.count)
            slot_to = ack.ring.tagged_offset + slot_offset
            confirmed = None
            for _ in range(max_polls):
                raw = yield from self._read(ack.ring.stag, slot_to, buf + 16, 16, "slot read")
                slot = RingSlot.decode(raw, self.addr_le)
                if slot.sequence == ticket & 0xFFFF_FFFF and slot.block_offset != CONSUMED:
                    raw = yield from self._read(ack.ring.stag, slot_to, buf + 32, 16,
                                                "slot confirm")
                    again = RingSlot.decode(raw, self.addr_le)
                    if again == slot:
                        confirmed = slot
                        break
            if confirmed is None:
                raise RuntimeError(f"ticket {ticket}: slot not ready after {max_polls} reads")
            if data:
                self.nic.host.memory.write(buf + 64, data)
                yield from self._one_sided(
                    WorkRequest(Opcode.RDMA_WRITE, (Sge(buf + 64, len(data),
                                                        self.buffers.lkey),),
                                WqeFlags.SIGNALED, remote_addr=confirmed.block_offset,
                                rkey=ack.partition.stag),
                    "partition write")
        finally:
            self.buffers.free(buf)
        if not bind:
            completion = Completion(handle=handle, data_length=len(data),
                                    block_offset=confirmed.block_offset)
            result = OpResult("DIRECT_ALLOC", handle, completion, posted, int(self.env.now),
                              direct=True, ticket=ticket)
            self.results.append(result)
            return result
        res: OpResult = yield self.bind(handle, ticket, len(data), confirmed.block_offset)
        result = OpResult("DIRECT_ALLOC", handle, res.completion, posted, res.completed_at,
                          direct=True, ticket=ticket)
        self.results.append(result)
        return result

    def read_remote(self, stag: int, tagged_offset: int, length: int) -> simpy.Process:
        """Process: one RDMA Read of target memory (value: the octets); raises
        :class:`RdmaError` if the target's NIC refuses it."""
        return self.env.process(self._read_once(stag, tagged_offset, length))

    def write_remote(self, stag: int, tagged_offset: int, data: bytes) -> simpy.Process:
        """Process: one RDMA Write into target memory; raises :class:`RdmaError` if the
        target's NIC refuses it."""
        return self.env.process(self._write_once(stag, tagged_offset, data))

    def _read_once(self, stag: int, tagged_offset: int, length: int) -> Gen:
        buf = self.buffers.alloc(length)
        try:
            return (yield from self._read(stag, tagged_offset, buf, length, "RDMA Read"))
        finally:
            self.buffers.free(buf)

    def _write_once(self, stag: int, tagged_offset: int, data: bytes) -> Gen:
        buf = self.buffers.put(data)
        try:
            yield from self._one_sided(
                WorkRequest(Opcode.RDMA_WRITE, (Sge(buf, len(data), self.buffers.lkey),),
                            WqeFlags.SIGNALED, remote_addr=tagged_offset, rkey=stag),
                "RDMA Write")
        finally:
            self.buffers.free(buf)

    def _read(self, stag: int, tagged_offset: int, buf: int, length: int, what: str) -> Gen:
        yield from self._one_sided(
            WorkRequest(Opcode.RDMA_READ, (Sge(buf, length, self.buffers.lkey),),
                        WqeFlags.SIGNALED, remote_addr=tagged_offset, rkey=stag), what)
        return self.nic.host.memory.read(buf, length)

    def _one_sided(self, wr: WorkRequest, what: str) -> Gen:
        """Post ``wr`` on the connection QP and wait for its CQE; raise on error."""
        self._up()
        assert self.qp is not None
        done = self.env.event()
        wr_id = next(self._wr_ids)
        self._wrs[wr_id] = done
        yield self.env.timeout(self.post_ps)
        self.qp.post_send(replace(wr, wr_id=wr_id))
        self.qp.ring_doorbell()
        cqe: Cqe = yield done
        self._check(cqe, what)
        return cqe


__all__ = ["DirectModes", "HeadGate"]
