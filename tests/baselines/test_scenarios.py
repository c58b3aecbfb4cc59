"""Baselines in scenarios and sweeps: selection, errors naming the key, the same
results.json structure, determinism, sweep cases, the comparison sweep and its table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kbtpsim.baselines.table import findings, load_rows
from kbtpsim.baselines.table import main as table_main
from kbtpsim.baselines.workload import SlottedPrefill, kv_request
from kbtpsim.cli import main
from kbtpsim.run.sweep import load_sweep, run_sweep
from kbtpsim.scenario import ScenarioError, scenario_from_dict
from kbtpsim.workload import Request, SequenceRegistry

REPO = Path(__file__).resolve().parents[2]
COMPARE = REPO / "scenarios" / "compare-approaches.yaml"

#: a small KV-cache scenario: 8 KiB blocks, sequences of 16..128 tokens (1..8 blocks)
KV: dict[str, Any] = {
    "name": "kv-small", "seed": 3,
    "stop": {"operations": 150},
    "target": {"blocks": 64, "block_size": "8KiB", "request_credits": 8,
               "cpu": {"cores": 1}, "staging": "4MiB"},
    "initiators": [
        {"name": "p", "quota": 24, "handles": 64, "buffers": "4MiB",
         "workload": {"kind": "kvcache", "window": 2,
                      "kvcache": {"role": "prefill", "model": "custom",
                                  "bytes_per_token": 512, "tokens_per_block": 16,
                                  "sequence_tokens_min": 16,
                                  "sequence_tokens_max": 128}}},
        {"name": "d", "quota": 0, "buffers": "4MiB",
         "workload": {"kind": "kvcache", "window": 2,
                      "kvcache": {"role": "decode", "model": "custom",
                                  "bytes_per_token": 512, "tokens_per_block": 16}}},
    ],
    "metrics": {"sample_interval": "2us"},
}


def write(tmp_path: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def run(tmp_path: Path, *sets: str, name: str = "out") -> dict[str, Any]:
    p = write(tmp_path, KV)
    args = ["run", str(p), "-o", str(tmp_path / name), "-q"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    res: dict[str, Any] = json.loads((tmp_path / name / "results.json").read_text())
    return res


def keys(d: Any, depth: int = 3) -> Any:
    if not isinstance(d, dict) or depth == 0:
        return None
    return {k: keys(v, depth - 1) for k, v in d.items()
            if k not in ("operations", "statuses", "scenario", "per_op", "completions",
                         "served", "nic", "ports", "initiators")}


@pytest.mark.parametrize("mode", ["one_sided_static", "one_sided_dynamic", "two_sided"])
def test_kvcache_runs_on_every_baseline_with_the_kbtp_structure(
        tmp_path: Path, mode: str) -> None:
    kbtp = run(tmp_path, name="kbtp")
    base = run(tmp_path, f"target.mode={mode}", name=mode)
    assert base["run"]["operations_measured"] == 150
    assert keys(base) == keys(kbtp)  # the same keys; what does not apply is null
    t = base["targets"]["target"]
    assert t["mode"] == mode and t["rings"] == [] and t["quotas"] == []
    assert t["fallbacks"]["offload_to_software"] is None
    cmp = base["comparison"]
    assert cmp["approach"] == mode and cmp["load"]["round_trips"] == 1.0
    assert cmp["store"]["round_trips"] == (2.0 if mode == "one_sided_dynamic" else 1.0)
    assert base["operations"]["LOAD"]["ok"] > 0
    cpu = t["cpu"]["per_measured_op"]
    if mode == "one_sided_static":
        assert cpu["all"] == 0 and t["cpu"]["per_op"] == {}
    else:
        assert cpu["store"] > 0
    assert kbtp["comparison"]["approach"] == "kbtp_software"
    assert kbtp["comparison"]["load"]["round_trips"] == 1.0
    mem = t["memory"]
    assert mem["pool_bytes"] == 64 * 8192 and mem["reserved_bytes_end"] > 0
    if mem["samples"]:
        assert 0 < mem["utilisation"] <= 1
    ts = (tmp_path / mode / "timeseries.csv").read_text()
    assert "target.memory.held" in ts and "target.memory.reserved" in ts


def test_same_seed_gives_identical_results(tmp_path: Path) -> None:
    a = run(tmp_path, "target.mode=two_sided", name="a")
    b = run(tmp_path, "target.mode=two_sided", name="b")
    assert a == b
    assert (tmp_path / "a" / "results.json").read_bytes() == \
        (tmp_path / "b" / "results.json").read_bytes()


def test_memory_utilisation_of_static_slots_is_below_dynamic(tmp_path: Path) -> None:
    more = ("stop.operations=500",)
    static = run(tmp_path, "target.mode=one_sided_static", *more, name="s")
    dynamic = run(tmp_path, "target.mode=one_sided_dynamic", *more, name="d")
    us = static["comparison"]["memory_utilisation"]
    ud = dynamic["comparison"]["memory_utilisation"]
    assert us is not None and ud is not None
    assert us < 0.8 < ud <= 1.0
    # static: the reserved memory is the prefill's whole region, all the time
    assert static["targets"]["target"]["memory"]["reserved_bytes_mean"] == 24 * 8192


@pytest.mark.parametrize("sets,message", [
    (["target.mode=two_sided", "target.features.direct_load=true"],
     "target.features.direct_load: a KBTP feature: not available with mode: two_sided"),
    (["target.mode=one_sided_dynamic", "target.rings=per_initiator"],
     "target.rings: KBTP rings: not available"),
    (["target.baseline.copy_rate=10Gbps"],
     "target.baseline: only meaningful with mode: one_sided_static"),
    (["target.mode=one_sided_static", "initiators[0].quota=4"],
     "initiators[0].quota: 4 blocks: a one-sided static region in sequence slots must "
     "hold one longest sequence (8 blocks)"),
    (["initiators[1].workload.kvcache.load_with=direct_load"],
     "initiators[1].workload.kvcache.load_with: needs target.features.direct_load: true"),
    (["initiators[0].workload.kvcache.store_with=direct_alloc"],
     "initiators[0].workload.kvcache.store_with: needs target.features.direct_alloc"),
    (["target.mode=two_sided", "target.baseline.granularity=0"],
     "target.baseline.granularity: must be at least 1 octet"),
    (["target.mode=one_sided", ],
     "target.mode: 'one_sided' is not one of"),
])
def test_bad_values_exit_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          sets: list[str], message: str) -> None:
    p = write(tmp_path, KV)
    args = ["run", str(p), "-o", str(tmp_path / "x"), "-q"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kbtpsim: error: ") and message in err, err
    assert not (tmp_path / "x").exists()


def test_oracle_is_refused_for_a_baseline(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, KV)
    assert main(["run", str(p), "-o", str(tmp_path / "x"), "-q", "--oracle", "--set",
                 "target.mode=one_sided_static"]) == 2
    assert "target.mode: --oracle checks KBTP targets" in capsys.readouterr().err


def test_direct_modes_in_a_kvcache_workload(tmp_path: Path) -> None:
    dl = run(tmp_path, "target.features.direct_load=true",
             "initiators[1].workload.kvcache.load_with=direct_load", name="dl")
    assert dl["comparison"]["approach"] == "kbtp_software+direct_load"
    assert dl["operations"]["DIRECT_LOAD"]["ok"] > 0
    assert dl["comparison"]["load"]["round_trips"] >= 3
    # only DIRECT_LOADs that fell back to LOAD (a sequence being evicted) cost CPU
    falls = dl["targets"]["target"]["fallbacks"]["direct_load_to_load"]
    per_load = dl["targets"]["target"]["cpu"]["per_measured_op"]["load"]
    assert per_load < 620 * (falls + 1) / dl["operations"]["DIRECT_LOAD"]["count"] + 1
    da = run(tmp_path, "target.features.direct_alloc=true", "initiators[1].quota=1",
             "initiators[0].workload.kvcache.store_with=direct_alloc", name="da")
    assert da["comparison"]["approach"] == "kbtp_software+direct_alloc"
    assert da["operations"]["DIRECT_ALLOC"]["ok"] > 0
    assert da["comparison"]["store"]["round_trips"] == 5
    mem = da["targets"]["target"]["memory"]
    assert mem["reserved_bytes_end"] == (24 + 1) * 8192  # partitions, reserved whole


def test_slotted_prefill_places_sequences_in_whole_slots() -> None:
    data = json.loads(json.dumps(KV))
    sc = scenario_from_dict(data, [("target.mode", "one_sided_static")])
    spec = sc.initiators[0].workload
    gen = SlottedPrefill(spec, np.random.default_rng(0), SequenceRegistry(),
                         block_size=8192, name="p", handle_base=0x1000, handles=64,
                         quota=24, inline_threshold=0)
    assert (gen.slots, gen.slot_blocks, gen.slot_bytes) == (3, 8, 8 * 8192)
    issued: list[Request] = []
    while (req := gen.next()) is not None:
        issued.append(req)
    stores = [r for r in issued if r.op == "alloc_store"]
    seqs = {}
    for r in stores:
        slot, rest = divmod(gen.offset_of(r.handle), gen.slot_bytes)
        seqs.setdefault(slot, []).append(rest // 8192)
    assert sorted(seqs) == [0, 1, 2]  # three sequences, one slot each, nothing more
    assert all(v == list(range(len(v))) for v in seqs.values())  # k-th block at k
    assert gen.allocated_bytes == 3 * gen.slot_bytes
    for r in stores:
        gen.done(r, True)
    first = len(seqs[0])  # no slot is free: the oldest sequence (slot 0) is evicted
    frees = [gen.next() for _ in range(first)]
    assert all(f is not None and f.op == "free" and gen._slot_of[f.handle] == 0
               for f in frees)
    for f in frees[:-1]:
        gen.done(f, True)  # type: ignore[arg-type]
    assert gen.free_slots == []  # the slot is free once all its blocks are
    gen.done(frees[-1], True)  # type: ignore[arg-type]
    assert gen.free_slots == [0] and gen.allocated_bytes == 2 * gen.slot_bytes
    nxt = gen.next()
    assert nxt is not None and nxt.op == "alloc_store" and gen.offset_of(nxt.handle) == 0


def test_kv_request_translates_direct_ops() -> None:
    data = json.loads(json.dumps(KV))
    sc = scenario_from_dict(data, [
        ("target.features.direct_load", True), ("target.features.direct_alloc", True),
        ("initiators[1].quota", 1),
        ("initiators[1].workload.kvcache.load_with", "direct_load"),
        ("initiators[0].workload.kvcache.store_with", "direct_alloc")])
    pre, dec = (i.workload for i in sc.initiators)
    assert kv_request(dec, Request("load", 1, 10)).op == "direct_load"
    st = kv_request(pre, Request("alloc_store", 1, 10, seal=True))
    assert st.op == "direct_alloc" and not st.seal
    assert kv_request(pre, Request("free", 1)).op == "free"


def test_sweep_cases_zip_keys_and_errors_name_them(tmp_path: Path) -> None:
    write(tmp_path, KV, "base.yaml")
    sweep = {"base": "base.yaml", "set": {"stop.operations": 50},
             "cases": [{"name": "static", "set": {"target.mode": "one_sided_static"}},
                       {"name": "dl", "set": {"target.features.direct_load": True,
                        "initiators[1].workload.kvcache.load_with": "direct_load"}}],
             "parameters": {"seed": [1, 2]}}
    pts = load_sweep(write(tmp_path, sweep, "sw.yaml"), [("stop.operations", 40)])
    assert [p.values for p in pts] == [{"case": "static", "seed": 1},
                                       {"case": "static", "seed": 2},
                                       {"case": "dl", "seed": 1}, {"case": "dl", "seed": 2}]
    assert pts[2].scenario.initiators[1].workload.kvcache.load_with == "direct_load"
    assert all(p.scenario.stop.operations == 40 for p in pts)  # --set wins
    no_params = dict(sweep)
    del no_params["parameters"]
    assert len(load_sweep(write(tmp_path, no_params, "np.yaml"))) == 2
    for bad, where in [
        ({"cases": [{"name": "a"}, {"name": "a"}]}, "cases[1].name: duplicate"),
        ({"cases": [{"name": "a", "sett": {}}]}, "cases[0].sett: unknown key"),
        ({"cases": []}, "cases: must be a non-empty list"),
        ({"cases": [{"name": "a", "set": {"target.mode": "x"}}]},
         "target.mode: 'x' is not one of"),
    ]:
        spec = {"base": "base.yaml", **bad}
        with pytest.raises(ScenarioError) as exc:
            load_sweep(write(tmp_path, spec, "bad.yaml"))
        assert str(exc.value).startswith(where), str(exc.value)


def test_compare_sweep_runs_end_to_end_and_tabulates(tmp_path: Path) -> None:
    """The shipped comparison sweep on a tiny size (every case), then its table."""
    points = load_sweep(COMPARE, [("stop.operations", 40), ("stop.warmup", 0),
                                  ("target.blocks", 200), ("initiators[0].quota", 64),
                                  ("initiators[0].workload.kvcache.sequence_tokens_max",
                                   256)])
    names = [p.values["case"] for p in points]
    assert len(names) == 20 and {n.split(" / ")[1] for n in names} == {"light", "heavy"}
    light = [p for p in points if p.values["case"].endswith("/ light")]
    rows = run_sweep(light, tmp_path / "sw", jobs=1)
    assert not [r for r in rows if "error" in r], rows
    out = tmp_path / "cmp.md"
    assert table_main([str(tmp_path / "sw"), "-o", str(out)]) == 0
    text = out.read_text()
    for name in ("one-sided static", "one-sided dynamic", "two-sided", "KBTP software",
                 "KBTP software (inline stores)", "KBTP offloaded",
                 "KBTP offloaded (inline stores)", "KBTP offloaded (chains v1, pre-built WQEs)",
                 "KBTP + DIRECT_LOAD", "KBTP + DIRECT_ALLOC"):
        assert f"| {name} |" in text
    assert "kbtpsim sweep scenarios/compare-approaches.yaml" in text
    got = load_rows([tmp_path / "sw"])
    assert {r.approach for r in got} == {
        "one_sided_static", "one_sided_dynamic", "two_sided", "kbtp_software",
        "kbtp_offload", "kbtp_software+direct_load", "kbtp_software+direct_alloc"}
    found = findings(got)
    assert any("one round trip per operation" in f and "disagrees" in f for f in found)
    assert any(f.startswith("**Target CPU, one-sided static") for f in found)
