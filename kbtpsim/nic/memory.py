"""Host memory of the NIC model: a sparse 64-bit address space and a buffer allocator.

The memory itself is :class:`kbtpsim.sparse.SparseMemory` (4 KiB pages created on first
write, lazy initial contents); this module adds :class:`Host`, a name and a bump
allocator for buffers.
"""

from __future__ import annotations

from kbtpsim.sparse import PAGE_SIZE, ByteOrder, Fill, SparseMemory

__all__ = ["PAGE_SIZE", "ByteOrder", "Fill", "Host", "SparseMemory"]


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
