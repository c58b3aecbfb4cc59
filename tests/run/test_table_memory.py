"""``target.table_memory: device`` (decision C29): the block table in the NIC's device
memory. The chains' entry Reads skip PCIe; every entry the target CPU reads or writes is
an MMIO access it pays for; nothing a request does changes (the oracle)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import pytest

from kbtpsim.nic import DM_BASE
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario import scenario_from_dict
from kbtpsim.target.invariant import InvariantViolation
from kbtpsim.target.memstore import TableMeter


def scenario(table_memory: str | None, ops: int = 240) -> dict[str, Any]:
    """The LOAD-heavy mix (ALLOC_STORE : LOAD : FREE = 1 : 6 : 1) on ideal-be, whole
    4 KiB blocks stored inline, two initiators at window 1; FREE runs on the CPU."""
    target: dict[str, Any] = {
        "mode": "offload", "nic": {"profile": "ideal-be"}, "blocks": 128,
        "block_size": "4KiB", "request_credits": 4, "max_inline": "4KiB"}
    if table_memory is not None:
        target["table_memory"] = table_memory
    return {
        "seed": 1, "stop": {"operations": ops, "warmup": "5us"}, "target": target,
        "initiators": [{"name": "a", "count": 2, "handles": 64, "nic": {"profile": "ideal-be"},
                        "workload": {"window": 1, "length": {"value": "4KiB"},
                                     "mix": {"alloc_store": 1, "load": 6, "free": 1}}}],
    }


def _run(table_memory: str | None, oracle: bool = False) -> Any:
    return run_scenario(scenario_from_dict(scenario(table_memory)), oracle=oracle)


@functools.cache
def _plain(table_memory: str | None) -> Any:
    """The run without the oracle, once per table memory (several tests read it)."""
    return _run(table_memory)


def test_the_table_in_device_memory_changes_no_result_of_a_request() -> None:
    out = _run("device", oracle=True)
    assert out.divergences == [], [str(d) for d in out.divergences]
    server = out.system.servers["target"]
    assert server.layout.table_addr >= DM_BASE
    assert server.chain_layout.table_addr == server.layout.table_addr
    served = out.results["targets"]["target"]["fallbacks"]["served"]
    assert served["LOAD"]["nic"] > 0 and served["LOAD"]["cpu"] == 0, served


def test_a_loads_entry_read_skips_pcie() -> None:
    """The LOAD's entry Read is on its path: with the table in device memory the same
    LOADs complete sooner (the default, host memory, is unchanged by the option)."""
    host, device = _plain(None), _plain("device")
    assert host.system.servers["target"].layout.table_addr < DM_BASE

    def p50(out: Any) -> float:
        return float(out.results["operations"]["LOAD"]["latency_ns"]["p50"])

    assert p50(device) < p50(host) - 50, (p50(device), p50(host))


def test_the_cpu_pays_an_mmio_access_per_entry() -> None:
    """A FREE on the CPU reads its entry and writes it back: with the table in device
    memory that costs it an MMIO read (a PCIe round trip) and an MMIO write more than in
    host memory, charged to FREE."""
    host, device = _plain(None), _plain("device")

    def per_free(out: Any) -> float:
        return float(out.system.servers["target"].cpu.per_op_ns("FREE"))

    server = device.system.servers["target"]
    extra = (server.mmio_read_ps + server.cpu.doorbell_ps) / 1000
    assert extra > 400
    got = per_free(device) - per_free(host)
    assert abs(got - extra) < 0.05 * extra, (got, extra)


def test_the_meter_counts_distinct_entries_and_not_while_paused() -> None:
    out = _plain("device")
    target = out.system.servers["target"].target
    meter = target.table.meter
    assert isinstance(meter, TableMeter)
    meter.take()
    target.table.get(target.table.base)
    target.table.get(target.table.base)
    with target.unmetered():
        target.table.get(target.table.base + 1)
        target.state()
    with contextlib.suppress(InvariantViolation):  # the run stopped with work in flight
        target.check_invariant()
    assert meter.take() == (1, 0)
    assert meter.take() == (0, 0)


@pytest.mark.parametrize("mode", ["software", "two_sided"])
def test_table_memory_needs_offload(mode: str) -> None:
    data = scenario("device")
    data["target"]["mode"] = mode
    with pytest.raises(ValueError, match=r"target\.table_memory: only meaningful with "
                                         r"mode: offload"):
        scenario_from_dict(data)


def test_table_memory_names_its_values() -> None:
    with pytest.raises(ValueError, match=r"target\.table_memory"):
        scenario_from_dict(scenario("nic"))


def test_a_request_the_nic_served_costs_the_cpu_no_table_access() -> None:
    """With FREE on the NIC (decision C20) every request of the mix is the NIC's: the CPU
    only learns of them, and touches no entry (the replay log's look-up of a freed block
    is the simulator's, not the CPU's), so its time per NIC-served request is what it is
    with the table in host memory."""
    def per_nic(table_memory: str | None) -> float:
        data = scenario(table_memory)
        data["target"]["operations"] = {"free": "offload"}
        out = run_scenario(scenario_from_dict(data))
        served = out.results["targets"]["target"]["fallbacks"]["served"]
        assert served["FREE"]["nic"] > 0 and served["FREE"]["cpu"] == 0, served
        return float(out.results["targets"]["target"]["cpu"]["per_nic_served"]["total"])

    host, device = per_nic(None), per_nic("device")
    assert abs(device - host) < 0.05 * host, (device, host)


def test_direct_loads_read_the_table_where_it_is() -> None:
    """DIRECT_LOAD (draft, "Direct Modes"): a trusted initiator reads the entry itself
    through the Table descriptor, which names the table in device memory."""
    data = scenario("device", ops=160)
    data["target"]["features"] = {"direct_load": True}
    data["initiators"][0]["workload"]["mix"] = {"alloc_store": 1, "load": 2,
                                                "direct_load": 3, "free": 1}
    out = run_scenario(scenario_from_dict(data), oracle=True)
    assert out.divergences == [], [str(d) for d in out.divergences]
    assert out.results["operations"]["DIRECT_LOAD"]["count"] > 0
    statuses = out.results["statuses"]["DIRECT_LOAD"]
    assert set(statuses) == {"OK"}, statuses
