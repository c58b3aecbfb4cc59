"""``kbtpsim replay SCRIPT --target chain --nic PROFILE``: a replay script through the
offloaded target (:class:`~kbtpsim.chains.server.OffloadedTargetServer`) over the NIC model.

The runner is the software replay's (:mod:`kbtpsim.target.replay`) with the target
replaced by a simulated network: every initiator of the script gets a NIC, and each
connection an RC QP accepted by the server; requests are the same messages (same Request
IDs, flags, handles), sent as RDMA Sends, except that a Data Descriptor naming initiator
memory gets a real memory window (bound to the connection's QP, Tagged Offset 0) instead
of the script's symbolic STag (Request ID), mapped back in the output. After each step
the simulation runs until the step has settled (:data:`SETTLE_PS`); what the initiators
received (COMPLETION, HELLO_ACK; a LOAD's data from the window's buffer) and the
target's own STag invalidations become the same JSON lines, in arrival order.

Differences from the software runner, by design: time passes (each step settles for
:data:`SETTLE_PS`, a DISCONNECT until the target has processed it; ``advance_ms`` runs
the clock, the server's timer fires the
deadlines); DIRECT_ALLOC steps are the runner's one-sided accesses performed on the
server's target directly (as the software runner does), not NIC traffic; TAKE_TICKET
holds the ALLOC_STORE in the CPU path on every profile
(:meth:`OffloadedTargetServer.hold_next_allocation`); RECORD_COMPLETION is not supported.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import simpy

from kbtpsim.chains.server import OffloadedTargetServer
from kbtpsim.nic import Access, Opcode, Sge, Simulation, WcOpcode, WcStatus, WorkRequest
from kbtpsim.nic.profiles import get_profile
from kbtpsim.system.server import ServerConnection
from kbtpsim.target.effects import InvalidateStag, SendMessage
from kbtpsim.target.replay import _op_label, _Runner
from kbtpsim.target.script import ScriptError, Step, load_script
from kbtpsim.usage import fail as _fail
from kbtpsim.wire import (
    AllocStore,
    Completion,
    DataDescriptor,
    Goodbye,
    Hello,
    HelloAck,
    Load,
    Message,
    RequestFlag,
    Store,
    decode,
    encode,
)
from kbtpsim.wire.constants import Feature

#: simulated time each step is given to settle (every profile's slowest request is < 30 us)
SETTLE_PS = 200_000_000
RECV_SIZE = 512
ARENA = 64 << 20


class _Peer:
    """One script initiator's host: a NIC, a buffer arena, one QP per connection."""

    def __init__(self, runner: _ChainRunner, name: str) -> None:
        sim = runner.sim
        self.nic = sim.add_nic(f"ini-{name}", runner.profile)
        self.cq = self.nic.create_cq(1 << 14)
        self.arena = self.nic.host.alloc(ARENA, 4096)
        self.mr = self.nic.register_mr(self.arena, ARENA, Access.LOCAL_WRITE
                                       | Access.REMOTE_WRITE | Access.REMOTE_READ
                                       | Access.MW_BIND)
        self.next = self.arena
        runner.sim.env.process(self._poll(runner))

    def alloc(self, n: int) -> int:
        at = self.next
        self.next += -(-max(n, 1) // 64) * 64
        if self.next > self.arena + ARENA:
            raise ScriptError("the chain replay ran out of initiator buffer space")
        return at

    def _poll(self, runner: _ChainRunner) -> Generator[simpy.Event, Any, None]:
        while True:
            for c in (yield from self.cq.wait(1)):
                if c.opcode is not WcOpcode.RECV or c.status is not WcStatus.SUCCESS:
                    continue
                conn, addr = runner.recv_bufs.pop(c.wr_id)
                raw = self.nic.host.memory.read(addr, c.byte_len)
                runner.events.append((c.time, len(runner.events), "recv", conn, raw,
                                      c.invalidated_stag))
                qp = runner.qps.get(conn)
                if qp is not None and qp.state.name != "ERROR":
                    runner.post_recv(conn, qp, self)


class _ChainRunner(_Runner):
    """The software runner's script logic, with the target behind the NIC model."""

    def __init__(self, script: Any, profile: str) -> None:
        super().__init__(script)
        self.profile = get_profile(profile)
        self.sim = Simulation(seed=0)
        self.env = self.sim.env
        self.server = OffloadedTargetServer(self.sim, self.target.config, profile=self.profile,
                                            direct=False, addr_le=self.target.config.addr_le)
        self.target = self.server.target  # DIRECT_ALLOC steps, READ_SLOT checks
        self.peers: dict[str, _Peer] = {}
        self.qps: dict[int, Any] = {}
        self.sconns: dict[int, ServerConnection] = {}
        self.recv_bufs: dict[int, tuple[int, int]] = {}
        self._recv_ids = iter(range(1, 1 << 62))
        #: (time, seq, kind, conn, payload, extra): what the step produced, in order
        self.events: list[tuple[Any, ...]] = []
        self._windows: dict[int, int] = {}  # NIC STag -> script STag
        self._loads: dict[tuple[int, int], tuple[int, int]] = {}  # (conn, rid) -> buffer
        server = self.server
        invalidate = server._invalidate

        def capture(eff: InvalidateStag) -> None:
            self.events.append((int(self.env.now), len(self.events), "effect",
                                eff.connection_id, eff, None))
            invalidate(eff)

        server._invalidate = capture  # type: ignore[method-assign]

    # --- network ------------------------------------------------------------------------
    def post_recv(self, conn: int, qp: Any, peer: _Peer) -> None:
        addr = peer.alloc(RECV_SIZE)
        wr_id = next(self._recv_ids)
        self.recv_bufs[wr_id] = (conn, addr)
        qp.post_recv([Sge(addr, RECV_SIZE, peer.mr.lkey)], wr_id)

    def _send(self, conn: int, data: bytes) -> None:
        name = self._owner[conn]
        peer = self.peers[name]
        qp = self.qps[conn]
        at = peer.alloc(len(data))
        peer.nic.host.memory.write(at, data)
        qp.post_send(WorkRequest(Opcode.SEND, (Sge(at, len(data), peer.mr.lkey),)))
        qp.ring_doorbell()

    def _settle(self, ps: int = SETTLE_PS) -> None:
        if ps > 0:
            self.env.run(until=self.env.now + ps)
        self.now = int(self.env.now)
        events, self.events = sorted(self.events), []
        for _t, _n, kind, conn, payload, inval in events:
            if kind == "effect":
                self._run_effects([payload])
                continue
            addr_le = self._addr_le(conn)
            msg = decode(payload, addr_le)
            if isinstance(msg, Completion):
                buf = self._loads.pop((conn, msg.request_id), None)
                if buf is not None and msg.status == 0:
                    name = self._owner[conn]
                    data = self.peers[name].nic.host.memory.read(buf[0], msg.data_length)
                    self._written[(conn, msg.request_id & 0xFFFF_FFFF)] = data
            stag = None if inval is None else self._windows.get(inval, inval)
            self._run_effects([SendMessage(conn, msg, payload, stag)])

    def _addr_le(self, conn: int) -> bool:
        ack = self.acks.get(self._owner.get(conn, ""))
        return bool(ack is not None and ack.features & Feature.ADDR_LE
                    and self.conn.get(self._owner[conn]) == conn)

    def _window(self, conn: int, script_stag: int, addr: int, length: int,
                access: Access) -> int:
        peer = self.peers[self._owner[conn]]
        window = peer.nic.bind_mw(peer.mr, self.qps[conn], addr, max(length, 1), access,
                                  base_to=0)
        self._windows[window.stag] = script_stag
        return window.stag

    # --- steps --------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        self.now = int(self.env.now)
        return super().run()

    def _hello(self, name: str) -> None:
        ini = self.script.initiators[name]
        peer = self.peers.get(name) or self.peers.setdefault(name, _Peer(self, name))
        qp = peer.nic.create_qp(peer.cq, peer.cq, sq_depth=1024, rq_depth=128)
        sconn = self.server.accept(qp, name=name)
        conn = sconn.conn_id
        self.qps[conn] = qp
        self.sconns[conn] = sconn
        self._owner[conn] = name
        for _ in range(64):
            self.post_recv(conn, qp, peer)
        hello = Hello(requested_features=ini.feature_bits, completion_credits=64,
                      initiator_id=ini.id_bytes(name))
        self._send(conn, encode(hello))
        self.env.run(until=self.env.now + SETTLE_PS)
        ack = next((decode(e[4]) for e in self.events
                    if e[2] == "recv" and e[3] == conn and e[4][1:2] == b"\x02"), None)
        if isinstance(ack, HelloAck) and ack.status == 0:
            self.conn[name] = conn
            self.acks[name] = ack
        self._settle(0)
        if not (isinstance(ack, HelloAck) and ack.status == 0):
            self._close(conn)  # rejected: hang up

    def _close(self, conn: int) -> None:
        qp = self.qps.pop(conn, None)
        if qp is not None and qp.state.name != "ERROR":
            qp.to_error()
        sconn = self.sconns[conn]
        self.server.close(sconn)
        self._settle()
        # the target learns of the disconnect once the server has stopped the
        # connection's chains and taken stock of them (decision O5): a flush writes a
        # CQE for every WR posted, which takes longer than a step settles where chains
        # are long (cx5: about 300 us for 25 k WRs), so wait for it (at most 20 steps)
        for _ in range(20):
            if sconn.conn_id not in self.target.connections:
                break
            self._settle()

    def _disconnect(self, name: str, conn: int) -> None:
        self._close(conn)
        self.conn[name] = None

    # --- hooks of the software runner's step dispatch: the same steps over the NICs -------

    def _sync_clock(self) -> None:
        self.now = int(self.env.now)

    def _advance(self, ps: int) -> None:
        self._settle(ps)

    def _read_slot(self, conn: int) -> None:
        self.server.read_slot(self.sconns[conn])
        self._settle()

    def _direct_alloc_step(self, name: str, conn: int, step: Step) -> None:
        self._direct_alloc(name, conn, step)
        self.server._poke_timer()  # the ticket's timeout is a deadline now
        self._settle()

    def _send_raw(self, conn: int, payload: bytes) -> None:
        self._send(conn, payload)
        self._settle()

    def _send_goodbye(self, conn: int, msg: Goodbye) -> None:
        self._send(conn, encode(msg, self._addr_le(conn)))
        self._settle()

    def _send_request(self, conn: int, step: Step, msg: Message) -> None:
        if msg.flags & RequestFlag.RECORD:
            raise ScriptError("RECORD completions are not supported by --target chain")
        msg = self._expose(conn, msg)
        self._requests[(conn, msg.request_id)] = (self._step, _op_label(step.op))
        if step.op == "TAKE_TICKET":
            self.server.hold_next_allocation(self.sconns[conn])
        self._send(conn, encode(msg, self._addr_le(conn)))
        self._settle()

    def _expose(self, conn: int, msg: Message) -> Message:
        """Give a Data Descriptor naming initiator memory a real window (TO 0)."""
        dd = getattr(msg, "data_descriptor", None)
        inline = isinstance(msg, Store | AllocStore) and bool(msg.flags & RequestFlag.INLINE)
        if not isinstance(dd, DataDescriptor) or dd.stag == 0 or inline:
            return msg
        peer = self.peers[self._owner[conn]]
        addr = peer.alloc(dd.length)
        if isinstance(msg, Load):
            self._loads[(conn, msg.request_id)] = (addr, dd.length)
            access = Access.REMOTE_WRITE
        else:
            data = self._read_data.pop((conn, dd.stag), b"")
            peer.nic.host.memory.write(addr, data)
            access = Access.REMOTE_READ
        stag = self._window(conn, dd.stag, addr, dd.length, access)
        return replace(msg, data_descriptor=DataDescriptor(stag, 0, dd.length))  # type: ignore


def run_chain_replay(script: str | Path | dict[str, Any], nic_profile: str
                     ) -> list[dict[str, Any]]:
    """Run a replay script through the offloaded target on ``nic_profile``; the JSON lines
    as dicts (the software replay's format). Raises :class:`ScriptError` for an invalid
    script and ValueError for an unknown profile."""
    get_profile(nic_profile)
    return _ChainRunner(load_script(script), nic_profile).run()


def replay_chain_main(args: argparse.Namespace) -> int:
    """``kbtpsim replay SCRIPT --target chain --nic PROFILE`` (``args.script``,
    ``args.nic``): print the lines; 2 with a one-line error for a bad script or profile."""
    if not args.nic:
        return _fail("--target chain needs --nic PROFILE")
    try:
        get_profile(args.nic)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        lines = run_chain_replay(args.script, args.nic)
    except ScriptError as exc:
        return _fail(str(exc))
    for line in lines:
        print(json.dumps(line))
    return 0




__all__ = ["SETTLE_PS", "replay_chain_main", "run_chain_replay"]
