"""contrib/wireshark/kbtp.lua's field table against kbtpsim.wire, so the two cannot drift.

Pure Python: the Lua file's tables are parsed here, and the bytes kbtpsim.wire encodes for
every message type (each optional part present and absent, with and without ADDR_LE) are
walked as the dissector walks them. Each field must land on the value the message holds,
the walk must consume the message exactly, the names must be the codec's own (where its
errors name a field), and the opcode, status, flag and feature tables must be the enums.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from pathlib import Path
from typing import Any

import pytest

from kbtpsim import wire
from kbtpsim.errors import DecodeError
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    DirectDescriptor,
    Feature,
    Free,
    Goodbye,
    GoodbyeFlag,
    Hello,
    HelloAck,
    Load,
    Message,
    Opcode,
    RequestFlag,
    Status,
    Store,
)

LUA = Path(__file__).resolve().parents[2] / "contrib" / "wireshark" / "kbtp.lua"
FIELD = re.compile(r'^\s*\{"([\w.]+)", "([^"]+)", (\d+), "(be|addr)", '
                   r'"(always|record|inline|direct_load|direct_alloc)"\},\s*$')


@dataclass(frozen=True)
class LuaField:
    key: str
    name: str
    size: int  # 0: the rest of the message
    order: str
    presence: str


def _block(text: str, name: str) -> list[str]:
    """The lines of ``local NAME = { ... }`` (to its closing brace at column 0)."""
    start = text.index(f"local {name} = {{\n")
    end = text.index("\n}\n", start)
    return text[start:end].splitlines()[1:]


def parse_lua(text: str) -> dict[str, Any]:
    table = text[text.index("-- BEGIN FIELD TABLE"): text.index("-- END FIELD TABLE")]
    header = [LuaField(*_fields(line)) for line in _block(table, "HEADER")]
    bodies: dict[int, list[LuaField]] = {}
    current: list[LuaField] | None = None
    for line in _block(table, "BODIES"):
        m = re.match(r"^\s*\[(0x[0-9A-Fa-f]{2})\] = \{", line)
        if m:
            current = bodies.setdefault(int(m.group(1), 16), [])
        elif FIELD.match(line):
            assert current is not None
            current.append(LuaField(*_fields(line)))
        else:
            assert line.strip() in ("},", ""), f"unparsed line in BODIES: {line!r}"

    def names(block: str) -> dict[int, str]:
        out = {}
        for line in _block(table, block):
            m = re.match(r'^\s*\[(0x[0-9A-Fa-f]+|\d+)\] = "(\w+)",$', line)
            assert m, f"unparsed line in {block}: {line!r}"
            out[int(m.group(1), 0)] = m.group(2)
        return out

    def bits(block: str) -> dict[int, str]:
        out = {}
        for line in _block(table, block):
            m = re.match(r'^\s*\{(0x[0-9A-Fa-f]+), "(\w+)"\},$', line)
            assert m, f"unparsed line in {block}: {line!r}"
            out[int(m.group(1), 16)] = m.group(2)
        return out

    return {"header": header, "bodies": bodies, "opcodes": names("OPCODES"),
            "status": names("STATUS"), "request_flags": bits("REQUEST_FLAGS"),
            "goodbye_flags": bits("GOODBYE_FLAGS"), "features": bits("FEATURES")}


def _fields(line: str) -> tuple[str, str, int, str, str]:
    m = FIELD.match(line)
    assert m, f"not a field line: {line!r}"
    key, name, size, order, presence = m.groups()
    return key, name, int(size), order, presence


TABLE = parse_lua(LUA.read_text(encoding="utf-8"))


def walk(data: bytes, addr_le: bool) -> tuple[dict[str, Any], int]:
    """The dissector's walk: (field key -> value, octets consumed)."""
    opcode = data[1]
    little = addr_le and opcode not in (Opcode.HELLO, Opcode.HELLO_ACK)
    values: dict[str, Any] = {}
    pos = 0
    flags = features = 0
    for f in [*TABLE["header"], *TABLE["bodies"][opcode]]:
        present = {"always": True, "record": bool(flags & RequestFlag.RECORD),
                   "inline": bool(flags & RequestFlag.INLINE),
                   "direct_load": bool(features & Feature.DIRECT_LOAD),
                   "direct_alloc": bool(features & Feature.DIRECT_ALLOC)}[f.presence]
        if not present:
            continue
        size = len(data) - pos if f.size == 0 else f.size
        raw = data[pos: pos + size]
        assert len(raw) == size, f"{f.name} runs past the message"
        if f.size in (0, 16):
            value: Any = raw
        else:
            value = int.from_bytes(raw, "little" if f.order == "addr" and little else "big")
        assert f.key not in values, f"{f.key} twice"
        values[f.key] = value
        if f.key == "flags":
            flags = value
        if f.key in ("features", "requested_features"):
            features = value
        pos += size
    return values, pos


