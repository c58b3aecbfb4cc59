"""Building the chains' indirect keys on a NIC, as a UMR work request would.

:func:`table_key` and :func:`pool_key` register the direct regions the layout's entries
name, check the layout against the profile's UMR API (:mod:`kbtpsim.nic.keys`), register
the indirect key with its per-access translation cost, and return it with the cost of the
UMR WQE that builds it (:class:`~kbtpsim.nic.keys.UmrCost`: a setup cost, paid once per
key before any request; the model does not queue the UMR WQE on a QP, it has no effect on
request timing other than the translation cost it sets).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kbtpsim.nic.errors import CapabilityError
from kbtpsim.nic.keys import (
    STEP,
    IndirectLayout,
    KeyLayoutError,
    UmrCost,
    plan_pool_key,
    plan_table_key,
    umr_cost,
)
from kbtpsim.nic.protection import Access, MemoryRegion

if TYPE_CHECKING:
    from kbtpsim.nic.nic import Nic


@dataclass(frozen=True, slots=True)
class BuiltKey:
    key: MemoryRegion
    layout: IndirectLayout
    cost: UmrCost


def _xlat_ps(nic: Nic) -> int:
    return round(nic.profile.indirect_xlat_ns * 1000)


def _need(nic: Nic) -> str:
    api = nic.profile.indirect_keys
    if api == "none":
        raise CapabilityError(f"profile {nic.profile.name!r} has no indirect (UMR) keys")
    return api


def table_key(nic: Nic, table_addr: int, table_base: int, table_count: int,
              access: Access, step: int = STEP) -> BuiltKey:
    """The block table's interleaved key: TO ``h * step + j`` -> octet ``j`` (< 16) of
    entry ``h - table_base``. Raises :class:`~kbtpsim.nic.keys.KeyLayoutError` (one line)
    if the profile's UMR cannot describe it."""
    api = _need(nic)
    plan = plan_table_key(api, table_base, table_count, step)
    local = Access.LOCAL_WRITE
    table = nic.register_mr(table_addr, 16 * table_count, local)
    filler_addr = nic.host.alloc(plan.filler_size, 4096)
    filler = nic.register_mr(filler_addr, plan.filler_size, local)
    ent_t, ent_f = plan.layout.entries
    layout = replace(plan.layout, entries=(
        replace(ent_t, va=table_addr, lkey=table.lkey),
        replace(ent_f, va=filler_addr, lkey=filler.lkey)))
    key = nic.pt.register_indirect(layout, access, xlat_ps=_xlat_ps(nic))
    return BuiltKey(key, layout, umr_cost(nic.profile, layout))


def pool_key(nic: Nic, pool_addr: int, start: int, length: int,
             access: Access) -> BuiltKey:
    """The pool's list key: TO ``start + b`` -> ``pool_addr + b``."""
    api = _need(nic)
    plan = plan_pool_key(api, start, length)
    pool = nic.register_mr(pool_addr, length, Access.LOCAL_WRITE)
    layout = replace(plan, entries=tuple(
        replace(e, va=pool_addr + e.va, lkey=pool.lkey) for e in plan.entries))
    key = nic.pt.register_indirect(layout, access, xlat_ps=_xlat_ps(nic))
    return BuiltKey(key, layout, umr_cost(nic.profile, layout))


__all__ = ["BuiltKey", "KeyLayoutError", "pool_key", "table_key"]
