"""The free-block ring (draft, "Free-Block Ring"), with lazy slots.

N = 2^n slots of {Sequence, Block Offset}; Head (allocate) and Tail (free) are 64-bit
counter words advanced only by :func:`kbtpsim.atomics.masked_fetch_add` (masked mode) or
:func:`kbtpsim.atomics.fetch_add` (unmasked InfiniBand mode). Slots never written since
initialisation are not stored: slot s holds {s, s-th block} for s < F and
{s - N mod 2^32, all ones} above, computed on demand, so a ring of 2^25 slots costs
memory only for the slots touched.

Allocation is two steps, so callers can interleave them as in the draft's example:
:meth:`FreeRing.take_ticket` (FetchAdd on Head) and :meth:`FreeRing.ready` (read the slot
and check its Sequence), then :meth:`FreeRing.consume`. :meth:`FreeRing.free` takes a
Tail ticket and writes the slot, or defers the write while the slot is unconsumed;
:meth:`FreeRing.consume` performs the deferred write and reports it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kbtpsim.atomics import (
    MASK32,
    RING_ADD_DATA,
    SLOT_SIZE,
    UNMASKED_ADD_DATA,
    fetch_add,
    initial_tail,
    masked_fetch_add,
    ring_add_mask,
    unmasked_counter,
    unmasked_slot_offset,
    unpack_counter,
)
from kbtpsim.target.config import CounterMode
from kbtpsim.wire.constants import CONSUMED
from kbtpsim.wire.structures import RingSlot


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a FetchAdd on a counter returned: the Ticket and its Slot Offset."""

    ticket: int
    slot_offset: int


@dataclass(frozen=True, slots=True)
class SlotWrite:
    """A free that wrote its slot: Tail ticket ``ticket`` now offers ``block_offset``."""

    ticket: int
    slot_offset: int
    block_offset: int


