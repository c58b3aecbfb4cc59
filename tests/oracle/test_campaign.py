"""Differential campaigns: the offloaded target agrees with the software target on every
profile (the default suite's small campaign; the larger one is marked ``slow``)."""

from __future__ import annotations

import pytest
import simpy

from kbtpsim.oracle.campaign import MIXES, Spec, run_campaign
from kbtpsim.oracle.cli import default_profiles
from kbtpsim.oracle.events import Event, linearise
from kbtpsim.oracle.faults import parse_faults
from kbtpsim.oracle.lockstep import PHASE_IDLE_PS, Gen, _Run


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


def test_a_chain_load_is_applied_when_its_entry_read_sampled_the_entry() -> None:
    """A NIC-served LOAD is applied to the shadow at the instant its entry Read read the
    table (``Finished.entry_read``: the Read's ``Cqe.sampled``), not when the Read
    finished some hundred ns later. A FREE handled by the CPU in between was ordered
    first, and the shadow expected NOT_VALID from a LOAD that had read the entry VALID
    (found by the long campaigns below once faults reached chains v2's lanes)."""
    from kbtpsim.oracle.interleaving import X_HANDLE, _owner_and_loader, _run_scripted

    spec = Spec(seed=1, profile="ideal-be", ops=0, chains="v2")
    run, a, b = _owner_and_loader(spec, None, 2, 512)
    env, server = run.env, run.server
    recorded: list[tuple[int, str | None]] = []
    add = server.recorder.add

    def spy(time: int, kind: str, **kw):  # type: ignore[no-untyped-def]
        if kind == "handle" and kw.get("via") == "nic":
            recorded.append((int(time), kw.get("variant")))
        return add(time, kind, **kw)

    server.recorder.add = spy  # type: ignore[method-assign]

    def scenario():  # type: ignore[no-untyped-def]
        yield env.all_of([a.connect(server), b.connect(server)])
        run.new_connections()
        run.keep(a, (yield a.alloc_store(X_HANDLE, b"1" * 512, seal=True)))
        run.keep(b, (yield b.load(X_HANDLE, invalidate=False)))

    assert _run_scripted(run, scenario()) == []
    [info] = [i for infos in server.credits.values() for i in infos
              if i.finished.served == "load"]
    load_at = [t for t, v in recorded if v == "load"]
    read_finished = server.timeline(info.conn, info.finished.credit)
    finish = next(r["finished"] for r in read_finished if r["wr"] == "load_read")
    assert load_at == [info.finished.entry_read] == [info.finished.nic_time]
    assert info.finished.entry_read < finish  # sampled at the responder, then returned


@pytest.mark.parametrize("mix,seed,faults,free_on_nic", [
    ("race", 6, "delay,stall,reorder,slot,drop", True),
    ("pipeline", 5, "delay,stall,reorder,slot,drop", True),
    ("race", 1, "hold,cqe,delay,stall,reorder,slot,drop", False)])
def test_long_campaigns_with_every_fault(mix: str, seed: int, faults: str,
                                         free_on_nic: bool) -> None:
    """Regressions of three long campaigns (400 requests, every chain fault reaching every
    queue): ``race`` seed 6 (FREE on the NIC) diverged on the LOAD's linearisation point
    (above); ``pipeline`` seed 5 crashed: a FREE whose Tail FetchAdd ran but whose CQE
    was lost with its connection had no ticket time (it now takes the failure's, as its
    unbind does); ``race`` seed 1 with late CQEs: a LOAD's COMPLETION Send succeeded
    before its connection failed but its CQE came after another CQ's first error CQE, so
    the target counted the LOAD unserved and the shadow never sent the COMPLETION the
    initiator had (a successful Send now counts whenever its CQE comes, and the server
    waits for the CQEs still to be generated before it takes stock)."""
    res = run_campaign(Spec(seed=seed, profile="ideal-be", addr_le=False, ops=400,
                            mix=mix, phases=4, chains="v2", free_on_nic=free_on_nic,
                            faults=parse_faults(faults)))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]


class _Watched:
    """What ``_Run.run_while_progressing`` reads of a run: its environment, its count of
    requests completed, and ``run_env``."""

    def __init__(self) -> None:
        self.env = simpy.Environment()
        self.requests = 0

    def run_env(self, until: int) -> bool:
        self.env.run(until=until)
        return True


def _complete_every(run: _Watched, gap_ps: int, count: int) -> Gen:
    for _ in range(count):
        yield run.env.timeout(gap_ps)
        run.requests += 1


@pytest.mark.parametrize("gap_ms,count,cap_ms,finishes", [
    (3, 10, 100, True),    # 30 ms in all, a request every 3 ms: slow, not a hang
    (3, 2, 100, False),    # stops after 6 ms: 5 ms without a completion is a hang
    (3, 40, 60, False),    # progresses, but past the cap: a livelock
])
def test_a_phase_watchdog_tells_slow_from_stuck(gap_ms: int, count: int, cap_ms: int,
                                                finishes: bool) -> None:
    """A phase fails on no progress for PHASE_IDLE_PS, not on a fixed time: until
    2026-12-06 a fixed 5 ms called cx5's slow chains behind a congested loopback a hang."""
    run = _Watched()
    gap = gap_ms * 1_000_000_000
    work = run.env.process(_complete_every(run, gap, count))
    done = run.env.all_of([work]) if finishes else run.env.event()
    got = _Run.run_while_progressing(run, done, PHASE_IDLE_PS,  # type: ignore[arg-type]
                                     cap_ms * 1_000_000_000)
    assert got is finishes
    if not finishes:
        assert run.env.now <= min(cap_ms * 1_000_000_000,
                                  count * gap + PHASE_IDLE_PS + 1_000_000_000)


def test_cx5_chains_behind_a_congested_loopback_path() -> None:
    """The campaign that seemed to hang (docs/oracle.md, Findings, 2026-12-06): cx5's
    chains behind a congested loopback path need 8 ms for a phase of 100 requests, more
    than the fixed 5 ms a phase had; with the watchdog on progress it completes and
    agrees."""
    res = run_campaign(Spec(seed=1, profile="cx5", addr_le=False, ops=100, mix="pipeline",
                            phases=1, chains="v2", faults=parse_faults("wire")))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]
    assert res.sim_us > PHASE_IDLE_PS / 1e6  # longer than the old fixed limit
