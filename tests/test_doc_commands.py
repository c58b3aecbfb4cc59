"""Every documented command that uses the offloaded target runs to completion (README.md
and docs/*.md, fenced code blocks), at reduced size: ``stop.operations`` cut, output in a
temporary directory."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from kbtpsim.cli import main

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
REDUCED_OPS = 24


def _offloads(scenario: Path) -> bool:
    data = yaml.safe_load(scenario.read_text()) or {}
    if "base" in data:  # a sweep: its base scenario, or a case/parameter that offloads
        text = scenario.read_text()
        return "offload" in text or _offloads(scenario.parent / data["base"])
    tgt = data.get("target") or {}
    return tgt.get("mode") == "offload"


def commands() -> list[tuple[str, str]]:
    """(page, command) for each `kbtpsim run|sweep` line of a fenced block that uses the
    offloaded target."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("#", 1)[0].strip()
                if not re.match(r"kbtpsim (run|sweep) scenarios/", line):
                    continue
                file = REPO / shlex.split(line)[2]
                if ("mode=offload" in line or _offloads(file)) and \
                        line not in {c for _, c in out}:  # each command once
                    out.append((page.name, line))
    return out


def test_the_documented_offload_commands_are_found() -> None:
    found = {c for _, c in commands()}
    assert "kbtpsim run scenarios/quickstart-offload.yaml" in found
    assert any("eval-ablation" in c for c in found)


@pytest.mark.parametrize("page,command", commands())
def test_documented_offload_command_runs(page: str, command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)[1:]
    if "-o" in argv:  # keep the documented options, write into tmp_path
        i = argv.index("-o")
        del argv[i:i + 2]
    argv += ["-o", str(tmp_path / "out"), "--set", f"stop.operations={REDUCED_OPS}", "-q"]
    rc = main(argv)
    assert rc == 0, (page, command)


def contention_commands() -> list[tuple[str, str]]:
    """(page, command) for each documented `kbtpsim run` line (fenced or indented code)
    that sets ``target.cpu.background``."""
    out = []
    for page in PAGES:
        for line in page.read_text().replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if re.match(r"kbtpsim run scenarios/\S+ .*target\.cpu\.background=", line) \
                    and line not in {c for _, c in out}:
                out.append((page.name, line))
    return out


def test_the_documented_contention_commands_are_found() -> None:
    found = {c for _, c in contention_commands()}
    assert "kbtpsim run scenarios/quickstart.yaml --set target.cpu.background=0.8" in found


@pytest.mark.parametrize("page,command", contention_commands())
def test_documented_contention_command_runs(page: str, command: str,
                                            tmp_path: Path) -> None:
    argv = [*shlex.split(command)[1:], "-o", str(tmp_path / "out"), "--set",
            f"stop.operations={REDUCED_OPS}", "-q"]
    assert main(argv) == 0, (page, command)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["targets"]["target"]["cpu"]["background"]["share"] > 0


def oracle_and_chains_commands() -> list[tuple[str, str]]:
    """(page, command) for each `kbtpsim check|mutants|chains` line of a fenced block."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("#", 1)[0].strip()
                if re.match(r"kbtpsim (check|mutants|chains)\b", line) and \
                        line not in {c for _, c in out}:
                    out.append((page.name, line))
    return out


def _option(argv: list[str], name: str, value: str | None = None) -> str | None:
    """Remove ``name`` and its value from ``argv``; return the value (``value``: absent)."""
    if name not in argv:
        return value
    i = argv.index(name)
    got = argv[i + 1]
    del argv[i:i + 2]
    return got


def _reduced(argv: list[str], tmp_path: Path) -> list[str]:
    """A documented command at reduced size: ``check`` on one seed, the first profile and
    mix, 8 requests in one phase; ``mutants`` on one mutant; files into ``tmp_path``."""
    argv = list(argv)
    if argv[0] == "check":
        seed = _option(argv, "--seed")
        _option(argv, "--seeds")
        profiles = _option(argv, "--profiles", "ideal-be")
        mix = _option(argv, "--mix", "default")
        _option(argv, "--ops")
        _option(argv, "--phases")
        argv += ["--seed", seed or "1", "--profiles", profiles.split(",")[0],  # type: ignore[union-attr]
                 "--mix", mix.split(",")[0], "--ops", "8", "--phases", "1"]  # type: ignore[union-attr]
        if "--junit" in argv:
            argv[argv.index("--junit") + 1] = str(tmp_path / "check.xml")
    elif argv[0] == "mutants" and "--only" not in argv:
        argv += ["--only", "skip-sequence"]
    if "-o" in argv:
        argv[argv.index("-o") + 1] = str(tmp_path / argv[argv.index("-o") + 1])
    return argv


def test_the_documented_oracle_and_chains_commands_are_found() -> None:
    found = {c for _, c in oracle_and_chains_commands()}
    assert "kbtpsim check --profiles ideal-be --addr-le off --block-size 16KiB --faults " \
           "drop" in found
    assert "kbtpsim chains explain STORE --nic ideal-be --block-size 64KiB" in found
    assert len(found) >= 20


@pytest.mark.parametrize("page,command", oracle_and_chains_commands())
def test_documented_oracle_and_chains_command_runs(page: str, command: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    argv = _reduced(shlex.split(command)[1:], tmp_path)
    assert main(argv) == 0, (page, command, argv, capsys.readouterr())
