"""Units as users write them in scenarios."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbtpsim.units import (
    UnitError,
    format_size,
    format_time,
    parse_frequency,
    parse_rate,
    parse_size,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "octets"),
    [("32KiB", 32768), ("4 KiB", 4096), ("2MiB", 2**21), ("1MB", 10**6), (4096, 4096),
     ("512", 512), ("1.5KiB", 1536), ("1gib", 2**30), ("32kB", 32000), ("1GB", 10**9),
     ("512B", 512)],
)
def test_sizes(text: object, octets: int) -> None:
    assert parse_size(text) == octets


@pytest.mark.parametrize(
    ("text", "ps"),
    [("2us", 2_000_000), ("150ns", 150_000), ("1.5ms", 1_500_000_000), ("1s", 10**12),
     ("7ps", 7), ("0.5ns", 500), (0, 0), ("0", 0)],
)
def test_times(text: object, ps: int) -> None:
    assert parse_time(text) == ps


def test_rates_and_frequencies() -> None:
    assert parse_rate("200Gbps") == 200e9
    assert parse_rate("100 gbps") == 100e9
    assert parse_frequency("1.2GHz") == 1.2e9


@pytest.mark.parametrize(
    ("func", "value", "needle"),
    [
        (parse_size, "32KB/s", "cannot parse"),
        (parse_size, "32Kib", None),
        (parse_size, "3 parsecs", "unknown unit 'parsecs'"),
        (parse_size, "0.3B", "whole number"),
        (parse_size, -1, "negative"),
        (parse_size, True, "expected a size"),
        (parse_time, "2 fortnights", "unknown unit"),
        (parse_rate, "fast", "cannot parse"),
        (parse_time, None, "expected a time"),
    ],
)
def test_errors_name_the_value(func: object, value: object, needle: str | None) -> None:
    if needle is None:  # 'Kib' is accepted case-insensitively as KiB
        assert func(value) == 32768  # type: ignore[operator]
        return
    with pytest.raises(UnitError, match=needle):
        func(value)  # type: ignore[operator]


@given(st.integers(0, 2**45))
def test_format_size_round_trips(n: int) -> None:
    assert parse_size(format_size(n)) == n


@given(st.integers(0, 10**15))
def test_format_time_round_trips(ps: int) -> None:
    assert parse_time(format_time(ps)) == ps


@pytest.mark.parametrize(("text", "message"), [
    ("32kb", "'32kb' is ambiguous: 32KiB = 32768 or 32kB = 32000 octets?"),
    ("32KB", "'32KB' is ambiguous: 32KiB = 32768 or 32kB = 32000 octets?"),
    ("32Kb", "'32Kb' is ambiguous: 32KiB = 32768 or 32kB = 32000 octets?"),
    ("2mb", "'2mb' is ambiguous: 2MiB = 2097152 or 2MB = 2000000 octets?"),
    ("1.5KB", "'1.5KB' is ambiguous: 1.5KiB = 1536 or 1.5kB = 1500 octets?"),
    ("1Gb", "'1Gb' is ambiguous: 1GiB = 1073741824 or 1GB = 1000000000 octets?"),
])
def test_ambiguous_sizes_are_rejected_with_a_hint(text: str, message: str) -> None:
    with pytest.raises(UnitError) as exc:
        parse_size(text)
    assert str(exc.value) == message


@pytest.mark.parametrize("value", [1000, "1000", 2.5, "10"])
def test_a_time_needs_a_unit(value: object) -> None:
    with pytest.raises(UnitError) as exc:
        parse_time(value)
    assert str(exc.value) == (f"{value!r} has no unit (a time needs one: '{value}ns', "
                              f"'{value}us', ...)")
