"""CPU contention (kbtpsim.system.contention): background slices per core, the server's
work resumed after each, server busy time and background time reported apart."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from kbtpsim.nic.profiles import get_profile
from kbtpsim.system import Cluster, TargetCpu
from kbtpsim.system.contention import Background, CoreSchedule, schedules
from kbtpsim.system.results import OpResult
from tests.system.helpers import BASE_A, config, run

US = 1_000_000  # ps


def test_pattern_is_slice_then_window_with_the_fraction_as_share() -> None:
    bg = Background(0.8, 50 * US)
    assert bg.window_ps == 12_500_000 and bg.period_ps == 62_500_000
    assert bg.share == pytest.approx(0.8)
    third = Background(1 / 3, 50 * US)
    assert third.window_ps == 100 * US
    assert not Background(0.0).active and schedules(Background(0.0), 4) == ()


def test_work_runs_only_outside_slices_and_resumes_after_each() -> None:
    # slices [0, 50us), [62.5us, 112.5us), [125us, 175us), ...; windows in between
    core = CoreSchedule(slice_ps=50 * US, period_ps=62_500_000, phase=0)
    assert core.finish(0, US) == 51 * US  # asked inside a slice: starts when it ends
    assert core.finish(50 * US, US) == 51 * US  # inside a window: not delayed
    assert core.finish(62 * US, US) == 113 * US  # 0.5us, the slice, then 0.5us
    assert core.finish(50 * US, 12_500_000) == 62_500_000  # exactly one window
    # 12.5us in the first window, 12.5 in the second, 5 in the third
    assert core.finish(50 * US, 30 * US) == 180 * US
    assert core.finish(70 * US, 0) == 70 * US
    shifted = CoreSchedule(50 * US, 62_500_000, phase=10 * US)
    assert shifted.finish(0, 20 * US) == 60 * US + 10 * US  # 10us, slice, 10us
    assert core.background_in(0, 125 * US) == 100 * US
    assert core.background_in(40 * US, 70 * US) == 10 * US + 7_500_000
    assert shifted.background_in(0, 70 * US) == 50 * US  # [-52.5us, -2.5us) before 0


def _cpu(cores: int, bg: Background) -> tuple[simpy.Environment, TargetCpu]:
    env = simpy.Environment()
    cpu = TargetCpu(env, get_profile("cx5"), cores)
    cpu.set_background(bg)
    return env, cpu


def test_a_spend_is_extended_by_the_slices_it_meets_and_busy_stays_its_work() -> None:
    env, cpu = _cpu(1, Background(0.8, 50 * US, phases=(0,)))
    done: list[int] = []

    def serve(at: int, ps: int) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(at)
        with cpu.request() as core:
            yield core
            yield from cpu.spend("LOAD", ps)
            done.append(int(env.now))

    env.process(serve(62 * US, US))
    env.run()
    assert done == [113 * US]
    assert cpu.busy_ns("LOAD") == 1000  # the server's own work, not the slice
    assert cpu.stalled_ns() == 50_000
    assert cpu.background_ns(0, 125 * US) == 100_000
    # at 113us: 100us of background (slices at 0 and 62.5us), 1us of server work
    assert cpu.utilisation() == pytest.approx(1 / 113)
    assert cpu.background_share() == pytest.approx(100 / 113)
    report = cpu.background_report(0, 125 * US, server_share=1 / 125)
    assert report is not None
    assert report["share"] == 0.8 and report["server_of_available"] == 0.04


def test_busy_time_counts_what_has_run_of_a_spend_in_progress() -> None:
    env, cpu = _cpu(1, Background(0.8, 50 * US, phases=(0,)))

    def serve() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(62 * US)
        with cpu.request() as core:
            yield core
            yield from cpu.spend("REFILL", US)

    env.process(serve())
    env.run(until=100 * US)  # 0.5 us ran before the slice at 62.5 us, 0.5 us has not
    assert cpu.busy_ns("REFILL") == cpu.busy_ns() == 500
    assert cpu.utilisation() + cpu.background_share() <= 1
    env.run()
    assert cpu.busy_ns("REFILL") == 1000


def test_a_request_takes_the_free_core_it_can_run_on_first() -> None:
    # core 0 in a slice until 50us, core 1's slice ended at 10us
    env, cpu = _cpu(2, Background(0.8, 50 * US, phases=(0, 22_500_000)))
    done: list[int] = []

    def serve() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(20 * US)
        with cpu.request() as core:
            yield core
            yield from cpu.spend("LOAD", US)
            done.append(int(env.now))

    env.process(serve())
    env.run()
    assert done == [21 * US]
    assert cpu.stalled_ns() == 0


def test_set_background_only_before_use() -> None:
    env, cpu = _cpu(1, Background(0.5))

    def hold() -> Generator[simpy.Event, Any, None]:
        with cpu.request() as core:
            yield core
            yield env.timeout(1)

    env.process(hold())
    env.run(until=1)
    with pytest.raises(RuntimeError, match="already in use"):
        cpu.set_background(Background(0.2))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"fraction": 1.0}, r"background fraction must be in \[0, 1\), got 1.0"),
    ({"fraction": -0.1}, r"got -0.1"),
    ({"fraction": 0.5, "slice_ps": 0}, "slice must be positive, got 0 ps"),
])
def test_bad_backgrounds_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Background(**kwargs)


def test_phases_are_seeded() -> None:
    a = Background(0.5, seed="1/target").core_phases(4)
    assert a == Background(0.5, seed="1/target").core_phases(4)
    assert a != Background(0.5, seed="2/target").core_phases(4)
    assert all(0 <= p < Background(0.5).period_ps for p in a)


def _load_latency(background: Background | None) -> tuple[int, Cluster]:
    cluster = Cluster.build(config())
    if background is not None:
        cluster.server.cpu.set_background(background)

    def body(c: Cluster) -> Generator[Any, Any, OpResult]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"x" * 32, seal=True)
        result: OpResult = yield a.load(BASE_A)
        return result

    got = run(cluster, body)
    assert got.ok
    return got.completed_at - got.posted_at, cluster


def test_a_load_served_across_a_slice_takes_exactly_the_slice_longer() -> None:
    """The LOAD's first spend starts at t; a 5 us slice starting at t + 100 ns (the
    previous one long before the run) delays its completion by exactly 5 us; its CPU
    time per operation does not change."""
    cluster = Cluster.build(config())
    cpu = cluster.server.cpu
    starts: list[int] = []
    spend = cpu.spend

    def watched(account: str, ps: int) -> Generator[simpy.Event, Any, None]:
        if account == "LOAD" and not starts:
            starts.append(int(cluster.sim.env.now))
        yield from spend(account, ps)

    cpu.spend = watched  # type: ignore[method-assign]

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"x" * 32, seal=True)
        yield a.load(BASE_A)

    run(cluster, body)
    base, plain = _load_latency(None)
    bg = Background(0.001, 5 * US)  # a 5 us slice every 5 ms
    slice_at = starts[0] + 100_000
    assert slice_at < bg.period_ps - bg.slice_ps  # the slice before it ended before 0
    late, contended = _load_latency(Background(0.001, 5 * US, phases=(slice_at,)))
    assert late - base == 5 * US
    assert contended.server.cpu.stalled_ns() == 5000
    assert contended.server.cpu.per_op_ns("LOAD") == plain.server.cpu.per_op_ns("LOAD")


def test_the_nic_is_never_delayed() -> None:
    """A DIRECT_LOAD (the initiator's RDMA Reads of the table and the pool, no target
    CPU) takes as long with 99% of the core taken as on an idle one; a LOAD through the
    target waits for the slices."""
    from kbtpsim.wire import Feature

    def measure(background: Background | None) -> tuple[int, int]:
        cluster = Cluster.build(config(features=Feature.DIRECT_LOAD))
        if background is not None:
            cluster.server.cpu.set_background(background)

        def body(c: Cluster) -> Generator[Any, Any, tuple[OpResult, OpResult]]:
            a = c.initiators["a"]
            yield a.alloc_store(BASE_A, b"sealed", seal=True)
            direct = yield a.direct_load(BASE_A)
            load = yield a.load(BASE_A)
            return direct, load

        direct, load = run(cluster, body)
        assert direct.ok and direct.direct and load.ok
        return (direct.completed_at - direct.posted_at, load.completed_at - load.posted_at)

    idle_direct, idle_load = measure(None)
    busy_direct, busy_load = measure(Background(0.99, 50 * US, phases=(0,)))
    assert busy_direct == idle_direct
    assert busy_load > idle_load + 10 * US
