"""Long runs: an initiator need not keep its results (loaded data) or received messages,
and a server need not keep its log of target calls (only the oracle uses them)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kbtpsim.nic import Simulation
from kbtpsim.system import Initiator, SoftwareTargetServer
from kbtpsim.system.results import Discard
from kbtpsim.wire import Feature
from tests.system.helpers import BASE_A, config


def _run(keep: bool) -> tuple[SoftwareTargetServer, Initiator, list[Any]]:
    cfg = config(features=Feature.DIRECT_ALLOC)
    sim = Simulation(seed=0)
    server = SoftwareTargetServer(sim, cfg, keep_log=keep)
    ini = Initiator(sim, "a", requested_features=Feature.DIRECT_ALLOC, keep_results=keep,
                    keep_received=keep)

    def work() -> Generator[Any, Any, list[Any]]:
        yield ini.connect(server)
        out = [(yield ini.alloc_store(BASE_A, b"x" * 4096, seal=True))]
        out.append((yield ini.load(BASE_A)))
        out.append((yield ini.direct_alloc(BASE_A + 1, b"y" * 100)))
        out.append((yield ini.free(BASE_A)))
        return out

    return server, ini, sim.env.run(until=sim.env.process(work()))


def test_defaults_keep_everything() -> None:
    server, ini, out = _run(True)
    assert all(r in ini.results for r in out) and len(ini.received) == 1 + 4
    assert [r.op for r in ini.results] == ["ALLOC_STORE", "LOAD", "BIND", "DIRECT_ALLOC",
                                          "FREE"]
    assert any(e[0] == "fetch_add" for e in server.log)
    assert [e[0] for e in server.log].count("handle") == 5
    conn = next(iter(server.connections.values()))
    assert len(conn.received) == 5


def test_nothing_kept_when_asked_and_results_still_returned() -> None:
    server, ini, out = _run(False)
    assert all(r.ok for r in out) and out[1].data == b"x" * 4096
    assert ini.results == [] and ini.received == [] and server.log == []
    assert isinstance(server.log, Discard) and isinstance(ini.results, Discard)
    conn = next(iter(server.connections.values()))
    assert conn.received == []
    server.target.check_invariant()
    assert server.target.stats().ops[("ALLOC_STORE", "OK")] == 1


def test_discard_accepts_every_way_of_adding() -> None:
    d: list[int] = Discard()
    d.append(1)
    d.extend([2, 3])
    d.insert(0, 4)
    d += [5]
    assert d == [] and isinstance(d, Discard)
