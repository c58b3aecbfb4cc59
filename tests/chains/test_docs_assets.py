"""docs/chains/*.txt are what ``python -m kbtpsim.chains.measure --docs docs`` writes.

The listings are regenerated here (the drawings and the measured tables are the slow parts
and are left out); a chain change that does not regenerate them fails this test.
"""

from __future__ import annotations

from pathlib import Path

from kbtpsim.chains.measure import ASSETS, listings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "chains"


def test_listings_match_the_committed_files() -> None:
    got = listings()
    assert len(got) == len(ASSETS)
    assert sorted(got) == sorted(p.name for p in DOCS.glob("*.txt"))  # none stale, none missing
    for name, text in got.items():
        assert (DOCS / name).read_text() == text, (
            f"docs/chains/{name} is stale: run python -m kbtpsim.chains.measure --docs docs")


def test_every_listing_has_its_drawing() -> None:
    assert sorted(p.stem for p in DOCS.glob("*.png")) == sorted(
        Path(n).stem for n in listings())
