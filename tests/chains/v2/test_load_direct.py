"""Chains v2's direct LOAD (decision C15): the LOAD reads its own table entry, conditional
on its request markers, and tests that entry in the data Write and the COMPLETION; every
case against the software target (``Harness.mismatches``), and its verifier rule
``guarded`` with a broken chain. (With ADDR_LE off, no reader counts and native
conditions the LOAD is C21's two-step one: tests/chains/v2/test_load_recv.py; the
structural tests here build C15's on ``ideal`` with ADDR_LE.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbtpsim.chains.compiler import build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.plan import _order, lowering_for
from kbtpsim.chains.v2 import prepare_chain
from kbtpsim.chains.verify import verify
from kbtpsim.chains.vocab import Geometry
from kbtpsim.nic.profiles import get_profile
from tests.chains.test_run import DATA, INL, SEAL, Req, served

PROF = get_profile("ideal-be")
#: C15's LOAD, for the structural tests: little-endian WQE fields with ADDR_LE
C15 = get_profile("ideal")
AU = 0x0010  #: ALLOW_UNSEALED


def _status(res, m) -> int:  # type: ignore[no-untyped-def]
    return int.from_bytes(res.completions[m.request_id][22:24], "big")


def _chain():  # type: ignore[no-untyped-def]
    chain = build_chain(True, _order(C15), Geometry(seqlock=False),
                        ("load", "store_inline", "store_read"),  # what ideal offloads
                        lowering=lowering_for(C15))
    return prepare_chain("v2", chain, C15)


def test_v2_load_reads_its_own_entry() -> None:
    """The LOAD's sub-chain has its own entry Read, conditional on its arm word; the data
    Write and the COMPLETION test the entry that Read placed."""
    ch = _chain()
    read = ch.wr("load_read")
    assert read.cond is not None and read.cond.word.loc == "buf:arm_load"
    for name in ("load_write", "load_send", "commit_load"):
        assert ch.wr(name).cond.word.loc == "buf:w_load+5", name
    assert ch.wr("c_au_load").step == 1 and ch.wr("c_au_load").cond is not None
    assert verify(ch, C15) == []


@pytest.mark.parametrize("inv", [False, True], ids=["plain", "invalidate"])
def test_sealed_unsealed_and_allow_unsealed_equal_software(inv: bool) -> None:
    """Sealed: every LOAD on the NIC. Unsealed: with ALLOW_UNSEALED on the NIC (the Flags
    scatter redirected by ``c_au_load``), without it the CPU answers NOT_SEALED; an
    unbound handle (NOT_VALID) and a short Data Descriptor (TOO_LARGE) go to the CPU.
    Several rounds per slot, so the redirect is restored before the next request."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    r = Req(h, inv)
    msgs = [r.alloc(0x4001), r.alloc(0x4002, DATA[::-1], INL),  # sealed, unsealed
            r.load(0x4001, 0, flags=AU), r.load(0x4002, 8192, flags=AU),
            r.load(0x4002, 16384), r.load(0x4001, 24576),
            r.load(0x4003, 32768, flags=AU), r.load(0x4002, 40960, 512, flags=AU),
            r.load(0x4002, 49152, flags=AU), r.load(0x4001, 57344)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert [_status(res, m) for m in msgs] == [0, 0, 0, 0, 7, 0, 3, 8, 0, 0]
    assert served(res, msgs) == ["alloc_inline", "alloc_inline", "load", "load", None,
                                 "load", None, None, "load", "load"]


def test_store_sealing_the_block_seen_by_the_next_load() -> None:
    """A STORE with SEAL between two LOADs without ALLOW_UNSEALED: the first goes to the
    CPU (NOT_SEALED), the second, after the seal, is served by the NIC."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    r = Req(h)
    msgs = [r.alloc(0x4001, DATA, INL), r.load(0x4001, 0), r.store(0x4001, DATA[::-1],
                                                                   INL | SEAL),
            r.load(0x4001, 8192)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == ["alloc_inline", None, "store_inline", "load"]


def test_guarded_rule_catches_an_entry_read_not_behind_the_markers() -> None:
    """Rule ``guarded``: the data Write is conditional on a word the entry Read places, so
    that Read must be conditional on every request marker. Drop one marker octet from
    its mask and the verifier names it."""
    ch = _chain()
    read = ch.wr("load_read")
    mask = bytearray(read.cond.mask)
    mask[0] = 0
    read.cond = replace(read.cond, mask=bytes(mask))
    got = {(v.wr, v.rule) for v in verify(ch, C15)}
    assert {r for _, r in got} == {"guarded"}, got
    assert {"load_write", "load_send"} <= {w for w, _ in got}, got


def test_the_load_runs_on_four_lanes_of_its_own_cq() -> None:
    """The LOAD's WRs run on its lane and three sub-lanes (``load__req``, ``load__dd``,
    ``load__cqe``), each a worker QP on the LOAD's CQ, released by the LOAD's
    sub-master, or, for its credit-local lanes, by the master's conditional ENABLE before
    the gate (decision C25); the counts that name them are the LOAD's own (advanced in
    its rounds)."""
    from kbtpsim.chains.v2.dispatch import is_private
    from kbtpsim.chains.v2.lanes import lane_variant

    ch = _chain()
    lanes = {w.lane for w in ch.wrs() if w.part == "load" and w.role.value == "worker"}
    assert lanes == {"load", "load__req", "load__dd", "load__cqe"}
    assert {lane_variant(x) for x in lanes} == {"load"}
    assert is_private("qp:worker@load__cqe") == "load"
    enables = {w.fields["target"].ref for w in ch.wrs()  # type: ignore[union-attr]
               if w.role.value == "master" and (w.lane == "load"
                                                or w.name.startswith("dispatch_l_load"))
               and w.opcode is not None and w.opcode.name == "ENABLE"}
    assert {f"qp:worker@{x}" for x in lanes} <= enables
    h = Harness("ideal-be", False, credits=2, chains="v2")
    s = h.server
    for slot in range(2):
        for lane in lanes:
            assert s.slot_lanes[slot][lane].send_cq is s.variant_cqs[slot]["load"]


def test_guarded_rule_needs_the_byte_count_octet_tested() -> None:
    """The byte-count marker writes its octet into the word the data Write tests, not
    into the arm word: an effect that does not test that octet is reported."""
    ch = _chain()
    w = ch.wr("load_write")
    mask = bytearray(w.cond.mask)
    mask[7] = 0  # the byte count's octet (w_load+12) no longer tested
    w.cond = replace(w.cond, mask=bytes(mask))
    got = {(v.wr, v.rule) for v in verify(ch, C15)}
    assert got == {("load_write", "guarded")}, got


def test_cx5_runs_the_direct_load_with_cas_armed_tests() -> None:
    """Plain cx5 (no conditional WRs): the same direct LOAD, each test armed by a
    loopback Read and a masked CAS on the tested WR's control word (C5); its byte-count
    marker reads the common part's copy of the CQE's byte count (a CAS's operand comes
    from the scratch buffers); the chain verifies; the data Write runs two steps earlier
    than the LOAD that waited for the common entry Read and its entry marker."""
    cx5 = get_profile("cx5")
    chain = build_chain(False, _order(cx5), Geometry(seqlock=False),
                        lowering=lowering_for(cx5))
    ch = prepare_chain("v2", chain, cx5)
    assert "load_read" in ch and "m_load_entry" not in ch
    assert ch.wr("m_load_msg.cas").cas_cond.word.loc == "buf:bc"
    for name in ("load_read", "load_write", "load_send", "early_load"):
        assert ch.wr(f"{name}.cas").arms == name, name
    assert ch.wr("load_write").step == ch.wr("load_read").step + 2
    assert verify(ch, cx5) == []
    v1 = build_chain(False, _order(cx5), Geometry(seqlock=True), lowering=lowering_for(cx5))
    assert "load_read" not in v1  # chains v1 keeps the common entry Read and the re-read


def test_cx5_direct_load_equals_software() -> None:
    """On cx5 the CAS-armed direct LOAD answers as the software target: sealed and
    ALLOW_UNSEALED on the NIC, NOT_SEALED, NOT_VALID and TOO_LARGE by the CPU."""
    h = Harness("cx5", False, credits=2, chains="v2")
    r = Req(h)
    msgs = [r.alloc(0x4001), r.alloc(0x4002, DATA[::-1], INL),  # sealed, unsealed
            r.load(0x4001, 0), r.load(0x4002, 8192, flags=AU), r.load(0x4002, 16384),
            r.load(0x4003, 24576, flags=AU), r.load(0x4002, 32768, 512, flags=AU),
            r.load(0x4001, 40960)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert [_status(res, m) for m in msgs] == [0, 0, 0, 0, 7, 3, 8, 0]
    assert served(res, msgs)[2:] == ["load", "load", None, None, None, "load"]
