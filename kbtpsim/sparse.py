"""Sparse byte-addressable memory with lazy initial contents.

A 64-bit address space stored as 4 KiB pages created on first write, so the cost of an
access is proportional to the pages it touches, never to a region's size: a server can
register a terabyte pool and touch a few blocks of it. ``add_initializer(base, length,
fill)`` gives a range lazy initial contents (octets never written read as
``fill(addr, n)``; a page materialises from the fill on its first write), so a 2^25-slot
ring or a huge table with non-zero initial contents costs only the pages touched.

Foundation-level: it knows nothing of KBTP or of NICs. The NIC model's host memory
(:mod:`kbtpsim.nic.memory`) and the memory-backed software target
(:mod:`kbtpsim.target.bytestore`) both use it, which keeps their dependencies one-way.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Iterator
from typing import Literal

#: Byte order of a multi-octet field.
ByteOrder = Literal["big", "little"]

#: ``fill(addr, length)``: the initial contents of ``[addr, addr + length)``.
Fill = Callable[[int, int], bytes]

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
_PAGE_MASK = PAGE_SIZE - 1
ADDR_LIMIT = 1 << 64


class Initializers:
    """Non-overlapping ranges with fill functions, found by bisection."""

    __slots__ = ("_bases", "_ends", "_fills")

    def __init__(self) -> None:
        self._ends: list[int] = []
        self._bases: dict[int, int] = {}  # end -> base
        self._fills: dict[int, Fill] = {}  # end -> fill

    def __bool__(self) -> bool:
        return bool(self._ends)

    def add(self, base: int, length: int, fill: Fill) -> None:
        if base < 0 or length < 0 or base + length > ADDR_LIMIT:
            raise ValueError(f"initializer [{base:#x}, +{length}) is outside the 64-bit space")
        if not length:
            return
        end = base + length
        i = bisect_right(self._ends, base)
        if i < len(self._ends) and self._bases[self._ends[i]] < end:
            other = self._ends[i]
            raise ValueError(
                f"initializer [{base:#x}, {end:#x}) overlaps "
                f"[{self._bases[other]:#x}, {other:#x})"
            )
        insort(self._ends, end)
        self._bases[end] = base
        self._fills[end] = fill

    def initial(self, addr: int, length: int) -> bytes:
        """Initial contents of ``[addr, addr + length)``: fills where covered, else zeros."""
        ends = self._ends
        i = bisect_right(ends, addr)
        stop = addr + length
        if i == len(ends) or self._bases[ends[i]] >= stop:
            return bytes(length)
        buf = bytearray(length)
        while i < len(ends):
            end = ends[i]
            lo = max(addr, self._bases[end])
            if lo >= stop:
                break
            hi = min(stop, end)
            chunk = self._fills[end](lo, hi - lo)
            if len(chunk) != hi - lo:
                raise ValueError(f"fill for {lo:#x} returned {len(chunk)} octets, not {hi - lo}")
            buf[lo - addr : hi - addr] = chunk
            i += 1
        return bytes(buf)


class SparseMemory:
    """A 64-bit address space of 4 KiB pages, created on first write.

    Unwritten octets read as their initializer's fill, or zero. A page materialises from
    its initial contents on its first write.

    Pages are stored once: a write of immutable octets (``bytes``, or a read-only
    ``memoryview`` of ``bytes``) keeps the pages it covers whole as views of those octets
    instead of copying them, and :meth:`view` reads a range lying in such pages without a
    copy. A page shared this way is copied into a private ``bytearray`` on its first
    partial write (copy on write), so a view taken earlier keeps its snapshot.
    """

    __slots__ = ("_inits", "_pages")

    def __init__(self) -> None:
        #: page number -> its octets: a private bytearray, or ``(segment, offset)``, a
        #: shared page (octets ``segment[offset : offset + PAGE_SIZE]`` of an immutable
        #: written segment)
        self._pages: dict[int, bytearray | tuple[memoryview, int]] = {}
        self._inits = Initializers()

    @staticmethod
    def _check(addr: int, length: int) -> None:
        if addr < 0 or length < 0 or addr + length > ADDR_LIMIT:
            raise ValueError(f"access [{addr:#x}, +{length}) is outside the 64-bit space")

    def add_initializer(self, base: int, length: int, fill: Fill) -> None:
        """Octets of ``[base, base + length)`` never written read as ``fill(addr, n)``.

        Pages already written keep their contents.
        """
        self._inits.add(base, length, fill)

    def read(self, addr: int, length: int) -> bytes:
        if addr < 0 or length < 0 or addr + length > ADDR_LIMIT:
            self._check(addr, length)
        page, off = addr >> PAGE_SHIFT, addr & _PAGE_MASK
        pages = self._pages
        if off + length <= PAGE_SIZE:  # fast path: one page
            data = pages.get(page)
            if data is None:
                return self._inits.initial(addr, length) if self._inits else bytes(length)
            if data.__class__ is bytearray:
                return bytes(data[off : off + length])
            seg, at = data  # type: ignore[misc]
            return bytes(seg[at + off : at + off + length])
        parts: list[bytes | bytearray | memoryview] = []  # views: one copy, by the join
        pos = 0
        inits = self._inits
        while pos < length:
            n = min(length - pos, PAGE_SIZE - off)
            data = pages.get(page)
            if data is None:
                parts.append(inits.initial((page << PAGE_SHIFT) + off, n) if inits
                             else bytes(n))
            elif data.__class__ is bytearray:
                parts.append(memoryview(data)[off : off + n])  # type: ignore[arg-type]
            else:
                seg, at = data  # type: ignore[misc]
                parts.append(seg[at + off : at + off + n])
            pos += n
            page += 1
            off = 0
        return b"".join(parts)

    def view(self, addr: int, length: int) -> bytes | memoryview:
        """The octets of ``[addr, addr + length)`` as :meth:`read` returns them, without a
        copy (a read-only view) when they lie in pages shared from one write; a snapshot
        either way: later writes do not change it."""
        page, off = addr >> PAGE_SHIFT, addr & _PAGE_MASK
        pages = self._pages
        data = pages.get(page)
        if data is not None and data.__class__ is tuple and length:
            seg, at = data  # type: ignore[misc]
            start = at + off
            stop = start + length
            last = (off + length - 1) >> PAGE_SHIFT
            k = 1
            while k <= last:
                nxt = pages.get(page + k)
                if nxt is None or nxt.__class__ is not tuple or nxt[0] is not seg or \
                        nxt[1] != at + (k << PAGE_SHIFT):  # type: ignore[index]
                    break
                k += 1
            else:
                return seg[start:stop]
        return self.read(addr, length)

    def _private(self, page: int) -> bytearray:
        """Page ``page`` as a private, writable bytearray (materialised from its initial
        contents, or copied from the segment it shares)."""
        pages = self._pages
        buf = pages.get(page)
        if buf is None:
            new = pages[page] = bytearray(self._inits.initial(page << PAGE_SHIFT, PAGE_SIZE))
            return new
        if buf.__class__ is bytearray:
            return buf  # type: ignore[return-value]
        seg, at = buf  # type: ignore[misc]
        new = pages[page] = bytearray(seg[at : at + PAGE_SIZE])
        return new

    def write(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        length = len(data)
        if addr < 0 or addr + length > ADDR_LIMIT:
            self._check(addr, length)
        page, off = addr >> PAGE_SHIFT, addr & _PAGE_MASK
        pages = self._pages
        if off + length < PAGE_SIZE or (off and off + length == PAGE_SIZE):
            # fast path: part of one page
            buf = pages.get(page)
            if buf is None or buf.__class__ is not bytearray:
                buf = self._private(page)
            buf[off : off + length] = data  # type: ignore[index]
            return
        # whole pages are shared when the octets are immutable, else copied
        src = data if data.__class__ is memoryview else memoryview(data)
        shared = data.__class__ is bytes or (
            data.__class__ is memoryview and src.readonly  # type: ignore[union-attr]
            and src.obj.__class__ is bytes and src.c_contiguous and src.itemsize == 1)
        pos = 0
        while pos < length:
            n = min(length - pos, PAGE_SIZE - off)
            if n == PAGE_SIZE:
                pages[page] = (src, pos) if shared else bytearray(src[pos : pos + n])
            else:
                buf = pages.get(page)
                if buf is None or buf.__class__ is not bytearray:
                    buf = self._private(page)
                buf[off : off + n] = src[pos : pos + n]  # type: ignore[index]
            pos += n
            page += 1
            off = 0

    def discard(self, addr: int, length: int) -> int:
        """Release the pages lying wholly inside ``[addr, addr + length)`` (a freed
        buffer): they read as their initial contents again and cost no memory. Pages the
        range only partly covers are kept. Returns the number of pages released."""
        self._check(addr, length)
        first = (addr + _PAGE_MASK) >> PAGE_SHIFT
        stop = (addr + length) >> PAGE_SHIFT
        pages = self._pages
        released = 0
        for page in range(first, stop):
            if pages.pop(page, None) is not None:
                released += 1
        return released

    def written_pages(self, base: int, length: int) -> Iterator[int]:
        """Addresses of the written pages that overlap ``[base, base + length)``, sorted."""
        first, last = base >> PAGE_SHIFT, (base + length - 1) >> PAGE_SHIFT
        if length <= 0:
            return iter(())
        if last - first + 1 <= len(self._pages):
            found = [p for p in range(first, last + 1) if p in self._pages]
        else:
            found = sorted(p for p in self._pages if first <= p <= last)
        return (p << PAGE_SHIFT for p in found)

    def read_u64(self, addr: int, byteorder: ByteOrder = "little") -> int:
        return int.from_bytes(self.read(addr, 8), byteorder)

    def write_u64(self, addr: int, value: int, byteorder: ByteOrder = "little") -> None:
        self.write(addr, value.to_bytes(8, byteorder))

    @property
    def pages_touched(self) -> int:
        """Number of 4 KiB pages that have been written."""
        return len(self._pages)
