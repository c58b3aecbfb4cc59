"""The block table (draft, "Block Table"), sparse: only entries ever written are stored.

A never-bound entry is ``TableEntry(generation=1)`` (decision D1). Generations advance by
one on every bind and unbind, skipping zero.
"""

from __future__ import annotations

from collections.abc import Iterator

from kbtpsim.wire.constants import EntryFlag
from kbtpsim.wire.structures import TableEntry

#: The entry of a handle that was never bound (decision D1).
NEVER_BOUND = TableEntry(generation=1)


def next_generation(generation: int) -> int:
    """The Generation after ``generation``: +1, wrapping 0xFFFF to 1 (never 0)."""
    return generation % 0xFFFF + 1


class BlockTable:
    """Entries keyed by handle; the table spans ``base`` .. ``base + count - 1``."""

    __slots__ = ("_entries", "base", "count")

    def __init__(self, base: int, count: int) -> None:
        self.base = base
        self.count = count
        self._entries: dict[int, TableEntry] = {}

    def __contains__(self, handle: int) -> bool:
        return self.base <= handle < self.base + self.count

    def get(self, handle: int) -> TableEntry:
        return self._entries.get(handle, NEVER_BOUND)

    def _put(self, handle: int, entry: TableEntry) -> None:
        self._entries[handle] = entry

    def bind(self, handle: int, block_offset: int, data_length: int, sealed: bool) -> TableEntry:
        """Write Data Length and Block Offset, then VALID [| SEALED] and the next Generation."""
        old = self.get(handle)
        flags = EntryFlag.VALID | (EntryFlag.SEALED if sealed else EntryFlag(0))
        entry = TableEntry(flags, next_generation(old.generation), data_length, block_offset)
        self._put(handle, entry)
        return entry

    def update(self, handle: int, data_length: int, seal: bool) -> TableEntry:
        """A mapped store: new Data Length, SEALED added if ``seal``; Generation unchanged."""
        old = self.get(handle)
        flags = old.flags | (EntryFlag.SEALED if seal else EntryFlag(0))
        entry = TableEntry(flags, old.generation, data_length, old.block_offset)
        self._put(handle, entry)
        return entry

    def unbind(self, handle: int) -> TableEntry:
        """Clear VALID and SEALED and advance the Generation (draft, "Block Free" step 2).

        Data Length and Block Offset are left as they were: the draft changes only the
        flags and the Generation.
        """
        old = self.get(handle)
        entry = TableEntry(
            EntryFlag(0), next_generation(old.generation), old.data_length, old.block_offset
        )
        self._put(handle, entry)
        return entry

    def items(self) -> Iterator[tuple[int, TableEntry]]:
        return iter(sorted(self._entries.items()))

    def encode_entry(self, handle: int, addr_le: bool) -> bytes:
        return self.get(handle).encode(addr_le)
