"""FREE on the NIC (decision C20; draft, "Block Free" 1-4, "Free-Block Ring", Free): the
FREE chain's steps, the LOADs' reader counts (a Dekker pair on the NIC's atomic unit) and
the verifier rule ``readers``, what the server serves and hands over, and the oracle."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from kbtpsim.chains.compiler import Geometry, build_chain
from kbtpsim.chains.free import FREE_NEEDS
from kbtpsim.chains.ir import Const
from kbtpsim.chains.lowering import M64
from kbtpsim.chains.plan import decide
from kbtpsim.chains.verify import verify
from kbtpsim.nic import Opcode
from kbtpsim.nic.profiles import get_profile
from kbtpsim.oracle.campaign import Spec, run_campaign
from kbtpsim.oracle.interleaving import run_generation_wrap, run_load_during_free
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario.load import load_scenario
from kbtpsim.scenario.schema import SchemaRuleError
from kbtpsim.wire import Status

REPO = Path(__file__).resolve().parents[3]
GEO = Geometry(seqlock=False, readers=True)


def _chain(variants: tuple[str, ...] = ("load", "free")):  # type: ignore[no-untyped-def]
    return build_chain(False, "big", GEO, variants)


def test_the_free_chain_unbinds_reads_the_count_then_returns_the_block() -> None:
    ch = _chain(("free",))
    unbinds = [ch.wr("fr_unbind_s"), ch.wr("fr_unbind_u")]
    readers, tail = ch.wr("fr_readers"), ch.wr("fr_fa_tail")
    w_bo, w_seq = ch.wr("fr_w_bo"), ch.wr("fr_w_seq")
    # "Block Free" 2: Flags cleared, Generation + 1, whatever the Flags were (0003, 0001)
    for u, flags in zip(unbinds, (3, 1), strict=True):
        add = u.fields["swap_add"]
        assert isinstance(add, Const) and add.value == ((0x10000 - flags) << 48) | 1 << 32
        assert u.opcode is Opcode.MASKED_FETCH_ADD and u.remote_kind == "strided_table"
    # the two unbinds are exclusive: each tests its own Flags octet of the arm word
    s, u = (w.cond for w in unbinds)
    assert s is not None and u is not None
    assert s.mask[6] == 0xFF and s.mask[7] == 0 and u.mask[6] == 0 and u.mask[7] == 0xFF
    # the Dekker pair: the count is read on the unbind's QP, after it
    assert all(readers.lane == w.lane and readers.step > w.step for w in unbinds)
    # the Tail ticket only after the count's test; Block Offset, then Sequence, one QP
    assert tail.step > readers.step and tail.cond is not None
    assert tail.cond.word.producers == ("m_free_fold", "fr_readers")
    assert tail.cond.compare[:5] == b"\x01" + bytes(4) and tail.cond.mask[:5] == b"\xff" * 5
    assert w_bo.lane == w_seq.lane and w_bo.step == w_seq.step
    order = [w.name for w in ch.wrs()]
    assert order.index("fr_w_bo") < order.index("fr_w_seq")
    assert ch.wr("fr_send").step > w_seq.step
    assert verify(ch, get_profile("ideal-be")) == []


def test_loads_count_themselves_readers_around_their_entry_read() -> None:
    ch = _chain(("load",))
    up, read, down = ch.wr("load_readers"), ch.wr("load_read"), ch.wr("load_unread")
    # decision C21: the + 1 takes the handle from the receive, a step before the Read,
    # which the same QP then runs after it
    assert up.lane == read.lane and up.step == read.step - 1
    assert up.fields["raddr"].producer == "recv"  # type: ignore[union-attr]
    assert down.step > ch.wr("load_write").step and down.cond == up.cond
    assert isinstance(down.fields["swap_add"], Const) and down.fields["swap_add"].value == M64
    # without a NIC FREE the LOAD counts nothing
    plain = build_chain(False, "big", Geometry(seqlock=False), ("load",))
    assert "load_readers" not in plain and "load_unread" not in plain


@pytest.mark.parametrize("broken", ["no-up", "no-down", "count-before-unbind"])
def test_the_readers_rule_catches_a_broken_dekker_pair(broken: str) -> None:
    ch = copy.deepcopy(_chain())
    if broken == "no-up":
        ch.wr("load_readers").fields["swap_add"] = Const(0, "+ 0")
    elif broken == "no-down":
        ch.wr("load_unread").cond = None
    else:
        ch.wr("fr_readers").step = ch.wr("fr_unbind_s").step
    found = [v for v in verify(ch, get_profile("ideal-be")) if v.rule == "readers"]
    assert found, broken


def test_free_is_not_built_where_it_cannot_run() -> None:
    for profile, geo in (("cx5", GEO), ("ideal-be", Geometry(seqlock=True, readers=True)),
                         ("ideal-be", Geometry(seqlock=False))):
        d = decide("free", get_profile(profile), False, geo)
        assert not d.offloaded and FREE_NEEDS in d.reasons()[0], (profile, geo)
    # the default variants of a chain leave FREE out where it cannot be built
    assert not any(w.part == "free" for w in build_chain(False, "big").wrs())


def _scenario(**over: str):  # type: ignore[no-untyped-def]
    sets = ("target.nic.profile=ideal-be", "initiators[0].nic.profile=ideal-be",
            "stop.operations=160", "target.operations={free: offload}",
            *(f"{k}={v}" for k, v in over.items()))
    return load_scenario(REPO / "scenarios/eval-cx5-load-heavy.yaml", sets)


def test_the_load_heavy_mix_frees_on_the_nic_and_agrees_with_the_oracle() -> None:
    out = run_scenario(_scenario(), oracle=True)
    t = out.results["targets"]["target"]
    served = t["fallbacks"]["served"]
    assert served["FREE"]["nic"] >= 0.9 * (served["FREE"]["nic"] + served["FREE"]["cpu"])
    assert served["FREE"]["nic"] > 0 and served["LOAD"]["cpu"] == 0
    assert out.results["oracle"]["divergences"] == 0


def test_free_on_the_nic_needs_chains_v2() -> None:
    with pytest.raises((SchemaRuleError, ValueError), match="chains v2"):
        run_scenario(_scenario(**{"target.chains": "v1"}))


def test_a_counted_reader_makes_the_nic_free_hand_over() -> None:
    """B's LOAD chain, delayed between its entry Read and its data Write, counts itself a
    reader: A's FREE unbinds on the NIC, reads the count, hands over; the CPU returns the
    block only after B's chain ended, and B gets the old contents with OK."""
    seen: dict[str, object] = {}
    divs = run_load_during_free("ideal-be", observe=seen, chains="v2", free_on_nic=True)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    assert seen["load"].completion.status == Status.OK  # type: ignore[attr-defined]
    server = seen["server"]
    assert server.served["FREE"] == {"nic": 0, "cpu": 1}  # type: ignore[attr-defined]
    assert server.target._t.chain_free_handovers == 1  # type: ignore[attr-defined]
    assert server.quiesce_waits == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("mix", ["race", "pipeline"])
