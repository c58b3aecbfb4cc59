"""A connection failure on the offloaded target (decision O5): the CPU stops the
connection's chains, waits until nothing of them runs, and salvages what they did
(:class:`ChainRecovery`, mixed into
:class:`~kbtpsim.chains.server.OffloadedTargetServer`) before the target disconnects."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.chains.lowering import RSTG
from kbtpsim.chains.post import Finished
from kbtpsim.system.server import ServerConnection, SoftwareTargetServer, op_name
from kbtpsim.target.effects import Effect, ReadInitiator
from kbtpsim.wire import AllocStore, DecodeError, RequestFlag, Store, decode

if TYPE_CHECKING:
    from kbtpsim.chains.server import _ChainConn

Gen = Generator[simpy.Event, Any, Any]

#: fallbacks.reasons of allocations a connection failure cut while their chain ran
CUT_BY_FAILURE = ("the connection failed while its chain ran (the CPU undid the chain's "
                  "writes and finished or returned the allocation, decision O5)")
#: how long a failed connection's work requests get to drain once its QPs are stopped
QUIESCE_PS = 1_000_000_000  # 1 ms



if TYPE_CHECKING:
    _Base = SoftwareTargetServer
else:
    _Base = object


class ChainRecovery(_Base):
    """After-failure handling of the offloaded target (module docstring)."""

    _chain_conns: dict[int, _ChainConn]
    salvaged: dict[str, int]
    cut_loads: set[int]
    fallback_reasons: dict[str, dict[str, int]]

    if TYPE_CHECKING:
        def _kick(self) -> None: ...
        def _count(self, op: str, where: str) -> None: ...
        def _serve_nic(self, cc: _ChainConn, f: Finished) -> Gen: ...
        def _log_allocation(self, cc: _ChainConn, request: bytes, ticket: int,
                            at: int) -> None: ...
        def _freed_block(self, cc: _ChainConn, request: bytes) -> int: ...
        def _finish_free(self, cc: _ChainConn, f: Finished, now: int) -> list[Any]: ...

    def after_close(self, conn: ServerConnection) -> None:
        """The connection failed or was torn down (its QP is in the error state): its CPU
        process lets nothing of its chains run on, salvages what they did
        (:meth:`_recover`) and only then tells the target (``Target.disconnect``), as the
        base server does (decision O5)."""
        if conn.conn_id not in self._chain_conns:
            super().after_close(conn)
            return
        self._kick()

    def _recover(self, cc: _ChainConn) -> Gen:
        """After a connection failure (decision O5): stop the chain QPs, wait until no work
        request of the connection is in flight, salvage what the chains did
        (:meth:`_salvage`), then disconnect in the target. A real server does the same
        after the QP's asynchronous error event: ``ibv_modify_qp`` to ERR, drain the CQs,
        read back its scratch memory."""
        env, cpu, cs = self.env, self.cpu, cc.chains
        self._note_cut_loads(cc)
        if not cs.software:
            with cpu.request() as core:  # the server thread runs the verbs: it waits
                yield core  # while other work holds every core (decision C24)
                cs.stop(int(env.now))
            deadline = env.now + QUIESCE_PS
            while True:
                cc.orphans.extend(cs.poll(int(env.now)))
                if cs.drained() or env.now >= deadline:
                    break
                yield env.timeout(max(100_000, cpu.poll_ps))
            cc.orphans.extend(cs.poll(int(env.now)))
            cs.take_cpu_cqes()  # the CPU's own slot WRs: flushed with the QP
        if cc.orphans:
            with cpu.request() as core:
                yield core
                for f in cc.orphans:
                    yield from self._salvage(cc, f)
                cc.orphans.clear()
        yield from self.run_on_cpu(
            "DISCONNECT", lambda now: self._call(("disconnect", cc.conn_id), now))

    def _note_cut_loads(self, cc: _ChainConn) -> None:
        """Decision C20: the handles of the LOADs the failure cuts (their credits had
        arrived and not ended). Such a LOAD's reader count may stay raised: its - 1 is
        flushed with the connection (and a FetchAdd whose QP fails before its response
        arrives may or may not have run). That is safe (the handle's FREEs then go to the
        CPU, which quiesces them, C13); ``cut_loads`` names them for the oracle's
        reader-count check."""
        cs = cc.chains
        order = "little" if cs.chain.addr_le else "big"
        for cr in cs.live.values():
            request = cs.request_bytes(cr) if cr.recv_len is not None else b""
            if len(request) >= 20 and request[1] == 0x10:  # LOAD
                self.cut_loads.add(int.from_bytes(request[12:20], order))

    def _salvage(self, cc: _ChainConn, f: Finished) -> Gen:
        """A credit of a failed connection that the CPU had not served (decision O5).

        * Committed before the failure: noted as any NIC-served request (the target's
          bookkeeping learns of it, as in :meth:`_serve_nic`).
        * Otherwise the chain may have run part of its writes, out of order (the flushed
          connection QP's CQEs satisfy its WAIT counts early). The CPU writes back the
          table entry and the ring slot as the chain read them (``ChainServer.images``),
          then:
          - an ALLOC_STORE holding a Ticket (its FetchAdd on Head ran) is finished in
            software with that Ticket (``finish_allocation``); the disconnect keeps it
            (inline data) or returns its block to the ring (a Read source, whose data
            cannot come any more), as the software target would;
          - an inline STORE is served again in software (its data is in the request),
            and so is a Read-source STORE whose data Read completed (its data is in the
            block: :meth:`_store_data_already_read`);
          - anything else did nothing outside the chain's scratch memory and is
            forgotten, as a request lost with its connection (a Read-source STORE whose
            one-packet data Read did not complete: nothing of it landed; rule
            ``torn-read`` keeps longer Reads off the chains).

        (Served before the failure implies its data Read, if any, succeeded: a failed
        Read fails the connection QP at its CQE, so the later commit and Send come after
        the failure.)"""
        if f.served is not None:
            self._tally("served before the failure")
            yield from self._serve_nic(cc, f)
            return
        try:
            msg = decode(f.request, self.config.addr_le)
        except DecodeError:  # nothing (whole or well-formed) arrived: no chain test passed
            return
        assert self.layout is not None and cc.conn is not None
        mem = self.nic.host.memory
        entry_img, slot_img = cc.chains.images(f.credit)
        op = op_name(f.request)
        from kbtpsim.chains.server import CHAIN  # (imports this module)

        yield from self.cpu.spend(CHAIN, self.cpu.poll_ps)
        if f.unbound is not None:  # a FREE the chain unbound (decision C20)
            yield from self._salvage_free(cc, f)
            return
        if entry_img[:8] != b"\xff" * 8 and isinstance(msg, Store | AllocStore):
            entry_addr = self.layout.entry_addr(msg.handle)
            if mem.read(entry_addr, 16) != entry_img:
                yield from self.cpu.spend(CHAIN, self.cpu.post_ps)
                mem.write(entry_addr, entry_img)
        if f.ticket is not None:
            ring = self.target.shared_ring
            slot_addr = self.layout.rings[0].slot_addr(ring.slot_offset_of(f.ticket))
            consumed = slot_img[:4] + bytes(4) + b"\xff" * 8
            if int.from_bytes(slot_img[:4], "big") == f.ticket & 0xFFFFFFFF and \
                    slot_img[8:] != b"\xff" * 8 and mem.read(slot_addr, 16) == consumed:
                mem.write(slot_addr, slot_img)  # Block Offset back: the slot unconsumed
            self._salvaged("ALLOC_STORE", "allocation")
            now = int(self.env.now)
            self._log_allocation(cc, f.request, f.ticket, now if f.nic_time is None
                                 else f.nic_time)
            effects = self.target.finish_allocation(cc.conn_id, f.request, f.ticket, now,
                                                    handover=False)
            self.note_reads(effects)
            effects = self._data_already_read(f, effects, now, self._staged(cc, f))
            self._kick()
            yield from self.carry_out(effects, "ALLOC_STORE")
        elif isinstance(msg, Store) and msg.flags & RequestFlag.INLINE:
            self._salvaged(op, "inline store")
            effects = self.on_request(cc.conn, f.request, int(self.env.now))
            yield from self.carry_out(effects, op)
        elif isinstance(msg, Store) and f.data_read is not None:
            self._salvaged(op, "Read-source store, data read")
            now = int(self.env.now)
            effects = self.on_request(cc.conn, f.request, now)
            yield from self.carry_out(self._store_data_already_read(
                msg, effects, now, self._staged(cc, f)), op)
        elif isinstance(msg, Store):
            self._tally("Read-source store")
        else:
            self._tally("forgotten")

    def _salvage_free(self, cc: _ChainConn, f: Finished) -> Gen:
        """A FREE whose chain unbound the entry before the failure (decision C20): it
        took effect there (other connections may have seen the entry unbound), so the
        CPU finishes it, as a hand-over: its block waits for the readers (no Tail ticket),
        or returns with the chain's ticket; if the chain wrote that ticket's slot already
        (Block Offset, then Sequence), only the bookkeeping is left (its COMPLETION, if
        sent, was lost with the connection)."""
        assert self.layout is not None and f.unbound is not None
        now = int(self.env.now)
        self._salvaged("FREE", "free")
        block = self._freed_block(cc, f.request)
        if f.ticket is None:
            effects = self._finish_free(cc, f, now)
        else:
            ring = self.target.shared_ring
            mem = self.nic.host.memory
            slot_addr = self.layout.rings[0].slot_addr(ring.slot_offset_of(f.ticket))
            slot = mem.read(slot_addr, 16)
            order = "little" if self.config.addr_le else "big"
            returned = int.from_bytes(slot[8:], order) == block
            if returned and int.from_bytes(slot[:4], "big") != f.ticket & 0xFFFFFFFF:
                # the chain wrote the Block Offset, not yet the Sequence (draft, "Free-
                # Block Ring": Block Offset first). It writes only a slot it read
                # consumed, and a block bound to the handle is in no slot: put the
                # consumed marker back, so that the target writes the slot itself.
                # (Left as it was, the slot reads as the old round's, not consumed, and
                # the return, and the allocation of its ticket, would wait for ever.)
                from kbtpsim.chains.server import CHAIN  # (imports this module)

                yield from self.cpu.spend(CHAIN, self.cpu.post_ps)
                mem.write(slot_addr + 8, b"\xff" * 8)
                returned = False
            if returned:  # the chain returned it (Block Offset, then Sequence)
                assert cc.conn is not None and f.ticket_time is not None
                cc.conn.received.append(f.request)
                self.log.append(("handle", cc.conn_id, f.request, f.unbound))
                self.log.append(("quiesced", block, f.ticket_time))
                effects = self.target.note_chain_free(cc.conn_id, f.request, f.ticket, now)
                self._kick()
            else:
                effects = self._finish_free(cc, f, now)
        yield from self.carry_out(effects, "FREE")

    @staticmethod
    def _staged(cc: _ChainConn, f: Finished) -> int | None:
        """Where the credit's chain staged its data Read (decision C24), or None (it
        read straight into the block)."""
        return cc.chains._bufs_of(f.credit).get(RSTG)

    def _data_already_read(self, f: Finished, effects: list[Effect], now: int,
                           staged: int | None = None) -> list[Effect]:
        """A Read-source ALLOC_STORE whose chain's data Read completed before the failure
        has its data at hand: in the block (a chain that reads straight into it) or in
        the credit's staging buffer (``staged``, decision C24: the copy into the block may
        have been cut). The CPU answers its own Read with those octets, as the software
        target would have had the data arrived before the connection closed (the
        allocation completes, and the disconnect keeps it). Otherwise the block holds
        octets the target never wrote when it returns to the ring (decision O5)."""
        if f.data_read is None:
            return effects
        return self._read_from_block(
            effects, lambda e: self.target.read_block(e.token),
            lambda token, data: self.target.complete_read(token, data, now), staged)

    def _store_data_already_read(self, msg: Store, effects: list[Effect], now: int,
                                 staged: int | None = None) -> list[Effect]:
        """A Read-source STORE whose chain's data Read completed before the failure: the
        chain read the data straight into the bound block (or into the credit's staging
        buffer, ``staged``, whence its copy into the block may have been cut: decision
        C24), so the CPU, serving the STORE again, answers its own Read with those
        octets (as the software target would have had the data arrived before the
        connection closed: the STORE takes effect, and its COMPLETION, if the initiator
        got the chain's, agrees). Forgetting it left the block holding octets the target
        never wrote (decision O5)."""
        return self._read_from_block(
            effects, lambda e: self.target.table.get(msg.handle).block_offset,
            lambda token, data: self._call(("read", token, data), now), staged)

    def _read_from_block(self, effects: list[Effect],
                         block_of: Callable[[ReadInitiator], int | None],
                         complete: Callable[[int, bytes], list[Effect]],
                         staged: int | None = None) -> list[Effect]:
        """``effects`` with the CPU's own RDMA Read among them answered by ``complete``
        with the octets already in the block ``block_of`` names, or in the staging
        buffer at ``staged`` (unchanged if there is no such Read, or no block)."""
        for e in effects:
            if isinstance(e, ReadInitiator):
                block = block_of(e)
                if block is None:
                    return effects
                assert self.layout is not None
                at = self.layout.block_addr(block) if staged is None else staged
                data = self.nic.host.memory.read(at, e.length)
                return [x for x in effects if x is not e] + complete(e.token, data)
        return effects

    def _salvaged(self, op: str, kind: str) -> None:
        self._count(op, "cpu")
        by_op = self.fallback_reasons.setdefault(op, {})
        by_op[CUT_BY_FAILURE] = by_op.get(CUT_BY_FAILURE, 0) + 1
        self._tally(kind)

    def _tally(self, kind: str) -> None:
        self.salvaged[kind] = self.salvaged.get(kind, 0) + 1
