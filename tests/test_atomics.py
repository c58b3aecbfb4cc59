"""Atomics against an independent bit-by-bit carry model (RFC 7306 section 4) and the
draft's ring-counter table for N = 4 (draft, "Examples")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbtpsim.atomics import (
    MASK64,
    RING_ADD_DATA,
    UNMASKED_ADD_DATA,
    advance_counter,
    compare_swap,
    fetch_add,
    initial_tail,
    masked_compare_swap,
    masked_fetch_add,
    pack_counter,
    ring_add_mask,
    unmasked_counter,
    unmasked_slot_offset,
    unpack_counter,
)

u64 = st.integers(0, MASK64)


def ripple_carry_model(value: int, add: int, mask: int) -> int:
    """Bit by bit: sum bit = a ^ b ^ carry; a set mask bit discards the carry out of it."""
    result, carry = 0, 0
    for bit in range(64):
        a, b = (value >> bit) & 1, (add >> bit) & 1
        total = a + b + carry
        result |= (total & 1) << bit
        carry = 0 if (mask >> bit) & 1 else total >> 1
    return result


@settings(max_examples=2000, deadline=None)
@given(u64, u64, u64)
def test_masked_fetch_add_matches_carry_model(value: int, add: int, mask: int) -> None:
    assert masked_fetch_add(value, add, mask) == ripple_carry_model(value, add, mask)


@settings(max_examples=500, deadline=None)
@given(u64, u64, st.lists(st.integers(0, 63), max_size=6))
def test_masked_fetch_add_field_masks(value: int, add: int, bits: list[int]) -> None:
    mask = sum({1 << b for b in bits})
    assert masked_fetch_add(value, add, mask) == ripple_carry_model(value, add, mask)


@given(u64, u64)
def test_mask_zero_is_plain_add(value: int, add: int) -> None:
    assert masked_fetch_add(value, add, 0) == (value + add) % 2**64 == fetch_add(value, add)


def test_draft_ring_counter_table_n4() -> None:
    """draft, "Examples": N = 4, Add Mask 0x8000000080000020, Head from zero."""
    assert ring_add_mask(4) == 0x8000000080000020
    assert RING_ADD_DATA == 0x0000000100000010
    expected = [
        ((0, 0), 0x0000000100000010),
        ((1, 16), 0x0000000200000020),
        ((2, 32), 0x0000000300000030),
        ((3, 48), 0x0000000400000000),
        ((4, 0), 0x0000000500000010),
    ]
    head = 0
    for returned, new_value in expected:
        assert unpack_counter(head) == returned
        head = masked_fetch_add(head, RING_ADD_DATA, ring_add_mask(4))
        assert head == new_value


def test_ticket_wraps_at_2_32() -> None:
    n = 8
    head = pack_counter(2**32 - 1, 16 * 7)
    head = advance_counter(head, n)
    assert unpack_counter(head) == (0, 0)
    head = advance_counter(head, n)
    assert unpack_counter(head) == (1, 16)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_counter_fields_advance_independently(n: int, ticket: int, steps: int) -> None:
    slots = 1 << n
    start_slot = ticket % slots
    head = pack_counter(ticket, 16 * start_slot)
    for _ in range(steps):
        head = advance_counter(head, slots)
    t, off = unpack_counter(head)
    assert t == (ticket + steps) % 2**32
    assert off == 16 * ((start_slot + steps) % slots)
    assert (head & 0xFFFF_FFFF) >> (n + 4) == 0  # bits 31..n+4 stay zero


def test_single_slot_ring_is_rejected() -> None:
    """Decision D9: with N = 1 the Add Data's 16 lands outside the 4-bit Slot Offset."""
    assert masked_fetch_add(0, RING_ADD_DATA, (1 << 63) | (1 << 31) | (1 << 3)) == 0x1_0000_0010
    with pytest.raises(ValueError, match=">= 2"):
        ring_add_mask(1)


def test_initial_tail() -> None:
    assert unpack_counter(initial_tail(4, 4)) == (4, 0)
    assert unpack_counter(initial_tail(5, 8)) == (5, 80)


def test_unmasked_variant() -> None:
    c = unmasked_counter(3)
    assert c == 3 << 32
    c = fetch_add(c, UNMASKED_ADD_DATA)
    assert c >> 32 == 4 and c & 0xFFFFFFFF == 0
    assert unmasked_slot_offset(4, 4) == 0
    assert unmasked_slot_offset(7, 4) == 48
    assert fetch_add(unmasked_counter(2**32 - 1), UNMASKED_ADD_DATA) == 0


@given(u64, u64, u64, u64, u64)
def test_masked_compare_swap(value: int, cmp: int, cmask: int, swap: int, smask: int) -> None:
    new = masked_compare_swap(value, cmp, cmask, swap, smask)
    if (cmp ^ value) & cmask == 0:
        assert new & smask == swap & smask
        assert new & ~smask & MASK64 == value & ~smask & MASK64
    else:
        assert new == value


def test_compare_swap() -> None:
    assert compare_swap(5, 5, 9) == 9
    assert compare_swap(5, 6, 9) == 5


@pytest.mark.parametrize("bad", [0, 1, 3, 6, 2**29])
def test_ring_size_must_be_power_of_two(bad: int) -> None:
    with pytest.raises(ValueError, match="ring slots N"):
        ring_add_mask(bad)


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_operands_are_u64(bad: int) -> None:
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        masked_fetch_add(bad, 0, 0)
