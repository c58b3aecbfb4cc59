"""The commands of docs/performance.md run, at reduced size: the speed benchmark on one
small case, and the pinned-results regeneration in --check mode (a test never rewrites
the golden files)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "performance.md"


def commands() -> list[str]:
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", PAGE.read_text(), re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith(("python benchmarks/speed.py", "python -m tests.run.regen_golden",
                                "python -m kbtpsim.run.fidelity",
                                "python benchmarks/protocol_floor.py")):
                out.append(line)
    return out


def test_the_documented_commands_are_found() -> None:
    found = commands()
    assert any(c.startswith("python benchmarks/speed.py") for c in found)
    assert any(c.startswith("python -m tests.run.regen_golden") for c in found)
    assert any(c.startswith("python benchmarks/protocol_floor.py") for c in found)


@pytest.mark.parametrize("command", commands())
def test_documented_command_runs(command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)[1:]
    if argv[0] == "benchmarks/speed.py":
        if "--against" in argv:  # another tree: this one stands in for it
            argv[argv.index("--against") + 1] = str(REPO)
        argv += ["--scale", "0.005", "--cases", "quickstart"]  # later options win
    elif argv[:2] == ["-m", "kbtpsim.run.fidelity"]:
        argv += ["--scale", "0.01"]
    elif argv[0] == "benchmarks/protocol_floor.py":
        argv += ["--operations", "300"]
    else:
        argv = ["-m", "tests.run.regen_golden", "--check", "quickstart"]  # never rewrite
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if argv[0] == "benchmarks/speed.py":
        assert re.search(r"^quickstart\s+full\s+this\s+\d+", proc.stdout, re.M), proc.stdout
        assert re.search(r"^protocol alone \(quickstart, no simulator\): \d+ ops/CPU-s",
                         proc.stdout, re.M), proc.stdout
    elif argv[0] == "benchmarks/protocol_floor.py":
        assert re.search(r"^protocol alone: \d+ operations in", proc.stdout), proc.stdout
    elif argv[:2] == ["-m", "kbtpsim.run.fidelity"]:
        assert re.search(r"^\| eval-block-size \| \d+ \|", proc.stdout, re.M), proc.stdout
    else:
        assert "quickstart: unchanged" in proc.stdout, proc.stdout


def test_speed_reports_the_set_up_apart() -> None:
    """An offloaded case's set-up (its chains posted) is a CPU time of its own, and the
    rate after it is higher than the rate over the whole run."""
    proc = subprocess.run([sys.executable, "benchmarks/speed.py", "--cases", "ablation-v2",
                           "--scale", "0.005", "--fidelity", "full"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = re.search(r"^ablation-v2\s+full\s+this\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)",
                    proc.stdout, re.M)
    assert row, proc.stdout
    cpu, setup, rate, after = (float(row.group(i)) for i in (2, 3, 4, 5))
    assert 0 < setup < cpu and after > rate


def test_protocol_floor_plays_the_quickstart_and_refuses_what_it_cannot() -> None:
    """benchmarks/protocol_floor.py completes the requests it is asked for, each with the
    target's answer (the generators' view of their handles stays the target's), and
    names what it cannot play instead of guessing."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from protocol_floor import FloorError, protocol_rate

    r = protocol_rate(REPO / "scenarios" / "quickstart.yaml", 400)
    assert r["operations"] >= 400 and r["failed"] == 0 and r["rate"] > 0
    with pytest.raises(FloorError, match="one software target"):
        protocol_rate(REPO / "scenarios" / "eval-ablation.yaml", 10)
    proc = subprocess.run([sys.executable, "benchmarks/protocol_floor.py",
                           "scenarios/eval-ablation.yaml"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "needs one software target" in proc.stderr
