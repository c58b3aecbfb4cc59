"""Every command in docs/tools.md runs (the quickstart at 50 operations), and every tshark
output it shows is what tshark prints now (the start of a run does not depend on where it
stops, so the frames the page shows are the same at the reduced size)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from kbtpsim.cli import main

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "tools.md"
BLOCK = re.compile(r"```(sh|text)\n(.*?)```", re.S)
REDUCED = ["--set", "stop.operations=50"]


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_commands_run_and_the_shown_tshark_output_is_real(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("scenarios", "contrib"):
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)
    found = blocks()
    runs = tsharks = 0
    for i, (kind, body) in enumerate(found):
        if kind != "sh":
            continue
        (command,) = [line for line in body.splitlines() if line.strip()]
        argv = shlex.split(command)
        shown = found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" else None
        if argv[0] == "kbtpsim":
            assert argv[1] == "run"
            assert main([*argv[1:], *REDUCED]) == 0, command
            out = capsys.readouterr().out
            runs += 1
            if shown is not None:  # the same lines, numbers aside
                for line in shown.splitlines():
                    pattern = re.escape(line.split(" (")[0]).replace(r"\ ", " ")
                    assert re.search("^" + re.sub(r"\d+", r"\\d+", pattern), out, re.M), line
            for opt in ("--trace", "--pcap"):
                if opt in argv:
                    assert (tmp_path / argv[argv.index(opt) + 1]).stat().st_size > 0
        elif argv[0] == "tshark":
            if shutil.which("tshark") is None:
                if os.environ.get("CI") == "true":
                    pytest.fail("CI=true but no tshark: .ci/run should have installed it")
                continue  # test_tshark.py says why it skips
            res = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                 check=False)
            assert res.returncode == 0, res.stderr
            assert shown is not None, f"no output shown for {command}"
            got = [line.rstrip() for line in res.stdout.splitlines()]
            while got and not got[-1]:
                got.pop()
            assert got == shown.rstrip("\n").splitlines(), command
            tsharks += 1
        else:
            pytest.fail(f"docs/tools.md: unexpected command {command!r}")
    assert runs == 2
    assert tsharks in (0, 4)
