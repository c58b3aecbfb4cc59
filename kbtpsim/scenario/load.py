"""Loading scenarios: YAML to a validated :class:`Scenario`, with ``--set`` overrides.

Every problem is a :class:`ScenarioError` whose text is one line,
``<key path>: <problem>`` (``initiators[0].workload.mix.lod: unknown key (did you mean
'load'?)``): the first error pydantic reports, or the first cross-key rule
(:func:`kbtpsim.scenario.rules.check`) that fails.
"""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kbtpsim.scenario.schema import Scenario, SchemaRuleError, check, did_you_mean
from kbtpsim.yamlfile import DuplicateKey, load_yaml


class ScenarioError(ValueError):
    """A scenario problem, with the key path it concerns (``""`` for the file itself)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


# ---------------------------------------------------------------------------- paths
_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list[str | int]:
    """``"initiators[0].workload.mix"`` -> ``["initiators", 0, "workload", "mix"]``."""
    parts: list[str | int] = []
    pos = 0
    while pos < len(path):
        if path[pos] == "." and parts:
            pos += 1
        m = _TOKEN.match(path, pos)
        if m is None:
            raise ScenarioError(path, "not a key path (e.g. target.blocks or "
                                "initiators[0].workload.window)")
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    if not parts:
        raise ScenarioError(path, "empty key path")
    return parts


def join_path(parts: typing.Sequence[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# ---------------------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[str, Any]:
    """``"target.blocks=1024"`` -> ``("target.blocks", 1024)`` (the value is YAML)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(text, "--set needs KEY=VALUE (e.g. target.blocks=1024)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(key, f"value {raw!r} is not valid YAML: "
                            f"{str(exc).splitlines()[0]}") from None
    return key, value


def apply_overrides(data: dict[str, Any], overrides: typing.Iterable[tuple[str, Any]]
                    ) -> dict[str, Any]:
    """A copy of the raw scenario mapping with each ``(path, value)`` set. Missing
    mapping levels are created (validation then rejects unknown keys); a list index
    beyond the list is an error, except one past the end, which appends."""
    out = copy.deepcopy(data)
    for path, value in overrides:
        parts = split_path(path)
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            where = join_path(parts[: i + 1])
            if isinstance(part, int):
                if not isinstance(node, list):
                    node_missing = node is None
                    raise ScenarioError(where, "not a list" if not node_missing else
                                        "no such list")
                if part > len(node):
                    raise ScenarioError(where, f"index {part} is beyond the list "
                                        f"({len(node)} entries)")
                if part == len(node):
                    node.append({})
                if last:
                    node[part] = value
                else:
                    if node[part] is None:
                        node[part] = {}
                    node = node[part]
            else:
                if not isinstance(node, dict):
                    raise ScenarioError(join_path(parts[:i]), "not a mapping")
                if last:
                    node[part] = value
                else:
                    if node.get(part) is None:
                        nxt = parts[i + 1]
                        if part == "initiators" and i == 0:
                            node[part] = [{}]  # the default: one initiator
                        else:
                            node[part] = [] if isinstance(nxt, int) else {}
                    node = node[part]
    return out


