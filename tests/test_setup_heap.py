"""SetupHeap: the collector paused during a set-up, its objects frozen for the run, and
everything as it was once the run is over (kbtpsim/setup_heap.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from kbtpsim.setup_heap import SetupHeap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_set_up_paused_then_frozen_then_thawed() -> None:
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with SetupHeap() as heap:
        heap.pause()
        assert not gc.isenabled()
        kept = [_Node() for _ in range(100)]
        _Node()  # the set-up's garbage
        heap.built()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)  # what the set-up built is frozen
        assert _cyclic_nodes() == 0  # the set-up's garbage waits, frozen
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert _cyclic_nodes() == 1  # collected once thawed
    del kept


def _cyclic_nodes() -> int:
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sum(isinstance(x, _Node) for x in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_an_error_during_the_set_up_leaves_the_collector_on() -> None:
    with pytest.raises(RuntimeError), SetupHeap() as heap:
        heap.pause()
        raise RuntimeError("set-up failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with SetupHeap() as heap:
            heap.pause()
            heap.built()
            assert not gc.isenabled() and gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_run_leaves_nothing_frozen() -> None:
    from kbtpsim.run.runner import run_scenario
    from kbtpsim.scenario.load import load_scenario

    scenario = Path(__file__).parents[1] / "scenarios/quickstart-offload.yaml"
    sc = load_scenario(scenario, ("stop.operations=20",))
    run_scenario(sc)
    assert gc.isenabled() and gc.get_freeze_count() == 0
