"""`kbtpsim decode` / `kbtpsim encode`: output, round trip, and one-line errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from kbtpsim.cli import main
from kbtpsim.wire import decode, encode
from tests.wire.test_codec import ALLOC_STORE_VECTOR, COMPLETION_VECTOR


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_decode_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["decode", ALLOC_STORE_VECTOR.hex()], capsys)
    assert code == 0
    obj = json.loads(out)
    assert obj["opcode"] == "ALLOC_STORE" and obj["inline_data"] == b"KVBLOCK!".hex()


def test_decode_accepts_spaced_hex(capsys: pytest.CaptureFixture[str]) -> None:
    spaced = " ".join(f"{b:02x}" for b in COMPLETION_VECTOR).split()
    code, out, _ = run(["decode", *spaced], capsys)
    assert code == 0 and json.loads(out)["block_offset"] == 0x150000


@pytest.mark.parametrize("vector", [ALLOC_STORE_VECTOR, COMPLETION_VECTOR], ids=["req", "cpl"])
@pytest.mark.parametrize("le", [[], ["--addr-le"]], ids=["be", "le"])
def test_encode_inverts_decode(
    vector: bytes, le: list[str], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if le:  # the same message with ADDR_LE field order
        vector = encode(decode(vector), addr_le=True)
    code, out, _ = run(["decode", vector.hex(), *le], capsys)
    assert code == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(out))
    code, out2, _ = run(["encode", *le], capsys)
    assert code == 0 and out2.strip() == vector.hex()


def test_encode_from_file(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"  # type: ignore[operator]
    path.write_text(json.dumps({"opcode": "GOODBYE", "flags": ["RELEASE"]}))
    code, out, _ = run(["encode", str(path)], capsys)
    assert code == 0 and out.strip() == "01300001" + "00" * 20


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["decode", "0112"], "MALFORMED at octet 2: truncated header"),
        (["decode", "zz"], "not a hex string"),
        (["decode", COMPLETION_VECTOR.hex() + "00"], "MALFORMED at octet 40: 1 trailing"),
        (["decode", "02" + COMPLETION_VECTOR.hex()[2:]], "octet 0: unsupported Version 2"),
        (["encode", "/nonexistent/file.json"], "cannot read"),
    ],
)
def test_errors_are_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and err.startswith("kbtpsim: error:")


@pytest.mark.parametrize(
    ("text", "needle"),
    [("{", "invalid JSON"), ('{"opcode": "LOAD", "hndle": 1}', "hndle"), ("[]", "object")],
)
def test_encode_errors(
    text: str, needle: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, _, err = run(["encode"], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_console_script_runs() -> None:
    """The installed entry point works (as the README's first command uses it)."""
    proc = subprocess.run(
        [sys.executable, "-m", "kbtpsim.cli", "decode", "--compact", COMPLETION_VECTOR.hex()],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "OK"
