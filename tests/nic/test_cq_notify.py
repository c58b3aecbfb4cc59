"""CompletionQueue.notify: one event shared by the CQs a sleeping CPU watches."""

from __future__ import annotations

import simpy

from kbtpsim.nic.cq import CompletionQueue, Cqe, WcOpcode
from kbtpsim.nic.errors import WcStatus


def _cqe() -> Cqe:
    return Cqe(wr_id=0, status=WcStatus.SUCCESS, opcode=WcOpcode.SEND, qpn=1, wqe_index=0)


def test_the_first_cqe_on_any_watched_cq_fires_it_once() -> None:
    env = simpy.Environment()
    a, b = CompletionQueue(env, 1, 16), CompletionQueue(env, 2, 16)
    ev = env.event()
    a.notify(ev)
    b.notify(ev)
    assert not ev.triggered
    b.push(_cqe())
    assert ev.triggered
    a.push(_cqe())  # already woken: skipped, not succeeded a second time (no error)
    env.run()
    assert ev.processed and (a.count, b.count) == (1, 1)


def test_it_keeps_its_place_among_the_reach_waiters() -> None:
    env = simpy.Environment()
    cq = CompletionQueue(env, 1, 16)
    order: list[str] = []
    first, shared, last = cq.reach(1), env.event(), cq.reach(1)
    cq.notify(shared)  # registered after both reach events: woken after them
    for name, ev in (("shared", shared), ("last", last), ("first", first)):
        ev.callbacks.append(lambda _e, n=name: order.append(n))
    cq.push(_cqe())
    env.run()
    assert order == ["first", "last", "shared"]


def test_stale_shared_events_do_not_pile_up() -> None:
    env = simpy.Environment()
    quiet, busy = CompletionQueue(env, 1, 16), CompletionQueue(env, 2, 16)
    for _ in range(100):  # a CPU sleeping on both, always woken by the busy one
        ev = env.event()
        quiet.notify(ev)
        busy.notify(ev)
        busy.push(_cqe())
        busy.poll()
    assert len(quiet._waiters) <= 10
