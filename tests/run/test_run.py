"""``kbtpsim run``: results, determinism, the oracle, errors as one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbtpsim.cli import main
from kbtpsim.run.results import RESULTS, TIMESERIES
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario import scenario_from_dict

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"

SMALL: dict[str, Any] = {
    "name": "small", "seed": 5,
    "stop": {"operations": 300, "warmup": "5us"},
    "target": {"blocks": 64, "block_size": "4KiB", "request_credits": 8},
    "initiators": [{"name": "c", "count": 2, "handles": 32,
                    "workload": {"window": 3, "length": {"distribution": "choice",
                                                         "values": [64, 2048]},
                                 "mix": {"alloc_store": 1, "store": 1, "load": 3,
                                         "free": 1}}}],
}


def write(tmp_path: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_quickstart_under_the_oracle(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    rc = main(["run", str(QUICKSTART), "-o", str(tmp_path / "qs"), "--oracle"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "oracle: 0 divergence(s)" in out
    res = json.loads((tmp_path / "qs" / RESULTS).read_text())
    assert res["oracle"]["divergences"] == 0
    assert res["run"]["operations_measured"] == 5000
    assert {"ALLOC_STORE", "STORE", "LOAD", "FREE"} <= set(res["operations"])
    for op in res["operations"].values():
        assert op["ok"] == op["count"]
        lat = op["latency_ns"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
        assert 0 < lat["min"] <= lat["mean"] <= lat["max"] and lat["stdev"] > 0
    head = next(line for line in out.splitlines() if line.startswith("operation"))
    assert head.split() == ["operation", "count", "ok", "kops/s", "GB/s", "min", "mean",
                            "stdev", "p50", "p90", "p99", "p99.9"]
    load = next(line for line in out.splitlines() if line.startswith("LOAD "))
    mean_us = res["operations"]["LOAD"]["latency_ns"]["mean"] / 1000
    assert load.split()[6] == f"{mean_us:.2f}us"
    t = res["targets"]["target"]
    assert 0 < t["cpu"]["utilisation"] <= 1
    assert t["cpu"]["per_op"]["LOAD"]["per_op_ns"] > 0
    assert 0 < t["nic"]["pcie.rd"] <= 1 and 0 < t["ports"]["target<->switch.egress"] <= 1
    assert t["rings"][0]["in_use_peak"] > 0
    assert res["throughput"]["ops_per_s"] > 0 and res["throughput"]["gb_per_s"] > 0
    header = (tmp_path / "qs" / TIMESERIES).read_text().splitlines()[0]
    assert header == "time_ns,series,value"
    assert json.loads((tmp_path / "qs" / "run.json").read_text())["wall_s"] > 0


@pytest.mark.parametrize("mode", ["software", "offload"])
def test_same_scenario_and_seed_give_identical_results(tmp_path: Path, mode: str) -> None:
    data = json.loads(json.dumps(SMALL))
    if mode == "offload":
        data["target"].update(mode="offload", nic={"profile": "ideal-be"}, max_inline="4KiB")
        data["initiators"][0]["workload"]["length"] = {"value": "4KiB"}
        data["stop"]["operations"] = 150
    p = write(tmp_path, data)
    for d in ("a", "b"):
        assert main(["run", str(p), "-o", str(tmp_path / d), "-q"]) == 0
    a = (tmp_path / "a" / RESULTS).read_bytes()
    assert a == (tmp_path / "b" / RESULTS).read_bytes()
    assert (tmp_path / "a" / TIMESERIES).read_bytes() == \
        (tmp_path / "b" / TIMESERIES).read_bytes()
    assert main(["run", str(p), "-o", str(tmp_path / "c"), "-q", "--seed", "6"]) == 0
    c = json.loads((tmp_path / "c" / RESULTS).read_text())
    assert c["seed"] == 6 and (tmp_path / "c" / RESULTS).read_bytes() != a


def test_set_overrides_reach_the_run(tmp_path: Path) -> None:
    p = write(tmp_path, SMALL)
    assert main(["run", str(p), "-o", str(tmp_path / "o"), "-q", "--set",
                 "target.blocks=128", "--set", "initiators[0].count=3"]) == 0
    res = json.loads((tmp_path / "o" / RESULTS).read_text())
    assert res["scenario"]["target"]["blocks"] == 128
    assert sorted(res["initiators"]) == ["c.0", "c.1", "c.2"]


@pytest.mark.parametrize(("change", "sets", "expected"), [
    ({"target": {"blokcs": 3}}, [], "target.blokcs: unknown key (did you mean 'blocks'?)"),
    ({"target": {"block_size": "4 KB/s"}}, [], "target.block_size: "),
    ({"initiators": [{"quota": 50}, {"quota": 50}]}, [],
     "initiators[1].quota: quotas sum to at least 100, above target.blocks (F = 64)"),
    ({}, ["target.blocks=lots"], "target.blocks: input should be a valid integer"),
    ({"target": {"mode": "offload", "operations": {"bind": "offload"}}}, [],
     "target.operations.bind: BIND has no chain: it always runs on the target CPU"),
    ({"target": {"operations": {"load": "software"}}}, [],
     "target.operations: only meaningful with mode: offload"),
])
def test_bad_scenarios_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            change: dict[str, Any], sets: list[str],
                                            expected: str) -> None:
    data = {**SMALL, **change}
    if "target" in change:
        data["target"] = {**SMALL["target"], **change["target"]}
        data["target"].pop("block_size", None) if "blokcs" in change["target"] else None
    p = write(tmp_path, data)
    argv = ["run", str(p), "-o", str(tmp_path / "o"), "-q"]
    for s in sets:
        argv += ["--set", s]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kbtpsim: error: {expected}"), lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing ran


@pytest.mark.parametrize("case", ["kvcache", "misbehaving", "direct", "per_initiator",
                                  "two_targets", "open_loop"])
def test_scenario_features_pass_the_oracle(case: str) -> None:
    base: dict[str, Any] = {"seed": 2, "stop": {"operations": 250}}
    block = {"blocks": 64, "block_size": "4KiB", "request_credits": 8}
    cases: dict[str, dict[str, Any]] = {
        "kvcache": {"target": block, "initiators": [
            {"name": "p", "quota": 48, "handles": 64, "workload": {"kind": "kvcache", "kvcache": {
                "role": "prefill", "model": "custom", "bytes_per_token": 256,
                "sequence_tokens_min": 32, "sequence_tokens_max": 96}}},
            {"name": "d", "quota": 0, "workload": {"kind": "kvcache", "kvcache": {
                "role": "decode", "model": "custom", "bytes_per_token": 256}}}]},
        "misbehaving": {"stop": {"time": "1500us"}, "target": {
            **block, "ticket_timeout": "1ms", "features": {"direct_alloc": True}},
            "initiators": [
                {"name": "good", "workload": {"length": {"value": 512}}},
                {"name": "bad", "workload": {"length": {"value": 512}, "misbehave": {
                    "hoard_tickets": 2, "invalid_fraction": 0.3}}},
                {"name": "ugly", "workload": {"length": {"value": 512}, "misbehave": {
                    "invalid_fraction": 0.5, "invalid_kind": "malformed"}}}]},
        "direct": {"target": {**block, "features": {"direct_load": True,
                                                    "direct_alloc": True}},
                   "initiators": [{"count": 2, "workload": {"length": {"value": 1000},
                                   "mix": {"direct_alloc": 1, "store": 1, "direct_load": 2,
                                           "load": 1, "free": 1}}}]},
        "per_initiator": {"target": {**block, "rings": "per_initiator"},
                          "initiators": [{"count": 3, "workload": {
                              "mix": {"alloc_store": 1, "free": 1}}}]},
        "two_targets": {"target": {**block, "name": "t0"},
                        "additional_targets": [{**block, "name": "t1"}],
                        "network": {"switches": [{"name": "s0"}, {"name": "s1"}], "links": [
                            {"a": "t0", "b": "s0"}, {"a": "t1", "b": "s1", "rate": "25Gbps"},
                            {"a": "s0", "b": "s1", "latency": "1us"}, {"a": "a", "b": "s0"},
                            {"a": "b", "b": "s1"}]},
                        "initiators": [{"name": "a", "target": "t1"},
                                       {"name": "b", "target": "t0"}]},
        "open_loop": {"stop": {"time": "500us"}, "target": block, "initiators": [
            {"count": 2, "workload": {"loop": "open", "rate": "300k/s",
                                      "length": {"value": 2048}}}]},
    }
    data = {**base, **cases[case]}
    out = run_scenario(scenario_from_dict(data), oracle=True)
    assert out.divergences == [], [str(d) for d in out.divergences]
    res = out.results
    assert res["run"]["operations_measured"] > 0
    statuses = {st for v in res["statuses"].values() for st in v}
    if case == "misbehaving":
        assert {"INVALID_HANDLE", "MALFORMED"} <= statuses
        assert res["operations"]["HOARD"]["count"] == 2
        assert res["run"]["stop_reason"] == "time"
    elif case == "kvcache":
        assert res["kvcache"]["target"]["sequences_published"] > 0
        assert res["operations"]["LOAD"]["ok"] > 0
    elif case == "direct":
        assert res["operations"]["DIRECT_LOAD"]["ok"] > 0
        assert res["operations"]["DIRECT_ALLOC"]["ok"] > 0
    elif case == "per_initiator":
        rings = res["targets"]["target"]["rings"]
        assert len(rings) == 4 and all(r["in_use_peak"] > 0 for r in rings[1:])
    elif case == "two_targets":
        assert res["initiators"]["a"]["path"] == ["a", "s0", "s1", "t1"]
        assert set(res["targets"]) == {"t0", "t1"}
    elif case == "open_loop":
        assert res["operations"]["LOAD"]["ops_per_s"] > 0
    if case != "misbehaving":
        assert statuses == {"OK"}


OFFLOAD: dict[str, Any] = {
    "seed": 3, "stop": {"operations": 300, "warmup": "5us"},
    "target": {"mode": "offload", "nic": {"profile": "ideal-be"}, "blocks": 128,
               "block_size": "4KiB", "request_credits": 8, "max_inline": "4KiB"},
    "initiators": [
        # sealed inline ALLOC_STOREs of full blocks and LOADs of them (INVALIDATE)
        {"name": "r", "count": 2, "handles": 32, "workload": {
            "window": 3, "length": {"value": "4KiB"},
            "mix": {"alloc_store": 1, "load": 3, "free": 1}}},
        # unsealed full blocks, RDMA Read source: ALLOC_STORE then STOREs
        {"name": "w", "handles": 32, "workload": {
            "window": 2, "seal": False, "inline_threshold": 0,
            "length": {"value": "4KiB"}, "mix": {"alloc_store": 1, "store": 2, "free": 1}}}],
}


@pytest.mark.parametrize(
    "case", ["ideal-be", "ideal", "keep_load", "cx5", "cx5-upstream", "partial"])
def test_offloaded_target_passes_the_oracle(case: str) -> None:
    """mode: offload: the NIC serves the full-block fast paths its profile verifies
    (docs/chains.md), the CPU the rest; every completion and the final state match the
    reference target."""
    data = json.loads(json.dumps(OFFLOAD))
    tgt = data["target"]
    if case == "ideal":  # ADDR_LE follows the little-endian WQEs: LOAD/STORE only
        tgt["nic"]["profile"] = "ideal"
    elif case == "keep_load":
        tgt["operations"] = {"load": "software"}
    elif case == "cx5":  # RedN's stack: every variant in CAS-on-WQE chains, UMR keys
        tgt["nic"]["profile"] = "cx5"
    elif case == "cx5-upstream":  # no chain verifies: all on the CPU
        tgt["nic"]["profile"] = "cx5-upstream"
    elif case == "partial":  # partial blocks: outside the fast paths
        for ini in data["initiators"]:
            ini["workload"]["length"] = {"value": 1000}
    out = run_scenario(scenario_from_dict(data), oracle=True)
    assert out.divergences == [], [str(d) for d in out.divergences]
    t = out.results["targets"]["target"]
    assert t["mode"] == "offload"
    served = t["fallbacks"]["served"]
    nic = {op: served.get(op, {}).get("nic", 0) for op in ("LOAD", "STORE", "ALLOC_STORE")}
    expect = {"ideal-be": {"LOAD", "STORE", "ALLOC_STORE"}, "ideal": {"LOAD", "STORE"},
              "keep_load": {"STORE", "ALLOC_STORE"}, "cx5": {"LOAD", "STORE", "ALLOC_STORE"},
              "cx5-upstream": set(), "partial": set()}[case]
    assert {op for op, n in nic.items() if n} == expect, served
    assert served["FREE"]["nic"] == 0 and served["FREE"]["cpu"] > 0
    assert t["fallbacks"]["offload_to_software"] == sum(
        served.get(op, {}).get("cpu", 0) for op in ("LOAD", "STORE", "ALLOC_STORE"))
    assert out.results["run"]["operations_measured"] > 0


def test_a_stalled_run_stops_and_says_so(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # decode instances with nobody prefilling: nothing ever completes
    data = {"stop": {"operations": 100, "stall": "200us"},
            "target": {"blocks": 64, "block_size": "4KiB"},
            "initiators": [{"workload": {"kind": "kvcache", "kvcache": {
                "role": "decode", "model": "custom", "bytes_per_token": 64}}}]}
    rc = main(["run", str(write(tmp_path, data)), "-o", str(tmp_path / "o"), "-q"])
    assert rc == 1
    assert "run stalled (no operation completed for 0.2 ms" in capsys.readouterr().err
    res = json.loads((tmp_path / "o" / RESULTS).read_text())
    assert res["run"]["stop_reason"] == "stalled"


def test_a_model_limit_is_one_line_naming_the_key(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = {**SMALL, "target": {**SMALL["target"], "staging": "8KiB"},
            "initiators": [{"workload": {"length": {"value": "4KiB"}}}]}
    rc = main(["run", str(write(tmp_path, data)), "-o", str(tmp_path / "o"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("kbtpsim: error: target.staging: staging region of 8192")


def test_results_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    p = write(tmp_path, SMALL)
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-m", "kbtpsim.cli", "run", str(p), "-q", "-o",
                        str(tmp_path / hash_seed)], check=True, env=env, cwd=REPO)
        outs.append((tmp_path / hash_seed / RESULTS).read_bytes())
    assert outs[0] == outs[1]


def test_path_latency_and_port_rate_come_from_the_network_graph() -> None:
    def p50(latency: str, rate: str) -> float:
        data = {"stop": {"operations": 120}, "target": {"blocks": 64, "block_size": "64KiB"},
                "network": {"switches": [{"name": "s", "latency": "0ns"}], "links": [
                    {"a": "i0", "b": "s", "latency": "0ns"},
                    {"a": "s", "b": "target", "latency": latency, "rate": rate}]},
                "initiators": [{"workload": {"window": 1, "mix": {"load": 1},
                                             "length": {"value": "64KiB"}}}]}
        res = run_scenario(scenario_from_dict(data)).results
        return float(res["operations"]["LOAD"]["latency_ns"]["p50"])

    base = p50("0ns", "100Gbps")
    # a LOAD crosses the path 2 times (request, then data + completion): +2 x 10 us
    assert p50("10us", "100Gbps") - base == pytest.approx(20_000, rel=0.05)
    # 64 KiB at 10 Gb/s instead of 100 Gb/s: about 47 us more of serialisation
    assert p50("0ns", "10Gbps") - base > 40_000


@pytest.mark.parametrize("invalidate", [True, False])
def test_workload_invalidate_sets_the_flag(invalidate: bool) -> None:
    """``workload.invalidate``: non-inline LOAD/STORE/ALLOC_STORE ask for INVALIDATE (the
    default) or not; inline stores never do."""
    from kbtpsim.wire import RequestFlag, decode

    data = json.loads(json.dumps(SMALL))
    data["stop"]["operations"] = 60
    data["initiators"][0]["workload"]["invalidate"] = invalidate
    out = run_scenario(scenario_from_dict(data), oracle=True)
    flags = {}
    for entry in out.system.servers["target"].log:
        if entry[0] == "handle":
            msg = decode(entry[2])
            if type(msg).__name__ in ("Load", "Store", "AllocStore"):
                inline = bool(msg.flags & RequestFlag.INLINE)
                flags.setdefault(inline, set()).add(bool(msg.flags & RequestFlag.INVALIDATE))
    assert flags[False] == {invalidate} and flags[True] == {False}, flags


def test_repost_wqe_sets_the_refill_cost() -> None:
    """``target.cpu.repost_wqe``: the CPU's cost per re-posted WQE (default the profile's
    ``cpu_post_ns``, 60 ns); a refill of a credit is that times its ~171 WQEs (chain and
    CPU slots on ideal-be, with the LOAD's entry re-read and the ALLOC_STORE's
    consumed-slot markers) plus its share of one doorbell (100 ns) per batch."""
    per_refill = {}
    for cost in (None, "10ns"):
        data = json.loads(json.dumps(OFFLOAD))
        data["stop"]["operations"] = 60
        data["target"]["chains"] = "v1"  # v2 (the default, C14) re-posts nothing
        if cost is not None:
            data["target"]["cpu"] = {"repost_wqe": cost}
        res = run_scenario(scenario_from_dict(data)).results
        per_refill[cost] = res["targets"]["target"]["cpu"]["per_op"]["REFILL"]["per_op_ns"]
    assert 1000 < per_refill["10ns"] < 1900, per_refill
    assert 8000 < per_refill[None] < 10500, per_refill
