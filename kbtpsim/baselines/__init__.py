"""Baselines for the draft's "Comparison of Approaches": one-sided static, one-sided
dynamic and two-sided block servers on the same NIC, CPU and link models as the KBTP
targets, plus the measurements every approach shares (docs/baselines.md).

* :mod:`~kbtpsim.baselines.server`: :class:`OneSidedStaticServer`,
  :class:`OneSidedDynamicServer`, :class:`TwoSidedServer`;
* :mod:`~kbtpsim.baselines.client`: their initiators, with the request methods of
  :class:`kbtpsim.system.Initiator`;
* :mod:`~kbtpsim.baselines.measure`: round trips, memory held and reserved, target CPU per
  operation, the ``comparison`` block of results.json;
* :mod:`~kbtpsim.baselines.workload`: sequence slots of a static region, DIRECT_* KV ops;
* :mod:`~kbtpsim.baselines.table`: the comparison table of a sweep
  (``python -m kbtpsim.baselines.table DIR -o FILE.md``).
"""

from __future__ import annotations

from typing import Any

from kbtpsim.baselines.client import (
    CLIENTS,
    BaselineClient,
    OneSidedDynamicClient,
    OneSidedStaticClient,
    TwoSidedClient,
)
from kbtpsim.baselines.results import BaselineResult
from kbtpsim.baselines.server import (
    SERVERS,
    BaselineServer,
    Memory,
    OneSidedDynamicServer,
    OneSidedStaticServer,
    Placement,
    TwoSidedServer,
)
from kbtpsim.nic import NicProfile, Simulation
from kbtpsim.scenario.schema import BASELINE_MODES, TargetSpec
from kbtpsim.system.cpu import CpuCosts
from kbtpsim.target import TargetConfig


def make_server(sim: Simulation, config: TargetConfig, tgt: TargetSpec, *,
                profile: NicProfile, costs: CpuCosts) -> BaselineServer:
    """The baseline server of a scenario target (``tgt.mode`` one of BASELINE_MODES)."""
    return SERVERS[tgt.mode](sim, config, name=tgt.name, profile=profile,
                             cores=tgt.cpu.cores, costs=costs, spec=tgt.baseline,
                             staging_bytes=min(tgt.staging, 64 << 20))


def make_client(sim: Simulation, name: str, tgt: TargetSpec, **kwargs: Any) -> BaselineClient:
    """A baseline initiator for target ``tgt`` (keyword arguments as BaselineClient's)."""
    return CLIENTS[tgt.mode](sim, name, **kwargs)


__all__ = [
    "BASELINE_MODES", "CLIENTS", "SERVERS", "BaselineClient", "BaselineResult",
    "BaselineServer", "Memory", "OneSidedDynamicClient", "OneSidedDynamicServer",
    "OneSidedStaticClient", "OneSidedStaticServer", "Placement", "TwoSidedClient",
    "TwoSidedServer", "make_client", "make_server",
]
