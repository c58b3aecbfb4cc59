"""Chains v2: chains that the NIC re-arms in place (:mod:`.recycle`,
:class:`.server.RecyclingChainServer`); ``target.chains: v2`` in a scenario."""

from __future__ import annotations

from kbtpsim.chains.post import ChainServer
from kbtpsim.chains.v2.server import RecycleError, RecyclingChainServer, recycle_blockers

#: the values of ``target.chains``
CHAIN_VERSIONS = ("v1", "v2")


def chain_server_class(chains: str) -> type[ChainServer]:
    """The :class:`ChainServer` class of chains ``"v1"`` (re-posted by the CPU) or
    ``"v2"`` (re-armed by the NIC)."""
    if chains == "v1":
        return ChainServer
    if chains == "v2":
        return RecyclingChainServer
    raise ValueError(f"chains must be one of {', '.join(CHAIN_VERSIONS)}, got {chains!r}")


__all__ = ["CHAIN_VERSIONS", "RecycleError", "RecyclingChainServer", "chain_server_class",
           "recycle_blockers"]
