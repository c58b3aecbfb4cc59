"""Conditions lowered to CAS-on-WQE (RedN; decision C5) on ``cx5`` (interleaved UMR keys).

The runs of ``test_run.py``, ``test_alloc.py`` and ``test_fuzz.py`` include the profile
``cx5`` (their parametrisation); here: the lowering's shape and names, the
verifier's rules for it (each with a deliberately broken chain), and the message-length
cases of ``test_length.py`` on the lowered chains, compared with the software target.
"""

from __future__ import annotations

import pytest

from kbtpsim.chains.compiler import VARIANTS as ALL_VARIANTS
from kbtpsim.chains.compiler import Geometry, build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import Chain, Const, CtrlWord, Placed
from kbtpsim.chains.lowering import ctrl_positions
from kbtpsim.chains.plan import decide, lowering_for
from kbtpsim.chains.render import explain, show
from kbtpsim.chains.verify import verify
from kbtpsim.nic import PROFILES, Opcode, WqeFlags

from .test_length import _requests, _status
from .test_run import CX5S_PROFILE, DATA, INL, SEAL, Req, served

CX5S = CX5S_PROFILE


def _lowered(variant: str = "load", order: str = "big") -> Chain:
    return build_chain(False, order, Geometry(), (variant,), "cas")  # type: ignore[arg-type]


#: the variants a CAS-armed chain has (FREE runs on the NIC with native conditions only,
#: decision C20)
VARIANTS = {k: v for k, v in ALL_VARIANTS.items() if k != "free"}


def _rules(chain: Chain, profile: object = CX5S) -> set[str]:
    return {v.rule for v in verify(chain, profile)}  # type: ignore[arg-type]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_names_of_the_native_chain_are_kept(variant: str) -> None:
    """Every WR of the native chain is in the lowered one under its name and role; each
    added WR is named after the WR it arms (``X.cas``, ``X.cas2``, ``X.cas_p``,
    ``X.cas_p2``); no native condition is left."""
    native = build_chain(False, "big", Geometry(), (variant,))
    low = _lowered(variant)
    names = {w.name: w.role for w in native.wrs() if w.role.value != "master"}
    assert {n: low.wr(n).role for n in names} == names
    for w in low.wrs():
        assert w.cond is None
        if w.name not in native and w.role.value != "master":
            base, _, suffix = w.name.partition(".")
            assert base in native and suffix in ("cas", "cas2", "cas_p", "cas_p2"), w.name
    conditional = [w.name for w in native.wrs() if w.cond is not None]
    assert {w.arms for w in low.wrs() if w.targets_ctrl} == set(conditional)
    assert all(low.wr(n).disarmed for n in conditional)
    assert "cas_on_wqe" in low.capabilities()
    assert "native_conditional" not in low.capabilities()


def test_ctrl_positions_keep_the_opcode_octet_free() -> None:
    assert ctrl_positions([0, 1]) == {0: 0, 1: 1}
    assert ctrl_positions([0, 1, 2, 3]) == {0: 4, 1: 5, 2: 6, 3: 7}
    assert ctrl_positions([2, 3]) == {2: 4, 3: 5}
    assert ctrl_positions(list(range(7))) == {0: 0, 1: 1, 2: 2, 3: 4, 4: 5, 5: 6, 6: 7}
    with pytest.raises(ValueError):
        ctrl_positions(list(range(8)))


def test_eight_compared_octets_take_two_fenced_cases() -> None:
    """The byte-count marker compares 8 octets: in the step before the marker, ``X.cas``
    compares octets 0..3 (read into the control word by ``X.cas_p``) and swaps in a staged
    NOP; ``X.cas_p2`` then reads octets 4..7 into it and ``X.cas2`` compares the stage tag
    and those, and swaps in the live control word. Each round's first WR is fenced."""
    ch = _lowered("load")
    x = ch.wr("m_load_msg")
    added = [ch.wr(f"m_load_msg.{s}") for s in ("cas_p", "cas", "cas_p2", "cas2")]
    assert [w.opcode for w in added] == [Opcode.RDMA_READ, Opcode.MASKED_CAS] * 2
    assert {w.step for w in added} == {x.step - 1}
    worker = [w.name for w in ch.wrs() if w.role.value == "worker"]
    assert [worker.index(w.name) for w in added] == sorted(worker.index(w.name)
                                                           for w in added)
    assert isinstance(added[1].fields["swap_add"], Const)  # the staged NOP
    assert isinstance(added[3].fields["swap_add"], CtrlWord)
    assert [p.dest for p in added[2].places] == ["wqe:m_load_msg.ctrl_word"]
    src = x.fields["ctrl_word"]
    assert isinstance(src, Placed) and src.producer == "m_load_msg.cas2"
    fenced = [w.name for w in ch.wrs() if w.flags & WqeFlags.FENCE]
    assert fenced and all(ch.graph.in_edges(n) for n in fenced)