def test_campaigns_with_free_on_the_nic_agree(mix: str) -> None:
    res = run_campaign(Spec(seed=1, profile="ideal-be", addr_le=False, ops=64, mix=mix,
                            chains="v2", free_on_nic=True))
    assert res.divergences == [], [d.as_dict() for d in res.divergences[:3]]
    assert res.nic_served > 0


def test_a_free_at_generation_ffff_goes_to_the_cpu() -> None:
    """Draft, "Generation" (never 0): the FREE chain hands a FREE of an entry at 0xFFFF to
    the CPU before its unbind; the CPU's + 1 skips 0. The other FREE runs on the NIC."""
    seen: dict[str, object] = {}
    divs = run_generation_wrap("ideal-be", observe=seen, free_on_nic=True)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    assert seen["server"].served["FREE"] == {"nic": 1, "cpu": 1}  # type: ignore[attr-defined]



def test_the_cli_shows_and_explains_the_free_chain(capsys: pytest.CaptureFixture[str]) -> None:
    from kbtpsim.cli import main

    assert main(["chains", "show", "FREE", "--nic", "ideal-be", "--chains", "v2"]) == 0
    out = capsys.readouterr().out
    assert "ADDR_LE off: OFFLOADED" in out and "fr_unbind_s" in out and "fr_fa_tail" in out
    assert main(["chains", "explain", "FREE", "--nic", "cx5", "--chains", "v2"]) == 0
    assert FREE_NEEDS in capsys.readouterr().out


def test_one_free_alone_is_served_by_the_nic() -> None:
    from kbtpsim.chains.measure import measure

    s = measure("ideal-be", "FREE", 4096, chains="v2")
    assert s.served == "NIC" and s.cpu_ns_per_op == 0


def test_a_nic_allocation_is_linearised_when_its_entry_turns_valid() -> None:
    """Every initiator in one trust domain: ``d`` LOADs a handle ``c``'s ALLOC_STORE
    chain is binding. The shadow applies the allocation when its Generation add lands
    (``Finished.bound``), not at its slot Read: a LOAD the CPU serves between the two
    answers NOT_VALID, as the live target does (the finding in docs/oracle.md)."""
    from kbtpsim.oracle.faults import parse_faults

    res = run_campaign(Spec(seed=2, profile="ideal-be", addr_le=False, ops=96, mix="race",
                            chains="v2", free_on_nic=True,
                            faults=parse_faults("stall,reorder,slot,drop")))
    assert res.divergences == [], [d.as_dict() for d in res.divergences[:3]]


