"""Where the measurements agree and disagree with the draft's "Comparison of Approaches"
table, derived from the numbers (:func:`findings`), and their one-line :func:`summary`
(for :mod:`kbtpsim.baselines.table`).
"""

from __future__ import annotations

from typing import Any

from kbtpsim.baselines.table_format import _num, _pct, _us
from kbtpsim.baselines.table_runs import Approach, Row, approaches


def _find(apps: list[Approach], approach: str) -> Approach | None:
    return next((a for a in apps if a.approach == approach), None)


def findings(rows: list[Row]) -> list[str]:
    """Statements, with numbers, of where the measurements disagree with the draft's
    table (and where they agree), one per claim."""
    apps = approaches(rows)
    out: list[str] = []
    static = _find(apps, "one_sided_static")
    dynamic = _find(apps, "one_sided_dynamic")
    two = _find(apps, "two_sided")
    kbtp = [a for a in apps if a.approach.startswith("kbtp_")]

    def mem(a: Approach) -> float | None:
        v = a.heavy.get("memory_utilisation")
        return None if v is None else float(v)

    def cpu(a: Approach, kind: str = "all") -> float | None:
        v = a.heavy.get("cpu_ns_per_op", kind)
        return None if v is None else float(v)

    def lat(a: Approach, kind: str, q: str = "latency_p50_ns") -> float | None:
        v = a.light.get(kind, q)
        return None if v is None else float(v)

    def rt(a: Approach, kind: str) -> float | None:
        v = a.heavy.get(kind, "round_trips")
        return None if v is None else float(v)

    # ---- memory utilisation
    utils: dict[str, float] = {}
    for a in apps:
        m = mem(a)
        if m is not None:
            utils[a.name] = m
    if static is not None and mem(static) is not None:
        low = min(utils.values())
        if mem(static) == low:
            out.append(f"**Memory, one-sided static \"low\": agrees.** Lowest measured, "
                       f"{_pct(mem(static))}: each sequence takes a region slot sized for "
                       "the longest sequence, and the regions are reserved up front whether "
                       "they hold data or not.")
        else:
            out.append(f"**Memory, one-sided static \"low\": disagrees.** Measured "
                       f"{_pct(mem(static))}, not the lowest ("
                       + ", ".join(f"{k} {_pct(v)}" for k, v in utils.items()) + ").")
    if dynamic is not None and mem(dynamic) is not None:
        below = [a for a in kbtp if mem(a) is not None and mem(a) < mem(dynamic)]  # type: ignore[operator]
        if below:
            out.append(
                f"**Memory, one-sided dynamic \"medium\" vs KBTP \"high\": disagrees.** "
                f"Dynamic allocation holds {_pct(mem(dynamic))} of what it reserves, more "
                "than " + ", ".join(f"{a.name} ({_pct(mem(a))})" for a in below)
                + ". A region allocated at the request's size wastes only the allocator's "
                "rounding; a fixed-size block wastes the unused tail of every sequence's "
                "last block, and a DIRECT_ALLOC partition is reserved whole. Dynamic "
                "allocation pays elsewhere: a second round trip and target CPU per store "
                "(below), and external fragmentation of the pool over time.")
    shared = [a for a in kbtp if mem(a) is not None and "direct_alloc" not in a.approach]
    if shared:
        lo_k = min(mem(a) for a in shared)  # type: ignore[type-var]
        hi_k = max(mem(a) for a in shared)  # type: ignore[type-var]
        out.append(
            f"**Memory, KBTP \"high (fine-grained blocks)\": agrees with a shared ring.** "
            f"{_pct(lo_k)} to {_pct(hi_k)}: the loss is the unused tail of each sequence's "
            "last block (on average half a block per sequence).")
    if two is not None and mem(two) is not None:
        out.append(
            f"**Memory, two-sided \"high\": agrees.** {_pct(mem(two))} (the target "
            f"allocates exact sizes), not counting its receive buffers, each as large as "
            f"a block ({_mib(two.heavy.results, 'buffer_bytes')} MiB for "
            f"{len(two.heavy.results.get('initiators', {}))} connections).")
    for a in kbtp:
        if mem(a) is not None and "direct_alloc" in a.approach:
            out.append(
                f"**Memory, {a.name}: below KBTP's shared pool.** {_pct(mem(a))}: each "
                "DIRECT_ALLOC initiator's partition (its quota of blocks) is reserved to it "
                "whether used or not, as a static region is, though at block granularity.")
    # ---- target CPU per operation
    if static is not None and cpu(static) is not None:
        verdict = "agrees" if cpu(static) == 0 else "disagrees"
        out.append(f"**Target CPU, one-sided static \"no\": {verdict}.** "
                   f"{cpu(static):.0f} ns per operation.")
    if dynamic is not None and cpu(dynamic) is not None:
        out.append(
            f"**Target CPU, one-sided dynamic \"yes (allocation)\": agrees.** "
            f"{_num(cpu(dynamic, 'store'))} ns per store (the allocation RPC), "
            f"{_num(cpu(dynamic, 'free'))} ns per FREE, {_num(cpu(dynamic, 'load'))} ns per "
            "load.")
    if two is not None and cpu(two) is not None:
        out.append(
            f"**Target CPU, two-sided \"yes\": agrees.** The most: "
            f"{_num(cpu(two, 'store'))} ns per store (most of it the copy out of the "
            f"receive buffer), {_num(cpu(two, 'load'))} ns per load.")
    ref = cpu(dynamic) if dynamic is not None else None
    for a in kbtp:
        c = cpu(a)
        if c is None:
            continue
        parts = (f"{c:.0f} ns per operation (store {_num(cpu(a, 'store'))}, load "
                 f"{_num(cpu(a, 'load'))}, free {_num(cpu(a, 'free'))} ns)")
        cmp = "" if ref is None else (f"; one-sided dynamic: {ref:.0f} ns")
        if a.approach.startswith("kbtp_offload"):
            verdict = "agrees" if ref is not None and c < 0.5 * ref else "disagrees"
            t: dict[str, Any] = next(iter(a.heavy.results.get("targets", {}).values()), {})
            served = (t.get("fallbacks") or {}).get("served") or {}
            shares = ", ".join(
                f"{op} {100 * v.get('nic', 0) / max(1, v.get('nic', 0) + v.get('cpu', 0)):.0f}%"
                for op, v in sorted(served.items()) if op in ("LOAD", "STORE", "ALLOC_STORE"))
            per = t.get("cpu", {}).get("per_op", {})
            refill = per.get("REFILL", {})
            what = ("the grants that hand re-armed chains back to the NIC (chains v2; "
                    "REFILL: " if t.get("chains") == "v2" else
                    "the re-posting of chains (chains v1; REFILL: ")
            why = _store_fallback(t)
            out.append(
                f"**Target CPU, {a.name} \"not required per operation\": {verdict}.** "
                f"{parts}{cmp}. Requests served by the NIC: {shares or 'none'}; the rest, "
                f"FREE (FREE on the NIC is opt-in, decision C20: not used here), and {what}"
                f"{_num(refill.get('per_op_ns'))} ns per refill, "
                f"{_num(refill.get('ops'))} refills) run on the target CPU."
                + (f" Its stores run on the CPU: {why}; the CPU takes each one's Ticket "
                   "with a FetchAdd through its NIC and spins on its core until it "
                   "returns, behind the NIC's chain traffic (kbtpsim.chains.cpu_ticket)."
                   if why else ""))
        else:
            loads0 = cpu(a, "load") == 0
            extra = (" DIRECT_LOAD takes loads off the CPU (0 ns per load), not stores."
                     if loads0 else "")
            if "direct_alloc" in a.approach:
                extra = (" DIRECT_ALLOC does not take stores off the CPU: each still needs a "
                         "BIND request and the target notices the FetchAdd (DIRECT).")
            out.append(
                f"**Target CPU, {a.name} \"not required per operation\": disagrees for "
                f"a software target.** {parts}{cmp}.{extra} The claim is about targets "
                "whose NIC executes the operations; a software target (equally conformant) "
                "spends CPU on every request.")
    # ---- round trips
    for a in kbtp:
        srt, lrt = rt(a, "store"), rt(a, "load")
        bad = [(k, v) for k, v in (("store", srt), ("load", lrt)) if v is not None and v > 1]
        if not bad:
            continue
        ops = (a.heavy.get("store", "operations") or []) + \
            (a.heavy.get("load", "operations") or [])
        why = []
        if "ALLOC_STORE" in ops or "STORE" in ops:
            why.append("a store larger than Max Inline is fetched by the target with an "
                       "RDMA Read (request, read, completion: 2 round trips; only inline "
                       "stores take 1)")
        if "DIRECT_LOAD" in ops:
            why.append("DIRECT_LOAD reads the entry, the block and the entry again (3)")
        if "DIRECT_ALLOC" in ops:
            why.append("DIRECT_ALLOC is a FetchAdd, a slot read and its confirmation, the "
                       "write and a BIND request (5 at least)")
        out.append(
            f"**Round trips, {a.name} \"one round trip per operation\": disagrees.** "
            + ", ".join(f"{k} {v:.2f}" for k, v in bad) + " on average: "
            + "; ".join(why) + ". LOAD and FREE take one.")
    if static is not None and dynamic is not None and rt(static, "store") is not None:
        out.append(f"**Round trips, baselines.** Static stores take "
                   f"{rt(static, 'store'):.0f}, dynamic {_num(rt(dynamic, 'store'), '{:.0f}')}"
                   f" (the allocation RPC, then the write)"
                   + (f", two-sided {_num(rt(two, 'store'), '{:.0f}')}" if two else "")
                   + "; every load takes 1.")
    # ---- operation cost (light-load latency)
    if static is not None and dynamic is not None and two is not None:
        ls_, ld_, lt_ = lat(static, "store"), lat(dynamic, "store"), lat(two, "store")
        if None not in (ls_, ld_, lt_):
            order = "agrees" if ls_ <= ld_ <= lt_ else "disagrees"  # type: ignore[operator]
            loads = [lat(x, "load") for x in (static, dynamic, two)]
            known = [v for v in loads if v is not None]
            same = len(known) == 3 and max(known) <= 1.1 * min(known)
            load_verdict = ("disagrees for loads (within 10% of each other)" if same
                            else "loads differ")
            detail = ""
            if ls_ <= lt_ and ld_ > lt_:  # type: ignore[operator]
                detail = (" Two-sided stores are not dearer than dynamic ones: one round "
                          "trip plus the target's copy against two round trips.")
            out.append(
                f"**Operation cost, static \"low\" < dynamic \"medium\" < two-sided "
                f"\"high\": {order} for stores, {load_verdict}.** Store p50 at light "
                f"load: static {_us(ls_)} us, dynamic {_us(ld_)} us, two-sided {_us(lt_)} "
                f"us.{detail} Load p50: static {_us(loads[0])}, dynamic {_us(loads[1])}, "
                f"two-sided {_us(loads[2])} us: one round trip each, and the block's "
                "transfer dominates.")
    for a in kbtp:
        k = lat(a, "store")
        if k is None or static is None or lat(static, "store") is None:
            continue
        heavy_k = a.heavy.get("store", "latency_p50_ns")
        others = [x.heavy.get("store", "latency_p50_ns") for x in (static, dynamic, two)
                  if x is not None and x.heavy.get("store", "latency_p50_ns") is not None]
        worst = max(others) if others else None
        note = ""
        if heavy_k is not None and worst and heavy_k > 1.3 * worst:
            th: dict[str, Any] = next(iter(a.heavy.results.get("targets", {}).values()), {})
            busy = th.get("cpu", {}).get("utilisation") or 0
            reason = ("five dependent round trips per store, each queued behind the LOAD data "
                      "leaving the target's port")
            why = _store_fallback(th)
            if a.approach.startswith("kbtp_offload") and why:
                reason = (f"its stores run on the target CPU ({why}), in order with "
                          "the connection's other requests, as on the software target")
            elif a.approach.startswith("kbtp_offload") and th.get("chains") == "v2":
                reason = (f"{_num(rt(a, 'store'), '{:.0f}')} round trip(s) per store "
                          f"and its target CPU only {100 * busy:.0f}% busy, so the time is "
                          "in the chain path: a connection's credits pass its gate one at "
                          "a time (the draft's in-order rule; a store lets the next one "
                          "through only beside its COMPLETION, decision C19), each after a "
                          "sequence of dependent chain steps (a WAIT, an ENABLE, WQE "
                          "fetches and a CQE each; chains v2, docs/chains.md) before the "
                          "data moves")
            elif a.approach.startswith("kbtp_offload"):
                reason = (f"{_num(rt(a, 'store'), '{:.0f}')} round trip(s) per store "
                          f"and its target CPU only {100 * busy:.0f}% busy, so the time is "
                          "in the chain path: a connection's chains run one after the "
                          "other, each executing every WQE of its credit (the dispatch, "
                          "markers and patches of every fast path, docs/chains.md) before "
                          "the data moves, and a served credit serves again only once the "
                          "CPU has re-posted it (chains v1)")
            elif "ALLOC_STORE" in (a.heavy.get("store", "operations") or []):
                reason = ("the target serves a connection's requests in order (the "
                          "reference target, docs/decisions.md T4), so a non-inline store's "
                          "RDMA Read holds up the stores behind it, and under load that "
                          "Read's request queues behind the LOAD data leaving the target's "
                          "port")
            note = (f" Under heavy load its store p50 is {_us(heavy_k)} us against "
                    f"{_us(worst)} us for the slowest baseline: {reason}.")
        tl: dict[str, Any] = next(iter(a.light.results.get("targets", {}).values()), {})
        light_busy = tl.get("cpu", {}).get("utilisation") or 0
        if light_busy > 0.9:
            note = (f" At light load its target CPU is already {100 * light_busy:.0f}% "
                    "busy." + note)
        out.append(
            f"**Operation cost, {a.name}.** Store p50 {_us(k)} us at light load "
            f"({k / lat(static, 'store'):.2f}x one-sided static's), load p50 "  # type: ignore[operator]
            f"{_us(lat(a, 'load'))} us.{note}")
    return out


