"""The first example in docs/system.md runs; the measured table comes from bench.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbtpsim.system import bench

DOC = Path(__file__).resolve().parents[2] / "docs" / "system.md"


def test_doc_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = DOC.read_text()
    start = text.index("```python\n") + len("```python\n")
    code = text[start : text.index("```", start)]
    exec(compile(code, str(DOC), "exec"), {})
    assert "DIRECT_LOAD" in capsys.readouterr().out


def test_measured_table_in_the_doc_is_current() -> None:
    table = bench.format_rows(bench.measure("cx5"))
    assert table in DOC.read_text(), (
        "docs/system.md's latency table is stale: regenerate it with "
        "`python -m kbtpsim.system.bench`\n" + table)
