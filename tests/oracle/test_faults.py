"""Faults (delays, stalls, reordering, in-flight slot writes, dropped connections, rogue
DIRECT_ALLOC tickets) change timing, never results: the oracle finds no divergence, and
each fault is seen to act. And the draft's interleaving example on the NIC model."""

from __future__ import annotations

import pytest

from kbtpsim.chains.dispatch import TORN_READ
from kbtpsim.nic import WcStatus
from kbtpsim.oracle.campaign import Spec, run_campaign
from kbtpsim.oracle.drops import (
    run_drop_after_store_read,
    run_drop_during_alloc_read,
    run_drop_during_allocation,
    run_drop_during_ticket,
)
from kbtpsim.oracle.faults import parse_faults
from kbtpsim.oracle.interleaving import (
    BLOCK,
    run_interleaving,
    run_load_during_free,
    run_load_then_store,
    run_unsealed_load_then_seal,
)
from kbtpsim.wire import Status


def test_draft_interleaving_example_on_the_nic() -> None:
    """Blocks 100..103: X's chain takes ticket 0 and is delayed before reading slot 0; Y
    takes tickets 1..3 (blocks 101..103) and frees block 101, deferred on slot 0; X gets
    block 100; the deferred free writes slot 0 = {4, 101}; ticket 4 gets block 101."""
    out = run_interleaving()
    assert out.divergences == [], [d.as_dict() for d in out.divergences]
    assert out.x_served_by == "alloc_inline"  # X's allocation ran in its chain
    assert out.x_block == 100 * BLOCK
    assert out.y_blocks == [101 * BLOCK, 102 * BLOCK, 103 * BLOCK]
    assert out.free_deferred
    assert out.slot0 == (4).to_bytes(4, "big") + bytes(4) + (101 * BLOCK).to_bytes(8, "big")
    assert out.ticket4_block == 101 * BLOCK


@pytest.mark.parametrize(("profile", "fault", "event", "seed"), [
    ("ideal-be", "stall", "fetch_stalls", 4), ("ideal-be", "cqe", "cqe_delays", 4),
    ("ideal-be", "hold", "wr_holds", 4), ("ideal-be", "wire", "wire_holds", 4),
    ("ideal-be", "reorder", None, 4),
    ("ideal-be", "slot", "slot_writes_delayed", 4), ("ideal-be", "rogue", "abandoned", 4),
    ("cx5-upstream", "drop", "dropped", 1), ("cx5", "drop", "salvaged", 1),
    ("ideal-be", "drop", "salvaged", 9),
    ("ideal", "drop", "dropped", 1)])
def test_fault_changes_no_result(profile: str, fault: str, event: str | None,
                                 seed: int) -> None:
    """Drops on offloading profiles cut running chains: the server stops them, undoes
    their writes and finishes or forgets their requests (decision O5); ``salvaged``
    counts the credits it took stock of."""
    res = run_campaign(Spec(seed=seed, profile=profile, ops=48, phases=2, mix="fill",
                            faults=parse_faults(fault)))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]
    if event is not None:
        assert res.events.get(event, 0) > 0, res.events


