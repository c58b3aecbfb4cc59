"""The replay script schema (README, "kbtpsim replay"): strict, with errors that name the field.

Unknown keys are rejected. :func:`load_script` returns a validated :class:`Script` or
raises :class:`ScriptError` whose message starts with the path of the bad field, e.g.
``steps[3].handle: ...``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from kbtpsim.units import UnitError, parse_size
from kbtpsim.wire.constants import Feature, GoodbyeFlag, RequestFlag
from kbtpsim.yamlfile import DuplicateKey, load_yaml


class ScriptError(ValueError):
    """An invalid replay script; the message names the step and field."""


def _int(value: Any) -> Any:
    """Integers may be written in hex as strings ("0x4001")."""
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            raise ValueError(f"not an integer: {value!r}") from None
    return value


def _size(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return int(parse_size(value))
        except UnitError as exc:
            raise ValueError(str(exc)) from None
    return value


Int = Annotated[int, BeforeValidator(_int)]
Size = Annotated[int, BeforeValidator(_size)]

OPS = ("LOAD", "STORE", "ALLOC_STORE", "FREE", "BIND", "HELLO", "GOODBYE", "DISCONNECT",
       "TAKE_TICKET", "READ_SLOT", "DIRECT_ALLOC", "RAW")
Op = Literal["LOAD", "STORE", "ALLOC_STORE", "FREE", "BIND", "HELLO", "GOODBYE", "DISCONNECT",
             "TAKE_TICKET", "READ_SLOT", "DIRECT_ALLOC", "RAW"]
#: ops that need a handle
HANDLE_OPS = {"LOAD", "STORE", "ALLOC_STORE", "FREE", "BIND", "TAKE_TICKET"}
#: ops whose flags are RequestFlag names
REQUEST_OPS = {"LOAD", "STORE", "ALLOC_STORE", "FREE", "TAKE_TICKET"}
DATA_OPS = {"STORE", "ALLOC_STORE", "TAKE_TICKET", "DIRECT_ALLOC", "RAW"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetSpec(_Strict):
    blocks: int = Field(gt=0)
    block_size: Size = Field(gt=0)
    ring_slots: int | None = None
    first_block: int = Field(0, ge=0)
    retention_ms: int = Field(30_000, ge=0)
    ticket_timeout_ms: int = Field(100, gt=0)
    max_inline: Size = Field(4096, ge=0)
    request_credits: int = Field(64, gt=0)
    counter_mode: Literal["masked", "unmasked"] = "masked"
    binding: Literal["rdmap", "infiniband"] = "rdmap"
    addr_le: bool = False


class InitiatorSpec(_Strict):
    quota: int = Field(ge=0)
    handle_base: Int = Field(ge=0)
    handle_count: Int = Field(gt=0)
    features: list[Literal["DIRECT_LOAD", "DIRECT_ALLOC", "RECORD_COMPLETION", "ADDR_LE"]] = []
    trust_domain: str = "default"
    connect: bool = True
    initiator_id: str | None = None  #: 32 hex digits; default derived from the name

    @model_validator(mode="after")
    def _id(self) -> InitiatorSpec:
        if self.initiator_id is not None:
            try:
                raw = bytes.fromhex(self.initiator_id)
            except ValueError:
                raise ValueError("initiator_id must be 32 hex digits") from None
            if len(raw) != 16:
                raise ValueError("initiator_id must be 32 hex digits (128 bits)")
        return self

    @property
    def feature_bits(self) -> Feature:
        bits = Feature(0)
        for name in self.features:
            bits |= Feature[name]
        return bits

    def id_bytes(self, name: str) -> bytes:
        if self.initiator_id is not None:
            return bytes.fromhex(self.initiator_id)
        return hashlib.sha256(f"kbtpsim initiator {name}".encode()).digest()[:16]


class Step(_Strict):
    initiator: str | None = None
    op: Op | None = None
    advance_ms: int | None = Field(None, ge=0)
    handle: Int | None = Field(None, ge=0, lt=1 << 64)
    generation: Int = Field(0, ge=0, le=0xFFFF)
    flags: list[str | int] = []
    data: str | None = None
    data_hex: str | None = None
    length: Int | None = Field(None, ge=0, lt=1 << 32)
    request_id: Int | None = Field(None, ge=0, lt=1 << 64)
    ticket: Int | None = Field(None, ge=0, lt=1 << 32)
    block_offset: Int | None = Field(None, ge=0, lt=1 << 64)

    @model_validator(mode="after")
    def _shape(self) -> Step:
        if self.advance_ms is not None:
            extra = [k for k in self.model_fields_set if k != "advance_ms"]
            if extra:
                raise ValueError(f"an advance_ms step takes no other field (got {extra[0]})")
            return self
        if self.op is None:
            raise ValueError("a step needs 'op' (or is an 'advance_ms' step)")
        if self.initiator is None:
            raise ValueError(f"{self.op} needs 'initiator'")
        if self.op in HANDLE_OPS and self.handle is None:
            raise ValueError(f"{self.op} needs 'handle'")
        if self.data is not None and self.data_hex is not None:
            raise ValueError("give 'data' or 'data_hex', not both")
        if self.data_hex is not None:
            try:
                bytes.fromhex(self.data_hex)
            except ValueError:
                raise ValueError("data_hex is not a hex string") from None
        if self.op == "RAW" and self.data_hex is None:
            raise ValueError("RAW needs 'data_hex'")
        if (self.data is not None or self.data_hex is not None) and self.op not in DATA_OPS:
            raise ValueError(f"{self.op} takes no data")
        self.flag_bits()  # raises on unknown names
        return self

    @property
    def payload(self) -> bytes | None:
        if self.data_hex is not None:
            return bytes.fromhex(self.data_hex)
        if self.data is not None:
            return self.data.encode()
        return None

    def flag_bits(self) -> int:
        kind: type[RequestFlag] | type[GoodbyeFlag] | None
        if self.op in REQUEST_OPS:
            kind = RequestFlag
        elif self.op == "GOODBYE":
            kind = GoodbyeFlag
        else:
            kind = None
        bits = 0
        for flag in self.flags:
            if isinstance(flag, int):
                bits |= flag  # raw bits, to script undefined flags
                continue
            name = flag.upper()
            if kind is None or name not in kind.__members__:
                known = ", ".join(kind.__members__) if kind is not None else "none"
                raise ValueError(f"unknown flag {flag!r} for {self.op} (known: {known})")
            bits |= int(kind[name])
        if not 0 <= bits <= 0xFFFF:
            raise ValueError("flags must fit in 16 bits")
        return bits


class Script(_Strict):
    target: TargetSpec
    initiators: dict[str, InitiatorSpec] = Field(min_length=1)
    steps: list[Step] = []

    @model_validator(mode="after")
    def _names(self) -> Script:
        for index, step in enumerate(self.steps):
            if step.initiator is not None and step.initiator not in self.initiators:
                raise ScriptError(
                    f"steps[{index}].initiator: unknown initiator {step.initiator!r} "
                    f"(the script defines {', '.join(self.initiators)})"
                )
        return self


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "literal[", "int", "str")) and out:
            continue  # pydantic's union/validator tags are not fields
        else:
            out += f".{part}" if out else str(part)
    return out or "script"


def parse_script(raw: Any) -> Script:
    """Validate a script given as a dict; raise ScriptError naming the field."""
    if not isinstance(raw, dict):
        raise ScriptError("script: the top level must be a mapping")
    try:
        return Script.model_validate(raw)
    except ScriptError:
        raise
    except ValidationError as exc:
        err = exc.errors()[0]
        message = err["msg"].removeprefix("Value error, ")
        if isinstance(err.get("ctx", {}).get("error"), ScriptError):
            raise ScriptError(message) from None
        raise ScriptError(f"{_where(err['loc'])}: {message}") from None


def load_script(source: str | Path | dict[str, Any]) -> Script:
    """A script from a dict or a YAML file."""
    if isinstance(source, dict):
        return parse_script(source)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"cannot read {path}: {exc.strerror}") from None
    try:
        raw = load_yaml(text)
    except DuplicateKey as exc:
        raise ScriptError(f"{exc.path}: {exc} in {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ScriptError(f"{path}: invalid YAML{where}") from None
    if isinstance(raw, dict) and "steps" not in raw:
        other = _other_kind(raw)
        if other is not None:
            what, command = other
            raise ScriptError(f"{path}: this is {what}, not a replay script (target, "
                              f"initiators and steps): run it with {command} {path}")
    return parse_script(raw)


#: keys only a scenario has at its top level (a replay script has target, initiators
#: as a mapping, and steps)
_SCENARIO_KEYS = {"name", "seed", "stop", "metrics", "network", "additional_targets"}


def _other_kind(raw: dict[str, Any]) -> tuple[str, str] | None:
    """(what, command) when ``raw`` is a scenario or a sweep file, not a script."""
    if {"base", "parameters", "cases"} & set(raw):
        return "a sweep file (base and parameters or cases)", "kbtpsim sweep"
    if _SCENARIO_KEYS & set(raw) or isinstance(raw.get("initiators"), list) or not raw:
        return "a scenario", "kbtpsim run"
    return None