def expected(msg: Message, key: str) -> Any:
    """What field ``key`` holds for ``msg`` (reserved fields: zero)."""
    if key.endswith("reserved"):
        return 0
    if key == "version":
        return wire.VERSION
    obj: Any = msg
    for part in key.split("."):
        obj = getattr(obj, part)
    return int(obj) if isinstance(obj, int) else obj


DD = DataDescriptor(stag=0x11223344, tagged_offset=0x0102030405060708, length=0x00A0B0C0)
CD = CompletionDescriptor(stag=0x55667788, tagged_offset=0x1112131415161718)
HDR: dict[str, Any] = {"request_id": 0x0A0B0C0D0E0F1011, "handle": 0x2122232425262728,
                       "generation": 0x3132}


def _direct(n: int) -> DirectDescriptor:
    return DirectDescriptor(stag=0x40000000 + n, tagged_offset=0x4142434445464748 + n,
                            count=0x10 + n)


SAMPLES: list[Message] = [
    Hello(requested_features=Feature.ADDR_LE | Feature.DIRECT_LOAD, completion_credits=0x0506,
          initiator_id=bytes(range(16)), **HDR),
    HelloAck(features=Feature(0), request_credits=16, block_size=32768, max_inline=4096,
             allocation_quota=0x01020304, handle_base=0x0102030405060708,
             handle_count=0x0A0B0C0D, ticket_timeout_ms=0x00010203, **HDR),
    HelloAck(features=Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC | Feature.ADDR_LE,
             request_credits=8, block_size=4096, max_inline=256, allocation_quota=3,
             handle_base=0x1000, handle_count=256, ticket_timeout_ms=100,
             table=_direct(1), table_base_handle=0x5152535455565758, pool=_direct(2),
             partition=_direct(3), ring=_direct(4), head=_direct(5), **HDR),
    Load(data_descriptor=DD, **HDR),
    Load(flags=RequestFlag.RECORD | RequestFlag.ALLOW_UNSEALED, data_descriptor=DD,
         completion_descriptor=CD, **HDR),
    Store(data_descriptor=DD, flags=RequestFlag.SEAL, **HDR),
    Store(flags=RequestFlag.INLINE | RequestFlag.RECORD, completion_descriptor=CD,
          data_descriptor=DataDescriptor(length=8), inline_data=b"KVBLOCK!", **HDR),
    AllocStore(flags=RequestFlag.INLINE, data_descriptor=DataDescriptor(length=5),
               inline_data=b"hello", **HDR),
    AllocStore(flags=RequestFlag.RECORD | RequestFlag.INVALIDATE, data_descriptor=DD,
               completion_descriptor=CD, **HDR),
    Free(**HDR),
    Free(flags=RequestFlag.RECORD, completion_descriptor=CD, **HDR),
    Bind(ticket=0x61626364, data_length=0x71727374, block_offset=0x0102030405060708, **HDR),
    Completion(status=Status.STALE_GENERATION, data_length=0x00ABCDEF,
               block_offset=0x0807060504030201, **HDR),
    Goodbye(flags=int(GoodbyeFlag.RELEASE), **HDR),
]


