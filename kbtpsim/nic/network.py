"""Links between NIC ports: serialisation, MTU overhead, propagation, PHY and switch latency.

A :class:`Link` has two :class:`LinkDirection` s. Each direction is a FIFO server: a packet
occupies it for its wire time (payload plus ``wire_overhead`` octets of headers, CRC,
preamble and gap at the link rate) and arrives ``delay_ps`` after it has left (propagation,
PHY/FEC and switch latency). Loopback QPs use a NIC-internal direction with the profile's
loopback rate and latency. Delivery is one simpy timeout per packet.

Connections that share a port (a server's access link) but not their path use
:meth:`Link.branch`: a link with its own delay whose two directions serialise on the
port's (``LinkDirection.wire``).

:data:`TAPS` lets a packet capture (:class:`kbtpsim.nic.pcap.Capture`) see every packet
sent in one simpy environment; with no tap registered a send pays one test of an empty
dict, and a tap never changes simulated time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy

from kbtpsim.nic.trace import Tracer
from kbtpsim.nic.units import Unit
from kbtpsim.nic.wake import call_at

#: environment -> ``tap(pkt, deliver, start_ps)``, called for every packet sent in that
#: environment with the time its first octet goes on the wire (kbtpsim.nic.pcap)
TAPS: dict[simpy.Environment, Callable[[Any, Callable[[Any], None], int], None]] = {}


class LinkDirection:
    """One direction of a link."""

    __slots__ = ("_last_arrival", "delay_ps", "env", "fault_hook", "overhead", "ps_per_byte",
                 "senders", "wire")

    def __init__(self, env: simpy.Environment, name: str, gbps: float, delay_ps: int,
                 overhead: int, tracer: Tracer | None = None, nic: str = "") -> None:
        self.env = env
        self.ps_per_byte = 8000.0 / gbps
        self.delay_ps = delay_ps
        self.overhead = overhead
        self.wire = Unit(env, name, 1, nic, tracer)
        #: the QPs that send through ``wire`` (shared with every :meth:`sharing` twin);
        #: the fast fidelity books bursts ahead only on a serialiser with one sender
        self.senders: set[int] = set()
        #: fault injection (kbtpsim.oracle): ``hook(pkt)`` -> extra ps the packet stays in
        #: flight; later packets of the direction still arrive after it (in order)
        self.fault_hook: Callable[[Any], int] | None = None
        self._last_arrival = 0

    @property
    def busy_ps(self) -> int:
        return self.wire.busy_ps

    def wire_ps(self, nbytes: int) -> int:
        return round((nbytes + self.overhead) * self.ps_per_byte)

    def sharing(self, delay_ps: int) -> LinkDirection:
        """A direction with delay ``delay_ps`` that shares this one's serialiser (its
        rate, overhead and ``wire``): packets of both queue in one FIFO."""
        twin = LinkDirection.__new__(LinkDirection)
        twin.env = self.env
        twin.ps_per_byte = self.ps_per_byte
        twin.delay_ps = delay_ps
        twin.overhead = self.overhead
        twin.wire = self.wire
        twin.senders = self.senders
        twin.fault_hook = None
        twin._last_arrival = 0
        return twin

    def send(self, pkt: Any, deliver: Callable[[Any], None], at: int | None = None) -> None:
        """Queue ``pkt`` (at time ``at``, default now: the fast fidelity books a burst's
        packets ahead); ``deliver(pkt)`` is called when it arrives at the far end."""
        env = self.env
        busy = self.wire_ps(pkt.wire_len)
        left = self.wire.reserve(busy, pkt, at)
        if TAPS:
            tap = TAPS.get(env)
            if tap is not None:
                tap(pkt, deliver, left - busy)
        at_far_end = left + self.delay_ps
        if self.fault_hook is not None:  # held in flight, in order (a fault)
            at_far_end = max(at_far_end + self.fault_hook(pkt), self._last_arrival)
            self._last_arrival = at_far_end
        call_at(env, at_far_end, lambda ev: deliver(ev.value), pkt)


class Link:
    """A full-duplex link; ``a_to_b`` and ``b_to_a`` are its two directions."""

    __slots__ = ("a_to_b", "b_to_a")

    def __init__(self, env: simpy.Environment, *, gbps: float, propagation_ns: float,
                 switch_ns: float = 0.0, overhead: int = 78, tracer: Tracer | None = None,
                 names: tuple[str, str] = ("a", "b")) -> None:
        delay = round((propagation_ns + switch_ns) * 1000)
        self.a_to_b = LinkDirection(env, "link.tx", gbps, delay, overhead, tracer, names[0])
        self.b_to_a = LinkDirection(env, "link.tx", gbps, delay, overhead, tracer, names[1])

    def branch(self, *, propagation_ns: float, switch_ns: float = 0.0) -> Link:
        """A link for one more connection through this port: its own delay
        (``propagation_ns + switch_ns``), and this link's rate, overhead and two
        serialisers (``a_to_b`` and ``b_to_a``), so every connection branched off one
        port queues on it in both directions."""
        delay = round((propagation_ns + switch_ns) * 1000)
        link = Link.__new__(Link)
        link.a_to_b = self.a_to_b.sharing(delay)
        link.b_to_a = self.b_to_a.sharing(delay)
        return link
