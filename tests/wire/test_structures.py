"""Target memory structures: layouts, ADDR_LE, counters (draft, "Target Memory Structures")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbtpsim.wire import (
    CONSUMED,
    CompletionRecord,
    DecodeError,
    EntryFlag,
    RingSlot,
    Status,
    TableEntry,
    decode_counter,
    encode_counter,
)
from tests.wire.strategies import completion_records, ring_slots, table_entries


def test_table_entry_layout() -> None:
    entry = TableEntry(EntryFlag.VALID | EntryFlag.SEALED, 5, 8, 0x150000)
    assert entry.encode() == bytes.fromhex("0003 0005 00000008 0000000000150000")
    assert entry.encode(addr_le=True) == bytes.fromhex("0003 0005 00000008 0000150000000000")
    assert entry.valid and entry.sealed


def test_ring_slot_layout_and_consumed() -> None:
    slot = RingSlot(sequence=4, block_offset=101 * 32768)
    assert slot.encode()[:8] == bytes.fromhex("00000004 00000000")
    assert slot.encode(addr_le=True)[8:] == (101 * 32768).to_bytes(8, "little")
    empty = RingSlot(sequence=(0 - 4) % 2**32)
    assert empty.consumed and empty.encode()[8:] == b"\xff" * 8
    assert RingSlot.decode(empty.encode()).block_offset == CONSUMED


def test_completion_record_layout() -> None:
    rec = CompletionRecord(7, Status.OK, 5, 8, 0x150000)
    assert rec.encode() == bytes.fromhex(
        "0000000000000007 0000 0005 00000008 0000000000150000"
    )
    assert len(rec.encode(addr_le=True)) == 24


@pytest.mark.parametrize("addr_le", [False, True])
@settings(max_examples=100, deadline=None)
@given(entry=table_entries, slot=ring_slots, rec=completion_records)
def test_structures_round_trip(
    addr_le: bool, entry: TableEntry, slot: RingSlot, rec: CompletionRecord
) -> None:
    assert TableEntry.decode(entry.encode(addr_le), addr_le) == entry
    assert RingSlot.decode(slot.encode(addr_le), addr_le) == slot
    assert CompletionRecord.decode(rec.encode(addr_le), addr_le) == rec


@pytest.mark.parametrize("cls", [TableEntry, RingSlot, CompletionRecord])
def test_structure_size_errors(cls: type[TableEntry]) -> None:
    with pytest.raises(DecodeError, match="truncated"):
        cls.decode(b"\x00" * 15)
    with pytest.raises(DecodeError, match="trailing"):
        cls.decode(b"\x00" * 25)


@given(st.integers(0, 2**64 - 1))
def test_counter_byte_orders(value: int) -> None:
    for order in ("big", "little"):
        assert decode_counter(encode_counter(value, order), order) == value  # type: ignore[arg-type]
    assert encode_counter(1, "little")[0] == 1
