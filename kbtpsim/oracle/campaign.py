"""Randomised differential campaigns: initiators against the offloaded target, in lockstep
with the shadow.

One campaign = one seed, one NIC profile, one byte order (ADDR_LE on or off), one mix of
operations, optional faults and an optional mutant. Four initiators (``a``, ``b``, ``c``
in one trust domain, ``d`` in another; quotas summing to the pool, so the ring runs
empty) each run their own seeded sequence of requests concurrently on one simulated
server, one request outstanding at a time (mix ``pipeline``: LOADs sent back to back
with an operation on the initiator's own handles right behind them, all outstanding at
once on the connection, decision C16). Each first stores two sealed full blocks
(*published* handles, which it never changes again); the others LOAD those concurrently
(a LOAD of a handle another connection is changing has no single linearisation with
chains that read the entry and the block at different times, so campaigns do not race
them), everything else targets the initiator's own handles, valid or not. After every
*phase* the run is brought to a quiescent point, the recorded events are linearised and
applied to the shadow, and everything is compared (:mod:`kbtpsim.oracle.compare`); the
campaign stops at the first checkpoint that diverges.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any

import simpy

from kbtpsim.nic import NicProfile, Simulation
from kbtpsim.nic.profiles import get_profile
from kbtpsim.oracle.compare import Divergence, compare_messages, compare_state
from kbtpsim.oracle.events import linearise
from kbtpsim.oracle.faults import Faults, install
from kbtpsim.oracle.node import ChainTransform, ObservedInitiator, ObservedServer
from kbtpsim.oracle.shadow import Shadow
from kbtpsim.system.results import ConnectionLost, HelloRejected, OpResult, RdmaError
from kbtpsim.target import InitiatorConfig, TargetConfig
from kbtpsim.wire import DataDescriptor, Feature, Load, Status, encode

BS = 512  #: Block Size of campaign targets (octets)
BLOCKS = 24
INITIATORS = (("a", 0x1000, "default", 6), ("b", 0x1020, "default", 6),
              ("c", 0x1040, "default", 6), ("d", 0x1080, "other", 6))
HANDLES = 32  #: handles per initiator
PUBLISHED = 2  #: sealed handles per initiator the others LOAD
ROGUE = ("r", 0x10C0, "default", 2)

#: Profiles of the default campaign (``cx5+strided``: cx5 with strided keys).
PROFILES = ("ideal", "ideal-be", "cx5", "irdma")
#: Operation mixes: kind -> weight.
MIXES: dict[str, dict[str, int]] = {
    "default": {"alloc": 14, "store": 12, "load": 14, "xload": 10, "free": 10,
                "alloc_bound": 2, "store_sealed": 3, "stale": 4, "oversize": 2,
                "foreign": 2, "range": 2, "double_free": 3, "small_load": 2, "bind": 1,
                "malformed": 2, "reconnect": 1, "xrace": 8},
    "valid": {"alloc": 20, "store": 18, "load": 20, "xload": 14, "free": 14},
    "invalid": {"alloc": 8, "store": 4, "load": 4, "xload": 4, "free": 6,
                "alloc_bound": 6, "store_sealed": 8, "stale": 10, "oversize": 6,
                "foreign": 6, "range": 6, "double_free": 6, "small_load": 6, "bind": 3,
                "malformed": 6, "reconnect": 3, "status": 4, "nosession": 3},
    "churn": {"alloc": 30, "free": 26, "load": 8, "xload": 6, "store": 6, "stale": 2},
    "fill": {"alloc": 40, "free": 12, "load": 4, "xload": 4},
    # cross-connection races: LOADs of other initiators' private handles while their
    # owners free, re-allocate and store them (decision O3); partial and whole blocks
    "race": {"alloc": 20, "free": 18, "store": 8, "xrace": 24, "load": 4},
    # one connection's requests overlapping (decision C16): LOADs sent back to back and
    # an operation on the initiator's own handles right behind them, all outstanding
    "pipeline": {"burst": 30, "alloc": 10, "free": 8, "store": 6, "load": 4, "xload": 4},
}


def resolve_profile(name: str) -> NicProfile:
    """A profile by name; ``NAME+strided`` is NAME with strided keys."""
    if name.endswith("+strided"):
        base = get_profile(name.removesuffix("+strided"))
        return replace(base, name=name, strided_keys=True)
    return get_profile(name)


def plan_for(profile: str, addr_le: bool | None = None, initiator: str = "a",
             seqlock: bool = True, readers: bool = False) -> Any:
    """The :class:`~kbtpsim.chains.plan.ConnectionPlan` a campaign's ``initiator`` gets on
    ``profile`` (ADDR_LE: the server's default for the profile if None; ``seqlock``
    False: as chains v2 plan it, decision C13; ``readers``: with FREE on the NIC, C20)."""
    from kbtpsim.chains.layout import ChainLayout
    from kbtpsim.chains.plan import plan_connection
    from kbtpsim.target.layout import TargetLayout

    prof = resolve_profile(profile)
    le = prof.wqe_field_byte_order == "little" if addr_le is None else addr_le
    cfg = TargetConfig(blocks=BLOCKS, block_size=BS, max_inline=BS, addr_le=le,
                       initiators=tuple(InitiatorConfig(n, bytes([i + 1]) * 16, q, b, HANDLES,
                                                        trust_domain=d)
                                        for i, (n, b, d, q) in enumerate(INITIATORS)))
    lay = ChainLayout.of(TargetLayout.plan(cfg, 1 << 40), cfg)
    return plan_connection(prof, cfg, lay, initiator, seqlock=seqlock, readers=readers)


@dataclass(frozen=True)
class Spec:
    """One campaign."""

    seed: int
    profile: str = "ideal-be"
    addr_le: bool | None = None  #: None: the server's default for the profile
    ops: int = 120  #: requests in the mixed phases, over all initiators
    mix: str = "default"
    phases: int = 3
    faults: Faults = field(default_factory=Faults)
    mutant: str | None = None
    reference: str = "target"  #: the shadow: "target" (Target) or "model" (kbtpsim.refmodel)
    chains: str = "v1"  #: the offloaded target's chains (target.chains)
    #: FREE on the NIC (target.operations.free: offload, decision C20; chains v2, one
    #: trust domain on the shared ring: every initiator's domain becomes "default")
    free_on_nic: bool = False

    def byte_order(self, prof: NicProfile) -> bool:
        return prof.wqe_field_byte_order == "little" if self.addr_le is None else self.addr_le

    def replay(self) -> str:
        """The command that runs this campaign again."""
        parts = [f"kbtpsim check --seed {self.seed} --profiles {self.profile}",
                 f"--ops {self.ops} --mix {self.mix} --phases {self.phases}"]
        parts.append("--addr-le " + ("default" if self.addr_le is None
                                     else "on" if self.addr_le else "off"))
        if self.faults.names:
            parts.append("--faults " + ",".join(self.faults.names))
        if self.mutant:
            parts.append(f"--mutant {self.mutant}")
        if self.reference != "target":
            parts.append(f"--reference {self.reference}")
        if self.chains != "v1":
            parts.append(f"--chains {self.chains}")
        if self.free_on_nic:
            parts.append("--free-on-nic")
        return " ".join(parts)


@dataclass
class Result:
    """What one campaign found."""

    spec: Spec
    addr_le: bool
    divergences: list[Divergence]
    requests: int = 0
    nic_served: int = 0
    cpu_served: int = 0
    checkpoints: int = 0
    sim_us: float = 0.0
    wall_s: float = 0.0
    offloaded: tuple[str, ...] = ()
    server: ObservedServer | None = None
    #: what happened that the faults aim at: slot-not-ready hand-overs, deferred frees
    #: (in the shadow), dropped connections, abandoned tickets, delays and stalls
    events: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.divergences

    def summary(self) -> dict[str, Any]:
        return {"seed": self.spec.seed, "profile": self.spec.profile,
                "addr_le": self.addr_le, "mix": self.spec.mix, "ops": self.spec.ops,
                "faults": self.spec.faults.names, "mutant": self.spec.mutant,
                "requests": self.requests, "nic": self.nic_served, "cpu": self.cpu_served,
                "offloaded": list(self.offloaded), "checkpoints": self.checkpoints,
                "divergences": len(self.divergences), "sim_us": round(self.sim_us, 1),
                "events": self.events,
                "wall_s": round(self.wall_s, 2)}


Gen = Generator[simpy.Event, Any, Any]


class _Actor:
    """One initiator's seeded request generator, with its own view of its handles."""

    def __init__(self, run: _Run, ini: ObservedInitiator, cfg: InitiatorConfig,
                 rng: random.Random) -> None:
        self.run = run
        self.ini = ini
        self.cfg = cfg
        self.rng = rng
        base = cfg.handle_base
        self.published = [base + i for i in range(PUBLISHED)]
        self.private = [base + i for i in range(PUBLISHED, HANDLES)]
        self.bound: dict[int, tuple[int, bool]] = {}  #: handle -> (Generation, sealed)
        self.last_seal = False

    # ------------------------------------------------------------------ helpers
    def data(self, n: int = BS) -> bytes:
        return self.rng.randbytes(n)

    def note(self, res: OpResult | None) -> None:
        if res is None or res.completion is None:
            return
        c = res.completion
        conn = self.ini.conn
        if conn is not None:
            self.run.results[(conn.conn_id, c.request_id)] = res
        self.run.requests += 1
        if c.status != Status.OK:
            return
        if res.op in ("ALLOC_STORE", "STORE"):
            self.bound[res.handle] = (c.generation, self.last_seal)
        elif res.op == "FREE":
            self.bound.pop(res.handle, None)

    def pick_bound(self, *, private: bool = True, sealed: bool | None = None) -> int | None:
        hs = [h for h, (_, s) in self.bound.items()
              if (not private or h in self.private) and (sealed is None or s == sealed)]
        return self.rng.choice(sorted(hs)) if hs else None

    def pick_unbound(self) -> int:
        free = [h for h in self.private if h not in self.bound]
        return self.rng.choice(free) if free else self.rng.choice(self.private)

    # ------------------------------------------------------------------ operations
    def publish(self) -> Gen:
        for h in self.published:
            self.last_seal = True
            res = yield self.ini.alloc_store(h, self.data(), seal=True)
            self.note(res)

    def burst(self) -> Gen:
        """One to three LOADs sent back to back (the initiator's own bound handles, with
        or without ALLOW_UNSEALED, and other initiators' published ones), then one
        operation on its own handles (alloc, store, free, load, stale), all outstanding
        at once on the connection; every result is noted, in the order they went out
        (a connection failure: the first error is raised once all have ended).
        LOADs change nothing the actor's view of its handles depends on, so the last
        operation picks its handle as it would alone."""
        ini, rng, env = self.ini, self.rng, self.run.env
        procs = []
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.5:
                other = rng.choice([a for a in self.run.actors if a is not self])
                procs.append(ini.load(rng.choice(other.published), invalidate=False))
            else:
                h = self.pick_bound(private=False) or self.published[0]
                procs.append(ini.load(h, invalidate=rng.random() < 0.2,
                                      allow_unsealed=rng.random() < 0.5))
        tail = rng.choice(("alloc", "store", "free", "load", "stale"))
        procs.append(env.process(self.step(tail)))
        # wait for every one (a connection failure fails them all: each is waited for,
        # so none is left failing unobserved), then note them, or raise the first failure
        failed: BaseException | None = None
        for proc in procs:
            try:
                res = yield proc
            except (ConnectionLost, RdmaError) as exc:
                failed = failed or exc
                continue
            self.note(res)
        if failed is not None:
            raise failed

    def step(self, kind: str) -> Gen:
        """One request (or reconnection) of ``kind``."""
        ini, rng = self.ini, self.rng
        if kind == "burst":
            return (yield from self.burst())
        inv = rng.random() < 0.2
        gen0 = 0
        if kind == "alloc":
            inline = rng.random() < 0.6
            seal = rng.random() < (0.5 if inline else 0.1)
            n = BS if rng.random() < 0.8 else rng.randrange(1, BS)
            self.last_seal = seal
            return (yield ini.alloc_store(self.pick_unbound(), self.data(n), seal=seal,
                                          inline=inline, invalidate=inv))
        if kind == "alloc_bound":
            h = self.pick_bound() or self.published[0]
            return (yield ini.alloc_store(h, self.data(), seal=False))
        if kind == "store":
            h = self.pick_bound(sealed=False) or self.pick_unbound()
            seal = rng.random() < 0.3
            inline = rng.random() < 0.6
            self.last_seal = seal
            gen = self.bound.get(h, (0, False))[0] if rng.random() < 0.2 else gen0
            n = BS if rng.random() < 0.8 else rng.randrange(1, BS)
            return (yield ini.store(h, self.data(n), gen, inline=inline, seal=seal,
                                    invalidate=inv))
        if kind == "store_sealed":
            h = self.pick_bound(private=False, sealed=True) or self.published[0]
            return (yield ini.store(h, self.data(), inline=rng.random() < 0.5,
                                    invalidate=False))
        if kind == "stale":
            h = self.pick_bound(private=False) or self.published[0]
            g = (self.bound.get(h, (2, False))[0] + rng.randrange(1, 5)) & 0xFFFF or 3
            what = rng.randrange(3)
            if what == 0:
                return (yield ini.load(h, g, invalidate=False))
            if what == 1 and h in self.private:
                return (yield ini.free(h, g))
            return (yield ini.store(h, self.data(), g, inline=True))
        if kind == "load":
            h = self.pick_bound(private=False) or self.published[0]
            gen = self.bound.get(h, (0, False))[0] if rng.random() < 0.2 else gen0
            return (yield ini.load(h, gen, invalidate=inv,
                                   allow_unsealed=rng.random() < 0.5))
        if kind == "xload":
            other = rng.choice([a for a in self.run.actors if a is not self])
            h = rng.choice(other.published)
            return (yield ini.load(h, invalidate=inv))
        if kind == "xrace":  # another initiator's private handle, bound or not (O3)
            other = rng.choice([a for a in self.run.actors if a is not self])
            hs = sorted(other.bound) or other.private
            h = rng.choice(hs if rng.random() < 0.8 else other.private)
            return (yield ini.load(h, invalidate=inv))
        if kind == "small_load":
            h = self.pick_bound(private=False) or self.published[0]
            return (yield ini.load(h, length=rng.randrange(8, BS), invalidate=False))
        if kind == "free":
            h = self.pick_bound()
            if h is None:
                h = self.pick_unbound()
            gen = self.bound.get(h, (0, False))[0] if rng.random() < 0.3 else gen0
            return (yield ini.free(h, gen))
        if kind == "double_free":
            free = [h for h in self.private if h not in self.bound]
            return (yield ini.free(rng.choice(free) if free else self.private[-1]))
        if kind == "oversize":
            h = self.pick_bound(sealed=False) or self.pick_unbound()
            op = ini.store if h in self.bound else ini.alloc_store
            return (yield op(h, self.data(BS + 8 * rng.randrange(1, 4)), inline=False))
        if kind == "foreign":
            other = rng.choice([a for a in self.run.actors if a is not self])
            h = rng.choice(other.private)
            if rng.random() < 0.5:
                return (yield ini.free(h))
            return (yield ini.store(h, self.data(), inline=True))
        if kind == "range":
            h = rng.choice([0x10, 0x9000, self.cfg.handle_base + HANDLES + 0x400])
            what = rng.randrange(3)
            if what == 0:
                return (yield ini.load(h, invalidate=False))
            if what == 1:
                return (yield ini.alloc_store(h, self.data(), inline=True))
            return (yield ini.free(h))
        if kind == "bind":
            return (yield ini.bind(self.pick_unbound(), rng.randrange(8), BS, 0))
        if kind == "malformed":  # a fast-path form with octets added or missing (C1)
            rid = 0x7000_0000 + self.run.requests
            h = self.pick_bound(sealed=False) or self.published[0]
            order = "little" if ini.addr_le else "big"
            raw = bytearray(40)
            raw[4:12] = rid.to_bytes(8, "big")
            raw[12:20] = h.to_bytes(8, order)
            raw[36:40] = BS.to_bytes(4, order)
            cut = rng.randrange(1, 9)
            if rng.random() < 0.5:  # LOAD with trailing octets
                raw[0:4] = bytes([1, 0x10, 0, 0])
                return (yield ini.send_raw(bytes(raw) + bytes(cut)))
            raw[0:4] = bytes([1, 0x11, 0, 1])  # STORE INLINE, data too long or too short
            data = self.data(BS + cut) if rng.random() < 0.5 else self.data(BS - cut)
            return (yield ini.send_raw(bytes(raw) + data))
        if kind == "status":  # a full-block LOAD whose Status field is not zero
            h = rng.choice(self.published)
            return (yield ini.send_raw(self.raw_load(h, status=rng.randrange(1, 0x100))))
        if kind == "nosession":  # GOODBYE, a full-block LOAD before HELLO, HELLO again
            yield ini.goodbye(False)
            yield ini.send_raw(self.raw_load(rng.choice(self.published)), session=False)
            yield ini.hello()
            return None
        if kind == "reconnect":
            yield from self.reconnect()
            return None
        raise ValueError(kind)

    def raw_load(self, handle: int, status: int = 0) -> bytes:
        """A well-formed full-block LOAD's octets (Status as given; no buffer exposed:
        a target that serves it anyway writes through STag 0 and fails)."""
        rid = 0x6000_0000 + self.run.requests + self.rng.randrange(1 << 16)
        return encode(Load(request_id=rid, handle=handle, status=status,
                           data_descriptor=DataDescriptor(0, 0, BS)), self.ini.addr_le)

    def reconnect(self) -> Gen:
        ini, rng = self.ini, self.rng
        release = self.cfg.trust_domain != "default" and rng.random() < 0.5
        if rng.random() < 0.5:
            yield ini.goodbye(release)
            if release:
                self.bound.clear()
            yield ini.hello()
            if release:
                yield from self.publish()
        else:
            ini.close()
            yield from self.connect()

    def connect(self) -> Gen:
        """A new connection and HELLO; retried while the target still holds the old
        session (its disconnect is processed on a core: ALREADY_BOUND meanwhile)."""
        ini = self.ini
        for attempt in range(20):
            try:
                if attempt == 0:
                    yield ini.connect(self.run.server)
                else:
                    yield self.run.env.timeout(20_000_000)
                    yield ini.hello()
                return
            except HelloRejected:
                continue

    def drop(self, kind: str) -> Gen:
        """``kind`` with the connection torn down while the request is in flight."""
        ini = self.ini
        proc = self.run.env.process(self.step(kind))
        yield self.run.env.timeout(self.rng.randrange(1, 20_000_000))
        if proc.is_alive:
            ini.close()
        with contextlib.suppress(ConnectionLost, RdmaError):
            yield proc
        self.bound.clear()  # unknown outcome: forget, the oracle keeps count
        if ini.qp is not None and ini.broken is not None:
            yield from self.connect()

    def phase(self, n: int, mix: dict[str, int]) -> Gen:
        kinds, weights = zip(*sorted(mix.items()), strict=True)
        for _ in range(n):
            kind = self.rng.choices(kinds, weights)[0]
            if self.run.spec.faults.drop_p and self.rng.random() < self.run.spec.faults.drop_p \
                    and kind not in ("reconnect",):
                yield from self.drop(kind)
                continue
            try:
                res = yield from self.step(kind)
            except (ConnectionLost, RdmaError) as exc:
                self.run.errors.append(f"{self.ini.name}: {kind}: {exc}")
                return
            self.note(res)


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
        pool = pool or Pool()
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
        self.server = ObservedServer(self.sim, config, profile=prof, addr_le=self.addr_le,
                                     chain_transform=transform, chains=spec.chains,
                                     free_on_nic=spec.free_on_nic)
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
        end = self.env.now + limit_ps
        while not ev.triggered and self.env.now < end:
            if not self.run_env(min(end, self.env.now + 1_000_000_000)):
                return False
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
                                 self.shadow, self.shadow.nic_counts)
        out.sort(key=lambda d: d.order)
        return out

    def go(self) -> Result:
        spec = self.spec
        mix = MIXES[spec.mix]
        res = Result(spec, self.addr_le, [])
        t0 = time.perf_counter()
        ok = self.run_until(self.env.process(self.connect_all()), 1_000_000_000)
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
            ok = self.run_until(done, 5_000_000_000)
            if not ok:
                stuck = [a.ini.name for a, pr in zip(self.actors, procs, strict=False)
                         if pr.is_alive]
                divs = [Divergence("missing", f"phase {p}: requests of {stuck} never "
                                   "completed (a chain or the target hangs)",
                                   order=1 << 62)]
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


def run_campaign(spec: Spec, transform: ChainTransform | None = None) -> Result:
    """Run one campaign (see the module docstring); ``transform`` is a mutant."""
    if spec.mix not in MIXES:
        raise ValueError(f"unknown mix {spec.mix!r} (known: {', '.join(MIXES)})")
    try:
        return _Run(spec, transform).go()
    except HelloRejected as exc:  # pragma: no cover - configuration error
        raise RuntimeError(f"HELLO rejected: {exc}") from exc


__all__ = ["MIXES", "PROFILES", "Result", "Spec", "resolve_profile", "run_campaign"]

