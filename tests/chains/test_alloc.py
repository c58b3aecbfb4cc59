"""ALLOC_STORE on the NIC (profile ``ideal-be``: big-endian WQEs and atomics, no ADDR_LE;
and plain ``cx5`` (UMR-built keys), its conditions lowered to CAS-on-WQE, decision C5):
quota arming, the session octet, the slot-not-ready hand-over and the draft's interleaving
example, each compared with the software target (``Harness.mismatches``: completions,
initiator buffer, table, pool, ring slots, Head/Tail, the CPU target's bookkeeping)."""

from __future__ import annotations

import pytest

from kbtpsim.chains.harness import CONN, Harness, iid
from kbtpsim.nic.profile import NicProfile
from kbtpsim.target import InitiatorConfig
from kbtpsim.wire import AllocStore, DataDescriptor, Free, Goodbye, Hello, Load

from .test_run import BE, BS, CX5S, CX5S_PROFILE, DATA, FAST, INL, SEAL, Req, served

Y = InitiatorConfig("B", iid("B"), 2, 0x4010, 16)


@pytest.fixture(params=[BE, CX5S], ids=["ideal-be", "cx5"])
def be(request: pytest.FixtureRequest) -> tuple[str | NicProfile, bool]:
    """A big-endian profile that offloads ALLOC_STORE: native conditions (ideal-be) or
    CAS-on-WQE (cx5)."""
    name, addr_le = request.param
    return (CX5S_PROFILE if name == CX5S[0] else name), addr_le


def _status(res, m) -> int:  # type: ignore[no-untyped-def]
    return int.from_bytes(res.completions[m.request_id][22:24], "big")


def test_quota_arming_no_space_equals_software(be: tuple[str | NicProfile, bool]) -> None:
    """Quota 2, 4 credits: the CPU arms at most quota - usage credits; a software
    allocation (short data) uses one allowance, so a later armed credit is disarmed; after
    a FREE an allowance comes back."""
    h = Harness(*be, quota=2, credits=4)
    r = Req(h)
    msgs = [r.alloc(0x4001, DATA[:9], INL),  # CPU (short): usage 1
            r.alloc(0x4002),  # NIC
            r.alloc(0x4003),  # NO_SPACE: no credit may be armed (CPU)
            r.alloc(0x4004),  # NO_SPACE
            r.free(0x4002),  # CPU
            r.alloc(0x4005),  # NIC again (re-armed after the FREE)
            r.alloc(0x4006)]  # NO_SPACE
    res = h.run(msgs)
    assert h.mismatches() == []
    assert [_status(res, m) for m in msgs] == [0, 0, 5, 5, 0, 0, 5]
    assert served(res, msgs) == [None, "alloc_inline", None, None, None, "alloc_inline", None]
    assert h.cpu_target.chain_allocations == 2


