"""docs/oracle.md's example divergence for ``--faults drop`` is what the command prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbtpsim.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "oracle.md"


def test_faults_drop_example_is_the_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(DOC.read_text().split())
    cmd = re.search(r"e\.g\. `kbtpsim check ([^`]*--faults drop)`", text)
    claim = re.search(r"writing: (\d+) divergences, the first `(\w)`'s (\w+) served by its "
                      r"chain \(ticket (\d+)\) with `(block_offset=0x\w+)` where the software "
                      r"target gives `(block_offset=0x\w+)`", text)
    assert cmd is not None and claim is not None
    n, who, op, ticket, observed, expected = claim.groups()
    assert main(["check", *cmd.group(1).split()]) == 1
    out = capsys.readouterr().out
    assert f" {n} divergences" in out.splitlines()[1]
    report = out[out.index("DIVERGENCE"):]
    assert f"initiator {who}," in report and f'"opcode": "{op}"' in report
    assert f"ticket {ticket};" in report
    assert re.search(rf"expected: Completion\(.*{expected}", report)
    assert re.search(rf"observed: Completion\(.*{observed}", report)
