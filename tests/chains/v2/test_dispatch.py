"""Per-operation dispatch (kbtpsim.chains.v2.dispatch): each variant on its own
sub-master, dispatched by the request header; its rules, each with a broken chain; and at
run time a request runs only its own variant's WRs, with the software target's results."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbtpsim.chains.compiler import build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import Chain, Role
from kbtpsim.chains.measure import _requests
from kbtpsim.chains.plan import _order, lowering_for
from kbtpsim.chains.v2 import prepare_chain
from kbtpsim.chains.v2.advance import check_advance
from kbtpsim.chains.v2.dispatch import (
    DispatchError,
    check_dispatch,
    dispatch_blockers,
    dispatched,
    header_condition,
    split_variants,
)
from kbtpsim.chains.v2.lanes import split_lanes
from kbtpsim.chains.v2.recycle import CountField
from kbtpsim.chains.verify import verify
from kbtpsim.nic.profiles import get_profile
from tests.chains.test_run import DATA, Req, mixed

PROF = get_profile("ideal-be")


def _dispatched() -> Chain:
    chain = build_chain(False, _order(PROF), None, lowering=lowering_for(PROF))
    return split_variants(split_lanes(chain))


def test_the_dispatched_chain_verifies_and_keeps_every_worker_wr() -> None:
    chain = build_chain(False, _order(PROF), None, lowering=lowering_for(PROF))
    out = split_variants(split_lanes(chain))
    assert verify(out, PROF) == [] and check_dispatch(out) == []
    variants = ("load", "store_inline", "store_read", "alloc_inline", "alloc_read")
    before = {w.name for w in chain.wrs() if w.role is not Role.MASTER}
    gates = {f"gate_nop_{v}" for v in variants}  # C27
    # C30: the common part (handle patch, byte count, table marker, entry Read) copied
    # into each variant that reads it, and gone
    common = {w.name for w in chain.wrs() if w.role is Role.WORKER and w.part == "dispatch"}
    assert {"p_handle", "m_table", "read_entry"} <= common
    after = {w.name for w in out.wrs() if w.role is not Role.MASTER}
    copies = after - before - gates
    assert copies and all(c.rsplit("_", 1)[0] in common or any(
        c == f"{b}_{v}" for b in common for v in variants) for c in copies), copies
    assert {"read_entry_store_inline", "read_entry_alloc_read"} <= copies
    assert (before - common) | gates | copies == after and not common & after
    for w in out.wrs():  # every variant WR on its variant's lane, its master its own
        if w.role is Role.WORKER:
            assert w.lane in variants, w.name
    subs = {w.lane for w in out.wrs() if w.role is Role.MASTER and w.lane}
    assert subs == set(variants)
    disp = [w for w in out.wrs() if w.name.startswith("dispatch_")]
    # one dispatch ENABLE per variant (C30: each dispatched whole, no dispatch B)
    assert {w.name for w in disp if not w.name.startswith("dispatch_l_")} == {
        f"dispatch_a_{v}" for v in variants}
    assert all(w.cond is not None and not w.lane for w in disp)


def test_header_conditions_pick_one_variant_per_request() -> None:
    chain = _dispatched()
    conds = {v: header_condition(chain, v) for v in ("load", "store_inline", "store_read",
                                                     "alloc_inline", "alloc_read")}
    assert dispatched(conds, bytes([1, 0x10, 0, 0x08, 0, 0, 0, 0])) == "load"
    assert dispatched(conds, bytes([1, 0x11, 0, 0x01, 9, 9, 9, 9])) == "store_inline"
    assert dispatched(conds, bytes([1, 0x11, 0, 0x00, 0, 0, 0, 0])) == "store_read"
    assert dispatched(conds, bytes([1, 0x12, 0, 0x03, 0, 0, 0, 0])) == "alloc_inline"
    assert dispatched(conds, bytes([1, 0x13, 0, 0x00, 0, 0, 0, 0])) is None  # FREE
    assert dispatched(conds, bytes([2, 0x10, 0, 0x00, 0, 0, 0, 0])) is None  # version 2


def _findings_with(name: str, **changes: object) -> list[str]:
    """check_dispatch on the dispatched chain with WR ``name`` changed."""
    chain = _dispatched()
    chain.graph.nodes[name]["wr"] = replace(chain.wr(name), **changes)  # type: ignore[arg-type]
    return check_dispatch(chain)


def test_dispatch_exclusive_rejects_overlapping_conditions() -> None:
    same = _dispatched().wr("dispatch_a_store_inline").cond
    found = _findings_with("dispatch_a_store_read", cond=same)
    assert any(f.startswith("dispatch-exclusive") for f in found), found


def test_dispatch_dead_rejects_an_unconditional_connection_wr() -> None:
    found = _findings_with("load_write", cond=None)
    assert any(f.startswith("dispatch-dead: load_write") for f in found), found


def test_dispatch_dead_rejects_a_condition_another_variant_places() -> None:
    found = _findings_with("load_send", cond=_dispatched().wr("sr_send").cond)
    assert any(f.startswith("dispatch-dead: load_send") for f in found), found


def test_dispatch_private_rejects_a_variant_count_in_the_common_master() -> None:
    found = _findings_with("wait_load_3", lane="")
    assert any(f.startswith("dispatch-private: wait_load_3") for f in found), found


def test_dispatch_needs_native_conditional_enables() -> None:
    assert dispatch_blockers(PROF) == []
    assert "native_conditional" in dispatch_blockers(get_profile("cx5"))[0]
    cx5 = get_profile("cx5")
    chain = build_chain(False, _order(cx5), None, lowering=lowering_for(cx5))
    out = prepare_chain("v2", chain, cx5)  # v2 without dispatch there
    assert not any(w.role is Role.MASTER and w.lane for w in out.wrs())


def test_a_chain_without_variants_is_refused() -> None:
    chain = build_chain(False, _order(PROF), None, variants=())
    with pytest.raises(DispatchError, match="no variant"):
        split_variants(split_lanes(chain))


def test_dispatch_advanced_rule() -> None:
    a = CountField("master#0", 3, "WAIT", "cq:chain@load", 27)
    b = CountField("master@load#0", 0, "ENABLE", "qp:worker@load", 18)
    good = {"load": [a, b]}
    assert check_advance(good, [a, b], {"load": 2}) == []
    stale = {"load": [replace(a, delta=0), b]}
    assert any("advanced by 0" in f for f in check_advance(stale, [a, b], {"load": 2}))
    missing = {"load": [b]}
    found = check_advance(missing, [a, b], {"load": 2})
    assert any("advanced 0 times" in f for f in found) and any("has 1 WRs" in f
                                                                for f in found)
    twice = {"load": [a, a, b]}
    assert any("2 times" in f for f in check_advance(twice, [a, b], {"load": 3}))
    foreign = {"load": [a, b, replace(b, index=9)]}
    assert any("no count of its own" in f for f in check_advance(foreign, [a, b],
                                                                {"load": 3}))


def _retired(h: Harness) -> int:
    return sum(q.retired for q in h.server.queues().values())


def test_a_request_runs_only_its_own_variant() -> None:
    """One STORE executes the common part, the STORE's sub-master and lane and the
    credit's connection WRs, not the other variants' WRs (fewer than half of v2 without
    it). Without the LOAD variant: C21's LOAD runs only dispatched."""
    import kbtpsim.chains.harness as harness

    orig = harness.prepare_chain
    counts = {}
    for disp in (False, True):
        harness.prepare_chain = (  # type: ignore[assignment]
            lambda c, ch, p, check=True, d=disp: orig(c, ch, p, check, dispatch=d))
        try:
            h = Harness("ideal-be", False, credits=3, chains="v2",
                        variants=("store_inline", "store_read", "alloc_inline",
                                  "alloc_read"))
        finally:
            harness.prepare_chain = orig  # type: ignore[assignment]
        msgs = _requests(h, "STORE-INLINE", 4096, 3)
        h.run(msgs[:4])
        before = _retired(h)
        store = msgs[4]
        res = h.run([store], hello=False)
        assert res.served[store.request_id] == "store_inline" and h.mismatches() == []
        counts[disp] = _retired(h) - before
    assert counts[True] < counts[False] / 2, counts


def test_dispatched_rounds_serve_what_v1_serves() -> None:
    """Several rounds of every slot, variants taking turns in each: the sub-masters'
    counts advanced by their advancers only when they ran."""
    out = {}
    for chains in ("v1", "v2"):
        h = Harness("ideal-be", False, credits=2, chains=chains)
        h.write_ibuf(1 << 20, DATA[::-1])
        r = Req(h, True)
        msgs = [m for _ in range(3) for m in mixed(r)]
        res = h.run(msgs)
        assert h.mismatches() == []
        out[chains] = [res.served[m.request_id] for m in msgs]
    assert out["v2"] == out["v1"]
    s = h.server
    assert s.sub_wrs and {f"adv@load#{i}" for i in range(2)} <= set(s.queues())
    runs = {v: s._runs[0][v] + s._runs[1][v] for v in s.sub_wrs}
    for v in s.sub_wrs:  # LOADs the chain failed were dispatched too, then the CPU's
        assert runs[v] >= out["v2"].count(v), runs
