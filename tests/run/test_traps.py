"""The traps a new user falls into with ``kbtpsim run``, ``sweep``, ``plot``, ``replay``
and ``encode``: each is one line on stderr, exit 2, no traceback, before anything runs
(or, for output, what is written is what is printed)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbtpsim.cli import main
from kbtpsim.scenario import scenario_from_dict

REPO = Path(__file__).resolve().parents[2]
TINY: dict[str, Any] = {
    "name": "tiny", "seed": 1, "stop": {"operations": 60},
    "target": {"blocks": 32, "block_size": "4KiB", "request_credits": 8},
    "initiators": [{"name": "c", "handles": 16, "workload": {"window": 2,
                                                            "length": {"value": 512}}}],
}


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    assert lines[0].startswith("kbtpsim: error: "), lines[0]
    return lines[0][len("kbtpsim: error: "):]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(TINY))
    return p


# ---------------------------------------------------------------- output paths
def test_run_output_that_cannot_be_used(tmp_path: Path, tiny: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    for out, why in ((f, "names an existing file, not a directory"),
                     (f / "sub", f"{f} is a file, not a directory"),
                     (Path("/proc/kbtpsim-out"), "cannot create a file in /proc")):
        assert main(["run", str(tiny), "-o", str(out)]) == 2
        assert one_line(capsys).startswith(f"-o {out}: {why}")


def test_plot_paths(tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "r"
    assert main(["run", str(tiny), "-o", str(run), "-q"]) == 0
    capsys.readouterr()
    # no extension: matplotlib writes .png, and that is the path printed
    assert main(["plot", str(run), "-o", str(tmp_path / "fig")]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'fig.png'}: latency CDF")
    assert (tmp_path / "fig.png").stat().st_size > 1000
    assert main(["plot", str(run), "-o", str(tmp_path / "fig.xyz")]) == 2
    assert one_line(capsys).startswith(f"-o {tmp_path / 'fig.xyz'}: unsupported file type "
                                       "('.xyz'; use .eps, ")
    assert main(["plot", str(run), "-o", str(tmp_path / "nope" / "f.png")]) == 2
    assert one_line(capsys) == (f"-o {tmp_path / 'nope' / 'f.png'}: directory "
                                f"{tmp_path / 'nope'} does not exist")
    # without -o: into the first directory, not the current one
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"{run / 'plot.png'}: ")
    assert (run / "plot.png").exists() and not (tmp_path / "kbtpsim.png").exists()


# ---------------------------------------------------------------- files
@pytest.mark.parametrize(("text", "message"), [
    ("", "the file is empty"),
    ("# nothing but a comment\n\n", "the file is empty"),
])
def test_empty_scenario_is_an_error(tmp_path: Path, text: str, message: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "e.yaml"
    p.write_text(text)
    assert main(["run", str(p), "-o", str(tmp_path / "o")]) == 2
    assert one_line(capsys).startswith(f"{p}: {message}")
    assert not (tmp_path / "o").exists()


def test_duplicate_keys_are_an_error(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "d.yaml"
    p.write_text("target:\n  blocks: 64\n  block_size: 4KiB\n  blocks: 32\n")
    assert main(["run", str(p)]) == 2
    assert one_line(capsys) == ("target.blocks: duplicate key at line 4 (first at line 2; "
                                f"YAML would silently keep only the last) in {p}")
    s = tmp_path / "s.yaml"
    s.write_text("base: d.yaml\nparameters: {seed: [1]}\nparameters: {seed: [2]}\n")
    assert main(["sweep", str(s)]) == 2
    assert one_line(capsys).startswith("parameters: duplicate key at line 3")
    r = tmp_path / "r.yaml"
    r.write_text("target: {blocks: 4}\ninitiators: {a: {quota: 1}}\nsteps: []\nsteps: []\n")
    assert main(["replay", str(r)]) == 2
    assert one_line(capsys).startswith("steps: duplicate key at line 4")


def test_stop_defaults() -> None:
    assert scenario_from_dict({}).stop.operations == 1000
    warm = scenario_from_dict({"stop": {"warmup": "20us"}}).stop
    assert warm.operations == 1000 and warm.warmup == 20_000_000
    timed = scenario_from_dict({"stop": {"time": "1ms"}}).stop
    assert timed.operations is None and timed.time == 10**9
    doc = (REPO / "docs" / "scenarios.md").read_text()
    assert "| `stop.operations` | int or null | `1000` |" in doc


@pytest.mark.parametrize(("command", "name", "message"), [
    ("run", "sweep-rings.yaml", "this is a sweep file (base and parameters or cases), not a "
     "scenario: run it with kbtpsim sweep {p}"),
    ("run", "replay-basic.yaml", "this is a replay script (target, initiators and steps), "
     "not a scenario: run it with kbtpsim replay {p}"),
    ("sweep", "quickstart.yaml", "this is a scenario, not a sweep file (base and parameters "
     "or cases): run it with kbtpsim run {p}"),
    ("sweep", "replay-basic.yaml", "this is a replay script (target, initiators and steps), "
     "not a sweep file (base and parameters or cases): run it with kbtpsim replay {p}"),
    ("replay", "quickstart.yaml", "this is a scenario, not a replay script (target, "
     "initiators and steps): run it with kbtpsim run {p}"),
    ("replay", "sweep-rings.yaml", "this is a sweep file (base and parameters or cases), "
     "not a replay script (target, initiators and steps): run it with kbtpsim sweep {p}"),
])
def test_each_command_names_the_kind_of_file(command: str, name: str, message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    p = REPO / "scenarios" / name
    assert main([command, str(p)]) == 2
    assert one_line(capsys) == f"{p}: {message.format(p=p)}"


# ---------------------------------------------------------------- output
def test_quiet_prints_only_the_results_path(tmp_path: Path, tiny: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tiny), "-o", str(tmp_path / "q"), "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    assert cap.out.startswith(f"results: {tmp_path / 'q' / 'results.json'} (wall ")
    assert cap.out.count("\n") == 1
    # without -q and without a terminal: progress as lines, the table, the path
    assert main(["run", str(tiny), "-o", str(tmp_path / "v")]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines()[-1].startswith("kbtpsim run tiny: 100% (")
    assert "\ntarget: CPU " in cap.out and "target target" not in cap.out


def test_oracle_timeseries_ends_with_the_run(tmp_path: Path, tiny: Path) -> None:
    assert main(["run", str(tiny), "-o", str(tmp_path / "o"), "-q", "--oracle"]) == 0
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    end_ns = res["run"]["end_ps"] / 1000
    with (tmp_path / "o" / "timeseries.csv").open() as fh:
        times = [float(r["time_ns"]) for r in csv.DictReader(fh)]
    assert times and max(times) <= end_ns


def test_summary_without_rings_has_no_empty_list() -> None:
    from kbtpsim.run.results import summary_table
    from kbtpsim.run.runner import run_scenario

    data = json.loads(json.dumps(TINY))
    data["target"]["mode"] = "two_sided"
    data["initiators"][0]["workload"]["mix"] = {"load": 1, "store": 1, "alloc_store": 1,
                                                "free": 1}
    text = summary_table(run_scenario(scenario_from_dict(data)).results)
    assert "rings: \n" not in text + "\n" and "rings:" not in text.split("\n")[6]


# ---------------------------------------------------------------- encode, --help
@pytest.mark.parametrize("flags", ["SEAL", "seal", ["SEAL"], "INLINE|SEAL"])
def test_encode_accepts_flag_names(flags: Any, capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path) -> None:
    msg: dict[str, Any] = {"opcode": "STORE", "handle": 1, "flags": flags}
    if "INLINE" in str(flags):
        msg.update(inline_data="00", data_descriptor={"length": 1})
    p = tmp_path / "m.json"
    p.write_text(json.dumps(msg))
    assert main(["encode", str(p)]) == 0
    raw = bytes.fromhex(capsys.readouterr().out.strip())
    assert raw[2:4] == (b"\x00\x03" if "INLINE" in str(flags) else b"\x00\x02")


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "kbtpsim.scenario.docs", "--help"],
    [sys.executable, "-m", "kbtpsim.system.bench", "--help"],
    [sys.executable, str(REPO / "benchmarks" / "nic_calibration.py"), "--help"],
    [sys.executable, str(REPO / "benchmarks" / "nic_event_rate.py"), "--help"],
])
def test_help_prints_help_and_changes_nothing(argv: list[str]) -> None:
    before = (REPO / "docs" / "scenarios.md").stat().st_mtime_ns
    got = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                         cwd=REPO)
    assert got.returncode == 0 and got.stdout.startswith("usage: "), got.stderr
    assert (REPO / "docs" / "scenarios.md").stat().st_mtime_ns == before


def test_quickstart_header_says_what_it_runs() -> None:
    import re

    from kbtpsim.units import parse_size

    path = REPO / "scenarios" / "quickstart.yaml"
    header = "".join(line for line in path.read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    data = yaml.safe_load(path.read_text())
    m = re.search(r"on (\d+) KiB blocks", header)
    assert m and int(m.group(1)) * 1024 == parse_size(data["target"]["block_size"])
    assert f"{data['initiators'][0]['count']} initiators".replace("4", "four") in header
    readme = (REPO / "README.md").read_text()
    assert "serving four initiators; about 10 s" in " ".join(readme.split())


def test_summary_shows_a_small_cpu_share_not_zero() -> None:
    from kbtpsim.run.results import _pct, summary_table
    from kbtpsim.run.runner import run_scenario

    assert [_pct(x) for x in (0, 0.001411, 0.0534, 0.56, 1.0)] == \
        ["0%", "0.14%", "5.3%", "56%", "100%"]
    res = run_scenario(scenario_from_dict(TINY)).results
    res["targets"]["target"]["cpu"]["utilisation"] = 0.001411  # a kvcache run's share
    assert "target: CPU 0.14% of 1 core(s)" in summary_table(res)
