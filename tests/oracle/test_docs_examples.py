"""docs/oracle.md's example divergence for ``--faults drop`` is what the command prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbtpsim.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "oracle.md"


def test_faults_drop_example_is_the_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    """The drop campaign docs/oracle.md quotes (finding O5) now reports 0 divergences, and
    a drop there did cut a chain that the server salvaged."""
    text = " ".join(DOC.read_text().split())
    cmd = re.search(r"e\.g\. `kbtpsim check ([^`]*--faults drop)` gave (\d+) divergences", text)
    assert cmd is not None and "That command now reports 0 divergences" in text
    assert main(["check", *cmd.group(1).split()]) == 0
    out = capsys.readouterr().out
    assert " 0 divergences" in out.splitlines()[1]
