"""``kbtpsim chains``: list, show, draw and explain the compiled chains.

``add_chains_parser(subparsers)`` registers the subcommand; ``kbtpsim/cli.py`` calls it.
``replay_chain_main(args)`` is ``kbtpsim replay SCRIPT --target chain --nic PROFILE``
(:mod:`kbtpsim.chains.replay`): kbtpsim/cli.py installs it with
``kbtpsim.target.replay.register_chain_replay(replay_chain_main)``.
User errors print ``kbtpsim: error: ...`` on stderr and return 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kbtpsim.chains.compiler import OPERATIONS, VARIANTS, Geometry
from kbtpsim.chains.plan import decide, decide_op, stages_reads
from kbtpsim.chains.render import draw, explain, show
from kbtpsim.chains.replay import replay_chain_main
from kbtpsim.nic.profiles import PROFILES, get_profile
from kbtpsim.usage import EXIT_USAGE, block_size_arg, figure_types, output_file_problem
from kbtpsim.usage import fail as _fail

__all__ = ["add_chains_parser", "replay_chain_main"]

_OPS = ("LOAD", "STORE", "ALLOC_STORE", "FREE")


def _args(args: argparse.Namespace) -> tuple[str, Any] | str:
    op = args.op.upper().replace("-", "_")
    if op not in _OPS:
        return f"unknown operation {args.op!r} (known: {', '.join(_OPS)})"
    from kbtpsim.chains.measure import EXTRA

    if args.nic in EXTRA:  # e.g. cx5+strided: cx5 with strided keys (docs/chains.md)
        profile = EXTRA[args.nic]
    else:
        try:
            profile = get_profile(args.nic)
        except ValueError as exc:
            return f"{exc} (or one of: {', '.join(EXTRA)})"
    size = block_size_arg(args.block_size, 1 << 31)
    if isinstance(size, str):
        return size
    args.block_size = size
    _resolve_design(args, profile)
    return op, profile


def _resolve_design(args: argparse.Namespace, profile: Any) -> None:
    """``args.design``: the design shown, v2 (asked for, or the default) where
    ``profile`` can re-arm chains, else v1, as ``target.chains`` (decision C14)."""
    from kbtpsim.chains.v2 import default_design, recycle_blockers

    native = default_design(profile)
    args.design = native if args.chains in ("default", "v2") else "v1"
    if args.chains == "default" and native == "v1":
        blocked = recycle_blockers(profile)
        args.note = (f"chains v1: the default on {profile.name}, which cannot re-arm "
                     f"chains ({'; '.join(blocked)})")
    else:
        args.note = None


def _variant(op: str, inline: bool) -> str:
    if op in ("LOAD", "FREE"):
        return op.lower()
    return {("STORE", True): "store_inline", ("STORE", False): "store_read",
            ("ALLOC_STORE", True): "alloc_inline", ("ALLOC_STORE", False): "alloc_read"}[
        (op, inline)]


def _cmd_list(args: argparse.Namespace) -> int:
    print("operation     variant        what the fast path serves")
    for op in _OPS:
        for v in OPERATIONS[op]:
            print(f"{op:<13} {v:<14} {VARIANTS[v].about}")
    from kbtpsim.chains.measure import EXTRA

    print(f"profiles: {', '.join(sorted(PROFILES))} (and {', '.join(EXTRA)})")
    return 0


def _v2(d: Any, profile: Any, addr_le: bool, chains: str,
        block_size: int = 4096) -> tuple[Any, list[str]]:
    """The decision with chains v2's chain (lanes, WAITs per CQ), and the lines that
    say how v2 runs it: its recycle segment per credit, or why v2 cannot run there."""
    if chains != "v2":
        return d, []
    from dataclasses import replace

    from kbtpsim.chains.harness import Harness
    from kbtpsim.chains.v2 import prepare_chain, recycle_blockers

    why = recycle_blockers(profile)
    if why:
        return d, [f"chains v2: not on {profile.name} ({'; '.join(why)}): chains v1 "
                   "above"]
    if not d.offloaded:
        return d, ["chains v2: nothing to re-arm (the variant runs on the CPU)"]
    out = replace(d, chain=prepare_chain("v2", d.chain, profile))
    server = Harness(profile, addr_le, credits=2, chains="v2", variants=(d.variant,),
                     block_size=block_size).server
    plan = server._slots[0].plan
    lines = [f"chains v2: every credit slot has its own master, lanes and CQ; between two "
             f"rounds the NIC runs this recycle segment ({len(plan.steps) if plan else 0} "
             "WRs, after the request, off its path):"]
    lines += [f"   {line}" for line in (plan.describe() if plan else [])]
    by_v: dict[str, list[str]] = {}
    for c in server._slots[0].private:  # per-operation dispatch: the advancers
        by_v.setdefault(c.target.split("@", 1)[1].split("#", 1)[0], []).append(
            f"{c.qp}#{c.index} {c.opcode} {c.target} count += {c.delta}")
    for v, steps in by_v.items():
        lines.append(f"dispatch: {v}'s sub-master ends by ENABLEing its advancer, "
                     f"{len(steps)} FetchAdds, one {v} round each (in the rounds {v} ran):")
        lines += [f"   {i:2d} advance         {st}" for i, st in enumerate(steps)]
    return out, lines


def _geometry(op: str, args: argparse.Namespace, profile: Any) -> Geometry:
    """Chains v2's LOAD has no entry re-read (decision C13); FREE is shown as it runs with
    ``target.operations.free: offload`` (the LOADs' reader counts, decision C20); a
    Read-source store of several packets reads into staging with chains v2 (C24)."""
    bs = args.block_size
    return Geometry(block_size=bs, max_inline=bs, seqlock=args.design != "v2",
                    readers=op == "FREE",
                    stage_reads=stages_reads(args.design, profile, bs))


def _decide(op: str, args: argparse.Namespace, profile: Any) -> Any:
    """The variant's decision (:func:`_geometry`)."""
    return decide(_variant(op, args.inline), profile, args.addr_le, _geometry(op, args, profile))


def _cmd_show(args: argparse.Namespace) -> int:
    got = _args(args)
    if isinstance(got, str):
        return _fail(got)
    op, profile = got
    d, extra = _v2(_decide(op, args, profile), profile, args.addr_le,
                   "v2" if args.chains == "v2" else args.design, args.block_size)
    print(show(d))
    for line in extra + ([args.note] if args.note else []):
        print(line)
    return 0


def _cmd_draw(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if not out.suffix:
        out = out.with_suffix(".png")  # what matplotlib writes: say so
    bad = output_file_problem(out, figure_types())  # as plot -o: before any work
    if bad:
        return _fail(f"-o {out}: {bad}")
    got = _args(args)
    if isinstance(got, str):
        return _fail(got)
    op, profile = got
    d, _ = _v2(_decide(op, args, profile), profile, args.addr_le,
               "v2" if args.chains == "v2" else args.design, args.block_size)
    title = (f"{d.variant} on {profile.name}, ADDR_LE {'on' if args.addr_le else 'off'}: "
             f"{'offloaded' if d.offloaded else 'software'} ({d.chain.count()} WRs)")
    try:
        draw(d.chain, str(out), title)
    except OSError as exc:
        return _fail(f"cannot write {out}: {exc.strerror}")
    print(out)
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    got = _args(args)
    if isinstance(got, str):
        return _fail(got)
    op, profile = got
    print(explain(decide_op(op, profile, args.addr_le, _geometry(op, args, profile))))
    if args.note:
        print(args.note)
    if args.chains == "v2" or args.design == "v2":
        from kbtpsim.chains.v2 import recycle_blockers

        why = recycle_blockers(profile)
        print(f"chains v2 on {profile.name}: " + (
            "cannot run (" + "; ".join(why) + "): chains v1" if why else
            "the offloaded variants above, each credit re-armed in place by the NIC "
            "(kbtpsim chains show OP --nic " + profile.name + " --chains v2)"))
        if not why and any("load" in d.chain.headers for d in decide_op(
                op, profile, args.addr_le, _geometry(op, args, profile)) if d.offloaded):
            print("chains v2's LOAD here (decision C21): two steps after the receive, which "
                  "places the handle's address octets straight into the entry Read: the "
                  "Read (conditional on the handle range) beside the request markers, then "
                  "the data Write and the COMPLETION testing the entry and the markers' "
                  "octets; with ALLOW_UNSEALED four conditional mask patches free the "
                  "tests' SEALED bit, so an unsealed block is served in chain too; its "
                  "header test is the dispatch's")
    return 0


def add_chains_parser(subparsers: Any) -> None:
    """Register ``kbtpsim chains {list,show,draw,explain}``."""
    p = subparsers.add_parser("chains", help="show the work-request chains of KBTP operations")
    sub = p.add_subparsers(dest="chains_command", metavar="ACTION")
    p.set_defaults(func=lambda a: (p.print_help(), EXIT_USAGE)[1])
    q = sub.add_parser("list", help="list operations and their chain variants")
    q.set_defaults(func=_cmd_list)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("op", metavar="OP", help="LOAD, STORE or ALLOC_STORE")
        q.add_argument("--nic", required=True, metavar="PROFILE",
                       help="NIC profile name (or cx5+strided: cx5 with strided keys)")
        q.add_argument("--addr-le", action="store_true", help="the target sets ADDR_LE")
        q.add_argument("--block-size", metavar="SIZE", default="4KiB",
                       help="the target's Block Size (and Max Inline), e.g. 64KiB "
                       "(default 4KiB); a Read source above the profile's mtu is "
                       "staged with chains v2 and native conditions (decision C24), "
                       "else stays on the CPU (rule torn-read)")
        q.add_argument("--chains", choices=("default", "v1", "v2"), default="default",
                       help="the chain design (target.chains): the profile's default (v2 "
                       "where it can re-arm chains, else v1), v1, or v2 (lanes, WAITs per "
                       "CQ, the recycle segment)")

    q = sub.add_parser("show", help="one WR a line, with the source of every field")
    common(q)
    q.add_argument("--inline", action=argparse.BooleanOptionalAction, default=True,
                   help="STORE/ALLOC_STORE with inline data (default) or an RDMA Read source")
    q.set_defaults(func=_cmd_show)
    q = sub.add_parser("draw", help="draw the chain graph (PNG, SVG, PDF, ...)")
    common(q)
    q.add_argument("--inline", action=argparse.BooleanOptionalAction, default=True)
    q.add_argument("-o", "--output", required=True, metavar="FILE.png",
                   help="the figure (by its extension: .png, .svg, .pdf, ...; none: .png)")
    q.set_defaults(func=_cmd_draw)
    q = sub.add_parser("explain", help="which validations run in the chain, which on the CPU")
    common(q)
    q.set_defaults(func=_cmd_explain)
