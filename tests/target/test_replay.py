"""The replay CLI (README, "kbtpsim replay"): scripts in, one JSON line per completion out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbtpsim.cli import main
from kbtpsim.target.replay import run_replay
from kbtpsim.target.script import ScriptError

ROOT = Path(__file__).resolve().parents[2]
BS = 32768


def base(steps, **initiators):
    return {
        "target": {"blocks": 8, "block_size": "32KiB", "retention_ms": 100},
        "initiators": initiators or {"a": {"quota": 4, "handle_base": 0x100,
                                           "handle_count": 16}},
        "steps": steps,
    }


def ops(lines):
    return [(ln["step"], ln["op"], ln["status"]) for ln in lines if ln["step"] is not None]


def test_interleaving_scenario_reproduces_the_draft() -> None:
    lines = run_replay(ROOT / "scenarios" / "replay-interleaving.yaml")
    done = {(ln["step"], ln["op"]): ln for ln in lines if ln["step"] is not None}
    assert [done[(s, "ALLOC_STORE")]["block_offset"] // BS for s in (1, 2, 3)] == [101, 102, 103]
    assert done[(0, "ALLOC_STORE")]["block_offset"] == 100 * BS
    assert done[(0, "ALLOC_STORE")]["at_step"] == 5  # X read slot 0 at step 5
    assert done[(4, "FREE")]["at_step"] == 5  # the deferred free completed then
    assert done[(6, "ALLOC_STORE")]["block_offset"] == 101 * BS  # ticket 4
    assert done[(7, "LOAD")]["data_hex"] == b"from X".hex()
    order = [(ln["step"], ln["op"]) for ln in lines if ln["step"] is not None]
    assert order.index((0, "ALLOC_STORE")) < order.index((4, "FREE"))


def test_basic_scenario_runs_and_covers_statuses(capsys) -> None:
    assert main(["replay", str(ROOT / "scenarios" / "replay-basic.yaml")]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    statuses = {ln.get("status") for ln in lines}
    assert {"OK", "INVALID_HANDLE", "SEALED", "NOT_SEALED", "TOO_LARGE", "STALE_GENERATION",
            "MALFORMED", "TICKET_ABANDONED", "ACCESS_ERROR"} <= statuses
    for ln in lines:
        if ln["op"] in ("LOAD", "STORE", "ALLOC_STORE", "FREE", "BIND"):
            assert {"step", "initiator", "op", "status", "generation", "data_length",
                    "block_offset"} <= ln.keys()
        if ln["op"] == "LOAD" and ln["status"] == "OK":
            assert "data_hex" in ln


def test_non_inline_store_retention_and_reconnect() -> None:
    lines = run_replay(base([
        {"initiator": "a", "op": "ALLOC_STORE", "handle": "0x101", "data": "via RDMA Read"},
        {"initiator": "a", "op": "DISCONNECT"},
        {"advance_ms": 50},
        {"initiator": "a", "op": "HELLO"},
        {"initiator": "a", "op": "LOAD", "handle": 0x101, "flags": ["allow_unsealed"]},
        {"initiator": "a", "op": "DISCONNECT"},
        {"advance_ms": 100},
        {"initiator": "a", "op": "HELLO"},
        {"initiator": "a", "op": "LOAD", "handle": 0x101, "flags": ["ALLOW_UNSEALED"]},
    ]))
    assert ops(lines) == [(0, "ALLOC_STORE", "OK"), (3, "HELLO", "OK"), (4, "LOAD", "OK"),
                          (7, "HELLO", "OK"), (8, "LOAD", "NOT_VALID")]
    assert lines[3]["data_hex"] == b"via RDMA Read".hex()


def test_hello_of_an_active_initiator_is_rejected() -> None:
    lines = run_replay(base([{"initiator": "a", "op": "HELLO"}]))
    assert ops(lines) == [(0, "HELLO", "ALREADY_BOUND")]


def test_connect_false_and_goodbye() -> None:
    script = base([
        {"initiator": "a", "op": "HELLO"},
        {"initiator": "a", "op": "ALLOC_STORE", "handle": 0x100, "flags": ["INLINE"],
         "data_hex": "00ff"},
        {"initiator": "a", "op": "GOODBYE", "flags": ["RELEASE"]},
        {"initiator": "a", "op": "HELLO"},
        {"initiator": "a", "op": "FREE", "handle": 0x100},
    ])
    script["initiators"]["a"]["connect"] = False
    assert ops(run_replay(script)) == [
        (0, "HELLO", "OK"), (1, "ALLOC_STORE", "OK"), (3, "HELLO", "OK"), (4, "FREE", "NOT_VALID")]


@pytest.mark.parametrize(("steps", "where"), [
    ([{"initiator": "a", "op": "LOAD"}], "steps[0]: LOAD needs 'handle'"),
    ([{"initiator": "a", "op": "LOAD", "handle": "zz"}], "steps[0].handle"),
    ([{"initiator": "zed", "op": "LOAD", "handle": 1}], "steps[0].initiator"),
    ([{"initiator": "a", "op": "JUMP", "handle": 1}], "steps[0].op"),
    ([{"initiator": "a", "op": "LOAD", "handle": 1, "flags": ["SHINY"]}],
     "steps[0]: unknown flag 'SHINY'"),
    ([{"advance_ms": 3}, {"initiator": "a", "op": "LOAD", "handle": 1, "colour": 2}],
     "steps[1].colour"),
    ([{"advance_ms": 1, "initiator": "a"}], "steps[0]: an advance_ms step"),
    ([{"initiator": "a", "op": "READ_SLOT"}], "steps[0]:"),
    ([{"initiator": "a", "op": "DISCONNECT"}, {"initiator": "a", "op": "FREE", "handle": 1}],
     "steps[1]: initiator 'a' is not connected"),
])
def test_invalid_script_names_step_and_field(tmp_path, capsys, steps, where) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(base(steps)))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbtpsim: error: ") and err.count("\n") == 1, err
    assert where in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("script", "where"), [
    ({"target": {"blocks": 4}, "initiators": {"a": {"quota": 1, "handle_base": 0,
                                                     "handle_count": 1}}},
     "target.block_size"),
    ({"target": {"blocks": 4, "block_size": "9 parsecs"},
      "initiators": {"a": {"quota": 1, "handle_base": 0, "handle_count": 1}}},
     "target.block_size"),
    ({"target": {"blocks": 4, "block_size": 64},
      "initiators": {"a": {"quota": 9, "handle_base": 0, "handle_count": 1}}},
     "target: TargetConfig.initiators: sum of quotas"),
    ({"target": {"blocks": 4, "block_size": 64}, "initiators": {}}, "initiators"),
    ({"target": {"blocks": 4, "block_size": 64},
      "initiators": {"a": {"quota": 1, "handle_base": 0, "handle_count": 1,
                           "features": ["TELEPORT"]}}}, "initiators.a.features[0]"),
])
def test_invalid_target_or_initiators(script, where) -> None:
    with pytest.raises(ScriptError, match=None) as info:
        run_replay(script)
    assert str(info.value).startswith(where), str(info.value)


def test_cli_errors(tmp_path, capsys) -> None:
    assert main(["replay", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: [unclosed")
    assert main(["replay", str(bad)]) == 2
    assert "invalid YAML" in capsys.readouterr().err
    good = ROOT / "scenarios" / "replay-basic.yaml"
    assert main(["replay", "--target", "chain", str(good)]) == 2
    assert "chain" in capsys.readouterr().err
    assert main(["replay", "--nic", "cx7", str(good)]) == 2
    assert "--nic" in capsys.readouterr().err
