"""A run without a time limit ends when the last pending CQE write lands."""

from __future__ import annotations

import simpy

from kbtpsim.nic.clockhold import clock_hold
from kbtpsim.nic.cq import CompletionQueue, Cqe, WcOpcode
from kbtpsim.nic.errors import WcStatus


def _cqe(t: int) -> Cqe:
    return Cqe(wr_id=0, status=WcStatus.SUCCESS, opcode=WcOpcode.SEND, qpn=1, wqe_index=0,
               time=t)


def test_run_ends_at_the_latest_cqe_time() -> None:
    env = simpy.Environment()
    cq = CompletionQueue(env, 1, 16)

    def pusher() -> simpy.events.ProcessGenerator:
        cq.push(_cqe(500))
        yield env.timeout(100)
        cq.push(_cqe(900))  # moves the pending event on
        cq.push(_cqe(700))  # earlier than the latest: nothing to do
    env.process(pusher())
    env.run()
    assert env.now == 900
    assert len(cq.poll()) == 3


def test_one_hold_per_environment() -> None:
    env = simpy.Environment()
    assert clock_hold(env) is clock_hold(env)
    assert clock_hold(simpy.Environment()) is not clock_hold(env)
