"""One connection of the offloaded target (:class:`_ChainConn`: its
:class:`~kbtpsim.chains.post.ChainServer`, plan and CPU-side state) and its connection QP
as the base server's effect code sees it (:class:`_ConnQp`: the CPU's work requests go
into the held credit's CPU slots)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import simpy

from kbtpsim.chains.plan import ConnectionPlan
from kbtpsim.chains.post import CPU_WR, ChainServer, Finished
from kbtpsim.nic import WorkRequest
from kbtpsim.system.server import ServerConnection


class _ConnQp:
    """The connection QP as the base server's effect code sees it: posting goes into the
    held credit's CPU slots, the doorbell ENABLEs them (an unmanaged QP, without any fast
    path, is used directly)."""

    def __init__(self, cc: _ChainConn) -> None:
        self._cc = cc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cc.chains.conn, name)

    def post_send(self, wr: WorkRequest) -> int:
        cs = self._cc.chains
        wr = replace(wr, wr_id=wr.wr_id | CPU_WR)
        if cs.software:
            return cs.conn.post_send(wr)
        cc = self._cc
        if cc.holding is None:
            raise RuntimeError(f"connection {cc.conn_id}: the CPU posts a work "
                               "request while it holds no credit")
        cc.posted_to = cc.slot_credit()
        return cs.cpu_post(cc.posted_to, wr)

    def ring_doorbell(self) -> None:
        cs = self._cc.chains
        if cs.software:
            cs.conn.ring_doorbell()
        elif self._cc.holding is not None:  # through the last slot written
            cs.cpu_enable(self._cc.posted_to)



@dataclass(eq=False)
class _ChainConn:
    conn_id: int
    chains: ChainServer
    plan: ConnectionPlan
    initiator: str  #: the initiator the plan was made for
    conn: ServerConnection | None = None
    holding: int | None = None  #: credit the CPU serves or holds (gate not released)
    held: list[int] = field(default_factory=list)
    no_arm: set[int] = field(default_factory=set)  #: credits kept without allowance
    wake: simpy.Event | None = None
    #: effect lists being posted on this connection now (by any core): its held credits'
    #: CPU slots are in use, so their gates stay held until this is back to 0
    posting: int = 0
    mmio_charged: int = 0  #: ChainServer.mmio_writes already charged to the CPU
    #: credits whose chain ended but that the CPU had not noted when the connection
    #: failed: salvaged before the target learns of the disconnect (decision O5)
    orphans: list[Finished] = field(default_factory=list)
    #: the last credit ``OffloadedTargetServer._take_early`` (kbtpsim.chains.cpu_loop)
    #: judged servable by a chain (its request does not change while it waits: not
    #: decoded again)
    checked: int = -1
    #: times the connection's CPU process woke (or looped) to poll its chains
    wakeups: int = 0
    #: the credit whose CPU slots the CPU's last work request went into
    posted_to: int = -1

    def slot_credit(self) -> int:
        """The credit whose CPU slots the CPU's next work request goes into: the oldest
        credit it holds, not older than the last one written (the slots run in ring
        order, each credit's after the earlier ones'), with a slot free; else the one
        it serves. Effects of several held credits' requests (behind a FREE that waits,
        say) can come out together: since decision C30 a credit no variant took
        finishes at its receive, so the CPU may serve it while it holds the gates of
        the credits before, and one credit's slots would not hold them all."""
        chains = self.chains
        for credit in sorted({*self.held, self.holding} - {None}):
            assert credit is not None
            if credit >= self.posted_to and chains.cpu_slots_free(credit) > 0:
                return credit
        assert self.holding is not None
        return self.holding
