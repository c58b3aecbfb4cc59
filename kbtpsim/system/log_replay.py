"""The reference target rebuilt from a server's log (:func:`replay`): what the oracle
compares a run with. Sans-IO: it drives a fresh :class:`~kbtpsim.target.Target` with the
logged requests at their logged times."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbtpsim.target import Effect, ReadInitiator, Target, TargetConfig

#: ``read_source(connection_id, request, effect)``: the octets an RDMA Read of a store's
#: source would have brought back (the initiator's buffer when it sent the request)
ReadSource = Callable[[int, bytes, ReadInitiator], bytes]


def replay(config: TargetConfig, log: list[tuple[Any, ...]],
           read_source: ReadSource | None = None,
           tickets: dict[int, int] | None = None,
           read_origin: dict[int, int] | None = None) -> tuple[Target, list[Effect]]:
    """Feed a server's log (:attr:`kbtpsim.system.server.SoftwareTargetServer.log`) into
    a fresh dict-backed :class:`Target`: the reference for oracle checks. Returns it and
    all its effects.

    Entries are applied in time order (their last element; a stable sort, so entries of
    one instant keep the server's order): an offloaded server logs a request its NIC
    served (``("nic", conn, request, time)``) when its CPU notices it, with the time the
    NIC ran it; an allocation in two entries, ``("nic_hold", ...)`` at its ticket and
    ``("nic_slot", conn, request, time)`` when its entry turned VALID. Such a request's
    RDMA Read of store data is answered at once with ``read_source`` (the NIC read the
    initiator's buffer itself).

    ``tickets`` (log index -> shared-ring Ticket the entry took) fixes the order of
    allocations: a Ticket is an allocation's linearisation point, and the NIC's FetchAdds
    and the CPU's allocations interleave closer than any timestamp tells. The entries
    that took Tickets keep their places in the time order, filled in Ticket order.

    ``read_origin`` (the server's RDMA Read token -> index of the log entry whose call
    issued that Read) matches each logged ``("read", token, ...)`` with the reference's
    Read of the same request. Without it, the k-th Read of a CPU-handled request is taken
    to be the server's token k, which holds only if the server's calls came in the
    replay's order (an allocation logged at its Ticket's time, but handled once the
    Ticket's FetchAdd returned, may come later)."""
    ref = Target(config)
    out: list[Effect] = []
    # The server's target numbers its RDMA Reads 1, 2, 3, ... (Target issues tokens in
    # order) and only for requests its CPU handled; the reference also issues tokens for
    # NIC-served stores. The k-th Read of a CPU-handled request is the server's token k.
    tokens: dict[int, int] = {}
    by_entry: dict[int, list[int]] = {}  #: log index -> the reference's Read tokens
    current = -1  #: the log index being applied

    def note(effects: list[Effect]) -> list[Effect]:
        for e in effects:
            if isinstance(e, ReadInitiator):
                tokens[len(tokens) + 1] = e.token
                by_entry.setdefault(current, []).append(e.token)
        return effects

    def ref_token(live: int) -> int:
        origin = read_origin.get(live) if read_origin is not None else None
        if origin is not None and by_entry.get(origin):
            return by_entry[origin].pop(0)
        return tokens.get(live, live)

    order = sorted(range(len(log)), key=lambda i: log[i][-1])
    if tickets:
        places = [k for k, i in enumerate(order) if i in tickets]
        by_ticket = sorted((order[k] for k in places), key=lambda i: tickets[i])
        for k, i in zip(places, by_ticket, strict=True):
            order[k] = i
    for index in order:
        current = index
        entry = log[index]
        kind, now = entry[0], entry[-1]
        if kind == "connect":
            ref.connect(entry[1], now)
        elif kind == "handle":
            out += note(ref.handle(entry[1], entry[2], now))
        elif kind in ("nic", "nic_hold", "nic_slot"):
            # a request the NIC served: whole, or an allocation in two steps (its ticket,
            # then the rest when its entry turned VALID); RDMA Reads of its store data
            # answered at once with read_source (the NIC read the initiator's buffer)
            if kind == "nic_slot":
                effects = ref.read_slot(entry[1], now)
            else:
                effects = ref.handle(entry[1], entry[2], now,
                                     hold_after_ticket=kind == "nic_hold")
            while effects:
                e = effects.pop(0)
                if isinstance(e, ReadInitiator):
                    if read_source is None:
                        raise ValueError("replay: the log has NIC-served stores; give "
                                         "read_source")
                    effects += ref.complete_read(
                        e.token, read_source(entry[1], entry[2], e), now)
                else:
                    out.append(e)
        elif kind == "read":
            out += note(ref.complete_read(ref_token(entry[1]), entry[2], now))
        elif kind == "advance":
            out += note(ref.advance(now))
        elif kind == "quiesced":
            out += note(ref.quiesced(entry[1], now))
        elif kind == "fetch_add" and entry[1] in ref.connections:
            # a ticket noticed after its session ended is not replayed
            sess = ref.connections[entry[1]].initiator
            if sess is not None and sess.direct is not None:
                ref.remote_fetch_add(entry[1], sess.direct.head_stag, 0, now)
        elif kind == "disconnect" and entry[1] in ref.connections:
            out += note(ref.disconnect(entry[1], now))
    return ref, out


__all__ = ["ReadSource", "replay"]
