"""Chains v2 pipelining (decision C16): a LOAD of a SEALED entry releases the next credit
of its connection once its entry Read has landed; an unsealed block delivered with
ALLOW_UNSEALED, and every other operation, hold the gate to their end. And the credit
slots are dealt out over the connection's recyclers."""

from __future__ import annotations

from pathlib import Path

from kbtpsim.chains.harness import Harness
from kbtpsim.chains.v2.server import RecyclingChainServer
from kbtpsim.nic import Opcode
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario.load import load_scenario
from tests.chains.v2.test_load_direct import _chain

REPO = Path(__file__).resolve().parents[3]


def test_a_sealed_load_releases_the_gate_beside_its_data_write() -> None:
    """``early_load`` ENABLEs the gate in the data Write's step, conditional on the
    Flags word showing VALID|SEALED twice (A and B): the posted B is 0003 and ALLOW_UNSEALED
    redirects the entry's Flags to B, so only a sealed entry passes."""
    ch = _chain()
    early, write = ch.wr("early_load"), ch.wr("load_write")
    assert early.opcode is Opcode.ENABLE and early.step == write.step
    assert early.fields["target"].ref == "qp:gate@load"  # type: ignore[union-attr]  # C27
    assert early.cond is not None and write.cond is not None
    assert early.cond.word == write.cond.word  # the same window of w_load
    # window: Data Length[1:4], A, B, byte count octet; every octet tested
    assert early.cond.compare[3:7] == b"\x00\x03\x00\x03"
    assert early.cond.mask == b"\xff" * 8
    # the data Write accepts B = 0001 (ALLOW_UNSEALED of an unsealed block) too
    assert write.cond.mask[5:7] == b"\xff\xfd"
    assert ("early_load", "gate_nop_load") in ch.graph.edges


def test_credit_slots_alternate_between_recyclers() -> None:
    assert RecyclingChainServer.RECYCLERS == 3  # the default (target.chain_recyclers, C22)
    s = Harness("ideal-be", False, credits=4, chains="v2").server
    assert len(s.recyclers) == 3
    assert [s._slots[i].recycler for i in range(4)] == [0, 1, 2, 0]
    assert [s._slots[i].rec_base for i in range(4)] == [0, 0, 0, s.recycle_wrs]


def _loads(window: int, seal: bool, recyclers: int = 3) -> float:
    """LOAD-only throughput of one connection (ideal-be), in LOADs per second."""
    sc = load_scenario(REPO / "scenarios" / "eval-cx5-load-heavy.yaml", [
        "target.nic.profile=ideal-be", "initiators[0].nic.profile=ideal-be",
        "initiators[0].count=1", f"initiators[0].workload.window={window}",
        "initiators[0].workload.mix={load: 1}", f"target.chain_recyclers={recyclers}",
        f"initiators[0].workload.seal={str(seal).lower()}", "stop.operations=160"])
    results = run_scenario(sc).results
    assert results["operations"]["LOAD"]["count"] == 160
    return float(results["throughput"]["ops_per_s"])


def test_sealed_loads_of_one_connection_overlap() -> None:
    """Simulated throughput (deterministic), three recyclers and grants per 32 credits
    (the defaults, decision C22): at window 8 the sealed LOADs of one connection overlap;
    LOADs of unsealed blocks (ALLOW_UNSEALED) do not, they hold the gate to their
    COMPLETION, so a wider window gains them little (since decision C25 their markers
    and patches run before the gate: 1.07x)."""
    sealed = _loads(8, True) / _loads(1, True)
    unsealed = _loads(8, False) / _loads(1, False)
    assert sealed > 1.6, sealed  # 1.77 at 160 LOADs (1.73 before C25; 1.32 with two
    # recyclers before C22)
    assert _loads(8, True, recyclers=2) / _loads(1, True, recyclers=2) < sealed - 0.3
    assert unsealed < 1.15 < sealed - 0.4, (sealed, unsealed)


def test_one_recycler_bounds_the_pipeline() -> None:
    """``target.chain_recyclers: 1``: the slots' recycle segments run one at a time on
    the connection's one recycler, which then bounds the window-8 throughput."""
    assert _loads(8, True, recyclers=1) / _loads(1, True, recyclers=1) < 1.2


def test_a_late_commit_is_waited_for_before_the_cpu_judges_the_credit() -> None:
    """Found by a campaign once its fetch stalls reached every slot queue: a LOAD
    released the gate early, the gate's ENABLE ran the other variants' (untaken)
    connection WRs, and their CQEs arrived before the LOAD's commit Write's, held on its
    stalled lane. The CPU counted CQEs, not which ones, so it judged the credit ended
    and not served: it served the LOAD again, and the second COMPLETION overtook the
    next request's. The CPU now waits for the CQEs that finish the dispatched variant
    (here the commit, held 20 us by a chain delay)."""
    from kbtpsim.oracle.campaign import Spec
    from kbtpsim.oracle.faults import DelayChain, Faults
    from kbtpsim.oracle.interleaving import X_HANDLE, _owner_and_loader, _run_scripted

    faults = Faults(delay=DelayChain("B", "load", "commit_load", 20_000.0))
    spec = Spec(seed=1, profile="ideal-be", ops=0, faults=faults, chains="v2")
    run, a, b = _owner_and_loader(spec, None, 2, 512)
    env, server = run.env, run.server

    def scenario():  # type: ignore[no-untyped-def]
        yield env.all_of([a.connect(server), b.connect(server)])
        run.new_connections()
        run.keep(a, (yield a.alloc_store(X_HANDLE, b"1" * 512, seal=True)))
        for _ in range(2):  # the first one's commit is held
            run.keep(b, (yield b.load(X_HANDLE, invalidate=False)))

    divs = _run_scripted(run, scenario())
    assert divs == [], [d.as_dict() for d in divs[:3]]
    assert run.fault_counts.get("chain_delays") == 1, run.fault_counts
    assert server.served["LOAD"] == {"nic": 2, "cpu": 0}
