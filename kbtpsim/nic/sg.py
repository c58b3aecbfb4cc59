"""Gather and scatter over a message's pieces: ``(addr, len)`` lists of host memory that a
work request's SGEs (or a receive WQE's scatter list) translate to."""

from __future__ import annotations

from kbtpsim.nic.memory import SparseMemory


def gather(mem: SparseMemory, pieces: list[tuple[int, int]], offset: int,
           length: int) -> bytes | memoryview:
    """``length`` bytes at ``offset`` of the concatenation of the ``(addr, len)`` pieces: a
    snapshot, without a copy where memory shares the octets (``SparseMemory.view``)."""
    out: list[bytes | memoryview] = []
    for addr, ln in pieces:
        if offset >= ln:
            offset -= ln
            continue
        n = min(ln - offset, length)
        out.append(mem.view(addr + offset, n))
        length -= n
        offset = 0
        if not length:
            break
    if len(out) == 1:
        return out[0]
    return b"".join(out)


def scatter(pieces: list[tuple[int, int]], offset: int,
            data: bytes | memoryview) -> list[tuple[int, bytes | memoryview]]:
    """Split ``data`` at message ``offset`` over the ``(addr, len)`` pieces."""
    out = []
    pos = 0
    for addr, ln in pieces:
        if offset >= ln:
            offset -= ln
            continue
        n = min(ln - offset, len(data) - pos)
        out.append((addr + offset, data[pos : pos + n]))
        pos += n
        offset = 0
        if pos >= len(data):
            break
    return out


__all__ = ["gather", "scatter"]
