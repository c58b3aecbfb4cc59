"""Memory-backed storage of the target (docs/decisions.md, T14).

:class:`MemPool`, :class:`MemBlockTable` and :class:`MemFreeRing` have the interfaces of
:class:`~kbtpsim.target.pool.Pool`, :class:`~kbtpsim.target.table.BlockTable` and
:class:`~kbtpsim.target.ring.FreeRing` (they subclass them), but keep table entries, ring
slots, Head/Tail counters and block octets only as bytes in a
:class:`~kbtpsim.target.bytestore.ByteStore`, at the addresses of a
:class:`~kbtpsim.target.layout.TargetLayout`. Every read decodes the bytes, so a change made
by someone else (a NIC work-request chain, an initiator's one-sided access) is seen.

Initial contents are lazy: the table and each ring register ``add_initializer`` fills that
compute a never-bound entry (``TableEntry(generation=1)``, decision D1) and a ring slot's
initial contents (slot s < F: {s, s-th block}; F <= s < N: {s - N mod 2^32, all ones}) for
any address range, so nothing is written up front except the Head and Tail words.

What stays in Python is bookkeeping that is no draft structure: deferred frees, which
handles and blocks the target itself wrote (to enumerate them for snapshots and stats;
with :class:`~kbtpsim.target.bytestore.SparseBytes` written pages are enumerated as well).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from kbtpsim.atomics import MASK32, SLOT_SIZE, initial_tail, unmasked_counter
from kbtpsim.target.bytestore import PAGE_SIZE, ByteStore, Fill
from kbtpsim.target.config import CounterMode
from kbtpsim.target.layout import RingLayout, TargetLayout
from kbtpsim.target.pool import Pool
from kbtpsim.target.ring import FreeRing
from kbtpsim.target.table import NEVER_BOUND, BlockTable
from kbtpsim.wire.constants import CONSUMED, TABLE_ENTRY_SIZE
from kbtpsim.wire.structures import ByteOrder, RingSlot, TableEntry, addr_order

_ZERO_PAGE = bytes(PAGE_SIZE)


def _written_pages(store: ByteStore, base: int, length: int) -> Iterator[int]:
    """Written pages of ``[base, base + length)`` if the store can say (SparseBytes)."""
    pages = getattr(store, "written_pages", None)
    if pages is None or length <= 0:
        return iter(())
    return iter(pages(base, length))


def repeat_fill(origin: int, pattern: bytes) -> Fill:
    """A fill function repeating ``pattern`` from address ``origin``."""
    size = len(pattern)

    def fill(addr: int, length: int) -> bytes:
        phase = (addr - origin) % size
        reps = (phase + length) // size + 1
        return (pattern * reps)[phase : phase + length]

    return fill


class MemPool(Pool):
    """The pool's blocks as octets at ``layout.block_addr(block_offset)``.

    Unwritten octets are zero (the pool has no initializer). Which blocks the target wrote,
    and how far, is kept for stats and snapshots only.
    """

    __slots__ = ("_extent", "_layout", "_store")

    def __init__(self, store: ByteStore, layout: TargetLayout, first_block: int, blocks: int,
                 block_size: int) -> None:
        super().__init__(first_block, blocks, block_size)
        self._store = store
        self._layout = layout
        self._extent: dict[int, int] = {}  # block -> end of the highest octet written

    def write(self, block_offset: int, data: bytes, start: int = 0) -> None:
        self._check(block_offset, start, len(data))
        if not data:
            return
        self._store.write(self._layout.block_addr(block_offset) + start, bytes(data))
        end = start + len(data)
        if self._extent.get(block_offset, 0) < end:
            self._extent[block_offset] = end

    def read(self, block_offset: int, length: int, start: int = 0) -> bytes:
        self._check(block_offset, start, length)
        return self._store.read(self._layout.block_addr(block_offset) + start, length)

    def clear(self, block_offset: int) -> None:
        """Zero a block: write zeros over its non-zero pages (untouched pages stay so)."""
        self._check(block_offset, 0, 0)
        addr = self._layout.block_addr(block_offset)
        end = addr + self.block_size
        store = self._store
        while addr < end:
            n = min(end, (addr // PAGE_SIZE + 1) * PAGE_SIZE) - addr
            if store.read(addr, n) != _ZERO_PAGE[:n]:
                store.write(addr, _ZERO_PAGE[:n])
            addr += n
        self._extent.pop(block_offset, None)

    @property
    def materialized_blocks(self) -> int:
        return len(self._extent)

    @property
    def materialized_bytes(self) -> int:
        return sum(self._extent.values())

    def _candidates(self) -> set[int]:
        """Blocks that may be non-zero: written by the target, or on a written page."""
        found = set(self._extent)
        bs = self.block_size
        start, stop = self.offsets.start, self.offsets.stop
        base = self._layout.block_addr(start)
        for page in _written_pages(self._store, base, stop - start):
            lo = max(start, page - self._layout.pool_addr)
            hi = min(stop, page + PAGE_SIZE - self._layout.pool_addr)
            first = start + (lo - start) // bs * bs
            found.update(range(first, hi, bs))
        return found

    def digest(self) -> str:
        """The same hash as :meth:`Pool.digest` over the bytes in the store."""
        h = hashlib.sha256()
        for offset in sorted(self._candidates()):
            block = self.read(offset, self.block_size).rstrip(b"\0")
            if block:
                h.update(offset.to_bytes(8, "big") + len(block).to_bytes(4, "big") + block)
        return h.hexdigest()


class TableMeter:
    """The table entries a CPU read and wrote, distinct handles, since the last
    :meth:`take` (decision C29: a table in NIC device memory costs the CPU an MMIO access
    per entry). Accesses made while :attr:`paused` (invariant checks, snapshots, the
    simulator's own look-ups) are not counted."""

    __slots__ = ("paused", "reads", "writes")

    def __init__(self) -> None:
        self.reads: set[int] = set()
        self.writes: set[int] = set()
        self.paused = False

    def take(self) -> tuple[int, int]:
        """(entries read, entries written) since the last call; starts over."""
        out = (len(self.reads), len(self.writes))
        self.reads.clear()
        self.writes.clear()
        return out


class MemBlockTable(BlockTable):
    """Table entries as 16 octets at ``layout.entry_addr(handle)``. With a
    :attr:`meter`, each entry :meth:`get` reads and :meth:`_put` writes is counted."""

    __slots__ = ("_layout", "_store", "_written", "meter")

    def __init__(self, store: ByteStore, layout: TargetLayout) -> None:
        super().__init__(layout.table_base_handle, layout.table_count)
        self._store = store
        self._layout = layout
        self._written: set[int] = set()  # handles the target wrote (for items())
        self.meter: TableMeter | None = None
        if layout.table_count:
            store.add_initializer(layout.table_addr, layout.table_size,
                                  repeat_fill(layout.table_addr,
                                              NEVER_BOUND.encode(layout.addr_le)))

    def get(self, handle: int) -> TableEntry:
        if handle not in self:
            return NEVER_BOUND
        meter = self.meter
        if meter is not None and not meter.paused:
            meter.reads.add(handle)
        return self._decode(handle)

    def _decode(self, handle: int) -> TableEntry:
        raw = self._store.read(self._layout.entry_addr(handle), TABLE_ENTRY_SIZE)
        return TableEntry.decode(raw, self._layout.addr_le)

    def _put(self, handle: int, entry: TableEntry) -> None:
        if handle not in self:
            raise ValueError(f"handle 0x{handle:x} is outside the table")
        meter = self.meter
        if meter is not None and not meter.paused:
            meter.writes.add(handle)
        self._store.write(self._layout.entry_addr(handle), entry.encode(self._layout.addr_le))
        self._written.add(handle)

    def items(self) -> Iterator[tuple[int, TableEntry]]:
        """Entries the target wrote, and entries on written pages that are not never-bound."""
        candidates = set(self._written)
        layout = self._layout
        blank = NEVER_BOUND.encode(layout.addr_le)
        size = TABLE_ENTRY_SIZE
        for page in _written_pages(self._store, layout.table_addr, layout.table_size):
            first = max(0, page - layout.table_addr) // size
            last = min(self.count, -(-(page + PAGE_SIZE - layout.table_addr) // size))
            raw = self._store.read(layout.entry_addr(self.base + first), size * (last - first))
            candidates.update(self.base + first + i for i in range(last - first)
                              if raw[size * i : size * i + size] != blank)
        return iter([(handle, self._decode(handle)) for handle in sorted(candidates)])

    def encode_entry(self, handle: int, addr_le: bool) -> bytes:
        if handle in self and addr_le == self._layout.addr_le:
            return self._store.read(self._layout.entry_addr(handle), TABLE_ENTRY_SIZE)
        return super().encode_entry(handle, addr_le)


class MemFreeRing(FreeRing):
    """Ring slots at ``layout.slot_addr(offset)``; Head and Tail as 8-octet words.

    ``head`` and ``tail`` read and write the counter words, so :meth:`take_ticket` and
    :meth:`free` are read-modify-writes of those bytes with ``masked_fetch_add`` (or
    ``fetch_add`` in unmasked mode).
    """

    def __init__(self, store: ByteStore, layout: RingLayout, blocks: range,
                 mode: CounterMode = CounterMode.MASKED, *, addr_le: bool = False,
                 counter_byte_order: ByteOrder = "little") -> None:
        self._store = store
        self._layout = layout
        self._addr_le = addr_le
        self._order = addr_order(addr_le)
        if counter_byte_order not in ("big", "little"):
            raise ValueError(f"bad counter byte order {counter_byte_order!r}")
        self._counter_order: ByteOrder = counter_byte_order
        self.blocks = blocks
        self.n_slots = layout.n_slots
        if len(blocks) > layout.n_slots:
            raise ValueError(f"ring {layout.name}: {len(blocks)} blocks do not fit in "
                             f"{layout.n_slots} slots")
        # Everything is lazy, counters included: nothing is written up front, and every
        # initializer is in place before this ring writes anything.
        if mode is CounterMode.MASKED:
            head, tail = 0, initial_tail(len(blocks), layout.n_slots)
        else:
            head, tail = unmasked_counter(0), unmasked_counter(len(blocks))
        store.add_initializer(layout.slots_addr, layout.slots_size, self._fill)
        for addr, value in ((layout.head_addr, head), (layout.tail_addr, tail)):
            word = value.to_bytes(8, counter_byte_order)
            store.add_initializer(addr, 8, repeat_fill(addr, word))
        self._booting = True  # FreeRing.__init__ sets head and tail: already initial
        super().__init__(layout.name, layout.n_slots, blocks, mode)
        self._booting = False

    # --- counters: 8 octets in host byte order ------------------------------------

    def _read_counter(self, addr: int) -> int:
        return int.from_bytes(self._store.read(addr, 8), self._counter_order)

    def _write_counter(self, addr: int, value: int) -> None:
        if self._booting:
            assert value == self._read_counter(addr), "initial counter mismatch"
            return
        self._store.write(addr, value.to_bytes(8, self._counter_order))

    @property
    def head(self) -> int:
        return self._read_counter(self._layout.head_addr)

    @head.setter
    def head(self, value: int) -> None:
        self._write_counter(self._layout.head_addr, value)

    @property
    def tail(self) -> int:
        return self._read_counter(self._layout.tail_addr)

    @tail.setter
    def tail(self, value: int) -> None:
        self._write_counter(self._layout.tail_addr, value)

    # --- slots --------------------------------------------------------------------

    def _initial(self, index: int) -> tuple[int, int]:
        if index < len(self.blocks):
            return index, self.blocks[index]
        return (index - self.n_slots) & MASK32, CONSUMED

    def _initial_bytes(self, index: int) -> bytes:
        sequence, block = self._initial(index)
        return sequence.to_bytes(4, "big") + bytes(4) + block.to_bytes(8, self._order)

    def _fill(self, addr: int, length: int) -> bytes:
        rel = addr - self._layout.slots_addr
        first, last = rel // SLOT_SIZE, (rel + length - 1) // SLOT_SIZE
        blob = b"".join(self._initial_bytes(i) for i in range(first, last + 1))
        skip = rel - first * SLOT_SIZE
        return blob[skip : skip + length]

    def _get(self, index: int) -> tuple[int, int]:
        raw = self._store.read(self._layout.slots_addr + SLOT_SIZE * index, SLOT_SIZE)
        slot = RingSlot.decode(raw, self._addr_le)
        return slot.sequence, slot.block_offset

    def _put(self, index: int, sequence: int, block: int) -> None:
        """Write Block Offset first, then Sequence (the Reserved octets are untouched)."""
        addr = self._layout.slots_addr + SLOT_SIZE * index
        self._store.write(addr + 8, block.to_bytes(8, self._order))
        self._store.write(addr, sequence.to_bytes(4, "big"))

    def _maybe_touched(self) -> range | set[int]:
        """Slot indices that may differ from their initial contents: consumption happens
        only at Head tickets, writes only at Tail tickets from F on (draft, rules)."""
        n, f = self.n_slots, len(self.blocks)
        head, tail = self.head_ticket, self.tail_ticket
        if head >= n or tail < f or tail - f >= n:
            return range(n)
        found = set(range(head))
        found.update(t % n for t in range(f, tail))
        return found

    def _touched(self) -> list[tuple[int, tuple[int, int]]]:
        """(index, (sequence, block)) of the slots not holding their initial contents."""
        out = []
        for index in sorted(self._maybe_touched()):
            got = self._get(index)
            if got != self._initial(index):
                out.append((index, got))
        return out

    # --- inspection ---------------------------------------------------------------

    def explicit_blocks(self) -> list[int]:
        return [b for _, (_, b) in self._touched() if b != CONSUMED]

    def lazy_initial_count(self) -> int:
        f = len(self.blocks)
        return f - sum(1 for i, _ in self._touched() if i < f)

    def holds_initial(self, block_offset: int) -> bool:
        if block_offset not in self.blocks:
            return False
        index = self.blocks.index(block_offset)
        return self._get(index) == self._initial(index)

    def snapshot(self) -> tuple[object, ...]:
        return (
            self.name,
            self.head,
            self.tail,
            tuple(self._touched()),
            tuple(sorted((i, tuple(q)) for i, q in self._deferred.items())),
        )
