"""Counters per operation and status, ring occupancy and quota use (draft, "Operational
Considerations"), as one immutable snapshot."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RingStats:
    name: str
    slots: int
    blocks: int  #: F of this ring
    head_ticket: int
    tail_ticket: int
    available: int  #: freed and not yet ticketed
    deferred_frees: int


@dataclass(frozen=True, slots=True)
class QuotaStats:
    initiator: str
    quota: int
    bound: int
    tickets: int
    freeing: int
    usage: int
    active: bool
    retained: bool


@dataclass(frozen=True, slots=True)
class TargetStats:
    """One snapshot: ``ops[(op, status)]`` counts completions sent."""

    ops: dict[tuple[str, str], int]
    rings: tuple[RingStats, ...]
    quotas: tuple[QuotaStats, ...]
    pool_blocks_materialized: int
    pool_bytes_materialized: int

    def as_dict(self) -> dict[str, Any]:
        ops: dict[str, dict[str, int]] = {}
        for (op, status), n in sorted(self.ops.items()):
            ops.setdefault(op, {})[status] = n
        return {
            "ops": ops,
            "rings": [vars_of(r) for r in self.rings],
            "quotas": [vars_of(q) for q in self.quotas],
            "pool_blocks_materialized": self.pool_blocks_materialized,
            "pool_bytes_materialized": self.pool_bytes_materialized,
        }


def vars_of(obj: object) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}  # type: ignore[attr-defined]


class OpCounters:
    """Mutable counters the processor bumps; snapshotted into :class:`TargetStats`."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def bump(self, op: str, status: str) -> None:
        self.counts[(op, status)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        return dict(self.counts)
