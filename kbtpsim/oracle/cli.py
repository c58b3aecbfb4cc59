"""``kbtpsim check`` (differential campaigns) and ``kbtpsim mutants`` (the mutation proof),
registered by :func:`add_oracle_parsers`. A user error prints one line naming the option
and exits 2; a divergence (check) or an uncaught mutant (mutants) exits 1."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

from kbtpsim.usage import block_size_arg
from kbtpsim.usage import fail as _fail

EXIT_DIVERGED = 1


def default_profiles() -> list[str]:
    """The default campaign's profiles: every offloading and CPU-only profile of interest,
    plus ``cx5+strided`` once the chain planner offloads anything there."""
    from kbtpsim.oracle.campaign import PROFILES

    out = list(PROFILES)
    if offloads("cx5+strided"):
        out.append("cx5+strided")
    return out


def offloads(profile: str) -> bool:
    """Whether :mod:`kbtpsim.chains.plan` offloads any variant on ``profile`` (either
    byte order)."""
    from kbtpsim.oracle.campaign import plan_for

    try:
        return any(plan_for(profile, le).offloaded for le in (False, True))
    except (KeyError, ValueError):
        return False


def _profiles(text: str | None) -> list[str] | str:
    from kbtpsim.oracle.campaign import resolve_profile

    names = default_profiles() if text is None else [p.strip() for p in text.split(",")
                                                     if p.strip()]
    if not names:
        return "--profiles: no profile given"
    for n in names:
        try:
            resolve_profile(n)
        except (KeyError, ValueError):
            from kbtpsim.nic.profiles import PROFILES as KNOWN
            return (f"--profiles: unknown profile {n!r} (known: {', '.join(sorted(KNOWN))}; "
                    "NAME+strided adds strided keys)")
    return names


def _common(q: argparse.ArgumentParser) -> None:
    q.add_argument("--json", action="store_true", help="one JSON object per line")
    q.add_argument("--timing", action="store_true", help="also print wall-clock times "
                   "(otherwise the output is identical for identical arguments)")


#: the largest --block-size: campaigns hold 24 blocks (and as many octets in flight)
MAX_BLOCK = 1 << 20


def _cmd_check(args: argparse.Namespace) -> int:
    from kbtpsim.oracle.campaign import MIXES, Spec, run_campaign
    from kbtpsim.oracle.faults import parse_faults
    from kbtpsim.oracle.mutants import CATALOGUE
    from kbtpsim.oracle.report import describe, request_counts

    if args.seeds is not None and args.seed is not None:
        return _fail("--seed: give --seed S or --seeds N, not both")
    if args.seeds is not None and args.seeds < 1:
        return _fail(f"--seeds: must be >= 1, got {args.seeds}")
    if args.ops < 1:
        return _fail(f"--ops: must be >= 1, got {args.ops}")
    if args.phases < 1:
        return _fail(f"--phases: must be >= 1, got {args.phases}")
    from kbtpsim.oracle.spec import BS
    from kbtpsim.units import format_size

    block_size = BS if args.block_size is None else block_size_arg(args.block_size,
                                                                   MAX_BLOCK)
    if isinstance(block_size, str):
        return _fail(block_size)
    seeds = [args.seed] if args.seed is not None else list(range(1, (args.seeds or 2) + 1))
    profiles = _profiles(args.profiles)
    if isinstance(profiles, str):
        return _fail(profiles)
    mixes = [m.strip() for m in args.mix.split(",") if m.strip()]
    for m in mixes:
        if m not in MIXES:
            return _fail(f"--mix: unknown mix {m!r} (known: {', '.join(MIXES)})")
    try:
        faults = parse_faults(args.faults or "")
    except ValueError as exc:
        return _fail(f"--faults: {exc}")
    transform = None
    if args.mutant is not None:
        if args.mutant not in CATALOGUE:
            return _fail(f"--mutant: unknown mutant {args.mutant!r} (known: "
                         f"{', '.join(CATALOGUE)})")
        transform = CATALOGUE[args.mutant].transform
    if args.junit is not None:
        from kbtpsim.usage import output_file_problem

        bad = output_file_problem(args.junit, (".xml",))
        if bad:
            return _fail(f"--junit {args.junit}: {bad}")
    orders: list[bool | None] = {"default": [None], "on": [True], "off": [False],
                                 "both": [False, True]}[args.addr_le]
    skipped: list[str] = []
    from kbtpsim.chains.v2 import default_design
    from kbtpsim.oracle.campaign import resolve_profile

    #: default: each profile's default design, as target.chains (decision C14)
    design = {p: "v1" if args.chains == "v1" else default_design(resolve_profile(p))
              for p in profiles}
    if args.chains == "v2":  # only where the NIC can re-arm chains (decision C11)
        skipped = [p for p in profiles if design[p] != "v2"]
        profiles = [p for p in profiles if p not in skipped]
        if not profiles:
            return _fail(f"--chains v2: none of the profiles can run chains v2 "
                         f"({', '.join(skipped)})")
    plan = (f"kbtpsim check: seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}) x profiles "
            f"{','.join(profiles)} x ADDR_LE {args.addr_le} x mixes {','.join(mixes)}; "
            f"{args.ops} requests per campaign after the setup, in {args.phases} phases"
            + (f"; faults {','.join(faults.names)}" if faults.names else "")
            + (f"; mutant {args.mutant}" if args.mutant else "")
            + (f"; reference {args.reference}" if args.reference != "target" else "")
            + ("; FREE on the NIC" if args.free_on_nic else "")
            + ("; the table in NIC device memory" if args.table_memory == "device" else "")
            + (f"; blocks of {format_size(block_size)}" if block_size != BS else "")
            + (f"; chains {args.chains}" + (f" (not on {', '.join(skipped)}: they cannot "
                                             "re-arm chains)" if skipped else "")
               if args.chains == "v2" else "; chains v1" if args.chains == "v1" else "")
            + ("; chains " + ", ".join(f"{p} {d}" for p, d in design.items())
               if args.chains == "default" else ""))
    if not args.json:
        print(plan, flush=True)
    wall = time.perf_counter()
    total = diverged = 0
    first = None
    runs = [(p, o, m, s) for p in profiles for o in orders for m in mixes for s in seeds]
    cases: list[Any] = []  # (spec, result or None) for --junit
    for profile, addr_le, mix, seed in runs:
        spec = Spec(seed=seed, profile=profile, addr_le=addr_le, ops=args.ops,
                    mix=mix, phases=args.phases, faults=faults,
                    mutant=args.mutant, reference=args.reference,
                    chains=design[profile], free_on_nic=args.free_on_nic,
                    block_size=block_size,
                    table_in_device_memory=args.table_memory == "device")
        if args.stop and diverged:
            cases.append((spec, None))
            continue
        res = run_campaign(spec, transform)
        cases.append((spec, res))
        total += 1
        row = res.summary()
        if not args.timing:
            row.pop("wall_s")
        if args.json:
            if res.divergences:
                row["first"] = res.divergences[0].as_dict()
                row["replay"] = replace(spec, addr_le=res.addr_le).replay()
            print(json.dumps(row, sort_keys=True), flush=True)
        else:
            print(f"  seed {seed:>3} {profile:<12} ADDR_LE "
                  f"{'on ' if res.addr_le else 'off'} {mix:<8} {request_counts(res)}, "
                  f"{len(res.divergences)} divergences"
                  + (f" {res.wall_s:6.1f} s" if args.timing else ""),
                  flush=True)
        if res.divergences:
            diverged += 1
            if first is None:
                first = (res, replace(spec, addr_le=res.addr_le))
    elapsed = time.perf_counter() - wall
    if not args.json:
        print(f"{total} campaigns, {diverged} diverged"
              + (f" ({elapsed:.1f} s)" if args.timing else ""))
        if first is not None:
            res, spec = first
            res.spec = spec
            print(describe(res, res.divergences[0]))
            more = len(res.divergences) - 1
            if more:
                print(f"  ... and {more} more divergence(s) in that campaign")
    if args.junit is not None:
        from kbtpsim.oracle.junit import Case, write_junit

        write_junit(args.junit, [Case(sp, r) for sp, r in cases], {"plan": plan})
        if not args.json:
            print(f"junit: {args.junit} ({len(cases)} test cases, {diverged} failures)")
    return EXIT_DIVERGED if diverged else 0


def _cmd_mutants(args: argparse.Namespace) -> int:
    from kbtpsim.oracle.mutants import CATALOGUE, applicable, run_mutant

    if args.list:
        for m in CATALOGUE.values():
            print(f"{m.name:<20} {m.about}")
        return 0
    names = list(CATALOGUE) if args.only is None else [n.strip() for n in args.only.split(",")
                                                        if n.strip()]
    for n in names:
        if n not in CATALOGUE:
            return _fail(f"--only: unknown mutant {n!r} (known: {', '.join(CATALOGUE)})")
    if args.ops is not None and args.ops < 1:
        return _fail(f"--ops: must be >= 1, got {args.ops}")
    if args.profile is not None:
        got = _profiles(args.profile)
        if isinstance(got, str):
            return _fail(got.replace("--profiles", "--profile"))
    caught = total = 0
    rows: list[dict[str, Any]] = []
    for n in names:
        if not applicable(CATALOGUE[n], args.profile):
            if not args.json:
                print(f"  {n:<20} n/a        (no WR it changes in the chains of "
                      f"{args.profile})")
            continue
        total += 1
        out = run_mutant(CATALOGUE[n], seed=args.seed, ops=args.ops, profile=args.profile)
        row = out.row()
        if not args.timing:
            row.pop("wall_s")
        rows.append(row)
        caught += bool(out.caught)
        if args.json:
            print(json.dumps(row, sort_keys=True), flush=True)
        else:
            verdict = "caught" if out.caught else "NOT CAUGHT"
            static = "verifier: rejects" if out.static else "verifier: accepts"
            took = f" ({row['wall_s']:.1f} s)" if args.timing else ""
            print(f"  {n:<20} {verdict:<10} after {row['requests']:>4} requests{took} "
                  f"by {row['by']}; {static}", flush=True)
            if not out.caught:
                print(f"      replay: {row['replay']}")
    if not args.json:
        print(f"{caught}/{total} mutants caught")
    return 0 if caught == total else EXIT_DIVERGED


def add_oracle_parsers(subparsers: Any) -> None:
    """Register ``kbtpsim check`` and ``kbtpsim mutants``."""
    q = subparsers.add_parser(
        "check", help="differential campaigns: offloaded target vs the software target",
        description="Randomised campaigns (seeds x profiles x byte orders x mixes) of "
        "concurrent initiators against the offloaded target, each request compared with "
        "a software target run in lockstep. Exit 1 on a divergence.")
    q.add_argument("--seeds", type=int, metavar="N", help="seeds 1..N (default 2)")
    q.add_argument("--seed", type=int, metavar="S", help="one seed")
    q.add_argument("--profiles", metavar="P,...", help="NIC profiles (default: ideal, "
                   "ideal-be, cx5, irdma, and cx5+strided when it offloads)")
    q.add_argument("--addr-le", choices=("default", "on", "off", "both"), default="both",
                   help="ADDR_LE of the target: the profile's default, on, off or both "
                   "(default both)")
    q.add_argument("--ops", type=int, default=96, metavar="N",
                   help="requests per campaign after the setup (default 96)")
    q.add_argument("--phases", type=int, default=3, metavar="N",
                   help="quiescent checkpoints after the setup (default 3)")
    q.add_argument("--mix", default="default,pipeline", metavar="M,...",
                   help="operation mixes: default, valid, invalid, churn, fill, race, "
                        "pipeline (default: default,pipeline)")
    q.add_argument("--faults", metavar="F,...",
                   help="delay, stall, hold, cqe, wire, reorder, reorder-target, slot, "
                   "drop, rogue (see docs/oracle.md)")
    q.add_argument("--mutant", metavar="NAME", help="run with a catalogue mutant")
    q.add_argument("--reference", choices=("target", "model"), default="target",
                   help="the shadow the campaigns compare with: the software target "
                   "(default) or the independent reference model (kbtpsim.refmodel)")
    q.add_argument("--chains", choices=("default", "v1", "v2"), default="default",
                   help="the offloaded target's chains: each profile's default as "
                   "target.chains (v2 where the NIC can re-arm chains, else v1; the "
                   "default), v1 (re-posted by the CPU) or v2 (re-armed by the NIC; "
                   "profiles that cannot are left out, and named)")
    q.add_argument("--free-on-nic", action="store_true",
                   help="serve FREE on the NIC too (target.operations.free: offload, "
                   "decision C20): chains v2 on profiles with native conditional WRs and "
                   "strided keys; every initiator in one trust domain")
    q.add_argument("--table-memory", choices=("host", "device"), default="host",
                   help="where the target's block table lives (target.table_memory, "
                   "decision C29): host memory (default) or the NIC's device memory")
    q.add_argument("--block-size", metavar="SIZE",
                   help="Block Size (and Max Inline) of the target, e.g. 16KiB: above the "
                   "profile's mtu (4 KiB) a block's data takes several packets (default "
                   "512 octets)")
    q.add_argument("--stop", action="store_true", help="stop at the first divergence")
    q.add_argument("--junit", metavar="FILE.xml",
                   help="also write a JUnit XML report: one test case per campaign, a "
                   "divergence as a failure with its decoded report (for CI)")
    _common(q)
    q.set_defaults(func=_cmd_check)
    m = subparsers.add_parser(
        "mutants", help="the mutation proof: every catalogue chain bug must be caught",
        description="Apply each deliberate chain bug and run its campaign; prints "
        "caught/total and exits 0 only when every mutant is caught.")
    m.add_argument("--seed", type=int, default=1, metavar="S", help="campaign seed (1)")
    m.add_argument("--only", metavar="NAME,...", help="these mutants only")
    m.add_argument("--ops", type=int, metavar="N", help="requests per campaign "
                   "(default: each mutant's own)")
    m.add_argument("--profile", metavar="P", help="NIC profile (default: each mutant's "
                   "own, ideal-be)")
    m.add_argument("--list", action="store_true", help="list the catalogue")
    _common(m)
    m.set_defaults(func=_cmd_mutants)


__all__ = ["add_oracle_parsers", "default_profiles", "offloads"]
