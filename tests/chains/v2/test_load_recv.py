"""Chains v2's two-step LOAD (decision C21): the receive places the Block Handle straight
into the LOAD's entry Read, which runs in the first step beside the request markers; the
data Write and the COMPLETION test the entry together with the markers' octets. Its
structure, every edge case against the software target (``Harness.mismatches``), the
restore of what ALLOW_UNSEALED patches, and its verifier rules with broken chains."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from kbtpsim.chains.compiler import build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import EdgeKind, Placed, Role
from kbtpsim.chains.measure import measure
from kbtpsim.chains.plan import _order, lowering_for
from kbtpsim.chains.v2 import RecycleError, prepare_chain
from kbtpsim.chains.verify import verify
from kbtpsim.chains.vocab import W_GS, Geometry
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.wqe import WqeFlags
from tests.chains.test_run import DATA, INL, Req, served

PROF = get_profile("ideal-be")
AU = 0x0010  #: ALLOW_UNSEALED


def _built():  # type: ignore[no-untyped-def]
    return build_chain(False, _order(PROF), Geometry(seqlock=False),
                       lowering=lowering_for(PROF))


def _status(res, m) -> int:  # type: ignore[no-untyped-def]
    return int.from_bytes(res.completions[m.request_id][22:24], "big")


def test_the_receive_places_the_handle_into_the_entry_read() -> None:
    """The Read runs in step 1, its remote address placed by the receive, conditional
    only on its own range test; nothing patches it; the header test is the dispatch's."""
    raw = _built()
    recv = raw.wr("recv")
    assert any(p.dest == "wqe:load_read.raddr" and p.length == 7 for p in recv.places)
    ch = prepare_chain("v2", raw, PROF)
    read = ch.wr("load_read")
    assert read.step == 1 and read.fields["raddr"] == Placed(
        "recv", "Block Handle << 8", "big", "request")
    assert read.cond is not None and read.cond.word.loc == "wqe:load_read.raddr"
    assert {ch.wr(n).step for n in ("load_write", "load_send")} == {2}
    assert ch.wr("early_load").step == 1  # C31: behind the Read, on its lane
    for gone in ("p_h_load", "m_load_hdr", "m_load_range", "c_au_load"):
        assert gone not in ch, gone
    assert "load" in ch.headers
    assert verify(ch, PROF) == []


def test_a_load_takes_two_steps_not_three() -> None:
    """Simulated latency of one LOAD alone (deterministic): the two-step LOAD answers a
    step sooner than C15's three-step one (the same profile with reader counts, which
    keep C15's)."""
    two = measure("ideal-be", "LOAD", 4096, chains="v2").latency_ns
    assert two < 5300, two  # C15's: 6019 ns (docs/chains.md)


