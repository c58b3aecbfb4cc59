"""``target.read_source_stores``: Read-source STOREs and ALLOC_STOREs kept on the target
CPU, and their two variants left out of every connection's chain."""

from __future__ import annotations

from typing import Any

import pytest

from kbtpsim.chains.dispatch import KEPT, NOT_OFFLOADED, static_miss
from kbtpsim.chains.offload_config import KEPT_ON_CPU
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario import scenario_from_dict
from kbtpsim.wire import DataDescriptor, Store, encode


def scenario(read_source_stores: str | None) -> dict[str, Any]:
    """Whole-block stores, inline (initiator i) and with a Read source (initiator r)."""
    target: dict[str, Any] = {
        "mode": "offload", "nic": {"profile": "ideal-be"}, "blocks": 128,
        "block_size": "4KiB", "request_credits": 4, "max_inline": "4KiB"}
    if read_source_stores is not None:
        target["read_source_stores"] = read_source_stores
    mix = {"alloc_store": 2, "store": 1, "load": 3, "free": 1}
    return {
        "seed": 3, "stop": {"operations": 160, "warmup": "5us"}, "target": target,
        "initiators": [
            {"name": "i", "handles": 32, "workload": {
                "window": 2, "length": {"value": "4KiB"}, "mix": mix}},
            {"name": "r", "handles": 32, "workload": {
                "window": 2, "length": {"value": "4KiB"}, "inline_threshold": 0,
                "mix": mix}}],
    }


def test_read_source_stores_on_the_cpu_leave_their_variants_out() -> None:
    out = run_scenario(scenario_from_dict(scenario("software")), oracle=True)
    assert out.divergences == [], [str(d) for d in out.divergences]
    fb = out.results["targets"]["target"]["fallbacks"]
    kept = {op: n.get(KEPT, 0) for op, n in fb["reasons"].items()}
    assert kept.get("ALLOC_STORE", 0) > 0 and kept.get("STORE", 0) > 0, fb
    assert fb["served"]["ALLOC_STORE"]["nic"] > 0, fb  # the inline ones
    assert fb["served"]["LOAD"]["cpu"] == 0, fb
    server = out.system.servers["target"]
    plan = server.plan_for("i")
    assert "store_read" not in plan.offloaded and "alloc_read" not in plan.offloaded
    assert plan.software["store_read"] == [KEPT_ON_CPU]
    assert {"load", "store_inline", "alloc_inline"} <= set(plan.offloaded)


def test_by_default_read_source_stores_run_on_the_nic() -> None:
    out = run_scenario(scenario_from_dict(scenario(None)))
    fb = out.results["targets"]["target"]["fallbacks"]
    assert all(KEPT not in n for n in fb["reasons"].values()), fb
    plan = out.system.servers["target"].plan_for("r")
    assert {"store_read", "alloc_read"} <= set(plan.offloaded)


@pytest.mark.parametrize("mode", ["software", "two_sided"])
def test_read_source_stores_needs_offload(mode: str) -> None:
    data = scenario("software")
    data["target"]["mode"] = mode
    data["target"].pop("nic")
    with pytest.raises(ValueError, match=r"target\.read_source_stores: only meaningful "
                                         r"with mode: offload"):
        scenario_from_dict(data)


def test_static_miss_names_the_configuration() -> None:
    dd = DataDescriptor(1, 0, 4096)
    req = encode(Store(request_id=1, handle=5, data_descriptor=dd), False)
    offloaded = ("load", "store_inline", "alloc_inline")
    assert static_miss(req, offloaded, 4096, False,
                       {"store_read": [KEPT_ON_CPU]}) == KEPT
    assert static_miss(req, offloaded, 4096, False, {}) == NOT_OFFLOADED
