"""Probes: percentiles, CDFs, warm-up exclusion and the operation-count stop."""

from __future__ import annotations

import simpy

from kbtpsim.run.driver import malformed_request, payload
from kbtpsim.run.metrics import Recorder, cdf, summarise
from kbtpsim.wire import DecodeError, decode


def test_summary_percentiles_in_ns() -> None:
    s = summarise([k * 1000 for k in range(1, 1001)])  # 1..1000 ns
    assert s["p50"] == 500.5 and s["max"] == 1000.0 and s["mean"] == 500.5
    assert s["min"] == 1.0 and s["stdev"] == 288.819  # sample standard deviation
    assert list(s)[:3] == ["min", "mean", "stdev"]
    assert summarise([5000]) == {"min": 5.0, "mean": 5.0, "stdev": 0.0, "p50": 5.0,
                                 "p90": 5.0, "p99": 5.0, "p99.9": 5.0, "max": 5.0}
    assert s["p90"] < s["p99"] < s["p99.9"] < s["max"]
    assert summarise([]) == {}
    points = cdf([1000, 2000, 3000])
    assert points[0] == [1.0, 0.0] and points[-1] == [3.0, 1.0]


def test_recorder_excludes_the_warmup_and_stops_at_the_goal() -> None:
    env = simpy.Environment()
    stop = env.event()
    rec = Recorder(env, start_ps=100, target_ops=2, stop=stop)

    def ops() -> simpy.events.ProcessGenerator:
        yield env.timeout(150)
        rec.record("a", "LOAD", "OK", posted=50, nbytes=10)  # posted in the warm-up
        rec.record("a", "LOAD", "OK", posted=120, nbytes=10)
        rec.record("a", "FREE", "NOT_VALID", posted=130, nbytes=0)
        rec.record("a", "LOAD", "OK", posted=140, nbytes=10)  # after the stop

    env.process(ops())
    env.run(until=stop)
    assert stop.value == "operations"
    assert rec.total == 4 and rec.measured == 2
    assert rec.latencies == {("LOAD", "OK"): [30], ("FREE", "NOT_VALID"): [20]}
    assert rec.nbytes == {"LOAD": 10}
    assert rec.per_initiator == {"a": {"OK": 1, "NOT_VALID": 1}}


def test_payloads_and_malformed_requests() -> None:
    assert payload(3, 0x0102030405060708) == b"\x01\x02\x03"
    data = payload(100_000, 7)
    assert len(data) == 100_000 and data[:8] == (7).to_bytes(8, "big")
    raw = malformed_request(42, 0x1000)
    try:
        msg = decode(raw)
    except DecodeError:
        return  # undecodable: the target answers MALFORMED
    assert int(msg.flags) & 0x4000
