"""nicbench: perftest-style microbenchmarks of a NIC profile, and the ``nicbench`` command.

``run_nicbench(profile_name, quick=False)`` builds two hosts joined by one link and returns
rows ``{"test", "size", "value", "unit"}``:

* ``write_lat``, ``send_lat``: ping-pong, one-way = half the round trip (perftest's
  ``ib_write_lat`` polls the last byte of the buffer; ``ib_send_lat`` polls the receive CQ);
* ``read_lat``, ``atomic_lat``: post to completion, not halved (perftest reports these whole);
* ``write_bw``, ``read_bw`` (Gb/s) and ``write_rate``, ``read_rate`` (Mops): one QP, 128 WRs
  outstanding, one WR in 16 signaled;
* ``atomic_same``, ``atomic_spread`` (Mops): FETCH_ADD on one address / on 4096 addresses;
* ``read_rate_batch`` (Mops, extra keys ``batch`` and ``qps``): 8-octet READs with one
  doorbell per ``batch`` WRs, from ``qps`` QPs (one CPU thread each).

Latencies are medians over the iterations (perftest's "typical"). CPU costs are the profile's
``cpu_post_ns`` per WR, ``cpu_doorbell_ns`` per doorbell and ``cpu_poll_ns`` to notice a
completion or a changed byte.

The measurements are in :mod:`~kbtpsim.nic.bench_rig`, the tests, the steps of a run and
their rows in :mod:`~kbtpsim.nic.bench_run` (both re-exported here); this module prints the
rows in perftest's layout (:func:`format_table`) and is the ``nicbench`` command.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kbtpsim.nic.bench_rig import (
    ALL,
    BUF,
    S,
    _rdma_lat,
    _stream,
    _write_wr,
    rdma_lat_samples,
    send_lat,
    send_lat_samples,
    write_lat,
    write_lat_samples,
)
from kbtpsim.nic.bench_run import (
    ALL_SIZES,
    BW_TESTS,
    FIXED_SIZE,
    LAT_EXTRA,
    LAT_TESTS,
    MB,
    PEAK_WINDOW,
    QUICK_SIZES,
    SIZES,
    TESTS,
    Row,
    Step,
    bw_row,
    lat_row,
    plan,
    run_nicbench,
    run_step,
)
from kbtpsim.nic.profiles import get_profile, profile_names
from kbtpsim.usage import fail

#: (header, row key, width) of perftest's latency and bandwidth columns
_LAT_COLS = (("#bytes", "bytes", 8), ("#iterations", "iterations", 13),
             ("t_min[usec]", "t_min", 13), ("t_max[usec]", "t_max", 13),
             ("t_typical[usec]", "t_typical", 17), ("t_avg[usec]", "t_avg", 13),
             ("t_stdev[usec]", "t_stdev", 15), ("99% percentile[usec]", "p99", 22),
             ("99.9% percentile[usec]", "p99.9", 24))
_BW_COLS = (("#bytes", "bytes", 10), ("#iterations", "iterations", 13),
            ("BW peak[Gb/sec]", "bw_peak_gbps", 17), ("BW average[Gb/sec]", "bw_avg_gbps", 20),
            ("BW peak[MB/sec]", "bw_peak_mbps", 17), ("BW average[MB/sec]", "bw_avg_mbps", 20),
            ("MsgRate[Mpps]", "msg_rate_mpps", 15))
_BATCH_COLS = (("#qps", "qps", 6), ("#batch", "batch", 8))
_RULE = "-" * 110


def _cell(value: Any, key: str, width: int) -> str:
    if isinstance(value, float):
        text = f"{value:.6f}" if key == "msg_rate_mpps" else f"{value:.2f}"
    else:
        text = str(value)
    return f" {text:<{width - 1}}"


def format_table(rows: list[Row]) -> str:
    """The rows in perftest's layout: one block per test, with its column header."""
    lines: list[str] = []
    last = None
    cols: tuple[tuple[str, str, int], ...] = ()
    for r in rows:
        if r["test"] != last:
            last = r["test"]
            about = LAT_TESTS.get(last) or BW_TESTS.get(last, "")
            cols = _LAT_COLS if last in LAT_TESTS else (
                (*_BATCH_COLS, *_BW_COLS) if "qps" in r else _BW_COLS)
            lines += [_RULE, f" {last}: {about}", _RULE,
                      "".join(f" {h:<{w - 1}}" for h, _, w in cols).rstrip()]
        lines.append("".join(_cell(r[k], k, w) for _, k, w in cols).rstrip())
    if lines:
        lines.append(_RULE)
    return "\n".join(lines)


