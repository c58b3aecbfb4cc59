"""The scenario schema: defaults, units, overrides, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kbtpsim.scenario import ScenarioError, load_scenario, scenario_from_dict
from kbtpsim.scenario.load import apply_overrides, parse_override, split_path
from kbtpsim.units import PS_PER_MS, PS_PER_US

REPO = Path(__file__).resolve().parents[2]


def error_of(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data, [parse_override(o) for o in overrides])
    return str(info.value)


def test_defaults_validate() -> None:
    sc = scenario_from_dict({})
    assert sc.target.blocks == 1024 and sc.target.block_size == 32 << 10
    assert sc.target.ticket_timeout == 100 * PS_PER_MS
    assert sc.stop.operations == 1000
    [ini] = sc.expanded_initiators()
    assert ini.name == "i0" and ini.quota == 1024 and ini.target == "target"


def test_units_parse_from_strings() -> None:
    sc = scenario_from_dict({
        "target": {"block_size": "64KiB", "max_inline": "1KiB", "ticket_timeout": "5ms"},
        "stop": {"time": "2us", "operations": None, "warmup": "500ns"},
        "initiators": [{"workload": {"loop": "open", "rate": "1.5M/s",
                                     "length": {"value": "2KiB"}}}],
        "network": {"switches": [{"name": "s", "latency": "300ns"}],
                    "links": [{"a": "i0", "b": "s", "rate": "200Gbps"},
                              {"a": "s", "b": "target"}]},
    })
    assert sc.target.block_size == 65536 and sc.target.max_inline == 1024
    assert sc.target.ticket_timeout == 5 * PS_PER_MS
    assert sc.stop.time == 2 * PS_PER_US and sc.stop.warmup == 500_000
    assert sc.initiators[0].workload.rate == 1.5e6
    assert sc.network.links[0].rate == 200e9


def test_count_expands_and_quotas_share_f() -> None:
    sc = scenario_from_dict({"target": {"blocks": 100},
                             "initiators": [{"name": "c", "count": 3},
                                            {"name": "d", "quota": 40}]})
    names = [(e.name, e.quota) for e in sc.expanded_initiators()]
    assert names == [("c.0", 20), ("c.1", 20), ("c.2", 20), ("d", 40)]


@pytest.mark.parametrize(("data", "overrides", "expected"), [
    # unknown keys, with the nearest valid key
    ({"target": {"blokcs": 1}}, (), "target.blokcs: unknown key (did you mean 'blocks'?)"),
    ({"initiators": [{"workload": {"mix": {"lod": 1}}}]}, (),
     "initiators[0].workload.mix.lod: unknown key (did you mean 'load'?)"),
    ({"stopp": {}}, (), "stopp: unknown key (did you mean 'stop'?)"),
    ({"target": {"nic": {"overrides": {"link_gpbs": 1}}}}, (),
     "target.nic.overrides.link_gpbs: unknown NIC profile parameter "
     "(did you mean 'link_gbps'?)"),
    # wrong units
    ({"target": {"block_size": "32XB"}}, (), "target.block_size: unknown unit 'XB'"),
    ({"stop": {"warmup": "3 parsecs"}}, (), "stop.warmup: unknown unit 'parsecs'"),
    ({"initiators": [{"workload": {"rate": "fast"}}]}, (),
     "initiators[0].workload.rate: cannot parse 'fast'"),
    # impossible values
    ({"initiators": [{"quota": 600}, {"quota": 600}]}, (),
     "initiators[1].quota: quotas sum to at least 1200, above target.blocks (F = 1024)"),
    ({"target": {"blocks": 0}}, (), "target.blocks: input should be greater than"),
    ({"target": {"ring_slots": 100}}, (), "target.ring_slots: N must be a power of two"),
    ({"target": {"blocks": 64, "ring_slots": 32}}, (), "target.ring_slots: N = 32 is below F"),
    ({"target": {"block_size": 1001}}, (), "target.block_size: must be a positive multiple"),
    ({"target": {"features": {"record_completion": True}}}, (),
     "target.features.record_completion: needs binding: infiniband"),
    ({"initiators": [{"workload": {"mix": {"direct_load": 1}}}]}, (),
     "initiators[0].workload.mix.direct_load: needs target.features.direct_load: true"),
    ({"stop": {"operations": None}}, (), "stop: give operations, time, or both"),
    ({"target": {"nic": {"profile": "cx6"}}}, (),
     "target.nic.profile: unknown NIC profile 'cx6' (did you mean 'cx5'?)"),
    ({"target": {"mode": "ofload"}}, (),
     "target.mode: 'ofload' is not one of 'software', 'offload', 'one_sided_static', "
     "'one_sided_dynamic', 'two_sided' (did you mean 'offload'?)"),
    ({"initiators": [{"workload": {"window": "x"}}]}, (),
     "initiators[0].workload.window: input should be a valid integer"),
    ({"initiators": [{"target": "t9"}]}, (), "initiators[0].target: no target named 't9'"),
    ({"target": {"block_size": "4KiB"}, "initiators": [{"workload": {"length": {
        "value": "8KiB"}}}]}, (), "initiators[0].workload.length: lengths up to 8192 exceed"),
    ({"target": {"block_size": "32KiB"}, "initiators": [{"workload": {"kind": "kvcache"}}]},
     (), "initiators[0].workload.kvcache.tokens_per_block: a block of 16 tokens"),
    ({"network": {"links": [{"a": "i0", "b": "swich"}]}}, (),
     "network.links[0].b: no host or switch named 'swich'"),
    # the same through --set
    ({}, ("target.blokcs=3",), "target.blokcs: unknown key (did you mean 'blocks'?)"),
    ({}, ("target.block_size=4XB",), "target.block_size: unknown unit"),
    ({}, ("initiators[0].quota=5000",), "initiators[0].quota: quotas sum to at least 5000"),
    ({}, ("initiators[3].quota=1",), "initiators[3]: index 3 is beyond the list"),
    ({}, ("target.blocks",), "target.blocks: --set needs KEY=VALUE"),
])
def test_errors_name_the_key(data: dict[str, Any], overrides: tuple[str, ...],
                             expected: str) -> None:
    message = error_of(data, *overrides)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_set_overrides_with_paths_and_indices() -> None:
    sc = scenario_from_dict({"initiators": [{}, {"name": "b"}]}, [
        parse_override("target.blocks=2048"), parse_override("initiators[1].quota=7"),
        parse_override("initiators[0].workload.mix={load: 1, alloc_store: 1}"),
        parse_override("target.block_size=64KiB")])
    assert sc.target.blocks == 2048 and sc.target.block_size == 65536
    assert sc.initiators[1].quota == 7
    assert sc.initiators[0].workload.mix == {"load": 1.0, "alloc_store": 1.0}
    assert split_path("a.b[2].c") == ["a", "b", 2, "c"]
    # appending one past the end adds an entry
    raw = apply_overrides({"initiators": [{}]}, [("initiators[1].name", "x")])
    assert raw["initiators"][1] == {"name": "x"}


def test_offload_is_accepted_by_the_schema() -> None:
    sc = scenario_from_dict({"target": {"mode": "offload", "operations": {"load": "offload"}}})
    assert sc.target.mode == "offload"


def test_shipped_scenarios_validate() -> None:
    files = sorted((REPO / "scenarios").glob("*.yaml"))
    checked = 0
    for f in files:
        if f.name.startswith("replay-") or f.name.startswith("sweep-"):
            continue
        if "base" in yaml.safe_load(f.read_text()):  # a sweep (compare-approaches.yaml)
            continue
        load_scenario(f)
        checked += 1
    assert checked >= 4


def test_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: [1, 2\n")
    with pytest.raises(ScenarioError, match="invalid YAML at line"):
        load_scenario(bad)
    bad.write_text("- 1\n")
    with pytest.raises(ScenarioError, match="must be a YAML mapping"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_set_creates_missing_lists() -> None:
    raw = apply_overrides({}, [("initiators[0].quota", 5), ("network.links[0].a", "x"),
                               ("additional_targets[0].name", "t1")])
    assert raw == {"initiators": [{"quota": 5}], "network": {"links": [{"a": "x"}]},
                   "additional_targets": [{"name": "t1"}]}
