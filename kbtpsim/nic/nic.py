"""The NIC: its units, protection table, CQs and QPs, and QP connection.

``Nic(env, host, profile)`` builds one NIC on a host. Times are integer picoseconds; the
profile's cycle counts are converted once with its clock. Every unit is a
:class:`~kbtpsim.nic.units.Unit` (a simpy Resource) shared by all the NIC's QPs, so QPs
contend for it. The NIC knows nothing of KBTP.

Typical use::

    nic = Nic(env, Host("server"), PROFILES["cx5"])
    mr = nic.register_mr(addr, length, Access.LOCAL_WRITE | Access.REMOTE_READ)
    cq = nic.create_cq(256)
    qp = nic.create_qp(cq, cq, sq_depth=64, rq_depth=64)
    connect(qp, peer_qp)           # another NIC, or this one (loopback)
    qp.post_send(WorkRequest(...)); qp.ring_doorbell(); env.run()
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import simpy

from kbtpsim.nic.cq import CompletionQueue, Cqe, encode_cqe, make_cqe
from kbtpsim.nic.errors import CapabilityError, NicError
from kbtpsim.nic.memory import Host
from kbtpsim.nic.network import Link, LinkDirection
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.protection import Access, MemoryRegion, ProtectionTable
from kbtpsim.nic.qp import QueuePair
from kbtpsim.nic.qpstate import QpState
from kbtpsim.nic.trace import Tracer
from kbtpsim.nic.units import DM_BASE, AtomicLocks, Pcie, Unit
from kbtpsim.nic.wake import call_at

#: Rights of a send ring's region: local and remote write, read, and (if the profile has
#: ``cas_on_wqe``) remote atomics, so NIC operations can rewrite WQEs.
RING_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


class Nic:
    """One RDMA NIC with one port, on ``host``."""

    def __init__(self, env: simpy.Environment, host: Host, profile: NicProfile,
                 name: str | None = None, tracer: Tracer | None = None, seed: int = 0) -> None:
        self.env = env
        self.host = host
        self.profile = p = profile
        self.name = name or host.name
        self.tracer = tracer
        self.pt = ProtectionTable()
        self.cqs: dict[int, CompletionQueue] = {}
        self.qps: dict[int, QueuePair] = {}
        self._next_qpn = 0x100
        self._dm_next = DM_BASE
        self._watch: dict[int, list[simpy.Event]] = {}
        self._rings: list[tuple[int, int]] = []  # send-ring address ranges
        self._rng = random.Random(seed)
        #: address -> (value, token): results of atomics whose posted write to memory is
        #: not visible yet; the atomic unit forwards them to the next atomic on that address
        self.atomic_pending: dict[int, tuple[int, object]] = {}
        #: fast fidelity (``run.fidelity: fast``): a message's packets booked in closed
        #: form, one event per message (docs/performance.md, "Fast fidelity")
        self.fast = False
        self.fast_bursts = 0  #: bursts the fast transmitter booked
        self.fast_contended = 0  #: of which found the transmit unit busy (another QP)
        #: fault injection (kbtpsim.oracle.faults, ``cqe``): extra ps before a CQE of a
        #: CQ is generated; CQEs stay in order on each CQ
        self.cqe_hook: Callable[[CompletionQueue], int] | None = None
        self._cqe_last: dict[int, int] = {}
        cyc = p.cycle_ps
        self.doorbell_ps = round(p.doorbell_cycles * cyc)
        self.fetch_ps = round(p.fetch_cycles * cyc)
        self.decode_ps = round(p.decode_cycles * cyc)
        self.tx_ps = round(p.tx_cycles * cyc)
        self.rx_ps = round(p.rx_cycles * cyc)
        self.atomic_ps = round(p.atomic_cycles * cyc)
        self.cqe_ps = round(p.cqe_cycles * cyc)
        self.mmio_ps = round(p.mmio_ns * 1000)
        self.rdmap = p.placement == "rdmap"
        self._jitter_ps = round(p.ooo_jitter_ns * 1000)
        n = self.name

        def unit(uname: str, cap: int = 1) -> Unit:
            return Unit(env, uname, cap, n, tracer)

        self.doorbell_unit = unit("doorbell")
        self.fetch_unit = unit("wqe_fetch", p.dma_engines)
        self.decode_unit = unit("decode", p.pu_count)
        self.tx_unit = unit("tx", p.pu_count)
        self.rx_unit = unit("rx", p.pu_count)
        self.atomic_unit = unit("atomic", p.atomic_units)
        self.cqe_unit = unit("completion", p.pu_count)
        self.pcie = Pcie(env, gbps=p.pcie_gbps, latency_ns=p.pcie_latency_ns,
                         mem_ns=p.host_mem_ns, nic_mem_ns=p.nic_mem_ns, mps=p.pcie_mps,
                         tlp_overhead=p.pcie_tlp_overhead, nic=n, tracer=tracer)
        self.locks = AtomicLocks(p.atomic_lock_slots)
        self.loopback = LinkDirection(env, "loopback", p.loopback_gbps,
                                      round(p.loopback_ns * 1000), 0, tracer, n)

    # ------------------------------------------------------------------ memory
    def register_mr(self, addr: int, length: int, access: Access, *,
                    base_to: int | None = None, stag: int | None = None) -> MemoryRegion:
        """Register host (or device) memory; lkey == rkey == ``stag``.

        ``base_to`` is the Tagged Offset of ``addr`` (default ``addr``, as in InfiniBand;
        an upper-layer protocol whose offsets start elsewhere, e.g. KBTP's Block Offsets,
        passes its own); ``stag`` asks for a particular STag (default: the next free one).
        Without ``cas_on_wqe`` a region over a send ring cannot carry REMOTE_ATOMIC."""
        if access & Access.REMOTE_ATOMIC and not self.profile.cas_on_wqe:
            for lo, hi in self._rings:
                if addr < hi and lo < addr + length:
                    raise CapabilityError(f"profile {self.profile.name!r} has no CAS-on-WQE: "
                                          "a send ring cannot be registered for atomics")
        return self.pt.register(addr, length, access, base_to=base_to,
                                in_nic_memory=addr >= DM_BASE, stag=stag)

    def register_strided(self, addr: int, entry_size: int, n_entries: int, stride: int,
                         access: Access, base_index: int = 0) -> MemoryRegion:
        """A strided key (profile capability ``strided_keys``): TO ``k * stride + j`` is
        byte ``j`` of entry ``k - base_index`` at ``addr + entry_size * (k - base_index)``."""
        if not self.profile.strided_keys:
            raise CapabilityError(f"profile {self.profile.name!r} has no strided keys")
        return self.pt.register_strided(addr, entry_size, n_entries, stride, access,
                                        base_index)

    def bind_mw(self, parent: MemoryRegion, qp: QueuePair, addr: int, length: int,
                access: Access, *, base_to: int | None = None,
                stag: int | None = None) -> MemoryRegion:
        """Bind a memory window over part of ``parent`` to ``qp`` (done at once: the bind
        WR's cost is not modelled). ``base_to``: Tagged Offset of ``addr`` (default
        ``addr``); ``stag``: a particular STag (default: the next free one)."""
        return self.pt.bind_window(parent, qp.qpn, addr, length, access, base_to=base_to,
                                   stag=stag)

    def invalidate(self, stag: int) -> bool:
        """Invalidate an STag locally (as LOCAL_INV does); False if it was not valid."""
        return self.pt.invalidate(stag)

    def dm_alloc(self, size: int, align: int = 64) -> int:
        """Reserve NIC device memory (addresses from ``DM_BASE``)."""
        addr = (self._dm_next + align - 1) & ~(align - 1)
        self._dm_next = addr + size
        return addr

    def store(self, addr: int, data: bytes | memoryview) -> None:
        """A DMA write becoming visible (wakes :meth:`watch` events)."""
        self.host.memory.write(addr, data)
        if self._watch:
            for a in [a for a in self._watch if addr <= a < addr + len(data)]:
                for ev in self._watch.pop(a):
                    ev.succeed(self.env.now)

    def watch(self, addr: int) -> simpy.Event:
        """An event fired when a NIC write covering ``addr`` becomes visible (a CPU that
        polls memory, as perftest's latency tests do)."""
        ev = self.env.event()
        self._watch.setdefault(addr, []).append(ev)
        return ev

    def post_cqe(self, cq: CompletionQueue, label: str = "", earliest: int | None = None,
                 **fields: Any) -> None:
        """Generate a CQE (completion unit, then a 64-octet DMA write). It counts for WAIT
        when its write is issued and is visible to a polling CPU one PCIe latency later."""
        t1 = self.cqe_unit.reserve(self.cqe_ps, label, earliest)
        if self.cqe_hook is not None:  # a fault: generated late, in order on its CQ
            t1 = max(t1 + self.cqe_hook(cq), self._cqe_last.get(cq.cqn, 0))
            self._cqe_last[cq.cqn] = t1
        visible = self.pcie.write_visible(0, 64, label, t1)
        cqe = make_cqe(time=visible, **fields)
        cq.incoming += 1
        if cq.buffer_addr is None:
            call_at(self.env, visible - self.pcie.lat_ps, lambda _e: self._push(cq, cqe))
        else:
            call_at(self.env, visible - self.pcie.lat_ps,
                    lambda _e: self._push_stored(cq, cqe, visible))

    @staticmethod
    def _push(cq: CompletionQueue, cqe: Cqe) -> None:
        cq.incoming -= 1
        cq.push(cqe)

    def _push_stored(self, cq: CompletionQueue, cqe: Cqe, visible: int) -> None:
        """Count ``cqe`` on ``cq`` now (its write is issued) and store its 64 octets in the
        CQ buffer when the write lands."""
        index = cq.count
        cq.incoming -= 1
        cq.push(cqe)
        addr = cq.slot_addr(index)
        raw = encode_cqe(cqe, index, cq.depth)
        call_at(self.env, max(visible, self.env.now), lambda _e: self.store(addr, raw))

    def jitter_ps(self) -> int:
        return self._rng.randrange(self._jitter_ps + 1) if self._jitter_ps else 0

    # ------------------------------------------------------------------ queues
    def create_cq(self, depth: int = 1024, buffer_addr: int | None = None, *,
                  ignore_overrun: bool = False) -> CompletionQueue:
        """A CQ of ``depth`` entries. With ``buffer_addr`` (64-octet aligned, ``depth`` x 64
        octets the caller owns), every CQE is also written there in the mlx5 64-octet
        layout (:func:`~kbtpsim.nic.cq.encode_cqe`); without, CQEs exist only as objects.
        ``ignore_overrun``: a full CQ overwrites its oldest CQE (MLNX_OFED
        ``IBV_EXP_CQ_IGNORE_OVERRUN``) instead of failing."""
        cq = CompletionQueue(self.env, len(self.cqs) + 1, depth, buffer_addr, ignore_overrun)
        self.cqs[cq.cqn] = cq
        return cq

    def create_qp(self, send_cq: CompletionQueue, recv_cq: CompletionQueue, sq_depth: int = 64,
                  rq_depth: int = 64, *, managed: bool = False,
                  sq_in_nic_memory: bool = False) -> QueuePair:
        """A QP whose send ring is registered (``qp.sq_mr``) so WQEs can be rewritten."""
        if sq_depth <= 0 or rq_depth <= 0:
            raise ValueError("sq_depth and rq_depth must be positive")
        if managed and not self.profile.wait_enable:
            raise CapabilityError(f"profile {self.profile.name!r} has no managed QPs "
                                  "(no WAIT/ENABLE)")
        for cq in (send_cq, recv_cq):
            if self.cqs.get(cq.cqn) is not cq:
                raise NicError("CQ belongs to another NIC")
        p = self.profile
        sq_len = sq_depth * p.sq_wqe_size
        sq_addr = self.dm_alloc(sq_len, 4096) if sq_in_nic_memory else \
            self.host.alloc(sq_len, 4096)
        rq_len = rq_depth * p.rq_wqe_size
        rq_addr = self.host.alloc(rq_len, 4096)
        access = RING_ACCESS | (Access.REMOTE_ATOMIC if p.cas_on_wqe else Access.LOCAL_READ)
        sq_mr = self.register_mr(sq_addr, sq_len, access)
        self._rings.append((sq_addr, sq_addr + sq_len))
        rq_mr = self.register_mr(rq_addr, rq_len, RING_ACCESS)
        qpn = self._next_qpn
        self._next_qpn += 1
        qp = QueuePair(self, qpn, send_cq, recv_cq, sq_depth, rq_depth, managed, sq_addr,
                       rq_addr, sq_mr, rq_mr)
        self.qps[qpn] = qp
        return qp


def connect(qp_a: QueuePair, qp_b: QueuePair, link: Link | None = None) -> Link | None:
    """Connect two QPs (RC). QPs of one NIC (or one QP with itself) use its loopback path;
    otherwise ``link`` (default: one built from ``qp_a``'s profile) joins the two ports."""
    for qp in (qp_a, qp_b):
        if qp.peer is not None and not (qp_a is qp_b and qp.peer is qp):
            raise NicError(f"QP {qp.qpn} is already connected")
    if qp_a.nic is qp_b.nic:
        if not qp_a.nic.profile.loopback:
            raise CapabilityError(f"profile {qp_a.nic.profile.name!r} has no loopback QPs")
        qp_a.out = qp_b.out = qp_a.nic.loopback
    else:
        if link is None:
            p = qp_a.nic.profile
            link = Link(qp_a.env, gbps=p.link_gbps, propagation_ns=p.propagation_ns + p.phy_ns,
                        switch_ns=p.switch_ns, overhead=p.wire_overhead, tracer=qp_a.nic.tracer,
                        names=(qp_a.nic.name, qp_b.nic.name))
        qp_a.out, qp_b.out = link.a_to_b, link.b_to_a
    qp_a.peer, qp_b.peer = qp_b, qp_a
    for qp in (qp_a, qp_b):
        qp.out.senders.add(id(qp))  # type: ignore[union-attr]
    for qp in (qp_a, qp_b):
        if qp.state is QpState.INIT:
            qp.state = QpState.RTS
    return link