def test_chain_faults_reach_every_queue_of_chains_v2() -> None:
    """The chain faults (fetch stalls, holds, the delayed WR) act on every queue of a
    connection's chains: with chains v2 those of each credit slot (master, workers,
    lanes, sub-masters, advancers) and the recyclers. They were installed on the roles'
    queues only, so a
    v2 campaign's ``delay`` (before an allocation's slot Read, on its lane) never fired
    and its stalls reached the connection QP alone."""
    res = run_campaign(Spec(seed=1, profile="ideal-be", ops=48, phases=2, mix="fill",
                            faults=parse_faults("delay,stall"), chains="v2"))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]
    assert res.events.get("chain_delays", 0) == 1, res.events
    server = res.server
    recyclers = [qp for conn in server.connections.values()  # type: ignore[union-attr]
                 for qp in server.chain_server(conn).recyclers]  # type: ignore[union-attr]
    assert recyclers and all(qp.fault_hook is not None for qp in recyclers)
    hooked = [name for conn in server.connections.values()  # type: ignore[union-attr]
              for name, qp in server.chain_server(conn).queues().items()  # type: ignore[union-attr]
              if qp.fault_hook is not None]
    assert any(name.startswith("worker@") and "#" in name for name in hooked), hooked


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_drop_during_a_chain_allocation(profile: str) -> None:
    """O5 (fixed): the connection fails the moment the chain's FetchAdd on Head lands. The
    chain's later steps, their WAITs satisfied early by the connection QP's flushed CQEs,
    once ran out of order (the entry ended VALID with Data Length 0) and the target never
    learned of the allocation. Now the server stops the chain, writes back what it
    changed and finishes the allocation of that Ticket in software; X's STORE after
    reconnecting finds its handle bound, as in the software target."""
    seen: dict[str, object] = {}
    divs = run_drop_during_allocation(profile, observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:5]]
    server = seen["server"]
    assert sum(server.salvaged.values()) >= 1, server.salvaged  # type: ignore[attr-defined]
    # the allocation (sealed) survived: SEALED, not NOT_VALID as if it had been lost
    assert seen["store"].completion.status == Status.SEALED  # type: ignore[attr-defined]


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_drop_while_a_chain_takes_its_ticket(profile: str) -> None:
    """The connection fails while the chain's FetchAdd on Head is on its way, before it
    reaches Head: it completes in error, having taken no Ticket. The chain server once
    counted its error CQE as a Ticket taken and read the untouched result buffer's
    sentinel as Ticket 0xFFFFFFFF: the CPU finished an allocation with it (the table
    and the reference's Tickets diverged), and the events of every later Ticket were
    linearised before it (docs/oracle.md, Findings)."""
    seen: dict[str, object] = {}
    divs = run_drop_during_ticket(profile, observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:5]]
    assert seen["fetch_add"] is not WcStatus.SUCCESS  # the scenario reached its point
    server = seen["server"]
    assert sum(server.salvaged.values()) >= 1, server.salvaged  # type: ignore[attr-defined]


def test_drop_with_a_congested_loopback_path() -> None:
    """Fault ``wire`` (the target NIC's loopback packets held in flight) with ``drop``:
    connection failures find a chain's FetchAdd on Head on its way. Before the fix of
    ``test_drop_while_a_chain_takes_its_ticket`` this campaign diverged (47
    divergences: a Ticket the shadow had not issued)."""
    res = run_campaign(Spec(seed=4, profile="ideal-be", addr_le=False, ops=120, mix="fill",
                            phases=2, chains="v2", faults=parse_faults("drop,wire")))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]
    assert res.events.get("wire_holds", 0) > 0 and res.events.get("salvaged", 0) > 0


@pytest.mark.parametrize("profile", ["ideal-be", "ideal"])
def test_drop_after_a_chain_store_read_its_data(profile: str) -> None:
    """O5, a Read-source STORE: the connection fails once the chain's data Read has
    placed the new octets in the bound block, before its COMPLETION. The salvage once
    forgot the STORE (the LOAD after reconnecting delivered the new octets, the reference
    the old, and the pool differed); it now serves the STORE again with the octets read."""
    seen: dict[str, object] = {}
    divs = run_drop_after_store_read(profile, observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:5]]
    server = seen["server"]
    assert server.salvaged.get("Read-source store, data read") == 1, \
        server.salvaged  # type: ignore[attr-defined]
    load = seen["load"]
    assert load.completion.status == Status.OK  # type: ignore[attr-defined]
    assert bytes(load.data) == b"B" * 4096  # type: ignore[attr-defined]


def test_drop_while_a_store_reads_a_block_of_many_packets() -> None:
    """Decision O5's former limit: 256 KiB blocks (64 packets of 4 KiB), X's connection
    fails once the STORE's data Read has placed its first octet. A chain read straight
    into the bound block, so the cut Read left part of the new octets there (the LOAD
    after reconnecting delivered them; the reference, the old ones). The verifier's rule
    ``torn-read`` now leaves a Read source of several packets to the CPU, which stages
    it: no divergence, and the fallback names the reason."""
    seen: dict[str, object] = {}
    divs = run_drop_after_store_read("ideal-be", observe=seen, block_size=256 * 1024,
                                     first_packet=True)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    server = seen["server"]
    assert server.fallback_reasons["STORE"] == {TORN_READ: 1}  # type: ignore[attr-defined]


