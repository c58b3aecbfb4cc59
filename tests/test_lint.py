"""The code base stays ruff clean (the configuration is in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    paths = [p for p in ("kbtpsim", "tests", "benchmarks") if (ROOT / p).exists()]
    proc = subprocess.run(
        [ruff, "check", "--no-cache", *paths],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
