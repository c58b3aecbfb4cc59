"""``kbtpsim run --pcap`` and ``--trace`` on the quickstart (at 50 operations): the frames
read back by scapy's RoCE layers, the KBTP messages in them by kbtpsim.wire, the trace's
JSON and nesting, bounds, bad options, and results unchanged by either."""

from __future__ import annotations

import collections
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from kbtpsim import wire
from kbtpsim.cli import main
from kbtpsim.run.results import RESULTS
from tests.nic.test_pcap import BTH, check_frame, read_frames, scapy_all

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
SMALL = ["--set", "stop.operations=50"]
_SENDS = {0x00, 0x01, 0x02, 0x04, 0x16, 0x17}
_REQUESTS = _SENDS | {0x06, 0x07, 0x08, 0x0A, 0x0C, 0x13, 0x14}


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("observe")
    assert main(["run", str(QUICKSTART), "-q", "-o", str(d / "plain"), *SMALL]) == 0
    assert main(["run", str(QUICKSTART), "-q", "-o", str(d / "seen"), *SMALL,
                 "--pcap", str(d / "q.pcap"), "--trace", str(d / "q.json")]) == 0
    res = json.loads((d / "seen" / RESULTS).read_text())
    return {"dir": d, "frames": read_frames(d / "q.pcap"), "results": res,
            "trace": json.loads((d / "q.json").read_text())}


def test_results_are_byte_identical_with_and_without_pcap_and_trace(
        observed: dict[str, Any]) -> None:
    d = observed["dir"]
    assert (d / "plain" / RESULTS).read_bytes() == (d / "seen" / RESULTS).read_bytes()
    assert (d / "plain" / "timeseries.csv").read_bytes() == \
        (d / "seen" / "timeseries.csv").read_bytes()


def test_the_same_run_writes_the_same_pcap_and_trace(observed: dict[str, Any],
                                                     tmp_path: Path) -> None:
    d = observed["dir"]
    assert main(["run", str(QUICKSTART), "-q", "-o", str(tmp_path / "again"), *SMALL,
                 "--pcap", str(tmp_path / "q.pcap"), "--trace", str(tmp_path / "q.json")]) == 0
    assert (tmp_path / "q.pcap").read_bytes() == (d / "q.pcap").read_bytes()
    assert (tmp_path / "q.json").read_bytes() == (d / "q.json").read_bytes()


def test_every_frame_parses_with_a_valid_icrc_and_consistent_transport(
        observed: dict[str, Any]) -> None:
    frames = observed["frames"]
    times = [t for t, _ in frames]
    assert len(frames) > 300 and times == sorted(times)
    end_ns = (observed["results"]["run"]["start_ps"]
              + observed["results"]["run"]["end_ps"]) // 1000
    assert times[-1] <= end_ns
    ops: collections.Counter[int] = collections.Counter()
    flows: dict[tuple[str, str, int], list[int]] = {}
    partial: dict[tuple[str, int], bytes] = {}
    kbtp: collections.Counter[str] = collections.Counter()
    for _, data in frames:
        pkt = check_frame(data)
        ip, b = pkt[scapy_all.IP], pkt[BTH]
        ops[b.opcode] += 1
        body = bytes(b.payload)
        body = body[: len(body) - b.padcount]
        if b.opcode in _SENDS:  # reassemble each Send: one KBTP message
            key = (ip.src, b.dqpn)
            if b.opcode in (0x16, 0x17):
                body = body[4:]  # IETH
            msg = partial.pop(key, b"") + body
            if b.opcode in (0x00, 0x01):
                partial[key] = msg
            else:
                kbtp[type(wire.decode(msg)).__name__] += 1
        if b.opcode in _REQUESTS:  # request PSNs count up per connection
            flows.setdefault((ip.src, ip.dst, b.dqpn), []).append(b.psn)
    # Sends (requests, completions), Writes (LOAD data), Reads (non-inline stores), ACKs
    assert {0x04, 0x11, 0x0A, 0x0C, 0x0D, 0x0F} <= set(ops), ops
    for key, psns in flows.items():
        assert psns[0] == 0 and psns == sorted(set(psns)), key
    # KBTP: one HELLO and one HELLO_ACK per initiator, then requests and completions
    assert kbtp["Hello"] == 4 and kbtp["HelloAck"] == 4, kbtp
    assert kbtp["Completion"] >= 50
    assert sum(kbtp[k] for k in ("Load", "Store", "AllocStore", "Free")) >= 50


def test_qpns_and_addresses_name_the_simulated_qps(observed: dict[str, Any]) -> None:
    res = observed["results"]
    frames = observed["frames"]
    hosts = {f"10.0.0.{i + 1}" for i in range(1 + len(res["initiators"]))}
    for _, data in frames[:200]:
        ip = scapy_all.Ether(data)[scapy_all.IP]
        assert ip.src in hosts and ip.dst in hosts and ip.src != ip.dst
        assert ip.src == "10.0.0.1" or ip.dst == "10.0.0.1"  # the target is port 0


