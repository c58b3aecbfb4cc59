"""Allocators of the baseline targets: a first-fit range allocator over the pool.

:class:`RangeAllocator` hands out contiguous ranges of a byte pool, each rounded up to a
multiple of ``granularity``; freed ranges are coalesced with their neighbours. It is the
target CPU's allocator of the one-sided dynamic and two-sided baselines, and (with a
granularity of one block) the static regions' carving of the pool.
"""

from __future__ import annotations

from bisect import bisect_left


class RangeAllocator:
    """First fit over ``size`` octets; every range is a multiple of ``granularity``."""

    def __init__(self, size: int, granularity: int = 1) -> None:
        if size <= 0 or granularity <= 0:
            raise ValueError("size and granularity must be positive")
        self.size = size
        self.granularity = granularity
        self._free: list[tuple[int, int]] = [(0, size)]  #: sorted, coalesced (offset, length)
        self.live: dict[int, int] = {}  #: offset -> rounded length
        self.allocated = 0  #: octets in live ranges (rounded)

    def rounded(self, length: int) -> int:
        g = self.granularity
        return max(g, -(-length // g) * g)

    def alloc(self, length: int) -> int | None:
        """The offset of a new range of ``length`` octets (rounded up), or None if no free
        range is large enough (the pool is full or fragmented)."""
        n = self.rounded(length)
        for i, (off, free) in enumerate(self._free):
            if free >= n:
                if free == n:
                    del self._free[i]
                else:
                    self._free[i] = (off + n, free - n)
                self.live[off] = n
                self.allocated += n
                return off
        return None

    def release(self, offset: int) -> int:
        """Free the range at ``offset``; returns its (rounded) length."""
        n = self.live.pop(offset)
        self.allocated -= n
        i = bisect_left(self._free, (offset, 0))
        start, end = offset, offset + n
        if i < len(self._free) and self._free[i][0] == end:
            end += self._free[i][1]
            del self._free[i]
        if i and self._free[i - 1][0] + self._free[i - 1][1] == start:
            start = self._free[i - 1][0]
            del self._free[i - 1]
            i -= 1
        self._free.insert(i, (start, end - start))
        return n

    @property
    def largest_free(self) -> int:
        return max((n for _, n in self._free), default=0)


__all__ = ["RangeAllocator"]
