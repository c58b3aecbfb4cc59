"""Simulator speed: simulated operations per CPU-second, against a bare simpy loop.

Run: ``python benchmarks/speed.py [--scale S] [--cases a,b] [--against DIR]
[--fidelity both|full|fast]``: each case at both fidelities by default, with the
fast / full ratio.

Each case runs a committed scenario in a fresh child process (so its peak RSS is its
own) and reports simulated operations per CPU-second of that process (and, apart, the
CPU time of the set-up, until every connection is set up, with the rate after it), simpy
events per operation, and the ratio of the model's events per CPU-second to a bare simpy
timeout loop timed in the same child just before it. ``ops/Mbare`` is the operations simulated
in the CPU time a bare loop takes for one million events: a figure that moves little
between machines. ``--scale`` multiplies every case's operation count (0.1 for a quick
look). ``--against DIR`` also runs every case on the kbtpsim tree in ``DIR`` (another
commit, e.g. ``git archive <commit> | tar -x -C DIR``), in the same run, and prints the
speed-up. With the quickstart, it also prints the rate of its requests through the codec and
the software target alone, no simulator (``benchmarks/protocol_floor.py``): the ceiling of
any fidelity. Not part of the test suite (docs/performance.md; the rule is that speed is
measured here, never asserted in timed unit tests).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Case:
    name: str
    scenario: str
    overrides: tuple[str, ...]
    operations: int


CASES = (
    Case("quickstart", "scenarios/quickstart.yaml", (), 5000),
    Case("eval-ablation", "scenarios/eval-ablation.yaml", (), 300),  # chains v1 (the file's)
    Case("ablation-v2", "scenarios/eval-ablation.yaml", ("target.chains=v2",), 300),
    Case("two-sided", "scenarios/quickstart.yaml", ("target.mode=two_sided",), 5000),
    Case("block-2MiB", "scenarios/eval-block-size.yaml", ("target.block_size=2MiB",), 200),
)
BARE_EVENTS = 200_000


def bare_rate(n_events: int = BARE_EVENTS) -> float:
    """Events per CPU-second of a bare simpy loop of timeouts."""
    import simpy

    env = simpy.Environment()

    def loop() -> Any:
        for _ in range(n_events):
            yield env.timeout(1)

    env.process(loop())
    t0 = time.process_time()
    env.run()
    return n_events / (time.process_time() - t0)


def _child(case: Case, operations: int, fidelity: str, tree: str | None, out: Any) -> None:
    if tree is not None:  # import kbtpsim from that tree (nothing imported it yet)
        sys.path.insert(0, tree)
    import kbtpsim.run.runner as runner
    from kbtpsim.run.runner import run_scenario
    from kbtpsim.scenario.load import load_scenario

    bare = max(bare_rate() for _ in range(3))  # the least disturbed of three
    fast = ("run.fidelity=fast",) if fidelity == "fast" else ()  # full: as older trees
    overrides = (*case.overrides, f"stop.operations={operations}", *fast)
    sc = load_scenario(REPO / case.scenario, overrides)
    connect_all = runner.connect_all
    connected: list[float] = []

    def timed_connect_all(system: Any) -> Any:  # the set-up ends with the connections
        done = connect_all(system)
        connected.append(time.process_time())
        return done

    runner.connect_all = timed_connect_all  # type: ignore[assignment]
    t0 = time.process_time()
    outcome = run_scenario(sc)
    cpu = time.process_time() - t0
    setup = connected[0] - t0 if connected else 0.0
    assert outcome.system is not None
    events = next(outcome.system.env._eid)  # type: ignore[attr-defined]
    ops = outcome.results["run"]["operations_total"]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.send({"case": case.name, "fidelity": fidelity, "ops": ops, "cpu_s": cpu,
              "setup_s": setup, "events": events, "bare": bare, "rss_mb": rss_mb})


def _floor_child(operations: int, out: Any) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from protocol_floor import protocol_rate

    out.send(protocol_rate(REPO / "scenarios" / "quickstart.yaml", operations))


def _in_child(target: Any, *args: Any) -> dict[str, Any]:
    """Run ``target(*args, out)`` in a fresh spawned process (its own imports and peak
    RSS); what it sends on ``out``."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(*args, child))
    p.start()
    child.close()
    row: dict[str, Any] = parent.recv()
    p.join()
    return row


