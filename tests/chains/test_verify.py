"""The verifier: every rule, each with a deliberately broken chain."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbtpsim.chains.compiler import build_chain
from kbtpsim.chains.ir import (
    Addr,
    Chain,
    CondSpec,
    Const,
    EdgeKind,
    Place,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.chains.verify import ChainRejected, check, verify
from kbtpsim.chains.vocab import Geometry
from kbtpsim.nic import PROFILES
from kbtpsim.nic.wqe import Opcode

IDEAL = PROFILES["ideal"]


def rules(violations: list) -> set[tuple[str, str, str]]:  # type: ignore[type-arg]
    return {(v.wr, v.field, v.rule) for v in violations}


def tiny(guard: str) -> Chain:
    """recv scatters an address into a READ's raddr; ``guard`` says what orders them."""
    ch = Chain("tiny", addr_le=True)
    ch.add(WrTemplate("recv", Role.RECV, None, "dispatch",
                      places=(Place("wqe:read.raddr", 8, "request[12:20] handle", "little"),)))
    read = WrTemplate("read", Role.WORKER, Opcode.RDMA_READ, "load", 1, signaled=True,
                      fields={"raddr": Placed("recv", "handle", "little"),
                              "rkey": Addr("key:table")},
                      places=(Place("buf:w", 8, "entry", "big"),))
    ch.add(read)
    ch.add(WrTemplate("send", Role.CONN, Opcode.SEND, "load", 2, signaled=True,
                      gather=(Read("buf:w", 8, ("read",), "entry"),)))
    if guard in ("wait_enable", "fence"):
        ch.add(WrTemplate("wait", Role.MASTER, Opcode.WAIT, "sequence", 0,
                          fields={"target": Addr("cq:recv"), "count": Const(1)}))
        ch.add(WrTemplate("enable", Role.MASTER, Opcode.ENABLE, "sequence", 1,
                          fields={"target": Addr("qp:worker"), "count": Addr("wr:read", 1)}))
        ch.edge("recv", "wait", EdgeKind.COMPLETION)
        ch.edge("wait", "enable", EdgeKind.QP_ORDER)
        ch.edge("enable", "read", EdgeKind.ENABLE)
    if guard == "wait_enable":
        ch.add(WrTemplate("wait2", Role.MASTER, Opcode.WAIT, "sequence", 1,
                          fields={"target": Addr("cq:chain"), "count": Const(1)}))
        ch.add(WrTemplate("enable2", Role.MASTER, Opcode.ENABLE, "sequence", 2,
                          fields={"target": Addr("qp:conn"), "count": Addr("wr:send", 1)}))
        ch.edge("enable", "wait2", EdgeKind.QP_ORDER)
        ch.edge("read", "wait2", EdgeKind.COMPLETION)
        ch.edge("wait2", "enable2", EdgeKind.QP_ORDER)
        ch.edge("enable2", "send", EdgeKind.ENABLE)
    if guard == "fence":  # the Send is only fenced after the Read: fine for a gather
        ch.edge("read", "send", EdgeKind.FENCE)
    return ch


def test_sound_tiny_chain() -> None:
    assert verify(tiny("wait_enable"), IDEAL) == []


def test_field_used_before_placed() -> None:
    got = rules(verify(tiny("none"), IDEAL))
    assert ("read", "raddr", "placed-before-use") in got
    assert ("send", "buf:w", "placed-before-use") in got


def test_gather_after_fence_is_ordered_but_wqe_patch_is_not() -> None:
    ch = tiny("fence")
    assert ("send", "buf:w", "placed-before-use") not in rules(verify(ch, IDEAL))
    # now let the Read patch a *field* of the Send, guarded only by the fence
    send = ch.wr("send")
    send.fields["raddr"] = Placed("read", "entry Block Offset", "little", "entry")
    read = ch.wr("read")
    read.places = (*read.places, Place("wqe:send.raddr", 8, "entry Block Offset", "little"))
    got = verify(ch, IDEAL)
    assert ("send", "raddr", "held-back") in rules(got)
    msg = next(str(v) for v in got if v.rule == "held-back")
    assert "WAIT on read's CQ then ENABLE" in msg and "prefetch" in msg


