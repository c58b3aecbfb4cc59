"""nicbench rows, the nicbench subcommand, and the calibration table."""

from __future__ import annotations

import argparse
import json

import pytest

from kbtpsim.nic.bench import add_nicbench_parser, run_nicbench
from kbtpsim.nic.calibration import PUBLISHED

TESTS = {"read_lat", "write_lat", "send_lat", "atomic_lat", "read_bw", "write_bw", "read_rate",
         "write_rate", "atomic_same", "atomic_spread", "read_rate_batch"}
UNITS = {"lat": "ns", "bw": "Gbps", "rate": "Mops", "same": "Mops", "spread": "Mops",
         "batch": "Mops"}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return run_nicbench("cx5", quick=True)


def test_rows_cover_every_test_with_units(rows: list[dict]) -> None:
    assert {r["test"] for r in rows} == TESTS
    for r in rows:
        assert {"test", "size", "value", "unit"} <= set(r)
        assert r["unit"] == UNITS[r["test"].rsplit("_", 1)[1]]
        assert r["value"] > 0
    sizes = {r["size"] for r in rows if r["test"] == "write_bw"}
    assert min(sizes) == 64 and max(sizes) == 1 << 20


def test_figures_have_the_expected_shape(rows: list[dict]) -> None:
    get = {(r["test"], r["size"], r.get("batch"), r.get("qps")): r["value"] for r in rows}
    assert get[("atomic_same", 8, None, None)] < get[("atomic_spread", 8, None, None)]
    assert get[("read_lat", 64, None, None)] > get[("write_lat", 64, None, None)]
    assert get[("write_bw", 1 << 20, None, None)] > 10 * get[("write_bw", 64, None, None)]
    assert get[("read_rate_batch", 8, 16, 4)] > get[("read_rate_batch", 8, 1, 4)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbtpsim")
    add_nicbench_parser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["nicbench", "--nic", "bogus"])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("kbtpsim: error: unknown NIC profile 'bogus' (known: ")


def test_cli_json_and_table(capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake = [{"test": "write_lat", "size": 64, "value": 1.5, "unit": "ns"}]
    monkeypatch.setattr("kbtpsim.nic.bench.run_nicbench", lambda name, quick=False: fake)
    args = _parser().parse_args(["nicbench", "--json", "--quick"])
    assert args.nic == "cx5" and args.func(args) == 0
    assert json.loads(capsys.readouterr().out) == fake
    args = _parser().parse_args(["nicbench", "--nic", "irdma"])
    assert args.func(args) == 0
    assert "write_lat" in capsys.readouterr().out


def test_published_rows_name_known_profiles() -> None:
    from kbtpsim.nic import PROFILES

    assert all(p.profile in PROFILES for p in PUBLISHED)
