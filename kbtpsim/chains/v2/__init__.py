"""Chains v2: chains that the NIC re-arms in place (:mod:`.recycle`,
:class:`.server.RecyclingChainServer`); ``target.chains: v2`` in a scenario."""

from __future__ import annotations

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import Chain
from kbtpsim.chains.post import ChainServer
from kbtpsim.chains.v2.dispatch import check_dispatch, dispatch_blockers, split_variants
from kbtpsim.chains.v2.lanes import split_lanes
from kbtpsim.chains.v2.server import RecycleError, RecyclingChainServer, recycle_blockers
from kbtpsim.chains.v2.waits import split_waits
from kbtpsim.chains.verify import verify
from kbtpsim.nic.profile import NicProfile

#: the values of ``target.chains``
CHAIN_VERSIONS = ("v1", "v2")


def default_design(profile: NicProfile) -> str:
    """The chain design a target on ``profile`` runs when ``target.chains`` is not given:
    v2 where the profile can re-arm chains in place, else v1 (decision C14). The one
    place this rule lives; scenarios, ``kbtpsim check`` and ``kbtpsim chains`` ask it."""
    return "v1" if recycle_blockers(profile) else "v2"


def chain_server_class(chains: str) -> type[ChainServer]:
    """The :class:`ChainServer` class of chains ``"v1"`` (re-posted by the CPU) or
    ``"v2"`` (re-armed by the NIC)."""
    if chains == "v1":
        return ChainServer
    if chains == "v2":
        return RecyclingChainServer
    raise ValueError(f"chains must be one of {', '.join(CHAIN_VERSIONS)}, got {chains!r}")


def prepare_chain(chains: str, chain: Chain, profile: NicProfile,
                  check: bool = True, dispatch: bool = True) -> Chain:
    """The chain a connection posts: v1's as planned; v2's with each part on its own
    worker lane (:func:`~kbtpsim.chains.v2.lanes.split_lanes`), then, where the profile
    allows it and ``dispatch``, each variant on its own sub-master dispatched by the
    request header (:func:`~kbtpsim.chains.v2.dispatch.split_variants`), else its step
    WAITs split by CQ (:func:`~kbtpsim.chains.v2.waits.split_waits`); verified again."""
    if chains != "v2" or not chain.count(include_master=False):
        return chain
    lanes = split_lanes(chain)
    if dispatch and not dispatch_blockers(profile) and any(
            w.part in VARIANTS for w in chain.wrs()):
        out = split_variants(lanes)
        bad = check_dispatch(out) if check else []
        if bad:
            raise RecycleError(f"chains v2: the dispatched chain is unsound: {bad[0]}")
    else:
        if chain.headers:  # rule dispatch-header
            raise RecycleError(
                f"chains v2: {', '.join(sorted(chain.headers))} has no header marker of "
                "its own: it runs only under per-operation dispatch (decision C21)")
        out = split_waits(lanes)
    found = verify(out, profile) if check else []  # mutants run unverified (O4)
    if found:
        raise RecycleError(f"chains v2: the chain in lanes does not verify on "
                           f"{profile.name!r}: {found[0]}")
    return out


__all__ = ["CHAIN_VERSIONS", "RecycleError", "RecyclingChainServer", "chain_server_class",
           "default_design", "prepare_chain", "recycle_blockers"]
