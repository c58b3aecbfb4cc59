"""Sparse byte-addressable host memory.

Memory is a dict of 4 KiB pages, created on first write; unwritten bytes read as zero. The
cost of an access is proportional to the pages it touches, never to a region's size, so a
server can register a terabyte pool and touch a few blocks of it.

:meth:`SparseMemory.add_initializer` gives a range lazy initial contents: its octets never
written read as ``fill(addr, length)``, and a page materialises from the fill on its first
write (so a huge structure with non-zero initial contents costs only the pages touched).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable
from typing import Literal

#: Byte order of a multi-octet field.
ByteOrder = Literal["big", "little"]

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
_PAGE_MASK = PAGE_SIZE - 1
ADDR_LIMIT = 1 << 64

#: ``fill(addr, length)``: the initial contents of ``[addr, addr + length)``.
Fill = Callable[[int, int], bytes]


class SparseMemory:
    """A 64-bit address space of bytes, stored as 4 KiB pages of ``bytearray``."""

    __slots__ = ("_fills", "_init_ends", "_pages")

    def __init__(self) -> None:
        self._pages: dict[int, bytearray] = {}
        self._init_ends: list[int] = []  # sorted ends of the initialised ranges
        self._fills: dict[int, tuple[int, Fill]] = {}  # end -> (base, fill)

    def add_initializer(self, base: int, length: int, fill: Fill) -> None:
        """Octets of ``[base, base + length)`` never written read as ``fill(addr, n)``.

        Ranges must not overlap; pages already written keep their contents.
        """
        self._check(base, length)
        if not length:
            return
        end = base + length
        ends = self._init_ends
        i = bisect_right(ends, base)
        if i < len(ends) and self._fills[ends[i]][0] < end:
            raise ValueError(f"initializer [{base:#x}, {end:#x}) overlaps another")
        insort(ends, end)
        self._fills[end] = (base, fill)

    def _initial(self, addr: int, length: int) -> bytes:
        """Contents of never-written ``[addr, addr + length)``: fills where set, else zero."""
        ends = self._init_ends
        i = bisect_right(ends, addr)
        stop = addr + length
        if i == len(ends) or self._fills[ends[i]][0] >= stop:
            return bytes(length)
        buf = bytearray(length)
        while i < len(ends):
            base, fill = self._fills[ends[i]]
            lo = max(addr, base)
            if lo >= stop:
                break
            hi = min(stop, ends[i])
            chunk = fill(lo, hi - lo)
            if len(chunk) != hi - lo:
                raise ValueError(f"fill for {lo:#x} returned {len(chunk)} octets, not {hi - lo}")
            buf[lo - addr : hi - addr] = chunk
            i += 1
        return bytes(buf)

    @staticmethod
    def _check(addr: int, length: int) -> None:
        if addr < 0 or length < 0 or addr + length > ADDR_LIMIT:
            raise ValueError(f"access [{addr:#x}, +{length}) is outside the 64-bit space")

    def read(self, addr: int, length: int) -> bytes:
        """``length`` bytes from ``addr`` (zeros where nothing was written)."""
        self._check(addr, length)
        page, off = addr >> PAGE_SHIFT, addr & _PAGE_MASK
        if off + length <= PAGE_SIZE:  # fast path: one page
            data = self._pages.get(page)
            if data is not None:
                return bytes(data[off : off + length])
            return self._initial(addr, length) if self._init_ends else bytes(length)
        out = bytearray()
        pages = self._pages
        inits = bool(self._init_ends)
        while length:
            n = min(length, PAGE_SIZE - off)
            data = pages.get(page)
            if data is not None:
                out += data[off : off + n]
            else:
                out += self._initial((page << PAGE_SHIFT) + off, n) if inits else bytes(n)
            length -= n
            page += 1
            off = 0
        return bytes(out)

    def write(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` at ``addr``."""
        length = len(data)
        self._check(addr, length)
        page, off = addr >> PAGE_SHIFT, addr & _PAGE_MASK
        pages = self._pages
        pos = 0
        while pos < length:
            n = min(length - pos, PAGE_SIZE - off)
            buf = pages.get(page)
            if buf is None:
                buf = pages[page] = (bytearray(self._initial(page << PAGE_SHIFT, PAGE_SIZE))
                                     if self._init_ends else bytearray(PAGE_SIZE))
            buf[off : off + n] = data[pos : pos + n]
            pos += n
            page += 1
            off = 0

    def read_u64(self, addr: int, byteorder: ByteOrder = "little") -> int:
        return int.from_bytes(self.read(addr, 8), byteorder)

    def write_u64(self, addr: int, value: int, byteorder: ByteOrder = "little") -> None:
        self.write(addr, value.to_bytes(8, byteorder))

    @property
    def pages_touched(self) -> int:
        """Number of 4 KiB pages that have been written."""
        return len(self._pages)


class Host:
    """A host: a name, its sparse memory and a bump allocator for buffers.

    ``alloc`` is a convenience for tests and chains; nothing stops a caller from using any
    address directly.
    """

    __slots__ = ("_next", "memory", "name")

    def __init__(self, name: str, memory: SparseMemory | None = None,
                 heap_base: int = 0x1000_0000) -> None:
        self.name = name
        self.memory = memory if memory is not None else SparseMemory()
        self._next = heap_base

    def alloc(self, size: int, align: int = 64) -> int:
        """Reserve ``size`` bytes aligned to ``align`` (a power of two); return the address."""
        if size <= 0:
            raise ValueError(f"size must be positive, got {size!r}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"align must be a power of two, got {align!r}")
        addr = (self._next + align - 1) & ~(align - 1)
        self._next = addr + size
        return addr
