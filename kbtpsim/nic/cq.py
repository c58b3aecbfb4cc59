"""Completion queues and CQEs.

A CQE is generated inside the NIC (it counts at once toward :meth:`CompletionQueue.reach`,
which WAIT uses) and becomes visible to a polling CPU when its DMA write lands
(``Cqe.time``). A CQ that holds ``depth`` unpolled CQEs overruns: :class:`CqOverrun`.

Optionally (``Nic.create_cq(depth, buffer_addr=...)``) a CQ also has a *buffer in memory*,
as a real mlx5 CQ does: CQE number ``i`` (0, 1, 2, ... in generation order) is written as
64 octets (:func:`encode_cqe`, layout in docs/nic-model.md) at
``buffer_addr + 64 * (i mod depth)`` when its DMA write lands, so other work requests can
read it (e.g. a conditional WR testing a receive's byte count). Without a buffer nothing
is written (the default).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import simpy

from kbtpsim.nic.clockhold import clock_hold
from kbtpsim.nic.errors import CqOverrun, WcStatus


class WcOpcode(IntEnum):
    """Kind of completed work (values of ``ibv_wc_opcode``)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    MASKED_COMP_SWAP = 9
    MASKED_FETCH_ADD = 10
    NOP = 32  # model: NOP, WAIT, ENABLE and untaken conditionals
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


