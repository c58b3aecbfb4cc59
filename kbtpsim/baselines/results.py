"""What a baseline client's operations return: an :class:`OpResult` with round trips."""

from __future__ import annotations

from dataclasses import dataclass

from kbtpsim.system.results import OpResult


@dataclass(frozen=True, slots=True)
class BaselineResult(OpResult):
    """An :class:`OpResult` that also says how many network round trips the operation
    took on its critical path (0: served locally, e.g. a static region's FREE)."""

    round_trips: int = 1


__all__ = ["BaselineResult"]
