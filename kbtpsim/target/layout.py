"""Where a memory-backed target's structures live (draft, "Target Memory Structures").

A :class:`TargetLayout` gives host addresses: the block table (16-octet entries, handle
``table_base_handle`` first), each ring's slots (16 octets each) and its 8-aligned Head and
Tail counter words, and the pool (the block at Block Offset b is at ``pool_addr + b``).
:meth:`TargetLayout.plan` places them without overlap; a caller may also build a layout by
hand (for instance to match memory regions it registered elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from kbtpsim.atomics import SLOT_SIZE
from kbtpsim.target.config import TargetConfig, ring_size
from kbtpsim.wire.constants import TABLE_ENTRY_SIZE, Feature

ByteOrder = Literal["big", "little"]
ADDR_LIMIT = 1 << 64
COUNTER_SIZE = 8


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) & ~(align - 1)


def table_span(config: TargetConfig) -> tuple[int, int]:
    """(first handle, handle count) of the table: ``config.table_range``, else from the
    lowest initiator handle to the end of the highest range (empty without initiators)."""
    if config.table_range is not None:
        return config.table_range
    inits = config.initiators
    if not inits:
        return 0, 0
    base = min(i.handle_base for i in inits)
    end = max(i.handle_base + i.handle_count for i in inits)
    return base, end - base


def ring_plan(config: TargetConfig) -> list[tuple[str, int]]:
    """(name, N) of the target's rings: the shared ring, then one per DIRECT_ALLOC
    initiator in configuration order (the order of ``Target.rings``)."""
    rings = [("shared", config.shared_ring_slots)]
    for ini in config.initiators:
        if ini.features & Feature.DIRECT_ALLOC:
            rings.append((f"direct:{ini.name}", ring_size(ini.quota)))
    return rings


@dataclass(frozen=True)
class RingLayout:
    """One ring: ``n_slots`` 16-octet slots from ``slots_addr``; Head and Tail words."""

    name: str
    slots_addr: int
    n_slots: int
    head_addr: int
    tail_addr: int

    def slot_addr(self, slot_offset: int) -> int:
        """Host address of the slot at ``slot_offset`` (a multiple of 16)."""
        return self.slots_addr + slot_offset

    @property
    def slots_size(self) -> int:
        return SLOT_SIZE * self.n_slots


@dataclass(frozen=True)
class TargetLayout:
    """Host addresses of a target's table, rings, counters and pool."""

    table_addr: int  #: address of the entry of ``table_base_handle``
    table_base_handle: int
    table_count: int
    pool_addr: int  #: host address of Block Offset 0
    rings: tuple[RingLayout, ...]  #: shared ring first, then one per DIRECT_ALLOC initiator
    addr_le: bool
    counter_byte_order: ByteOrder  #: host byte order of Head/Tail (the NIC's atomic order)

    def __post_init__(self) -> None:
        if self.counter_byte_order not in ("big", "little"):
            raise ValueError(f"counter_byte_order must be 'big' or 'little', "
                             f"got {self.counter_byte_order!r}")
        for ring in self.rings:
            for name in ("head_addr", "tail_addr"):
                if getattr(ring, name) % COUNTER_SIZE:
                    raise ValueError(f"ring {ring.name}: {name} must be 8-aligned")

    def entry_addr(self, handle: int) -> int:
        """Host address of the table entry of ``handle``."""
        return self.table_addr + TABLE_ENTRY_SIZE * (handle - self.table_base_handle)

    def block_addr(self, block_offset: int) -> int:
        """Host address of the octet at Block Offset ``block_offset``."""
        return self.pool_addr + block_offset

    @property
    def table_size(self) -> int:
        return TABLE_ENTRY_SIZE * self.table_count

    def regions(self, config: TargetConfig) -> list[tuple[str, int, int]]:
        """(name, address, length) of every structure, for overlap checks and MRs."""
        start = config.first_block * config.block_size
        out = [("table", self.table_addr, self.table_size)]
        for ring in self.rings:
            out.append((f"{ring.name}.slots", ring.slots_addr, ring.slots_size))
            out.append((f"{ring.name}.head", ring.head_addr, COUNTER_SIZE))
            out.append((f"{ring.name}.tail", ring.tail_addr, COUNTER_SIZE))
        out.append(("pool", self.pool_addr + start, config.blocks * config.block_size))
        return out

    def check(self, config: TargetConfig) -> None:
        """Raise ``ValueError`` unless this layout fits ``config`` without overlaps."""
        base, count = table_span(config)
        if (self.table_base_handle, self.table_count) != (base, count):
            raise ValueError(f"layout table spans {self.table_count} handles from "
                             f"{self.table_base_handle:#x}; config needs {count} from {base:#x}")
        if self.addr_le != config.addr_le:
            raise ValueError("layout addr_le differs from the config's")
        want = ring_plan(config)
        got = [(r.name, r.n_slots) for r in self.rings]
        if got != want:
            raise ValueError(f"layout rings {got} do not match the config's {want}")
        spans = sorted((a, a + n, name) for name, a, n in self.regions(config) if n)
        for name, addr, length in self.regions(config):
            if addr < 0 or addr + length > ADDR_LIMIT:
                raise ValueError(f"{name} [{addr:#x}, +{length}) is outside the 64-bit space")
        for (_, end, a), (start, _, b) in pairwise(spans):
            if start < end:
                raise ValueError(f"{a} and {b} overlap")

    @classmethod
    def plan(cls, config: TargetConfig, base_addr: int = 0x1000_0000, *,
             counter_byte_order: ByteOrder = "little", align: int = 4096) -> TargetLayout:
        """Place the table, each ring's slots with its Head and Tail, and the pool, in that
        order from ``base_addr``, each structure starting on an ``align`` boundary (the
        pool: ``pool_addr`` is aligned, so a block's address is aligned as its offset is)."""
        if align < COUNTER_SIZE or align & (align - 1):
            raise ValueError(f"align must be a power of two >= 8, got {align!r}")
        if base_addr < 0:
            raise ValueError(f"base_addr must be >= 0, got {base_addr!r}")
        cursor = _align_up(base_addr, align)
        handle_base, count = table_span(config)
        table_addr = cursor
        cursor = _align_up(cursor + TABLE_ENTRY_SIZE * count, align)
        rings = []
        for name, n_slots in ring_plan(config):
            slots_addr = cursor
            head = _align_up(slots_addr + SLOT_SIZE * n_slots, COUNTER_SIZE)
            rings.append(RingLayout(name, slots_addr, n_slots, head, head + COUNTER_SIZE))
            cursor = _align_up(head + 2 * COUNTER_SIZE, align)
        start = config.first_block * config.block_size
        pool_addr = _align_up(max(0, cursor - start), align)
        layout = cls(table_addr, handle_base, count, pool_addr, tuple(rings), config.addr_le,
                     counter_byte_order)
        layout.check(config)
        return layout