def _store_fallback(target: dict[str, Any]) -> str:
    """Why an offloaded target's stores ran on its CPU, if most of them did (the most
    frequent fallback reason, ``fallbacks.reasons``), else ``""``."""
    fb = target.get("fallbacks") or {}
    served = fb.get("served") or {}
    nic = sum((served.get(op) or {}).get("nic", 0) for op in ("STORE", "ALLOC_STORE"))
    cpu = sum((served.get(op) or {}).get("cpu", 0) for op in ("STORE", "ALLOC_STORE"))
    if cpu <= nic:
        return ""
    counts: dict[str, int] = {}
    for op in ("STORE", "ALLOC_STORE"):
        for reason, n in ((fb.get("reasons") or {}).get(op) or {}).items():
            counts[reason] = counts.get(reason, 0) + n
    if not counts:
        return "no chain serves them"
    reason, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return f"{100 * n / cpu:.0f}% of them for {reason}"


def _mib(results: dict[str, Any], key: str) -> str:
    t: dict[str, Any] = next(iter(results.get("targets", {}).values()), {})
    v = t.get("memory", {}).get(key)
    return "n/a" if v is None else f"{v / (1 << 20):.1f}"


def summary(found: list[str]) -> list[str]:
    """The disagreements alone, one line each (their headings)."""
    heads = [f.split("**")[1] for f in found if f.startswith("**") and "disagrees" in
             f.split("**")[1]]
    if not heads:
        return ["The measurements agree with every claim of the draft's table."]
    return ["In short, the measurements disagree with the draft's table on:", "",
            *[f"1. {h.rstrip('.')}" for h in heads]]
