"""Each variant looks its entry up itself (decision C30).

A credit's *common part* (the ``dispatch`` lane: the handle patch, the table marker and
the table-entry Read) ran on every credit, whatever its request, behind the master's
ENABLEs and WAITs: a LOAD, which reads its own entry since decision C21, paid its WQE
fetches, its loopback Read of the table and the recycle segment's advances of its counts
without using any of it. :func:`own_lookups` gives every variant that reads the common
part a copy of the WRs it reads, renamed ``NAME_v``, on the variant's own lane (so that
the recycle segment restores the copies in one Write with the lane's other modified
WQEs), and drops the common part; the copies place the same scratch (one variant runs
per credit). The dispatch pass (:mod:`.dispatch`) then finds every variant *whole*: the
copies are steps of the variant's own, released by its sub-master, counted on its CQ,
advanced by its advancer in the rounds it ran; a request dispatched to no variant (the
CPU serves it) reads nothing.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from kbtpsim.chains.ir import (
    Addr,
    Chain,
    CondSpec,
    EdgeKind,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.chains.v2.belongs import DispatchError, variant_of


def _rename_loc(loc: str, names: dict[str, str]) -> str:
    """``wqe:WR.FIELD...`` with WR renamed."""
    if loc.startswith("wqe:"):
        wr, dot, rest = loc[4:].partition(".")
        if wr in names:
            return f"wqe:{names[wr]}{dot}{rest}"
    return loc


def _rename_read(r: Read, names: dict[str, str]) -> Read:
    return replace(r, loc=_rename_loc(r.loc, names),
                   producers=tuple(names.get(p, p) for p in r.producers))


def _rename_placed(p: Placed, names: dict[str, str]) -> Placed:
    return replace(p, producer=names.get(p.producer, p.producer))


def _rename_cond(c: CondSpec | None, names: dict[str, str]) -> CondSpec | None:
    if c is None:
        return None
    return replace(c, word=_rename_read(c.word, names),
                   compare_source=c.compare_source and _rename_placed(c.compare_source, names),
                   mask_source=c.mask_source and _rename_placed(c.mask_source, names))


def _rename(w: WrTemplate, names: dict[str, str]) -> WrTemplate:
    """``w`` with every reference to a WR of ``names`` (as a producer, a WQE location or
    an ``wr:`` address) renamed."""
    fields = {}
    for k, f in w.fields.items():
        if isinstance(f, Placed):
            f = _rename_placed(f, names)
        elif isinstance(f, Addr):
            ref = f.ref
            if ref.startswith("wr:") and ref[3:] in names:
                ref = "wr:" + names[ref[3:]]
            f = replace(f, ref=_rename_loc(ref, names))
        fields[k] = f
    return replace(
        w, fields=fields,
        gather=tuple(_rename_read(r, names) for r in w.gather),
        reads=tuple(_rename_read(r, names) for r in w.reads),
        places=tuple(replace(p, dest=_rename_loc(p.dest, names)) for p in w.places),
        cond=_rename_cond(w.cond, names), cas_cond=_rename_cond(w.cas_cond, names),
        arms=names.get(w.arms, w.arms) if w.arms else w.arms)


def own_lookups(chain: Chain) -> Chain:
    """``chain`` (in lanes) with each variant's own copy of the common WRs it reads, and
    no common part (module docstring). A chain without a common part is returned as is."""
    common = {w.name: w for w in chain.wrs()
              if w.role is Role.WORKER and variant_of(w) is None}
    if not common:
        return chain
    mine: dict[str, list[WrTemplate]] = {}
    for w in chain.wrs():
        v = variant_of(w) if w.role in (Role.WORKER, Role.CONN) else None
        if v is not None:
            mine.setdefault(v, []).append(w)
    copies: dict[str, dict[str, str]] = {}  # variant -> common name -> its copy's
    for v, ws in mine.items():
        need = {c for c in common if any(w.reads_what(common[c]) for w in ws)}
        grew = True
        while grew:  # and what those read of the common part
            more = {c for c in common if c not in need
                    and any(common[n].reads_what(common[c]) for n in need)}
            grew = bool(more)
            need |= more
        if need:
            copies[v] = {c: f"{c}_{v}" for c in sorted(need)}
    out = Chain(chain.name, chain.addr_le, nx.DiGraph(), list(chain.notes),
                dict(chain.headers))
    for w in chain.wrs():
        if w.name in common:
            continue
        v = variant_of(w) if w.role in (Role.WORKER, Role.CONN) else None
        out.add(_rename(w, copies[v]) if v in copies else replace(w))
    for v, names in copies.items():
        for c in common.values():
            if c.name in names:
                out.add(replace(_rename(c, names), name=names[c.name], part=v, lane=v))
    for a, b, d in chain.graph.edges(data=True):
        if a in common or b in common:
            # the master's ENABLEs and WAITs of the common part (the dispatch pass
            # re-makes the masters), and its lane order (re-made per lane)
            if d["kind"] not in (EdgeKind.ENABLE, EdgeKind.COMPLETION, EdgeKind.QP_ORDER,
                                 EdgeKind.FENCE):
                raise DispatchError(f"look-up: edge {a} -> {b} ({d['kind']}) of the "
                                 "common part")
            continue
        out.edge(a, b, d["kind"])
    n = sum(len(x) for x in copies.values())
    out.notes.append(f"look-up (C30): {', '.join(sorted(copies))} each read the entry "
                     f"themselves ({n} WRs in all); no common part")
    return out


__all__ = ["own_lookups"]
