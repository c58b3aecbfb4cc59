"""``kbtpsim run``, ``kbtpsim sweep`` and ``kbtpsim plot`` (registered by
:func:`add_run_parsers`). User errors print one line, ``kbtpsim: error: <key>:
<problem>``, and exit 2; an oracle divergence exits 1."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from kbtpsim.usage import fail as _fail
from kbtpsim.usage import figure_types, output_dir_problem, output_file_problem

EXIT_DIVERGED = 1


def _cmd_run(args: argparse.Namespace) -> int:
    from kbtpsim.run.observe import observer_from_args, report
    from kbtpsim.run.progress import Progress
    from kbtpsim.run.results import summary_table, write_results
    from kbtpsim.run.runner import run_scenario
    from kbtpsim.scenario.load import ScenarioError, load_scenario
    from kbtpsim.scenario.schema import SchemaRuleError
    from kbtpsim.system import StagingFull

    sets = [*(args.set or ()), *(["run.fidelity=fast"] if args.fast else [])]
    try:
        sc = load_scenario(args.scenario, sets, seed=args.seed)
    except ScenarioError as exc:
        return _fail(str(exc))
    out = Path(args.output) if args.output else Path("results") / sc.name
    bad_out = output_dir_problem(out)
    if bad_out:
        return _fail(f"-o {out}: {bad_out}")
    observer, bad = observer_from_args(args.trace, args.pcap, args.trace_window,
                                       args.trace_limit)
    if bad:
        return _fail(bad)
    bar = Progress(f"kbtpsim run {sc.name}", enabled=False if args.quiet else None)
    wall = time.perf_counter()
    try:
        outcome = run_scenario(sc, oracle=args.oracle, progress=bar.update,
                               observer=observer)
    except SchemaRuleError as exc:
        return _fail(str(exc))
    except StagingFull as exc:
        return _fail(f"target.staging: {exc} (raise target.staging or "
                     "initiators[].buffers)")
    except Exception as exc:
        if args.debug:
            raise
        print(f"kbtpsim: simulation failed: {type(exc).__name__}: {exc} (--debug for "
              "the traceback)", file=sys.stderr)
        return EXIT_DIVERGED
    finally:
        bar.close()
        if observer is not None:
            observer.close()
    info: dict[str, Any] = {
        "wall_s": round(time.perf_counter() - wall, 3), "python": platform.python_version(),
        "host": platform.node(), "argv": sys.argv[1:], "scenario_file": str(args.scenario),
    }
    write_results(out, outcome.results, outcome.timeseries, info)
    if not args.quiet:
        print(summary_table(outcome.results))
    print(f"results: {out / 'results.json'} (wall {info['wall_s']:.1f} s)")
    if not args.quiet:
        for line in report(observer) if observer is not None else ():
            print(line)
    fid = outcome.results["run"].get("fidelity")
    if fid is not None and fid["warning"]:
        print(f"kbtpsim: warning: {fid['warning']}", file=sys.stderr)
    if outcome.results["run"]["stop_reason"] == "stalled":
        lost = {k: v["connection"] for k, v in outcome.results["initiators"].items()
                if v["connection"] != "up"}
        why = f"initiators failed: {lost}" if lost else (
            f"no operation completed for {sc.stop.stall / 1e9:g} ms of simulated time")
        print(f"kbtpsim: run stalled ({why}); results written", file=sys.stderr)
        return EXIT_DIVERGED
    if args.oracle and outcome.divergences:
        for d in outcome.divergences[:10]:
            print(f"kbtpsim: oracle: {d}", file=sys.stderr)
        print(f"kbtpsim: oracle: {len(outcome.divergences)} divergence(s) from the "
              "reference target", file=sys.stderr)
        return EXIT_DIVERGED
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from kbtpsim.run.dask_pool import DaskUnavailable
    from kbtpsim.run.sweep import load_sweep, run_sweep
    from kbtpsim.scenario.load import ScenarioError, parse_override

    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        return _fail(f"--jobs: must be at least 1, got {jobs}")
    try:
        extra = [parse_override(o) for o in
                 [*(args.set or ()), *(["run.fidelity=fast"] if args.fast else [])]]
        points = load_sweep(args.sweep, extra)
    except ScenarioError as exc:
        return _fail(str(exc))
    out = Path(args.output) if args.output else Path("results") / Path(args.sweep).stem
    bad = output_dir_problem(out)
    if bad:
        return _fail(f"-o {out}: {bad}")
    done = [0]

    def on_done(pt: Any, reused: bool, error: str | None) -> None:
        done[0] += 1
        if not args.quiet:
            what = "failed" if error else "reused" if reused else "done"
            print(f"[{done[0]}/{len(points)}] {what}: {_values(pt)}"
                  + (f": {error}" if error else ""), file=sys.stderr)

    try:
        rows = run_sweep(points, out, jobs=jobs, on_done=on_done, dask=args.dask)
    except DaskUnavailable as exc:
        return _fail(f"--dask: {exc}")
    failed = [(pt, r) for pt, r in zip(points, rows, strict=True) if "error" in r]
    print(f"sweep: {len(rows)} points, {len(failed)} failed: {out / 'sweep.csv'}")
    for pt, r in failed:
        print(f"kbtpsim: sweep point {_values(pt)} failed: {r['error']} (directory "
              f"{out / 'points' / pt.key})", file=sys.stderr)
    return EXIT_DIVERGED if failed else 0


def _values(pt: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in pt.values.items())


def _cmd_plot(args: argparse.Namespace) -> int:
    from kbtpsim.run.plot import PlotError, plot

    out = Path(args.output) if args.output else Path(args.dirs[0]) / "plot.png"
    if not out.suffix:
        out = out.with_suffix(".png")  # what matplotlib writes: say so
    bad = output_file_problem(out, figure_types())
    if bad:
        return _fail(f"-o {out}: {bad}")
    try:
        panels = plot(args.dirs, out)
    except PlotError as exc:
        return _fail(str(exc))
    print(f"{out}: {', '.join(panels)}")
    return 0


def add_run_parsers(subparsers: Any) -> None:
    """Register ``run``, ``sweep`` and ``plot`` (see kbtpsim/cli.py)."""
    p = subparsers.add_parser("run", help="run a scenario; print a summary, write results")
    p.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="results directory (default: results/<scenario name>)")
    p.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a key, e.g. target.blocks=1024 or "
                   "initiators[0].workload.window=8 (repeatable)")
    p.add_argument("--fast", action="store_true",
                   help="fast fidelity: the same as --set run.fidelity=fast "
                   "(docs/performance.md, 'Fast fidelity')")
    p.add_argument("--oracle", action="store_true",
                   help="check every completion and the final state against a reference "
                   "target; exit 1 on any divergence")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress or table: only the results path")
    p.add_argument("--debug", action="store_true",
                   help="show the traceback of a failure inside the simulation")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a Perfetto / Chrome trace of the run (WRs per QP, NIC units, "
                   "CPU cores, one span per request); see docs/tools.md")
    p.add_argument("--trace-window", metavar="START:END",
                   help="trace only what overlaps this span of simulated time, e.g. "
                   "100us:150us")
    p.add_argument("--trace-limit", type=int, metavar="N",
                   help="stop tracing after N events (default 500000)")
    p.add_argument("--pcap", metavar="FILE.pcap",
                   help="write every packet on the simulated wire as a RoCEv2 frame "
                   "(nanosecond pcap, for Wireshark / tshark)")
    p.set_defaults(func=_cmd_run)

    p = subparsers.add_parser("sweep", help="run a cartesian product of scenario variants")
    p.add_argument("sweep", metavar="SWEEP.yaml", help="sweep file (base, parameters)")
    p.add_argument("--fast", action="store_true",
                   help="every point at the fast fidelity (--set run.fidelity=fast)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="sweep directory (default: results/<sweep file name>)")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="parallel processes, or the workers of --dask local (default: the "
                   "number of cores)")
    p.add_argument("--dask", metavar="ADDRESS",
                   help="run the points on the Dask scheduler at ADDRESS (e.g. "
                   "tcp://host:8786), or on a new LocalCluster with 'local'")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a key of every point (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no per-point lines (the summary line is still printed)")
    p.set_defaults(func=_cmd_sweep)

    p = subparsers.add_parser("plot", help="plot run or sweep directories into one figure")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run or sweep directories")
    p.add_argument("-o", "--output", metavar="FIG.png",
                   help="figure file: .png, .pdf, .svg, ... (no extension: .png; default: "
                   "plot.png in the first DIR)")
    p.set_defaults(func=_cmd_plot)
