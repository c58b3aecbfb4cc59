"""docs/protocol.md, KBTP in the project's words, against kbtpsim.wire: its registries
(opcodes, flags, features, statuses), message sizes, header offsets and the draft's
examples, so that the page and the codec cannot drift apart. It stands alone: it names
the draft by its title and points at no file outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    Feature,
    Free,
    Goodbye,
    GoodbyeFlag,
    Hello,
    HelloAck,
    Load,
    Opcode,
    RequestFlag,
    Status,
    decode,
    encode,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
TEXT = DOC.read_text(encoding="utf-8")


def table(heading: str) -> list[list[str]]:
    """The rows (cells stripped, header and rule dropped) of the first table after the
    line ``heading``."""
    lines = TEXT[TEXT.index(heading + "\n"):].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("`") for c in line.strip("|").split("|")])
    return rows


def test_opcodes() -> None:
    rows = table("### Opcodes")
    assert {r[1]: int(r[0], 16) for r in rows} == {o.name: o.value for o in Opcode}


def test_request_and_goodbye_flags() -> None:
    rows = table("LOAD, STORE, ALLOC_STORE and FREE:")
    assert {r[1]: int(r[0], 16) for r in rows} == {f.name: f.value for f in RequestFlag}
    assert f"GOODBYE: 0x{GoodbyeFlag.RELEASE:04x} RELEASE" in TEXT


def test_features() -> None:
    rows = table("Features (HELLO asks, HELLO_ACK grants):")
    assert {r[1]: int(r[0], 16) for r in rows} == {f.name: f.value for f in Feature}


def test_status_codes() -> None:
    rows = table("## Status codes")
    assert {r[1]: int(r[0]) for r in rows} == {s.name: s.value for s in Status}


@pytest.mark.parametrize(("msg", "size"), [
    (Hello(), 44), (HelloAck(), 56), (Bind(), 40), (Completion(), 40), (Load(), 40),
    (Load(flags=RequestFlag.RECORD, completion_descriptor=CompletionDescriptor()), 56),
    (Free(), 24), (Goodbye(), 24),
])
def test_message_sizes(msg: object, size: int) -> None:
    assert len(encode(msg)) == size  # type: ignore[arg-type]
    name = type(msg).__name__
    if name in ("Hello", "HelloAck", "Bind", "Completion"):
        heading = {"Hello": "HELLO body", "HelloAck": "HELLO_ACK body", "Bind": "BIND",
                   "Completion": "COMPLETION"}[name]
        assert re.search(rf"### {heading} \(.*message {size}", TEXT), heading


def test_header_offsets() -> None:
    rows = table("### Common header (24 octets)")
    fields = {r[2]: (int(r[0]), int(r[1])) for r in rows}
    msg = Load(flags=RequestFlag.SEAL, request_id=0x1122334455667788,
               handle=0x0102030405060708, generation=0xABCD,
               data_descriptor=DataDescriptor(0xA1A2A3A4, 0xB1B2B3B4B5B6B7B8, 0xC1C2C3C4))
    raw = encode(msg)

    def at(name: str) -> int:
        off, size = fields[name]
        return int.from_bytes(raw[off:off + size], "big")

    assert at("Version") == 1 and at("Opcode") == Opcode.LOAD
    assert at("Flags") == RequestFlag.SEAL and at("Request ID") == msg.request_id
    assert at("Block Handle") == msg.handle and at("Generation") == 0xABCD
    assert at("Status") == 0
    desc = table("### Descriptors (16 octets each)")
    off = {r[2].split(" (")[0]: (24 + int(r[0]), int(r[1])) for r in desc}
    for name, want in (("STag", 0xA1A2A3A4), ("Tagged Offset", 0xB1B2B3B4B5B6B7B8),
                       ("Length", 0xC1C2C3C4)):
        o, n = off[name]
        assert int.from_bytes(raw[o:o + n], "big") == want
    # under ADDR_LE the fields marked LE flip
    le = encode(msg, addr_le=True)
    o, n = fields["Block Handle"]
    assert int.from_bytes(le[o:o + n], "little") == msg.handle


def _hex_blocks() -> list[bytes]:
    blocks = re.findall(r"\n\n((?:    [0-9a-f]{2}(?: [0-9a-f]{2})*\n)+)", TEXT)
    return [bytes.fromhex(b.replace("\n", " ")) for b in blocks]


def test_the_examples_decode_and_reencode() -> None:
    store, completion = _hex_blocks()
    msg = decode(store)
    assert isinstance(msg, AllocStore) and msg.request_id == 7 and msg.handle == 0x4001
    assert msg.flags == RequestFlag.INLINE and msg.inline_data == b"KVBLOCK!"
    assert encode(msg) == store
    done = decode(completion)
    assert isinstance(done, Completion) and done.generation == 5
    assert done.status == Status.OK and done.data_length == 8
    assert done.block_offset == 0x150000 == 42 * 32 * 1024
    assert encode(done) == completion


def test_ring_counter_example() -> None:
    from kbtpsim.atomics import masked_fetch_add

    mask = 0x8000000080000020
    assert "mask\n0x8000000080000020" in TEXT or "mask 0x8000000080000020" in TEXT
    value, seen = 0, []
    for _ in range(5):
        old = value
        value = masked_fetch_add(value, 0x0000000100000010, mask)
        seen.append((old >> 32, old & 0xFFFFFFFF, value))
    shown = ", ".join(f"({t}, {o})" for t, o, _ in seen)
    assert shown in TEXT.replace("\n", " ")
    assert ", ".join(f"0x{v:016x}" for *_, v in seen) in TEXT.replace("\n", " ")


def test_the_page_stands_alone() -> None:
    assert "*KV Cache Block Transfer Protocol*" in TEXT
    assert "shared/" not in TEXT and "kbtp-draft" not in TEXT and "FORMATS.md" not in TEXT
    for link in re.findall(r"\]\(([^)#]+)", TEXT):
        assert (DOC.parent / link).exists(), link
