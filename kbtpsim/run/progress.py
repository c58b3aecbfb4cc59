"""The run's progress (see :mod:`kbtpsim.progress`: a bar on a TTY, lines otherwise)."""

from __future__ import annotations

from kbtpsim.progress import STEPS, Progress

__all__ = ["STEPS", "Progress"]