def test_unsignaled_producer_cannot_be_waited_for() -> None:
    ch = tiny("wait_enable")
    ch.add(WrTemplate("patch", Role.WORKER, Opcode.RDMA_WRITE, "load", 1, signaled=False,
                      places=(Place("wqe:send.imm", 4, "STag", "little"),)))
    ch.wr("send").fields["imm"] = Placed("patch", "STag", "little", "patch")
    ch.edge("enable", "patch", EdgeKind.ENABLE)
    ch.edge("patch", "wait2", EdgeKind.COMPLETION)
    assert ("send", "imm", "held-back") in rules(verify(ch, IDEAL))


def test_byte_order_mismatch() -> None:
    ch = tiny("wait_enable")
    ch.wr("read").fields["raddr"] = Placed("recv", "handle", "big")
    got = verify(ch, IDEAL)
    assert ("read", "raddr", "byte-order") in rules(got)
    assert "big-endian but ideal WQE fields are little-endian" in str(got[0])


def test_byte_order_of_a_placed_compare_operand() -> None:
    ch = tiny("wait_enable")
    ch.wr("recv").places = (*ch.wr("recv").places,
                            Place("wqe:send.cond_compare", 4, "ticket", "little"))
    ch.wr("send").cond = CondSpec(Read("buf:seq", 8, ("read",), "slot Sequence"), bytes(8),
                                  b"\xff" * 4 + bytes(4), "Sequence = ticket", "big",
                                  Placed("recv", "ticket", "little"))
    got = rules(verify(ch, IDEAL))
    assert ("send", "cond_compare", "byte-order") in got


def test_atomic_on_a_word_of_the_other_order() -> None:
    ch = tiny("wait_enable")
    ch.wr("read").atomic_word_order = "big"
    assert ("read", "swap_add", "byte-order") in rules(verify(ch, IDEAL))


def test_capabilities() -> None:
    ch = tiny("wait_enable")
    ch.wr("read").remote_kind = "strided_table"
    ch.wr("send").cond = CondSpec(Read("buf:w", 8, ("read",)), bytes(8), bytes(8), "x")
    got = rules(verify(ch, PROFILES["irdma"]))
    assert ("read", "rkey", "capability") in got
    assert ("send", "cond", "capability") in got
    assert ("wait", "opcode", "capability") in got
    assert ("read", "qp", "capability") in got  # managed QP needs WAIT/ENABLE
    assert ("read", "rkey", "capability") not in rules(verify(ch, IDEAL))


def test_too_many_sges() -> None:
    ch = tiny("wait_enable")
    ch.wr("send").gather = tuple(Read("buf:k", 1) for _ in range(17))
    assert ("send", "sges", "capability") in rules(verify(ch, IDEAL))


def test_consistency() -> None:
    ch = tiny("wait_enable")
    ch.wr("send").fields["rkey"] = Placed("ghost", "x", "octets")
    ch.wr("read").fields["rkey"] = Placed("recv", "not declared", "octets")
    got = rules(verify(ch, IDEAL))
    assert ("send", "rkey", "consistency") in got
    assert ("read", "rkey", "consistency") in got


def test_check_raises_with_every_violation() -> None:
    with pytest.raises(ChainRejected) as info:
        check(tiny("none"), IDEAL)
    assert len(info.value.violations) >= 2
    assert "placed-before-use" in str(info.value)


@pytest.mark.parametrize("variants", [("load",), ("store_inline",), ("store_read",),
                                      ("load", "store_inline", "store_read")])
def test_compiled_chains_are_sound_on_ideal_with_addr_le(variants: tuple[str, ...]) -> None:
    assert verify(build_chain(True, "little", None, variants), IDEAL) == []


def test_compiled_chain_without_addr_le_on_little_endian_wqes() -> None:
    got = verify(build_chain(False, "little", None, ("load",)), IDEAL)
    assert {v.rule for v in got} == {"byte-order"}
    assert ("read_entry", "raddr", "byte-order") in rules(got)
    assert ("load_write", "raddr", "byte-order") in rules(got)


