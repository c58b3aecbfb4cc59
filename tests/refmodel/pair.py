"""Target and the reference model side by side: the same calls to both, and every effect
and every piece of state compared after each call."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from kbtpsim.refmodel import ModelTarget
from kbtpsim.target import InitiatorConfig, ReadInitiator, Target, TargetConfig
from kbtpsim.wire import Feature


def iid(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()[:16]


def ini(name: str, quota: int, base: int, count: int = 8, features: int = 0,
        domain: str = "x") -> InitiatorConfig:
    return InitiatorConfig(name, iid(name), quota, base, count, Feature(features), domain)


class Divergence(AssertionError):
    pass


def _norm(effects: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for e in effects:
        d = {k: getattr(e, k) for k in e.__slots__}  # type: ignore[attr-defined]
        out.append((type(e).__name__, *d.values()))
    return out


@dataclass
class Pair:
    config: TargetConfig
    target: Target = field(init=False)
    model: ModelTarget = field(init=False)
    steps: int = 0
    #: connection -> pending RDMA Reads (target token, model token, length), in order
    reads: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.target = Target(self.config)
        self.model = ModelTarget(self.config)

    def call(self, name: str, *args: Any, **kw: Any) -> list[Any]:
        """Call ``name`` on both; compare results (or exceptions), then the state."""
        self.steps += 1
        results = []
        for side in (self.target, self.model):
            try:
                results.append(("ok", getattr(side, name)(*args, **kw)))
            except Exception as exc:
                results.append(("raise", type(exc).__name__))
        (kt, rt), (km, rm) = results
        if kt == "raise" or km == "raise":
            if kt != km:  # both must refuse (their exception types are their own)
                raise Divergence(f"{name}{args}: target {kt} {rt}, model {km} {rm}")
            return []
        if name in ("remote_fetch_add",) or rt is None:
            if rt != rm:
                raise Divergence(f"{name}{args}: target {rt!r}, model {rm!r}")
            self.compare_state(name)
            return []
        t_reads = [e for e in rt if isinstance(e, ReadInitiator)]
        m_reads = [e for e in rm if isinstance(e, ReadInitiator)]
        nt, nm = _norm(rt), _norm(rm)
        # RDMA Read tokens are each side's own names: compare everything else
        strip = [x if x[0] != "ReadInitiator" else x[:2] + x[3:] for x in nt]
        strim = [x if x[0] != "ReadInitiator" else x[:2] + x[3:] for x in nm]
        if strip != strim:
            raise Divergence(f"{name}{args[:2]}: effects differ\n target {strip}\n"
                             f" model  {strim}")
        for a, b in zip(t_reads, m_reads, strict=True):
            self.reads.setdefault(a.connection_id, []).append((a.token, b.token, a.length))
        self.compare_state(name)
        return rt

    def complete_read(self, conn: int, data: bytes, now: int) -> list[Any]:
        tt, mt, _ = self.reads[conn].pop(0)
        self.steps += 1
        rt = self.target.complete_read(tt, data, now)
        rm = self.model.complete_read(mt, data, now)
        if _norm(rt) != _norm(rm):
            raise Divergence(f"complete_read: target {_norm(rt)}\n model {_norm(rm)}")
        for a, b in zip([e for e in rt if isinstance(e, ReadInitiator)],
                        [e for e in rm if isinstance(e, ReadInitiator)], strict=True):
            self.reads.setdefault(a.connection_id, []).append((a.token, b.token, a.length))
        self.compare_state("complete_read")
        return rt

    def compare_state(self, where: str) -> None:
        t, m = self.target, self.model
        bad: list[str] = []

        def same(what: str, a: object, b: object) -> None:
            if a != b:
                bad.append(f"{what}: target {a!r}, model {b!r}")

        lo, n = m.table.base, m.table.count
        same("table range", (t.table.base, t.table.count), (lo, n))
        for h in range(lo, lo + n):
            same(f"entry {h:#x}", t.table.get(h), m.table.get(h))
        same("rings", [r.name for r in t.rings], [r.name for r in m.rings])
        for a, b in zip(t.rings, m.rings, strict=False):
            same(f"{a.name} Head", a.head, b.head)
            same(f"{a.name} Tail", a.tail, b.tail)
            for s in range(a.n_slots):
                same(f"{a.name} slot {s}", a.slot(16 * s), b.slot(16 * s))
            same(f"{a.name} deferred", sorted(a.deferred_blocks()), sorted(b.deferred_blocks()))
        bs = self.config.block_size
        for bo in t.pool.offsets:
            same(f"block {bo:#x}", t.pool.read(bo, bs), m.pool.read(bo, bs))
        for name, a in t.initiators.items():
            b = m.initiators[name]
            for what in ("bound", "tickets", "freeing", "usage", "connection_id",
                         "retained_until", "features", "overdrawn"):
                same(f"{name} {what}", getattr(a, what), getattr(b, what))
            if a.direct is not None:
                same(f"{name} outstanding", dict(a.direct.outstanding), b.direct.outstanding)
                same(f"{name} abandoned", set(a.direct.abandoned), b.direct.abandoned)
                same(f"{name} partition STag", a.direct.partition_stag,
                     b.direct.partition_stag)
        same("held blocks", dict(t.held_blocks), m.held_blocks)
        same("quiescing", t.quiescing, m.quiescing)
        same("counters", t.counters.snapshot(), m.counters.snapshot())
        same("next deadline", t.next_deadline(), m.next_deadline())
        same("connections", {c: v.addr_le for c, v in t.connections.items()},
             {c: v.addr_le for c, v in m.connections.items()})
        for who, side in (("target", t), ("model", m)):
            try:
                side.check_invariant()
            except AssertionError as exc:
                bad.append(f"{who} invariant: {exc}")
        if t.internal_errors:
            bad.append(f"target INTERNAL: {t.internal_errors}")
        if bad:
            raise Divergence(f"after {where}:\n  " + "\n  ".join(bad))
