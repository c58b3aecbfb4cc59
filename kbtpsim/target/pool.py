"""Sparse block memory (draft, "Block Pool").

Only written blocks cost memory: a dict from Block Offset to a bytearray holding the
block's octets up to the highest one ever written; every other octet reads as zero.
"""

from __future__ import annotations

import hashlib


class Pool:
    """F blocks of ``block_size`` octets at Block Offsets ``range(base, end, block_size)``."""

    __slots__ = ("_data", "block_size", "offsets")

    def __init__(self, first_block: int, blocks: int, block_size: int) -> None:
        self.block_size = block_size
        start = first_block * block_size
        #: every Block Offset of the pool, lazily (a range costs no memory per block)
        self.offsets = range(start, start + blocks * block_size, block_size)
        self._data: dict[int, bytearray] = {}

    def __contains__(self, block_offset: int) -> bool:
        return block_offset in self.offsets

    def _check(self, block_offset: int, start: int, length: int) -> None:
        if block_offset not in self.offsets:
            raise ValueError(f"0x{block_offset:x} is not a Block Offset of this pool")
        if start < 0 or length < 0 or start + length > self.block_size:
            raise ValueError(f"access {start}+{length} beyond block size {self.block_size}")

    def write(self, block_offset: int, data: bytes, start: int = 0) -> None:
        self._check(block_offset, start, len(data))
        if not data:
            return
        block = self._data.get(block_offset)
        if block is None:
            block = self._data[block_offset] = bytearray()
        end = start + len(data)
        if len(block) < end:
            block.extend(bytes(end - len(block)))
        block[start:end] = data

    def read(self, block_offset: int, length: int, start: int = 0) -> bytes:
        self._check(block_offset, start, length)
        block = self._data.get(block_offset, b"")
        chunk = bytes(block[start : start + length])
        return chunk + bytes(length - len(chunk))

    def clear(self, block_offset: int) -> None:
        """Zero a block (it stops costing memory)."""
        self._check(block_offset, 0, 0)
        self._data.pop(block_offset, None)

    @property
    def materialized_blocks(self) -> int:
        return len(self._data)

    @property
    def materialized_bytes(self) -> int:
        return sum(len(b) for b in self._data.values())

    def digest(self) -> str:
        """A hash of the pool's contents (trailing zeros ignored), for state snapshots."""
        h = hashlib.sha256()
        for offset in sorted(self._data):
            block = bytes(self._data[offset]).rstrip(b"\0")
            if block:
                h.update(offset.to_bytes(8, "big") + len(block).to_bytes(4, "big") + block)
        return h.hexdigest()
