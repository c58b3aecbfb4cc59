"""Which requests no chain can serve, judged from their octets alone.

A chain's first markers test what the request says about itself: the opcode, the Flags,
Generation and Status, and the length (the descriptor's Length, or the receive's byte
count for inline data, must be the Block Size: the fast paths serve whole blocks,
docs/chains.md). A request that fails one of these for every variant a connection
offloads cannot be served by its chain whatever the table and the ring hold, so the
target CPU may take it as soon as its receive completes, instead of waiting for the
chain to run to its end (:meth:`kbtpsim.chains.post.ChainServer.take_early`).

:func:`static_miss` is deliberately conservative: it names a reason only where every
offloaded variant's markers must fail. Everything that depends on target state (the
handle's range, the entry, the quota, the session, the ring slot) is left to the chain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.offload_config import KEPT_ON_CPU
from kbtpsim.errors import DecodeError
from kbtpsim.wire import AllocStore, Free, Load, Store, decode

#: reasons a request went to the CPU before its chain ran
PARTIAL_BLOCK = "partial block (the chains serve whole blocks)"
NOT_OFFLOADED = "no chain for this operation and source on the profile"
#: the configuration keeps the request's variants on the CPU (target.operations,
#: target.read_source_stores)
KEPT = "no chain for this operation and source: kept on the target CPU by the configuration"
#: a Read-source store whose data Read would span several packets (verifier rule
#: ``torn-read``, decision O5)
TORN_READ = ("a Read source of more than one packet (a cut Read would leave part of the "
             "block written: the CPU stages it, decision O5)")
OTHER_FLAGS = "flags outside the fast paths (e.g. RECORD, INVALIDATE with INLINE)"
GENERATION = "non-zero Generation"
STATUS = "non-zero Status"
MALFORMED = "malformed request"
#: reasons a request went to the CPU after its chain ran
CHAIN_TESTS = "after the chain ran: handle, entry, quota or session tests"
SLOT_NOT_READY = "after the chain ran: slot not ready (handed over with its Ticket)"


def static_miss(request: bytes, offloaded: tuple[str, ...], block_size: int,
                addr_le: bool, left_out: Mapping[str, Sequence[str]] | None = None
                ) -> str | None:
    """Why no variant in ``offloaded`` can serve ``request`` (one of the reasons above),
    or None when one may (the chain decides). ``left_out``: the plan's reasons for the
    variants it left to the CPU (``ConnectionPlan.software``)."""
    if not offloaded:
        return NOT_OFFLOADED
    try:
        msg = decode(request, addr_le)
    except DecodeError:
        return MALFORMED
    if isinstance(msg, Free) and "free" in offloaded:  # decision C20: header alone
        if msg.flags:
            return OTHER_FLAGS
        if msg.status:
            return STATUS
        return GENERATION if msg.generation else None
    if not isinstance(msg, Load | Store | AllocStore):
        return NOT_OFFLOADED
    inline = getattr(msg, "inline_data", None) is not None
    cands = [VARIANTS[v] for v in offloaded if VARIANTS[v].opcode == msg.OPCODE
             and VARIANTS[v].inline == inline]
    if not cands:
        return _left_out_reason(msg.OPCODE, inline, left_out or {})
    length = len(msg.inline_data) if inline else msg.data_descriptor.length  # type: ignore[union-attr]
    if length != block_size:
        return PARTIAL_BLOCK
    if not any(msg.flags & ~v.flags_free == v.flags for v in cands):
        return OTHER_FLAGS
    if msg.status:
        return STATUS
    if msg.generation:  # the fast paths take Generation 0 only (docs/chains.md)
        return GENERATION
    return None


def _left_out_reason(opcode: int, inline: bool, left_out: Mapping[str, Sequence[str]]
                     ) -> str:
    """Why the plan left the request's variants out: :data:`TORN_READ` if that is the
    verifier's finding for one of them, :data:`KEPT` if the configuration keeps it on the
    CPU, else :data:`NOT_OFFLOADED`."""
    for name, reasons in left_out.items():
        v = VARIANTS.get(name)
        if v is None or v.opcode != opcode or v.inline != inline:
            continue
        if any(r.startswith("[torn-read]") for r in reasons):
            return TORN_READ
        if KEPT_ON_CPU in reasons:
            return KEPT
    return NOT_OFFLOADED


__all__ = ["CHAIN_TESTS", "GENERATION", "KEPT", "MALFORMED", "NOT_OFFLOADED", "OTHER_FLAGS",
           "PARTIAL_BLOCK", "SLOT_NOT_READY", "STATUS", "TORN_READ", "static_miss"]
