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
