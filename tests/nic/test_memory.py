"""Sparse memory and hosts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbtpsim.nic import Host, SparseMemory
from kbtpsim.nic.memory import PAGE_SIZE


def test_unwritten_reads_zero_and_cost_is_pages_touched() -> None:
    mem = SparseMemory()
    assert mem.read(1 << 40, 16) == bytes(16)
    mem.write((1 << 40) - 3, b"abcdef")  # straddles a page boundary
    assert mem.read((1 << 40) - 3, 6) == b"abcdef"
    assert mem.pages_touched == 2


@given(st.integers(0, 3 * PAGE_SIZE), st.binary(max_size=3 * PAGE_SIZE))
def test_write_read_roundtrip(addr: int, data: bytes) -> None:
    mem = SparseMemory()
    mem.write(addr, data)
    assert mem.read(addr, len(data)) == data
    assert mem.read(addr + len(data), 4) == bytes(4)


def test_u64_byte_orders() -> None:
    mem = SparseMemory()
    mem.write_u64(8, 0x0102030405060708, "big")
    assert mem.read(8, 2) == b"\x01\x02"
    assert mem.read_u64(8, "little") == 0x0807060504030201


def test_bounds_and_alloc_errors() -> None:
    mem = SparseMemory()
    with pytest.raises(ValueError, match="64-bit"):
        mem.read((1 << 64) - 2, 4)
    host = Host("h")
    a = host.alloc(10, 64)
    b = host.alloc(10, 4096)
    assert a % 64 == 0 and b % 4096 == 0 and b >= a + 10
    with pytest.raises(ValueError, match="power of two"):
        host.alloc(8, 3)
    with pytest.raises(ValueError, match="positive"):
        host.alloc(0)
