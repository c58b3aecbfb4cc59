"""Quantities with units, as users write them in scenarios and on the command line.

``parse_size("32KiB") == 32768``, ``parse_time("2us") == 2_000_000`` (picoseconds, the
simulator's time unit), ``parse_rate("200Gbps") == 200e9`` (bits per second). Plain
numbers are octets for sizes and bits per second for rates; a time needs a unit (only 0
may go without). Sizes take binary units (``KiB``, ``MiB``, ... in any case) and decimal
ones spelled exactly ``kB``, ``MB``, ``GB``, ``TB``: ``32KB``, ``32kb`` or ``32Mb`` are
ambiguous (1000 or 1024? bits or octets?) and rejected with a hint. Errors are
:class:`UnitError` (a ValueError) whose message names the value and the units accepted.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: Simulated time is an integer number of picoseconds.
PS_PER_NS = 1_000
PS_PER_US = 1_000_000
PS_PER_MS = 1_000_000_000
PS_PER_S = 1_000_000_000_000

SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
TIME_UNITS: dict[str, int] = {
    "": 1,
    "ps": 1,
    "ns": PS_PER_NS,
    "us": PS_PER_US,
    "µs": PS_PER_US,
    "ms": PS_PER_MS,
    "s": PS_PER_S,
}
RATE_UNITS: dict[str, int] = {
    "": 1,
    "bps": 1,
    "kbps": 10**3,
    "mbps": 10**6,
    "gbps": 10**9,
    "tbps": 10**12,
}
FREQ_UNITS: dict[str, int] = {"": 1, "hz": 1, "khz": 10**3, "mhz": 10**6, "ghz": 10**9}

_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ]*)\s*$")


class UnitError(ValueError):
    """A quantity that cannot be parsed; the message names it and the accepted units."""


def _parse(value: object, units: dict[str, int], kind: str) -> Fraction:
    if isinstance(value, bool):
        raise UnitError(f"expected a {kind}, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise UnitError(f"a {kind} cannot be negative, got {value!r}")
        if units is TIME_UNITS and value != 0:
            raise UnitError(f"{value!r} has no unit (a time needs one: '{value}ns', "
                            f"'{value}us', ...)")
        return Fraction(value)
    if not isinstance(value, str):
        raise UnitError(f"expected a {kind}, got {value!r}")
    match = _QUANTITY.match(value)
    if match is None:
        raise UnitError(f"cannot parse {value!r} as a {kind} (a number and a unit, e.g. "
                        f"{_example(units)})")
    number, unit = match.groups()
    key = unit if unit in units else unit.lower()
    if units is SIZE_UNITS and key not in units and unit.lower() in _DECIMAL:
        binary, decimal = _DECIMAL[unit.lower()]
        raise UnitError(f"{value!r} is ambiguous: {number}{binary} = "
                        f"{_show(Fraction(number) * SIZE_UNITS[binary.lower()])} or "
                        f"{number}{decimal} = {_show(Fraction(number) * SIZE_UNITS[decimal])}"
                        " octets?")
    if key not in units:
        known = ", ".join(_SHOWN.get(u, u) for u in units if u)
        raise UnitError(f"unknown unit {unit!r} in {value!r} for a {kind} (known: {known})")
    if units is TIME_UNITS and not unit and Fraction(number) != 0:
        raise UnitError(f"{value!r} has no unit (a time needs one: '{number}ns', "
                        f"'{number}us', ...)")
    return Fraction(number) * units[key]


def _show(amount: Fraction) -> str:
    return str(int(amount)) if amount.denominator == 1 else f"{float(amount):g}"


#: how size units are spelled in messages
_SHOWN = {"b": "B", "kib": "KiB", "mib": "MiB", "gib": "GiB", "tib": "TiB"}
#: size units that are ambiguous in another case: lower-case spelling -> (binary, decimal)
_DECIMAL = {"kb": ("KiB", "kB"), "mb": ("MiB", "MB"), "gb": ("GiB", "GB"),
            "tb": ("TiB", "TB")}


def _example(units: dict[str, int]) -> str:
    return {id(SIZE_UNITS): "'32KiB'", id(TIME_UNITS): "'2us'", id(RATE_UNITS): "'200Gbps'",
            id(FREQ_UNITS): "'1.2GHz'"}.get(id(units), "'1'")


def _whole(amount: Fraction, value: object, kind: str) -> int:
    if amount.denominator != 1:
        raise UnitError(f"{value!r} is not a whole number of {kind}")
    return int(amount)


def parse_size(value: object) -> int:
    """Octets, from ``4096``, ``"4KiB"``, ``"1MB"``."""
    return _whole(_parse(value, SIZE_UNITS, "size"), value, "octets")


def parse_time(value: object) -> int:
    """Picoseconds, from ``"2us"``, ``"150ns"``, ``"1.5ms"``, ``"7ps"`` (or 0)."""
    return _whole(_parse(value, TIME_UNITS, "time"), value, "picoseconds")


def parse_rate(value: object) -> float:
    """Bits per second, from ``"200Gbps"`` or a number."""
    return float(_parse(value, RATE_UNITS, "rate"))


def parse_frequency(value: object) -> float:
    """Hertz, from ``"1.2GHz"`` or a number."""
    return float(_parse(value, FREQ_UNITS, "frequency"))


def format_size(octets: int) -> str:
    """The shortest exact binary form: 32768 -> '32KiB', 1000 -> '1000B'."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = SIZE_UNITS[unit.lower()]
        if octets and octets % factor == 0:
            return f"{octets // factor}{unit}"
    return f"{octets}B"


def format_time(ps: int) -> str:
    """A readable time: 2_000_000 -> '2us'."""
    for unit, factor in (("s", PS_PER_S), ("ms", PS_PER_MS), ("us", PS_PER_US), ("ns", PS_PER_NS)):
        if ps and ps % factor == 0:
            return f"{ps // factor}{unit}"
    return f"{ps}ps"
