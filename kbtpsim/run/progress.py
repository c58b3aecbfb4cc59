"""A progress bar on a terminal: tqdm if installed, else rich, else a plain one-line bar;
nothing when the stream is not a TTY."""

from __future__ import annotations

import sys
from typing import Any, TextIO


class Progress:
    """``update(fraction)`` with fraction in [0, 1]; ``close()`` at the end."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        on = enabled if enabled is not None else bool(getattr(self.stream, "isatty",
                                                              lambda: False)())
        self.label = label
        self.last = -1
        self.impl: Any = None
        self.kind = "none"
        if not on:
            return
        try:
            from tqdm import tqdm

            self.impl = tqdm(total=1000, desc=label, file=self.stream, leave=False,
                             bar_format="{desc} {bar} {percentage:3.0f}% {elapsed}")
            self.kind = "tqdm"
            return
        except ImportError:
            pass
        try:
            from rich.progress import Progress as RichProgress

            self.impl = RichProgress(transient=True)
            self.impl.start()
            self.task = self.impl.add_task(label, total=1000)
            self.kind = "rich"
        except ImportError:
            self.kind = "plain"

    def update(self, fraction: float) -> None:
        permille = max(0, min(1000, int(fraction * 1000)))
        if permille <= self.last or self.kind == "none":
            return
        if self.kind == "tqdm":
            self.impl.update(permille - max(0, self.last))
        elif self.kind == "rich":
            self.impl.update(self.task, completed=permille)
        elif permille // 10 != self.last // 10:
            filled = permille // 25
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (40 - filled)}] "
                              f"{permille // 10:3d}%")
            self.stream.flush()
        self.last = permille

    def close(self) -> None:
        if self.kind == "tqdm":
            self.impl.close()
        elif self.kind == "rich":
            self.impl.stop()
        elif self.kind == "plain":
            self.stream.write("\r" + " " * (len(self.label) + 50) + "\r")
            self.stream.flush()
        self.kind = "none"
