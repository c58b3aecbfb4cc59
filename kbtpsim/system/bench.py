"""Unloaded operation latencies of the software target, and its CPU time per operation.

:func:`measure` builds a one-initiator :class:`~kbtpsim.system.cluster.Cluster`, runs each
operation alone (one outstanding request) and reports post-to-completion latency, as the
initiator sees it, and the target CPU time charged to the operation. Rows are
``{"op", "size", "latency_ns", "cpu_ns"}``; ``cpu_ns`` is None for one-sided operations.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import simpy

from kbtpsim.system.cluster import Cluster
from kbtpsim.system.initiator import Initiator, OpResult
from kbtpsim.target import InitiatorConfig, TargetConfig
from kbtpsim.wire import Feature

HANDLE = 0x1000


def measure(profile: str = "cx5", sizes: Iterable[int] = (4096, 1 << 20),
            repeat: int = 3) -> list[dict[str, Any]]:
    """Latency rows for LOAD, STORE and ALLOC_STORE (inline where the size allows it,
    and RDMA-Read based), and DIRECT_LOAD, at each size."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        rows += _measure_size(profile, size, repeat)
    return rows


def _measure_size(profile: str, size: int, repeat: int) -> list[dict[str, Any]]:
    block = max(size, 4096)
    ini_id = Initiator.random_id(0, "bench")
    cfg = TargetConfig(
        blocks=8, block_size=block, max_inline=4096,
        initiators=(InitiatorConfig("bench", ini_id, 8, HANDLE, 64, Feature.DIRECT_LOAD),))
    cluster = Cluster.build(cfg, profile=profile)
    ini = cluster.initiators["bench"]
    cpu = cluster.server.cpu
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    rows: list[dict[str, Any]] = []

    def timed(op: str, account: str | None, make: Any) -> Generator[simpy.Event, Any, None]:
        lat: list[int] = []
        busy0 = cpu.busy_ns(account) if account else 0.0
        ops0 = cpu.ops(account) if account else 0
        for _ in range(repeat):
            res: OpResult = yield make()
            if not res.ok:
                raise RuntimeError(f"{op} {size}: {res.status!r}")
            lat.append(res.latency_ps)
        cpu_ns = None
        if account:
            n = cpu.ops(account) - ops0
            cpu_ns = (cpu.busy_ns(account) - busy0) / n if n else 0.0
        rows.append({"op": op, "size": size, "latency_ns": sum(lat) / len(lat) / 1000,
                     "cpu_ns": cpu_ns})

    def work() -> Generator[simpy.Event, Any, None]:
        yield cluster.connect_all()
        inline = size <= cfg.max_inline
        if inline:
            yield from timed("ALLOC_STORE inline", "ALLOC_STORE", lambda: _alloc_free(
                ini, data, True))
        yield from timed("ALLOC_STORE", "ALLOC_STORE", lambda: _alloc_free(ini, data, False))
        yield ini.alloc_store(HANDLE, data, inline=False, seal=False)
        if inline:
            yield from timed("STORE inline", "STORE", lambda: ini.store(HANDLE, data,
                                                                         inline=True))
        yield from timed("STORE", "STORE", lambda: ini.store(HANDLE, data, inline=False))
        yield ini.store(HANDLE, data, inline=False, seal=True)
        yield from timed("LOAD", "LOAD", lambda: ini.load(HANDLE))
        yield from timed("DIRECT_LOAD", None, lambda: ini.direct_load(HANDLE))

    cluster.run(work())
    return rows


def _alloc_free(ini: Initiator, data: bytes, inline: bool) -> simpy.Process:
    """An ALLOC_STORE whose result is returned after a FREE (not timed) undoes it."""
    def run() -> Generator[simpy.Event, Any, OpResult]:
        res: OpResult = yield ini.alloc_store(HANDLE + 1, data, inline=inline)
        yield ini.free(HANDLE + 1)
        return res

    return ini.env.process(run())


def throughput(profile: str = "cx5", initiators: int = 4, size: int = 4096,
               requests: int = 100, cores: int = 1, op: str = "LOAD") -> dict[str, float]:
    """Closed-loop throughput: ``initiators`` initiators each keep Request Credits
    (default 64) LOADs (or inline STOREs) of ``size`` octets outstanding until each has
    completed ``requests``. Returns ops/s, mean latency and target CPU utilisation."""
    names = [f"i{k}" for k in range(initiators)]
    inits = tuple(InitiatorConfig(n, Initiator.random_id(0, n), 2, HANDLE * (k + 1), 16)
                  for k, n in enumerate(names))
    cfg = TargetConfig(blocks=2 * initiators, block_size=max(size, 4096), max_inline=4096,
                       initiators=inits)
    cluster = Cluster.build(cfg, profile=profile, cores=cores)
    data = bytes(size)

    def client(k: int) -> Generator[simpy.Event, Any, None]:
        ini = cluster.initiators[names[k]]
        handle = HANDLE * (k + 1)
        yield ini.alloc_store(handle, data, seal=op == "LOAD", inline=False)
        ini.results.clear()
        procs = [ini.load(handle) if op == "LOAD" else ini.store(handle, data[:64])
                 for _ in range(requests)]
        yield cluster.sim.env.all_of(procs)

    def work() -> Generator[simpy.Event, Any, tuple[int, int, float]]:
        yield cluster.connect_all()
        start = cluster.sim.now
        busy0 = cluster.server.cpu.busy_ns()
        yield cluster.sim.env.all_of([cluster.sim.env.process(client(k))
                                      for k in range(initiators)])
        return start, cluster.sim.now, cluster.server.cpu.busy_ns() - busy0

    start, end, busy = cluster.run(work())
    results = [r for ini in cluster.initiators.values() for r in ini.results]
    secs = (end - start) / 1e12
    return {"ops_per_s": len(results) / secs,
            "mean_latency_ns": sum(r.latency_ps for r in results) / len(results) / 1000,
            "cpu_utilisation": busy * 1000 / ((end - start) * cores)}


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`measure` rows."""
    lines = ["| op | size | latency (ns) | target CPU per op (ns) |", "|---|---|---|---|"]
    for r in rows:
        cpu = "-" if r["cpu_ns"] is None else f"{r['cpu_ns']:.0f}"
        lines.append(f"| {r['op']} | {r['size']} | {r['latency_ns']:.0f} | {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m kbtpsim.system.bench``: the latency table, then LOAD throughput."""
    import argparse

    argparse.ArgumentParser(
        prog="python -m kbtpsim.system.bench",
        description="Print the software target's latency and CPU cost per operation "
        "(a Markdown table), then LOAD throughput with 1, 2 and 4 cores.").parse_args(argv)
    print(format_rows(measure()))
    for size in (64, 4096):
        for cores in (1, 2, 4):
            got = throughput(size=size, cores=cores)
            print(f"4 initiators, {size} B LOADs, {cores} core(s): "
                  f"{got['ops_per_s'] / 1e6:.2f} Mops/s, mean latency "
                  f"{got['mean_latency_ns']:.0f} ns, CPU {100 * got['cpu_utilisation']:.0f}%")
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(main())