def _nicbench_main(args: argparse.Namespace) -> int:
    from kbtpsim.progress import Progress
    from kbtpsim.units import UnitError, parse_size

    try:
        get_profile(args.nic)
    except ValueError as exc:
        return fail(str(exc))
    if args.iters is not None and args.iters < 1:
        return fail(f"-n/--iters: must be at least 1, got {args.iters}")
    sizes: list[int] | None = None
    if args.size is not None:
        try:
            size = parse_size(args.size)
        except UnitError as exc:
            return fail(f"-s/--size: {exc}")
        if not 1 <= size <= ALL_SIZES[-1]:
            return fail(f"-s/--size: {args.size} is out of range (1 octet to 8MiB)")
        sizes = [size]
    elif args.all:
        sizes = list(ALL_SIZES)
    tests = args.test or None
    bar = Progress(f"nicbench --nic {args.nic}", enabled=False if args.json else None)
    try:
        rows = run_nicbench(args.nic, quick=args.quick, tests=tests, sizes=sizes,
                            iters=args.iters, progress=bar.update)
    finally:
        bar.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"nicbench --nic {args.nic} (simulated; perftest's columns)")
        print(format_table(rows))
    return 0


DESCRIPTION = """perftest-style microbenchmarks of a NIC profile, on two simulated hosts joined
by one link. Latency tests print #bytes, #iterations, t_min, t_max, t_typical (median),
t_avg, t_stdev and the 99% and 99.9% percentiles (microseconds); bandwidth tests print
#bytes, #iterations, BW peak and BW average (Gb/s and MB/s, MB = 2^20 octets) and MsgRate
(Mpps). Without --test, every test runs; without -s or -a, a default set of sizes."""


def add_nicbench_parser(subparsers: Any) -> None:
    """Register the ``nicbench`` subcommand (sets ``func``; ``args.func(args)`` runs it)."""
    p = subparsers.add_parser("nicbench", help="perftest-style microbenchmarks of a NIC profile",
                              description=DESCRIPTION)
    p.add_argument("--nic", default="cx5", metavar="PROFILE",
                   help=f"NIC profile (default cx5; known: {', '.join(profile_names())})")
    p.add_argument("--test", action="append", choices=TESTS, metavar="TEST",
                   help=f"run this test only (repeatable; {', '.join(TESTS)})")
    sz = p.add_mutually_exclusive_group()
    sz.add_argument("-s", "--size", metavar="SIZE",
                    help="message size, e.g. 4096 or 64KiB (atomic tests are 8 octets)")
    sz.add_argument("-a", "--all", action="store_true",
                    help="every size from 2 octets to 8MiB (powers of two)")
    p.add_argument("-n", "--iters", type=int, metavar="N",
                   help="iterations per size (default: 20 for latency tests, 16 to 1000 "
                   "WRs, by size, for bandwidth tests; fewer with --quick)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    p.set_defaults(func=_nicbench_main)


__all__ = [
    "ALL",
    "ALL_SIZES",
    "BUF",
    "BW_TESTS",
    "DESCRIPTION",
    "FIXED_SIZE",
    "LAT_EXTRA",
    "LAT_TESTS",
    "MB",
    "PEAK_WINDOW",
    "QUICK_SIZES",
    "SIZES",
    "TESTS",
    "Row",
    "S",
    "Step",
    "_rdma_lat",
    "_stream",
    "_write_wr",
    "add_nicbench_parser",
    "bw_row",
    "format_table",
    "lat_row",
    "plan",
    "rdma_lat_samples",
    "run_nicbench",
    "run_step",
    "send_lat",
    "send_lat_samples",
    "write_lat",
    "write_lat_samples",
]
