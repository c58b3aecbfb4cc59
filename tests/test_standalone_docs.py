"""README.md, docs/ and scenarios/ stand alone: users have only the repository, so they
name no file outside it (the draft by its title, its content in docs/protocol.md, the
calibration sources in docs/calibration.md), and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = ("shared/", "kbtp-draft", "FORMATS.md", "published.md", "rdma-primer",
           "STYLE.md")


def _files() -> list[Path]:
    out = [REPO / "README.md"]
    out += sorted((REPO / "docs").rglob("*.md"))
    out += sorted((REPO / "scenarios").glob("*.yaml"))
    return out


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_reference_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for word in OUTSIDE:
        assert word not in text, f"{path.relative_to(REPO)} names {word!r}"
    if path.suffix == ".md":
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (path.parent / link).exists(), f"{path.relative_to(REPO)}: {link}"


def test_protocol_and_calibration_pages_are_linked() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/protocol.md)" in readme and "*KV Cache Block Transfer Protocol*" in readme
    assert "calibration.md" in (REPO / "docs" / "nic-model.md").read_text(encoding="utf-8")
