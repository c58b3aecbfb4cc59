"""Every notebook in ``notebooks/`` runs top to bottom on reduced sizes.

Each ``notebooks/*.ipynb`` is executed with nbclient in a ``python3`` kernel (ipykernel),
working directory the repository root, ``KBTPSIM_NOTEBOOK_QUICK=1`` (the notebooks' reduced
sizes) and ``KBTPSIM_NOTEBOOK_RESULTS`` a temporary directory (results and quick figures go
there, never into the committed ``docs/results/``). A failing cell fails the test with
that cell's error.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbclient
import nbformat
import pytest
from nbclient.exceptions import CellExecutionError, CellTimeoutError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300
MAX_NOTEBOOK_BYTES = 100 * 1024
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks in {ROOT / 'notebooks'}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_light(path: Path) -> None:
    """Committed without bulky outputs (clear them before committing)."""
    size = path.stat().st_size
    assert size <= MAX_NOTEBOOK_BYTES, (
        f"{path.name} is {size} octets (at most {MAX_NOTEBOOK_BYTES}): clear its outputs, "
        "figures belong in files (docs/results/)")
    nbformat.validate(nbformat.read(path, as_version=4))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBTPSIM_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("KBTPSIM_NOTEBOOK_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell failed:\n{ANSI.sub('', str(exc))}", pytrace=False)
    except CellTimeoutError as exc:
        pytest.fail(f"{path.name}: a cell ran longer than {CELL_TIMEOUT_S} s: {exc}",
                    pytrace=False)
