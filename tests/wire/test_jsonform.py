"""The JSON form used by `kbtpsim decode` / `kbtpsim encode`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from kbtpsim.wire import Message, decode
from kbtpsim.wire.jsonform import JsonFormError, from_json, to_json
from tests.wire.strategies import messages
from tests.wire.test_codec import ALLOC_STORE_VECTOR, COMPLETION_VECTOR


@settings(max_examples=300, deadline=None)
@given(messages)
def test_json_round_trip(msg: Message) -> None:
    assert from_json(to_json(msg)) == msg


def test_alloc_store_json_uses_draft_names() -> None:
    assert to_json(decode(ALLOC_STORE_VECTOR)) == {
        "version": 1,
        "opcode": "ALLOC_STORE",
        "flags": ["INLINE"],
        "request_id": 7,
        "handle": 0x4001,
        "generation": 0,
        "status": "OK",
        "data_descriptor": {"stag": 0, "tagged_offset": 0, "length": 8},
        "inline_data": "4b56424c4f434b21",
    }


def test_completion_json() -> None:
    out = to_json(decode(COMPLETION_VECTOR))
    assert out["opcode"] == "COMPLETION" and out["generation"] == 5
    assert out["data_length"] == 8 and out["block_offset"] == 0x150000


def test_hex_numbers_and_defaults_accepted() -> None:
    msg = from_json({"opcode": "load", "handle": "0x4001", "flags": ["allow_unsealed"],
                     "data_descriptor": {"stag": "0x10", "length": 4096}})
    assert msg.handle == 0x4001 and to_json(msg)["flags"] == ["ALLOW_UNSEALED"]


def test_inline_descriptor_filled_in() -> None:
    msg = from_json({"opcode": "STORE", "flags": ["INLINE"], "inline_data": "0102"})
    assert msg.data_descriptor.length == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        ({"opcode": "NOPE"}, "opcode"),
        ({}, "opcode"),
        ({"opcode": "LOAD", "hndle": 1}, "hndle"),
        ({"opcode": "LOAD", "handle": "x"}, "handle"),
        ({"opcode": "LOAD", "flags": ["BOGUS"]}, "flags"),
        ({"opcode": "LOAD", "status": "WHAT"}, "status"),
        ({"opcode": "LOAD", "version": 2}, "version"),
        ({"opcode": "LOAD", "data_descriptor": {"stagg": 1}}, "data_descriptor.stagg"),
        ({"opcode": "STORE", "flags": ["INLINE"], "inline_data": "zz"}, "inline_data"),
        ({"opcode": "LOAD", "flags": ["RECORD"]}, "completion_descriptor"),
        ({"opcode": "BIND", "ticket": 2**40}, "ticket"),
    ],
)
def test_bad_json_names_the_key(obj: dict[str, object], key: str) -> None:
    with pytest.raises(JsonFormError, match=key.replace(".", r"\.")):
        from_json(obj)