def test_removing_one_wait_breaks_the_compiled_chain() -> None:
    ch = build_chain(True, "little", None, ("load",))
    ch.graph.remove_node("wait_step_1")
    got = rules(verify(ch, IDEAL))
    # the patch and the Read share the worker QP: queue order, but no prefetch guard
    assert ("read_entry", "raddr", "held-back") in got
    assert ("load_write", "raddr", "held-back") in got
    # the Read's condition word is written by a marker nothing orders it after
    assert ("read_entry", "buf:arm_read", "placed-before-use") in got


def test_atomic_result_has_one_destination_and_places_name_real_wrs() -> None:
    ch = tiny("wait_enable")
    fa = ch.add(WrTemplate("fa", Role.WORKER, Opcode.FETCH_ADD, "load", 1, signaled=True,
                           places=(Place("buf:a", 4, "half"), Place("wqe:ghost.raddr", 4,
                                                                      "other half"))))
    got = rules(verify(ch, IDEAL))
    assert ("fa", "sges", "consistency") in got
    assert ("fa", "wqe:ghost.raddr", "consistency") in got
    del fa


def test_alloc_store_chain_verifies_on_a_big_endian_profile_with_the_capabilities() -> None:
    prof = PROFILES["cx5"].replace(name="cx5+", strided_keys=True, native_conditional=True)
    for variant in ("alloc_inline", "alloc_read"):
        assert verify(build_chain(False, "big", None, (variant,)), prof) == []


def test_invalidate_patches_are_checked_like_the_others() -> None:
    """C9: the completion Send's invalidate key (patched from the request's DD STag) and
    its opcode octet (conditionally patched to SEND_WITH_INVALIDATE) are placed fields:
    held back, in the WQE's byte order; the opcode keeps the WQE's segments."""
    ch = build_chain(True, "little", variants=("load",))
    assert verify(ch, IDEAL) == []
    assert ch.wr("c_inv_load").cond is not None  # only with INVALIDATE
    ch.graph.remove_edge(f"enable_conn_{ch.wr('load_send').step}", "load_send")
    got = rules(verify(ch, IDEAL))
    assert {("load_send", "imm", "held-back"), ("load_send", "opcode", "held-back")} <= got
    # a big-endian STag (no ADDR_LE) into a little-endian WQE's key field
    got = rules(verify(build_chain(False, "little", variants=("load",)), IDEAL))
    assert ("load_send", "imm", "byte-order") in got
    assert ("load_send", "opcode", "byte-order") not in got  # one octet
    ch = build_chain(True, "little", variants=("load",))
    ch.wr("c_inv_load").inline = bytes([Opcode.RDMA_WRITE])  # other segments
    assert ("load_send", "opcode", "consistency") in rules(verify(ch, IDEAL))
    ch.wr("c_inv_load").inline = bytes([Opcode.SEND_WITH_IMM])  # same segments: sound
    assert verify(ch, IDEAL) == []


def test_seal_and_allow_unsealed_patches_are_checked_like_the_others() -> None:
    """C10: the second LOAD entry marker's remote address (patched if ALLOW_UNSEALED), the
    Read-source STORE's new Flags word and the Read-source ALLOC_STORE's Add Data (patched
    if SEAL) are placed before use and held back; a patch of the big-endian Add Data needs
    big-endian WQE fields."""
    ch = build_chain(True, "little", variants=("load", "store_read"))
    assert verify(ch, IDEAL) == []
    for name in ("c_au_load", "c_seal_store_read", "c_noseal_store_read"):
        assert ch.wr(name).cond is not None and ch.wr(name).step == 1
    ch.graph.remove_edge("enable_worker_3", "m_load_entry_u")
    assert ("m_load_entry_u", "raddr", "held-back") in rules(verify(ch, IDEAL))
    ch = build_chain(True, "little", variants=("store_read",))
    ch.wr("c_seal_store_read").step = 5  # after the update reads the word
    for a, b in list(ch.graph.in_edges("c_seal_store_read")) + list(
            ch.graph.out_edges("c_seal_store_read")):
        ch.graph.remove_edge(a, b)
    assert ("sr_upd", "buf:fl_store_read", "placed-before-use") in rules(verify(ch, IDEAL))
    be = PROFILES["ideal-be"]
    assert verify(build_chain(False, "big", variants=("alloc_read",)), be) == []
    got = rules(verify(build_chain(False, "big", variants=("alloc_read",)),
                       be.replace(wqe_field_byte_order="little")))
    assert ("ar_gen", "swap_add", "byte-order") in got


