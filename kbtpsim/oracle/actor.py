"""One initiator of a randomised campaign (:class:`_Actor`): its seeded request
generator, the request of each kind a mix draws (:data:`kbtpsim.oracle.spec.MIXES`:
valid, invalid, racing, pipelined, reconnections, dropped connections), with its own
view of which of its handles are bound and sealed. Driven by the run
(:class:`kbtpsim.oracle.lockstep._Run`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.oracle.node import ObservedInitiator
from kbtpsim.oracle.spec import HANDLES, PUBLISHED
from kbtpsim.system.results import ConnectionLost, HelloRejected, OpResult, RdmaError
from kbtpsim.target import InitiatorConfig
from kbtpsim.wire import DataDescriptor, Load, Status, encode

if TYPE_CHECKING:
    from kbtpsim.oracle.lockstep import _Run

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
        self.bs = run.block_size

    # ------------------------------------------------------------------ helpers
    def data(self, n: int | None = None) -> bytes:
        return self.rng.randbytes(self.bs if n is None else n)

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
            n = self.bs if rng.random() < 0.8 else rng.randrange(1, self.bs)
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
            n = self.bs if rng.random() < 0.8 else rng.randrange(1, self.bs)
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
            return (yield ini.load(h, length=rng.randrange(8, self.bs), invalidate=False))
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
            return (yield op(h, self.data(self.bs + 8 * rng.randrange(1, 4)), inline=False))
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
            return (yield ini.bind(self.pick_unbound(), rng.randrange(8), self.bs, 0))
        if kind == "malformed":  # a fast-path form with octets added or missing (C1)
            rid = 0x7000_0000 + self.run.requests
            h = self.pick_bound(sealed=False) or self.published[0]
            order = "little" if ini.addr_le else "big"
            raw = bytearray(40)
            raw[4:12] = rid.to_bytes(8, "big")
            raw[12:20] = h.to_bytes(8, order)
            raw[36:40] = self.bs.to_bytes(4, order)
            cut = rng.randrange(1, 9)
            if rng.random() < 0.5:  # LOAD with trailing octets
                raw[0:4] = bytes([1, 0x10, 0, 0])
                return (yield ini.send_raw(bytes(raw) + bytes(cut)))
            raw[0:4] = bytes([1, 0x11, 0, 1])  # STORE INLINE, data too long or too short
            data = self.data(self.bs + cut) if rng.random() < 0.5 else self.data(self.bs - cut)
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
                           data_descriptor=DataDescriptor(0, 0, self.bs)), self.ini.addr_le)

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
