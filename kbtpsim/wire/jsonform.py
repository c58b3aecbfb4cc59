"""The JSON form of KBTP messages used by ``kbtpsim decode`` and ``kbtpsim encode``.

Keys are the draft's field names in snake_case. Opcode, status, flag and feature values
are written as their names; byte strings (``inline_data``, ``initiator_id``) as hex.
On input, numbers may also be given as ``"0x..."`` strings, flags and features as a list
of names, one name or names joined by ``|`` (``"SEAL"``, ``"INLINE|SEAL"``), or an
integer, and opcode and status as a name or an integer.

``to_json(msg)`` and ``from_json(obj)`` are paired: ``from_json(to_json(m)) == m``.
Errors in the input raise :class:`JsonFormError` naming the key.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag
from typing import Any

from kbtpsim.wire.constants import VERSION, Feature, Opcode, Status, flag_type
from kbtpsim.wire.messages import (
    MESSAGE_TYPES,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    DirectDescriptor,
    Hello,
    HelloAck,
    Message,
    _DataRequest,
    _StoreRequest,
)


class JsonFormError(ValueError):
    """An input object that is not the JSON form of a KBTP message; names the key."""


_HEADER_KEYS = ("version", "opcode", "flags", "request_id", "handle", "generation", "status")
_DIRECT_KEYS = ("table", "pool", "partition", "ring", "head")
_ACK_NUMBERS = (
    "request_credits",
    "block_size",
    "max_inline",
    "allocation_quota",
    "handle_base",
    "handle_count",
    "ticket_timeout_ms",
)


def _flag_names(value: int, kind: type[IntFlag] | None) -> list[str]:
    names: list[str] = []
    rest = int(value)
    if kind is not None:
        for member in kind:
            if rest & member.value:
                names.append(str(member.name))
                rest &= ~member.value
    if rest:
        names.append(f"0x{rest:04x}")
    return names


def _enum_name(value: int) -> str | int:
    return str(value.name) if isinstance(value, IntEnum) else int(value)


def to_json(msg: Message) -> dict[str, Any]:
    """The JSON-ready dict of ``msg``."""
    out: dict[str, Any] = {
        "version": VERSION,
        "opcode": msg.OPCODE.name,
        "flags": _flag_names(msg.flags, flag_type(msg.OPCODE)),
        "request_id": msg.request_id,
        "handle": msg.handle,
        "generation": msg.generation,
        "status": _enum_name(msg.status),
    }
    if isinstance(msg, Hello):
        out["requested_features"] = _flag_names(msg.requested_features, Feature)
        out["completion_credits"] = msg.completion_credits
        out["initiator_id"] = msg.initiator_id.hex()
    elif isinstance(msg, HelloAck):
        out["features"] = _flag_names(msg.features, Feature)
        for key in _ACK_NUMBERS:
            out[key] = getattr(msg, key)
        for key in ("table", "table_base_handle", "pool", "partition", "ring", "head"):
            value = getattr(msg, key)
            if isinstance(value, DirectDescriptor):
                out[key] = {
                    "stag": value.stag,
                    "tagged_offset": value.tagged_offset,
                    "count": value.count,
                }
            elif value is not None:
                out[key] = value
    elif isinstance(msg, _DataRequest):
        dd = msg.data_descriptor
        out["data_descriptor"] = {
            "stag": dd.stag,
            "tagged_offset": dd.tagged_offset,
            "length": dd.length,
        }
        _put_completion_descriptor(out, msg.completion_descriptor)
        if isinstance(msg, _StoreRequest) and msg.inline_data is not None:
            out["inline_data"] = msg.inline_data.hex()
    elif isinstance(msg, Bind):
        out.update(ticket=msg.ticket, data_length=msg.data_length, block_offset=msg.block_offset)
    elif isinstance(msg, Completion):
        out.update(data_length=msg.data_length, block_offset=msg.block_offset)
    else:  # Free and Goodbye
        _put_completion_descriptor(out, getattr(msg, "completion_descriptor", None))
    return out


def _put_completion_descriptor(out: dict[str, Any], cd: CompletionDescriptor | None) -> None:
    if cd is not None:
        out["completion_descriptor"] = {"stag": cd.stag, "tagged_offset": cd.tagged_offset}


# --- parsing --------------------------------------------------------------------------


def _number(obj: dict[str, Any], key: str, path: str, default: int | None = None) -> int:
    if key not in obj:
        if default is None:
            raise JsonFormError(f"{path}{key}: missing")
        return default
    value = obj[key]
    if isinstance(value, bool):
        raise JsonFormError(f"{path}{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    raise JsonFormError(f"{path}{key}: expected an integer, got {value!r}")


def _hex(obj: dict[str, Any], key: str, path: str) -> bytes:
    value = obj[key]
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise JsonFormError(f"{path}{key}: expected a hex string, got {value!r}") from None


def _flags(obj: dict[str, Any], key: str, kind: type[IntFlag] | None, path: str) -> int:
    value = obj.get(key, [])
    if isinstance(value, str) and not _looks_numeric(value):
        value = [v.strip() for v in value.replace(",", "|").split("|") if v.strip()]
    elif isinstance(value, int | str) and not isinstance(value, bool):
        return _number(obj, key, path)
    if not isinstance(value, list):
        raise JsonFormError(f"{path}{key}: expected a list of names, got {value!r}")
    total = 0
    known = {str(m.name): m.value for m in kind} if kind is not None else {}
    for item in value:
        if isinstance(item, str) and item.upper() in known:
            total |= known[item.upper()]
            continue
        try:
            total |= int(item, 0) if isinstance(item, str) else int(item)
        except (TypeError, ValueError):
            names = ", ".join(known) or "none defined for this opcode"
            raise JsonFormError(
                f"{path}{key}: unknown flag {item!r} (known: {names})"
            ) from None
    return total


def _looks_numeric(text: str) -> bool:
    try:
        int(text.strip(), 0)
    except ValueError:
        return False
    return True


def _enum(obj: dict[str, Any], key: str, kind: type[IntEnum], path: str) -> int:
    value = obj.get(key, 0)
    if isinstance(value, str) and value.upper() in kind.__members__:
        return int(kind[value.upper()])
    try:
        return _number(obj, key, path, default=0)
    except JsonFormError:
        names = ", ".join(kind.__members__)
        raise JsonFormError(f"{path}{key}: unknown value {value!r} (known: {names})") from None


def _object(obj: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = obj[key]
    if not isinstance(value, dict):
        raise JsonFormError(f"{path}{key}: expected an object, got {value!r}")
    return value


def _check_keys(obj: dict[str, Any], allowed: set[str], path: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        known = ", ".join(sorted(allowed))
        raise JsonFormError(f"{path}{extra[0]}: unknown key (allowed: {known})")


def from_json(obj: Any) -> Message:
    """The message described by ``obj``; raises JsonFormError naming the offending key."""
    if not isinstance(obj, dict):
        raise JsonFormError(f"expected a JSON object, got {type(obj).__name__}")
    if _number(obj, "version", "", default=VERSION) != VERSION:
        raise JsonFormError(f"version: must be {VERSION}, got {obj['version']!r}")
    if "opcode" not in obj:
        raise JsonFormError("opcode: missing")
    raw = obj["opcode"]
    try:
        opcode = Opcode[raw.upper()] if isinstance(raw, str) else Opcode(raw)
    except (KeyError, ValueError):
        names = ", ".join(Opcode.__members__)
        raise JsonFormError(f"opcode: unknown opcode {raw!r} (known: {names})") from None
    cls = MESSAGE_TYPES[opcode]
    fields: dict[str, Any] = {
        "flags": _flags(obj, "flags", flag_type(opcode), ""),
        "request_id": _number(obj, "request_id", "", 0),
        "handle": _number(obj, "handle", "", 0),
        "generation": _number(obj, "generation", "", 0),
        "status": _enum(obj, "status", Status, ""),
    }
    allowed = set(_HEADER_KEYS)
    if cls is Hello:
        allowed |= {"requested_features", "completion_credits", "initiator_id"}
        fields["requested_features"] = Feature(
            _flags(obj, "requested_features", Feature, "")
        )
        fields["completion_credits"] = _number(obj, "completion_credits", "", 0)
        if "initiator_id" in obj:
            fields["initiator_id"] = _hex(obj, "initiator_id", "")
    elif cls is HelloAck:
        allowed |= {"features", "table_base_handle", *_ACK_NUMBERS, *_DIRECT_KEYS}
        fields["features"] = Feature(_flags(obj, "features", Feature, ""))
        for key in _ACK_NUMBERS:
            fields[key] = _number(obj, key, "", 0)
        if "table_base_handle" in obj:
            fields["table_base_handle"] = _number(obj, "table_base_handle", "")
        for key in _DIRECT_KEYS:
            if key in obj:
                d = _object(obj, key, "")
                _check_keys(d, {"stag", "tagged_offset", "count"}, f"{key}.")
                fields[key] = DirectDescriptor(
                    stag=_number(d, "stag", f"{key}.", 0),
                    tagged_offset=_number(d, "tagged_offset", f"{key}.", 0),
                    count=_number(d, "count", f"{key}.", 0),
                )
    elif issubclass(cls, Bind | Completion):
        allowed |= {"data_length", "block_offset"} | ({"ticket"} if cls is Bind else set())
        fields["data_length"] = _number(obj, "data_length", "", 0)
        fields["block_offset"] = _number(obj, "block_offset", "", 0)
        if cls is Bind:
            fields["ticket"] = _number(obj, "ticket", "", 0)
    else:
        allowed |= {"completion_descriptor"}
        if "completion_descriptor" in obj:
            d = _object(obj, "completion_descriptor", "")
            _check_keys(d, {"stag", "tagged_offset"}, "completion_descriptor.")
            fields["completion_descriptor"] = CompletionDescriptor(
                stag=_number(d, "stag", "completion_descriptor.", 0),
                tagged_offset=_number(d, "tagged_offset", "completion_descriptor.", 0),
            )
        if issubclass(cls, _DataRequest):
            allowed |= {"data_descriptor"}
            inline = None
            if issubclass(cls, _StoreRequest) and "inline_data" in obj:
                allowed |= {"inline_data"}
                inline = _hex(obj, "inline_data", "")
                fields["inline_data"] = inline
            if "data_descriptor" in obj:
                d = _object(obj, "data_descriptor", "")
                _check_keys(d, {"stag", "tagged_offset", "length"}, "data_descriptor.")
                fields["data_descriptor"] = DataDescriptor(
                    stag=_number(d, "stag", "data_descriptor.", 0),
                    tagged_offset=_number(d, "tagged_offset", "data_descriptor.", 0),
                    length=_number(d, "length", "data_descriptor.", 0),
                )
            elif inline is not None:
                fields["data_descriptor"] = DataDescriptor(length=len(inline))
    _check_keys(obj, allowed, "")
    kind = flag_type(opcode)
    if kind is not None:
        fields["flags"] = kind(fields["flags"])
    try:
        return cls(**fields)
    except ValueError as exc:
        raise JsonFormError(str(exc)) from None
