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


def test_lazy_initializer() -> None:
    """Octets never written read as fill(addr, length); a page materialises from the fill
    on its first write; addresses outside every initializer still read zero."""
    calls: list[tuple[int, int]] = []

    def fill(addr: int, length: int) -> bytes:
        calls.append((addr, length))
        return bytes((a * 7) & 0xFF for a in range(addr, addr + length))

    def want(addr: int, length: int) -> bytes:
        return bytes((a * 7) & 0xFF for a in range(addr, addr + length))

    mem = SparseMemory()
    base = 5 * PAGE_SIZE - 10
    mem.add_initializer(base, 2 * PAGE_SIZE, fill)
    assert mem.read(base - 4, 8) == bytes(4) + want(base, 4)
    assert mem.read(base + PAGE_SIZE, 16) == want(base + PAGE_SIZE, 16)
    assert mem.read(base + 2 * PAGE_SIZE - 2, 4) == want(base + 2 * PAGE_SIZE - 2, 2) + bytes(2)
    assert mem.pages_touched == 0
    mem.write(base + 100, b"\0\0")  # materialises page 5 from the fill
    assert mem.pages_touched == 1
    assert mem.read(base + 98, 6) == want(base + 98, 2) + b"\0\0" + want(base + 102, 2)
    assert mem.read(base, 3 * PAGE_SIZE)[: 2 * PAGE_SIZE] != want(base, 2 * PAGE_SIZE)
    mem.write_u64(base + 8, 0x1122, "big")
    assert mem.read_u64(base + 8, "big") == 0x1122
    assert all(length <= 2 * PAGE_SIZE for _, length in calls)
    with pytest.raises(ValueError, match="overlaps"):
        mem.add_initializer(base + 10, 4, fill)
    mem.add_initializer(0, 0, fill)  # empty: ignored
    assert mem.read(1 << 40, 4) == bytes(4)  # no initializer there


def test_shared_pages_are_snapshots() -> None:
    """Immutable octets are stored once (views), and a write after a view leaves the view
    as it was (copy on write)."""
    mem = SparseMemory()
    data = bytes(range(256)) * 48  # three pages
    mem.write(0x1000, data)
    view = mem.view(0x1800, 8192)
    assert isinstance(view, memoryview) and view.obj is data  # no copy
    assert bytes(view) == data[0x800:0x2800] == mem.read(0x1800, 8192)
    mem.write(0x2000, b"xyz")
    assert bytes(view) == data[0x800:0x2800]
    assert mem.read(0x2000, 4) == b"xyz" + data[0x1003:0x1004]
    assert mem.read(0x1000, len(data)) == data[:0x1000] + b"xyz" + data[0x1003:]


def test_mutable_sources_are_copied() -> None:
    mem = SparseMemory()
    src = bytearray(b"\x01" * 8192)
    mem.write(0, src)
    src[0] = 9
    assert mem.read(0, 2) == b"\x01\x01"
    assert mem.read(8190, 2) == b"\x01\x01" and mem.read(8192, 1) == b"\x00"
    mem.write(4096, memoryview(src))  # a view of a bytearray: copied too
    src[4096] = 7
    assert mem.read(4096, 1) == b"\x09" and mem.read(8192, 1) == b"\x01"


def test_view_falls_back_to_a_copy_across_writes() -> None:
    mem = SparseMemory()
    a, b = b"a" * 4096, b"b" * 4096
    mem.write(0, a)
    mem.write(4096, b)
    got = mem.view(2048, 4096)  # two pages of two writes: joined
    assert bytes(got) == b"a" * 2048 + b"b" * 2048
    assert mem.view(0, 4096) == a
