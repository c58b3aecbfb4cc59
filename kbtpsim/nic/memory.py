"""Sparse byte-addressable host memory.

Memory is a dict of 4 KiB pages, created on first write; unwritten bytes read as zero. The
cost of an access is proportional to the pages it touches, never to a region's size, so a
server can register a terabyte pool and touch a few blocks of it.
"""

from __future__ import annotations

from typing import Literal

#: Byte order of a multi-octet field.
ByteOrder = Literal["big", "little"]

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
_PAGE_MASK = PAGE_SIZE - 1
ADDR_LIMIT = 1 << 64


class SparseMemory:
    """A 64-bit address space of bytes, stored as 4 KiB pages of ``bytearray``."""

    __slots__ = ("_pages",)

    def __init__(self) -> None:
        self._pages: dict[int, bytearray] = {}

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
            return bytes(length) if data is None else bytes(data[off : off + length])
        out = bytearray()
        pages = self._pages
        while length:
            n = min(length, PAGE_SIZE - off)
            data = pages.get(page)
            out += bytes(n) if data is None else data[off : off + n]
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
                buf = pages[page] = bytearray(PAGE_SIZE)
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
