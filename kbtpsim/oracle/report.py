"""The first divergence, readably: the request, expected and observed values, and the
work-request timeline of the chain (credit) that carried the request."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kbtpsim.oracle.compare import Divergence
from kbtpsim.wire import decode
from kbtpsim.wire.jsonform import to_json

if TYPE_CHECKING:
    from kbtpsim.oracle.campaign import Result
    from kbtpsim.oracle.node import CreditInfo, ObservedServer


#: target accounts that are not initiators' requests: sessions, re-posting, polling chains
_NOT_REQUESTS = frozenset({"HELLO", "GOODBYE", "DISCONNECT", "REFILL", "CHAIN"})


def request_counts(res: Result) -> str:
    """``N requests (n NIC, c CPU)``: the initiators' completed requests (the setup's
    stores included, HELLO and GOODBYE not) and how many of those requests the target
    served with the NIC and with the CPU. The two totals differ only when connections
    fail (``--faults drop``); then both are given."""
    rep = res.server.op_report() if res.server is not None else {}
    nic = int(sum(v["nic"] for k, v in rep.items() if k not in _NOT_REQUESTS))
    cpu = int(sum(v["cpu"] for k, v in rep.items() if k not in _NOT_REQUESTS))
    if nic + cpu == res.requests:
        return f"{res.requests:>4} requests with the setup ({nic} NIC, {cpu} CPU)"
    return (f"{res.requests:>4} requests with the setup, {nic + cpu} served by the target "
            f"({nic} NIC, {cpu} CPU)")


def _request(data: bytes, addr_le: bool) -> str:
    try:
        obj = to_json(decode(data, addr_le))
    except Exception:  # undecodable (malformed on purpose)
        return f"undecodable octets {data[:48].hex()}{'...' if len(data) > 48 else ''}"
    if "inline_data" in obj and len(obj["inline_data"]) > 32:
        obj["inline_data"] = obj["inline_data"][:32] + f"... ({len(data) - 40} octets)"
    return json.dumps(obj, separators=(", ", ": "))


def find_credit(server: ObservedServer, d: Divergence) -> CreditInfo | None:
    """The credit that carried the diverging request (by credit number, or by its octets)."""
    e = d.event
    if e is None or e.conn is None:
        return None
    if e.credit is not None:
        return server.credit_info.get((e.conn, e.credit))
    for info in server.credits.get(e.conn, []):
        if e.data and info.finished.request == e.data:
            return info
    return None


def timeline_lines(server: ObservedServer, info: CreditInfo, limit: int = 200) -> list[str]:
    rows = server.timeline(info.conn, info.finished.credit)
    out = [f"    {'WR':<22}{'role':<8}{'opcode':<18}{'posted':>11}{'fetched':>11}"
           f"{'started':>11}{'finished':>11}  status"]

    def us(v: Any) -> str:
        return f"{v / 1e6:.3f}" if isinstance(v, int) else "-"

    for r in rows[:limit]:
        out.append(f"    {r['wr']:<22}{r['role']:<8}{r.get('opcode', '')!s:<18}"
                   f"{us(r.get('posted')):>11}{us(r.get('fetched')):>11}"
                   f"{us(r.get('started')):>11}{us(r.get('finished')):>11}  "
                   f"{r.get('status', '-')}")
    if len(rows) > limit:
        out.append(f"    ... {len(rows) - limit} more")
    return out


def describe(result: Result, d: Divergence, timeline: bool = True) -> str:
    """A readable account of divergence ``d`` of ``result``."""
    spec = result.spec
    server = result.server
    lines = [f"DIVERGENCE ({d.kind}): {d.detail}",
             f"  campaign: seed {spec.seed}, profile {spec.profile}, ADDR_LE "
             f"{'on' if result.addr_le else 'off'}, mix {spec.mix}, {spec.ops} ops"
             + (f", faults {','.join(spec.faults.names)}" if spec.faults.names else "")
             + (f", mutant {spec.mutant}" if spec.mutant else "")]
    e = d.event
    if server is not None and e is not None and e.conn is not None:
        conn = server.connections.get(e.conn)
        who = conn.name if conn is not None else "?"
        req = e.data
        if not req:
            info = find_credit(server, d)
            req = info.finished.request if info is not None else b""
        lines.append(f"  initiator {who}, connection {e.conn}, request id {d.request_id}")
        if req:
            lines.append(f"  request: {_request(req, result.addr_le)}")
        lines.append(f"  linearised at: {e.describe()}")
    if d.expected or d.observed:
        lines.append(f"  expected: {d.expected}")
        lines.append(f"  observed: {d.observed}")
    if timeline and server is not None:
        info = find_credit(server, d)
        if info is None and d.kind == "connection" and d.conn is not None:
            info = server.failed_credit(d.conn)
            if info is not None:
                lines.append(f"  request: {_request(info.finished.request, result.addr_le)}")
        if info is not None:
            f = info.finished
            by = f"the NIC ({f.served})" if f.served else "the CPU (fallback)"
            if d.kind == "connection":
                by = "a chain whose WRs failed (status below)"
            lines.append(f"  chain: credit {f.credit} of connection {info.conn}, served by "
                         f"{by}" + (f", ticket {f.ticket}" if f.ticket is not None else "")
                         + "; WR timeline (us):")
            if d.kind == "connection":
                bad = [r for r in server.timeline(info.conn, f.credit)
                       if r.get("status") not in (None, "SUCCESS") and "finished" in r]
                if bad:
                    b = min(bad, key=lambda r: r["finished"])
                    lines.append(f"  first failed WR: {b['wr']} ({b.get('opcode')}, "
                                 f"{b['role']}) at {b['finished'] / 1e6:.3f} us: "
                                 f"{b['status']}")
            lines += timeline_lines(server, info)
    lines.append(f"  replay: {spec.replay()}")
    return "\n".join(lines)


__all__ = ["describe", "find_credit", "timeline_lines"]
