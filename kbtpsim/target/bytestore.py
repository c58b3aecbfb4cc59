"""Byte-addressable memory behind a memory-backed target (docs/decisions.md, T14).

:class:`ByteStore` is what a memory-backed :class:`~kbtpsim.target.processor.Target` needs
from memory: read, write, and lazy initial contents. :class:`kbtpsim.sparse.SparseMemory`
satisfies it structurally, so the target can live in a NIC host's memory; the target never
imports :mod:`kbtpsim.nic` (dependencies point one way), and :class:`SparseBytes` is its own
implementation for use without a NIC.

Lazy initialisation: ``add_initializer(base, length, fill)`` says that octets of
``[base, base + length)`` never written read as ``fill(addr, n)`` (the ``n`` octets from
``addr``), so a 2^25-slot ring or a huge table costs memory only for the pages touched.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kbtpsim.sparse import PAGE_SIZE, Fill, SparseMemory

__all__ = ["PAGE_SIZE", "ByteStore", "Fill", "SparseBytes"]


@runtime_checkable
class ByteStore(Protocol):
    """Byte-addressable memory with lazy initial contents."""

    def read(self, addr: int, length: int) -> bytes: ...

    def write(self, addr: int, data: bytes) -> None: ...

    def add_initializer(self, base: int, length: int, fill: Fill) -> None: ...


#: The target's own store for use without a NIC: the same sparse memory the NIC uses.
SparseBytes = SparseMemory
