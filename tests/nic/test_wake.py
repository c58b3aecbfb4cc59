"""Wake.fire_last continues a stage at once only where an event could not change the order."""

from __future__ import annotations

import simpy

from kbtpsim.nic.wake import Wake


def _run(other_due_now: bool) -> tuple[list[str], int]:
    env = simpy.Environment()
    log: list[str] = []
    wake = Wake(env, lambda _e: log.append(f"stage@{env.now}"))

    def arrived(_ev: simpy.Event) -> None:
        log.append("arrival")
        wake.fire_last()

    env.timeout(5).callbacks.append(arrived)
    if other_due_now:
        env.timeout(5).callbacks.append(lambda _e: log.append("other"))
    env.run()
    return log, next(env._eid)  # type: ignore[attr-defined]


def test_fire_last_saves_the_event_when_nothing_else_is_due() -> None:
    log, events = _run(False)
    assert log == ["arrival", "stage@5"]
    assert events == 1


def test_fire_last_keeps_the_order_behind_events_due_now() -> None:
    log, events = _run(True)
    assert log == ["arrival", "other", "stage@5"]  # as fire() would: behind "other"
    assert events == 3
