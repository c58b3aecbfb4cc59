"""Recycled chains (kbtpsim.chains.v2.server) against the software reference: several
rounds of every credit, the NIC re-arming chains and receives, the CPU re-posting
nothing."""

from __future__ import annotations

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.chains.v2 import RecycleError, chain_server_class
from kbtpsim.nic.profiles import get_profile
from tests.chains.test_run import DATA, Req, mixed


def run_rounds(profile: str, chains: str, rounds: int = 3, credits: int = 3):  # type: ignore[no-untyped-def]
    h = Harness(profile, False, credits=credits, chains=chains)
    h.write_ibuf(1 << 20, DATA[::-1])
    r = Req(h, True)
    msgs = [m for _ in range(rounds) for m in mixed(r)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert set(res.completions) == {m.request_id for m in msgs} | {0}
    return h, res, [res.served[m.request_id] for m in msgs]


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_recycled_chains_serve_what_v1_serves_round_after_round(profile: str) -> None:
    _, _, v1 = run_rounds(profile, "v1")
    h, res, v2 = run_rounds(profile, "v2")
    assert v2 == v1 and v2.count("load") == 6  # 31 requests on 3 credits: 10 rounds
    s = h.server
    assert s.posted > 3 * s.credits  # credits granted again and again
    assert s.conn.rq_post > 3 * s.credits  # receives re-armed by the chain's FetchAdd
    # the CPU wrote no WQE after start-up but its own CPU-slot WRs
    posted_at_start = s.credits * (len(s.templates) + s.cpu_slots) + s.credits * 2 * bool(
        s.cpu_slots)
    assert s.wrs_posted <= posted_at_start + res.cpu_requests * 4


def test_receives_wait_for_their_credit_to_be_recycled() -> None:
    """With 2 credits every request reuses a slot the NIC restored just before."""
    _h, _, served = run_rounds("ideal-be", "v2", rounds=2, credits=2)
    assert served.count("load") == 4


@pytest.mark.parametrize(("profile", "why"), [
    ("ideal", "little-endian atomics"),
    ("cx5-upstream", "no WAIT/ENABLE"),
])
def test_profiles_that_cannot_recycle_are_refused_with_the_reason(profile: str,
                                                                  why: str) -> None:
    from kbtpsim.chains.harness import Harness as H
    cls = chain_server_class("v2")
    prof = get_profile(profile)
    if not prof.wait_enable:
        with pytest.raises(RecycleError, match=why):
            H(profile, False, credits=2, chains="v2")
        return
    with pytest.raises(RecycleError, match=why):
        H(profile, True, credits=2, chains="v2")
    assert cls.RING_ROUNDS == 1


def test_unknown_chain_version_is_refused() -> None:
    with pytest.raises(ValueError, match="chains must be one of v1, v2, got 'v3'"):
        chain_server_class("v3")


def test_a_credit_posts_to_its_slots_queues_and_the_shared_ones_in_order() -> None:
    """The set-up groups the queues by slot once (issue 17: filtering every queue of
    every slot per credit was quadratic); a credit's queues, and their order, which
    orders its recycle segment's steps, are what that filter gave."""
    h = Harness("ideal-be", False, credits=12, chains="v2")
    s = h.server
    names = list(s.queues())
    for number in range(s.credits):
        tag = f"#{number}"
        want = [r for r in names if "#" not in r or r.endswith(tag)]
        assert list(s._credit_queues(number)) == want
        assert list(s._slots[number].segments) == want
    assert "master#1" in names and "master#11" not in s._credit_queues(1)
