"""``kbtpsim check`` and ``kbtpsim mutants``: plan and replay lines, exit statuses, the
first divergence readably, one-line user errors."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from kbtpsim.cli import main


def test_check_prints_plan_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--seed", "3", "--profiles", "cx5", "--ops", "16", "--phases", "1",
               "--addr-le", "default"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "seeds 3..3 (1) x profiles cx5" in out and "16 requests per campaign" in out
    assert "mixes default,pipeline" in out  # the default mixes (decision C16)
    assert "2 campaigns, 0 diverged" in out
    # the campaign line's parts add up to its total: one set of requests, setup included
    got = re.search(r" (\d+) requests with the setup \((\d+) NIC, (\d+) CPU\), "
                    r"0 divergences$", out, re.M)
    assert got is not None, out
    total, nic, cpu = map(int, got.groups())
    assert total > 16 and nic + cpu == total


def test_check_takes_each_profiles_default_design(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Decision C14: without --chains, each profile runs its target.chains default."""
    rc = main(["check", "--seed", "2", "--profiles", "ideal,ideal-be", "--ops", "12",
               "--phases", "1", "--addr-le", "on"])
    out = capsys.readouterr().out
    assert rc == 0 and "4 campaigns, 0 diverged" in out
    assert "chains ideal v1, ideal-be v2" in out


def test_campaign_line_gives_both_totals_when_they_differ() -> None:
    from kbtpsim.oracle.report import request_counts

    class Server:
        def op_report(self) -> dict[str, dict[str, float]]:
            return {"ALLOC_STORE": {"nic": 21.0, "cpu": 8.0}, "FREE": {"nic": 0.0, "cpu": 3.0},
                    "HELLO": {"nic": 0.0, "cpu": 6.0}, "LOAD": {"nic": 1.0, "cpu": 4.0},
                    "REFILL": {"nic": 0.0, "cpu": 43.0}, "CHAIN": {"nic": 0.0, "cpu": 22.0}}

    res = SimpleNamespace(requests=38, server=Server())
    assert request_counts(res) == ("  38 requests with the setup, 37 served by the target "
                            "(22 NIC, 15 CPU)")
    res.requests = 37
    assert request_counts(res) == "  37 requests with the setup (22 NIC, 15 CPU)"


def test_check_reports_the_first_divergence(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--seed", "1", "--profiles", "ideal-be", "--ops", "24", "--phases",
               "1", "--addr-le", "off", "--mutant", "swap-length-offset"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "DIVERGENCE (completion)" in out
    assert "request: {" in out and "expected: Completion(" in out and "observed:" in out
    assert "WR timeline" in out and ("load_send" in out or "ai_send" in out)
    assert ("replay: kbtpsim check --seed 1 --profiles ideal-be --ops 24 --mix default "
            "--phases 1 --addr-le off --mutant swap-length-offset") in out


@pytest.mark.parametrize(("argv", "message"), [
    (["check", "--profiles", "nope"], "--profiles: unknown profile 'nope'"),
    (["check", "--mix", "bogus"], "--mix: unknown mix 'bogus'"),
    (["check", "--seeds", "0"], "--seeds: must be >= 1"),
    (["check", "--seed", "1", "--seeds", "2"], "--seed: give --seed S or --seeds N"),
    (["check", "--faults", "bad"], "--faults: unknown fault 'bad'"),
    (["check", "--mutant", "bad"], "--mutant: unknown mutant 'bad'"),
    (["mutants", "--only", "bad"], "--only: unknown mutant 'bad'"),
    (["check", "--block-size", "12KB"], "--block-size: '12KB' is ambiguous"),
    (["check", "--block-size", "100"], "--block-size: must be a multiple of 8 from 64"),
    (["check", "--block-size", "2MiB"], "--block-size: must be a multiple of 8 from 64"),
])
def test_user_errors_are_one_line(argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_mutants_prints_caught_over_total(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--only", "skip-consume"]) == 0
    out = capsys.readouterr().out
    assert "skip-consume" in out and "caught" in out and "1/1 mutants caught" in out


def test_mutants_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--list"]) == 0
    assert "skip-sequence" in capsys.readouterr().out


def test_same_arguments_same_output(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check", "--seed", "2", "--profiles", "ideal-be", "--ops", "16", "--phases", "1",
            "--addr-le", "default", "--mix", "churn", "--json"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first


def test_check_with_blocks_of_several_packets(capsys: pytest.CaptureFixture[str]) -> None:
    """--block-size: 16 KiB blocks (4 packets) under connection failures; the NIC serves
    LOADs and inline stores, the CPU Read-source stores (rule torn-read), and the replay
    line names the size."""
    argv = ["check", "--seed", "1", "--profiles", "ideal-be", "--ops", "32", "--phases",
            "1", "--addr-le", "off", "--mix", "valid", "--faults", "drop",
            "--block-size", "16KiB"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "blocks of 16KiB" in out and "1 campaigns, 0 diverged" in out
    got = re.search(r"\((\d+) NIC, (\d+) CPU\)", out)
    assert got is not None and int(got.group(1)) > 0, out
    from kbtpsim.oracle.campaign import Spec

    assert Spec(seed=1, block_size=16384).replay().endswith("--block-size 16384")


def test_check_plan_names_chains_v1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--seed", "1", "--profiles", "ideal-be", "--ops", "8", "--phases",
                 "1", "--addr-le", "off", "--mix", "valid", "--chains", "v1"]) == 0
    assert "; chains v1" in capsys.readouterr().out.splitlines()[0]
