"""The progress bar: tqdm on a TTY, nothing otherwise."""

from __future__ import annotations

import io

from kbtpsim.run.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_when_not_a_tty() -> None:
    s = io.StringIO()
    bar = Progress("run", stream=s)
    for k in range(11):
        bar.update(k / 10)
    bar.close()
    assert s.getvalue() == ""


def test_a_bar_on_a_tty() -> None:
    s = Tty()
    bar = Progress("run", stream=s)
    for k in range(11):
        bar.update(k / 10)
    bar.update(0.5)  # never goes back
    bar.close()
    text = s.getvalue()
    assert "run" in text and "%" in text  # tqdm drew it (it redraws at most every 0.1 s)
    assert bar.last == 1000