# ------------------------------------------------------------------ verifier rules


def test_lowered_chains_verify_on_cx5() -> None:
    for v in VARIANTS:
        assert verify(_lowered(v), CX5S) == [], v


def test_rule_held_back_cas_without_a_cqe() -> None:
    """Broken: the CAS that arms ``load_write`` is unsignaled, so no WAIT can count it and
    the armed WQE may be fetched (stale, a NOP) before the CAS lands."""
    ch = _lowered("load")
    ch.wr("load_write.cas").signaled = False
    bad = [v for v in verify(ch, CX5S) if v.rule == "held-back"]
    assert [(v.wr, v.field) for v in bad] == [("load_write", "ctrl_word")]
    assert "load_write.cas" in bad[0].message


def test_rule_held_back_armed_wr_in_the_cas_step() -> None:
    """Broken: the armed WR is released by the same ENABLE as the CAS (no WAIT between)."""
    ch = _lowered("load")
    g = ch.graph
    x, cas = "load_send", "load_send.cas"
    enable_cas = next(a for a, _ in g.in_edges(cas) if g.edges[a, cas]["kind"].value == "enable")
    for a in [a for a, _ in g.in_edges(x) if g.edges[a, x]["kind"].value == "enable"]:
        g.remove_edge(a, x)
    ch.edge(enable_cas, x, type(g.edges[enable_cas, cas]["kind"]).ENABLE)
    assert any(v.rule == "held-back" and v.wr == x for v in verify(ch, CX5S))


def test_rule_cas_armed() -> None:
    """Broken: a disarmed WR whose CAS is missing can never run; a CAS naming a WR that is
    not disarmed would overwrite a live control word."""
    ch = _lowered("load")
    ch.graph.remove_node("load_send.cas")
    assert any(v.rule == "cas-armed" and v.wr == "load_send" for v in verify(ch, CX5S))
    ch = _lowered("load")
    ch.wr("load_write").disarmed = False
    assert any(v.rule == "cas-armed" and v.wr == "load_write.cas"
               for v in verify(ch, CX5S))


def test_rule_byte_order_of_placed_cas_operands() -> None:
    """Broken: WQE fields in the other byte order than the atomics: the Ticket placed into
    a CAS's compare operand and the opcode patched into a swap operand (INVALIDATE) would
    land in the wrong octets of the control word."""
    mixed = CX5S.replace(name="cx5-le-wqe", wqe_field_byte_order="little")
    bad = [v for v in verify(_lowered("alloc_inline"), mixed)
           if v.rule == "byte-order" and "CAS's compare operand" in v.message]
    assert [v.wr for v in bad] == ["ai_seq.cas"]
    bad = [v for v in verify(_lowered("load"), mixed)
           if v.rule == "byte-order" and "CAS's swap_add operand" in v.message]
    assert [v.wr for v in bad] == ["load_send.cas"]


def test_rule_placed_before_use_a_fence_does_not_wait_for_writes() -> None:
    """Broken: the copy into the control word as a Write: the fenced CAS after it in the
    same step may read the word before the Write has landed (a fence waits for Reads and
    atomics only)."""
    ch = _lowered("load")
    ch.wr("m_load_hdr.cas_p").opcode = Opcode.RDMA_WRITE
    bad = [v for v in verify(ch, CX5S) if v.rule == "placed-before-use"]
    assert [v.wr for v in bad] == ["m_load_hdr.cas"]


def test_rule_byte_order_of_the_constant_operands() -> None:
    """Broken: operands computed for little-endian atomics on a big-endian-atomic NIC."""
    bad = [v for v in verify(_lowered("load", "little"), CX5S) if v.rule == "byte-order"]
    assert bad and all("constant operands are little-endian" in v.message for v in bad)


