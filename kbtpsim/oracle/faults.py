"""Faults the oracle injects; none changes what a correct target must answer.

* ``delay``: delay one chain at one WR (:class:`DelayChain`: an initiator's n-th chain
  that runs a given variant is held before the named WR executes), e.g. X's allocation
  between its FetchAdd on Head and its slot Read (the draft's interleaving example);
* ``stall``: stall WQE fetches of the target's chain queues at random (a seeded draw per
  fetch: probability ``stall_p``, up to ``stall_ns``);
* ``reorder``: RDMAP placement (RFC 5040 rule 3) at the initiators: RDMA Write packets
  (LOAD data) are placed with a random extra delay of up to ``reorder_ns`` (500 ns; profile
  ``placement="rdmap"``, ``ooo_jitter_ns``); a Send still waits for earlier Write data
  (rule 5, the draft's "Completion"). ``reorder-target`` also places the target NIC's
  own (loopback) Writes that way (up to 2 us): the chains' patches and markers then may
  land after their CQE (decision O7);
* ``slot``: a free's slot write stays in flight ``slot_ns`` (the slot keeps its consumed
  contents, then the Block Offset and the Sequence land): an allocation that takes that
  ticket meanwhile finds the slot not ready (decision C4);
* ``drop``: connection failures: with probability ``drop_p`` per operation an initiator's
  connection is torn down while its request is in flight, and it reconnects;
* ``rogue``: one more initiator, offered DIRECT_ALLOC, takes tickets with FetchAdd on its
  Head and never binds them (the draft's "Security Considerations"): the target abandons
  them at the Ticket Timeout and reclaims the slots.

:func:`parse_faults` reads the CLI's ``--faults delay,stall,...`` list.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.vocab import W_GS
from kbtpsim.nic import NicProfile

if TYPE_CHECKING:
    from kbtpsim.oracle.node import ObservedServer
    from kbtpsim.system.server import ServerConnection

FAULT_NAMES = ("delay", "stall", "hold", "cqe", "wire", "reorder", "reorder-target", "slot",
               "drop", "rogue")


@dataclass(frozen=True)
class DelayChain:
    """Hold ``initiator``'s ``nth`` chain that runs ``variant`` (0: the first) for
    ``delay_ns`` before WR ``wr`` executes."""

    initiator: str
    variant: str
    wr: str
    delay_ns: float
    nth: int = 0


@dataclass(frozen=True)
class Faults:
    """Which faults a campaign injects (all off by default)."""

    delay: DelayChain | None = None
    stall_p: float = 0.0
    stall_ns: float = 2000.0
    reorder_ns: float = 0.0
    reorder_target: bool = False  #: the target's NIC places its Writes RDMAP-style too
    slot_ns: float = 0.0
    drop_p: float = 0.0
    rogue: bool = False
    #: each CQE of the target's NIC is generated late with this probability, by up to
    #: ``cqe_ns`` (in order on its CQ: a busy completion engine)
    cqe_p: float = 0.0
    cqe_ns: float = 2000.0
    #: each WR of the target's chain queues, once fetched, is held before it executes
    #: with this probability, by up to ``hold_ns`` (a slow processing unit)
    hold_p: float = 0.0
    hold_ns: float = 2000.0
    #: each packet on the target NIC's loopback path (its chains' Reads, atomics, Writes
    #: and their responses) stays in flight longer with this probability, by up to
    #: ``wire_ns``, the packets behind it waiting (in order): a connection failure then
    #: finds more of a chain's work requests on their way
    wire_p: float = 0.0
    wire_ns: float = 2000.0

    @property
    def names(self) -> list[str]:
        out = []
        for name, on in (("delay", self.delay is not None), ("stall", self.stall_p > 0),
                         ("hold", self.hold_p > 0), ("cqe", self.cqe_p > 0),
                         ("wire", self.wire_p > 0),
                         ("reorder", self.reorder_ns > 0 and not self.reorder_target),
                         ("reorder-target", self.reorder_target), ("slot", self.slot_ns > 0),
                         ("drop", self.drop_p > 0), ("rogue", self.rogue)):
            if on:
                out.append(name)
        return out

    def profile(self, prof: NicProfile, target: bool = False) -> NicProfile:
        """The profile of an initiator's NIC (``target``: of the target's) with RDMAP
        placement jitter, if ``reorder`` (``reorder_target`` for the target's)."""
        if self.reorder_ns <= 0 or (target and not self.reorder_target):
            return prof
        return replace(prof, placement="rdmap", ooo_jitter_ns=self.reorder_ns)


def parse_faults(text: str) -> Faults:
    """``"stall,reorder"`` -> Faults; raises ValueError naming an unknown fault."""
    f = Faults()
    for name in filter(None, (t.strip() for t in text.split(","))):
        if name == "stall":
            f = replace(f, stall_p=0.05)
        elif name == "hold":
            f = replace(f, hold_p=0.02)
        elif name == "cqe":
            f = replace(f, cqe_p=0.05)
        elif name == "wire":
            f = replace(f, wire_p=0.3)
        elif name == "reorder":
            f = replace(f, reorder_ns=500.0)
        elif name == "reorder-target":
            f = replace(f, reorder_ns=2000.0, reorder_target=True)
        elif name == "slot":
            f = replace(f, slot_ns=20_000.0)
        elif name == "drop":
            f = replace(f, drop_p=0.04)
        elif name == "rogue":
            f = replace(f, rogue=True)
        elif name == "delay":
            f = replace(f, delay=DelayChain("a", "alloc_inline", "ai_read_slot", 30_000.0))
        else:
            raise ValueError(f"unknown fault {name!r} (known: {', '.join(FAULT_NAMES)})")
    return f


def _armed(server: ObservedServer, conn: ServerConnection, credit: int, variant: str) -> bool:
    """Whether ``credit`` of ``conn`` runs ``variant`` (its arm word so far is set)."""
    cs = server.chain_server(conn)
    cr = cs.live.get(credit)
    if cr is None:
        return False
    mem = server.nic.host.memory
    word = f"arm2_{variant}" if VARIANTS[variant].op == "ALLOC_STORE" else f"arm_{variant}"
    at = cr.bufs.get(word)
    if at is None and variant == "load" and "w_load" in cr.bufs:  # C21: no arm word; its
        at = cr.bufs["w_load"] + W_GS  # Generation/Status marker's octet in its own word
    if at is None:
        return False
    return mem.read(at, 1) == b"\x01"


def install(server: ObservedServer, faults: Faults, seed: int,
            counts: dict[str, int] | None = None) -> Callable[[ServerConnection], None]:
    """Install the target-side faults; returns the hook to call for each new connection
    (chain queue faults are per connection). ``counts`` gets how often each fired."""
    rng = random.Random(f"kbtpsim-faults:{seed}")
    counts = {} if counts is None else counts

    def count(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    env = server.env
    if faults.slot_ns > 0:
        delay = round(faults.slot_ns * 1000)
        mem = server.nic.host.memory

        def in_flight(addr: int, before: bytes, after: bytes) -> None:
            mem.write(addr, before)  # the write has not landed yet
            count("slot_writes_delayed")

            def land(_e: object) -> None:
                mem.write(addr + 8, after[8:])  # Block Offset first,
                mem.write(addr, after[:8])  # then the Sequence (draft, "Free-Block Ring")
                server.kick()

            env.timeout(delay).callbacks.append(land)

        server.slot_write_hook = in_flight
    def sometimes(p: float, ns: float, event: str) -> Callable[[object], int]:
        """A hook: with probability ``p`` an extra delay of up to ``ns`` (counted)."""
        ps = round(ns * 1000)

        def extra(_what: object) -> int:
            if rng.random() < p:
                count(event)
                return rng.randrange(1, ps + 1)
            return 0

        return extra

    if faults.cqe_p > 0:  # late CQEs (a busy completion engine)
        server.nic.cqe_hook = sometimes(faults.cqe_p, faults.cqe_ns, "cqe_delays")
    if faults.wire_p > 0:  # loopback packets held in flight
        server.nic.loopback.fault_hook = sometimes(faults.wire_p, faults.wire_ns,
                                                   "wire_holds")
    seen: dict[str, int] = {}

    def per_connection(conn: ServerConnection) -> None:
        cs = server.chain_server(conn)
        if cs.software:
            return
        name = conn.name
        d = faults.delay
        stall_ps = round(faults.stall_ns * 1000)
        hold_ps = round(faults.hold_ns * 1000)
        # every queue of the connection's chains: with chains v2 those of each credit
        # slot (master, workers, lanes, sub-masters, advancers), not only the roles',
        # and the recyclers that re-arm the slots
        for qp in [*cs.queues().values(), *getattr(cs, "recyclers", ())]:
            done: set[tuple[str, int]] = set()

            def hook(phase: str, index: int, qp=qp, done=done) -> int:  # type: ignore[no-untyped-def]
                if (phase, index) in done:
                    return 0
                done.add((phase, index))
                if phase == "fetch" and faults.stall_p > 0 and rng.random() < faults.stall_p:
                    count("fetch_stalls")
                    return rng.randrange(1, stall_ps + 1)
                if phase == "exec" and d is not None and d.initiator == name:
                    for n, cr in cs.live.items():
                        at = cr.index.get(d.wr)
                        if at is not None and at[0] is qp and at[1] == index and \
                                _armed(server, conn, n, d.variant):
                            k = seen.get(name, 0)
                            seen[name] = k + 1
                            if k == d.nth:
                                count("chain_delays")
                                return round(d.delay_ns * 1000)
                if phase == "exec" and faults.hold_p > 0 and rng.random() < faults.hold_p:
                    count("wr_holds")
                    return rng.randrange(1, hold_ps + 1)
                return 0

            qp.fault_hook = hook

    return per_connection


__all__ = ["FAULT_NAMES", "DelayChain", "Faults", "install", "parse_faults"]
