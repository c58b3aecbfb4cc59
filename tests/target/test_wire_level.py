"""Byte-level behaviour: the draft's example request, ADDR_LE, undecodable input."""

from __future__ import annotations

from kbtpsim.target import SendMessage
from kbtpsim.wire import Completion, DataDescriptor, Load, RequestFlag, Status, decode, encode

from .harness import BS, ini, make

DRAFT_REQUEST = bytes.fromhex(
    "01 12 00 01 00 00 00 00 00 00 00 07 00 00 00 00 00 00 40 01 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 08 4b 56 42 4c 4f 43 4b 21")
DRAFT_COMPLETION = bytes.fromhex(
    "01 20 00 00 00 00 00 00 00 00 00 07 00 00 00 00 00 00 40 01 00 05 00 00"
    "00 00 00 08 00 00 00 00 00 00 00 00 00 15 00 00")


def test_draft_example_request_and_completion() -> None:
    """The draft's ALLOC_STORE of "KVBLOCK!" to 0x4001, served from block 42.

    The draft's completion says Generation 5; under decision D1 (never-bound entries have
    Generation 1, every bind and unbind adds one) a first bind gives 2 (decisions.md T12).
    Every other octet matches the draft.
    """
    target, c = make(1, [ini("a", 1, 0x4000, count=16)], first_block=42)
    (effect,) = target.handle(c["a"].conn, DRAFT_REQUEST, 0)
    assert isinstance(effect, SendMessage)
    expected = bytearray(DRAFT_COMPLETION)
    expected[20:22] = (2).to_bytes(2, "big")
    assert effect.data == bytes(expected)
    assert effect.message.block_offset == 42 * BS == 0x150000
    assert target.pool.read(0x150000, 8) == b"KVBLOCK!"


def test_addr_le_session_encodes_handles_and_offsets_little_endian() -> None:
    target, c = make(4, [ini("a", 2, 0x4000)], addr_le=True, first_block=3)
    a = c["a"]
    (effect,) = a.alloc_store(0x4001, b"le")
    assert effect.data == encode(effect.message, addr_le=True)
    assert effect.data[12:20] == (0x4001).to_bytes(8, "little")
    assert effect.data[32:40] == (3 * BS).to_bytes(8, "little")
    raw = encode(Load(flags=RequestFlag.ALLOW_UNSEALED, request_id=9, handle=0x4001,
                      data_descriptor=DataDescriptor(1, 0, BS)), addr_le=True)
    out = target.handle(a.conn, raw, 0)
    done = decode(out[-1].data, addr_le=True)
    assert isinstance(done, Completion) and done.status is Status.OK
    assert done.block_offset == 3 * BS


def test_undecodable_request_echoes_what_it_can() -> None:
    target, c = make(4, [ini("a", 2, 0x4000)])
    a = c["a"]
    raw = bytearray(encode(Load(request_id=0x1234, handle=0x4001,
                                data_descriptor=DataDescriptor(1, 0, 8))))
    (effect,) = target.handle(a.conn, bytes(raw[:-3]), 0)  # truncated descriptor
    msg = effect.message
    assert (msg.status, msg.request_id, msg.handle) == (Status.MALFORMED, 0x1234, 0x4001)
    (effect,) = target.handle(a.conn, b"\x07", 0)
    assert effect.message.status is Status.MALFORMED and effect.message.request_id == 0
    assert target.stats().as_dict()["ops"]["LOAD"] == {"MALFORMED": 1}


def test_generation_5_is_the_32770th_bind() -> None:
    """Decision T12: bound Generations are even until the 16-bit counter wraps."""
    from kbtpsim.target import next_generation

    gen, binds, bound_gens = 1, 0, []
    while binds < 32770:
        gen = next_generation(gen)  # bind
        binds += 1
        bound_gens.append(gen)
        gen = next_generation(gen)  # free
    assert bound_gens[0] == 2 and 5 not in bound_gens[:-1] and bound_gens[-1] == 5
