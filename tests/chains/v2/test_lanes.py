"""Lanes (kbtpsim.chains.v2.lanes): every part of a chain on its own worker QP, the
master releasing each lane in each step, the verifier's rules holding per lane."""

from __future__ import annotations

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import Addr, EdgeKind, Role
from kbtpsim.chains.v2.lanes import lanes_of, split_lanes
from kbtpsim.chains.verify import verify
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.wqe import Opcode, WqeFlags


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_lanes_verify_and_keep_every_wr(profile: str) -> None:
    chain = Harness(profile, False, credits=2).plan.chain
    out = split_lanes(chain)
    assert verify(out, get_profile(profile)) == []
    assert lanes_of(out)[:2] == ["dispatch", "load"]
    workers = [w for w in out.wrs() if w.role is Role.WORKER]
    assert workers and all(w.lane == w.part for w in workers)
    # the same WRs but the master's worker ENABLEs, which become one per lane and step
    same = {w.name for w in chain.wrs() if not w.name.startswith("enable_worker_")}
    assert same <= {w.name for w in out.wrs()}
    for w in out.wrs():
        if w.role is Role.MASTER and w.opcode is Opcode.ENABLE and "@" in w.name:
            lane = w.name.split("@")[1]
            assert w.fields["target"] == Addr(f"qp:worker@{lane}")
            released = [b for _, b, d in out.graph.out_edges(w.name, data=True)
                        if d["kind"] is EdgeKind.ENABLE]
            assert released and all(out.wr(b).lane == lane for b in released)


def test_queue_order_exists_only_within_a_lane() -> None:
    out = split_lanes(Harness("ideal-be", False, credits=2).plan.chain)
    for a, b, d in out.graph.edges(data=True):
        if d["kind"] in (EdgeKind.QP_ORDER, EdgeKind.FENCE) and \
                out.wr(a).role is Role.WORKER:
            assert out.wr(a).lane == out.wr(b).lane


def test_a_lane_without_its_fence_is_caught_by_the_verifier() -> None:
    """cx5: a lane's first CAS of a step waits for the lane's Reads (FENCE); without it
    the CAS could compare octets its Read has not placed."""
    out = split_lanes(Harness("cx5", False, credits=2).plan.chain)
    fenced = next(w for w in out.wrs() if w.lane == "load" and w.flags & WqeFlags.FENCE
                  and w.name.endswith(".cas"))
    fenced.flags &= ~WqeFlags.FENCE
    for a, _b in [e for e in out.graph.in_edges(fenced.name)
                  if out.graph.edges[e]["kind"] is EdgeKind.FENCE]:
        out.graph.edges[a, fenced.name]["kind"] = EdgeKind.QP_ORDER
    found = [str(v) for v in verify(out, get_profile("cx5"))]
    assert any("placed-before-use" in f and fenced.name in f for f in found), found
