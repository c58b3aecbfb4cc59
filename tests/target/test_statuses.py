"""Every status code reaches the client as a completion, and a failed request has no
other effect: the target's state (table, rings, pool contents, sessions) is unchanged and
no memory effect is emitted."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kbtpsim.target import PS_PER_MS, Binding, ReadInitiator, SendMessage, WriteInitiator
from kbtpsim.target.pool import Pool
from kbtpsim.wire import (
    AllocStore,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    Feature,
    Free,
    Load,
    RequestFlag,
    Status,
    Store,
    encode,
)

from .harness import BS, Client, ini, make

INLINE = RequestFlag.INLINE
A, B = 0x1000, 0x2000  # handle bases of initiators a and b (b is another trust domain)


def setup():
    target, c = make(
        8,
        [ini("a", 4, A, features=Feature.DIRECT_ALLOC | Feature.RECORD_COMPLETION),
         ini("b", 2, B, domain="other"),
         ini("a2", 1, 0x3000)],
        max_inline=64, binding=Binding.INFINIBAND,
    )
    a, b = c["a"], c["b"]
    a.alloc_store(A, b"sealed", flags=RequestFlag.SEAL)  # A: sealed, generation 2
    a.alloc_store(A + 1, b"open")  # A+1: unsealed
    return target, a, b, c["a2"]


def raw(client: Client, data: bytes) -> list:
    return client.target.handle(client.conn, data, client.now)


def abandoned_bind(target, a: Client, b: Client, a2: Client):
    old = target.remote_fetch_add(a.conn, a.ack.head.stag, 0, 0)
    ticket = old >> 32
    slot = target.remote_read(a.conn, a.ack.ring.stag, 16 * ticket, 16)
    block = int.from_bytes(slot[8:], "big")
    a.now = target.next_deadline()
    target.advance(a.now)
    return lambda: a.bind(A + 5, ticket, 8, block)


CASES: dict[str, tuple[Status, Callable]] = {
    "store other initiator's handle": (Status.INVALID_HANDLE, lambda t, a, b, a2: lambda:
        b.store(A + 1, b"x")),
    "free other initiator's handle": (Status.INVALID_HANDLE, lambda t, a, b, a2: lambda:
        b.free(A)),
    "alloc outside own range": (Status.INVALID_HANDLE, lambda t, a, b, a2: lambda:
        a.alloc_store(0x9999, b"x")),
    "load from another trust domain": (Status.INVALID_HANDLE, lambda t, a, b, a2: lambda:
        b.load(A)),
    "load of no one's handle": (Status.INVALID_HANDLE, lambda t, a, b, a2: lambda:
        a.load(0x5)),
    "load stale generation": (Status.STALE_GENERATION, lambda t, a, b, a2: lambda:
        a.load(A, generation=7)),
    "store stale generation": (Status.STALE_GENERATION, lambda t, a, b, a2: lambda:
        a.store(A + 1, b"x", generation=1)),
    "alloc stale generation": (Status.STALE_GENERATION, lambda t, a, b, a2: lambda:
        a.alloc_store(A + 2, b"x", generation=3)),
    "free stale generation": (Status.STALE_GENERATION, lambda t, a, b, a2: lambda:
        a.free(A, generation=9)),
    "load unbound": (Status.NOT_VALID, lambda t, a, b, a2: lambda: a.load(A + 2)),
    "store unbound": (Status.NOT_VALID, lambda t, a, b, a2: lambda: a.store(A + 2, b"x")),
    "free unbound": (Status.NOT_VALID, lambda t, a, b, a2: lambda: a.free(A + 2)),
    "alloc bound": (Status.ALREADY_BOUND, lambda t, a, b, a2: lambda:
        a.alloc_store(A, b"x")),
    "quota exhausted": (Status.NO_SPACE, lambda t, a, b, a2: (
        a2.alloc_store(0x3000, b"1"), lambda: a2.alloc_store(0x3001, b"2"))[1]),
    "store sealed": (Status.SEALED, lambda t, a, b, a2: lambda: a.store(A, b"x")),
    "load unsealed": (Status.NOT_SEALED, lambda t, a, b, a2: lambda:
        a.load(A + 1, flags=0)),
    "inline beyond Max Inline": (Status.TOO_LARGE, lambda t, a, b, a2: lambda:
        a.alloc_store(A + 2, bytes(65))),
    "store beyond block size": (Status.TOO_LARGE, lambda t, a, b, a2: lambda: a.send(Store(
        request_id=1, handle=A + 1, data_descriptor=DataDescriptor(9, 0, BS + 1)))),
    "load into a small buffer": (Status.TOO_LARGE, lambda t, a, b, a2: lambda:
        a.load(A, length=5)),
    "bind beyond block size": (Status.TOO_LARGE, lambda t, a, b, a2: lambda:
        a.bind(A + 3, 0, BS + 1, 0)),
    "garbage": (Status.MALFORMED, lambda t, a, b, a2: lambda: raw(a, b"\x01\x10\x00")),
    "unknown opcode": (Status.MALFORMED, lambda t, a, b, a2: lambda: raw(
        a, b"\x01\x77" + bytes(22))),
    "undefined flag": (Status.MALFORMED, lambda t, a, b, a2: lambda: a.load(
        A, flags=RequestFlag.ALLOW_UNSEALED | 0x100)),
    "RECORD without RECORD_COMPLETION": (Status.MALFORMED, lambda t, a, b, a2: lambda:
        b.send(Free(flags=RequestFlag.RECORD, handle=B, request_id=3,
                    completion_descriptor=CompletionDescriptor(1, 0)))),
    "status set in request": (Status.MALFORMED, lambda t, a, b, a2: lambda: a.send(
        Load(handle=A, status=3, data_descriptor=DataDescriptor(1, 0, BS)))),
    "BIND without DIRECT_ALLOC": (Status.MALFORMED, lambda t, a, b, a2: lambda:
        b.bind(B, 0, 1, 0)),
    "BIND of a ticket never taken": (Status.MALFORMED, lambda t, a, b, a2: lambda:
        a.bind(A + 3, 5, 1, 0)),
    "COMPLETION sent to the target": (Status.MALFORMED, lambda t, a, b, a2: lambda:
        a.send(Completion(handle=A))),
    "abandoned ticket": (Status.TICKET_ABANDONED, abandoned_bind),
}


@pytest.mark.parametrize("name", list(CASES))
def test_failed_request_completes_with_status_and_no_side_effect(name: str) -> None:
    expected, prepare = CASES[name]
    target, a, b, a2 = setup()
    request = prepare(target, a, b, a2)
    before = target.state()
    effects = request()
    assert target.state() == before
    assert len(effects) == 1, effects
    (effect,) = effects
    assert isinstance(effect, SendMessage) and isinstance(effect.message, Completion)
    assert effect.message.status is expected
    assert (effect.message.data_length, effect.message.block_offset) == (0, 0)
    target.check_invariant()
    assert not target.internal_errors


def test_internal_error_is_a_completion_without_side_effect(monkeypatch) -> None:
    target, a, _, _ = setup()
    before = target.state()

    def broken(*args, **kw):
        raise OSError("DMA engine fault")

    monkeypatch.setattr(Pool, "read", broken)
    (effect,) = a.load(A)
    assert effect.message.status is Status.INTERNAL
    assert target.state() == before
    assert isinstance(target.internal_errors[0], OSError)


def test_failure_completion_fields() -> None:
    """Failed: Generation of the entry (0 for INVALID_HANDLE/MALFORMED), Length/Offset 0;
    Request ID and Block Handle echoed."""
    _target, a, b, _ = setup()
    (e,) = a.load(A, generation=7)
    assert (e.message.request_id, e.message.handle, e.message.generation) == (3, A, 2)
    (e,) = b.store(A + 1, b"x")
    assert e.message.generation == 0 and e.message.handle == A + 1
    (e,) = raw(a, encode(Load(request_id=77, handle=A, flags=0x40,
                               data_descriptor=DataDescriptor(1, 0, 8))))
    assert (e.message.status, e.message.request_id, e.message.handle) == (
        Status.MALFORMED, 77, A)


def test_failed_request_with_invalidate_still_invalidates() -> None:
    _, a, _, _ = setup()
    (e,) = a.load(A + 2, flags=RequestFlag.INVALIDATE, stag=0x99)
    assert e.message.status is Status.NOT_VALID and e.invalidate_stag == 0x99


def test_completion_record_for_success_and_failure() -> None:
    _target, a, _, _ = setup()
    cd = CompletionDescriptor(0x77, 0x500)
    out = a.load(A, record=cd, flags=RequestFlag.RECORD)
    assert isinstance(out[0], WriteInitiator) and out[0].data == b"sealed"
    rec = out[1]
    assert (rec.stag, rec.tagged_offset, rec.record.status, rec.record.data_length) == (
        0x77, 0x500, Status.OK, 6)
    assert rec.data == rec.record.encode()
    (rec,) = a.load(A + 2, record=cd, flags=RequestFlag.RECORD)
    assert rec.record.status is Status.NOT_VALID


def test_rdmap_binding_never_offers_record_completion() -> None:
    _, c = make(4, [ini("a", 1, A, features=Feature.RECORD_COMPLETION)],
                binding=Binding.RDMAP)
    assert not c["a"].ack.features & Feature.RECORD_COMPLETION
    _, c = make(4, [ini("a", 1, A, features=Feature.RECORD_COMPLETION)],
                binding=Binding.INFINIBAND)
    assert c["a"].ack.features & Feature.RECORD_COMPLETION


def test_validation_order() -> None:
    """The documented order: MALFORMED > INVALID_HANDLE > TOO_LARGE > NOT_VALID /
    ALREADY_BOUND > STALE_GENERATION > SEALED / NOT_SEALED > TOO_LARGE (load) > NO_SPACE."""
    _target, a, _b, a2 = setup()
    big = bytes(65)
    # MALFORMED before INVALID_HANDLE
    (e,) = a.load(0x9999, flags=0x100)
    assert e.message.status is Status.MALFORMED
    # INVALID_HANDLE before TOO_LARGE
    (e,) = a.alloc_store(0x9999, big)
    assert e.message.status is Status.INVALID_HANDLE
    # TOO_LARGE before ALREADY_BOUND / NOT_VALID
    assert a.alloc_store(A, big)[0].message.status is Status.TOO_LARGE
    assert a.store(A + 2, big)[0].message.status is Status.TOO_LARGE
    # NOT_VALID / ALREADY_BOUND before STALE_GENERATION
    assert a.load(A + 2, generation=9)[0].message.status is Status.NOT_VALID
    assert a.alloc_store(A, b"x", generation=9)[0].message.status is Status.ALREADY_BOUND
    # STALE_GENERATION before SEALED / NOT_SEALED
    assert a.store(A, b"x", generation=9)[0].message.status is Status.STALE_GENERATION
    assert a.load(A + 1, flags=0, generation=9)[0].message.status is Status.STALE_GENERATION
    # NOT_SEALED before TOO_LARGE of the load buffer
    assert a.load(A + 1, flags=0, length=1)[0].message.status is Status.NOT_SEALED
    # STALE_GENERATION before NO_SPACE
    a2.alloc_store(0x3000, b"1")
    assert a2.alloc_store(0x3001, b"2", generation=5)[0].message.status is (
        Status.STALE_GENERATION)
    assert a2.alloc_store(0x3001, b"2", generation=1)[0].message.status is Status.NO_SPACE


def test_non_inline_store_reads_initiator_memory() -> None:
    target, a, _, _ = setup()
    out = a.send(AllocStore(request_id=5, handle=A + 2, flags=RequestFlag.INVALIDATE,
                            data_descriptor=DataDescriptor(0x42, 0x800, 4)))
    (rd,) = out
    assert isinstance(rd, ReadInitiator)
    assert (rd.stag, rd.tagged_offset, rd.length) == (0x42, 0x800, 4)
    target.check_invariant()  # the block is held by the outstanding ticket
    # later requests of the connection queue behind it
    assert a.load(A) == []
    with pytest.raises(ValueError):
        target.complete_read(rd.token, b"short", 0)
    out = target.complete_read(rd.token, b"DATA", 0)
    assert out[0].message.status is Status.OK and out[0].invalidate_stag == 0x42
    assert out[0].message.data_length == 4
    assert isinstance(out[1], WriteInitiator)  # the queued LOAD
    assert a.target.pool.read(out[0].message.block_offset, 4) == b"DATA"
    out = a.send(Store(request_id=6, handle=A + 2, flags=RequestFlag.SEAL,
                       data_descriptor=DataDescriptor(0x43, 0, 2)))
    (rd,) = out
    (done,) = target.complete_read(rd.token, b"ZZ", 0)
    assert done.message.data_length == 2
    assert target.table.get(A + 2).sealed
    target.check_invariant()


def test_bind_slot_mismatch_is_malformed_and_ticket_stays() -> None:
    target, a, _, _ = setup()
    old = target.remote_fetch_add(a.conn, a.ack.head.stag, 0, 0)
    before = target.state()
    (e,) = a.bind(A + 3, old >> 32, 4, 0x1234)
    assert e.message.status is Status.MALFORMED
    assert target.state() == before
    assert target.next_deadline() == 100 * PS_PER_MS
