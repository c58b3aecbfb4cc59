"""Decision C25: a LOAD is dispatched before its connection's gate; its credit-local
lanes (markers and patches of the request) run at once, ENABLEd by the master, and its
sub-master WAITs for the gate before the lanes that read the table or the CPU's octets.
The verifier rule ``dispatch-gated`` (kbtpsim/chains/v2/gating.py), with broken chains."""

from __future__ import annotations

import copy

from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import Addr, Const, EdgeKind
from kbtpsim.chains.v2.dispatch import check_dispatch
from kbtpsim.chains.v2.gating import check_gated, credit_local
from kbtpsim.nic.wqe import Opcode


def _chain():  # type: ignore[no-untyped-def]
    """The whole dispatched chain a connection posts on ideal-be (every variant)."""
    return copy.deepcopy(Harness("ideal-be", False, credits=2, chains="v2").server.chain)


def _master_order(ch, lane: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [w.name for w in ch.wrs() if w.role.value == "master" and w.lane == lane]


def test_which_load_wrs_are_credit_local() -> None:
    """Markers and patches of the request are the credit's own; the entry Read is not,
    nor is the marker whose word holds the CPU's session octet (GOODBYE clears it while
    the credits ahead run), nor a connection WR."""
    ch = _chain()
    local = {w.name for w in ch.wrs() if w.part == "load" and credit_local(w)}
    assert {"m_load_msg", "m_load_len", "p_dd_load", "p_inv_load", "c_inv_load",
            "p_au_commit_load"} <= local
    assert not {"load_read", "m_load_gs", "load_write", "load_send", "early_load",
                "release_load", "commit_load"} & local


def test_a_load_is_dispatched_before_the_gate_and_waits_for_it_itself() -> None:
    ch = _chain()
    master = [w.name for w in ch.wrs() if w.role.value == "master" and not w.lane]
    order = {n: i for i, n in enumerate(master)}
    assert order["wait_recv"] < order["dispatch_a_load"] < order["wait_prev"]
    pre = [n for n in master if n.startswith("dispatch_l_load")]
    assert pre and all(order[n] < order["wait_prev"] for n in pre)
    for n in pre:  # conditional on the request being a LOAD, as the dispatch
        assert ch.wr(n).cond == ch.wr("dispatch_a_load").cond
    other = [n for n in master if n.startswith("dispatch_a_") and n != "dispatch_a_load"]
    assert other and all(order[n] > order["wait_prev"] for n in other)
    sub = _master_order(ch, "load")
    assert sub[0] == "wait_prev_load"
    gate = ch.wr("wait_prev_load")
    assert gate.opcode is Opcode.WAIT
    assert gate.fields["target"] == Addr("cq:gate")
    assert ch.graph.has_edge("wait_prev_load", sub[1])
    assert ch.graph.edges["wait_prev_load", sub[1]]["kind"] is EdgeKind.QP_ORDER
    assert check_dispatch(ch) == []


def test_gated_rule_catches_an_entry_read_before_the_gate() -> None:
    """The sub-master's WAIT counting the credit's own receive instead of the gate (the
    mutant ``v2-load-ungated``): the entry Read and the session marker are reported."""
    ch = _chain()
    w = ch.wr("wait_prev_load")
    w.fields["target"] = Addr("cq:recv")
    w.fields["count"] = Const(1, "this credit's receive")
    found = check_gated(ch)
    assert any("load_read" in f for f in found), found
    assert any("m_load_gs" in f for f in found), found
    assert all(f.startswith("dispatch-gated: ") for f in found)


def test_gated_rule_catches_a_table_read_on_a_lane_run_before_the_gate() -> None:
    """A lane the master ENABLEs before the gate holding a WR that is not credit-local
    (here the session marker moved onto it) is reported."""
    ch = _chain()
    pre = ch.wr("dispatch_l_load__cqe")
    ch.edge(pre.name, "m_load_gs", EdgeKind.ENABLE)
    found = check_gated(ch)
    assert any("m_load_gs" in f and "dispatch_l_load__cqe" in f for f in found), found


def test_a_load_at_window_one_pays_one_wait() -> None:
    """Simulated latency of one LOAD alone (deterministic): the sub-master's gate WAIT
    costs a decode and a fetch, the early release on the sub-master a little more (5056
    ns before C25, 5189 ns with it)."""
    from kbtpsim.chains.measure import measure

    got = measure("ideal-be", "LOAD", 4096, chains="v2").latency_ns
    assert 5056 < got < 5250, got


def test_an_early_release_alone_in_its_step_runs_on_the_sub_master() -> None:
    """C25: the stores' early releases are sub-master WRs, right after the ENABLE of
    their step's connection WRs, conditional as before; since C31 the LOAD's runs on
    its entry Read's lane instead (tests/chains/v2/test_load_recv.py)."""
    ch = _chain()
    for v in ("alloc_inline", "store_inline"):
        w = ch.wr(f"early_{v}")
        assert w.role.value == "master" and w.lane == v, (w.name, w.role, w.lane)
        assert w.cond is not None and w.fields["target"] == Addr(f"qp:gate@{v}")  # C27
    for v in ("alloc_inline", "store_inline"):
        sub = _master_order(ch, v)
        assert sub[sub.index(f"early_{v}") - 1].startswith(f"enable_conn_{v}_")
    w = ch.wr("early_load")
    assert w.role.value == "worker" and w.lane == "load" and w.twin == "release_load"
    assert w.fields["target"] == Addr("qp:gate@load")
    assert "early_load" not in _master_order(ch, "load")
    assert ch.graph.edges["early_load", "gate_nop_load"]["kind"] is EdgeKind.ENABLE


def test_after_the_gate_a_load_runs_only_what_reads_the_table_or_the_cpus_octets() -> None:
    """Decision C28: the lanes the LOAD's sub-master ENABLEs after its gate WAIT are the
    entry Read's and the Generation/Status marker's (it reads the CPU's session octet),
    each alone in step 1; every other step-1 marker and patch is on a lane the master
    ENABLEs before the gate. Before C28 the descriptor-length marker and two
    ALLOW_UNSEALED patches ran after the gate behind that marker, the last of them
    finishing after the entry Read: the credit's path from gate to release waited for
    them."""
    ch = _chain()
    gated = {w.fields["target"].ref.split("@", 1)[1]  # type: ignore[union-attr]
             for w in ch.wrs() if w.role.value == "master" and w.lane == "load"
             and w.opcode is Opcode.ENABLE and w.step == 1
             and w.fields["target"].ref.startswith("qp:worker@")}  # type: ignore[union-attr]
    assert gated == {"load", "load__req"}
    step1 = {lane: [w.name for w in ch.wrs() if w.lane == lane and w.step == 1
                    and w.role.value == "worker"] for lane in gated}
    # C31: the early release behind the Read, on its lane
    assert step1 == {"load": ["load_read", "early_load"], "load__req": ["m_load_gs"]}
    early = {w.fields["target"].ref.split("@", 1)[1]  # type: ignore[union-attr]
             for w in ch.wrs() if w.name.startswith("dispatch_l_load")}
    assert {"load__au", "load__dd", "load__cqe"} <= early
    assert "m_load_len" in {w.name for w in ch.wrs() if w.lane == "load__dd"}  # C31
