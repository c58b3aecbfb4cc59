"""The reference model's ring returns (draft, "Block Free" 3-4, "Free-Block Ring"): a
block back to the ring it was allocated from (cleared first if it may go to another trust
domain, T7; its slot write deferred while the slot is unconsumed), consumed slots letting
deferred frees complete, and the returns that wait for ``quiesced`` (free_quiesce,
decision C13; ``tail_via_nic``, decision C20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbtpsim.refmodel import ring as R
from kbtpsim.wire import Status


class ModelReturns:
    """Mixed into :class:`~kbtpsim.refmodel.model.RefModel`: blocks going back to their
    rings."""

    pool: dict[int, bytes]
    rings: list[dict[str, Any]]
    ring_of_block: dict[int, dict[str, Any]]
    sess: dict[str, dict[str, Any]]
    conns: dict[int, dict[str, Any]]
    tail_via_nic: bool
    quiescing: dict[int, dict[str, Any]]

    if TYPE_CHECKING:
        def entry(self, h: int) -> list[int]: ...
        def _settle(self, now: int, out: list[Any]) -> None: ...
        def _complete(self, cid: int, s: dict[str, Any] | None, msg: Any, status: Status,
                      e: list[int] | None = None, op: str | None = None,
                      out: list[Any] | None = None) -> None: ...

    def _consume(self, r: dict[str, Any], i: int, out: list[Any]) -> None:
        for p in R.consume(r, i):
            self._freed(p, out)

    def _to_ring(self, s: dict[str, Any], bo: int, p: dict[str, Any] | None,
                 out: list[Any], park: bool = True) -> bool:
        """Return a block to the ring it was allocated from (draft, "Block Free" 3),
        cleared first if it may next go to another trust domain (T7). True if deferred.
        With ``tail_via_nic`` a return to the shared ring waits for ``quiesced`` (whose
        own return has ``park`` False)."""
        r = self.ring_of_block[bo]
        if park and self.tail_via_nic and r is self.rings[0]:
            self.quiescing[bo] = p if p is not None else {"kind": "free", "conn": None,
                                                          "s": s, "msg": None}
            s["freeing"] += 1
            return True
        if r is self.rings[0] and any(o["domain"] != s["domain"] for o in self.sess.values()
                                      if o["ring"] is r):
            self.pool.pop(bo, None)  # "clears its contents before returning it"
        p = p if p is not None else {"kind": "free", "conn": None, "s": s, "msg": None}
        deferred = R.free(r, bo, p)
        if (deferred and p["msg"] is not None) or (deferred and p.get("release")):
            s["freeing"] += 1
        return deferred

    def _freed(self, p: dict[str, Any], out: list[Any]) -> None:
        """A deferred free's slot write is done: it completes and releases its unit."""
        s = p["s"]
        if p["msg"] is not None or p.get("release"):
            s["freeing"] -= 1
        if p["msg"] is not None and p["conn"] is not None:
            self.conns[p["conn"]]["wait"] = None
            msg = p["msg"]
            # the entry as the FREE left it (T3); nothing else changes the handle meanwhile
            self._complete(p["conn"], s, msg, Status.OK, self.entry(msg.handle), out=out)

    def quiesced(self, bo: int, now: int) -> list[Any]:
        """free_quiesce (C13): nothing reads block ``bo`` under its old entry any more:
        return it to the ring (draft, "Block Free" 3) and complete the FREE (4)."""
        p = self.quiescing.pop(bo)
        s = p["s"]
        s["freeing"] -= 1
        out: list[Any] = []
        if not self._to_ring(s, bo, p, out, park=False) and p["msg"] is not None \
                and p["conn"] is not None:
            self.conns[p["conn"]]["wait"] = None
            self._complete(p["conn"], s, p["msg"], Status.OK, self.entry(p["msg"].handle),
                           out=out)
        self._settle(now, out)
        return out
