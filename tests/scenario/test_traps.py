"""Mistakes a new user makes in scenario files: each is one line naming the key and the
value, exit 2, no traceback, before the simulation starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbtpsim.cli import main


def run_file(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str],
             name: str = "s.yaml", command: str = "run") -> str:
    p = tmp_path / name
    p.write_text(text)
    out = tmp_path / "out"
    assert main([command, str(p), "-o", str(out)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and not out.exists()  # nothing ran
    lines = cap.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    assert lines[0].startswith("kbtpsim: error: ")
    return lines[0][len("kbtpsim: error: "):]


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("stop: {time: 1000}\n",
     "stop.time: 1000 has no unit (a time needs one: '1000ns', '1000us', ...)"),
    ("metrics: {sample_interval: 10}\n",
     "metrics.sample_interval: 10 has no unit (a time needs one: '10ns', '10us', ...)"),
    ("target: {cpu: {op_costs: {LOAD: 500}}}\n",
     "target.cpu.op_costs.LOAD: 500 has no unit (a time needs one: '500ns', '500us', ...)"),
    ("target: {block_size: 32kb}\n",
     "target.block_size: '32kb' is ambiguous: 32KiB = 32768 or 32kB = 32000 octets?"),
    ("target: {block_size: 32KB}\n",
     "target.block_size: '32KB' is ambiguous: 32KiB = 32768 or 32kB = 32000 octets?"),
])
def test_units(tmp_path: Path, yaml_text: str, message: str,
               capsys: pytest.CaptureFixture[str]) -> None:
    assert run_file(tmp_path, yaml_text, capsys) == message


def test_docs_example_errors_are_real(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The error lines docs/scenarios.md shows under **Strict.** are what kbtpsim prints."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text()
    shown = [line.strip() for line in doc.splitlines()
             if line.startswith("    kbtpsim: error: ")]
    cases = {"target.blokcs": "target: {blokcs: 8}\n",
             "target.block_size": "target: {block_size: 32KB}\n",
             "stop.time": "stop: {time: 1000}\n",
             "initiators[1].quota": "target: {blocks: 1024}\ninitiators:\n"
                                    "  - {quota: 600}\n  - {quota: 600}\n"}
    assert len(shown) == len(cases)
    for line in shown:
        key = line.split(": ")[2]
        got = run_file(tmp_path, cases[key], capsys)
        assert f"kbtpsim: error: {got}" == line
