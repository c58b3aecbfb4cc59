"""``kbtpsim chains show|explain|draw --chains v2``: the v2 chain (lanes, WAITs per CQ)
and its recycle segment, or why v2 cannot run on the profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbtpsim.cli import main


def test_show_v2_lists_lanes_and_the_recycle_segment(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chains", "show", "LOAD", "--nic", "ideal-be", "--chains", "v2"]) == 0
    out = capsys.readouterr().out
    assert "worker@load" in out
    # decision C30: the LOAD reads its own entry (C21), so its chain has no look-up lane
    assert "qp:worker@dispatch" not in out and "read_entry" not in out
    assert main(["chains", "show", "STORE", "--nic", "ideal-be", "--chains", "v2"]) == 0
    assert "read_entry_store_inline" in capsys.readouterr().out  # its own (C30)
    assert "recycle segment" in out and "rearm_recv" in out and "restore_scratch" in out
    assert main(["chains", "show", "LOAD", "--nic", "ideal-be", "--chains", "v1"]) == 0
    assert "worker@" not in capsys.readouterr().out  # v1: one worker
    assert main(["chains", "show", "LOAD", "--nic", "ideal-be"]) == 0  # default: v2 (C14)
    assert "recycle segment" in capsys.readouterr().out


def test_the_default_design_is_named_where_it_is_v1(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chains", "explain", "LOAD", "--nic", "ideal"]) == 0
    out = capsys.readouterr().out
    assert "chains v1: the default on ideal, which cannot re-arm chains" in out
    assert main(["chains", "show", "LOAD", "--nic", "cx5"]) == 0  # cx5 can: v2
    out = capsys.readouterr().out
    assert "recycle segment" in out and "the default on" not in out


def test_explain_v2_says_why_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chains", "explain", "LOAD", "--nic", "ideal", "--addr-le",
                 "--chains", "v2"]) == 0
    assert "chains v2 on ideal: cannot run (little-endian atomics" in \
        capsys.readouterr().out
    assert main(["chains", "show", "LOAD", "--nic", "cx5-upstream", "--chains", "v2"]) == 0
    assert "chains v2: not on cx5-upstream (no WAIT/ENABLE" in capsys.readouterr().out


def test_draw_v2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "load-v2.png"
    assert main(["chains", "draw", "LOAD", "--nic", "ideal-be", "--chains", "v2", "-o",
                 str(out)]) == 0
    assert out.stat().st_size > 1000
