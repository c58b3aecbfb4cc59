"""The protocol alone: a scenario's requests through the codec and the software target.

Run: ``python benchmarks/protocol_floor.py [SCENARIO] [--operations N]`` (default the
quickstart, 20000 operations).

No simulator: no NIC, no links, no simpy, no simulated CPU, no metrics. Each initiator's
workload generator (the scenario's own, seeded as a run seeds it) issues the requests a
run's driver would (its payloads, inline up to the threshold, LOADs that allow unsealed
blocks); each request is built, encoded, decoded and processed by the software target,
whose RDMA Reads are answered at once and whose COMPLETIONs are decoded and handed back
to the generator. The initiators take turns, each as many as its window, but the target
answers every request before the next is issued, so the mix of operations is the
scenario's while the handles in flight differ from a run's. What a simulation of the
scenario adds is timing; this is the work it cannot skip, so its rate is a ceiling for
any fidelity of it (docs/performance.md, "What the protocol alone costs").
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kbtpsim.run.build import target_configs  # noqa: E402
from kbtpsim.run.driver import payload, rng_for  # noqa: E402
from kbtpsim.scenario.load import load_scenario  # noqa: E402
from kbtpsim.target.effects import Effect, ReadInitiator, SendMessage  # noqa: E402
from kbtpsim.target.processor import Target  # noqa: E402
from kbtpsim.wire import (  # noqa: E402
    AllocStore,
    DataDescriptor,
    Free,
    Hello,
    Load,
    Message,
    RequestFlag,
    Store,
    decode,
    encode,
)
from kbtpsim.workload.generators import Request, SyntheticWorkload  # noqa: E402

DEFAULT_SCENARIO = REPO / "scenarios" / "quickstart.yaml"
OPS = ("load", "store", "alloc_store", "free")
STEP_PS = 1_000_000  # the target's clock advances 1 us per request (no timer is due)


class FloorError(ValueError):
    """A scenario this benchmark cannot play; the message names what."""


class _Initiator:
    __slots__ = ("conn", "gen", "invalidate")

    def __init__(self, conn: int, gen: SyntheticWorkload, invalidate: bool) -> None:
        self.conn = conn
        self.gen = gen
        self.invalidate = invalidate


def protocol_rate(scenario: str | Path = DEFAULT_SCENARIO, operations: int = 20000,
                  overrides: tuple[str, ...] = ()) -> dict[str, float]:
    """Play ``operations`` requests of ``scenario``: how many completed, how many of them
    failed (none, when the generators issue what the target accepts, as in a run), the
    CPU seconds and the rate."""
    sc = load_scenario(scenario, overrides)
    if len(sc.targets) != 1 or sc.targets[0].mode != "software":
        raise FloorError("needs one software target (target.mode: software)")
    tgt = sc.targets[0]
    configs, expanded = target_configs(sc)
    config = configs[tgt.name]
    target = Target(config)
    initiators: list[tuple[_Initiator, int]] = []
    for index, (name, e) in enumerate(expanded.items()):
        wl = e.spec.workload
        if wl.kind != "synthetic" or wl.loop != "closed" or set(wl.mix) - set(OPS):
            raise FloorError(f"initiator {name}: needs a closed-loop synthetic workload of "
                             f"{', '.join(OPS)}")
        ini = config.initiators[index]
        conn = index + 1
        target.connect(conn, 0)
        target.handle(conn, encode(Hello(requested_features=ini.features,
                                         completion_credits=wl.window,
                                         initiator_id=ini.initiator_id)), 0)
        threshold = tgt.max_inline if wl.inline_threshold is None else wl.inline_threshold
        gen = SyntheticWorkload(wl, rng_for(sc.seed, index), handle_base=ini.handle_base,
                                handles=ini.handle_count, quota=ini.quota,
                                inline_threshold=threshold, block_size=tgt.block_size)
        initiators.append((_Initiator(conn, gen, wl.invalidate), wl.window))

    pending: dict[tuple[int, int], tuple[_Initiator, Request]] = {}
    ready: deque[_Initiator] = deque()
    request_ids = iter(range(1, 1 << 32))  # each its own STag too
    state = {"now": 0, "done": 0, "failed": 0}

    def issue(ini: _Initiator) -> bool:
        req = ini.gen.next()
        if req is None:
            return False
        rid = next(request_ids)
        msg = _request(req, rid, ini.invalidate, config.block_size)
        pending[(ini.conn, rid)] = (ini, req)
        state["now"] += STEP_PS
        run(target.handle(ini.conn, encode(msg), state["now"]))
        return True

    def run(effects: list[Effect]) -> None:
        queue = deque(effects)
        while queue:
            eff = queue.popleft()
            if isinstance(eff, ReadInitiator):  # a non-inline store's data (STag = its id)
                _, req = pending[(eff.connection_id, eff.stag)]
                data = payload(eff.length, req.seq)
                queue.extend(target.complete_read(eff.token, data, state["now"]))
            elif isinstance(eff, SendMessage):
                done = decode(eff.data)
                ini, req = pending.pop((eff.connection_id, done.request_id))
                ini.gen.done(req, done.status == 0)
                state["done"] += 1
                state["failed"] += done.status != 0
                ready.append(ini)

    t0 = time.process_time()
    for ini, window in initiators:
        for _ in range(window):
            if not issue(ini):
                break
    idle = 0
    while state["done"] < operations and ready:
        ini = ready.popleft()
        if issue(ini):
            idle = 0
        else:
            ready.append(ini)
            idle += 1
            if idle > len(ready):
                raise FloorError("every workload is waiting: nothing can be issued")
    cpu = time.process_time() - t0
    return {"operations": state["done"], "failed": state["failed"], "cpu_s": cpu,
            "rate": state["done"] / cpu}


def _request(req: Request, rid: int, invalidate: bool, block_size: int) -> Message:
    """The message a run's initiator sends for ``req`` (kbtpsim.run.driver, _issue)."""
    if req.op == "free":
        return Free(request_id=rid, handle=req.handle)
    if req.op == "load":
        flags = RequestFlag.ALLOW_UNSEALED | (RequestFlag.INVALIDATE if invalidate else 0)
        return Load(flags=flags, request_id=rid, handle=req.handle,
                    data_descriptor=DataDescriptor(rid, 0, block_size))
    cls = Store if req.op == "store" else AllocStore
    flags = RequestFlag.SEAL if req.seal else RequestFlag(0)
    if req.inline:
        data = payload(req.length, req.seq)
        return cls(flags=flags | RequestFlag.INLINE, request_id=rid, handle=req.handle,
                   data_descriptor=DataDescriptor(0, 0, len(data)), inline_data=data)
    if invalidate:
        flags |= RequestFlag.INVALIDATE
    return cls(flags=flags, request_id=rid, handle=req.handle,
               data_descriptor=DataDescriptor(rid, 0, req.length))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO))
    ap.add_argument("--operations", type=int, default=20000,
                    help="requests to complete (default 20000)")
    args = ap.parse_args(argv)
    if args.operations <= 0:
        ap.error(f"--operations: must be positive, got {args.operations}")
    try:
        r = protocol_rate(args.scenario, args.operations)
    except ValueError as exc:  # FloorError, and the scenario loader's errors
        print(f"protocol_floor: {exc}", file=sys.stderr)
        return 2
    print(f"protocol alone: {r['operations']:.0f} operations in {r['cpu_s']:.2f} CPU s: "
          f"{r['rate']:.0f} ops/CPU-s ({1e6 / r['rate']:.1f} us per operation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
