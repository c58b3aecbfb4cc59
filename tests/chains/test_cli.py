"""``kbtpsim chains``: list, show, draw, explain, and user errors."""

from __future__ import annotations

import argparse

import pytest

from kbtpsim.chains.cli import add_chains_parser


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kbtpsim")
    add_chains_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["chains", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("load", "store_inline", "store_read", "alloc_inline", "alloc_read", "ideal",
                 "cx5+strided"):
        assert name in out


def test_show_offloaded_chain_lists_every_wr_with_sources(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["chains", "show", "LOAD", "--nic", "ideal", "--addr-le"]) == 0
    out = capsys.readouterr().out
    assert "OFFLOADED" in out
    line = next(x for x in out.splitlines() if " read_entry " in x)
    assert "RDMA_READ" in line and "raddr=patch <- p_handle" in line and "key:table" in line
    assert "load_write" in out and "load_send" in out


def test_show_rejected_chain_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["chains", "show", "store", "--nic", "irdma", "--no-inline"]) == 0
    out = capsys.readouterr().out
    assert "SOFTWARE" in out and "rejected:" in out and "'wait_enable'" in out
    assert "sr_read" in out


def test_explain_names_in_chain_and_cpu_validations(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["chains", "explain", "LOAD", "--nic", "ideal", "--addr-le"]) == 0
    out = capsys.readouterr().out
    assert "offloaded to the NIC" in out and "Generation" in out and "chain + CPU" in out
    assert "known limits" in out
    assert run(["chains", "explain", "ALLOC_STORE", "--nic", "ideal", "--addr-le"]) == 0
    out = capsys.readouterr().out
    assert "SOFTWARE" in out and "Sequence, which is big-endian" in out
    assert run(["chains", "explain", "LOAD", "--nic", "irdma"]) == 0
    out = capsys.readouterr().out
    assert "little-endian" in out and "'strided_keys'" in out


def test_draw_writes_a_png(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "load.png"
    assert run(["chains", "draw", "LOAD", "--nic", "ideal", "--addr-le", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draw_without_extension_writes_and_prints_png(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "load"
    assert run(["chains", "draw", "LOAD", "--nic", "ideal", "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}.png\n"
    assert (tmp_path / "load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not out.exists()


@pytest.mark.parametrize("ext", [".png", ".svg"])
def test_draw_is_byte_identical(tmp_path, ext: str) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / f"a{ext}", tmp_path / f"b{ext}"
    for out in (a, b):
        assert run(["chains", "draw", "ALLOC_STORE", "--nic", "ideal-be", "-o", str(out)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert b"Matplotlib" not in a.read_bytes()  # no version stamp either


@pytest.mark.parametrize(("argv", "needle"), [
    (["chains", "show", "BIND", "--nic", "ideal"], "unknown operation 'BIND'"),
    (["chains", "explain", "LOAD", "--nic", "cx9"], "known: cx3-40g-ib, cx5"),
    (["chains", "draw", "LOAD", "--nic", "ideal", "-o", "/nonexistent/dir/x.png"],
     "-o /nonexistent/dir/x.png: directory /nonexistent/dir does not exist"),
    (["chains", "draw", "LOAD", "--nic", "ideal", "-o", "chain.txt"],
     "-o chain.txt: unsupported file type ('.txt'; use "),
    # the output is checked first, before the profile or the chain
    (["chains", "draw", "LOAD", "--nic", "cx9", "-o", "/nonexistent/x.png"],
     "directory /nonexistent does not exist"),
    (["chains", "explain", "STORE", "--nic", "ideal-be", "--block-size", "64KB"],
     "--block-size: '64KB' is ambiguous"),
    (["chains", "show", "LOAD", "--nic", "ideal-be", "--block-size", "12"],
     "--block-size: must be a multiple of 8 from 64 octets"),
])
def test_user_errors_are_one_line(argv: list[str], needle: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbtpsim: error: ") and needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cx5_with_strided_keys_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["chains", "explain", "ALLOC_STORE", "--nic", "cx5+strided"]) == 0
    out = capsys.readouterr().out
    assert "on cx5+strided, ADDR_LE off: offloaded to the NIC" in out
    assert "CAS-on-WQE" in out
    assert run(["chains", "show", "LOAD", "--nic", "cx5+strided"]) == 0
    assert ".cas " in capsys.readouterr().out  # the arming CASes (decision C5)
    assert run(["chains", "explain", "LOAD", "--nic", "cx5"]) == 0
    out = capsys.readouterr().out
    assert "on cx5, ADDR_LE off: offloaded to the NIC" in out and "SOFTWARE" not in out
    assert "table key: interleaved UMR key" in out and "192-octet UMR WQE" in out


def test_explain_on_upstream_names_blockers_and_unblockers(
        capsys: pytest.CaptureFixture[str]) -> None:
    for op in ("LOAD", "STORE", "ALLOC_STORE"):
        assert run(["chains", "explain", op, "--nic", "cx5-upstream"]) == 0
        out = capsys.readouterr().out
        assert "SOFTWARE" in out and "what would unblock it:" in out
        for cap in ("wait_enable:", "wqe_checks:", "indirect_keys:", "masked_atomics:"):
            assert cap in out, (op, cap)


def test_explain_with_a_block_of_several_packets_names_torn_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--block-size: 64 KiB blocks on ideal-be (mtu 4 KiB): with chains v1 the Read-source
    STORE stays on the CPU with rule torn-read; the inline one and LOAD are offloaded;
    4 KiB offloads both. Chains v2 (the default there) stage the Read (decision C24)."""
    assert run(["chains", "explain", "STORE", "--nic", "ideal-be", "--block-size",
                "64KiB", "--chains", "v1"]) == 0
    out = capsys.readouterr().out
    assert "store_inline (STORE, INLINE [| SEAL], of a full block) on ideal-be, ADDR_LE " \
           "off: offloaded to the NIC" in out
    assert "store_read (STORE, RDMA Read source" in out and "[torn-read] reads the " \
           "initiator's 65536 octets straight into the block in 16 packets" in out
    assert run(["chains", "explain", "STORE", "--nic", "ideal-be"]) == 0
    assert "torn-read" not in capsys.readouterr().out
    assert run(["chains", "show", "STORE", "--nic", "ideal-be", "--no-inline",
                "--block-size", "8KiB", "--chains", "v1"]) == 0
    assert "torn-read" in capsys.readouterr().out
    assert run(["chains", "show", "STORE", "--nic", "ideal-be", "--no-inline",
                "--block-size", "64KiB"]) == 0
    out = capsys.readouterr().out
    assert "torn-read" not in out and ": OFFLOADED" in out
    assert "place 65536B -> buf:rstg" in out and "sr_copy" in out
    assert "m_store_read_rdok" in out and "buf:ccqe_sr_read" not in out  # shown by what
    assert "the data Read completed" in out  # it tests
