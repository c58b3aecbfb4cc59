"""What ``kbtpsim run --trace FILE.json`` and ``--pcap FILE.pcap`` record, and how.

An :class:`Observer` is made before the run (:func:`check_output_file` vets its paths so a
bad one stops the command before the simulation), hands :func:`~kbtpsim.run.build.build`
its :class:`~kbtpsim.nic.trace.Tracer`, and is started on the built system by
:func:`~kbtpsim.run.runner.run_scenario`: it taps the wire (:class:`kbtpsim.nic.pcap.Capture`),
notes every request the workload driver completes (the tracer's async spans) and every
stretch of target CPU time (one track per core). Nothing it does takes simulated time or
touches a result: ``results.json`` is byte-identical with and without it.

CPU core tracks: a stretch of work goes on the lowest-numbered core that is idle at its
start, so a track shows what the cores did, not which physical core did it.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import simpy

from kbtpsim.nic.pcap import Capture
from kbtpsim.nic.trace import Tracer

#: default ``--trace-limit``: events recorded before the trace stops (about 110 MB of JSON
#: per million events)
DEFAULT_TRACE_LIMIT = 500_000


def check_output_file(path: Path, suffixes: tuple[str, ...]) -> str | None:
    """Why ``path`` cannot be written as an output file (None if it can)."""
    if path.suffix.lower() not in suffixes:
        return f"expected a file name ending in {' or '.join(suffixes)}"
    if path.is_dir():
        return "names a directory"
    parent = path.parent
    probe = parent
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return f"{probe} is a file, not a directory"
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file exists and is not writable"
    return None


@dataclass
class Observed:
    """What an observer wrote."""

    trace_events: int = 0
    trace_truncated_at_ps: int | None = None
    frames: int = 0
    pcap_bytes: int = 0
    addresses: dict[str, str] | None = None


def parse_window(text: str) -> tuple[int, int]:
    """``START:END`` (times with units, e.g. ``100us:150us``) as picoseconds."""
    from kbtpsim.units import UnitError, parse_time

    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"expected START:END with units, e.g. 100us:150us, got {text!r}")
    out = []
    for part in parts:
        part = part.strip()
        if part.replace(".", "", 1).isdigit():
            raise ValueError(f"{part!r} has no unit (write e.g. {part}us)")
        try:
            out.append(parse_time(part))
        except UnitError as exc:
            raise ValueError(str(exc)) from None
    if out[0] > out[1]:
        raise ValueError(f"the window {text!r} ends before it starts")
    return out[0], out[1]


def observer_from_args(trace: str | None, pcap: str | None, window: str | None,
                       limit: int | None) -> tuple[Observer | None, str | None]:
    """The observer that ``run``'s ``--trace``, ``--pcap``, ``--trace-window`` and
    ``--trace-limit`` ask for, or the one-line error (naming the option) that stops the
    command before the simulation."""
    if trace is None and (window is not None or limit is not None):
        which = "--trace-window" if window is not None else "--trace-limit"
        return None, f"{which}: needs --trace FILE.json"
    if trace is None and pcap is None:
        return None, None
    for option, value, suffixes in (("--trace", trace, (".json",)),
                                    ("--pcap", pcap, (".pcap",))):
        if value is not None:
            bad = check_output_file(Path(value), suffixes)
            if bad:
                return None, f"{option} {value}: {bad}"
    if trace is not None and trace == pcap:
        return None, f"--pcap {pcap}: the same file as --trace"
    span = None
    if window is not None:
        try:
            span = parse_window(window)
        except ValueError as exc:
            return None, f"--trace-window {window}: {exc}"
    if limit is not None and limit < 1:
        return None, f"--trace-limit {limit}: must be at least 1"
    return Observer(trace=None if trace is None else Path(trace),
                    pcap=None if pcap is None else Path(pcap), trace_window=span,
                    trace_limit=DEFAULT_TRACE_LIMIT if limit is None else limit), None


def report(observer: Observer) -> list[str]:
    """The lines ``run`` prints about what the observer wrote."""
    from kbtpsim.units import format_time

    obs = observer.observed
    lines = []
    if observer.tracer is not None:
        line = f"trace: {observer.written_trace} ({obs.trace_events} events"
        if obs.trace_truncated_at_ps is not None:
            line += (f"; --trace-limit {observer.tracer.limit} reached at "
                     f"{format_time(obs.trace_truncated_at_ps)}: raise it or narrow "
                     "--trace-window")
        lines.append(line + ")")
    if observer.written_pcap is not None:
        hosts = ", ".join(f"{n}={ip}" for n, ip in (obs.addresses or {}).items())
        lines.append(f"pcap: {observer.written_pcap} ({obs.frames} frames, "
                     f"{obs.pcap_bytes} octets; {hosts})")
    return lines


class Observer:
    """Trace and packet capture of one run (either may be None)."""

    def __init__(self, *, trace: Path | None = None, pcap: Path | None = None,
                 trace_window: tuple[int, int] | None = None,
                 trace_limit: int | None = DEFAULT_TRACE_LIMIT) -> None:
        self.trace_path = trace
        self.pcap_path = pcap
        self.tracer: Tracer | None = Tracer(trace_window, trace_limit) if trace else None
        self.capture: Capture | None = None
        self.observed = Observed()
        self.written_trace: Path | None = None
        self.written_pcap: Path | None = None

    # ------------------------------------------------------------------ run hooks
    def start(self, system: Any) -> None:
        """Attach to a built system, before anything has run."""
        if self.pcap_path is not None:
            self.pcap_path.parent.mkdir(parents=True, exist_ok=True)
            self.capture = Capture(system.env, self.pcap_path, system.sim.nics).start()
        if self.tracer is not None:
            for name, server in system.servers.items():
                cpu = getattr(server, "cpu", None)
                if cpu is not None:
                    _trace_cpu(self.tracer, name, cpu)

    def watch(self, recorder: Any) -> None:
        """Trace every request the driver hands to ``recorder`` (an async span from its
        post to its completion, on the initiator's track)."""
        tracer = self.tracer
        if tracer is None:
            return
        record = recorder.record
        env = recorder.env

        def traced(initiator: str, op: str, status: str, posted: int, nbytes: int,
                   *rest: Any) -> None:
            tracer.request(initiator, op.upper(), posted, int(env.now), status=status,
                           bytes=nbytes)
            record(initiator, op, status, posted, nbytes, *rest)

        recorder.record = traced

    def close(self) -> Observed:
        """Stop the capture and write the trace (safe to call twice)."""
        obs = self.observed
        if self.capture is not None:
            self.capture.close()
            obs.frames, obs.pcap_bytes = self.capture.frames, self.capture.bytes
            obs.addresses = self.capture.addresses()
            self.written_pcap = self.capture.path
            self.capture = None
        if self.tracer is not None and self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            obs.trace_events = self.tracer.write(self.trace_path)
            obs.trace_truncated_at_ps = self.tracer.stopped_at
            self.written_trace, self.trace_path = self.trace_path, None
        return obs


def _trace_cpu(tracer: Tracer, host: str, cpu: Any) -> None:
    """Record each :meth:`TargetCpu.spend` of ``cpu`` on a core track of ``host``."""
    spend = cpu.spend
    env: simpy.Environment = cpu.env
    free = [0] * cpu.cores  # when each core track is next idle

    def traced(account: str, ps: int) -> Generator[simpy.Event, Any, None]:
        if ps > 0:
            now = int(env.now)
            core = next((i for i, t in enumerate(free) if t <= now), None)
            if core is None:  # more work than cores (not run on a held core)
                core = len(free)
                free.append(0)
            free[core] = now + ps
            tracer.span(host, f"cpu{core}", account, now, now + ps)
        yield from spend(account, ps)

    cpu.spend = traced


__all__ = ["DEFAULT_TRACE_LIMIT", "Observed", "Observer", "check_output_file",
           "observer_from_args", "parse_window", "report"]
