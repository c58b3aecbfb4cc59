"""``kbtpsim check --junit FILE.xml``: read back by a JUnit parser (junitparser), as a CI
system would: one test case per campaign, a divergence a failure with its decoded report."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbtpsim.cli import main

junitparser = pytest.importorskip("junitparser")


def test_junit_report_reads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "check.xml"
    # irdma offloads nothing (the mutant changes no WR there): 2 passes; ideal-be ADDR_LE
    # off diverges; --stop leaves ideal-be ADDR_LE on out (skipped)
    rc = main(["check", "--seed", "1", "--profiles", "irdma,ideal-be", "--ops", "24",
               "--phases", "1", "--addr-le", "both", "--mutant", "swap-length-offset",
               "--mix", "default", "--stop", "--junit", str(report)])
    assert rc == 1
    out = capsys.readouterr().out
    assert f"junit: {report} (4 test cases, 1 failures)" in out
    xml = junitparser.JUnitXml.fromfile(str(report))
    (suite,) = list(xml)
    assert suite.name == "kbtpsim check"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (4, 1, 0, 1)
    cases = list(suite)
    assert [(c.classname, c.name) for c in cases] == [
        ("kbtpsim.check.irdma", "seed 1 ADDR_LE off mix default mutant swap-length-offset"),
        ("kbtpsim.check.irdma", "seed 1 ADDR_LE on mix default mutant swap-length-offset"),
        ("kbtpsim.check.ideal-be", "seed 1 ADDR_LE off mix default mutant swap-length-offset"),
        ("kbtpsim.check.ideal-be", "seed 1 ADDR_LE on mix default mutant swap-length-offset"),
    ]
    assert cases[0].is_passed and cases[1].is_passed and cases[3].is_skipped
    assert cases[0].time > 0
    (failure,) = cases[2].result
    assert isinstance(failure, junitparser.Failure)
    assert failure.type == "divergence.completion"
    assert failure.message.startswith("8 divergence(s); first (completion): ")
    # the decoded report, as kbtpsim check prints it
    assert failure.text.startswith("DIVERGENCE (completion)")
    for part in ("request: {", "expected: Completion(", "observed: Completion(",
                 "WR timeline", "replay: kbtpsim check --seed 1 --profiles ideal-be"):
        assert part in failure.text
    assert "DIVERGENCE (completion)" in out and failure.text.splitlines()[0] in out
    props = {p.name: p.value for p in suite.properties()}
    assert props["plan"].startswith("kbtpsim check: seeds 1..1 (1) x profiles irdma,ideal-be")


def test_junit_report_of_a_passing_check(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "ok.xml"
    assert main(["check", "--seed", "3", "--profiles", "cx5", "--ops", "16", "--phases", "1",
                 "--addr-le", "default", "--mix", "default", "--junit", str(report),
                 "--json"]) == 0
    assert "junit:" not in capsys.readouterr().out  # --json: JSON lines only
    suite = next(iter(junitparser.JUnitXml.fromfile(str(report))))
    assert (suite.tests, suite.failures, suite.skipped) == (1, 0, 0)
    (case,) = list(suite)
    assert case.is_passed and case.name == "seed 3 ADDR_LE off mix default"
    assert " requests with the setup (" in case.system_out  # as the campaign line counts


@pytest.mark.parametrize(("where", "message"), [
    ("dir", "is a directory"),
    ("missing/r.xml", "directory {tmp}/missing does not exist"),
    ("file/r.xml", "{tmp}/file is a file, not a directory"),
    ("r.txt", "unsupported file type ('.txt'; use .xml)"),
])
def test_junit_bad_path_is_one_line_before_any_campaign(
        tmp_path: Path, where: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    target = tmp_path / where
    assert main(["check", "--seed", "1", "--profiles", "cx5", "--junit", str(target)]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""  # nothing ran: not even the plan
    assert cap.err == f"kbtpsim: error: --junit {target}: " \
                      f"{message.format(tmp=tmp_path)}\n"
