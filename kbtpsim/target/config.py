"""Configuration of the software target: the pool, the ring, and the initiators it serves.

Frozen dataclasses whose constructors validate; a bad value raises ``ValueError`` naming
the field. Block numbering: the pool holds ``blocks`` blocks numbered ``first_block`` ..
``first_block + blocks - 1``; block number b has Block Offset ``b * block_size`` (its
Tagged Offset within the Pool STag). ``first_block`` exists so a test can reproduce the
draft's example ("blocks 100 to 103").

Time: the target takes ``now`` as integer **picoseconds**, the simulator's time unit
(:mod:`kbtpsim.units`); configuration is in ms (the Ticket Timeout is advertised in ms in
HELLO_ACK).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum

from kbtpsim.units import PS_PER_MS
from kbtpsim.wire.constants import INITIATOR_ID_SIZE, Feature

__all__ = ["PS_PER_MS", "Binding", "CounterMode", "InitiatorConfig", "TargetConfig"]

MAX_RING_SLOTS = 1 << 28  # Slot Offset must fit below bit 32 (see kbtpsim.atomics.ring_order)


class CounterMode(StrEnum):
    """How Head/Tail counters advance (draft, "Free-Block Ring" and "InfiniBand")."""

    MASKED = "masked"  #: Ticket | Slot Offset, masked FetchAdd (RFC 7306)
    UNMASKED = "unmasked"  #: Ticket << 32, plain FetchAdd, slot = 16 * (ticket mod N)


class Binding(StrEnum):
    """Transport binding; decides whether RECORD_COMPLETION may be offered."""

    RDMAP = "rdmap"  #: MUST NOT advertise RECORD_COMPLETION (draft, "Completion")
    INFINIBAND = "infiniband"  #: records written with RDMA Write with Immediate


def ring_size(blocks: int) -> int:
    """Default N for a ring of ``blocks`` blocks: the smallest power of two >= F, and at
    least 2 (a masked ring needs two slots, decision D9)."""
    return max(2, 1 << (blocks - 1).bit_length())


def _require(cond: bool, owner: str, name: str, message: str) -> None:
    if not cond:
        raise ValueError(f"{owner}.{name}: {message}")


@dataclass(frozen=True, slots=True)
class InitiatorConfig:
    """One initiator the target serves, keyed by its 128-bit Initiator ID.

    ``features`` is what the target is willing to offer this initiator (per its trust);
    the session gets the intersection with what HELLO requests. ``trust_domain`` decides
    whether freed blocks are cleared (draft, "Security Considerations").
    """

    name: str
    initiator_id: bytes
    quota: int
    handle_base: int
    handle_count: int
    features: Feature = Feature(0)
    trust_domain: str = "default"

    def __post_init__(self) -> None:
        own = f"InitiatorConfig[{self.name}]"
        _require(bool(self.name), own, "name", "must be a non-empty string")
        _require(
            isinstance(self.initiator_id, bytes) and len(self.initiator_id) == INITIATOR_ID_SIZE,
            own, "initiator_id", "must be 16 bytes",
        )
        _require(0 <= self.quota < 1 << 32, own, "quota", "must be a 32-bit unsigned int")
        _require(
            self.handle_base >= 0 and self.handle_base + self.handle_count <= 1 << 64,
            own, "handle_base", "range must lie within 64-bit handles",
        )
        _require(
            0 < self.handle_count < 1 << 32, own, "handle_count", "must be in 1..2^32-1"
        )
        _require(
            int(self.features) & ~0xF == 0, own, "features", "unknown feature bits"
        )
        if self.features & Feature.DIRECT_ALLOC:
            _require(self.quota > 0, own, "quota", "DIRECT_ALLOC needs a quota of at least 1")

    def owns(self, handle: int) -> bool:
        return self.handle_base <= handle < self.handle_base + self.handle_count


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """The target: pool geometry, ring, timers, binding, and its initiators."""

    blocks: int
    block_size: int
    initiators: tuple[InitiatorConfig, ...] = ()
    ring_slots: int | None = None  #: N of the shared ring; default next power of two >= F
    first_block: int = 0
    max_inline: int = 4096
    request_credits: int = 64
    ticket_timeout_ms: int = 100
    retention_ms: int = 30_000
    counter_mode: CounterMode = CounterMode.MASKED
    binding: Binding = Binding.RDMAP
    addr_le: bool = False
    #: (first handle, count) of the block table when it must span more than the handles
    #: of the initiators (None: from the lowest to the end of the highest range). NIC
    #: chains want an aligned power-of-two block (kbtpsim.chains.server)
    table_range: tuple[int, int] | None = None
    #: a FREE (and a RELEASE or retention expiry) returns its block to the ring only when
    #: the caller reports, with ``Target.quiesced``, that nothing still reads the block
    #: under the old entry (NIC chains that read an entry, then the block: decision C13)
    free_quiesce: bool = False
    #: the NIC takes Tail tickets of the shared ring too (chains that serve FREE,
    #: decision C20): every return of a block to the shared ring waits in ``quiescing``
    #: until the caller, having taken a Tail ticket through the NIC, calls
    #: ``Target.quiesced(block, now, ticket)``. Needs ``free_quiesce``
    tail_via_nic: bool = False
    #: blocks of DIRECT_ALLOC partitions (computed; not a parameter)
    partition_blocks: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        own = "TargetConfig"
        _require(0 < self.blocks <= MAX_RING_SLOTS, own, "blocks", "must be in 1..2^28")
        _require(self.free_quiesce or not self.tail_via_nic, own, "tail_via_nic",
                 "needs free_quiesce (the blocks it returns wait in quiescing)")
        _require(
            self.block_size > 0 and self.block_size % 8 == 0 and self.block_size < 1 << 32,
            own, "block_size", "must be a positive multiple of 8 below 2^32",
        )
        _require(self.first_block >= 0, own, "first_block", "must be >= 0")
        _require(
            (self.first_block + self.blocks) * self.block_size < (1 << 64) - 1,
            own, "first_block", "pool must fit in 64-bit Block Offsets",
        )
        slots = self.ring_slots
        if slots is not None:
            _require(
                slots >= 2 and slots & (slots - 1) == 0 and slots <= MAX_RING_SLOTS,
                own, "ring_slots", "must be a power of two in 2..2^28 (decision D9)",
            )
            _require(slots >= self.blocks, own, "ring_slots", "must be >= blocks (N >= F)")
        _require(0 <= self.max_inline < 1 << 32, own, "max_inline", "must be 32-bit")
        _require(0 < self.request_credits < 1 << 16, own, "request_credits", "must be 1..65535")
        _require(0 < self.ticket_timeout_ms < 1 << 32, own, "ticket_timeout_ms", "must be > 0")
        _require(self.retention_ms >= 0, own, "retention_ms", "must be >= 0")
        object.__setattr__(self, "counter_mode", CounterMode(self.counter_mode))
        object.__setattr__(self, "binding", Binding(self.binding))
        names: set[str] = set()
        ids: set[bytes] = set()
        for ini in self.initiators:
            _require(ini.name not in names, own, "initiators", f"duplicate name {ini.name!r}")
            _require(
                ini.initiator_id not in ids, own, "initiators",
                f"duplicate initiator_id for {ini.name!r}",
            )
            names.add(ini.name)
            ids.add(ini.initiator_id)
        ranges = sorted(self.initiators, key=lambda i: i.handle_base)
        for a, b in itertools.pairwise(ranges):
            _require(
                a.handle_base + a.handle_count <= b.handle_base, own, "initiators",
                f"handle ranges of {a.name!r} and {b.name!r} overlap",
            )
        if self.table_range is not None:
            lo, n = self.table_range
            _require(
                lo >= 0 and n > 0 and lo + n <= 1 << 64 and all(
                    lo <= i.handle_base and i.handle_base + i.handle_count <= lo + n
                    for i in self.initiators),
                own, "table_range", "must hold every initiator's handle range",
            )
        total = sum(i.quota for i in self.initiators)
        _require(total <= self.blocks, own, "initiators", f"sum of quotas {total} > blocks")
        domains = {i.trust_domain for i in self.initiators}
        for ini in self.initiators:
            if ini.features & Feature.DIRECT_LOAD:
                # DIRECT_LOAD exposes the whole table and pool: every block must be trusted.
                _require(
                    len(domains) == 1, own, f"initiators[{ini.name}].features",
                    "DIRECT_LOAD may be offered only when all initiators share a trust domain",
                )
        object.__setattr__(
            self,
            "partition_blocks",
            sum(i.quota for i in self.initiators if i.features & Feature.DIRECT_ALLOC),
        )

    @property
    def shared_ring_slots(self) -> int:
        return self.ring_slots if self.ring_slots is not None else ring_size(self.blocks)

    @property
    def shared_blocks(self) -> int:
        """F of the shared ring: the pool minus the DIRECT_ALLOC partitions."""
        return self.blocks - self.partition_blocks

    def block_offset(self, block_number: int) -> int:
        return block_number * self.block_size

    def initiator(self, initiator_id: bytes) -> InitiatorConfig | None:
        for ini in self.initiators:
            if ini.initiator_id == initiator_id:
                return ini
        return None