def test_edge_cases_equal_software() -> None:
    """A handle whose top octet is not the table's, one outside the readable block,
    Generation and Status not 0, a short descriptor, trailing octets: all go to the CPU
    and get the software target's answer; the well-formed LOADs run on the NIC."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    r = Req(h)
    msgs = [r.alloc(0x4001), r.load(0x4001, 0),
            r.load((1 << 56) | 0x4001, 8192),  # top octet: aliases 0x4001's entry
            r.load(0x5001, 16384),  # outside the readable block
            r.load(0x4001, 24576, gen=3), r.load(0x4001, 32768, 512),
            r.load(0x4001, 40960, flags=AU)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == ["alloc_inline", "load", None, None, None, None, "load"]
    assert [_status(res, m) for m in msgs][2:6] != [0, 0, 0, 0]


def test_allow_unsealed_patches_are_restored_for_the_next_round() -> None:
    """Two credit slots, so every other request reuses a slot's WQEs: in each slot an
    unsealed block loaded with ALLOW_UNSEALED (the NIC frees the SEALED bit of four
    tests), then without it (the CPU answers NOT_SEALED: the masks were restored), then
    with it again."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    r = Req(h)
    msgs = [r.alloc(0x4002, DATA[::-1], INL), r.alloc(0x4003, DATA, INL),
            r.load(0x4002, 0, flags=AU), r.load(0x4003, 8192, flags=AU),
            r.load(0x4002, 16384), r.load(0x4003, 24576),
            r.load(0x4002, 32768, flags=AU), r.load(0x4003, 40960, flags=AU)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == ["alloc_inline"] * 2 + ["load"] * 2 + [None] * 2 \
        + ["load"] * 2
    assert _status(res, msgs[4]) != 0 and _status(res, msgs[5]) != 0


def test_a_load_outside_the_session_goes_to_the_cpu() -> None:
    """Before HELLO the CPU's session octet (in the Generation/Status marker's window)
    is 0: the LOAD's tests fail and the CPU answers it as the software target."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    r = Req(h)
    load = r.load(0x4001, 0)
    res = h.run([load], hello=False)
    assert h.mismatches() == [] and res.served[load.request_id] is None


def test_guarded_rule_needs_every_marker_octet_in_the_window() -> None:
    """Rule ``guarded``: the entry Read runs on its range test alone, so the data Write's
    test must hold every request marker's octet. Drop the Generation marker's octet from
    the Write's mask and the verifier names it."""
    ch = prepare_chain("v2", _built(), PROF)
    w = ch.wr("load_write")
    assert w.cond is not None
    at = W_GS - 5  # the window starts at w_load+5
    w.cond = replace(w.cond, mask=w.cond.mask[:at] + b"\x00" + w.cond.mask[at + 1:])
    got = {(v.wr, v.rule) for v in verify(ch, PROF)}
    assert ("load_write", "guarded") in got, got


def test_a_mask_placed_at_run_time_names_its_patch() -> None:
    """Rule ``consistency`` on a run-time mask: the Write's test says the Send's patch
    frees its SEALED bit, which writes the Send's mask, not the Write's."""
    ch = prepare_chain("v2", _built(), PROF)
    w = ch.wr("load_write")
    assert w.cond is not None and w.cond.mask_source is not None
    w.cond = replace(w.cond, mask_source=replace(w.cond.mask_source,
                                                 producer="p_au_load_send"))
    got = {(v.wr, v.field, v.rule) for v in verify(ch, PROF)}
    assert ("load_write", "cond_mask", "consistency") in got, got


def test_without_dispatch_the_chain_is_refused() -> None:
    """Rule ``dispatch-header``: the LOAD has no header marker of its own, so only
    per-operation dispatch may run it."""
    with pytest.raises(RecycleError, match="dispatch"):
        prepare_chain("v2", _built(), PROF, dispatch=False)


def test_aliased_and_out_of_range_handles_agree_with_the_reference() -> None:
    """The scripted run behind mutants ``v2-load-recv-top`` and
    ``v2-load-recv-unguarded`` (a handle differing from a bound one only in its top
    octet, one outside the readable block): no divergence, and the bound handle's
    LOADs run on the NIC."""
    from kbtpsim.oracle.interleaving import run_aliased_handles

    observe: dict[str, object] = {}
    assert run_aliased_handles("ideal-be", 1, observe=observe) == []
    server = observe["server"]
    assert server.served["LOAD"] == {"nic": 2, "cpu": 4}  # type: ignore[attr-defined]


def test_explain_names_the_two_step_load(capsys: pytest.CaptureFixture[str]) -> None:
    """``kbtpsim chains explain LOAD --chains v2`` says where C21's LOAD runs (ideal-be)
    and where it does not (cx5: CAS-armed conditions keep C15's)."""
    from kbtpsim.cli import main

    assert main(["chains", "explain", "LOAD", "--nic", "ideal-be", "--chains", "v2"]) == 0
    assert "decision C21" in capsys.readouterr().out
    assert main(["chains", "explain", "LOAD", "--nic", "cx5", "--chains", "v2"]) == 0
    assert "decision C21" not in capsys.readouterr().out


def test_with_reader_counts_the_count_takes_the_handle_from_the_receive() -> None:
    """FREE on the NIC (decision C20): the receive places the handle into the reader
    count's FetchAdd, which runs in step 1, the entry Read (its address patched from
    there) a step later on the same QP, the request markers beside that Read; every
    case against the software target, FREE included."""
    from kbtpsim.chains.vocab import OPERATIONS

    raw = build_chain(False, _order(PROF), Geometry(seqlock=False, readers=True),
                      (*OPERATIONS["LOAD"], *OPERATIONS["ALLOC_STORE"], "free"),
                      lowering=lowering_for(PROF))
    assert any(p.dest == "wqe:load_readers.raddr" for p in raw.wr("recv").places)
    ch = prepare_chain("v2", raw, PROF)
    up, read = ch.wr("load_readers"), ch.wr("load_read")
    assert (up.step, read.step, ch.wr("load_write").step) == (1, 2, 3)
    assert up.lane == read.lane and ch.wr("m_load_gs").step == 2
    assert verify(ch, PROF) == []
    h = Harness("ideal-be", False, credits=2, chains="v2",
                variants=(*OPERATIONS["LOAD"], *OPERATIONS["ALLOC_STORE"], "free"))
    r = Req(h)
    msgs = [r.alloc(0x4001), r.load(0x4001, 0), r.load(0x4001, 8192, flags=AU),
            r.load((1 << 56) | 0x4001, 16384), r.free(0x4001), r.load(0x4001, 24576)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == ["alloc_inline", "load", "load", None, "free", None]


def test_the_early_release_runs_behind_the_entry_read_on_its_lane() -> None:
    """Decision C31: ``early_load`` is the Read's lane's next WR, fenced, opportunistic
    with the final release as its twin; the connection WRs' Data Descriptor and
    INVALIDATE patches run on one lane before the descriptor-length marker it tests."""
    ch = prepare_chain("v2", _built(), PROF)
    early = ch.wr("early_load")
    assert early.role is Role.WORKER and early.lane == "load" and early.step == 1
    assert early.flags & WqeFlags.FENCE and early.twin == "release_load"
    assert ch.graph.edges["load_read", "early_load"]["kind"] is EdgeKind.FENCE
    dd = [w.name for w in ch.wrs() if w.lane == "load__dd"]
    assert dd == ["p_dd_load", "p_inv_load", "c_inv_load", "m_load_len"]
    assert verify(ch, PROF) == []


def _rules(ch, prof=PROF) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {(v.wr, v.rule) for v in verify(ch, prof)}


def test_an_unfenced_early_release_reads_the_entry_unordered() -> None:
    """Without its FENCE the release may test the entry before the Read placed it:
    only request markers may be read unordered (rule ``placed-before-use``)."""
    ch = prepare_chain("v2", _built(), PROF)
    ch.wr("early_load").flags = WqeFlags.NONE
    ch.graph.edges["load_read", "early_load"]["kind"] = EdgeKind.QP_ORDER
    assert ("early_load", "placed-before-use") in _rules(ch)


def test_a_patch_behind_no_marker_is_named() -> None:
    """The descriptor-length marker on another lane than the Data Descriptor patches:
    the release could let the next credit run the data Write unpatched (rule
    ``opportunistic``)."""
    ch = prepare_chain("v2", _built(), PROF)
    ch.wr("m_load_len").lane = "load__elsewhere"
    found = [v for v in verify(ch, PROF) if v.rule == "opportunistic"]
    assert any("p_dd_load" in v.message for v in found), found


def test_an_early_release_needs_an_ordered_twin() -> None:
    ch = prepare_chain("v2", _built(), PROF)
    ch.wr("early_load").twin = "commit_load"  # a Write, not the release
    assert ("early_load", "opportunistic") in _rules(ch)
    ch.wr("early_load").twin = "no_such_wr"
    assert ("early_load", "opportunistic") in _rules(ch)


def test_markers_imply_their_lanes_patches_only_under_in_order_placement() -> None:
    ch = prepare_chain("v2", _built(), PROF)
    rdmap = dataclasses.replace(PROF, placement="rdmap")
    assert ("early_load", "opportunistic") in _rules(ch, rdmap)


def test_a_mask_patch_is_harmless_only_under_the_releases_own_test() -> None:
    """ALLOW_UNSEALED's patches of the data Write's and Send's masks need no marker:
    they free the SEALED bit that the early release's own test requires. With another
    compare, the release no longer implies their tests, and the patches are named."""
    ch = prepare_chain("v2", _built(), PROF)
    early = ch.wr("early_load")
    assert early.cond is not None
    at = 4  # the Flags' low octet in the window (w_load+9)
    early.cond = replace(early.cond, compare=early.cond.compare[:at] + b"\x01"
                         + early.cond.compare[at + 1:])
    found = [v for v in verify(ch, PROF) if v.rule == "opportunistic"]
    assert any("p_au_load_write" in v.message for v in found), found
