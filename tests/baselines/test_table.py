"""The comparison table generator on hand-made results: grouping, numbers, findings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kbtpsim.baselines.table import (
    Row,
    approach_table,
    approaches,
    findings,
    load_rows,
    render,
    summary,
)


def result(approach: str, window: int, mem: float | None, cpu: float, store_rt: float,
           load_rt: float, store_p50: float, load_p50: float,
           store_ops: str = "ALLOC_STORE") -> dict[str, Any]:
    def kind(ops: list[str], rt: float, p50: float) -> dict[str, Any]:
        return {"operations": ops, "count": 10, "ops_per_s": 1000.0, "round_trips": rt,
                "latency_p50_ns": p50, "latency_p99_ns": 2 * p50}

    return {
        "scenario": {"name": "t", "seed": 0, "target": {}, "stop": {},
                     "initiators": [{"count": 2, "workload": {"window": window}}]},
        "run": {"operations_measured": 20},
        "throughput": {"ops_per_s": 2000.0, "gb_per_s": 1.5},
        "targets": {"target": {"cpu": {"utilisation": 0.1, "per_op": {}},
                               "memory": {"buffer_bytes": 2 << 20}}},
        "comparison": {
            "approach": approach, "memory_utilisation": mem,
            "cpu_ns_per_op": {"all": cpu, "store": cpu, "load": cpu, "free": cpu},
            "store": kind([store_ops], store_rt, store_p50),
            "load": kind(["LOAD"], load_rt, load_p50),
            "free": kind(["FREE"], 1.0, 1000.0)},
    }


ROWS = [
    Row("static / light", "one_sided_static", result("one_sided_static", 1, 0.5, 0, 1, 1,
                                                     10_000, 18_000)),
    Row("static / heavy", "one_sided_static", result("one_sided_static", 8, 0.4, 0, 1, 1,
                                                     80_000, 150_000)),
    Row("dynamic", "one_sided_dynamic", result("one_sided_dynamic", 1, 0.99, 500, 2, 1,
                                               20_000, 18_000)),
    Row("two-sided", "two_sided", result("two_sided", 1, 0.995, 3000, 1, 1, 25_000,
                                         18_500)),
    Row("KBTP software", "kbtp_software", result("kbtp_software", 1, 0.97, 700, 2, 1,
                                                 24_000, 20_000)),
]


def test_rows_group_into_approaches_light_and_heavy() -> None:
    apps = approaches(ROWS)
    assert [a.name for a in apps] == ["static", "dynamic", "two-sided", "KBTP software"]
    static = apps[0]
    assert static.light.name == "static / light" and static.heavy.name == "static / heavy"
    table = approach_table(apps)
    # memory from the heavy run (40.0%), latency from the light one (10.0 us)
    assert "| static | 40.0% | 0 (0 / 0 / 0) | 1.00 / 1.00 / 1.00 | 10.0 / 20.0 |" in table
    assert "| dynamic | 99.0% | 500 (500 / 500 / 500) | 2.00 / 1.00 / 1.00 |" in table


def test_findings_state_disagreements_with_numbers() -> None:
    found = findings(ROWS)
    text = "\n".join(found)
    assert "**Memory, one-sided static \"low\": agrees.** Lowest measured, 40.0%" in text
    assert ("**Memory, one-sided dynamic \"medium\" vs KBTP \"high\": disagrees.** Dynamic "
            "allocation holds 99.0% of what it reserves, more than KBTP software (97.0%)"
            in text)
    assert ("**Round trips, KBTP software \"one round trip per operation\": disagrees.** "
            "store 2.00 on average" in text)
    assert ("**Target CPU, KBTP software \"not required per operation\": disagrees for a "
            "software target.** 700 ns per operation" in text)
    assert ("**Operation cost, static \"low\" < dynamic \"medium\" < two-sided \"high\": "
            "agrees for stores, disagrees for loads (within 10% of each other).** Store p50 "
            "at light load: static 10.0 us, dynamic 20.0 us, two-sided 25.0 us. Load p50: "
            "static 18.0, dynamic 18.0, two-sided 18.5 us" in text)
    heads = summary(found)
    assert heads[0].startswith("In short") and len(heads) == 2 + sum(
        "disagrees" in f.split("**")[1] for f in found)


def test_render_and_load_rows_from_a_run_directory(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(ROWS[2].results))
    rows = load_rows([d])
    assert [r.name for r in rows] == ["one_sided_dynamic"]
    text = render(ROWS, "CMD")
    assert "```sh\nCMD\n```" in text
    assert "| One-sided, dynamic | medium | yes (allocation) | medium |" in text
    assert "## Where the measurements disagree with the draft" in text


def test_offloaded_stores_on_the_cpu_are_named_with_their_reason() -> None:
    """An offloaded target whose stores the CPU served (most of them) says so, with the
    most frequent fallback reason, in its CPU and its heavy-load store findings."""
    reason = "a Read source of more than one packet"

    def offloaded(window: int, store_p50: float) -> dict[str, Any]:
        r = result("kbtp_offload", window, 0.97, 3000, 2, 1, store_p50, 20_000)
        r["targets"]["target"].update(chains="v2", fallbacks={
            "served": {"ALLOC_STORE": {"cpu": 9, "nic": 1}, "LOAD": {"cpu": 0, "nic": 10}},
            "reasons": {"ALLOC_STORE": {reason: 8, "partial block": 1}}})
        return r

    rows = [*ROWS, Row("static / heavy2", "one_sided_static",
                       result("one_sided_static", 8, 0.4, 0, 1, 1, 10_000, 150_000)),
            Row("KBTP offloaded / light", "kbtp_offload", offloaded(1, 24_000)),
            Row("KBTP offloaded / heavy", "kbtp_offload", offloaded(8, 900_000))]
    text = "\n".join(findings(rows))
    assert ("Requests served by the NIC: ALLOC_STORE 10%, LOAD 100%" in text)
    assert f"Its stores run on the CPU: 89% of them for {reason};" in text
    assert f"its stores run on the target CPU (89% of them for {reason})" in text