def test_read_requests_and_responses_carry_the_rdma_headers(observed: dict[str, Any]
                                                            ) -> None:
    # keyed by (requester, responder, PSN): one connection per initiator and target
    reads: dict[tuple[str, str, int], tuple[int, int]] = {}
    got: collections.Counter[tuple[str, str, int]] = collections.Counter()
    for _, data in observed["frames"]:
        pkt = check_frame(data)
        b = pkt[BTH]
        if b.opcode == 0x0C:
            va, _rkey, length = struct.unpack("!QII", bytes(b.payload)[:16])
            assert length > 0 and va > 0
            ip = pkt[scapy_all.IP]
            reads[(ip.src, ip.dst, b.psn)] = (length, -(-length // 4096))
        elif b.opcode in (0x0D, 0x0E, 0x0F, 0x10):
            ip = pkt[scapy_all.IP]
            got[(ip.dst, ip.src, b.psn)] += 1
    assert reads
    answered = 0
    for (req, resp, psn), (length, n) in reads.items():
        if (req, resp, psn + n - 1) not in got:
            continue  # answered after the run stopped
        answered += 1
        assert all(got[(req, resp, psn + i)] == 1 for i in range(n)), (req, psn, length)
    assert answered and sum(got.values()) == sum(
        n for (q, r, psn), (_, n) in reads.items() if (q, r, psn + n - 1) in got)


def _nests(spans: list[tuple[float, float]]) -> bool:
    """Spans on one track: any two are disjoint or one contains the other."""
    eps = 1e-9
    stack: list[float] = []
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        while stack and stack[-1] <= start + eps:
            stack.pop()
        if stack and end > stack[-1] + eps:
            return False
        stack.append(end)
    return True


def test_trace_is_trace_event_json_whose_spans_nest(observed: dict[str, Any]) -> None:
    doc = observed["trace"]
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ns"
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    # the hosts, and the switch (its port towards the target serialises on link.tx)
    assert set(procs.values()) == {"target", "client.0", "client.1", "client.2", "client.3",
                                   "switch"}
    names = set(threads.values())
    assert {"tx", "rx", "decode", "pcie.rd", "link.tx", "cpu0", "cpu1"} <= names
    assert any(n.startswith("qp0x") for n in names)
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        assert e["ph"] in ("M", "X", "b", "e"), e
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and (e["pid"], e["tid"]) in threads
            by_track.setdefault((e["pid"], e["tid"]), []).append(
                (e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():
        assert _nests(spans), threads[track]
    cpu = [e for e in events if e["ph"] == "X" and threads[(e["pid"], e["tid"])]
           .startswith("cpu")]
    assert cpu and all(procs[e["pid"]] == "target" for e in cpu)
    assert {e["name"] for e in cpu} >= {"LOAD", "HELLO"}
    # WR spans hold their phases
    wr = [e for e in events if e["ph"] == "X" and e.get("cat") == "wr"]
    assert wr and all("posted" in e["args"] for e in wr)


def test_trace_has_one_async_span_per_request(observed: dict[str, Any]) -> None:
    events = observed["trace"]["traceEvents"]
    res = observed["results"]
    begins = {e["id"]: e for e in events if e["ph"] == "b"}
    ends = {e["id"]: e for e in events if e["ph"] == "e"}
    assert begins.keys() == ends.keys()
    assert len(begins) == res["run"]["operations_total"]
    for i, b in begins.items():
        e = ends[i]
        assert b["cat"] == e["cat"] == "request" and b["name"] == e["name"]
        assert b["pid"] == e["pid"] and e["ts"] >= b["ts"]
    ops = collections.Counter(b["name"] for b in begins.values())
    assert set(ops) <= {"LOAD", "STORE", "ALLOC_STORE", "FREE", "INVALID_LOAD",
                        "DIRECT_LOAD", "DIRECT_ALLOC"}


def test_trace_window_and_limit_bound_the_trace(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.json"
    assert main(["run", str(QUICKSTART), "-o", str(tmp_path / "r"), *SMALL,
                 "--trace", str(out), "--trace-window", "40us:60us"]) == 0
    assert "trace: " in capsys.readouterr().out
    doc = json.loads(out.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert spans and all(e["ts"] <= 60 and e["ts"] + e["dur"] >= 40 for e in spans)
    assert doc["otherData"]["window_us"] == [40, 60]
    assert main(["run", str(QUICKSTART), "-o", str(tmp_path / "r2"), *SMALL,
                 "--trace", str(out), "--trace-limit", "1000"]) == 0
    said = capsys.readouterr().out
    assert "--trace-limit 1000 reached at" in said
    doc = json.loads(out.read_text())
    assert doc["otherData"]["truncated"] is True
    assert len([e for e in doc["traceEvents"] if e["ph"] in ("X", "b")]) <= 1000 * 4


@pytest.mark.parametrize(("args", "message"), [
    (["--pcap", "{d}/x.txt"], "--pcap {d}/x.txt: expected a file name ending in .pcap"),
    (["--pcap", "{d}"], "--pcap {d}: expected a file name ending in .pcap"),
    (["--pcap", "{d}/f/x.pcap"], "--pcap {d}/f/x.pcap: {d}/f is a file, not a directory"),
    (["--trace", "{d}/t.json", "--trace-window", "10:20us"],
     "--trace-window 10:20us: '10' has no unit (write e.g. 10us)"),
    (["--trace", "{d}/t.json", "--trace-window", "20us:10us"],
     "--trace-window 20us:10us: the window '20us:10us' ends before it starts"),
    (["--trace", "{d}/t.json", "--trace-limit", "0"], "--trace-limit 0: must be at least 1"),
    (["--trace-limit", "5"], "--trace-limit: needs --trace FILE.json"),
])
def test_bad_trace_and_pcap_options_are_one_line_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        message: str) -> None:
    (tmp_path / "f").write_text("a file")
    argv = [a.format(d=tmp_path) for a in args]
    rc = main(["run", str(QUICKSTART), "-o", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"kbtpsim: error: {message.format(d=tmp_path)}\n"
    assert not (tmp_path / "r").exists()  # stopped before the simulation