def protocol_floor(operations: int) -> dict[str, Any]:
    """The quickstart's requests through the codec and the software target alone, in a
    fresh child (benchmarks/protocol_floor.py): a ceiling for any simulation of it."""
    return _in_child(_floor_child, operations)


def measure(case: Case, operations: int, fidelity: str,
            tree: str | None = None) -> dict[str, Any]:
    return _in_child(_child, case, operations, fidelity, tree)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every case's operation count (default 1)")
    ap.add_argument("--cases", default=",".join(c.name for c in CASES),
                    help="comma-separated case names (default: all)")
    ap.add_argument("--against", metavar="DIR",
                    help="also run each case on the kbtpsim tree in DIR (same run; "
                    "full fidelity only there)")
    ap.add_argument("--fidelity", choices=("both", "full", "fast"), default="both",
                    help="run each case at these fidelities (default both: prints the "
                    "fast / full ratio)")
    args = ap.parse_args(argv)
    if args.against and not (Path(args.against) / "kbtpsim" / "__init__.py").is_file():
        ap.error(f"--against: {args.against} holds no kbtpsim tree")
    names = args.cases.split(",")
    unknown = [n for n in names if n not in {c.name for c in CASES}]
    if unknown:
        ap.error(f"--cases: unknown case {unknown[0]!r}")
    fids = ["full", "fast"] if args.fidelity == "both" else [args.fidelity]
    if args.scale <= 0:
        ap.error(f"--scale: must be positive, got {args.scale}")
    head = (f"{'case':<15}{'fidelity':<9}{'tree':<8}{'ops':>7}{'CPU s':>8}{'set-up':>8}"
            f"{'ops/CPU-s':>11}{'after':>8}{'events/op':>11}{'x bare':>8}{'ops/Mbare':>11}"
            f"{'peak RSS':>10}")
    print(head)
    print("-" * len(head))
    for case in CASES:
        if case.name not in names:
            continue
        by_fid: dict[str, tuple[float, float]] = {}
        for fid in fids:
            ops = max(20, round(case.operations * args.scale))
            trees = [("this", None)] + ([("against", args.against)]
                                        if args.against and fid == "full" else [])
            rates = []
            for label, tree in trees:
                r = measure(case, ops, fid, tree)
                rate = r["ops"] / r["cpu_s"]
                ev_rate = r["events"] / r["cpu_s"]
                rates.append(rate / r["bare"])
                if tree is None:
                    by_fid[fid] = (rate, rate / r["bare"])
                after = r["ops"] / max(1e-9, r["cpu_s"] - r["setup_s"])
                print(f"{r['case']:<15}{fid:<9}{label:<8}{r['ops']:>7}{r['cpu_s']:>8.2f}"
                      f"{r['setup_s']:>8.2f}{rate:>11.0f}{after:>8.0f}"
                      f"{r['events'] / r['ops']:>11.0f}"
                      f"{ev_rate / r['bare']:>8.3f}{rate / r['bare'] * 1e6:>11.0f}"
                      f"{r['rss_mb']:>8.0f}MB", flush=True)
            if len(rates) == 2:
                print(f"{'':<15}{fid:<9}speed-up (ops/Mbare, this / against): "
                      f"{rates[0] / rates[1]:.2f}x", flush=True)
        if len(by_fid) == 2:
            (full, full_b), (fast, fast_b) = by_fid["full"], by_fid["fast"]
            print(f"{'':<15}fast / full: {fast / full:.2f}x ops/CPU-s, "
                  f"{fast_b / full_b:.2f}x ops/Mbare", flush=True)
    if "quickstart" in names:
        floor = protocol_floor(max(200, round(20000 * args.scale)))
        print(f"protocol alone (quickstart, no simulator): {floor['rate']:.0f} ops/CPU-s, "
              f"{1e6 / floor['rate']:.1f} us per operation (benchmarks/protocol_floor.py)")
    print(f"bare simpy loop: {bare_rate() / 1e6:.2f} M events per CPU-second (this process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
