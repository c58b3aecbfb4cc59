"""A small system: one software target server and K initiators on one simulation.

Topology: every initiator's NIC reaches the server's single port through a switch. The
server port is one full-duplex :class:`~kbtpsim.nic.Link` shared by all connections
(``shared_port=True``, default): its two directions serialise everything that enters and
leaves the server, with the profile's propagation, PHY and switch delay; the initiators'
own uplinks are not separately serialised (the server port is the bottleneck of a
many-to-one workload). With ``shared_port=False`` each initiator gets its own
point-to-point link (a direct cable, as in the NIC calibration). A later scenario layer can
build other topologies with ``SoftwareTargetServer.accept(qp, link)``.

Example::

    cluster = Cluster.build(config, initiators=["a", "b"], profile="cx5")
    def work():
        yield cluster.connect_all()
        a = cluster.initiators["a"]
        res = yield a.alloc_store(0x1000, b"hello", seal=True)
        res = yield a.load(0x1000)
        assert res.data == b"hello"
    cluster.run(work())
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import simpy

from kbtpsim.nic import Link, NicProfile, Simulation, get_profile
from kbtpsim.system.cpu import CpuCosts
from kbtpsim.system.initiator import Initiator
from kbtpsim.system.server import SoftwareTargetServer
from kbtpsim.target import TargetConfig
from kbtpsim.wire import Feature


class Cluster:
    """A :class:`SoftwareTargetServer` and named :class:`Initiator` s on one
    :class:`~kbtpsim.nic.Simulation`."""

    def __init__(self, sim: Simulation, server: SoftwareTargetServer,
                 port: Link | None) -> None:
        self.sim = sim
        self.server = server
        self.port = port
        self.initiators: dict[str, Initiator] = {}

    @classmethod
    def build(cls, config: TargetConfig, initiators: Iterable[str] | None = None, *,
              profile: str | NicProfile = "cx5", seed: int = 0, cores: int = 1,
              costs: CpuCosts | None = None, direct: bool | None = None,
              shared_port: bool = True, switch_ns: float | None = None,
              completion_credits: int = 64, trace: bool = False) -> Cluster:
        """A server for ``config`` and one initiator per name in ``initiators`` (default:
        the configuration's initiator names, each using its configured Initiator ID and
        requesting the features configured for it)."""
        sim = Simulation(trace=trace, seed=seed)
        server = SoftwareTargetServer(sim, config, profile=profile, cores=cores,
                                      costs=costs, direct=direct)
        port = None
        if shared_port:
            p = profile if isinstance(profile, NicProfile) else get_profile(profile)
            port = Link(sim.env, gbps=p.link_gbps, propagation_ns=p.propagation_ns + p.phy_ns,
                        switch_ns=p.switch_ns if switch_ns is None else switch_ns,
                        overhead=p.wire_overhead, tracer=sim.tracer,
                        names=(server.name, "switch"))
        cluster = cls(sim, server, port)
        by_name = {i.name: i for i in config.initiators}
        names = list(by_name) if initiators is None else list(initiators)
        for name in names:
            ini_cfg = by_name.get(name)
            cluster.add_initiator(
                name, seed=seed, profile=profile, completion_credits=completion_credits,
                counter_mode=config.counter_mode,
                initiator_id=None if ini_cfg is None else ini_cfg.initiator_id,
                requested_features=Feature(0) if ini_cfg is None else ini_cfg.features)
        return cluster

    def add_initiator(self, name: str, **kwargs: Any) -> Initiator:
        """A new :class:`Initiator` (keyword arguments as its constructor's)."""
        ini = Initiator(self.sim, name, **kwargs)
        self.initiators[name] = ini
        return ini

    def connect(self, name: str) -> simpy.Process:
        """Process: connect initiator ``name`` (through the shared port if any)."""
        return self.initiators[name].connect(self.server, self.port)

    def connect_all(self) -> simpy.Event:
        """Event: every initiator connected and its session established."""
        return self.sim.env.all_of([self.connect(n) for n in self.initiators])

    def run(self, work: Generator[simpy.Event, Any, Any] | simpy.Event | None = None,
            until: int | None = None) -> Any:
        """Run ``work`` (a generator, started as a process, or an event) to its end and
        return its value; without ``work``, run until ``until`` (ps) or no event is left.
        The server's timers keep the simulation alive while tickets or retained sessions
        have deadlines, so a bounded ``work`` is the usual way to stop."""
        env = self.sim.env
        if work is None:
            env.run(until=until)
            return None
        proc = env.process(work) if isinstance(work, Generator) else work
        return env.run(until=proc)


__all__ = ["Cluster"]