# ---------------------------------------------------------------------------- loading
def read_yaml(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a scenario or sweep file (errors as :class:`ScenarioError`):
    duplicate keys and an empty (or comment-only) file are errors."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(str(p), f"cannot read: {exc.strerror}") from None
    try:
        data = load_yaml(text)
    except DuplicateKey as exc:
        raise ScenarioError(exc.path, f"{exc} in {p}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(str(p), f"invalid YAML{where}: {problem}") from None
    if data is None:
        raise ScenarioError(str(p), "the file is empty (nothing but comments or blank "
                            "lines): write at least one key, e.g. 'name: mine'; every "
                            "default is in docs/scenarios.md")
    if not isinstance(data, dict):
        raise ScenarioError(str(p), "a scenario must be a YAML mapping")
    return data


#: The kinds of YAML file kbtpsim reads, and the command that takes each.
FILE_KINDS = {"scenario": ("a scenario", "kbtpsim run"),
              "sweep": ("a sweep file (base and parameters or cases)", "kbtpsim sweep"),
              "replay": ("a replay script (target, initiators and steps)", "kbtpsim replay")}


def file_kind(data: dict[str, Any]) -> str:
    """``scenario``, ``sweep`` or ``replay``: what kind of file a raw mapping is."""
    if "steps" in data:
        return "replay"
    if {"base", "parameters", "cases"} & set(data):
        return "sweep"
    return "scenario"


def expect_kind(data: dict[str, Any], path: str | Path, kind: str) -> None:
    """A :class:`ScenarioError` saying which kind of file ``path`` is and which command
    takes it, unless it is a ``kind`` file."""
    got = file_kind(data)
    if got != kind:
        what, command = FILE_KINDS[got]
        raise ScenarioError(str(path), f"this is {what}, not {FILE_KINDS[kind][0]}: run it "
                            f"with {command} {path}")


def scenario_from_dict(data: dict[str, Any],
                       overrides: typing.Iterable[tuple[str, Any]] = ()) -> Scenario:
    """Validate a raw mapping (after ``overrides``) into a checked :class:`Scenario`."""
    raw = apply_overrides(data, overrides)
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise first_error(exc, raw) from None
    try:
        check(sc)
    except SchemaRuleError as exc:
        raise ScenarioError(exc.path, exc.message) from None
    return sc


def load_scenario(path: str | Path, overrides: typing.Iterable[str] = (),
                  seed: int | None = None) -> Scenario:
    """Read, override (``KEY=VALUE`` strings) and validate a scenario file."""
    pairs = [parse_override(o) for o in overrides]
    if seed is not None:
        pairs.append(("seed", seed))
    data = read_yaml(path)
    expect_kind(data, path, "scenario")
    return scenario_from_dict(data, pairs)


# ---------------------------------------------------------------------------- errors
def first_error(exc: ValidationError, raw: Any) -> ScenarioError:
    """The first pydantic error as ``path: message (did you mean 'x'?)``."""
    errors = exc.errors(include_url=False)
    # a union (e.g. ``int | None``) reports one error per branch: prefer the informative
    err = errors[0]
    for e in errors:
        if e["type"] not in ("none_required",):
            err = e
            break
    loc = [p for p in err["loc"] if p != "[key]"]
    key_error = "[key]" in err["loc"]
    # drop the branch names pydantic adds inside unions (``int``, ``function-before[...]``)
    parts: list[str | int] = []
    model_path: list[str | int] = []
    for p in loc:
        if isinstance(p, str) and (p in ("int", "float", "str", "bool", "none", "list")
                                   or "[" in p or p.startswith(("function-", "lax-"))):
            continue
        parts.append(p)
        model_path.append(p)
    path = join_path(parts)
    kind = err["type"]
    msg = str(err["msg"])
    if kind == "extra_forbidden":
        choices = _fields_at(model_path[:-1])
        return ScenarioError(path, f"unknown key{did_you_mean(str(parts[-1]), choices)}")
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        value = parts[-1] if key_error else err.get("input")
        what = "unknown key" if key_error else f"{value!r} is not one of " + ", ".join(
            repr(e) for e in expected)
        return ScenarioError(path, f"{what}{did_you_mean(str(value), expected)}")
    if kind == "missing":
        return ScenarioError(path, "required key is missing")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        msg = f"{msg} (got {err.get('input')!r})"
    return ScenarioError(path, msg[:1].lower() + msg[1:])


def _fields_at(path: typing.Sequence[str | int]) -> list[str]:
    """The keys valid at ``path`` of the schema (for did-you-mean)."""
    tp: Any = Scenario
    for part in path:
        tp = _step(tp, part)
        if tp is None:
            return []
    model = _model_of(tp)
    return list(model.model_fields) if model is not None else []


def _model_of(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        m = _model_of(arg)
        if m is not None:
            return m
    return None


def _step(tp: Any, part: str | int) -> Any:
    if isinstance(part, int):
        origin = typing.get_origin(tp)
        if origin is list:
            return typing.get_args(tp)[0]
        for arg in typing.get_args(tp):
            if typing.get_origin(arg) is list:
                return typing.get_args(arg)[0]
        return None
    model = _model_of(tp)
    if model is not None and part in model.model_fields:
        return model.model_fields[part].annotation
    if typing.get_origin(tp) is dict:
        return typing.get_args(tp)[1]
    return None