def test_rdmap_placement_refuses_every_chain() -> None:
    """O7: under RDMAP placement a loopback Write's CQE does not imply its placement, so
    no chain that WAITs on its patches and markers is sound there."""
    be = PROFILES["ideal-be"]
    ch = build_chain(False, "big", variants=("load",))
    assert verify(ch, be) == []
    got = rules(verify(ch, be.replace(placement="rdmap")))
    assert {r for _, _, r in got} == {"placement"}


@pytest.mark.parametrize("variant,wr", [("store_read", "sr_read"), ("alloc_read", "ar_read")])
def test_a_data_read_of_several_packets_into_the_block_is_torn_read(variant: str,
                                                                     wr: str) -> None:
    """Decision O5: a Read-source store's data Read into the block must fit one packet (a
    connection failure can cut a longer one part way). One packet verifies; one octet
    more (two packets) is refused, on that WR alone; a smaller mtu refuses 4 KiB."""
    be = PROFILES["ideal-be"]
    one = build_chain(False, "big", Geometry(block_size=be.mtu, max_inline=4096),
                      (variant,))
    assert verify(one, be) == []
    assert rules(verify(one, be.replace(mtu=be.mtu // 2))) == {(wr, "places", "torn-read")}
    two = build_chain(False, "big", Geometry(block_size=2 * be.mtu, max_inline=4096),
                      (variant,))
    assert rules(verify(two, be)) == {(wr, "places", "torn-read")}
    inline = build_chain(False, "big", Geometry(block_size=2 * be.mtu,
                                                max_inline=2 * be.mtu),
                         (variant.replace("read", "inline"),))
    assert verify(inline, be) == []


@pytest.mark.parametrize("variant,read,copy", [("store_read", "sr_read", "sr_copy"),
                                               ("alloc_read", "ar_read", "ar_copy")])
def test_a_staged_read_is_copied_only_behind_a_test_of_its_cqe(variant: str, read: str,
                                                                copy: str) -> None:
    """Decision C24 (rule ``staged-read``): chains v2 read a Read source of several
    packets into staging, and copy it into the block behind a marker on the Read's own
    CQE. Sound as built (and no ``torn-read``: nothing lands in the block part way); a
    marker that tests nothing, or a copy whose condition leaves the marker out, is
    refused on the copy."""
    be = PROFILES["ideal-be"]
    geo = Geometry(block_size=4 * be.mtu, max_inline=4096, seqlock=False, stage_reads=True)
    chain = build_chain(False, "big", geo, (variant,))
    assert verify(chain, be) == []
    assert chain.wr(read).places[0].dest == "buf:rstg"
    marker = chain.wr(f"m_{variant}_rdok")
    assert marker.cond is not None and marker.cond.word.loc.startswith(f"buf:ccqe_{read}")
    blind = build_chain(False, "big", geo, (variant,))
    m = blind.wr(f"m_{variant}_rdok")
    assert m.cond is not None
    m.cond = replace(m.cond, mask=bytes(8))
    assert (copy, "cond", "staged-read") in rules(verify(blind, be))
    bypass = build_chain(False, "big", geo, (variant,))
    c = bypass.wr(copy)
    assert c.cond is not None
    c.cond = replace(c.cond, word=replace(c.cond.word, producers=tuple(
        p for p in c.cond.word.producers if not p.endswith("_rdok"))))
    assert (copy, "cond", "staged-read") in rules(verify(bypass, be))
