"""The run's progress bar: tqdm on a terminal, nothing when the stream is not a TTY."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

#: The bar counts in thousandths of the run.
STEPS = 1000


class Progress:
    """``update(fraction)`` with fraction in [0, 1] (never goes back); ``close()`` at the end."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        on = enabled if enabled is not None else bool(getattr(self.stream, "isatty",
                                                              lambda: False)())
        self.last = 0
        self.bar: tqdm[None] | None = (
            tqdm(total=STEPS, desc=label, file=self.stream, leave=False,
                 bar_format="{desc} {bar} {percentage:3.0f}% {elapsed}")
            if on else None
        )

    def update(self, fraction: float) -> None:
        steps = max(0, min(STEPS, int(fraction * STEPS)))
        if self.bar is None or steps <= self.last:
            return
        self.bar.update(steps - self.last)
        self.last = steps

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
