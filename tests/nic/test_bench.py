"""nicbench rows, the nicbench subcommand, and the calibration table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kbtpsim.cli import main
from kbtpsim.nic.bench import (
    ALL_SIZES,
    add_nicbench_parser,
    bw_row,
    lat_row,
    plan,
    run_nicbench,
)
from kbtpsim.nic.calibration import PUBLISHED
from kbtpsim.nic.profiles import profile_names

TINY_REPLAY = """\
target: {blocks: 4, block_size: 512B}
initiators:
  a: {quota: 2, handle_base: 0x4000, handle_count: 8}
steps:
  - {initiator: a, op: ALLOC_STORE, handle: 0x4001, flags: [INLINE, SEAL], data: "KV"}
  - {initiator: a, op: LOAD, handle: 0x4001}
"""

TESTS = {"read_lat", "write_lat", "send_lat", "atomic_lat", "read_bw", "write_bw",
         "atomic_same", "atomic_spread", "read_rate_batch"}
LAT_KEYS = ["test", "bytes", "iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev",
            "p99", "p99.9", "unit"]
BW_KEYS = ["test", "bytes", "iterations", "bw_peak_gbps", "bw_avg_gbps", "bw_peak_mbps",
           "bw_avg_mbps", "msg_rate_mpps"]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return run_nicbench("cx5", quick=True)


def _get(rows: list[dict], test: str, size: int, **extra: int) -> dict:
    (r,) = [r for r in rows if r["test"] == test and r["bytes"] == size
            and all(r.get(k) == v for k, v in extra.items())]
    return r


def test_rows_have_perftest_columns(rows: list[dict]) -> None:
    assert {r["test"] for r in rows} == TESTS
    for r in rows:
        if r["test"].endswith("_lat"):
            assert list(r) == LAT_KEYS and r["unit"] == "usec"
            assert 0 < r["t_min"] <= r["t_typical"] <= r["t_max"]
            assert r["t_min"] <= r["t_avg"] <= r["t_max"] and r["t_stdev"] >= 0
            assert r["t_typical"] <= r["p99"] <= r["p99.9"] <= r["t_max"]
        else:
            assert [k for k in r if k not in ("qps", "batch")] == BW_KEYS
            assert r["bw_peak_gbps"] >= r["bw_avg_gbps"] > 0
            # one figure in three units: Gb/s, MB/s (2^20 octets) and messages
            assert r["bw_avg_mbps"] == pytest.approx(r["bw_avg_gbps"] * 1e9 / 8 / 2**20,
                                                     rel=1e-3)
            assert r["bw_avg_gbps"] == pytest.approx(
                r["msg_rate_mpps"] * 1e6 * r["bytes"] * 8 / 1e9, rel=1e-3)
    sizes = {r["bytes"] for r in rows if r["test"] == "write_bw"}
    assert min(sizes) == 64 and max(sizes) == 1 << 20
    assert {r["bytes"] for r in rows if r["test"] == "write_lat"} == {2, 8, 64, 4096, 65536,
                                                                      1 << 20}


def test_figures_have_the_expected_shape(rows: list[dict]) -> None:
    assert (_get(rows, "atomic_same", 8)["msg_rate_mpps"]
            < _get(rows, "atomic_spread", 8)["msg_rate_mpps"])
    assert _get(rows, "read_lat", 64)["t_typical"] > _get(rows, "write_lat", 64)["t_typical"]
    assert (_get(rows, "write_bw", 1 << 20)["bw_avg_gbps"]
            > 10 * _get(rows, "write_bw", 64)["bw_avg_gbps"])
    assert (_get(rows, "read_rate_batch", 8, batch=16, qps=4)["msg_rate_mpps"]
            > _get(rows, "read_rate_batch", 8, batch=1, qps=4)["msg_rate_mpps"])
    # peak: the highest rate over a send queue of completions, at most the link's
    assert _get(rows, "write_bw", 4096)["bw_peak_gbps"] <= 100.0


def test_latency_statistics_of_the_samples() -> None:
    r = lat_row("write_lat", 64, [3_000_000, 1_000_000, 2_000_000, 2_000_000])
    assert (r["t_min"], r["t_max"], r["t_typical"], r["t_avg"]) == (1.0, 3.0, 2.0, 2.0)
    assert r["t_stdev"] == pytest.approx(0.8165, abs=1e-4)  # sample standard deviation
    assert (r["p99"], r["p99.9"]) == (3.0, 3.0) and r["iterations"] == 4
    big = lat_row("read_lat", 8, list(range(1000, 1_000_001, 1000)))  # 1 ns to 1 us
    assert (big["p99"], big["p99.9"]) == (0.99, 0.999)  # nearest rank


def test_bandwidth_peak_and_average() -> None:
    # 256 WRs of 1000 octets on one QP: the first 128 in 1 us, the rest in 3 us (ps)
    times = [(k * 1_000_000 // 128, 0, k) for k in range(1, 129)]
    times += [(1_000_000 + (k - 128) * 3_000_000 // 128, 0, k) for k in range(129, 257)]
    r = bw_row("write_bw", 1000, 256, 4_000_000, times, 1)
    assert r["msg_rate_mpps"] == pytest.approx(64.0)  # 256 WRs in 4 us
    assert r["bw_avg_gbps"] == pytest.approx(512.0)
    assert r["bw_peak_gbps"] == pytest.approx(1024.0, rel=0.02)  # 128 WRs in ~1000 ns


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
    assert err[0].endswith("cx5+strided)")


def test_cli_json_and_table(capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake = [lat_row("write_lat", 64, [1500, 1500])]
    monkeypatch.setattr("kbtpsim.nic.bench.run_nicbench", lambda name, **kw: fake)
    args = _parser().parse_args(["nicbench", "--json", "--quick"])
    assert args.nic == "cx5" and args.func(args) == 0
    assert json.loads(capsys.readouterr().out) == fake
    args = _parser().parse_args(["nicbench", "--nic", "irdma"])
    assert args.func(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[4].split() == ["#bytes", "#iterations", "t_min[usec]", "t_max[usec]",
                              "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99%",
                              "percentile[usec]", "99.9%", "percentile[usec]"]
    assert out[5].split() == ["64", "2", "0.00", "0.00", "0.00", "0.00", "0.00", "0.00",
                              "0.00"]


def test_cli_size_iters_test_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nicbench", "-s", "4KiB", "-n", "3", "--test", "write_lat",
                 "--test", "read_bw"]) == 0
    cap = capsys.readouterr()
    out = cap.out.splitlines()
    heads = [line.split()[0] for line in out if line.startswith(" #")]
    assert heads == ["#bytes", "#bytes"]
    rows = [line.split() for line in out if line.startswith(" 4096 ")]
    assert [r[:2] for r in rows] == [["4096", "3"], ["4096", "3"]]
    assert "BW average[Gb/sec]" in cap.out and "MsgRate[Mpps]" in cap.out
    # not a terminal: progress as lines on stderr
    assert cap.err.splitlines() == ["nicbench --nic cx5: 50% (0 s)",
                                    "nicbench --nic cx5: 100% (0 s)"] or \
        cap.err.splitlines()[-1].startswith("nicbench --nic cx5: 100% (")


def test_cli_all_sizes_is_perftest_range() -> None:
    steps = plan(["write_lat", "atomic_lat"], list(ALL_SIZES))
    assert [s for t, s, _ in steps if t == "write_lat"] == [2 ** k for k in range(1, 24)]
    assert [s for t, s, _ in steps if t == "atomic_lat"] == [8]
    args = _parser().parse_args(["nicbench", "-a"])
    assert args.all and args.size is None


@pytest.mark.parametrize("argv, message", [
    (["-n", "0"], "-n/--iters: must be at least 1, got 0"),
    (["-s", "4 octets"], "-s/--size: unknown unit 'octets' in '4 octets'"),
    (["-s", "16MiB"], "-s/--size: 16MiB is out of range (1 octet to 8MiB)"),
])
def test_cli_bad_options_are_one_line(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nicbench", *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"kbtpsim: error: {message}")


def test_help_is_nicbench_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nicbench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kbtpsim nicbench")
    for opt in ("-s SIZE, --size SIZE", "-a, --all", "-n N, --iters N", "--test TEST",
                "--nic PROFILE", "t_typical", "MsgRate"):
        assert opt in out


@pytest.mark.parametrize("name", profile_names())
def test_every_listed_profile_works_everywhere(name: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Each name `kbtpsim chains list` prints: nicbench, target.nic.profile, replay."""
    from kbtpsim.scenario.load import scenario_from_dict

    assert main(["chains", "list"]) == 0
    assert name in capsys.readouterr().out.splitlines()[-1]
    assert main(["nicbench", "--nic", name, "--test", "atomic_lat", "-n", "1"]) == 0
    assert " 8 " in capsys.readouterr().out
    sc = scenario_from_dict({"target": {"nic": {"profile": name}}})
    assert sc.targets[0].nic.profile == name
    script = tmp_path / "replay.yaml"
    script.write_text(TINY_REPLAY)
    assert main(["replay", str(script), "--target", "chain", "--nic", name]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and [json.loads(line)["status"] for line in
                              cap.out.splitlines()] == ["OK", "OK", "OK"]


def test_published_rows_name_known_profiles() -> None:
    from kbtpsim.nic import PROFILES

    assert all(p.profile in PROFILES for p in PUBLISHED)


def test_cli_all_sizes_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/nic-model.md's `-a` example at reduced size (one iteration per size)."""
    assert main(["nicbench", "--nic", "cx5+strided", "--test", "read_bw", "-a", "-n", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line[:2] == " " + line[1:2] and line[1:2].isdigit()]
    assert [int(r[0]) for r in rows] == list(ALL_SIZES)
    assert all(r[1] == "2" for r in rows)