@dataclass(frozen=True, slots=True)
class Cqe:
    """One completion. ``time`` is when a polling CPU can see it (ps)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qpn: int
    wqe_index: int
    byte_len: int = 0
    imm: int | None = None
    invalidated_stag: int | None = None
    time: int = 0
    #: a simulator annotation, not in a real CQE: for an RDMA Read, when the responder's
    #: DMA read the data (ps) -- the instant the Read observed memory (the oracle's
    #: linearisation point of a chain's table-entry Read)
    sampled: int | None = None


_CQE_FIELDS = ("wr_id", "status", "opcode", "qpn", "wqe_index", "byte_len", "imm",
               "invalidated_stag", "time", "sampled")  #: make_cqe's arguments, in order
_CQE_SET = tuple(getattr(Cqe, name).__set__ for name in _CQE_FIELDS)
_new = object.__new__


def make_cqe(wr_id: int, status: WcStatus, opcode: WcOpcode, qpn: int, wqe_index: int,
             byte_len: int = 0, imm: int | None = None, invalidated_stag: int | None = None,
             time: int = 0, sampled: int | None = None) -> Cqe:
    """``Cqe(...)`` (equal to it), built through the slots directly: the NIC makes one
    per completion, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``."""
    cqe = _new(Cqe)
    s = _CQE_SET
    s[0](cqe, wr_id)
    s[1](cqe, status)
    s[2](cqe, opcode)
    s[3](cqe, qpn)
    s[4](cqe, wqe_index)
    s[5](cqe, byte_len)
    s[6](cqe, imm)
    s[7](cqe, invalidated_stag)
    s[8](cqe, time)
    s[9](cqe, sampled)
    return cqe


#: Size of a CQE in a CQ buffer, and offsets of its fields (mlx5 ``mlx5_cqe64``; all
#: multi-octet fields big-endian whatever the profile's byte orders).
CQE_SIZE = 64
CQE_IMM = 36  #: immediate data or invalidated STag (4)
CQE_BYTE_CNT = 44  #: byte count (4): octets received (receives) or transferred
CQE_WQE_COUNTER = 60  #: WQE index, low 16 bits (2)
CQE_QPN = 56  #: QP number in the low 24 bits (4)
CQE_SYNDROME = 55  #: error CQEs: the model's ``WcStatus`` value (1)
CQE_OP_OWN = 63  #: opcode << 4 | owner bit (1)

#: mlx5 CQE opcodes (``MLX5_CQE_*``).
CQE_REQ, CQE_RESP_WR_IMM, CQE_RESP_SEND, CQE_RESP_SEND_IMM, CQE_RESP_SEND_INV = 0, 1, 2, 3, 4
CQE_REQ_ERR, CQE_RESP_ERR = 13, 14


def encode_cqe(cqe: Cqe, index: int, depth: int) -> bytes:
    """The 64 octets of ``cqe`` as CQE number ``index`` of a CQ of ``depth`` entries.

    Octets not listed in the CQE_* offsets are zero. Owner bit = ``(index // depth) & 1``
    (it flips on every pass around the ring, as on mlx5)."""
    raw = bytearray(CQE_SIZE)
    recv = cqe.opcode in (WcOpcode.RECV, WcOpcode.RECV_RDMA_WITH_IMM)
    if cqe.status is not WcStatus.SUCCESS:
        op = CQE_RESP_ERR if recv else CQE_REQ_ERR
        raw[CQE_SYNDROME] = int(cqe.status) & 0xFF
    elif cqe.opcode is WcOpcode.RECV_RDMA_WITH_IMM:
        op = CQE_RESP_WR_IMM
    elif recv and cqe.invalidated_stag is not None:
        op = CQE_RESP_SEND_INV
    elif recv and cqe.imm is not None:
        op = CQE_RESP_SEND_IMM
    else:
        op = CQE_RESP_SEND if recv else CQE_REQ
    imm = cqe.invalidated_stag if cqe.invalidated_stag is not None else cqe.imm
    if imm is not None:
        raw[CQE_IMM:CQE_IMM + 4] = (imm & 0xFFFFFFFF).to_bytes(4, "big")
    raw[CQE_BYTE_CNT:CQE_BYTE_CNT + 4] = (cqe.byte_len & 0xFFFFFFFF).to_bytes(4, "big")
    raw[CQE_QPN:CQE_QPN + 4] = (cqe.qpn & 0xFFFFFF).to_bytes(4, "big")
    raw[CQE_WQE_COUNTER:CQE_WQE_COUNTER + 2] = (cqe.wqe_index & 0xFFFF).to_bytes(2, "big")
    raw[CQE_OP_OWN] = op << 4 | (index // depth) & 1
    return bytes(raw)


class CompletionQueue:
    """A CQ of ``depth`` entries, number ``cqn`` on its NIC; ``buffer_addr`` (optional) is
    where its CQEs are written in memory (``depth`` x 64 octets)."""

    __slots__ = ("_entries", "_hold", "_waiters", "buffer_addr", "count", "cqn", "depth", "env",
                 "hooks", "ignore_overrun", "incoming", "overwritten", "pending")

    def __init__(self, env: simpy.Environment, cqn: int, depth: int,
                 buffer_addr: int | None = None, ignore_overrun: bool = False) -> None:
        if depth <= 0:
            raise ValueError(f"CQ depth must be positive, got {depth!r}")
        if buffer_addr is not None and (buffer_addr < 0 or buffer_addr % CQE_SIZE):
            raise ValueError(f"CQ buffer address must be 64-octet aligned, got {buffer_addr!r}")
        self.env = env
        self.cqn = cqn
        self.depth = depth
        self.buffer_addr = buffer_addr
        self.count = 0  #: CQEs generated so far (absolute, as WAIT counts)
        #: CQEs the NIC has decided to write and not generated yet (completion unit)
        self.incoming = 0
        self._entries: deque[Cqe] = deque()
        #: the CQEs generated and not polled yet, oldest first (read-only: a cheap test of
        #: whether a poll can find anything, without a call of ``len``)
        self.pending = self._entries
        self._waiters: list[tuple[int, simpy.Event]] = []
        #: called with every CQE generated, after the waiters it satisfies are woken
        #: (a sleeping CPU's filter of the CQEs it acts on: kbtpsim.chains.completions)
        self.hooks: list[Callable[[Cqe], None]] = []
        self._hold = clock_hold(env)
        #: a full CQ overwrites its oldest CQE instead of overrunning (MLNX_OFED's
        #: IBV_EXP_CQ_IGNORE_OVERRUN, which RedN sets on the CQs its chains WAIT on)
        self.ignore_overrun = ignore_overrun
        self.overwritten = 0  #: CQEs lost to overwriting (ignore_overrun)

    def push(self, cqe: Cqe) -> None:
        """Add a CQE (called by the NIC)."""
        if len(self._entries) >= self.depth:
            if self.ignore_overrun:
                self._entries.popleft()
                self.overwritten += 1
            else:
                    raise CqOverrun(f"CQ {self.cqn} overran its depth {self.depth}")
        self._entries.append(cqe)
        self.count += 1
        if cqe.time > self.env.now:  # the DMA write lands then: keep the clock running
            self._hold.hold(cqe.time)
        if self._waiters:
            ready = [w for w in self._waiters if w[0] <= self.count]
            if ready:
                self._waiters = [w for w in self._waiters if w[0] > self.count]
                for _, ev in ready:
                    if not ev.triggered:
                        ev.succeed()
        for hook in self.hooks:
            hook(cqe)

    def landing(self) -> bool:
        """Whether CQEs are on their way that a poll cannot see yet: decided and not
        written (``incoming``: a busy completion unit), or written and not landed (a
        DMA write, one PCIe latency). Their landing times increase in push order (one
        completion unit, posted writes in order), so the last one lands last."""
        entries = self._entries
        return self.incoming > 0 or (bool(entries) and entries[-1].time > self.env.now)

    def slot_addr(self, index: int) -> int:
        """Address of the buffer slot CQE number ``index`` is written to."""
        if self.buffer_addr is None:
            raise ValueError(f"CQ {self.cqn} has no buffer in memory")
        return self.buffer_addr + CQE_SIZE * (index % self.depth)

    def reach(self, count: int) -> simpy.Event:
        """An event that fires once ``count`` CQEs have been generated."""
        ev = self.env.event()
        if self.count >= count:
            ev.succeed()
        else:
            self._waiters.append((count, ev))
        return ev

    def poll(self, max_entries: int = 16) -> list[Cqe]:
        """Up to ``max_entries`` CQEs visible to the CPU now, oldest first."""
        out: list[Cqe] = []
        now = self.env.now
        entries = self._entries
        while entries and len(out) < max_entries and entries[0].time <= now:
            out.append(entries.popleft())
        return out

    def wait(self, n: int = 1):  # type: ignore[no-untyped-def]
        """Process helper: poll until ``n`` CQEs are visible; returns them."""
        got: list[Cqe] = []
        while len(got) < n:
            got += self.poll(n - len(got))
            if len(got) < n:
                nxt = self._entries[0].time if self._entries else None
                if nxt is not None and nxt > self.env.now:
                    yield self.env.timeout(nxt - self.env.now)
                else:
                    ev = self.reach(self.count + 1)
                    yield ev
        return got

    def serve(self, handle: Callable[[Cqe], None], batch: int = 64):  # type: ignore[no-untyped-def]
        """Process helper: forever poll up to ``batch`` CQEs and pass each to ``handle``,
        waiting when none is visible (a CPU's completion-polling loop)."""
        while True:
            cqes = self.poll(batch)
            if not cqes:
                cqes = yield from self.wait(1)
            for cqe in cqes:
                handle(cqe)

    def __len__(self) -> int:
        return len(self._entries)
