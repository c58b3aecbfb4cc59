"""Decision C30: a WR of the common part that nothing reads is not built, and each
variant that reads the table entry reads it itself (kbtpsim/chains/v2/lookup.py), so a
LOAD's credit runs no common part."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from kbtpsim.chains.compiler import Geometry, build_chain
from kbtpsim.chains.harness import Harness
from kbtpsim.chains.ir import Role
from kbtpsim.chains.v2 import prepare_chain
from kbtpsim.chains.v2.belongs import DispatchError, variant_of
from kbtpsim.chains.v2.dispatch import check_dispatch, split_variants
from kbtpsim.chains.v2.lanes import split_lanes
from kbtpsim.chains.v2.lookup import own_lookups
from kbtpsim.chains.verify import verify
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.wqe import Opcode

V2 = Geometry(seqlock=False)
COMMON = {"p_handle", "p_bc", "m_table", "read_entry"}
LOOKUP = ("p_handle", "m_table", "read_entry")


def _dispatched():  # type: ignore[no-untyped-def]
    """The whole dispatched chain a connection posts on ideal-be (every variant)."""
    return copy.deepcopy(Harness("ideal-be", False, credits=2, chains="v2").server.chain)


def test_what_nothing_reads_is_not_built() -> None:
    # chains v2, native conditions: every byte-count marker tests the receive CQE itself
    mix = build_chain(False, "big", V2)
    assert "p_bc" not in mix and {"p_handle", "m_table", "read_entry"} <= set(mix.graph)
    # a chain of the LOAD alone, which reads its own entry (C21): no common part
    only = build_chain(False, "big", V2, ("load",))
    assert not COMMON & set(only.graph)
    assert not [w for w in only.wrs() if w.part == "dispatch" and w.role is Role.WORKER]
    # chains v1 (the entry re-read, the byte count copied for step 3) keep all of it,
    # and a CAS-lowered LOAD keeps the copy its byte-count marker's CAS reads
    assert set(build_chain(False, "big", Geometry(), ("load",)).graph) >= COMMON
    cas = build_chain(False, "big", V2, ("load",), "cas")
    assert "p_bc" in cas and "read_entry" not in cas
    assert not verify(prepare_chain("v2", cas, get_profile("cx5")), get_profile("cx5"))


def test_each_variant_that_reads_the_entry_has_its_own_look_up() -> None:
    ch = _dispatched()
    assert not [w.name for w in ch.wrs() if w.role is Role.WORKER and variant_of(w) is None]
    for v in ("store_inline", "store_read", "alloc_inline", "alloc_read"):
        read = ch.wr(f"read_entry_{v}")
        assert read.part == v and read.lane == v and read.opcode is Opcode.RDMA_READ
        assert read.remote_kind == "strided_table"
        # its address is its own handle patch's, its condition its own table marker's
        assert {f.producer for f in read.fields.values() if hasattr(f, "producer")} == \
            {f"p_handle_{v}"}
        assert read.cond is not None and read.cond.word.producers == (f"m_table_{v}",)
        assert ch.wr(f"p_handle_{v}").places[0].dest == f"wqe:read_entry_{v}.raddr"
        # and the variant's entry marker reads what its own Read placed
        entry = ch.wr(f"m_{v}_entry")
        assert entry.cond is not None and entry.cond.word.producers == (f"read_entry_{v}",)
    # the LOAD reads its own entry (C21): it has no copy
    assert not [w for w in ch.wrs() if w.part == "load" and w.name.startswith(LOOKUP)]


def test_a_loads_master_runs_no_common_part() -> None:
    ch = _dispatched()
    master = [w.name for w in ch.wrs() if w.role is Role.MASTER and not w.lane]
    assert master == [
        "wait_recv", "dispatch_a_load", "dispatch_l_load__cqe", "dispatch_l_load__dd",
        "dispatch_l_load__au", "wait_prev", "dispatch_a_store_inline",
        "dispatch_a_store_read", "dispatch_a_alloc_inline", "dispatch_a_alloc_read",
        "wait_gate", "enable_conn_rest"]  # 20 before C30 (the common part, dispatch B)
    # the other variants are dispatched after the gate, whole: their sub-masters WAIT
    # for no gate of their own (the recycle segment would advance it every round)
    assert "wait_prev_load" in ch
    assert not [w for w in ch.wrs() if w.name.startswith("wait_prev_") and w.lane != "load"]
    assert not check_dispatch(ch)
    assert not verify(ch, get_profile("ideal-be"))


def test_the_recycle_segment_advances_no_look_up_count() -> None:
    """The copies' counts name the variant's lane and CQ: its advancer's (in the rounds
    it ran), never the segment's; no count names a common lane."""
    h = Harness("ideal-be", False, credits=2, chains="v2")
    slot = h.server._slots[0]
    assert slot.plan is not None
    targets = [s.count.target for s in slot.plan.steps if s.count is not None]
    assert not [t for t in targets if "dispatch" in t or "cq:chain#" in t]
    assert any(c.target.startswith("qp:worker@store_inline#") for c in slot.private)


def test_a_reference_the_renaming_missed_is_found() -> None:
    """A variant's WR left reading the common part (a copy's name not applied) is
    refused: the common part is gone, so what it reads has no producer."""
    ch = split_lanes(build_chain(False, "big", V2))
    out = own_lookups(ch)
    bad = out.wr("m_store_inline_entry")
    assert bad.cond is not None and bad.cond.word.producers == ("read_entry_store_inline",)
    bad.cond = replace(bad.cond, word=replace(bad.cond.word, producers=("read_entry",)))
    found = verify(split_variants(out, lookups=False), get_profile("ideal-be"))
    assert any(f.wr == "m_store_inline_entry" and "read_entry" in str(f) for f in found), \
        [str(f) for f in found]


def test_an_unknown_edge_of_the_common_part_is_refused() -> None:
    from kbtpsim.chains.ir import EdgeKind

    ch = split_lanes(build_chain(False, "big", V2))
    ch.edge("read_entry", "m_store_inline_entry", EdgeKind.ENABLE)
    ch.graph.edges["read_entry", "m_store_inline_entry"]["kind"] = "data"
    with pytest.raises(DispatchError, match="common part"):
        own_lookups(ch)