@pytest.mark.parametrize("seal", [False, True], ids=["seal-clear", "seal-set"])
def test_alloc_read_source_on_the_nic(be: tuple[str | NicProfile, bool], seal: bool) -> None:
    """A Read-source ALLOC_STORE, SEAL clear or set (decision C10: the chain's Flags add
    is VALID|SEALED with SEAL); then loads with and without ALLOW_UNSEALED and an inline
    STORE (SEALED with SEAL)."""
    h = Harness(*be, quota=4)
    h.write_ibuf(1 << 20, DATA[::-1])
    r = Req(h)
    src = AllocStore(request_id=50, handle=0x4007, flags=SEAL if seal else 0,
                     data_descriptor=DataDescriptor(h.stag, h.buf(1 << 20), BS))
    msgs = [src, r.load(0x4007, 0, flags=0x10), r.load(0x4007, BS), r.store(0x4007)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert [_status(res, m) for m in msgs] == ([0, 0, 0, 6] if seal else [0, 0, 7, 0])
    entry = h.tnic.host.memory.read(h.layout.entry_addr(0x4007), 2)
    assert entry == (b"\x00\x03" if seal else b"\x00\x01")  # VALID [| SEALED]
    # sealed: every LOAD on the NIC, the STORE to the CPU (SEALED); unsealed: the LOAD
    # with ALLOW_UNSEALED on the NIC, without it the CPU (NOT_SEALED)
    assert served(res, msgs) == (["alloc_read", "load", "load", None] if seal
                                 else ["alloc_read", "load", None, "store_inline"])


def test_generation_wraps_over_zero_like_software(be: tuple[str | NicProfile, bool]) -> None:
    """Bind/unbind until the Generation passes 0xFFFF: the chain's second, conditional
    add skips 0 exactly as the software target."""
    h = Harness(*be, quota=2, credits=2)
    mem, entry = h.tnic.host.memory, h.unbound_at(0x4001, 0xFFFE)
    r = Req(h)
    msgs = [r.alloc(0x4001), r.free(0x4001), r.alloc(0x4001)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == ["alloc_inline", None, "alloc_inline"]
    assert mem.read(entry + 2, 2) == b"\x00\x02"  # 0xFFFE+1 = 0xFFFF, +1 (free) = 1, +1 = 2


def test_no_fast_path_outside_a_session() -> None:
    """A request after GOODBYE is MALFORMED in software; the chains must not serve it
    (the CPU clears the credits' session octet) and serve again after a new HELLO."""
    for prof in (FAST, BE, (CX5S_PROFILE, False)):
        h = Harness(*prof)  # type: ignore[arg-type]
        r = Req(h)
        msgs: list[object] = [r.alloc(0x4001), r.load(0x4001, 0)]
        res = h.run(msgs)  # type: ignore[arg-type]
        h.send(Goodbye())
        h.sim.env.run(until=h.sim.env.now + 30_000_000)
        late = [r.load(0x4001, 0), r.store(0x4002)]
        res = h.run(late, hello=False)  # type: ignore[arg-type]
        assert [_status(res, m) for m in late] == [9, 9]
        assert served(res, late) == [None, None]
        again = [r.load(0x4001, 0)]
        res = h.run(again)
        assert served(res, again) == ["load"]
        assert h.mismatches() == []


def _settle(h: Harness, us: int) -> None:
    env = h.sim.env
    for _ in range(us):
        env.run(until=env.now + 1_000_000)
        h._initiator_poll()


def _interleave(h: Harness, y_msgs: list[object], x_then: list[object]) -> list[list[bytes]]:
    """Send X's ALLOC_STORE (handle 0x4001, chain); when its FetchAdd on Head has landed
    (X's chain holds ticket 0 and has not read slot 0 yet), run Y's requests on the CPU's
    target and the reference, let the reference's X read its slot, then send ``x_then``."""
    h.run([])  # X's HELLO
    got = [h.other(2, Hello(initiator_id=iid("B"), completion_credits=8))[0]]
    head = h.target_layout.rings[0].head_addr
    ev = h.tnic.watch(head)
    out: list[list[bytes]] = []

    def on_ticket(_e: object) -> None:
        assert h.tnic.host.memory.read_u64(head, "big") >> 32 == 1  # X holds ticket 0
        for m in y_msgs:
            mine, ref = h.other(2, m)  # type: ignore[arg-type]
            assert mine == ref
            out.append(mine)
        h._apply_ref(h.reference.read_slot(CONN, 0))
        for m in x_then:
            h.send(m)  # type: ignore[arg-type]

    ev.callbacks.append(on_ticket)
    h.send(AllocStore(request_id=1, handle=0x4001, flags=INL | SEAL,
                      data_descriptor=DataDescriptor(0, 0, BS), inline_data=DATA),
           ref_hold=True)
    _settle(h, 200)
    assert got[0][0][1] == 0x02  # Y's HELLO_ACK
    return out


def test_draft_interleaving_example(be: tuple[str | NicProfile, bool]) -> None:
    """Draft, end: blocks 100..103; X's ALLOC_STORE takes ticket 0 and stalls before
    reading slot 0; Y takes tickets 1..3 and frees block 101, whose free gets ticket 4 =
    slot 0, not yet consumed, so it is deferred; X then gets block 100; the deferred free
    writes slot 0 = {4, 101}; ticket 4 gets block 101. Here X's allocation is a NIC chain;
    the CPU learns that it consumed slot 0 (``Target.note_chain_alloc``) and performs the
    deferred free then."""
    y = InitiatorConfig("B", iid("B"), 3, 0x4010, 16)
    h = Harness(*be, blocks=4, first_block=100, quota=1, others=(y,))
    bo = [n * BS for n in range(100, 104)]
    y_msgs = [AllocStore(request_id=100 + i, handle=0x4010 + i, flags=INL,
                         data_descriptor=DataDescriptor(0, 0, 8), inline_data=b"Y%7d" % i)
              for i in range(3)]
    y_msgs.append(Free(request_id=110, handle=0x4010))
    sent = _interleave(h, y_msgs, [])
    assert [len(s) for s in sent] == [1, 1, 1, 0]  # the FREE waits (deferred)
    # Y's blocks 101..103, X's block 100
    lay, mem = h.layout, h.tnic.host.memory
    for hdl, b in ((0x4011, bo[2]), (0x4012, bo[3]), (0x4001, bo[0])):
        assert int.from_bytes(mem.read(lay.entry_addr(hdl) + 8, 8), "big") == b
    slot0 = h.target_layout.rings[0].slot_addr(0)
    assert mem.read(slot0, 16) == (4).to_bytes(4, "big") + bytes(4) + bo[1].to_bytes(8, "big")
    assert 110 in h.result.completions  # the deferred FREE completed after X's chain
    assert h.result.served[1] == "alloc_inline"
    # ticket 4 gets block 101
    mine, ref = h.other(2, AllocStore(request_id=111, handle=0x4013, flags=INL,
                                      data_descriptor=DataDescriptor(0, 0, 8),
                                      inline_data=b"ticket 4"))
    assert mine == ref
    assert int.from_bytes(mem.read(lay.entry_addr(0x4013) + 8, 8), "big") == bo[1]
    assert h.mismatches() == []
    assert h.server.slot_not_ready == 0


def _ring_of_four_then_a_free(be: tuple[str | NicProfile, bool]
                              ) -> tuple[Harness, Req, int]:
    """Blocks 100..103, quota 4: four chain ALLOC_STOREs take tickets 0..3, then the FREE
    of handle 0x4000 (block 100) gets Tail ticket 4, slot 0. Returns the harness, its
    request builder and slot 0's address."""
    h = Harness(*be, blocks=4, first_block=100, quota=4)
    r = Req(h)
    msgs = [r.alloc(0x4000 + i) for i in range(4)] + [r.free(0x4000)]
    res = h.run(msgs)
    assert served(res, msgs) == ["alloc_inline"] * 4 + [None]
    return h, r, h.target_layout.rings[0].slot_addr(0)


def test_slot_not_ready_hands_the_ticket_to_the_cpu(be: tuple[str | NicProfile, bool]) -> None:
    """A free still writing its slot (Block Offset written, Sequence not yet: the draft's
    write order) when a chain reads it: the chain has taken ticket 4 (FetchAdd on Head),
    finds Sequence != 4 and hands the request over with its ticket; the CPU finishes the
    allocation of *that* ticket (``Target.finish_allocation``) once the write has landed.
    Blocks 100..103, quota 4: tickets 0..3 bound, the FREE of block 100 gets Tail ticket 4
    = slot 0 (the model's CPU writes instantly: the test holds the Sequence back 100 us,
    longer than the CAS-on-WQE chain takes to read the slot)."""
    h, r, slot0 = _ring_of_four_then_a_free(be)
    env, mem = h.sim.env, h.tnic.host.memory
    assert mem.read(slot0, 4) == (4).to_bytes(4, "big")  # the free wrote {4, block 100}

    def in_flight():  # type: ignore[no-untyped-def]
        mem.write(slot0, (0).to_bytes(4, "big"))  # the Sequence write has not landed
        yield env.timeout(100_000_000)
        mem.write(slot0, (4).to_bytes(4, "big"))

    env.process(in_flight())
    late = [r.alloc(0x4005, DATA[::-1]), r.load(0x4005, 0)]
    res = h.run(late, hello=False)
    assert served(res, late) == [None, "load"]  # the ALLOC_STORE handed over
    assert h.server.slot_not_ready == 1 and h.cpu_target.slot_not_ready == 1
    assert int.from_bytes(mem.read(h.layout.entry_addr(0x4005) + 8, 8), "big") == 100 * BS
    assert [_status(res, m) for m in late] == [0, 0]
    assert res.latency_ps[late[0].request_id] > 95_000_000  # it waited for the slot
    assert h.mismatches() == []


def test_a_consumed_slot_with_the_tickets_sequence_is_not_ready(
        be: tuple[str | NicProfile, bool]) -> None:
    """The draft's slot test is Sequence = Ticket *and* Block Offset not all ones
    ("Free-Block Ring", Allocation). A slot that shows this ticket's Sequence but is
    consumed (all-ones Block Offset: a duplicate ticket, or a slot read between a
    consumer's marks) must hand the request over, not copy the block to Block Offset
    0xFFFFFFFFFFFFFFFF (a remote access error that kills the connection)."""
    h, r, slot0 = _ring_of_four_then_a_free(be)
    env, mem = h.sim.env, h.tnic.host.memory
    good = mem.read(slot0 + 8, 8)  # the free wrote {4, block 100}

    def consumed_for_a_while():  # type: ignore[no-untyped-def]
        mem.write(slot0 + 8, b"\xff" * 8)
        yield env.timeout(100_000_000)
        mem.write(slot0 + 8, good)

    env.process(consumed_for_a_while())
    late = [r.alloc(0x4005, DATA[::-1]), r.load(0x4005, 0)]
    res = h.run(late, hello=False)
    assert served(res, late) == [None, "load"]  # handed over with its ticket
    assert h.server.slot_not_ready == 1
    assert [_status(res, m) for m in late] == [0, 0]
    assert int.from_bytes(mem.read(h.layout.entry_addr(0x4005) + 8, 8), "big") == 100 * BS
    assert h.mismatches() == []


def test_load_of_a_chain_bound_block(be: tuple[str | NicProfile, bool]) -> None:
    h = Harness(*be)
    r = Req(h)
    msgs = [r.alloc(0x4003), r.load(0x4003, 4096)]
    res = h.run(msgs)
    assert served(res, msgs) == ["alloc_inline", "load"]
    assert h.read_ibuf(4096, BS) == DATA
    assert h.mismatches() == []
    assert isinstance(msgs[1], Load)


def test_requests_behind_a_handed_over_allocation_wait_for_it(
        be: tuple[str | NicProfile, bool]) -> None:
    """Two ALLOC_STOREs of one handle, pipelined, the first's slot not ready (its Sequence
    held back 100 us): the CPU holds the connection's gate until the first completes (the
    software target queues the second behind it), so the second finds the handle bound:
    ALREADY_BOUND, not a second binding by the next credit's chain."""
    h = Harness(*be, quota=8, credits=4)
    r = Req(h)
    env, mem = h.sim.env, h.tnic.host.memory
    slot1 = h.target_layout.rings[0].slot_addr(16)
    h.run([r.alloc(0x4000)])  # ticket 0

    def in_flight():  # type: ignore[no-untyped-def]
        mem.write(slot1, (9).to_bytes(4, "big"))
        yield env.timeout(100_000_000)
        mem.write(slot1, (1).to_bytes(4, "big"))

    env.process(in_flight())
    a, b = r.alloc(0x4005), r.alloc(0x4005, DATA[::-1])
    h.send(a)
    h.send(b)
    _settle(h, 250)
    res = h.result
    assert [_status(res, m) for m in (a, b)] == [0, 4]
    assert res.served[a.request_id] is None and res.served[b.request_id] is None
    assert h.server.slot_not_ready == 1
    assert h.mismatches() == []


@pytest.mark.parametrize(("profile", "chains"), [("ideal-be", "v1"), ("cx5", "v2")])
def test_allocation_at_generation_0xffff_skips_zero_once(profile: str, chains: str) -> None:
    """An unbound entry at Generation 0xFFFF allocated by a chain that runs every
    ALLOC_STORE variant's WRs: the + 1 gives 0, skipped once, to 1 (the other variant's
    skip-0 add must not fire too: it did, giving 2)."""
    h = Harness(profile, False, quota=2, credits=2, chains=chains)
    mem, entry = h.tnic.host.memory, h.unbound_at(0x4001, 0xFFFF)
    msgs = [Req(h).alloc(0x4001)]
    res = h.run(msgs)
    assert h.mismatches() == []
    assert served(res, msgs) == ["alloc_inline"]
    assert mem.read(entry + 2, 2) == b"\x00\x01"