class FreeRing:
    """One ring over the blocks ``blocks`` (a range of Block Offsets, F = len(blocks))."""

    def __init__(
        self, name: str, n_slots: int, blocks: range, mode: CounterMode = CounterMode.MASKED
    ) -> None:
        if len(blocks) > n_slots:
            raise ValueError(f"ring {name}: {len(blocks)} blocks do not fit in {n_slots} slots")
        self.name = name
        self.n_slots = n_slots
        self.blocks = blocks
        self.mode = mode
        #: Add Mask of the masked counters (also checks N: a power of two >= 2, D9)
        self.add_mask = ring_add_mask(n_slots) if mode is CounterMode.MASKED else 0
        f = len(blocks)
        if mode is CounterMode.MASKED:
            self.head = 0  # Ticket 0, Slot Offset 0
            self.tail = initial_tail(f, n_slots)
        else:
            self.head = unmasked_counter(0)
            self.tail = unmasked_counter(f)
        self._slots: dict[int, tuple[int, int]] = {}  # slot index -> (sequence, block)
        self._deferred: dict[int, deque[tuple[int, int]]] = {}  # index -> [(ticket, block)]

    # --- counters -----------------------------------------------------------------

    def _advance(self, counter: int) -> tuple[Ticket, int]:
        """One FetchAdd on ``counter``: the returned Ticket and the new counter word."""
        if self.mode is CounterMode.MASKED:
            new = masked_fetch_add(counter, RING_ADD_DATA, self.add_mask)
            ticket, offset = unpack_counter(counter)
        else:
            new = fetch_add(counter, UNMASKED_ADD_DATA)
            ticket = counter >> 32
            offset = unmasked_slot_offset(ticket, self.n_slots)
        return Ticket(ticket, offset), new

    def take_ticket(self) -> Ticket:
        """FetchAdd on Head: the allocation's ticket and the offset of its slot."""
        got, self.head = self._advance(self.head)
        return got

    def slot_offset_of(self, ticket: int) -> int:
        return SLOT_SIZE * (ticket % self.n_slots)

    @property
    def head_ticket(self) -> int:
        return self.head >> 32

    @property
    def tail_ticket(self) -> int:
        return self.tail >> 32

    @property
    def available(self) -> int:
        """Blocks freed to the ring and not yet ticketed (Tail - Head, modulo 2^32)."""
        return (self.tail_ticket - self.head_ticket) & MASK32

    # --- slots --------------------------------------------------------------------

    def _index(self, slot_offset: int) -> int:
        if slot_offset % SLOT_SIZE or not 0 <= slot_offset < SLOT_SIZE * self.n_slots:
            raise ValueError(f"ring {self.name}: bad slot offset {slot_offset}")
        return slot_offset // SLOT_SIZE

    def _get(self, index: int) -> tuple[int, int]:
        got = self._slots.get(index)
        if got is not None:
            return got
        if index < len(self.blocks):
            return index, self.blocks[index]
        return (index - self.n_slots) & MASK32, CONSUMED

    def _put(self, index: int, sequence: int, block: int) -> None:
        self._slots[index] = (sequence, block)

    def slot(self, slot_offset: int) -> RingSlot:
        sequence, block = self._get(self._index(slot_offset))
        return RingSlot(sequence, block)

    def ready(self, ticket: Ticket) -> int | None:
        """The block for ``ticket`` if its slot holds it (Sequence matches, not consumed)."""
        sequence, block = self._get(self._index(ticket.slot_offset))
        if sequence != ticket.ticket or block == CONSUMED:
            return None
        return block

    def consume(self, slot_offset: int) -> list[SlotWrite]:
        """Mark the slot consumed, then perform a free deferred on it (if any)."""
        index = self._index(slot_offset)
        sequence, block = self._get(index)
        if block == CONSUMED:
            raise ValueError(f"ring {self.name}: slot {index} is already consumed")
        self._put(index, sequence, CONSUMED)
        waiting = self._deferred.get(index)
        if not waiting:
            return []
        ticket, block = waiting.popleft()
        if not waiting:
            del self._deferred[index]
        self._put(index, ticket, block)  # Block Offset first, then Sequence
        return [SlotWrite(ticket, slot_offset, block)]

    def free(self, block_offset: int, ticket: int | None = None) -> tuple[SlotWrite, bool]:
        """FetchAdd on Tail and write the slot; the bool is True if the write is deferred.
        ``ticket``: a Tail ticket already taken (Tail advanced by a FetchAdd through the
        NIC, decision C20), used instead of a FetchAdd here."""
        if block_offset not in self.blocks:
            raise ValueError(f"ring {self.name}: block 0x{block_offset:x} is not mine")
        if ticket is None:
            got, self.tail = self._advance(self.tail)
        else:
            if not 0 < (self.tail_ticket - ticket) & MASK32 <= self.n_slots:
                raise ValueError(f"ring {self.name}: Tail ticket {ticket} was not taken "
                                 f"(Tail is at ticket {self.tail_ticket})")
            got = Ticket(ticket, self.slot_offset_of(ticket))
        index = self._index(got.slot_offset)
        write = SlotWrite(got.ticket, got.slot_offset, block_offset)
        if self._get(index)[1] != CONSUMED or index in self._deferred:
            self._deferred.setdefault(index, deque()).append((got.ticket, block_offset))
            return write, True
        self._put(index, got.ticket, block_offset)
        return write, False

    # --- inspection (invariant, snapshots) ----------------------------------------

    def explicit_blocks(self) -> list[int]:
        """Blocks in slots written since initialisation."""
        return [b for _, b in self._slots.values() if b != CONSUMED]

    def lazy_initial_count(self) -> int:
        """Slots s < F still holding their initial block (never touched since init)."""
        f = len(self.blocks)
        return f - sum(1 for i in self._slots if i < f)

    def holds_initial(self, block_offset: int) -> bool:
        """True if ``block_offset`` is still in its untouched initial slot."""
        if block_offset not in self.blocks:
            return False
        return self.blocks.index(block_offset) not in self._slots

    def deferred_blocks(self) -> list[int]:
        return [b for q in self._deferred.values() for _, b in q]

    def snapshot(self) -> tuple[object, ...]:
        return (
            self.name,
            self.head,
            self.tail,
            tuple(sorted(self._slots.items())),
            tuple(sorted((i, tuple(q)) for i, q in self._deferred.items())),
        )
