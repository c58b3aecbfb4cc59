"""The scenario schema's building blocks: quantities with units, the strict base model,
and the error and hint a rule that spans keys reports.

A :class:`Unit` marks a field as a quantity parsed by :mod:`kbtpsim.units` (``Size``:
an int of octets, ``Time``: an int of picoseconds, ``Rate``: a float of bits per
second, ``OpsRate``: a float of operations per second). :class:`Strict` is the base of
every scenario model (:mod:`kbtpsim.scenario.schema`). :class:`SchemaRuleError` names
the key a rule of :func:`kbtpsim.scenario.rules.check` found wrong.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from kbtpsim.units import parse_rate, parse_size, parse_time


@dataclass(frozen=True)
class Unit:
    """Marks a field as a quantity with units (for the docs and default formatting)."""

    kind: str  # "size", "time", "rate", "ops/s"


def ops_rate(value: object) -> float:
    """Operations per second: a number, or ``"50k/s"``, ``"2M/s"``, ``"1e5/s"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a rate in operations per second, got {value!r}")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"a rate must be positive, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([kKMG]?)\s*(?:/s|ops/s)?\s*",
                         value)
        if m:
            try:
                number = float(m.group(1))
            except ValueError:
                number = -1.0
            if number > 0:
                return number * {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
    raise ValueError(f"cannot parse {value!r} as operations per second "
                     "(e.g. 200000, '200k/s', '1.5M/s')")


Size = Annotated[int, BeforeValidator(parse_size), Unit("size")]
Time = Annotated[int, BeforeValidator(parse_time), Unit("time")]
Rate = Annotated[float, BeforeValidator(parse_rate), Unit("rate")]
OpsRate = Annotated[float, BeforeValidator(ops_rate), Unit("ops/s")]


class Strict(BaseModel):
    """Base of every scenario model: unknown keys are errors; defaults are validated."""

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)


class SchemaRuleError(ValueError):
    """A rule spanning keys failed: ``path`` names the key to change."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def did_you_mean(word: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the nearest of ``choices``, or ''."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
