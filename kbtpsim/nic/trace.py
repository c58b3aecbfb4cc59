"""Per-WR timelines and unit occupancy, exported as Chrome trace-event JSON.

A :class:`Tracer` is passed to :class:`~kbtpsim.nic.nic.Nic` (or ``Simulation(trace=True)``);
models call :meth:`Tracer.mark` for a WR's phases (``posted``, ``fetched``, ``started``,
``finished``) and :meth:`Tracer.span` for the time a unit was busy. :meth:`to_chrome_trace`
gives the JSON object format that Perfetto and ``chrome://tracing`` open: one process per NIC,
one thread per QP (WR lifetimes) and per unit (busy spans). Times are kept in integer
picoseconds and exported in microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WrKey = tuple[str, int, int]  # (nic name, qpn, WQE index)


class Tracer:
    """Records WR phases and unit spans; deterministic for a deterministic simulation."""

    __slots__ = ("spans", "wrs")

    def __init__(self) -> None:
        self.wrs: dict[WrKey, dict[str, Any]] = {}
        self.spans: list[tuple[str, str, str, int, int]] = []

    def mark(self, nic: str, qpn: int, index: int, phase: str, time_ps: int,
             **info: Any) -> None:
        """Record that WR ``index`` of QP ``qpn`` reached ``phase`` at ``time_ps``."""
        rec = self.wrs.setdefault((nic, qpn, index), {})
        rec[phase] = time_ps
        if info:
            rec.update(info)

    def span(self, nic: str, track: str, name: str, start_ps: int, end_ps: int) -> None:
        """Record that unit ``track`` of ``nic`` was busy with ``name`` over an interval."""
        self.spans.append((nic, track, name, start_ps, end_ps))

    def timeline(self, nic: str, qpn: int, index: int) -> dict[str, Any]:
        """The recorded phases of one WR (empty if none)."""
        return dict(self.wrs.get((nic, qpn, index), {}))

    def to_chrome_trace(self) -> dict[str, Any]:
        """Trace-event JSON (object form) of everything recorded."""
        events: list[dict[str, Any]] = []
        pids: dict[str, int] = {}
        tids: dict[tuple[str, str], int] = {}

        def ids(nic: str, track: str) -> tuple[int, int]:
            if nic not in pids:
                pids[nic] = len(pids) + 1
                events.append({"ph": "M", "name": "process_name", "pid": pids[nic], "tid": 0,
                               "args": {"name": nic}})
            key = (nic, track)
            if key not in tids:
                tids[key] = len(tids) + 1
                events.append({"ph": "M", "name": "thread_name", "pid": pids[nic],
                               "tid": tids[key], "args": {"name": track}})
            return pids[nic], tids[key]

        for (nic, qpn, index), rec in sorted(self.wrs.items()):
            pid, tid = ids(nic, f"qp{qpn}")
            times = [v for k, v in rec.items() if k in _PHASES]
            if not times:
                continue
            start, end = min(times), max(times)
            args = {k: (v / 1e6 if k in _PHASES else v) for k, v in rec.items()}
            events.append({"ph": "X", "name": f"{rec.get('opcode', 'wr')}#{index}",
                           "cat": "wr", "pid": pid, "tid": tid, "ts": start / 1e6,
                           "dur": (end - start) / 1e6, "args": args})
        for nic, track, name, start, end in self.spans:
            pid, tid = ids(nic, track)
            events.append({"ph": "X", "name": name, "cat": "unit", "pid": pid, "tid": tid,
                           "ts": start / 1e6, "dur": (end - start) / 1e6})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write(self, path: str | Path) -> None:
        """Write :meth:`to_chrome_trace` as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_chrome_trace(), sort_keys=True))


_PHASES = frozenset({"posted", "doorbell", "fetched", "started", "finished"})
