"""The NIC model: an RDMA NIC that knows nothing of KBTP.

Hosts with sparse memory, memory regions and windows, a binary mlx5-shaped WQE format in
registered memory, RC queue pairs with WQE prefetch, cross-channel WAIT/ENABLE, atomics
through a lock table, a PCIe and network timing model in integer picoseconds, per-WR traces
in Chrome trace-event JSON, and named profiles (``PROFILES``). See docs/nic-model.md.

Building blocks for a chain compiler:

* ``Simulation`` / ``Nic`` / ``Host`` / ``connect``: the topology;
* ``nic.register_mr``, ``nic.create_cq``, ``nic.create_qp(..., managed=True)``;
* ``WorkRequest`` / ``Sge`` / ``Opcode`` / ``WqeFlags``; ``qp.post_send``, ``qp.post_recv``,
  ``qp.ring_doorbell``;
* ``qp.wqe_field_addr(index, field)`` and ``qp.recv_field_addr(index, sge, field)``: where a
  scatter entry or an atomic must point to rewrite a WQE; ``qp.sq_mr.lkey`` names the ring.
"""

from kbtpsim.nic.cq import CompletionQueue, Cqe, WcOpcode
from kbtpsim.nic.errors import (
    CapabilityError,
    CqOverrun,
    NicError,
    ProtectionError,
    RingFull,
    WcStatus,
    WqeDecodeError,
)
from kbtpsim.nic.memory import Host, SparseMemory
from kbtpsim.nic.network import Link
from kbtpsim.nic.nic import Nic, connect
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.profiles import PROFILES, get_profile
from kbtpsim.nic.protection import Access, MemoryRegion
from kbtpsim.nic.qp import QueuePair
from kbtpsim.nic.qpstate import QpState
from kbtpsim.nic.sim import Simulation
from kbtpsim.nic.trace import Tracer
from kbtpsim.nic.units import DM_BASE
from kbtpsim.nic.wqe import (
    Condition,
    Opcode,
    Sge,
    WorkRequest,
    WqeFlags,
    ctrl_word,
    decode_recv,
    decode_wqe,
    encode_recv,
    encode_wqe,
    field_layout,
    field_mask,
)

__all__ = [
    "DM_BASE", "PROFILES", "Access", "CapabilityError", "CompletionQueue", "Condition",
    "CqOverrun", "Cqe", "Host", "Link", "MemoryRegion", "Nic", "NicError", "NicProfile",
    "Opcode", "ProtectionError", "QpState", "QueuePair", "RingFull", "Sge", "Simulation",
    "SparseMemory", "Tracer", "WcOpcode", "WcStatus", "WorkRequest", "WqeDecodeError",
    "WqeFlags", "connect", "ctrl_word", "decode_recv", "decode_wqe", "encode_recv",
    "encode_wqe", "field_layout", "field_mask", "get_profile",
]
