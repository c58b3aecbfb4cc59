"""A connection's chains after a connection failure (decision O5), mixed into
:class:`~kbtpsim.chains.post.ChainServer`: stop them (the chain QPs to the error state),
tell when nothing of them writes memory any more, read back what a cut chain read before
it wrote (the before-images a target restores), and report the credits whose chain
never ended."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.chains.wr_build import _Credit
from kbtpsim.nic import Nic, QpState, QueuePair

if TYPE_CHECKING:
    from kbtpsim.chains.post import Finished


class ChainFailure:
    """Stopping, draining and salvaging a connection's chains (module docstring)."""

    nic: Nic
    live: dict[int, _Credit]
    failed_at: int | None
    finished: int
    posted: int
    credits: int
    free_slots: list[int]

    if TYPE_CHECKING:
        def queues(self) -> dict[str, QueuePair]: ...
        def _bufs_of(self, credit: int) -> dict[str, int]: ...
        def _finish(self, cr: _Credit, now: int) -> Finished: ...

    def stop(self, now: int) -> None:
        """The connection failed (at ``now`` at the latest): move the chain's own QPs
        (worker, master, gate) to the error state too, so that nothing of its chains
        starts after this (``ibv_modify_qp(IBV_QPS_ERR)``; their outstanding WRs flush).
        Credits that had not committed before the failure are reported unserved from now
        on (:meth:`poll`). Then wait for :meth:`drained`."""
        if self.failed_at is None or now < self.failed_at:
            self.failed_at = now
        for qp in self.queues().values():
            if qp.state is not QpState.ERROR:
                qp.to_error()

    def drained(self) -> bool:
        """Every work request posted on the connection's QPs has completed (with success
        or flushed) and every memory write the NIC issued for them (a responder's
        placement or atomic result, a Read response) is visible: nothing of the chains
        writes memory any more, and their CQEs have been generated (a completion
        engine can write a CQE after the WR has retired: the ``cqe`` fault) and landed
        where a poll sees them."""
        queues = self.queues().values()
        return all(qp.retired >= qp.post_index for qp in queues) \
            and not any(qp.send_cq.landing() or qp.recv_cq.landing()
                        for qp in queues) and self.responders_idle()

    def responders_idle(self, others: tuple[QueuePair, ...] = ()) -> bool:
        """No packet of the connection's QPs (and ``others``) waits or is being handled,
        and their NIC's memory writes for them have landed (a loopback atomic accepted
        just before the QP failed still writes its result: decision O5)."""
        now = self.nic.env.now
        return all(not qp.rxq and qp.rx_msg is None and qp.dma_until < now
                   for qp in (*self.queues().values(), *others))

    def images(self, credit: int) -> tuple[bytes, bytes]:
        """What the credit's chain read before it wrote anything (octets as in memory):
        the table entry (its ``read_entry``: ``buf:w``, ``buf:bo+4``) and, for an
        allocation, the ring slot (its slot Read: ``buf:seq``, ``buf:bo2+4``; zeros if
        none). A target that must undo a chain cut by a connection failure writes them
        back (decision O5)."""
        bufs = self._bufs_of(credit)
        mem = self.nic.host.memory
        entry = mem.read(bufs["w"], 8) + mem.read(bufs["bo"] + 4, 8)
        slot = (mem.read(bufs["seq"], 8) + mem.read(bufs["bo2"] + 4, 8)
                if "seq" in bufs and "bo2" in bufs else bytes(16))
        return entry, slot

    def unfinished(self, now: int) -> list[Finished]:
        """After :meth:`stop` and :meth:`drained`: the credits whose request arrived but
        that :meth:`poll` has not reported (their chain never ended), reported now, as
        not served, with their Ticket if their FetchAdd ran; credits that received
        nothing are dropped."""
        out = []
        for n in sorted(self.live):
            if n < self.finished:
                continue  # taken early by the CPU
            cr = self.live.pop(n)
            self.free_slots.append(n % self.credits)
            if cr.recv_len is not None:
                out.append(self._finish(cr, now))
        self.finished = max(self.finished, self.posted)
        return out


__all__ = ["ChainFailure"]
