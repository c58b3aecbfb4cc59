"""Direct modes of the software target server (mixed into
:class:`~kbtpsim.system.server.SoftwareTargetServer`): the target's table, pool, ring
slots and Heads registered as parent regions of the NIC, the per-connection memory
windows a HELLO_ACK's direct-mode descriptors name (their real STags), their revocation,
and the bookkeeping of DIRECT_ALLOC tickets taken by initiators' FetchAdds on a Head
(draft, "Direct Modes")."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.nic import Access, MemoryRegion, Nic
from kbtpsim.system.cpu import TargetCpu
from kbtpsim.target import InvalidateStag, SendMessage, Target, TargetConfig
from kbtpsim.target.layout import TargetLayout
from kbtpsim.target.ring import FreeRing
from kbtpsim.target.session import InitiatorState
from kbtpsim.wire import DirectDescriptor, Feature, HelloAck, encode

if TYPE_CHECKING:
    from kbtpsim.system.server import ServerConnection

Gen = Generator[simpy.Event, Any, Any]


class DirectWindows:
    """Direct-mode regions, windows and Head tickets (module docstring)."""

    env: simpy.Environment
    config: TargetConfig
    nic: Nic
    cpu: TargetCpu
    target: Target
    layout: TargetLayout | None
    log: list[tuple[Any, ...]]
    connections: dict[int, ServerConnection]
    mrs: dict[str, MemoryRegion]
    _stags: dict[int, int]
    _direct: dict[int, tuple[str, int, int]]
    _direct_rings: dict[str, tuple[InitiatorState, FreeRing]]
    _heads: dict[str, int]

    if TYPE_CHECKING:
        def _poke_timer(self) -> None: ...
        def run_on_cpu(self, account: str, work: Any, cost_ps: int | None = None) -> Gen: ...

    def _register_direct(self) -> None:
        """Register the target's structures as parent regions (local write and MW_BIND
        only: initiators reach them through per-connection windows, see
        :meth:`_translate_send`), and map the target's STags onto them."""
        lay, cfg, target = self.layout, self.config, self.target
        assert lay is not None
        parent = Access.LOCAL_WRITE | Access.MW_BIND
        nic = self.nic
        if lay.table_size:
            self.mrs["table"] = nic.register_mr(lay.table_addr, lay.table_size, parent)
        start = cfg.first_block * cfg.block_size
        self.mrs["pool"] = nic.register_mr(lay.block_addr(start), cfg.blocks * cfg.block_size,
                                           parent)
        for sess in target.initiators.values():
            direct = sess.direct
            if direct is None:
                continue
            where = lay.rings[target.rings.index(direct.ring)]
            slots = f"{where.name}.slots"
            head = f"{where.name}.head"
            self.mrs[slots] = nic.register_mr(where.slots_addr, where.slots_size, parent)
            self.mrs[head] = nic.register_mr(where.head_addr, 8, parent)
            self._direct[direct.ring_stag] = (slots, where.slots_addr, where.slots_size)
            self._direct[direct.head_stag] = (head, where.head_addr, 8)
            self._direct_rings[sess.name] = (sess, direct.ring)
            self._heads[sess.name] = direct.ring.head_ticket
            self.env.process(self._watch_head(where.head_addr))

    def nic_stag(self, target_stag: int) -> int:
        """The NIC STag that implements one of the target's own STags."""
        return self._stags.get(target_stag, target_stag)

    def _observe_heads(self, now: int) -> int:
        """Tell the target of DIRECT_ALLOC tickets that initiators' FetchAdds took on their
        Head (visible in memory, unknown to it) since the last call:
        ``Target.ticket_taken`` starts their Ticket Timeout at ``now``. Returns how many."""
        taken = 0
        for name, (sess, ring) in self._direct_rings.items():
            head = ring.head_ticket
            seen = self._heads[name]
            for k in range((head - seen) & 0xFFFF_FFFF):
                self.log.append(("fetch_add", sess.connection_id, now))
                self.target.ticket_taken(name, (seen + k) & 0xFFFF_FFFF, now)
                taken += 1
            self._heads[name] = head
        return taken

    def observe_heads(self) -> int:
        """Bring the target's ticket bookkeeping up to date with the DIRECT_ALLOC Heads in
        memory now (:meth:`_observe_heads`); the number of new tickets. The server does
        this whenever a NIC write to a Head becomes visible and before every target call;
        call it before inspecting ``target`` if the simulation stopped at the very instant
        of a Head write (before the server's watch ran)."""
        taken = self._observe_heads(int(self.env.now)) if self._heads else 0
        if taken:
            self._poke_timer()
        return taken

    def _translate_send(self, conn: ServerConnection, eff: SendMessage) -> SendMessage:
        """A HELLO_ACK with direct-mode descriptors gets the NIC's real STags (and, for
        DIRECT_ALLOC, a Partition window bound to this connection's QP)."""
        msg = eff.message
        if not isinstance(msg, HelloAck) or not msg.features & (
                Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC):
            return eff
        self._revoke(conn)  # a previous session's windows on this connection
        lay, cfg = self.layout, self.config
        assert lay is not None
        bs = cfg.block_size
        changes: dict[str, DirectDescriptor] = {}
        if msg.table is not None and msg.pool is not None:
            changes["table"] = self._window(
                conn, "table", msg.table, "table", lay.table_addr, lay.table_size,
                Access.REMOTE_READ)
            changes["pool"] = self._window(
                conn, "pool", msg.pool, "pool", lay.block_addr(msg.pool.tagged_offset),
                msg.pool.count * bs, Access.REMOTE_READ)
        if msg.partition is not None and msg.ring is not None and msg.head is not None:
            changes["partition"] = self._window(
                conn, "partition", msg.partition, "pool",
                lay.block_addr(msg.partition.tagged_offset), msg.partition.count * bs,
                Access.REMOTE_WRITE)
            for name in ("ring", "head"):
                desc = getattr(msg, name)
                parent, addr, length = self._direct[desc.stag]
                right = Access.REMOTE_READ if name == "ring" else Access.REMOTE_ATOMIC
                changes[name] = self._window(conn, name, desc, parent, addr, length, right)
        ack = replace(msg, **changes)  # type: ignore[arg-type]
        return replace(eff, message=ack, data=encode(ack))

    def _window(self, conn: ServerConnection, name: str, desc: DirectDescriptor,
                parent: str, addr: int, length: int, access: Access) -> DirectDescriptor:
        """Bind a window for one direct-mode descriptor to the connection's QP, with the
        Tagged Offsets the target advertises; the descriptor with its real STag."""
        window = self.nic.bind_mw(self.mrs[parent], conn.qp, addr, length, access,
                                  base_to=desc.tagged_offset)
        conn.windows[name] = window
        self._stags[desc.stag] = window.stag
        return replace(desc, stag=window.stag)

    def _revoke(self, conn: ServerConnection, names: Iterable[str] | None = None) -> None:
        """Invalidate the connection's direct-mode windows (all, or ``names``)."""
        for name in list(conn.windows if names is None else names):
            window = conn.windows.pop(name, None)
            if window is not None:
                self.nic.invalidate(window.stag)

    def _invalidate(self, eff: InvalidateStag) -> None:
        """The target revokes its Partition STag (ticket timeout, session end): the
        connection loses its DIRECT_ALLOC windows (Partition, Ring, Head), as the target
        refuses every one-sided DIRECT_ALLOC access for the rest of the session."""
        conn = self.connections.get(eff.connection_id)
        if conn is not None and conn.windows.get("partition") is not None and \
                conn.windows["partition"].stag == self.nic_stag(eff.stag):
            self._revoke(conn, ("partition", "ring", "head"))
        else:
            self.nic.invalidate(self.nic_stag(eff.stag))

    def _watch_head(self, head_addr: int) -> Gen:
        """An initiator's FetchAdd on a Head counter (a NIC write to it) is recorded by
        the target's bookkeeping the moment the write is visible (:meth:`observe_heads`:
        ``Target.ticket_taken`` starts the ticket's timeout), so the target's state never
        lags the Head in memory (docs/decisions.md, S1); the polling core that notices
        the write is charged ``cpu_poll_ns`` + ``DIRECT`` afterwards."""
        cost = self.cpu.poll_ps + self.cpu.costs.op_ps("DIRECT")
        while True:
            yield self.nic.watch(head_addr)
            self.observe_heads()
            self.env.process(self.run_on_cpu("DIRECT", lambda now: [], cost))


__all__ = ["DirectWindows"]
