"""Request credits (at most Request Credits outstanding) and completion credits."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kbtpsim.system import Cluster
from kbtpsim.wire import Status
from tests.system.helpers import BASE_A, config, run


def _burst(c: Cluster, n: int) -> Generator[Any, Any, list[Any]]:
    a = c.initiators["a"]
    yield a.alloc_store(BASE_A, b"block", seal=True)
    procs = [a.load(BASE_A) if i % 2 else a.store(BASE_A + 1 + i, b"x") for i in range(n)]
    results = yield c.sim.env.all_of(procs)
    return [results[p] for p in procs]


def test_at_most_request_credits_outstanding() -> None:
    cluster = Cluster.build(config(request_credits=4))
    results = run(cluster, _burst, 40)
    a = cluster.initiators["a"]
    assert a.ack is not None and a.ack.request_credits == 4
    assert a.max_outstanding == 4
    assert len(results) == 40
    assert {r.status for r in results} == {Status.OK, Status.NOT_VALID}
    # every request got its own completion, matched by Request ID
    ids = [r.completion.request_id for r in results]
    assert len(set(ids)) == 40


def test_few_completion_credits_still_complete_everything() -> None:
    cluster = Cluster.build(config(request_credits=8), completion_credits=1)
    results = run(cluster, _burst, 20)
    assert len(results) == 20
    a = cluster.initiators["a"]
    assert a.max_outstanding == 8
    # one receive buffer, re-posted after each completion: 22 messages through it
    assert len(a.received) == 22
