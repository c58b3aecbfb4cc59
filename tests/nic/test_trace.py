"""Tracer: per-WR timelines, Chrome trace JSON, determinism."""

from __future__ import annotations

import json
from pathlib import Path

from kbtpsim.nic import Opcode, Sge, WorkRequest, WqeFlags
from tests.nic.conftest import make_pair


def _workload(seed_bytes: bytes = b"q"):  # type: ignore[no-untyped-def]
    p = make_pair(trace=True)
    p.a.host.memory.write(p.bufa, seed_bytes * 9000)
    for i in range(4):
        p.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, 9000, p.mra.lkey),),
                                   WqeFlags.SIGNALED, remote_addr=p.bufb + i * 9000,
                                   rkey=p.mrb.rkey))
    p.qa.post_send(WorkRequest(Opcode.FETCH_ADD, (Sge(p.bufa, 8, p.mra.lkey),),
                               WqeFlags.SIGNALED, remote_addr=p.bufb, rkey=p.mrb.rkey,
                               swap_add=1))
    p.qb.post_recv([Sge(p.bufb, 64, p.mrb.lkey)])
    p.qa.post_send(WorkRequest(Opcode.SEND, flags=WqeFlags.SIGNALED, inline_data=b"done"))
    p.qa.ring_doorbell()
    p.run()
    return p


def test_wr_timeline_phases_are_ordered() -> None:
    p = _workload()
    tr = p.sim.tracer
    assert tr is not None
    for i in range(6):
        t = tr.timeline("a", p.qa.qpn, i)
        assert t["posted"] <= t["fetched"] <= t["started"] <= t["finished"], t
    assert tr.timeline("a", p.qa.qpn, 0)["opcode"] == "RDMA_WRITE"


def test_chrome_trace_is_valid_json_with_units(tmp_path: Path) -> None:
    p = _workload()
    tr = p.sim.tracer
    assert tr is not None
    doc = tr.to_chrome_trace()
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"
             and e["name"] == "thread_name"}
    assert {"tx", "rx", "decode", "pcie.rd", "pcie.wr", "link.tx", "atomic"} <= names
    assert all(e["ph"] in ("M", "X") for e in doc["traceEvents"])
    assert all(e["dur"] >= 0 for e in doc["traceEvents"] if e["ph"] == "X")
    out = tmp_path / "trace.json"
    tr.write(out)
    assert json.loads(out.read_text())["traceEvents"]


def test_same_inputs_same_timelines() -> None:
    a, b = _workload(), _workload()
    assert a.sim.tracer is not None and b.sim.tracer is not None
    assert a.sim.tracer.to_chrome_trace() == b.sim.tracer.to_chrome_trace()
    assert a.sim.now == b.sim.now


def _tracks(doc: dict) -> dict[tuple[int, int], list[tuple[float, float]]]:  # type: ignore[type-arg]
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            out.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    return out


def test_pipelined_wrs_go_on_lanes_whose_spans_nest() -> None:
    p = _workload()
    assert p.sim.tracer is not None
    doc = p.sim.tracer.to_chrome_trace()
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert f"qp{p.qa.qpn:#x}" in names and f"qp{p.qa.qpn:#x} #2" in names  # overlapping WRs
    for spans in _tracks(doc).values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[float] = []
        for start, end in spans:
            while stack and stack[-1] <= start + 1e-9:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-9, (start, end, stack)
            stack.append(end)
    phases = [e for e in doc["traceEvents"] if e.get("cat") == "wr.phase"]
    assert {e["name"] for e in phases} == {"queued", "fetched", "running"}


def test_a_window_keeps_what_overlaps_it_and_a_limit_stops_recording() -> None:
    from kbtpsim.nic import Tracer

    full = _workload().sim.tracer
    assert full is not None
    ends = sorted(s[4] for s in full.spans)
    lo, hi = ends[len(ends) // 3], ends[2 * len(ends) // 3]
    t = Tracer(window=(lo, hi))
    for s in full.spans:
        t.span(*s)
    assert 0 < len(t.spans) < len(full.spans)
    assert all(s[4] >= lo and s[3] <= hi for s in t.spans)
    assert len(t.spans) == sum(1 for s in full.spans if s[4] >= lo and s[3] <= hi)
    t.mark("a", 1, 0, "posted", lo - 10)
    t.mark("a", 1, 0, "finished", lo - 5)  # over before the window: dropped
    t.mark("a", 1, 1, "posted", hi + 1)  # after it: never recorded
    assert t.wrs == {}
    limited = Tracer(limit=5)
    for s in full.spans:
        limited.span(*s)
    assert len(limited.spans) == 5 and limited.stopped_at == full.spans[5][3]
    assert limited.to_chrome_trace()["otherData"]["truncated"] is True
