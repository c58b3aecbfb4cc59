"""Per-WR timelines, unit occupancy, CPU cores and requests, as Chrome trace-event JSON.

A :class:`Tracer` is passed to :class:`~kbtpsim.nic.nic.Nic` (or ``Simulation(trace=True)``);
models call :meth:`Tracer.mark` for a WR's phases (``posted``, ``fetched``, ``started``,
``finished``) and :meth:`Tracer.span` for the time a unit (or a CPU core) was busy; a
workload driver calls :meth:`Tracer.request` for a request from its post to its completion.
:meth:`to_chrome_trace` gives the JSON object format that Perfetto and ``chrome://tracing``
open: one process per NIC (host), and in it

* a track per QP with one span per WR (posted to finished) and, nested in it, its phases
  (``queued``: posted to fetched, ``fetched``: fetched to started, ``running``: started to
  finished); WRs whose lifetimes overlap (a pipelined ring) go on further tracks of the QP
  (``qp0x101 #2``, ...), so that spans on one track always nest;
* a track per unit (``tx``, ``rx``, ``decode``, ``pcie.rd``, ``link.tx``, ``cpu0``, ...),
  split the same way when the unit has several servers;
* one async span per request (category ``request``) from post to completion.

A tracer may be bounded: ``window=(start_ps, end_ps)`` keeps only what overlaps that
interval of simulated time, ``limit`` stops recording after that many events (and says so
in ``otherData``). Times are kept in integer picoseconds and exported in microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WrKey = tuple[str, int, int]  # (nic name, qpn, WQE index)

#: WR phase spans nested in a WR's span: (name, from phase, to phase)
_CHILDREN = (("queued", "posted", "fetched"), ("fetched", "fetched", "started"),
             ("running", "started", "finished"))


class Tracer:
    """Records WR phases, unit spans and requests; deterministic for a deterministic
    simulation."""

    __slots__ = ("count", "limit", "requests", "spans", "stopped_at", "window", "wrs")

    def __init__(self, window: tuple[int, int] | None = None,
                 limit: int | None = None) -> None:
        if window is not None and not 0 <= window[0] <= window[1]:
            raise ValueError(f"trace window {window!r}: need 0 <= start <= end")
        if limit is not None and limit < 1:
            raise ValueError(f"trace limit {limit!r}: must be at least 1")
        self.wrs: dict[WrKey, dict[str, Any]] = {}
        self.spans: list[tuple[str, str, str, int, int]] = []
        #: (host, name, start, end, args) of each request
        self.requests: list[tuple[str, str, int, int, dict[str, Any]]] = []
        self.window = window
        self.limit = limit
        self.count = 0  #: WRs, spans and requests recorded
        self.stopped_at: int | None = None  #: time the limit was reached

    # ------------------------------------------------------------------ recording
    def _room(self, start: int, end: int) -> bool:
        """Whether an item over ``[start, end]`` is recorded (and counts it)."""
        w = self.window
        if w is not None and (end < w[0] or start > w[1]):
            return False
        if self.limit is not None and self.count >= self.limit:
            if self.stopped_at is None:
                self.stopped_at = start
            return False
        self.count += 1
        return True

    def mark(self, nic: str, qpn: int, index: int, phase: str, time_ps: int,
             **info: Any) -> None:
        """Record that WR ``index`` of QP ``qpn`` reached ``phase`` at ``time_ps``."""
        key = (nic, qpn, index)
        rec = self.wrs.get(key)
        if rec is None:
            w = self.window
            if w is not None and time_ps > w[1]:
                return
            if self.limit is not None and self.count >= self.limit:
                if self.stopped_at is None:
                    self.stopped_at = time_ps
                return
            self.count += 1
            rec = self.wrs[key] = {}
        rec[phase] = time_ps
        if info:
            rec.update(info)
        w = self.window
        if phase == "finished" and w is not None and time_ps < w[0]:
            del self.wrs[key]  # over before the window
            self.count -= 1

    def span(self, nic: str, track: str, name: str, start_ps: int, end_ps: int) -> None:
        """Record that unit ``track`` of ``nic`` was busy with ``name`` over an interval."""
        if self._room(start_ps, end_ps):
            self.spans.append((nic, track, name, start_ps, end_ps))

    def request(self, host: str, name: str, start_ps: int, end_ps: int,
                **args: Any) -> None:
        """Record a request of ``host`` from its post (``start_ps``) to its completion."""
        if self._room(start_ps, end_ps):
            self.requests.append((host, name, start_ps, end_ps, args))

    def timeline(self, nic: str, qpn: int, index: int) -> dict[str, Any]:
        """The recorded phases of one WR (empty if none)."""
        return dict(self.wrs.get((nic, qpn, index), {}))

    # ------------------------------------------------------------------ export
    def to_chrome_trace(self) -> dict[str, Any]:
        """Trace-event JSON (object form) of everything recorded."""
        events: list[dict[str, Any]] = []
        pids: dict[str, int] = {}
        tids: dict[tuple[str, str], int] = {}

        def pid_of(nic: str) -> int:
            if nic not in pids:
                pids[nic] = len(pids) + 1
                events.append({"ph": "M", "name": "process_name", "pid": pids[nic], "tid": 0,
                               "args": {"name": nic}})
            return pids[nic]

        def ids(nic: str, track: str) -> tuple[int, int]:
            pid = pid_of(nic)
            key = (nic, track)
            if key not in tids:
                tids[key] = len(tids) + 1
                events.append({"ph": "M", "name": "thread_name", "pid": pid,
                               "tid": tids[key], "args": {"name": track}})
            return pid, tids[key]

        lanes = _Lanes()
        w = self.window
        for (nic, qpn, index), rec in sorted(self.wrs.items()):
            times = [v for k, v in rec.items() if k in _PHASES]
            if not times or (w is not None and (max(times) < w[0] or min(times) > w[1])):
                continue
            start, end = min(times), max(times)
            pid, tid = ids(nic, lanes.track(nic, f"qp{qpn:#x}", start, end))
            args = {k: (v / 1e6 if k in _PHASES else v) for k, v in rec.items()}
            events.append({"ph": "X", "name": f"{rec.get('opcode', 'wr')}#{index}",
                           "cat": "wr", "pid": pid, "tid": tid, "ts": start / 1e6,
                           "dur": (end - start) / 1e6, "args": args})
            for name, a, b in _CHILDREN:
                if a in rec and b in rec and rec[a] <= rec[b] and (
                        w is None or (w[0] <= rec[b] and rec[a] <= w[1])):
                    events.append({"ph": "X", "name": name, "cat": "wr.phase", "pid": pid,
                                   "tid": tid, "ts": rec[a] / 1e6,
                                   "dur": (rec[b] - rec[a]) / 1e6})
        for nic, track, name, start, end in sorted(self.spans, key=lambda s: (s[3], -s[4])):
            pid, tid = ids(nic, lanes.track(nic, track, start, end))
            events.append({"ph": "X", "name": name, "cat": "unit", "pid": pid, "tid": tid,
                           "ts": start / 1e6, "dur": (end - start) / 1e6})
        for n, (host, name, start, end, args) in enumerate(self.requests):
            pid = pid_of(host)
            common = {"name": name, "cat": "request", "id": f"{n:#x}", "pid": pid,
                      "tid": 0}
            events.append({"ph": "b", "ts": start / 1e6, "args": args, **common})
            events.append({"ph": "e", "ts": end / 1e6, **common})
        doc: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ns"}
        if self.window is not None or self.limit is not None:
            doc["otherData"] = {
                "window_us": None if self.window is None else
                [self.window[0] / 1e6, self.window[1] / 1e6],
                "limit": self.limit, "truncated": self.stopped_at is not None,
                "truncated_at_us": None if self.stopped_at is None else self.stopped_at / 1e6}
        return doc

    def write(self, path: str | Path) -> int:
        """Write :meth:`to_chrome_trace` as JSON to ``path``; returns the number of
        events written (metadata included)."""
        doc = self.to_chrome_trace()
        Path(path).write_text(json.dumps(doc, sort_keys=True))
        return len(doc["traceEvents"])


class _Lanes:
    """Splits a track into lanes so that spans on one lane never partly overlap: a span
    goes on the first lane whose last span has ended by its start."""

    __slots__ = ("_ends",)

    def __init__(self) -> None:
        self._ends: dict[tuple[str, str], list[int]] = {}

    def track(self, nic: str, base: str, start: int, end: int) -> str:
        ends = self._ends.setdefault((nic, base), [])
        for i, last in enumerate(ends):
            if last <= start:
                ends[i] = end
                return base if i == 0 else f"{base} #{i + 1}"
        ends.append(end)
        return base if len(ends) == 1 else f"{base} #{len(ends)}"


_PHASES = frozenset({"posted", "doorbell", "fetched", "started", "executed", "finished"})