def test_free_on_the_nic_refuses_two_trust_domains() -> None:
    """A freed block must be cleared before another trust domain may get it, which the
    FREE chain does not do; nor can chains v1 or a profile without native conditions
    run it: the server refuses with one line naming why."""
    from kbtpsim.chains.server import OffloadedTargetServer, free_on_nic_blockers
    from kbtpsim.nic import Simulation
    from kbtpsim.target import InitiatorConfig, TargetConfig

    inis = (InitiatorConfig("a", b"a" * 16, 2, 0x100, 16),
            InitiatorConfig("b", b"b" * 16, 2, 0x200, 16, trust_domain="other"))
    config = TargetConfig(blocks=8, block_size=4096, initiators=inis)
    assert any("trust domains" in w for w in
               free_on_nic_blockers("v2", get_profile("ideal-be"), config))
    assert len(free_on_nic_blockers("v1", get_profile("cx5"), config)) == 4
    with pytest.raises(ValueError, match=r"FREE on the NIC .*trust domains"):
        OffloadedTargetServer(Simulation(), config, profile="ideal-be", chains="v2",
                              free_on_nic=True)


def test_check_runs_campaigns_with_free_on_the_nic(capsys: pytest.CaptureFixture[str]) -> None:
    from kbtpsim.cli import main

    assert main(["check", "--seed", "1", "--profiles", "ideal-be", "--addr-le", "off",
                 "--mix", "race", "--ops", "24", "--phases", "1", "--free-on-nic"]) == 0
    out = capsys.readouterr().out
    assert "FREE on the NIC" in out and "0 diverged" in out


def test_a_reader_count_left_raised_is_reported() -> None:
    """The LOAD's - 1 adds 0 (a chain bug the verifier's rule readers also rejects): the
    campaign's quiescent point finds the counts raised."""
    def no_unread(chain) -> None:  # type: ignore[no-untyped-def]
        chain.wr("load_unread").fields["swap_add"] = Const(0, "+ 0 (broken)")

    res = run_campaign(Spec(seed=1, profile="ideal-be", addr_le=False, ops=32,
                            mix="valid", chains="v2", free_on_nic=True), no_unread)
    assert any("reader counts left raised" in d.detail for d in res.divergences), \
        [d.as_dict() for d in res.divergences[:3]]


def test_a_reader_count_a_failed_connection_leaves_raised_is_safe() -> None:
    """B's LOAD counted itself a reader, then B's connection failed before its - 1: the
    count stays raised (the server names the handle in ``cut_loads``), so A's FREE of
    the handle afterwards goes to the CPU, which serves it; the oracle agrees."""
    from kbtpsim.oracle.drops import run_drop_during_load

    seen: dict[str, object] = {}
    divs = run_drop_during_load(observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    server = seen["server"]
    assert server.served["FREE"] == {"nic": 0, "cpu": 1}  # type: ignore[attr-defined]
    assert 0x100 in server.cut_loads  # type: ignore[attr-defined]


def test_a_failure_between_a_nic_free_s_two_slot_writes_completes_the_return() -> None:
    """Found by a 400-request campaign (seed 4, churn, every fault, FREE on the NIC): A's
    FREE wrote its Tail ticket's slot's Block Offset and the connection failed before the
    Sequence. The salvage read the slot as the old round's, not consumed, and deferred the
    return for ever: the allocation of that ticket never completed (here A's second
    ALLOC_STORE after reconnecting got NO_SPACE). The salvage now puts the consumed marker
    back and the target writes the slot."""
    from kbtpsim.oracle.drops import run_drop_during_free_return

    seen: dict[str, object] = {}
    divs = run_drop_during_free_return(observe=seen)
    assert divs == [], [d.as_dict() for d in divs[:3]]
    server = seen["server"]
    assert server.salvaged == {"free": 1}  # type: ignore[attr-defined]
    assert server.served["FREE"] == {"nic": 0, "cpu": 1}  # type: ignore[attr-defined]
    slot = server.layout.rings[0].slot_addr(0)  # type: ignore[attr-defined]
    # Ticket 2's allocation consumed the returned slot
    assert server.nic.host.memory.read(slot, 16) == \
        (2).to_bytes(4, "big") + bytes(4) + b"\xff" * 8  # type: ignore[attr-defined]
