"""The system layer: KBTP initiators and a software target server, each on its own
simulated NIC (:mod:`kbtpsim.nic`), exchanging real KBTP bytes. See docs/system.md.

* :class:`SoftwareTargetServer` (server.py): target host + NIC + CPU running
  :class:`kbtpsim.target.Target`; hooks for NIC-offloaded subclasses.
* :class:`Initiator` (initiator.py): request methods returning simpy processes whose value
  is an :class:`OpResult` (results.py); DIRECT_LOAD / DIRECT_ALLOC one-sided (direct.py).
* :class:`TargetCpu`, :class:`CpuCosts` (cpu.py): cores, costs, busy time per operation.
* :class:`Cluster` (cluster.py): a server and K initiators behind one switch port.
"""

from kbtpsim.system.cluster import Cluster
from kbtpsim.system.cpu import DEFAULT_OP_NS, CpuCosts, TargetCpu
from kbtpsim.system.initiator import (
    ConnectionLost,
    HelloRejected,
    Initiator,
    OpResult,
    RdmaError,
)
from kbtpsim.system.server import ServerConnection, SoftwareTargetServer, replay
from kbtpsim.system.staging import Staging, StagingFull

__all__ = [
    "DEFAULT_OP_NS",
    "Cluster",
    "ConnectionLost",
    "CpuCosts",
    "HelloRejected",
    "Initiator",
    "OpResult",
    "RdmaError",
    "ServerConnection",
    "SoftwareTargetServer",
    "Staging",
    "StagingFull",
    "TargetCpu",
    "replay",
]
