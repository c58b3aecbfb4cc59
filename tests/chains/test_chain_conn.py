"""The CPU's work requests on an offloaded connection go into the CPU slots of the credits
it holds, in ring order (kbtpsim/chains/chain_conn.py; decision C30: the effects of
several held credits can come out together)."""

from __future__ import annotations

from typing import Any

from kbtpsim.chains.chain_conn import _ChainConn


class _Slots:
    """The chain server as ``slot_credit`` sees it: free CPU slots per credit."""

    def __init__(self, free: dict[int, int]) -> None:
        self.free = free

    def cpu_slots_free(self, credit: int) -> int:
        return self.free.get(credit, 0)


def _conn(free: dict[int, int], held: list[int], holding: int) -> _ChainConn:
    chains: Any = _Slots(free)
    return _ChainConn(1, chains, None, "i0", held=held, holding=holding)  # type: ignore[arg-type]


def test_the_oldest_held_credit_with_a_free_slot_first() -> None:
    cc = _conn({4: 4, 5: 4, 6: 4}, [4, 5], 6)
    assert cc.slot_credit() == 4
    cc.chains.free[4] = 0  # type: ignore[attr-defined]
    assert cc.slot_credit() == 5


def test_never_back_to_a_credit_older_than_the_last_written() -> None:
    """A later credit's slot is written: an earlier one's free slots would run after it
    is ENABLEd (ring order), so they are not used any more."""
    cc = _conn({4: 3, 5: 4, 6: 4}, [4, 5], 6)
    cc.posted_to = 5
    assert cc.slot_credit() == 5
    cc.chains.free[5] = 0  # type: ignore[attr-defined]
    assert cc.slot_credit() == 6


def test_with_every_slot_taken_the_served_credit_is_named() -> None:
    """(Its ``cpu_post`` then refuses with a precise error.)"""
    cc = _conn({}, [4], 5)
    assert cc.slot_credit() == 5
