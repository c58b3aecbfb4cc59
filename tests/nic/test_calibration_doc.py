"""docs/calibration.md, the calibration sources table, against
kbtpsim.nic.calibration.PUBLISHED: every row a test reproduces is in the table with its
figure and its source, and the page points at nothing outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbtpsim.nic.calibration import PUBLISHED

DOC = Path(__file__).resolve().parents[2] / "docs" / "calibration.md"
TEXT = DOC.read_text(encoding="utf-8")


def rows() -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    last_source = ""
    for line in TEXT.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            source = cells[5]
            if source.startswith("the same") and "folder" not in source:
                source = last_source
            last_source = source
            out[int(cells[0])] = [*cells[:5], source]
    return out


def test_every_row_numbered_once() -> None:
    assert sorted(rows()) == list(range(1, 15))


def test_published_rows_are_in_the_table() -> None:
    table = rows()
    for pub in PUBLISHED:
        row = table[pub.row]
        numbers = {float(x) for x in re.findall(r"\d+(?:\.\d+)?", row[4])}
        want = pub.value / 1000 if pub.unit == "ns" and pub.test != "dma_read_lat" \
            else pub.value
        assert round(want, 2) in numbers, (pub, row[4])
        repo, _, path = pub.source.partition(" ")
        assert repo in row[5] and path.split("/")[-1] in row[5], (pub, row[5])


def test_the_page_stands_alone() -> None:
    assert "shared/" not in TEXT and "published.md" not in TEXT
    for link in re.findall(r"\]\(([^)#]+)", TEXT):
        assert (DOC.parent / link).exists(), link


def test_nic_model_calibration_table_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/nic-model.md's comparison table is `benchmarks/nic_calibration.py`'s output."""
    import runpy

    mod = runpy.run_path(str(DOC.parents[1] / "benchmarks" / "nic_calibration.py"))
    assert mod["main"]([]) == 0
    table = capsys.readouterr().out
    doc = (DOC.parent / "nic-model.md").read_text(encoding="utf-8")
    assert table in doc, "docs/nic-model.md is stale: python benchmarks/nic_calibration.py"


def test_calibration_page_carries_the_same_table(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/calibration.md shows the same model-vs-published table, with in/out-of-sample
    marks and the per-profile out-of-sample geomean error."""
    import runpy

    mod = runpy.run_path(str(DOC.parents[1] / "benchmarks" / "nic_calibration.py"))
    assert mod["main"]([]) == 0
    table = capsys.readouterr().out
    assert table in TEXT, "docs/calibration.md is stale: python benchmarks/nic_calibration.py"
    assert "Out-of-sample geomean error, cx3-40g-ib:" in table
    assert "| in |" in table and "| out |" in table


def test_every_published_row_is_marked() -> None:
    from kbtpsim.nic.calibration import compare_published, geomean_error

    rows = compare_published()
    err, n = geomean_error(rows, "cx3-40g-ib")
    assert n >= 10 and err == err  # not NaN: the cx3 profile has out-of-sample figures
    assert any(r["in_sample"] for r in rows) and any(not r["in_sample"] for r in rows)
