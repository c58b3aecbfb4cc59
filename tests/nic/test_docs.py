"""The example in docs/nic-model.md runs."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "nic-model.md"


def test_doc_example_runs() -> None:
    text = DOC.read_text()
    start = text.index("```python\n") + len("```python\n")
    code = text[start : text.index("```", start)]
    exec(compile(code, str(DOC), "exec"), {})
