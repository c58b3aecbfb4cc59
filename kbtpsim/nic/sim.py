"""A simulation: one simpy environment (time in integer picoseconds) and its NICs.

``Simulation`` is a convenience that owns the environment and an optional tracer; the
pieces (``Nic``, ``connect``) can also be used on any simpy environment.
"""

from __future__ import annotations

import simpy

from kbtpsim.nic.memory import Host
from kbtpsim.nic.network import Link
from kbtpsim.nic.nic import Nic, connect
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.qp import QueuePair
from kbtpsim.nic.trace import Tracer

PS_PER_NS = 1000
PS_PER_US = 1_000_000


class Simulation:
    """Owns ``env`` and ``tracer`` (if ``trace``); builds hosts with NICs."""

    def __init__(self, trace: bool = False, seed: int = 0, fast: bool = False) -> None:
        self.env = simpy.Environment()
        #: every NIC added runs at the fast fidelity (docs/performance.md)
        self.fast = fast
        self.tracer: Tracer | None = Tracer() if trace else None
        self.seed = seed
        self.nics: dict[str, Nic] = {}

    def add_nic(self, name: str, profile: str | NicProfile = "cx5",
                host: Host | None = None) -> Nic:
        """A NIC named ``name`` on ``host`` (a new host of that name by default)."""
        if name in self.nics:
            raise ValueError(f"a NIC named {name!r} exists already")
        prof = get_profile(profile) if isinstance(profile, str) else profile
        nic = Nic(self.env, host or Host(name), prof, name, self.tracer,
                  seed=self.seed + len(self.nics))
        nic.fast = self.fast
        self.nics[name] = nic
        return nic

    def connect(self, qp_a: QueuePair, qp_b: QueuePair, link: Link | None = None) -> Link | None:
        return connect(qp_a, qp_b, link)

    def run(self, until: int | None = None) -> None:
        """Run until no event is left (or until time ``until`` in ps)."""
        self.env.run(until=until)

    @property
    def now(self) -> int:
        return int(self.env.now)
