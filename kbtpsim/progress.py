"""Progress of a long command: a tqdm bar on a terminal, otherwise a plain line on each
tenth of the work or every 10 s (``kbtpsim run: 30% (12 s)``), so that logs and CI show
it too. Foundation-level (knows nothing of the simulator), like :mod:`kbtpsim.usage`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

#: The bar counts in thousandths of the work.
STEPS = 1000
#: Without a terminal: a line at least every this many seconds, and on each tenth.
LINE_EVERY_S = 10.0


class Progress:
    """``update(fraction)`` with fraction in [0, 1] (never goes back); ``close()`` at the
    end. ``enabled`` False: nothing at all (``-q``); None: a bar on a TTY, lines otherwise."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 enabled: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.clock = clock
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.lines = enabled is not False and not tty
        self.last = 0
        self.start = clock()
        self.last_line = (0, self.start)  # (tenth, time) of the last line printed
        self.bar: tqdm[None] | None = (
            tqdm(total=STEPS, desc=label, file=self.stream, leave=False,
                 bar_format="{desc} {bar} {percentage:3.0f}% {elapsed}")
            if enabled is not False and tty else None
        )

    def update(self, fraction: float) -> None:
        steps = max(0, min(STEPS, int(fraction * STEPS)))
        if steps <= self.last:
            return
        if self.bar is not None:
            self.bar.update(steps - self.last)
        self.last = steps
        if self.lines:
            now = self.clock()
            tenth = steps * 10 // STEPS
            if tenth > self.last_line[0] or now - self.last_line[1] >= LINE_EVERY_S:
                self.last_line = (tenth, now)
                print(f"{self.label}: {steps / 10:.0f}% ({now - self.start:.0f} s)",
                      file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
