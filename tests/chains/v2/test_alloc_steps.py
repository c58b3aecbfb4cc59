"""Chains v2's ALLOC_STORE with native conditions (decision C18): the byte-count marker
tests the receive CQE itself in step 1, so the fold runs beside the entry marker; a
Generation of 0xFFFF hands the request to the CPU before the FetchAdd on Head, so there
is no conditional skip-0 add. Against the software target (``Harness.mismatches``)."""

from __future__ import annotations

from kbtpsim.chains.compiler import build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.plan import _order, lowering_for
from kbtpsim.chains.v2 import prepare_chain
from kbtpsim.chains.verify import verify
from kbtpsim.chains.vocab import Geometry
from kbtpsim.nic.profiles import get_profile
from tests.chains.test_run import Req, served


def _chain(profile: str, seqlock: bool):  # type: ignore[no-untyped-def]
    prof = get_profile(profile)
    chain = build_chain(False, _order(prof), Geometry(seqlock=seqlock),
                        lowering=lowering_for(prof))
    return prepare_chain("v1" if seqlock else "v2", chain, prof), prof


def test_v2_allocation_runs_two_steps_fewer() -> None:
    """ideal-be: the Send two steps and the ticket one step earlier than v1's chain, no
    skip-0 add, the Generation test in the second arm word; the chain verifies. cx5
    (CAS-armed tests) keeps v1's steps."""
    v2, prof = _chain("ideal-be", False)
    v1, _ = _chain("ideal-be", True)
    assert "ai_gen0" not in v2 and "ai_gen0" in v1
    assert v2.wr("m_alloc_inline_msg").cond.word.loc.startswith("buf:rcqe")
    assert v2.wr("m_alloc_inline_msg").step == 1
    assert v2.wr("m_alloc_inline_fold").step == v2.wr("m_alloc_inline_entry").step == 3
    assert v2.wr("ai_fa_head").step == v1.wr("ai_fa_head").step - 1
    assert v2.wr("ai_send").step == v1.wr("ai_send").step - 2
    assert v2.wr("ai_fa_head").cond.mask[3] == 0xFF  # tests the Generation octet
    assert verify(v2, prof) == []
    cx5, _ = _chain("cx5", False)
    assert "ai_gen0" in cx5 and "m_alloc_inline_genwrap" not in cx5


def test_generation_0xffff_goes_to_the_cpu_then_the_nic_serves_again() -> None:
    """An unbound entry at Generation 0xFFFF: the v2 chain hands the ALLOC_STORE to the
    CPU (its + 1 skips 0: Generation 1), the FREE goes to the CPU (2), and the next
    ALLOC_STORE of the handle runs on the NIC (3); every result as the software
    target's."""
    h = Harness("ideal-be", False, quota=2, credits=2, chains="v2")
    mem, entry = h.tnic.host.memory, h.unbound_at(0x4001, 0xFFFF)
    r = Req(h)
    msgs = [r.alloc(0x4001), r.free(0x4001), r.alloc(0x4001)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == [None, None, "alloc_inline"]
    assert mem.read(entry + 2, 2) == b"\x00\x03"


def test_v2_allocation_releases_the_next_credit_once_the_entry_is_bound() -> None:
    """Decision C19: an ENABLE of the gate beside the COMPLETION Send, a step before the
    commit's release, conditional on the allocation having run (as the commit and the
    release); not on cx5 (CAS-armed tests) or in chains v1."""
    v2, _ = _chain("ideal-be", False)
    early = v2.wr("early_alloc_inline")
    assert early.step == v2.wr("ai_send").step
    assert early.step < v2.wr("release_alloc_inline").step
    assert early.cond == v2.wr("release_alloc_inline").cond
    assert "early_alloc_read" in v2
    cx5, _ = _chain("cx5", False)
    v1, _ = _chain("ideal-be", True)
    assert "early_alloc_inline" not in cx5 and "early_alloc_inline" not in v1


def test_v2_stores_release_the_next_credit_beside_their_completion() -> None:
    """Decision C19 for STOREs: the same ENABLE of the gate beside the COMPLETION Send,
    under the commit's condition; not on cx5 or in chains v1."""
    v2, _ = _chain("ideal-be", False)
    for v, send in (("store_inline", "si_send"), ("store_read", "sr_send")):
        early = v2.wr(f"early_{v}")
        assert early.step == v2.wr(send).step < v2.wr(f"release_{v}").step, v
        assert early.cond == v2.wr(f"release_{v}").cond, v
    for chain in (_chain("cx5", False)[0], _chain("ideal-be", True)[0]):
        assert "early_store_inline" not in chain
