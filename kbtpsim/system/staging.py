"""Registered buffers reused in a ring: staging for outgoing data and bounce buffers.

A software endpoint copies what it sends (a completion, a LOAD's data) into a registered
buffer and RDMA-reads non-inline store data into one. :class:`Staging` hands out pieces of
one registered region in ring order and takes them back when their work request completes,
so a long run touches a bounded number of host pages (the model's memory is sparse, but
pages once written stay). A piece still allocated where the ring comes round (a receive
buffer that stays posted) is skipped: the next free gap that fits is used.
"""

from __future__ import annotations

from bisect import bisect_left

from kbtpsim.nic import Access, MemoryRegion, Nic

ALIGN = 64


class StagingFull(RuntimeError):
    """More bytes are outstanding than the staging region holds."""


class Staging:
    """``size`` octets of ``nic``'s host memory, registered with ``access``."""

    def __init__(self, nic: Nic, size: int, access: Access = Access.LOCAL_WRITE) -> None:
        self.nic = nic
        self.size = size
        self.addr = nic.host.alloc(size, 4096)
        self.mr: MemoryRegion = nic.register_mr(self.addr, size, access)
        self._head = 0
        self._live: dict[int, int] = {}  # offset -> length, outstanding pieces
        self._offsets: list[int] = []  # their offsets, sorted
        #: freed pieces whose whole pages the next alloc releases (a caller may still
        #: read a piece it has just freed, so they are not released at once)
        self._dead: list[tuple[int, int]] = []

    @property
    def lkey(self) -> int:
        return self.mr.lkey

    def alloc(self, length: int) -> int:
        """An address of ``length`` free octets (length 0 gets a 1-octet piece): at the
        ring position if it is free, else in the first free gap after it, else in the
        first free gap from the start of the region (pieces that stay allocated for long,
        such as receive buffers, are skipped); :class:`StagingFull` if no gap fits."""
        if self._dead:
            discard = self.nic.host.memory.discard
            for addr, dead in self._dead:
                discard(addr, dead)
            self._dead.clear()
        n = max(ALIGN, -(-length // ALIGN) * ALIGN)
        if n > self.size:
            raise StagingFull(f"{length} octets exceed the staging region ({self.size})")
        head = self._head if self._head + n <= self.size else 0
        start = self._gap(head, n)
        if start is None and head:
            start = self._gap(0, n)
        if start is None:
            raise StagingFull(f"staging region of {self.size} octets is full "
                              f"({len(self._live)} pieces outstanding)")
        self._offsets.insert(bisect_left(self._offsets, start), start)
        self._live[start] = n
        self._head = start + n
        return self.addr + start

    def _gap(self, lo: int, n: int) -> int | None:
        """The offset of the first ``n`` free octets at or after ``lo``, or None."""
        offs, live = self._offsets, self._live
        i = bisect_left(offs, lo)
        start = lo
        if i and offs[i - 1] + live[offs[i - 1]] > start:
            start = offs[i - 1] + live[offs[i - 1]]
        for off in offs[i:]:
            if off - start >= n:
                return start
            start = max(start, off + live[off])
        return start if start + n <= self.size else None

    def free(self, addr: int) -> None:
        off = addr - self.addr
        n = self._live.pop(off, None)
        if n is not None:
            self._offsets.pop(bisect_left(self._offsets, off))
            self._dead.append((addr, n))  # its pages are released at the next alloc

    def put(self, data: bytes) -> int:
        """Copy ``data`` into a new piece; returns its address."""
        addr = self.alloc(len(data))
        if data:
            self.nic.host.memory.write(addr, data)
        return addr

    @property
    def outstanding(self) -> int:
        return len(self._live)
