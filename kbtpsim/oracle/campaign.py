"""Randomised differential campaigns: initiators against the offloaded target, in lockstep
with the shadow.

One campaign = one seed, one NIC profile, one byte order (ADDR_LE on or off), one mix of
operations, optional faults and an optional mutant. Four initiators (``a``, ``b``, ``c``
in one trust domain, ``d`` in another; quotas summing to the pool, so the ring runs
empty) each run their own seeded sequence of requests concurrently on one simulated
server, one request outstanding at a time (mix ``pipeline``: LOADs sent back to back
with an operation on the initiator's own handles right behind them, all outstanding at
once on the connection, decision C16). Each first stores two sealed full blocks
(*published* handles, which it never changes again); the others LOAD those concurrently
(a LOAD of a handle another connection is changing has no single linearisation with
chains that read the entry and the block at different times, so campaigns do not race
them), everything else targets the initiator's own handles, valid or not. After every
*phase* the run is brought to a quiescent point, the recorded events are linearised and
applied to the shadow, and everything is compared (:mod:`kbtpsim.oracle.compare`); the
campaign stops at the first checkpoint that diverges.

A campaign is described by :mod:`kbtpsim.oracle.spec` (:class:`Spec`, :class:`Result`,
the mixes and profiles), its initiators are :mod:`kbtpsim.oracle.actor`, and its run is
:mod:`kbtpsim.oracle.lockstep`; everything is importable from here.
"""

from __future__ import annotations

# ``X as X``: re-exported, importable from here as before the split
from kbtpsim.oracle.actor import Gen as Gen
from kbtpsim.oracle.lockstep import Pool as Pool
from kbtpsim.oracle.lockstep import _Run as _Run
from kbtpsim.oracle.node import ChainTransform
from kbtpsim.oracle.spec import BLOCKS as BLOCKS
from kbtpsim.oracle.spec import BS as BS
from kbtpsim.oracle.spec import HANDLES as HANDLES
from kbtpsim.oracle.spec import INITIATORS as INITIATORS
from kbtpsim.oracle.spec import MIXES, PROFILES, Result, Spec, resolve_profile
from kbtpsim.oracle.spec import PUBLISHED as PUBLISHED
from kbtpsim.oracle.spec import ROGUE as ROGUE
from kbtpsim.oracle.spec import plan_for as plan_for
from kbtpsim.setup_heap import SetupHeap
from kbtpsim.system.results import HelloRejected


def run_campaign(spec: Spec, transform: ChainTransform | None = None) -> Result:
    """Run one campaign (see the module docstring); ``transform`` is a mutant."""
    if spec.mix not in MIXES:
        raise ValueError(f"unknown mix {spec.mix!r} (known: {', '.join(MIXES)})")
    try:
        with SetupHeap() as heap:  # the chains' set-up frozen for the run (setup_heap.py)
            return _Run(spec, transform).go(heap)
    except HelloRejected as exc:  # pragma: no cover - configuration error
        raise RuntimeError(f"HELLO rejected: {exc}") from exc


__all__ = ["MIXES", "PROFILES", "Result", "Spec", "resolve_profile", "run_campaign"]
