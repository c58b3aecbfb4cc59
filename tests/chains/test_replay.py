"""``run_chain_replay``: replay scripts through the offloaded target over the NIC model
give exactly the software replay's lines (the oracle)."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbtpsim.chains.cli import replay_chain_main
from kbtpsim.chains.replay import _ChainRunner, run_chain_replay
from kbtpsim.target import replay as sw_replay
from kbtpsim.target.replay import register_chain_replay, run_replay
from kbtpsim.target.script import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scenarios").glob("replay-*.yaml"))
PROFILES = ("cx5-upstream", "cx5", "ideal", "ideal-be")

#: full-block forms, so the chains serve some requests (the scenarios' short data do not
#: fit a fast path); a TAKE_TICKET / READ_SLOT with a FREE deferred on the held slot
FULL: dict[str, Any] = {
    "target": {"blocks": 8, "block_size": 4096, "max_inline": 4096, "ring_slots": 8},
    "initiators": {"a": {"quota": 4, "handle_base": 0x100, "handle_count": 16},
                   "b": {"quota": 4, "handle_base": 0x200, "handle_count": 16}},
    "steps": [
        {"initiator": "a", "op": "ALLOC_STORE", "handle": 0x100, "flags": ["INLINE", "SEAL"],
         "length": 4096},
        {"initiator": "a", "op": "ALLOC_STORE", "handle": 0x101, "length": 4096},
        {"initiator": "b", "op": "LOAD", "handle": 0x100},
        {"initiator": "a", "op": "STORE", "handle": 0x101, "length": 4096},
        {"initiator": "a", "op": "STORE", "handle": 0x101, "flags": ["INLINE", "SEAL"],
         "data": "x" * 4096},
        {"initiator": "a", "op": "LOAD", "handle": 0x101},
        {"initiator": "b", "op": "TAKE_TICKET", "handle": 0x200, "flags": ["INLINE"],
         "length": 4096},
        {"initiator": "a", "op": "FREE", "handle": 0x100, "generation": 2},
        {"initiator": "b", "op": "READ_SLOT"},
        {"initiator": "a", "op": "ALLOC_STORE", "handle": 0x102, "flags": ["INLINE"],
         "length": 4096},
        {"initiator": "b", "op": "LOAD", "handle": 0x200, "flags": ["ALLOW_UNSEALED"]},
        {"initiator": "a", "op": "GOODBYE"},
    ],
}


def _script(source: Path | dict[str, Any], profile: str) -> dict[str, Any]:
    data = copy.deepcopy(source) if isinstance(source, dict) else \
        yaml.safe_load(source.read_text())
    if profile == "ideal":  # its plan needs ADDR_LE (the chains' WQE fields are LE)
        data["target"]["addr_le"] = True
    return data


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_scenarios_equal_software(path: Path, profile: str) -> None:
    script = _script(path, profile)
    assert run_chain_replay(script, profile) == run_replay(script)


def _invalidate(script: dict[str, Any]) -> dict[str, Any]:
    """INVALIDATE on every LOAD and non-inline STORE / ALLOC_STORE (decision C9)."""
    for step in script["steps"]:
        flags = step.setdefault("flags", [])
        if step["op"] in ("LOAD", "STORE", "ALLOC_STORE") and "INLINE" not in flags:
            flags.append("INVALIDATE")
    return script


@pytest.mark.parametrize("inv", [False, True], ids=["inv-clear", "inv-set"])
@pytest.mark.parametrize("profile", PROFILES)
def test_full_blocks_equal_software_and_use_the_chains(profile: str, inv: bool) -> None:
    script = _script(FULL, profile)
    if inv:
        script = _invalidate(script)
    runner = _ChainRunner(load_script(script), profile)
    assert runner.run() == run_replay(script)
    rep = runner.server.op_report()
    nic = {op: int(v["nic"]) for op, v in rep.items() if v["nic"]}
    if inv:  # the same Send with Invalidate lines as the software target's
        assert sum("invalidated_stag" in line for line in run_replay(script)) >= 4
    if profile == "cx5-upstream":
        assert nic == {}
    elif profile == "ideal":
        assert nic["STORE"] == 2 and nic["LOAD"] >= 1 and "ALLOC_STORE" not in nic
    else:  # ideal-be, cx5: ALLOC_STORE in chains too (TAKE_TICKET held on the CPU)
        assert nic["STORE"] == 2 and nic["LOAD"] >= 1 and nic["ALLOC_STORE"] == 3


def test_deterministic() -> None:
    script = _script(FULL, "ideal-be")
    assert run_chain_replay(script, "ideal-be") == run_chain_replay(script, "ideal-be")


def _args(script: Path, nic: str | None) -> argparse.Namespace:
    return argparse.Namespace(script=str(script), target="chain", nic=nic)


def test_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / "scenarios" / "replay-interleaving.yaml"
    assert replay_chain_main(_args(path, "ideal-be")) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines == run_replay(path)
    assert replay_chain_main(_args(path, "nosuch")) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbtpsim: error:") and err.count("\n") == 1
    assert replay_chain_main(_args(path, None)) == 2
    # the software replay's --target chain goes through the registered handler
    monkeypatch.setattr(sw_replay, "_CHAIN_REPLAY", None)
    register_chain_replay(replay_chain_main)
    assert sw_replay._cmd_replay(_args(path, "cx5")) == 0
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == lines