def test_the_field_table_parses_and_covers_every_message_type() -> None:
    assert set(TABLE["bodies"]) == {int(op) for op in wire.MESSAGE_TYPES}
    assert {type(m) for m in SAMPLES} == set(wire.MESSAGE_TYPES.values())
    assert [f.key for f in TABLE["header"]] == ["version", "opcode", "flags", "request_id",
                                               "handle", "generation", "status"]


@pytest.mark.parametrize("addr_le", [False, True], ids=["big-endian", "ADDR_LE"])
@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: f"{type(m).__name__}-{int(m.flags)}")
def test_each_field_lands_on_the_codecs_value(msg: Message, addr_le: bool) -> None:
    data = wire.encode(msg, addr_le)
    values, used = walk(data, addr_le)
    assert used == len(data), "the table does not cover the message exactly"
    for key, value in values.items():
        assert value == expected(msg, key), key
    # and the other order is visibly different for an address field (the preference bites)
    if msg.OPCODE not in (Opcode.HELLO, Opcode.HELLO_ACK):
        other, _ = walk(data, not addr_le)
        assert other["handle"] != values["handle"]


def test_names_are_the_codecs_field_names() -> None:
    """Cut each body field short by one octet: where the codec's error names the field it
    was reading, that name is the dissector's."""
    checked: set[str] = set()
    for msg in SAMPLES:
        data = wire.encode(msg)
        fields = [f for f in TABLE["bodies"][msg.OPCODE]]
        values, _ = walk(data, False)
        pos = 24
        for f in fields:
            if f.key not in values:
                continue
            size = len(data) - pos if f.size == 0 else f.size
            if size > 1:
                with pytest.raises(DecodeError) as err:
                    wire.decode(data[: pos + size - 1])
                reason = str(err.value)
                m = re.search(r"truncated (.+?): need", reason)
                if m:
                    assert m.group(1) == f.name, (type(msg).__name__, f.key)
                    checked.add(f.name)
                    pos += size
                    continue
                # a descriptor checked as a whole: the field's name starts with its name
                m = re.search(r"(?:announce an?|needs a 16-octet) (\w+(?: Descriptor)?)",
                              reason)
                if m:
                    assert f.name.startswith(m.group(1).replace(" descriptor", "")), (
                        f.name, reason)
                    checked.add(f.name)
            pos += size
    every = {f.name for body in TABLE["bodies"].values() for f in body}
    assert every - checked <= {"Inline Data", "Reserved", "Table Base Handle"}, sorted(
        every - checked)


def _members(enum: type[IntEnum] | type[IntFlag]) -> dict[int, str]:
    return {int(m): m.name for m in enum}  # type: ignore[misc]


def test_opcode_status_flag_and_feature_tables_are_the_enums() -> None:
    assert TABLE["opcodes"] == _members(Opcode)
    assert TABLE["status"] == _members(Status)
    assert TABLE["request_flags"] == _members(RequestFlag)
    assert TABLE["goodbye_flags"] == _members(GoodbyeFlag)
    assert TABLE["features"] == _members(Feature)


def test_a_drifted_table_is_caught() -> None:
    """The checks above fail on a table with one field moved."""
    text = LUA.read_text(encoding="utf-8")
    swapped = text.replace('{"data_length", "Data Length", 4, "be", "always"},\n'
                           '        {"reserved", "Reserved", 4, "be", "always"},',
                           '{"reserved", "Reserved", 4, "be", "always"},\n'
                           '        {"data_length", "Data Length", 4, "be", "always"},')
    assert swapped != text
    global TABLE
    saved, TABLE = TABLE, parse_lua(swapped)
    try:
        msg = SAMPLES[-2]
        values, _ = walk(wire.encode(msg), False)
        assert values["data_length"] != expected(msg, "data_length")
    finally:
        TABLE = saved
