"""Every divergence the differential machine found, shrunk and kept (docs/decisions.md,
M-series; docs/oracle.md, "The reference model"). Each runs Target and the model in
lockstep through :class:`~tests.refmodel.pair.Pair`, which fails on any difference."""

from __future__ import annotations

from kbtpsim.wire import (
    AllocStore,
    Completion,
    DataDescriptor,
    Feature,
    Goodbye,
    Hello,
    HelloAck,
    Load,
    Status,
    decode,
    encode,
)
from tests.refmodel.machine import CONFIGS
from tests.refmodel.pair import Pair, iid


def _pair(k: int = 0, who: str = "a") -> Pair:
    p = Pair(CONFIGS[k])
    p.call("connect", 1, 0)
    p.call("handle", 1, encode(Hello(requested_features=Feature(15), completion_credits=4,
                                     initiator_id=iid(who))), 0)
    return p


def _alloc(h: int, data: bytes, flags: int = 1) -> bytes:
    return encode(AllocStore(flags=flags, request_id=h, handle=h, inline_data=data,
                             data_descriptor=DataDescriptor(0, 0, len(data))))


def test_m1_a_truncated_header_echoes_the_handle_it_holds() -> None:
    """M1: 20 octets hold Request ID and Block Handle; both are echoed (T3)."""
    p = _pair()
    (e,) = p.call("handle", 1, _alloc(0x101, b"abcd")[:20], 0)
    c = decode(e.data)
    assert isinstance(c, Completion)
    assert (c.status, c.request_id, c.handle) == (Status.MALFORMED, 0x101, 0x101)


def test_undecodable_hello_is_answered_by_hello_ack() -> None:
    """Model fix: "Status reports an error in HELLO_ACK" (Session Establishment)."""
    p = Pair(CONFIGS[0])
    p.call("connect", 1, 0)
    (e,) = p.call("handle", 1, encode(Hello(initiator_id=iid("a")))[:30], 0)
    assert isinstance(e.message, HelloAck) and e.message.status is Status.MALFORMED


def test_unknown_opcode_is_counted_by_its_number() -> None:
    p = _pair()
    p.call("handle", 1, b"\x01\x77" + bytes(22), 0)
    assert p.model.counters.snapshot()[("0x77", "MALFORMED")] == 1


def test_load_of_zero_octets_writes_nothing() -> None:
    """Model fix: a LOAD of a Data Length 0 block RDMA-writes no octets."""
    p = _pair()
    p.call("handle", 1, _alloc(0x100, b"", flags=3), 0)
    out = p.call("handle", 1, encode(Load(request_id=2, handle=0x100,
                                          data_descriptor=DataDescriptor(5, 0, 8))), 0)
    assert len(out) == 1


def test_goodbye_and_hello_queued_behind_a_held_allocation() -> None:
    """Model fix: GOODBYE kept the requests queued behind it (a HELLO) on its connection."""
    p = _pair()
    assert p.call("handle", 1, _alloc(0x100, b""), 0, hold_after_ticket=True) == []
    p.call("handle", 1, encode(Goodbye()), 0)
    p.call("handle", 1, encode(Hello(requested_features=Feature(15), completion_credits=4,
                                     initiator_id=iid("a"))), 0)
    out = p.call("read_slot", 1, 0)
    assert [type(e.message).__name__ for e in out] == ["Completion", "HelloAck"]


def test_goodbye_without_bindings_retains_nothing() -> None:
    """Model fix: retention keeps bindings; with none there is nothing to retain."""
    p = _pair(who="d")
    granted = p.model.initiators["d"].features
    assert granted & Feature.DIRECT_ALLOC
    p.call("handle", 1, encode(Goodbye()), 0)
    assert p.model.initiators["d"].retained_until is None
    assert p.model.counters.snapshot()[("GOODBYE", "OK")] == 1
    assert p.model.initiators["d"].features == granted  # until the next HELLO