def test_rule_byte_order_of_the_ticket_against_the_sequence() -> None:
    """Broken: a little-endian Ticket (placed compare) against the big-endian Sequence."""
    ch = _lowered("alloc_inline")
    cas = ch.wr("ai_seq.cas")
    assert cas.cas_cond is not None and cas.cas_cond.compare_source is not None
    cs = cas.cas_cond.compare_source
    cas.cas_cond = type(cas.cas_cond)(cas.cas_cond.word, cas.cas_cond.compare,
                                      cas.cas_cond.mask, cas.cas_cond.about, "big",
                                      type(cs)(cs.producer, cs.what, "little", cs.kind))
    bad = [v for v in verify(ch, CX5S) if v.wr == "ai_seq.cas" and v.rule == "byte-order"]
    assert bad and "cannot swap them" in bad[0].message


def test_rule_capability_cas_on_wqe_and_masked_atomics() -> None:
    no_cas = CX5S.replace(name="cx5-nocas", cas_on_wqe=False)
    msgs = [v.message for v in verify(_lowered("load"), no_cas) if v.rule == "capability"]
    assert any("needs 'cas_on_wqe'" in m for m in msgs)
    assert lowering_for(no_cas) == "native"  # the plan then names native_conditional
    assert any("native_conditional" in r for r in decide("load", no_cas, False).reasons())
    no_masked = CX5S.replace(name="cx5-nomasked", masked_atomics=False)
    for v in VARIANTS:  # C5: every variant has a mask that cuts octets (free flag bits)
        reasons = " ".join(decide(v, no_masked, False).reasons())
        assert "MASKED_CAS (CAS-on-WQE" in reasons and "needs 'masked_atomics'" in reasons


# ------------------------------------------------------------------ plan and explain


def test_plain_cx5_offloads_and_a_keyless_cx5_names_only_the_table_key() -> None:
    bare = PROFILES["cx5-100g-roce"]  # cx5's timing and cross-channel, no UMR keys
    for op in ("load", "store_inline", "store_read", "alloc_inline", "alloc_read"):
        d = decide(op, bare, False)
        assert d.lowering == "cas" and not d.offloaded
        text = explain([d])
        assert "'indirect_keys'" in text and "decision D4" in text
        assert "native_conditional" not in text
        assert "CAS-on-WQE" in text
        assert decide(op, PROFILES["cx5"], False).offloaded
    ok = decide("alloc_inline", CX5S, False)
    assert ok.offloaded and "OFFLOADED" in show(ok) and ".cas " in show(ok)


# ------------------------------------------------------------------ runs


def test_length_mismatches_on_the_lowered_chains() -> None:
    """``test_length.py``'s requests (trailing octets, short and long inline data) on
    cx5: the CPU answers them exactly as the software target; the well-formed
    ones are served by the chains as on ideal-be."""
    h = Harness(CX5S, False)
    h.write_ibuf(1 << 20, DATA[::-1])
    reqs, statuses, fast = _requests(h)
    res = h.run(reqs)  # type: ignore[arg-type]
    assert h.mismatches() == []
    assert [_status(res.completions[i + 1]) for i in range(len(reqs))] == statuses
    assert [res.served[i + 1] is not None for i in range(len(reqs))] == [True, True, *fast[2:]]
    assert h.server.errors == []  # every disarmed WR that stayed a NOP ran as a NOP


@pytest.mark.parametrize(("base", "count"), [(0x4100, 256), (0x4003, 5)])
def test_same_requests_served_as_on_ideal_be(base: int, count: int) -> None:
    """Other handle ranges (a block of 256 handles: 7 compared octets packed around the
    opcode octet; an unaligned range of 5: 8 compared octets, two CASes): the lowered
    chains serve exactly what ideal-be's native ones serve, and both equal software."""
    got = []
    for prof in ("ideal-be", CX5S):
        h = Harness(prof, False, handle_base=base, handle_count=count)
        h.write_ibuf(1 << 20, DATA[::-1])
        r = Req(h)
        a, b = base + 1, base + 2
        msgs = [r.alloc(a), r.load(a, 0), r.load(b, 8192), r.alloc(b, DATA[::-1], INL),
                r.store(b), r.store_read(b, 1 << 20), r.store(b, DATA, INL | SEAL),
                r.load(b, 16384), r.free(b), r.load(b, 16384), r.load(base + count + 5),
                r.alloc(base - 1)]
        res = h.run(msgs)
        assert h.mismatches() == []
        got.append(served(res, msgs))
    assert got[0] == got[1] and got[1][:2] == ["alloc_inline", "load"]