def test_drop_while_an_allocation_reads_a_block_of_many_packets() -> None:
    """The same for an allocation (256 KiB blocks): a chain read straight into the block
    it took, and the disconnect returned the block to the ring holding part of X's
    octets where the software target (staging) left it unchanged. Now the CPU serves it
    (rule ``torn-read``): no divergence."""
    seen: dict[str, object] = {}
    divs = run_drop_during_alloc_read("ideal-be", observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    reasons = seen["server"].fallback_reasons["ALLOC_STORE"]  # type: ignore[attr-defined]
    assert reasons.get(TORN_READ) == 1


@pytest.mark.parametrize("where", ["read cut", "read done", "copy cut", "read cut, cores busy"])
def test_v2_stages_a_store_read_of_many_packets(where: str) -> None:
    """Decision C24: chains v2 read a Read source of several packets (256 KiB blocks)
    into staging and copy it into the block only if the Read's CQE shows no error. A
    failure that cuts the Read (also while other work holds the target's cores, so the
    chain runs on past the Read's flushed CQE) leaves the block as it was and the STORE
    is forgotten; one after the Read (before or during the copy) is served again from
    staging. No divergence either way, and the chain, not the CPU, served the STORE."""
    seen: dict[str, object] = {}
    divs = run_drop_after_store_read(
        "ideal-be", observe=seen, block_size=256 * 1024, chains="v2",
        first_packet=where.startswith("read cut"), during_copy=where == "copy cut",
        busy_ns=200_000.0 if "busy" in where else 0.0)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    server = seen["server"]
    assert TORN_READ not in server.fallback_reasons.get("STORE", {})  # type: ignore[attr-defined]
    salvaged = server.salvaged  # type: ignore[attr-defined]
    assert salvaged == ({"Read-source store": 1} if where.startswith("read cut")
                        else {"Read-source store, data read": 1})


@pytest.mark.parametrize("during_copy", [False, True])
def test_v2_stages_an_allocation_read_of_many_packets(during_copy: bool) -> None:
    """The same for an allocation (decision C24): cut in its Read or in its copy, the
    salvage finishes or returns it as the software target would; no divergence."""
    seen: dict[str, object] = {}
    divs = run_drop_during_alloc_read("ideal-be", observe=seen, chains="v2",
                                      during_copy=during_copy)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    reasons = seen["server"].fallback_reasons["ALLOC_STORE"]  # type: ignore[attr-defined]
    assert TORN_READ not in reasons


def test_rdmap_placement_at_the_target_keeps_everything_on_the_cpu() -> None:
    """O7: with the target NIC placing its RDMA Writes RDMAP-style, a loopback patch's or
    marker's CQE does not imply its placement, and chains once read stale WQE fields and
    arm words (an ALLOC_STORE chain committed without its FetchAdd: 12 of 12 campaigns
    diverged). The verifier's rule ``placement`` now refuses every chain on such a NIC,
    so the CPU serves all of it and the results are the software target's."""
    res = run_campaign(Spec(seed=1, profile="ideal-be", addr_le=False, ops=32, phases=2,
                            mix="fill", faults=parse_faults("reorder-target")))
    assert res.ok, [d.as_dict() for d in res.divergences[:3]]
    assert res.offloaded == () and res.nic_served == 0 and res.cpu_served > 0


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_v2_load_racing_a_free_holds_the_block_back(profile: str) -> None:
    """C13: chains v2's LOAD does not re-read the entry; the FREE's block goes back to
    the ring only once the other connection's LOAD chain (delayed 100 us between its
    entry Read and its data Write) has finished: B gets the old contents with OK from
    the NIC, and A's next store gets the block only then."""
    seen: dict[str, object] = {}
    divs = run_load_during_free(profile, observe=seen, chains="v2")
    assert divs == [], [d.as_dict() for d in divs[:3]]
    res = seen["load"]
    assert res.completion.status == Status.OK  # type: ignore[attr-defined]
    server = seen["server"]
    assert server.served["LOAD"] == {"nic": 1, "cpu": 0}  # type: ignore[attr-defined]
    assert server.quiesce_waits == 1  # type: ignore[attr-defined]
    assert server.quiesce_wait_ps > 50_000_000  # type: ignore[attr-defined]


def test_v2_without_quiescence_delivers_the_new_contents() -> None:
    """The same interleaving with the block returned at once (mutant v2-no-quiesce):
    the oracle sees B's buffer hold A's new data."""
    from kbtpsim.oracle.node import V2Mutation

    divs = run_load_during_free("ideal-be", chains="v2", transform=V2Mutation(quiesce=False))
    assert [d.kind for d in divs][:1] == ["load-data"]


def test_v2_unsealed_load_holds_the_gate_until_it_completed() -> None:
    """C16: a LOAD of an unsealed block (ALLOW_UNSEALED), delayed 100 us before its data
    Write, and an inline STORE to the same handle right behind it on the connection: the
    LOAD does not release the next credit early, so it delivers the old contents (both
    from the NIC) and the STORE runs after it."""
    seen: dict[str, object] = {}
    divs = run_load_then_store("ideal-be", observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    assert seen["load"].completion.status == Status.OK  # type: ignore[attr-defined]
    assert seen["store"].completion.status == Status.OK  # type: ignore[attr-defined]
    served = seen["server"].served  # type: ignore[attr-defined]
    assert served["LOAD"] == {"nic": 1, "cpu": 0}
    assert served["STORE"] == {"nic": 1, "cpu": 0}


def test_v2_early_release_of_an_unsealed_load_delivers_the_new_contents() -> None:
    """The same with the early release's SEALED test taken out (mutant v2-early-unsealed):
    the STORE's chain overwrites the block before the LOAD's Write reads it."""
    from kbtpsim.oracle.mutants import CATALOGUE

    divs = run_load_then_store("ideal-be", transform=CATALOGUE["v2-early-unsealed"].transform)
    assert [d.kind for d in divs][:1] == ["load-data"]


@pytest.mark.parametrize("profile", ["ideal", "ideal-be", "cx5"])
def test_chain_load_racing_a_free_and_reallocation(profile: str) -> None:
    """O3 (fixed): a chain's LOAD reads the entry and the block at different times; a FREE
    and a re-allocation of the block in between once delivered another handle's data
    under the old Generation. The chain re-reads the entry after its data Write and hands
    the LOAD to the CPU when Flags or Generation changed (seqlock)."""
    seen: dict[str, object] = {}
    divs = run_load_during_free(profile, observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    res = seen["load"]
    assert res.completion.status != Status.OK  # type: ignore[attr-defined]
    served = seen["server"].served["LOAD"]  # type: ignore[attr-defined]
    assert served["cpu"] >= 1, served  # handed over by the re-check


def test_a_load_completion_sent_unacknowledged_before_a_drop_is_not_a_divergence() -> None:
    """Found with decision C21 (FREE on the NIC): a LOAD's chain sent its COMPLETION, the
    initiator received it, and the connection failed before the acknowledgement reached
    the target, which therefore cannot count the LOAD (decision O5: served only if its
    Send's CQE came). RC leaves that open; a LOAD changes nothing in the target, so the
    reference applies it as served and the live target's completion counters are
    compared with it added (``ObservedServer.unacknowledged``). This campaign had 1
    divergence ("message 38 the shadow never sent") before."""
    res = run_campaign(Spec(seed=1, profile="ideal-be", addr_le=False, ops=96,
                            mix="pipeline", faults=parse_faults("stall,reorder,slot,drop"),
                            chains="v2", free_on_nic=True))
    assert res.ok, res.divergences[:1]
    assert res.events["unacknowledged"] >= 1


def test_a_load_send_flushed_before_its_test_ran_is_not_taken_as_sent() -> None:
    """The check above once took a COMPLETION Send for sent when it had only started:
    a Send whose condition was still being read (or had failed) retires flushed at the
    failure too. This campaign's LOAD of an unsealed block (its test failed: no
    COMPLETION) was then counted OK in the live counters while the reference, applying
    it, answered NOT_SEALED ("completion counters" divergence, once the CPU woke only for
    the CQEs it acts on). A Send counts as sent only if it executed (trace phase
    ``executed``)."""
    res = run_campaign(Spec(seed=2, profile="ideal-be", addr_le=False, ops=96,
                            mix="pipeline", faults=parse_faults("stall,reorder,slot,drop"),
                            chains="v2", free_on_nic=True))
    assert res.ok, res.divergences[:1]


def test_a_block_returning_while_the_cpu_waits_for_its_tail_ticket_is_parked_once() -> None:
    """Found while the CPU gave its core back during its FetchAdd through the NIC (a
    change tried and reverted on 2026-12-05, docs/oracle.md): the returner took a
    quiesced block off its list before the Tail ticket came, another connection's pass
    quiesced the same block again meanwhile, and its second return crashed the target
    ("block 0x1800 does not wait for quiescence"). With two cores the same window exists
    while the returner spins; the block now stays listed until its ticket is taken."""
    res = run_campaign(Spec(seed=1, profile="ideal-be", addr_le=False, ops=96,
                            mix="default", faults=parse_faults("stall,reorder,slot,drop"),
                            chains="v2", free_on_nic=True))
    assert res.ok, res.divergences[:1]


def test_a_returned_free_is_posted_before_its_credit_goes() -> None:
    """Found by a battery of campaigns with 8 KiB blocks (while the CPU gave its core
    back during its FetchAdds, since reverted): the Tail returner gathered the
    completions of several returned frees and posted them after its last FetchAdd.
    During a later ticket, the connection of a FREE the target had already completed
    let its credit go (on the other core), and the COMPLETION was then posted with no
    credit held (a crash: "the CPU posts a work request while it holds no credit").
    Each return's effects are now posted before the next ticket."""
    res = run_campaign(Spec(seed=2, profile="ideal-be", addr_le=False, ops=200,
                            mix="race", faults=parse_faults("delay,stall,reorder,slot,drop"),
                            chains="v2", free_on_nic=True, block_size=8192))
    assert res.ok, res.divergences[:1]


def test_an_unbind_whose_write_lands_after_its_cqe_is_linearised_when_it_lands() -> None:
    """Found by a long campaign (500 requests, FREE on the NIC): a FREE chain's unbind,
    a loopback masked FetchAdd, got its response (and its CQE) before its own write of
    the entry became visible: the responder's posted writes were queued behind earlier
    ones. The CQE then carried no ``sampled`` time and the oracle linearised the FREE at
    the CQE's time, 0.2 us after the entry had changed, and a LOAD the CPU served in
    between diverged (NOT_VALID in the target, NOT_SEALED in the reference). The
    responder knows when its write will land, and the response now carries that time."""
    res = run_campaign(Spec(seed=1, profile="ideal-be", addr_le=False, ops=500, phases=5,
                            mix="race", faults=parse_faults("delay,stall,reorder,slot,drop"),
                            chains="v2", free_on_nic=True))
    assert res.ok, res.divergences[:1]


def test_a_load_the_cpu_answers_holds_the_next_request_back() -> None:
    """Decision C31: the LOAD's release behind its entry Read is opportunistic. A LOAD of
    an unsealed block without ALLOW_UNSEALED fails its SEALED test on the NIC (the CPU
    answers NOT_SEALED), and the STORE that seals the block right behind it runs only
    after that answer; a release ignoring its markers (mutant ``v2-early-unguarded``)
    lets the STORE's COMPLETION overtake it."""
    from kbtpsim.oracle.mutants import CATALOGUE

    seen: dict[str, object] = {}
    assert run_unsealed_load_then_seal("ideal-be", observe=seen) == []
    report = seen["server"].op_report()  # type: ignore[attr-defined]
    assert report["LOAD"]["cpu"] == 2 and report["STORE"]["nic"] == 2
    divs = run_unsealed_load_then_seal("ideal-be",
                                       transform=CATALOGUE["v2-early-unguarded"].transform)
    assert divs and divs[0].kind == "completion" and divs[0].request_id == 2
