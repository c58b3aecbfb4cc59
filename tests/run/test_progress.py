"""Progress: tqdm on a TTY, a line per tenth or 10 s otherwise, nothing with -q."""

from __future__ import annotations

import io

from kbtpsim.run.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_every_tenth_when_not_a_tty() -> None:
    s = io.StringIO()
    bar = Progress("run", stream=s, clock=lambda: 0.0)
    for k in range(101):
        bar.update(k / 100)
    bar.close()
    assert s.getvalue().splitlines() == [f"run: {k}0% (0 s)" for k in range(1, 11)]


def test_lines_every_10_s_between_tenths() -> None:
    s = io.StringIO()
    now = [0.0]
    bar = Progress("run", stream=s, clock=lambda: now[0])
    for k in range(1, 9):  # 1% to 8% of the work, 4 s apart
        now[0] = 4.0 * k
        bar.update(k / 100)
    assert s.getvalue().splitlines() == ["run: 3% (12 s)", "run: 6% (24 s)"]


def test_nothing_at_all_when_disabled() -> None:
    s = Tty()
    bar = Progress("run", stream=s, enabled=False)
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
