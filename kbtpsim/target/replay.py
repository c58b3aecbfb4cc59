"""``kbtpsim replay SCRIPT.yaml``: run a scripted sequence against the software target.

The runner plays every initiator: it builds the requests, carries out the target's
effects (answers RDMA Reads of non-inline stores from the step's data, collects RDMA
Writes of loads) and prints one JSON line per completion (README, "kbtpsim replay").
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbtpsim.target.config import PS_PER_MS, Binding, CounterMode, InitiatorConfig, TargetConfig
from kbtpsim.target.direct import RemoteAccessError
from kbtpsim.target.effects import (
    Effect,
    InvalidateStag,
    ReadInitiator,
    SendMessage,
    WriteInitiator,
    WriteRecord,
)
from kbtpsim.target.processor import Target
from kbtpsim.target.script import Script, ScriptError, Step, load_script
from kbtpsim.usage import fail as _fail
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    Free,
    Goodbye,
    Hello,
    HelloAck,
    Load,
    Message,
    RequestFlag,
    RingSlot,
    Status,
    Store,
)
from kbtpsim.wire.constants import Feature, status_of

_RECORD_STAG = 0xC000_0000  # | request id: the runner's completion record buffers


def _status(value: int) -> str:
    status = status_of(value)
    return status.name if isinstance(status, Status) else str(status)


class _Runner:
    """Plays the initiators of one script against one Target."""

    def __init__(self, script: Script) -> None:
        self.script = script
        spec = script.target
        inits = tuple(
            InitiatorConfig(name, ini.id_bytes(name), ini.quota, ini.handle_base,
                            ini.handle_count, ini.feature_bits, ini.trust_domain)
            for name, ini in script.initiators.items()
        )
        try:
            config = TargetConfig(
                blocks=spec.blocks, block_size=spec.block_size, initiators=inits,
                ring_slots=spec.ring_slots, first_block=spec.first_block,
                max_inline=spec.max_inline, request_credits=spec.request_credits,
                ticket_timeout_ms=spec.ticket_timeout_ms, retention_ms=spec.retention_ms,
                counter_mode=CounterMode(spec.counter_mode), binding=Binding(spec.binding),
                addr_le=spec.addr_le,
            )
        except ValueError as exc:
            raise ScriptError(f"target: {exc}") from None
        self.target = Target(config)
        self.now = 0
        self.lines: list[dict[str, Any]] = []
        self._conn_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self.conn: dict[str, int | None] = dict.fromkeys(script.initiators)
        self.acks: dict[str, HelloAck] = {}
        self._owner: dict[int, str] = {}  # connection -> initiator name
        self._requests: dict[tuple[int, int], tuple[int | None, str]] = {}  # -> (step, op)
        self._read_data: dict[tuple[int, int], bytes] = {}  # (conn, stag) -> data
        self._written: dict[tuple[int, int], bytes] = {}  # (conn, stag) -> loaded data
        self._tickets: dict[str, list[tuple[int, int, int]]] = {}  # ticket, block, length

    # --- effects ----------------------------------------------------------------------

    def _run_effects(self, effects: list[Effect]) -> None:
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, ReadInitiator):
                data = self._read_data.pop((effect.connection_id, effect.stag))
                queue[:0] = self.target.complete_read(effect.token, data, self.now)
            elif isinstance(effect, WriteInitiator):
                self._written[(effect.connection_id, effect.stag)] = effect.data
            elif isinstance(effect, SendMessage):
                self._message(effect)
            elif isinstance(effect, WriteRecord):
                rec = effect.record
                self._line(effect.connection_id, rec.request_id, rec.status, rec.generation,
                           rec.data_length, rec.block_offset, None, record=True)
            elif isinstance(effect, InvalidateStag):
                self.lines.append({
                    "step": self._step, "initiator": self._owner.get(effect.connection_id),
                    "op": "INVALIDATE_STAG", "stag": effect.stag, "reason": effect.reason,
                })

    def _message(self, effect: SendMessage) -> None:
        msg = effect.message
        if isinstance(msg, HelloAck):
            name = self._owner.get(effect.connection_id)
            line: dict[str, Any] = {
                "step": self._step, "initiator": name, "op": "HELLO",
                "status": _status(msg.status), "generation": 0, "data_length": 0,
                "block_offset": 0,
            }
            if msg.status == 0:
                line.update(features=[f.name for f in Feature if f in msg.features],
                            quota=msg.allocation_quota, handle_base=msg.handle_base,
                            handle_count=msg.handle_count)
            self.lines.append(line)
            return
        assert isinstance(msg, Completion)
        self._line(effect.connection_id, msg.request_id, msg.status, msg.generation,
                   msg.data_length, msg.block_offset, msg.handle,
                   invalidated=effect.invalidate_stag)

    def _line(self, conn: int, request_id: int, status: int, generation: int,
              data_length: int, block_offset: int, handle: int | None,
              record: bool = False, invalidated: int | None = None) -> None:
        step, op = self._requests.pop((conn, request_id), (self._step, self._op))
        line: dict[str, Any] = {
            "step": step, "initiator": self._owner.get(conn), "op": op,
            "status": _status(status), "generation": generation, "data_length": data_length,
            "block_offset": block_offset,
        }
        if handle is not None:
            line["handle"] = handle
        line["request_id"] = request_id
        if op == "LOAD":
            data = self._written.pop((conn, request_id & 0xFFFF_FFFF), b"")
            if status == 0:
                line["data_hex"] = data.hex()
        if record:
            line["record"] = True
        if invalidated is not None:
            line["invalidated_stag"] = invalidated
        if step != self._step:
            line["at_step"] = self._step  # completed later (deferred, queued, held)
        self.lines.append(line)

    # --- steps ------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        self._step: int | None = None
        self._op = "UNKNOWN"
        for name, ini in self.script.initiators.items():
            if ini.connect:
                self._hello(name)
        for index, step in enumerate(self.script.steps):
            self._step = index
            self._op = step.op or "UNKNOWN"
            try:
                self._do(step)
            except ScriptError as exc:
                raise ScriptError(f"steps[{index}]: {exc}") from None
        return self.lines

    def _do(self, step: Step) -> None:
        """One step: the dispatch is shared; the hooks below carry it out (a runner on
        another target, such as the chain replay, overrides the hooks only)."""
        self._sync_clock()
        if step.advance_ms is not None:
            self._advance(step.advance_ms * PS_PER_MS)
            return
        name = step.initiator
        assert name is not None and step.op is not None
        if step.op == "HELLO":
            self._hello(name)
            return
        conn = self.conn[name]
        if conn is None:
            raise ScriptError(f"initiator {name!r} is not connected (add a HELLO step)")
        if step.op == "DISCONNECT":
            self._disconnect(name, conn)
        elif step.op == "READ_SLOT":
            try:
                self._read_slot(conn)
            except ValueError:
                raise ScriptError(f"{name!r} has no allocation held by TAKE_TICKET") from None
        elif step.op == "DIRECT_ALLOC":
            self._direct_alloc_step(name, conn, step)
        elif step.op == "RAW":
            payload = step.payload or b""
            if len(payload) >= 12:
                rid = int.from_bytes(payload[4:12], "big")
                self._requests[(conn, rid)] = (self._step, "RAW")
            self._send_raw(conn, payload)
        else:
            msg = self._build(name, conn, step)
            if isinstance(msg, Goodbye):
                self._send_goodbye(conn, msg)
                self._disconnect(name, conn)
                return
            self._send_request(conn, step, msg)

    # --- hooks: how a step reaches the software target ---------------------------------

    def _sync_clock(self) -> None:
        """Bring ``self.now`` up to date (the software target's clock only moves by steps)."""

    def _advance(self, ps: int) -> None:
        self.now += ps
        self._run_effects(self.target.advance(self.now))

    def _read_slot(self, conn: int) -> None:
        """The held allocation reads its slot; ValueError if none is held."""
        self._run_effects(self.target.read_slot(conn, self.now))

    def _direct_alloc_step(self, name: str, conn: int, step: Step) -> None:
        self._direct_alloc(name, conn, step)

    def _send_raw(self, conn: int, payload: bytes) -> None:
        self._run_effects(self.target.handle(conn, payload, self.now))

    def _send_goodbye(self, conn: int, msg: Goodbye) -> None:
        self._run_effects(self.target.handle_message(conn, msg, self.now))

    def _send_request(self, conn: int, step: Step, msg: Message) -> None:
        self._requests[(conn, msg.request_id)] = (self._step, _op_label(step.op))
        self._run_effects(self.target.handle_message(
            conn, msg, self.now, hold_after_ticket=step.op == "TAKE_TICKET"))

    def _hello(self, name: str) -> None:
        ini = self.script.initiators[name]
        conn = next(self._conn_ids)
        self.target.connect(conn, self.now)
        self._owner[conn] = name
        hello = Hello(requested_features=ini.feature_bits, completion_credits=64,
                      initiator_id=ini.id_bytes(name))
        effects = self.target.handle_message(conn, hello, self.now)
        self._run_effects(effects)
        ack = effects[0].message if effects and isinstance(effects[0], SendMessage) else None
        if isinstance(ack, HelloAck) and ack.status == 0:
            self.conn[name] = conn
            self.acks[name] = ack
        else:
            self._run_effects(self.target.disconnect(conn, self.now))  # rejected: hang up

    def _disconnect(self, name: str, conn: int) -> None:
        self._run_effects(self.target.disconnect(conn, self.now))
        self.conn[name] = None

    def _build(self, name: str, conn: int, step: Step) -> Message:
        rid = step.request_id if step.request_id is not None else next(self._request_ids)
        flags = step.flag_bits()
        handle = step.handle or 0
        gen = step.generation
        if step.op == "GOODBYE":
            return Goodbye(flags=flags, request_id=rid)
        cd = None
        if flags & RequestFlag.RECORD:
            cd = CompletionDescriptor(_RECORD_STAG | rid & 0xFFFF, 0)
        if step.op == "LOAD":
            length = step.length if step.length is not None else self.script.target.block_size
            dd = DataDescriptor(rid & 0xFFFF_FFFF, 0, length)
            return Load(flags=flags, request_id=rid, handle=handle, generation=gen,
                        data_descriptor=dd, completion_descriptor=cd)
        if step.op == "FREE":
            return Free(flags=flags, request_id=rid, handle=handle, generation=gen,
                        completion_descriptor=cd)
        if step.op == "BIND":
            return self._bind(name, step, rid, handle)
        data = step.payload
        if data is None:
            data = bytes(step.length or 0)
        cls = Store if step.op == "STORE" else AllocStore
        if flags & RequestFlag.INLINE:
            return cls(flags=flags, request_id=rid, handle=handle, generation=gen,
                       data_descriptor=DataDescriptor(0, 0, len(data)),
                       completion_descriptor=cd, inline_data=data)
        stag = rid & 0xFFFF_FFFF
        self._read_data[(conn, stag)] = data
        length = step.length if step.length is not None else len(data)
        if length != len(data):
            raise ScriptError("length differs from the data's length")
        return cls(flags=flags, request_id=rid, handle=handle, generation=gen,
                   data_descriptor=DataDescriptor(stag, 0, length), completion_descriptor=cd)

    def _bind(self, name: str, step: Step, rid: int, handle: int) -> Bind:
        mine = self._tickets.get(name, [])
        ticket, block, length = mine[-1] if mine else (0, 0, 0)
        if step.ticket is not None:
            ticket = step.ticket
            found = [t for t in mine if t[0] == ticket]
            block, length = (found[-1][1], found[-1][2]) if found else (0, 0)
        elif not mine:
            raise ScriptError("BIND needs 'ticket' (no DIRECT_ALLOC step before it)")
        if step.block_offset is not None:
            block = step.block_offset
        if step.length is not None:
            length = step.length
        return Bind(request_id=rid, handle=handle, generation=step.generation, ticket=ticket,
                    data_length=length, block_offset=block)

    def _direct_alloc(self, name: str, conn: int, step: Step) -> None:
        """FetchAdd on Head, read the slot, RDMA-write the data: the initiator's side."""
        ack = self.acks[name]
        line: dict[str, Any] = {"step": self._step, "initiator": name, "op": "DIRECT_ALLOC"}
        data = step.payload or b""
        try:
            if ack.head is None or ack.ring is None or ack.partition is None:
                raise RemoteAccessError("DIRECT_ALLOC was not granted")
            old = self.target.remote_fetch_add(conn, ack.head.stag, ack.head.tagged_offset,
                                               self.now)
            ticket = old >> 32
            offset = 16 * (ticket % ack.ring.count)
            slot = RingSlot.decode(self.target.remote_read(conn, ack.ring.stag, offset, 16),
                                   addr_le=self.target.connections[conn].addr_le)
            line.update(ticket=ticket, slot_offset=offset)
            if slot.sequence != ticket or slot.consumed:
                line.update(status="SLOT_NOT_READY")
            else:
                self.target.remote_write(conn, ack.partition.stag, slot.block_offset, data)
                self._tickets.setdefault(name, []).append((ticket, slot.block_offset, len(data)))
                line.update(status="OK", block_offset=slot.block_offset, data_length=len(data))
        except RemoteAccessError as exc:
            line.update(status="ACCESS_ERROR", error=str(exc))
        self.lines.append(line)


def _op_label(op: str) -> str:
    return "ALLOC_STORE" if op == "TAKE_TICKET" else op


def run_replay(script: str | Path | dict[str, Any]) -> list[dict[str, Any]]:
    """Run a script (a dict, or the path of a YAML file); the output lines as dicts.

    Raises :class:`ScriptError` naming the step and field for an invalid script.
    """
    return _Runner(load_script(script)).run()


#: ``--target chain``: ``fn(args) -> exit code``, registered by the top-level CLI
#: (kbtpsim/cli.py: ``register_chain_replay(kbtpsim.chains.cli.replay_chain_main)``); this
#: module does not import kbtpsim.chains or kbtpsim.nic
_CHAIN_REPLAY: Callable[[argparse.Namespace], int] | None = None


def register_chain_replay(fn: Callable[[argparse.Namespace], int] | None) -> None:
    """Install the handler of ``kbtpsim replay --target chain`` (None: not available)."""
    global _CHAIN_REPLAY
    _CHAIN_REPLAY = fn


def _cmd_replay(args: argparse.Namespace) -> int:
    if args.target != "software":
        if _CHAIN_REPLAY is not None:
            return _CHAIN_REPLAY(args)
        return _fail("--target chain is not available yet: only the software target "
                     "can replay scripts for now")
    if args.nic is not None:
        return _fail("--nic applies only to --target chain")
    try:
        lines = run_replay(args.script)
    except ScriptError as exc:
        return _fail(str(exc))
    for line in lines:
        print(json.dumps(line))
    return 0




def add_replay_parser(subparsers: Any) -> None:
    """Register ``replay`` on the ``kbtpsim`` command line (see kbtpsim/cli.py)."""
    p = subparsers.add_parser(
        "replay", help="run a scripted sequence of requests against a target; print JSON lines"
    )
    p.add_argument("script", metavar="SCRIPT", help="replay script (YAML; format in the README)")
    p.add_argument("--target", choices=("software", "chain"), default="software",
                   help="target to replay against (default: software)")
    p.add_argument("--nic", metavar="PROFILE", default=None,
                   help="NIC profile for --target chain")
    p.set_defaults(func=_cmd_replay)
