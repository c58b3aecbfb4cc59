"""Decision C27: each variant releases its credits on a gate of its own per slot
(kbtpsim.chains.v2.vgates): the dispatched chain's shape, the rule
``dispatch-gate-order`` with broken chains, the recycle segment and the CPU's releases."""

from __future__ import annotations

from dataclasses import replace

from kbtpsim.chains.compiler import build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import Addr, Chain, EdgeKind, Role
from kbtpsim.chains.plan import _order, lowering_for
from kbtpsim.chains.v2.dispatch import check_dispatch, split_variants
from kbtpsim.chains.v2.lanes import split_lanes
from kbtpsim.chains.v2.vgates import check_gate_order, variant_nop
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.wqe import Opcode
from tests.chains.test_run import Req, served

PROF = get_profile("ideal-be")
VARIANTS = ("load", "store_inline", "store_read", "alloc_inline", "alloc_read")


def _dispatched() -> Chain:
    chain = build_chain(False, _order(PROF), None, lowering=lowering_for(PROF))
    return split_variants(split_lanes(chain))


def _gate_enables(ch: Chain) -> list[tuple[str, str]]:
    out = []
    for w in ch.wrs():
        t = w.fields.get("target")
        if w.opcode is Opcode.ENABLE and isinstance(t, Addr) and t.ref.startswith("qp:gate"):
            out.append((w.name, t.ref))
    return out


def test_every_release_names_its_variants_own_gate() -> None:
    ch = _dispatched()
    assert check_dispatch(ch) == [] and check_gate_order(ch) == []
    enables = _gate_enables(ch)
    assert enables and all(ref != "qp:gate" for _, ref in enables)  # none on the shared
    for name, ref in enables:
        v = ref.split("@", 1)[1]
        assert v in VARIANTS and name.endswith(v), (name, ref)
        assert ch.wr(name).fields["count"] == Addr(f"wr:{variant_nop(v)}", 1)
        assert ch.graph.edges[name, variant_nop(v)]["kind"] is EdgeKind.ENABLE
    for v in VARIANTS:  # one NOP per variant, on the gate role, in the variant's lane
        nop = ch.wr(variant_nop(v))
        assert nop.role is Role.GATE and nop.lane == v and nop.opcode is Opcode.NOP


def test_a_release_on_a_lane_is_waited_for_before_the_advancer() -> None:
    """``release_load`` runs on the LOAD's lane in the step that ENABLEs the advancer:
    it is signaled, and the sub-master WAITs for it before ``advance_load``."""
    ch = _dispatched()
    rel = ch.wr("release_load")
    assert rel.role is Role.WORKER and rel.signaled
    wait = ch.wr("wait_load_done")
    assert wait.opcode is Opcode.WAIT and wait.lane == "load"
    assert ch.graph.edges["release_load", "wait_load_done"]["kind"] is EdgeKind.COMPLETION


def test_gate_order_rejects_an_unwaited_release() -> None:
    ch = _dispatched()
    ch.graph.remove_edge("release_load", "wait_load_done")
    assert any("release_load may not have run" in f for f in check_gate_order(ch))


def test_gate_order_rejects_an_unsignaled_release() -> None:
    ch = _dispatched()
    ch.graph.nodes["release_load"]["wr"] = replace(ch.wr("release_load"), signaled=False)
    assert any("release_load may not have run" in f for f in check_gate_order(ch))


def test_gate_order_rejects_a_release_on_the_shared_gate() -> None:
    ch = _dispatched()
    w = ch.wr("release_load")
    ch.graph.nodes[w.name]["wr"] = replace(w, fields={**w.fields,
                                                      "target": Addr("qp:gate")})
    assert any("shared gate" in f for f in check_gate_order(ch))


def test_the_segment_advances_no_variant_gate() -> None:
    """The releases' counts are the advancers' now: no recycle step advances a gate
    count (ten fewer WRs a segment on the five-variant chain: 37 on this harness; 34
    since decision C30, whose variants' own look-ups the advancers advance)."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    plan = h.server._slots[0].plan
    assert plan is not None
    assert not [s for s in plan.steps if s.count is not None
                and s.count.target.startswith("qp:gate")]
    assert len(plan.steps) == 34
    private = h.server._slots[0].private
    assert sum(1 for c in private if c.target.startswith("qp:gate@")) == 10


def test_the_cpu_releases_a_credit_on_its_variants_gate() -> None:
    """A LOAD the chain cannot serve (a handle never bound: dispatched to the LOAD,
    answered by the CPU) and a FREE (no variant) go to the CPU; the credits after each
    run on the NIC, so each CPU release let the next credit through, once: on the
    LOAD's gate, then on the shared one. Every result as the reference's."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    r = Req(h)
    msgs = [r.alloc(0x4001), r.load(0x4005, 0), r.load(0x4001, 0), r.free(0x4001),
            r.alloc(0x4002), r.load(0x4002, 0), r.load(0x4002, 8192), r.load(0x4007, 0),
            r.load(0x4002, 0)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert set(res.completions) == {m.request_id for m in msgs} | {0}
    assert served(res, msgs) == ["alloc_inline", None, "load", None, "alloc_inline",
                                 "load", "load", None, "load"]
    # the HELLO's and the FREE's releases; the two LOADs' on the LOAD's own gate
    assert h.server._cpu_gates == 2
