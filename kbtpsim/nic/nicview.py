"""What a queue pair sees of its NIC.

:class:`NicView` is the part of :class:`~kbtpsim.nic.nic.Nic` that the send pipeline
(:mod:`kbtpsim.nic.qp`, :mod:`kbtpsim.nic.sq_ops`) and the receive side
(:mod:`kbtpsim.nic.rx`) use: the shared units and PCIe, the protection table, host
memory, the CQs and QPs, and CQE generation. Typing the QP against it keeps the imports
one-way: ``nic`` imports ``qp``, which imports ``rx`` and ``sq_ops``; none of them imports
``nic``.
"""

from __future__ import annotations

from typing import Any, Protocol

import simpy

from kbtpsim.nic.cq import CompletionQueue
from kbtpsim.nic.memory import Host
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.protection import ProtectionTable
from kbtpsim.nic.trace import Tracer
from kbtpsim.nic.units import AtomicLocks, Pcie, Unit


class NicView(Protocol):
    """The NIC's side of a QP (implemented by :class:`kbtpsim.nic.nic.Nic`)."""

    env: simpy.Environment
    name: str
    host: Host
    profile: NicProfile
    tracer: Tracer | None
    pt: ProtectionTable
    pcie: Pcie
    locks: AtomicLocks
    cqs: dict[int, CompletionQueue]
    qps: dict[int, Any]  #: QP number -> QueuePair (ENABLE's target)
    atomic_pending: dict[int, tuple[int, object]]
    rdmap: bool
    doorbell_unit: Unit
    fetch_unit: Unit
    decode_unit: Unit
    tx_unit: Unit
    rx_unit: Unit
    atomic_unit: Unit
    doorbell_ps: int
    fetch_ps: int
    decode_ps: int
    tx_ps: int
    rx_ps: int
    atomic_ps: int
    mmio_ps: int
    fast: bool
    fast_bursts: int
    fast_contended: int

    def post_cqe(self, cq: CompletionQueue, label: str = "", earliest: int | None = None,
                 **fields: Any) -> None: ...

    def store(self, addr: int, data: bytes) -> None: ...

    def jitter_ps(self) -> int: ...
