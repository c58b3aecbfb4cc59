"""The target's conservation invariant, checkable at any time.

Every block of the pool is in exactly one place: a ring slot, a deferred free, an
outstanding ticket (taken from the ring, not yet bound), or a bound handle; no block is in
two places; each ring's counters agree with its contents; no initiator's usage exceeds
its quota (unless it overdrew it with direct FetchAdds, which the draft lets a target
detect and refuse at BIND). Cost is proportional to the blocks touched, not to F.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.atomics import MASK32

if TYPE_CHECKING:
    from kbtpsim.target.processor import Target


class InvariantViolation(AssertionError):
    """The target lost or duplicated a block, or broke a quota."""


def _signed32(value: int) -> int:
    value &= MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def check_invariant(target: Target) -> None:
    places: dict[int, str] = {}

    def put(block: int, where: str) -> None:
        if block in places:
            raise InvariantViolation(f"block 0x{block:x} is in {places[block]} and in {where}")
        places[block] = where

    for ring in target.rings:
        for block in ring.explicit_blocks():
            put(block, f"a slot of ring {ring.name}")
        for block in ring.deferred_blocks():
            put(block, f"a deferred free on ring {ring.name}")
    for block in target.quiescing:
        put(block, "a free waiting for quiescence (C13)")
    for block, owner in target.held_blocks.items():
        put(block, f"an outstanding ticket of {owner}")
    owner_of: dict[int, str] = {}
    for sess in target.initiators.values():
        for handle in sess.bound:
            entry = target.table.get(handle)
            if not entry.valid:
                raise InvariantViolation(f"{sess.name} lists 0x{handle:x} but it is not VALID")
            put(entry.block_offset, f"handle 0x{handle:x} of {sess.name}")
            owner_of[handle] = sess.name
        quota = sess.config.quota
        if len(sess.bound) + sess.freeing > quota or (
            sess.usage > quota and not sess.overdrawn
        ):
            raise InvariantViolation(f"{sess.name} uses {sess.usage} of quota {quota}")
        if min(sess.tickets, sess.freeing) < 0:
            raise InvariantViolation(f"{sess.name} has negative counts")
    for handle, entry in target.table.items():
        if entry.valid and handle not in owner_of:
            raise InvariantViolation(f"VALID entry 0x{handle:x} belongs to no initiator")

    per_ring: dict[str, int] = {ring.name: 0 for ring in target.rings}
    for block, where in places.items():
        ring = target.ring_of(block)
        if block not in ring.blocks:
            raise InvariantViolation(f"block 0x{block:x} ({where}) is not a pool block")
        if ring.holds_initial(block):
            raise InvariantViolation(f"block 0x{block:x} is in {where} and in its initial slot")
        per_ring[ring.name] += 1
    for ring in target.rings:
        lazy = ring.lazy_initial_count()
        total = lazy + per_ring[ring.name]
        if total != len(ring.blocks):
            raise InvariantViolation(
                f"ring {ring.name}: {total} blocks accounted for, {len(ring.blocks)} expected"
            )
        unconsumed = sum(1 for a in target._waiters if a.ring is ring)
        for sess in target.initiators.values():
            if sess.direct is not None and sess.direct.ring is ring:
                unconsumed += len(sess.direct.outstanding)
        in_ring = lazy + len(ring.explicit_blocks()) + len(ring.deferred_blocks())
        expected = _signed32(ring.tail_ticket - ring.head_ticket) + unconsumed
        if in_ring != expected:
            raise InvariantViolation(
                f"ring {ring.name}: {in_ring} blocks in slots and deferred frees, but "
                f"Tail - Head + unconsumed tickets = {expected}"
            )
