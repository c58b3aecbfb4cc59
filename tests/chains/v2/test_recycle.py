"""The verifier rules of recycled chains (kbtpsim.chains.v2.recycle): each rule with a
broken plan it must catch, and the plans a real credit gets pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.chains.v2.recycle import (
    CountField,
    RecyclePlan,
    check_recycle,
    own_counts,
    plan_recycle,
    runs,
)

COUNTS = [CountField("master", 0, "WAIT", "cq:recv", 4),
          CountField("master", 1, "ENABLE", "qp:worker", 40),
          CountField("worker", 7, "ENABLE", "qp:gate", 4)]
MODIFIED = {("worker", 2), ("worker", 3), ("conn", 0), ("worker", 5)}


def plan() -> tuple[RecyclePlan, list[CountField]]:
    p = plan_recycle(COUNTS, MODIFIED, 256, 10, 36, 68)
    return p, COUNTS + own_counts(p, 10, 36, 68)


def test_runs_merge_contiguous_indices() -> None:
    assert runs([5, 2, 3, 9], {4, 7}) == [(2, 2), (5, 1), (9, 1)]


def test_runs_join_across_wqes_that_hold_no_count() -> None:
    """Decision C26: the WQEs between two restored runs are rewritten with their own
    pristine octets, unless one holds a count the segment advances."""
    assert runs([5, 2, 3, 9], max_gap=3) == [(2, 8)]
    assert runs([5, 2, 3, 9], {7}, max_gap=3) == [(2, 4), (9, 1)]
    assert runs([5, 2, 3, 9], {4}, max_gap=3) == [(2, 2), (5, 5)]
    # at most MAX_JOIN_GAP (2) WQEs between: 5 and 9 stay apart
    assert runs([5, 2, 3, 9]) == [(2, 4), (9, 1)]


def test_a_sound_plan_passes() -> None:
    p, counts = plan()
    assert check_recycle(p, counts, MODIFIED) == []
    kinds = [s.kind for s in p.steps]
    # the worker's runs 2..3 and 5 join across WQE 4 (no count); conn 0 alone
    assert kinds[0] == "restore_scratch" and kinds.count("restore_wqes") == 2
    assert [s.span for s in p.steps if s.kind == "restore_wqes"] == [("conn", 0, 1),
                                                                      ("worker", 2, 4)]
    assert kinds.index("wait") < kinds.index("rearm_recv") < kinds.index("enable_master")


def test_a_modified_count_after_a_run_ends_it_up_to_its_count() -> None:
    """Decision C31: a WAIT/ENABLE the chain modifies (its condition's mask) and whose
    count is advanced, right after a run (or within its join gap), ends that run's
    Write, written up to its count, instead of a restore of its own; a restore that
    would write the count itself is caught."""
    counts = [*COUNTS, CountField("worker", 6, "ENABLE", "qp:gate", 4)]
    modified = {*MODIFIED, ("worker", 6)}
    p = plan_recycle(counts, modified, 256, 10, 36, 68)
    restores = [(s.kind, s.span, s.upto_count) for s in p.steps
                if s.kind.startswith("restore_w") or s.kind == "restore_ctrl"]
    assert restores == [("restore_wqes", ("conn", 0, 1), False),
                        ("restore_wqes", ("worker", 2, 5), True)]
    own = own_counts(p, 10, 36, 68)
    assert check_recycle(p, counts + own, modified) == []
    whole = next(s for s in p.steps if s.upto_count)
    p.steps[p.steps.index(whole)] = replace(whole, upto_count=False)
    assert any("rewrites a WAIT/ENABLE count" in f
               for f in check_recycle(p, counts + own, modified))
    # counted WQEs between the run and it keep it apart: restored alone
    alone = plan_recycle([*counts, CountField("worker", 8, "WAIT", "cq:x", 1)],
                         {*MODIFIED, ("worker", 8)}, 256, 10, 36, 68)
    assert [(s.kind, s.span) for s in alone.steps if s.kind == "restore_ctrl"] == [
        ("restore_ctrl", ("worker", 8, 1))]


def test_a_restore_over_an_advancers_count_is_caught() -> None:
    """A restore may not cover a count a variant's advancer advances either (C26)."""
    private = [CountField("worker", 4, "WAIT", "cq:chain@load", 3)]
    joined, counts = plan()
    assert check_recycle(joined, counts, MODIFIED, private) != []
    kept = plan_recycle(COUNTS, MODIFIED, 256, 10, 36, 68, private)
    assert [s.span for s in kept.steps if s.kind == "restore_wqes"] == [
        ("conn", 0, 1), ("worker", 2, 2), ("worker", 5, 1)]
    assert check_recycle(kept, COUNTS + own_counts(kept, 10, 36, 68), MODIFIED,
                         private) == []


def test_a_count_never_advanced_is_caught() -> None:
    p, counts = plan()
    p.steps = [s for s in p.steps if not (s.count is not None and s.count.index == 1)]
    found = check_recycle(p, counts, MODIFIED)
    assert any("master#1 ENABLE qp:worker: its count is never advanced" in f for f in found)


def test_a_wrong_advance_is_caught() -> None:
    p, counts = plan()
    i = next(i for i, s in enumerate(p.steps) if s.count is not None and s.count.index == 0)
    c = p.steps[i].count
    assert c is not None
    p.steps[i] = replace(p.steps[i], count=replace(c, delta=3))
    assert any("advanced by 3, one round is 4" in f for f in check_recycle(p, counts,
                                                                           MODIFIED))


def test_a_count_advanced_twice_is_caught() -> None:
    p, counts = plan()
    p.steps.insert(1, next(s for s in p.steps if s.kind == "advance"))
    assert any("advanced 2 times" in f for f in check_recycle(p, counts, MODIFIED))


def test_a_modified_wqe_left_unrestored_is_caught() -> None:
    p, counts = plan()
    assert any("worker#9 is modified by the chain and never restored" in f
               for f in check_recycle(p, counts, MODIFIED | {("worker", 9)}))


def test_master_enabled_before_the_wait_is_caught() -> None:
    p, counts = plan()
    w = next(i for i, s in enumerate(p.steps) if s.kind == "wait")
    e = next(i for i, s in enumerate(p.steps) if s.kind == "enable_master")
    p.steps[w], p.steps[e] = p.steps[e], p.steps[w]
    assert any("ENABLEd before the restores" in f for f in check_recycle(p, counts,
                                                                         MODIFIED))


def test_an_own_count_advanced_before_it_runs_is_caught() -> None:
    p, counts = plan()
    last = p.steps.pop()  # the advance of the recycler's ENABLE
    p.steps.insert(0, last)
    found = check_recycle(p, counts, MODIFIED)
    assert any("is advanced before it runs" in f for f in found), found


def test_a_restore_after_the_wait_is_caught() -> None:
    p, counts = plan()
    i = next(i for i, s in enumerate(p.steps) if s.kind == "restore_wqes")
    p.steps.append(p.steps.pop(i))
    assert any("comes after the WAIT" in f for f in check_recycle(p, counts, MODIFIED))


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_every_credit_slot_of_a_real_chain_verifies(profile: str) -> None:
    h = Harness(profile, False, credits=3, chains="v2")
    s = h.server
    for slot in range(3):
        p = s._slots[slot].plan
        assert p is not None
        assert p.counts and p.modified  # the WAIT/ENABLE counts, the patched WQEs
        # its recycler's WAIT advances by one round of the slots that recycler serves
        sharing = sum(1 for o in s._slots.values() if o.recycler == s._slots[slot].recycler)
        assert s._slots[slot].rec_wait == sharing * p.signaled
        assert check_recycle(p, p.counts + own_counts(p, p.base, s._slots[slot].rec_wait,
                                                      s.master.sq_depth), p.modified,
                             s._slots[slot].private) == []
        # decision C26: no restore rewrites any WAIT/ENABLE count, the advancers' included
        counts = {(c.qp, c.index) for c in (*p.counts, *s._slots[slot].private)}
        for st in p.steps:
            if st.kind == "restore_wqes":
                role, first, n = st.span
                assert not any((role, i) in counts  # C31: up to the last's count
                               for i in range(first, first + n - st.upto_count)), st
    if profile == "ideal-be":  # C26: one Write per ring for the connection QP's WQEs
        first = s._slots[0].plan
        assert first is not None
        assert sum(1 for st in first.steps if st.kind == "restore_wqes"
                   and st.span[0] == "conn") == 1
    # decision C16: the slots are dealt out over the recyclers in turn
    assert [s._slots[i].recycler for i in range(3)] == [i % s.RECYCLERS for i in range(3)]
