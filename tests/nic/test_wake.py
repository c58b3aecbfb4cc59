"""Wake.fire_last continues a stage at once only where an event could not change the order."""

from __future__ import annotations

import pytest
import simpy

from kbtpsim.nic.wake import Wake, call_at


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


def test_call_at_keeps_the_place_a_timeout_would_take() -> None:
    """call_at and Timeouts at the same instant run in the order they were scheduled (the
    same simpy event counter), and a process may yield a Due as it would a Timeout."""
    env = simpy.Environment()
    log: list[str] = []
    env.timeout(5).callbacks.append(lambda _e: log.append("timeout 1"))
    call_at(env, 5, lambda due: log.append(f"call {due.value}"), "x")
    env.timeout(5).callbacks.append(lambda _e: log.append("timeout 2"))
    call_at(env, 3, lambda _d: log.append("call early"))

    def proc() -> simpy.events.ProcessGenerator:
        got = yield call_at(env, 4, value="v")
        log.append(f"process {got}@{env.now}")

    env.process(proc())
    env.run()
    assert log == ["call early", "process v@4", "timeout 1", "call x", "timeout 2"]


def test_call_at_refuses_the_past() -> None:
    env = simpy.Environment()
    env.run(until=10)
    with pytest.raises(ValueError, match="before now"):
        call_at(env, 9, lambda _d: None)
