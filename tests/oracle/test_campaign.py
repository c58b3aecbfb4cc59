"""Differential campaigns: the offloaded target agrees with the software target on every
profile (the default suite's small campaign; the larger one is marked ``slow``)."""

from __future__ import annotations

import pytest

from kbtpsim.oracle.campaign import MIXES, Spec, run_campaign
from kbtpsim.oracle.cli import default_profiles
from kbtpsim.oracle.events import Event, linearise


@pytest.mark.parametrize("profile", default_profiles())
def test_default_campaign_has_no_divergence(profile: str) -> None:
    cas = profile == "cx5" or profile.endswith("+strided")  # CAS-on-WQE chains: long
    ops = 24 if cas else 40  # their chains are long: slower to run
    res = run_campaign(Spec(seed=1, profile=profile, ops=ops, phases=2))
    assert res.divergences == [], [d.as_dict() for d in res.divergences[:3]]
    assert res.requests >= ops
    if profile in ("ideal", "ideal-be", "cx5"):  # the chains serve part of it
        assert res.nic_served > 0 and res.offloaded
    else:
        assert res.nic_served == 0 or profile.endswith("+strided")


@pytest.mark.parametrize(("profile", "addr_le"), [("ideal", False), ("ideal-be", True)])
def test_other_byte_order_is_served_by_the_cpu_and_agrees(profile: str, addr_le: bool) -> None:
    res = run_campaign(Spec(seed=2, profile=profile, addr_le=addr_le, ops=32, phases=1,
                            mix="invalid"))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]
    assert res.addr_le is addr_le


def test_same_seed_same_campaign() -> None:
    a = run_campaign(Spec(seed=5, profile="ideal-be", ops=24, phases=1, mix="churn"))
    b = run_campaign(Spec(seed=5, profile="ideal-be", ops=24, phases=1, mix="churn"))
    sa, sb = a.summary(), b.summary()
    sa.pop("wall_s"), sb.pop("wall_s")
    assert sa == sb
    assert a.server is not None and b.server is not None
    assert [i.received for i in a.server.connections.values()] == \
        [i.received for i in b.server.connections.values()]


def test_linearise_puts_tickets_in_order() -> None:
    """A FetchAdd's WR may finish after a later ticket's: the ring hands blocks out by
    ticket, so the shadow takes them in ticket order; other events keep their times."""
    t2 = Event(10, 1, "handle", conn=1, ticket=2, ring="shared", hold=True)
    slot2 = Event(11, 2, "read_slot", conn=1)
    free = Event(12, 3, "handle", conn=3)
    t1 = Event(13, 4, "handle", conn=2, ticket=1, ring="shared", hold=True)
    slot1 = Event(14, 5, "read_slot", conn=2)
    out = linearise([slot1, free, t1, slot2, t2])
    assert out == [t1, t2, slot2, free, slot1]


@pytest.mark.slow
@pytest.mark.parametrize("mix", sorted(MIXES))
@pytest.mark.parametrize("profile", default_profiles())
def test_larger_campaign(profile: str, mix: str) -> None:
    """``pytest -m slow tests/oracle``: seeds 1..4 x both byte orders x every mix."""
    for seed in range(1, 5):
        for addr_le in (False, True):
            res = run_campaign(Spec(seed=seed, profile=profile, addr_le=addr_le, ops=160,
                                    phases=4, mix=mix))
            assert res.ok, (res.spec.replay(), [d.as_dict() for d in res.divergences[:3]])


@pytest.mark.parametrize(("profile", "ops"), [("ideal-be", 64), ("cx5", 24)])
def test_pipelined_requests_of_one_connection_agree(profile: str, ops: int) -> None:
    """Decision C16 under the oracle: mix ``pipeline`` sends LOADs back to back with an
    operation on the initiator's own handles right behind them (the sealed LOADs release
    the next credit before their data Write ends, on ideal-be), chains v2."""
    res = run_campaign(Spec(seed=1, profile=profile, addr_le=False, ops=ops, phases=2,
                            mix="pipeline", chains="v2"))
    assert res.ok, (res.spec.replay(), [d.as_dict() for d in res.divergences[:3]])
    assert res.nic_served > 0
