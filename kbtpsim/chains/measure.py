"""Measured latency and target CPU cost of each operation, per profile and block size.

``python -m kbtpsim.chains.measure [--docs DIR]`` prints the Markdown tables of
``docs/chains.md`` (and with ``--docs`` regenerates ``DIR/chains/*.png`` and ``*.txt``).
:func:`measure` is the function behind it.

Method: the harness (:mod:`kbtpsim.chains.harness`) with one initiator, 4 credits, the
profile's ADDR_LE choice that offloads most (ADDR_LE on little-endian-WQE profiles), a
sealed full block bound by a first ALLOC_STORE; each measured request is sent alone
(closed loop) and timed from the initiator's Send to its completion CQE being visible.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from kbtpsim.chains.harness import Harness
from kbtpsim.chains.vocab import OPERATIONS
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.profiles import PROFILES
from kbtpsim.wire import AllocStore, DataDescriptor, Free, Load, Message, RequestFlag, Store

OPS = ("LOAD", "STORE-INLINE", "STORE-READ", "ALLOC_STORE-INLINE")
#: measured too, on chains v2 (FREE on the NIC: ``target.operations.free: offload``, C20)
V2_OPS = ("FREE",)


@dataclass(frozen=True)
class Sample:
    profile: str
    addr_le: bool
    op: str
    block_size: int
    latency_ns: float
    served: str  #: "NIC" or "CPU"
    cpu_ns_per_op: float  #: target CPU busy time spent on the request (fallback only)
    refill_ns_per_op: float  #: CPU time re-posting chains, per request


def _requests(h: Harness, op: str, bs: int, n: int) -> list[Message]:
    data = bytes(range(256)) * (bs // 256)
    inl = RequestFlag.INLINE
    out: list[Message] = [AllocStore(request_id=1, handle=0x4001, flags=inl | RequestFlag.SEAL,
                                     data_descriptor=DataDescriptor(0, 0, bs),
                                     inline_data=data),
                          AllocStore(request_id=2, handle=0x4002, flags=inl,
                                     data_descriptor=DataDescriptor(0, 0, bs),
                                     inline_data=data)]
    for i in range(n):
        rid = 10 + i
        if op == "LOAD":
            out.append(Load(request_id=rid, handle=0x4001,
                            data_descriptor=DataDescriptor(h.stag, h.buf(0), bs)))
        elif op == "STORE-INLINE":
            out.append(Store(request_id=rid, handle=0x4002, flags=inl,
                             data_descriptor=DataDescriptor(0, 0, bs), inline_data=data))
        elif op == "FREE":  # a handle bound by an ALLOC_STORE, then freed
            out.append(AllocStore(request_id=1000 + rid, handle=0x4003, flags=inl,
                                  data_descriptor=DataDescriptor(0, 0, bs), inline_data=data))
            out.append(Free(request_id=rid, handle=0x4003))
        elif op == "STORE-READ":
            out.append(Store(request_id=rid, handle=0x4002,
                             data_descriptor=DataDescriptor(h.stag, h.buf(bs), bs)))
        else:
            out.append(AllocStore(request_id=rid, handle=0x4003 + i, flags=inl,
                                  data_descriptor=DataDescriptor(0, 0, bs),
                                  inline_data=data))
    return out


#: Profiles measured besides the named ones: cx5 with the hypothetical strided keys (a
#: what-if override; plain cx5 offloads the same variants with its UMR-built keys).
EXTRA = {"cx5+strided": PROFILES["cx5"].replace(name="cx5+strided", strided_keys=True)}


def profile_named(name: str) -> NicProfile:
    """A named profile (``kbtpsim.nic.profiles.PROFILES``) or one of :data:`EXTRA`."""
    return EXTRA[name] if name in EXTRA else PROFILES[name]


def best_addr_le(profile: str) -> bool:
    return profile_named(profile).wqe_field_byte_order == "little"


def measure(profile: str | NicProfile, op: str, block_size: int, n: int = 3,
            addr_le: bool | None = None, chains: str = "v1") -> Sample:
    """Latency of the ``n``-th request of ``op`` (steady state) and its CPU cost
    (``profile``: a name, or a profile, e.g. one with overridden parameters; ``chains``:
    the design, v1 re-posted by the CPU or v2 re-armed by the NIC, granted one credit at
    a time)."""
    prof = profile_named(profile) if isinstance(profile, str) else profile
    profile = prof.name
    le = prof.wqe_field_byte_order == "little" if addr_le is None else addr_le
    variants = (*OPERATIONS["LOAD"], *OPERATIONS["ALLOC_STORE"], "free") \
        if op == "FREE" else None  # C20: the LOADs then count their readers
    h = Harness(prof, le, block_size=block_size, blocks=8, quota=8, chains=chains,
                variants=variants)
    msgs = _requests(h, op, block_size, n)
    res = h.run(msgs[:2])
    cpu0, refill0 = res.cpu_request_ps, res.refill_ps
    res = h.run(msgs[2:], hello=False)
    mism = h.mismatches()
    if mism:
        raise AssertionError(f"{profile} {op}: {mism[:3]}")
    last = msgs[-1].request_id
    served = "NIC" if res.served.get(last) else "CPU"
    return Sample(profile, le, op, block_size, res.latency_ps[last] / 1000, served,
                  (res.cpu_request_ps - cpu0) / 1000 / n, (res.refill_ps - refill0) / 1000 / n)


#: The estimated costs the chains' verdict depends on, with a plausible range each (no
#: published per-WR figure: docs/calibration.md). WAIT and ENABLE have no parameter of
#: their own: they cost what any WR costs (doorbell-free fetch and decode), so
#: ``fetch_cycles`` stands for them; a CAS on a WQE is an atomic (``atomic_cycles``).
ESTIMATES: dict[str, tuple[float, ...]] = {
    "fetch_cycles": (5, 10, 20, 40, 80),  # default 10
    "atomic_cycles": (10, 30, 60, 120, 240),  # default 30
    "loopback_ns": (0, 50, 100, 200, 400),  # default 50
    "indirect_xlat_ns": (0, 20, 50, 100, 200),  # default 20
    "cpu_post_ns": (20, 40, 60, 100, 150),  # default 60
    "pcie_latency_ns": (100, 150, 200, 250, 300),  # default 200 (cx5: an estimate)
}


def sensitivity(param: str, values: tuple[float, ...], block_size: int = 4096,
                offload: str = "cx5", software: str = "cx5-upstream",
                chains: str = "v1") -> list[dict[str, float]]:
    """Per value of ``param``: LOAD latency offloaded (``offload``'s chains, design
    ``chains``) and in software (``software``: the same timing, nothing offloaded), their
    ratio, and the target CPU per request of each (offload: re-posting the chain (v1) or
    granting its re-arming (v2); software: serving it and re-posting the dispatch
    prefix)."""
    out = []
    for v in values:
        kw = {param: type(getattr(profile_named(offload), param))(v)}
        off = measure(profile_named(offload).replace(**kw), "LOAD", block_size,
                      chains=chains)
        sw = measure(profile_named(software).replace(**kw), "LOAD", block_size)
        assert off.served == "NIC" and sw.served == "CPU", (off, sw)
        out.append({"value": v, "offload_us": off.latency_ns / 1000,
                    "software_us": sw.latency_ns / 1000,
                    "ratio": off.latency_ns / sw.latency_ns,
                    "offload_cpu_ns": off.cpu_ns_per_op + off.refill_ns_per_op,
                    "software_cpu_ns": sw.cpu_ns_per_op + sw.refill_ns_per_op})
    return out


def table(samples: list[Sample]) -> str:
    rows = ["| profile | ADDR_LE | operation | block | latency (us) | served by | "
            "CPU per op (ns) | refill per op (ns) |",
            "|---|---|---|---|---|---|---|---|"]
    for s in samples:
        size = "4 KiB" if s.block_size == 4096 else "1 MiB"
        rows.append(f"| {s.profile} | {'on' if s.addr_le else 'off'} | {s.op} | {size} | "
                    f"{s.latency_ns / 1000:.2f} | {s.served} | {s.cpu_ns_per_op:.0f} | "
                    f"{s.refill_ns_per_op:.0f} |")
    return "\n".join(rows)


#: the chains docs/chains/ lists and draws: (variant, profile, ADDR_LE)
ASSETS: tuple[tuple[str, str, bool], ...] = (
    *((v, "ideal", True) for v in
      ("load", "store_inline", "store_read", "alloc_inline", "alloc_read")),
    *((v, "ideal-be", False) for v in ("load", "alloc_inline", "alloc_read")),
    ("load", "cx5-upstream", False),
    *((v, "cx5", False) for v in ("load", "alloc_inline")),
)


def _stem(variant: str, prof: str, le: bool) -> str:
    return f"{variant}-{prof}{'-addr-le' if le else ''}"


def listings() -> dict[str, str]:
    """``docs/chains/<stem>.txt`` by file name: what ``kbtpsim chains show`` prints for
    each chain of :data:`ASSETS`."""
    from kbtpsim.chains.plan import decide
    from kbtpsim.chains.render import show

    return {f"{_stem(v, p, le)}.txt": show(decide(v, profile_named(p), le)) + "\n"
            for v, p, le in ASSETS}


def write_assets(root: Path) -> None:
    """docs/chains/*.png and *.txt: every variant on ideal with ADDR_LE (ALLOC_STORE
    rejected), LOAD and ALLOC_STORE on ideal-be and cx5 (offloaded) and LOAD on
    cx5-upstream (rejected), drawn and listed. Deterministic: on an unchanged tree it
    rewrites the same octets."""
    from kbtpsim.chains.plan import decide
    from kbtpsim.chains.render import draw

    out = root / "chains"
    out.mkdir(parents=True, exist_ok=True)
    for name, text in listings().items():
        (out / name).write_text(text)
    for variant, prof, le in ASSETS:
        d = decide(variant, profile_named(prof), le)
        draw(d.chain, str(out / f"{_stem(variant, prof, le)}.png"),
             f"{variant} on {prof}, ADDR_LE {'on' if le else 'off'}: "
             f"{'offloaded' if d.offloaded else 'software'} ({d.chain.count()} WRs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbtpsim.chains.measure")
    parser.add_argument("--docs", metavar="DIR", help="also regenerate DIR/chains/*")
    parser.add_argument("--profiles",
                        default="cx5,cx5-upstream,irdma,ideal,ideal-be,cx3-40g-ib")
    args = parser.parse_args(argv)
    if args.docs:
        write_assets(Path(args.docs))
    samples = [measure(p, op, bs) for p in args.profiles.split(",") for op in OPS
               for bs in (4096, 1 << 20)]
    print(table(samples))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
