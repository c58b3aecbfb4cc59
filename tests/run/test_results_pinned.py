"""Full-fidelity results are pinned: the quickstart, the offloaded quickstart, a baseline
and 512 KiB blocks give byte-identical results.json (without the input echo) and
timeseries.csv to the golden files in tests/run/golden/. A change meant to move figures
regenerates them with ``python -m tests.run.regen_golden`` (which lists each changed
figure); see tests/run/golden_cases.py."""

from __future__ import annotations

import json

import pytest

from tests.run.golden_cases import CASES, Case, changed_figures, golden_paths, run_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_results_pinned(case: Case) -> None:
    res_path, ts_path = golden_paths(case)
    text, digest = run_case(case)
    golden = res_path.read_text(encoding="utf-8")
    if text != golden:
        lines = changed_figures(json.loads(golden), json.loads(text))
        pytest.fail(f"{case.name}: {len(lines)} figure(s) changed (if intended: python -m "
                    "tests.run.regen_golden):\n" + "\n".join(lines[:40]))
    assert digest == ts_path.read_text(encoding="utf-8").strip(), \
        f"{case.name}: timeseries.csv changed (results.json did not)"


def test_changed_figures_names_each_leaf() -> None:
    old = {"a": {"b": 1, "c": [1, 2]}, "d": 3}
    new = {"a": {"b": 1, "c": [1, 5]}, "e": 3}
    assert changed_figures(old, new) == ["a.c[1]: 2 -> 5", "d: 3 -> <absent>",
                                         "e: <absent> -> 3"]
