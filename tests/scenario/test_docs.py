"""docs/scenarios.md is generated from the schema and must be up to date."""

from __future__ import annotations

from kbtpsim.scenario.docs import DOC_PATH, generate
from kbtpsim.scenario.schema import Scenario


def test_docs_are_current() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == generate(), (
        "docs/scenarios.md is stale: run python -m kbtpsim.scenario.docs")


def test_every_key_is_documented() -> None:
    text = generate()
    for name in Scenario.model_fields:
        assert f"`{name}`" in text
    for key in ("target.nic.profile", "initiators[].workload.mix", "stop.warmup",
                "target.block_size", "initiators[].workload.kvcache.tokens_per_block"):
        assert f"`{key}`" in text
    assert "`32KiB`" in text and "`100ms`" in text  # defaults shown with units
