"""One randomised campaign's run: the live system and the shadow in lockstep.

:class:`Pool` is the target a run serves (initiators, blocks); :class:`_Run` builds the
observed server, the initiators (:class:`~kbtpsim.oracle.actor._Actor`), faults and the
shadow, runs the setup and the phases, and at every checkpoint brings the run to a
quiescent point, linearises the recorded events into the shadow and compares
(:mod:`kbtpsim.oracle.compare`). Scripted interleavings
(:mod:`kbtpsim.oracle.interleaving`) drive a :class:`_Run` too.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import simpy

from kbtpsim.nic import Simulation
from kbtpsim.oracle.actor import Gen, _Actor
from kbtpsim.oracle.compare import Divergence, compare_messages, compare_state
from kbtpsim.oracle.events import linearise
from kbtpsim.oracle.faults import install
from kbtpsim.oracle.node import ChainTransform, ObservedInitiator, ObservedServer
from kbtpsim.oracle.shadow import Shadow
from kbtpsim.oracle.spec import (
    BLOCKS,
    BS,
    HANDLES,
    INITIATORS,
    MIXES,
    ROGUE,
    Result,
    Spec,
    resolve_profile,
)
from kbtpsim.setup_heap import SetupHeap
from kbtpsim.system.results import ConnectionLost, OpResult, RdmaError
from kbtpsim.target import InitiatorConfig, TargetConfig
from kbtpsim.wire import Feature

#: a phase's watchdog: it fails when no request has completed for PHASE_IDLE_PS (a hang),
#: or when the phase runs past PHASE_CAP_PS (a livelock); until 2026-12-06 a phase had a
#: fixed 5 ms, which cx5's chains behind a congested loopback path (fault ``wire``) need
#: more than for 100 requests, and which the campaigns reported as a hang
PHASE_IDLE_PS = 5_000_000_000
PHASE_CAP_PS = 100_000_000_000


@dataclass(frozen=True)
class Pool:
    """The target of a run: initiators (name, handle base, trust domain, quota), pool."""

    initiators: tuple[tuple[str, int, str, int], ...] = INITIATORS
    blocks: int = BLOCKS
    block_size: int = BS
    first_block: int = 0


class _Run:
    def __init__(self, spec: Spec, transform: ChainTransform | None,
                 pool: Pool | None = None) -> None:
        self.spec = spec
        pool = pool or Pool(block_size=spec.block_size)
        base = resolve_profile(spec.profile)
        prof = spec.faults.profile(base, target=True)  # the target's NIC
        ini_prof = spec.faults.profile(base, target=False)
        self.sim = Simulation(trace=True, seed=spec.seed)
        self.env = self.sim.env
        inits = list(pool.initiators)
        if spec.faults.rogue:
            inits.append(ROGUE)
        blocks = pool.blocks + (ROGUE[3] if spec.faults.rogue else 0)
        cfgs = []
        for name, base, domain, quota in inits:
            if spec.free_on_nic:  # the FREE chain does not clear blocks (C20)
                domain = "default"
            feats = Feature.DIRECT_ALLOC if name == ROGUE[0] else Feature(0)
            cfgs.append(InitiatorConfig(name, ObservedInitiator.random_id(spec.seed, name),
                                        quota, base, HANDLES, feats, domain))
        self.addr_le = spec.byte_order(prof)
        config = TargetConfig(blocks=blocks, block_size=pool.block_size,
                              max_inline=pool.block_size, first_block=pool.first_block,
                              request_credits=4, ticket_timeout_ms=1, retention_ms=5,
                              initiators=tuple(cfgs), addr_le=self.addr_le)
        self.config = config
        self.block_size = pool.block_size
        self.server = ObservedServer(self.sim, config, profile=prof, addr_le=self.addr_le,
                                     chain_transform=transform, chains=spec.chains,
                                     free_on_nic=spec.free_on_nic,
                                     table_in_device_memory=spec.table_in_device_memory)
        self.fault_counts: dict[str, int] = {}
        self.per_conn = install(self.server, spec.faults, spec.seed, self.fault_counts)
        self.shadow = Shadow(self.server.config, reference=spec.reference)
        self.results: dict[tuple[int, int], OpResult] = {}
        self.requests = 0
        self.errors: list[str] = []
        self.failed: set[int] = set()
        self.crashed: Divergence | None = None
        self.inis: dict[str, ObservedInitiator] = {}
        self.actors: list[_Actor] = []
        for cfg in cfgs:
            ini = ObservedInitiator(self.sim, cfg.name, profile=ini_prof,
                                    initiator_id=cfg.initiator_id,
                                    requested_features=cfg.features, completion_credits=8)
            self.inis[cfg.name] = ini
            if cfg.name != ROGUE[0]:
                self.actors.append(_Actor(self, ini, cfg, random.Random(
                    f"kbtpsim-oracle:{spec.seed}:{cfg.name}")))
        self.conns_seen: set[int] = set()
        self.order: dict[int, int] = {}
        self.position = 0

    # ------------------------------------------------------------------ running
    def connect_all(self) -> Gen:
        procs = [ini.connect(self.server) for ini in self.inis.values()]
        yield self.env.all_of(procs)

    def run_env(self, until: int) -> bool:
        """Run the simulation to ``until``; an exception escaping the live system (the
        target, its CPU or the NIC model) is a divergence, kept in ``crashed``."""
        if self.crashed is not None:
            return False
        try:
            self.env.run(until=until)
        except Exception as exc:  # reported, not raised: the software target never fails
            self.crashed = Divergence("crash", f"the live system raised {_where(exc)}",
                                      order=-1)
            return False
        return True

    def run_until(self, ev: simpy.Event, limit_ps: int) -> bool:
        """Run until ``ev`` triggers, for ``limit_ps`` at most (a watchdog on time: the
        idle limit of :meth:`run_while_progressing` never comes before its cap)."""
        return self.run_while_progressing(ev, limit_ps, limit_ps)

    def run_while_progressing(self, ev: simpy.Event, idle_ps: int, cap_ps: int) -> bool:
        """Run until ``ev`` triggers; give up when no request has completed for
        ``idle_ps`` (a hang), or after ``cap_ps`` in all (a livelock). A watchdog on
        progress, not on time: a slow path (cx5's chains behind a congested loopback take
        several times longer per request) is not a hang."""
        end = self.env.now + cap_ps
        seen, since = self.requests, self.env.now
        while not ev.triggered and self.env.now < end:
            if not self.run_env(min(end, self.env.now + 1_000_000_000)):
                return False
            if self.requests != seen:
                seen, since = self.requests, self.env.now
            elif self.env.now - since >= idle_ps:
                break
        return ev.triggered

    def keep(self, ini: ObservedInitiator, res: Any) -> Any:
        """A scripted run's result ``res`` of ``ini``, kept for the checkpoint's
        comparison of completions (if it has one); returns it."""
        if res is not None and res.completion is not None and ini.conn is not None:
            self.results[(ini.conn.conn_id, res.completion.request_id)] = res
        return res

    def new_connections(self) -> None:
        for conn_id, conn in self.server.connections.items():
            if conn_id not in self.conns_seen:
                self.conns_seen.add(conn_id)
                self.per_conn(conn)

    def rogue(self) -> Gen:
        """Take DIRECT_ALLOC tickets and never bind them."""
        ini = self.inis[ROGUE[0]]
        for i in range(2):
            try:
                yield ini.direct_alloc(ROGUE[1] + i, b"", bind=False)
            except (ConnectionLost, RdmaError, RuntimeError):
                return

    def settle(self, limit_ps: int = 200_000_000) -> bool:
        end = self.env.now + limit_ps
        while self.env.now < end:
            if not self.run_env(self.env.now + 2_000_000):
                return False
            if self.server.settled():
                return True
        return False

    def checkpoint(self, final: bool = False) -> list[Divergence]:
        if self.crashed is not None:
            return [self.crashed]
        out: list[Divergence] = []
        if not self.settle():
            out.append(Divergence("missing", "the target did not reach a quiescent point "
                                  "(a chain or request hangs)"))
        self.shadow.sources = {k: v for ini in self.inis.values()
                               for k, v in ini.sources.items()}
        for e in linearise(self.server.recorder.take()):
            self.position += 1
            self.order[id(e)] = self.position
            self.shadow.apply(e)
        received: dict[int, list[bytes]] = {}
        up: dict[int, bool] = {}
        le: dict[int, bool] = {}
        for ini in self.inis.values():
            for c, msgs in ini.by_conn.items():
                received[c] = msgs
        for c, conn in self.server.connections.items():
            up[c] = conn.up
            tconn = self.shadow.target.connections.get(c)
            le[c] = tconn.addr_le if tconn is not None else self.addr_le
        out += compare_messages(self.shadow, received, up, self.results, le,
                                self.server.direct, self.order)
        if not self.spec.faults.drop_p:  # nothing here breaks a connection on purpose
            for msg in self.errors:
                out.append(Divergence("connection", f"an initiator lost its connection: "
                                      f"{msg}", order=0))
            for c, conn in self.server.connections.items():
                if conn.ended not in (None, "closed") and c not in self.failed:
                    self.failed.add(c)
                    out.append(Divergence("connection", f"connection {c} ({conn.name}) "
                                          f"failed at the target: {conn.ended}", c, order=0))
            self.errors.clear()
        for e, why in self.shadow.errors:
            out.append(Divergence("shadow", why, e.conn, None, "", "", e,
                                  self.order.get(id(e), 1 << 61)))
        self.shadow.errors.clear()
        if not out or final:
            out += compare_state(self.server.tap.inner, self.server.nic.host.memory,
                                 self.shadow, self.shadow.nic_counts,
                                 self.server.unacknowledged)
            out += self._reader_counts()
        out.sort(key=lambda d: d.order)
        return out

    def _reader_counts(self) -> list[Divergence]:
        """FREE on the NIC (decision C20): at a quiescent point no LOAD runs, so every
        handle's reader count is back to 0; one left raised would send every later FREE
        of that handle to the CPU. Except a handle a LOAD cut by a connection failure
        read: its FetchAdd's QP failed before the CPU could learn whether it ran."""
        rk = getattr(self.server, "_readers_key", None)
        if rk is None:
            return []
        n = rk.length // rk.stride
        raw = self.server.nic.host.memory.read(rk.addr, rk.entry_size * n)
        base = rk.base_to // rk.stride
        cut = self.server.cut_loads  # LOADs a connection failure cut: ambiguous counts
        raised = [hex(base + i) for i in range(n)
                  if raw[i * rk.entry_size:(i + 1) * rk.entry_size] != bytes(rk.entry_size)
                  and base + i not in cut]
        if not raised:
            return []
        return [Divergence("state", "reader counts left raised at a quiescent point (no LOAD "
                           "runs, and no LOAD of the handle was cut by a connection "
                           f"failure): handles {', '.join(raised[:8])}"
                           + (" ..." if len(raised) > 8 else ""))]

    def go(self, heap: SetupHeap | None = None) -> Result:
        """Run the campaign; ``heap``: pause the collector while the connections set up
        (the target's chains), and freeze what they built."""
        spec = self.spec
        mix = MIXES[spec.mix]
        res = Result(spec, self.addr_le, [])
        t0 = time.perf_counter()
        if heap is not None:
            heap.pause()
        ok = self.run_until(self.env.process(self.connect_all()), 1_000_000_000)
        if heap is not None:
            heap.built()
        self.new_connections()
        if ok:
            setup = self.env.all_of([self.env.process(a.publish()) for a in self.actors])
            ok = self.run_until(setup, 2_000_000_000)
        divs = [] if ok else [Divergence("missing", "setup (HELLO, published stores) did "
                                         "not finish", order=1 << 62)]
        divs = sorted(divs + self.checkpoint(), key=lambda d: d.order)
        res.checkpoints += 1
        per_phase = max(1, spec.ops // max(1, spec.phases) // len(self.actors))
        for p in range(spec.phases):
            if divs:
                break
            procs = [self.env.process(a.phase(per_phase, mix)) for a in self.actors]
            if spec.faults.rogue and p == 0:
                procs.append(self.env.process(self.rogue()))
            done = self.env.all_of(procs)
            self.env.process(self._watch_connections(done))
            ok = self.run_while_progressing(done, PHASE_IDLE_PS, PHASE_CAP_PS)
            if not ok:
                stuck = [a.ini.name for a, pr in zip(self.actors, procs, strict=False)
                         if pr.is_alive]
                divs = [Divergence("missing", f"phase {p}: requests of {stuck} never "
                                   f"completed (no request completed for "
                                   f"{PHASE_IDLE_PS // 1_000_000} us, or the phase ran "
                                   f"past {PHASE_CAP_PS // 1_000_000} us: a chain or the "
                                   "target hangs)", order=1 << 62)]
            if spec.faults.rogue and p == 0:  # let the Ticket Timeout reclaim
                self.run_env(self.env.now + 3_000_000_000)
            got = self.checkpoint(final=p == spec.phases - 1)
            res.checkpoints += 1
            divs = sorted(divs + got, key=lambda d: d.order)
        res.divergences = divs
        res.wall_s = time.perf_counter() - t0
        res.sim_us = self.env.now / 1e6
        rep = self.server.op_report()
        res.nic_served = int(sum(v["nic"] for k, v in rep.items()))
        res.cpu_served = int(sum(v["cpu"] for k, v in rep.items()
                                 if k not in ("REFILL", "CHAIN")))
        res.requests = self.requests
        res.offloaded = tuple(sorted({v for c in self.server.connections.values()
                                      for v in self.server.offloaded(c)}))
        res.server = self.server
        live = self.server.tap.inner
        res.events = {
            "slot_not_ready": live.slot_not_ready,
            "deferred_frees": self.shadow.deferred,
            # connections the initiators tore down: closed by the CM's disconnect, or
            # failed first on the target's side when its NIC found the initiator's QP
            # gone (the DREQ is slower: decision O11)
            "dropped": sum(1 for c in self.server.connections.values()
                           if c.ended is not None),
            "abandoned": sum(len(s.direct.abandoned) for s in live.initiators.values()
                             if s.direct is not None),
            # credits of failed connections whose chain was cut: undone, then finished
            # in software or forgotten (decision O5)
            "salvaged": sum(self.server.salvaged.values()),
            # LOADs of failed connections whose COMPLETION went out unacknowledged: the
            # reference applies them, the live target cannot count them
            "unacknowledged": sum(self.server.unacknowledged.values()),
            **self.fault_counts,
        }
        return res

    def _watch_connections(self, done: simpy.Event) -> Gen:
        """Give new connections (reconnections) their chain-queue faults."""
        while not done.triggered:
            self.new_connections()
            yield self.env.timeout(1_000_000)


def _where(exc: BaseException) -> str:
    """``Type: message`` and the innermost kbtpsim frame that raised it."""
    import traceback

    while exc.__cause__ is not None:  # simpy re-raises a process's failure as a new one
        exc = exc.__cause__
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/kbtpsim/" in f.filename.replace("\\", "/")
              and "/kbtpsim/oracle/" not in f.filename.replace("\\", "/")]
    at = ""
    if frames:
        f = frames[-1]
        at = f" at {f.filename.split('/kbtpsim/')[-1]}:{f.lineno} ({f.name})"
    return f"{type(exc).__name__}: {exc}{at}"
