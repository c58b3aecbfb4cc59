"""RDMA atomic operations on 64-bit words, and the KBTP ring-counter helpers.

Pure functions on Python ints; every operand and result is an unsigned 64-bit value.
The masked variants follow RFC 7306 (RDMA protocol extensions), section 4 (Atomic
Operations): in Masked Fetch and Add a set bit of the Add Mask discards the carry out of
that bit position, so one 64-bit add updates several independent fields at once.

The free-block ring counters of the KBTP draft (section "Free-Block Ring") are such
multi-field words: a 32-bit Ticket in bits 63..32 and a Slot Offset (16 x slot) in the low
n + 4 bits, advanced together by one masked FetchAdd.
"""

from __future__ import annotations

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1

#: Size of a ring slot in octets (draft, "Free-Block Ring").
SLOT_SIZE = 16
#: Add Data for the masked counters: one ticket and one slot (draft, "Free-Block Ring").
RING_ADD_DATA = 0x0000_0001_0000_0010
#: Add Data for the unmasked InfiniBand counters (draft, "InfiniBand and RoCEv2").
UNMASKED_ADD_DATA = 0x0000_0001_0000_0000


def _check_u64(name: str, value: int) -> None:
    if not 0 <= value <= MASK64:
        raise ValueError(f"{name} must be an unsigned 64-bit value, got {value!r}")


def fetch_add(value: int, add_data: int) -> int:
    """Plain FetchAdd: the new value, ``value + add_data`` modulo 2^64."""
    _check_u64("value", value)
    _check_u64("add_data", add_data)
    return (value + add_data) & MASK64


def masked_fetch_add(value: int, add_data: int, add_mask: int) -> int:
    """Masked FetchAdd (RFC 7306 section 4): the new 64-bit value.

    A set bit in ``add_mask`` discards the carry out of that bit; mask 0 is a plain add
    modulo 2^64. Implemented as a carry-less add: clearing the mask bits of both operands
    stops every carry at a mask bit (the sum there is only the incoming carry), and XOR-ing
    the operands' own bits back in gives the full sum bit without its carry out.
    """
    _check_u64("value", value)
    _check_u64("add_data", add_data)
    _check_u64("add_mask", add_mask)
    keep = ~add_mask & MASK64
    partial = ((value & keep) + (add_data & keep)) & MASK64
    return partial ^ ((value ^ add_data) & add_mask)


def compare_swap(value: int, compare: int, swap: int) -> int:
    """Plain CmpSwap: the new value (``swap`` if ``value == compare``, else unchanged)."""
    return masked_compare_swap(value, compare, MASK64, swap, MASK64)


def masked_compare_swap(
    value: int, compare: int, compare_mask: int, swap: int, swap_mask: int
) -> int:
    """Masked CmpSwap (RFC 7306 section 4): the new value.

    If ``(compare ^ value) & compare_mask == 0`` the bits selected by ``swap_mask`` are
    replaced by those of ``swap``; otherwise the value is unchanged.
    """
    for name, operand in (
        ("value", value),
        ("compare", compare),
        ("compare_mask", compare_mask),
        ("swap", swap),
        ("swap_mask", swap_mask),
    ):
        _check_u64(name, operand)
    if (compare ^ value) & compare_mask:
        return value
    return (value & ~swap_mask & MASK64) | (swap & swap_mask)


# --- ring counters (draft, "Free-Block Ring") -----------------------------------------


def ring_order(n_slots: int) -> int:
    """n for a ring of N = 2^n slots of the masked counters.

    N must be a power of two and at least 2: with N = 1 (n = 0) the Slot Offset field is
    bits 3..0, yet the Add Data adds 16 at bit 4, outside it (docs/decisions.md, D9).
    """
    if n_slots < 2 or n_slots & (n_slots - 1):
        raise ValueError(f"ring slots N must be a power of two >= 2, got {n_slots!r}")
    if n_slots > 1 << 28:
        # Slot Offset lives in the low n + 4 bits and bits 31..n+4 must be zero.
        raise ValueError(f"ring slots N must be at most 2^28, got {n_slots!r}")
    return n_slots.bit_length() - 1


def ring_add_mask(n_slots: int) -> int:
    """Add Mask for a ring of ``n_slots``: bit 63 | bit 31 | bit (n + 3)."""
    n = ring_order(n_slots)
    return (1 << 63) | (1 << 31) | (1 << (n + 3))


def pack_counter(ticket: int, slot_offset: int) -> int:
    """A masked counter word from its Ticket and Slot Offset."""
    if not 0 <= ticket <= MASK32:
        raise ValueError(f"ticket must fit in 32 bits, got {ticket!r}")
    if not 0 <= slot_offset <= 0x7FFF_FFFF or slot_offset % SLOT_SIZE:
        raise ValueError(f"slot offset must be a multiple of 16 below 2^31, got {slot_offset!r}")
    return (ticket << 32) | slot_offset


def unpack_counter(value: int) -> tuple[int, int]:
    """(Ticket, Slot Offset) of a masked counter word."""
    _check_u64("value", value)
    return value >> 32, value & MASK32


def initial_tail(n_free: int, n_slots: int) -> int:
    """Tail after initialisation: Ticket F, Slot Offset 16 * (F mod N) (draft, rules)."""
    ring_order(n_slots)
    return pack_counter(n_free & MASK32, SLOT_SIZE * (n_free % n_slots))


def advance_counter(value: int, n_slots: int) -> int:
    """The counter after one masked FetchAdd with the ring's Add Data and Add Mask."""
    return masked_fetch_add(value, RING_ADD_DATA, ring_add_mask(n_slots))


def unmasked_counter(ticket: int) -> int:
    """An unmasked (InfiniBand) counter: Ticket in the high 32 bits, zero below."""
    if not 0 <= ticket <= MASK32:
        raise ValueError(f"ticket must fit in 32 bits, got {ticket!r}")
    return ticket << 32


def unmasked_slot_offset(ticket: int, n_slots: int) -> int:
    """Slot Offset for the unmasked variant: 16 * (ticket mod N) (draft, InfiniBand)."""
    if n_slots < 1 or n_slots & (n_slots - 1):
        raise ValueError(f"ring slots N must be a power of two >= 1, got {n_slots!r}")
    return SLOT_SIZE * (ticket % n_slots)
