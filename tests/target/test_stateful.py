"""Random valid and invalid operations by several initiators, with frees, disconnects,
reconnects, held allocations, non-inline stores, direct allocations and timeouts; the
conservation invariant is checked after every step, and every LOAD that succeeds returns
what the last successful store of that handle wrote."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kbtpsim.target import (
    PS_PER_MS,
    ReadInitiator,
    RemoteAccessError,
    SendMessage,
    Target,
    TargetConfig,
    WriteInitiator,
)
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    DataDescriptor,
    Feature,
    Free,
    Goodbye,
    Hello,
    Load,
    RequestFlag,
    RingSlot,
    Status,
    Store,
)

from .harness import iid, ini

BS = 256
INITIATORS = (
    ini("a", 3, 0x100, 8, features=Feature.DIRECT_ALLOC),
    ini("b", 2, 0x200, 8),
    ini("c", 2, 0x300, 8, domain="other"),
)
NAMES = [i.name for i in INITIATORS]
BASE = {i.name: i.handle_base for i in INITIATORS}


class TargetMachine(RuleBasedStateMachine):
    #: extra TargetConfig fields (a subclass runs the same rules in another configuration)
    options: ClassVar[dict[str, object]] = {}

    def __init__(self) -> None:
        super().__init__()
        config: dict[str, object] = {
            "blocks": 8, "block_size": BS, "initiators": INITIATORS, "ring_slots": 8,
            "max_inline": 64, "ticket_timeout_ms": 50, "retention_ms": 100, "first_block": 3,
        }
        self.target = Target(TargetConfig(**{**config, **self.options}))  # type: ignore[arg-type]
        self.now = 0
        self.conn_ids = itertools.count(1)
        self.req_ids = itertools.count(1)
        self.conn: dict[str, int | None] = dict.fromkeys(NAMES)
        self.acks: dict[str, object] = {}
        self.intents: dict[tuple[int, int], tuple[str, int, bytes | None]] = {}
        self.model: dict[int, bytes] = {}  # handle -> data of its last successful store
        self.reads: dict[int, tuple[int, bytes]] = {}  # token -> (conn, data)
        self.read_data: dict[tuple[int, int], bytes] = {}  # (conn, stag) -> data
        self.tickets: list[tuple[str, int, int, bytes]] = []  # initiator, ticket, block, data
        for name in NAMES:
            self._connect(name)

    # --- plumbing -----------------------------------------------------------------

    def _effects(self, effects) -> None:
        for e in effects:
            if isinstance(e, ReadInitiator):
                self.reads[e.token] = (e.connection_id,
                                       self.read_data.pop((e.connection_id, e.stag)))
            elif isinstance(e, SendMessage) and isinstance(e.message, Completion):
                m = e.message
                op, handle, data = self.intents.pop((e.connection_id, m.request_id))
                assert m.handle == handle
                if m.status is not Status.OK:
                    continue
                if op in ("ALLOC_STORE", "STORE", "BIND"):
                    self.model[handle] = data
                elif op == "FREE":
                    self.model.pop(handle, None)
                elif op == "LOAD":
                    assert self._loaded == self.model[handle][: m.data_length]
            elif isinstance(e, WriteInitiator):
                self._loaded = e.data

    def _connect(self, name: str) -> None:
        cid = next(self.conn_ids)
        self.target.connect(cid, self.now)
        (ack,) = self.target.handle_message(
            cid, Hello(requested_features=Feature(0xF), initiator_id=iid(name)), self.now)
        assert ack.message.status is Status.OK, ack
        self.conn[name] = cid
        self.acks[name] = ack.message

    def _send(self, name: str, msg, op: str, data: bytes | None = None, hold=False) -> None:
        cid = self.conn[name]
        self.intents[(cid, msg.request_id)] = (op, msg.handle, data)
        self._loaded = b""
        self._effects(self.target.handle_message(cid, msg, self.now, hold_after_ticket=hold))

    def _forget_conn(self, cid: int) -> None:
        self.intents = {k: v for k, v in self.intents.items() if k[0] != cid}
        self.reads = {t: r for t, r in self.reads.items() if r[0] != cid}

    #: (whose range, index): mostly the sender's own range, sometimes another's or none
    handles = st.tuples(st.sampled_from(["own"] * 6 + ["other", "none"]), st.integers(0, 2))
    gens = st.sampled_from([0] * 8 + [1, 2, 3, 5])

    @staticmethod
    def _handle(who: str, where: str, index: int) -> int:
        if where == "none":
            return 0x999
        owner = who if where == "own" else NAMES[(NAMES.index(who) + 1) % len(NAMES)]
        return BASE[owner] + index

    # --- rules --------------------------------------------------------------------

    @rule(who=st.sampled_from(NAMES), target_h=handles, gen=gens,
          data=st.binary(max_size=80), seal=st.booleans(),
          inline=st.sampled_from([True] * 3 + [False]),
          hold=st.sampled_from([False] * 5 + [True]))
    def alloc_store(self, who, target_h, gen, data, seal, inline, hold) -> None:
        if self.conn[who] is None:
            return
        rid = next(self.req_ids)
        handle = self._handle(who, *target_h)
        flags = (RequestFlag.SEAL if seal else 0) | (RequestFlag.INLINE if inline else 0)
        dd = DataDescriptor(0 if inline else rid, 0, len(data))
        if not inline:
            self.read_data[(self.conn[who], rid)] = data
        self._send(who, AllocStore(flags=flags, request_id=rid, handle=handle, generation=gen,
                                   data_descriptor=dd, inline_data=data if inline else None),
                   "ALLOC_STORE", data, hold=hold)

    @rule(who=st.sampled_from(NAMES), target_h=handles, gen=gens,
          data=st.binary(max_size=80), seal=st.booleans())
    def store(self, who, target_h, gen, data, seal) -> None:
        if self.conn[who] is None:
            return
        flags = RequestFlag.INLINE | (RequestFlag.SEAL if seal else 0)
        self._send(who, Store(flags=flags, request_id=next(self.req_ids),
                              handle=self._handle(who, *target_h), generation=gen,
                              data_descriptor=DataDescriptor(0, 0, len(data)),
                              inline_data=data), "STORE", data)

    @rule(who=st.sampled_from(NAMES), target_h=handles, gen=gens, unsealed=st.booleans(),
          length=st.sampled_from([BS, BS, BS, 8]),
          bad_flag=st.sampled_from([False] * 5 + [True]))
    def load(self, who, target_h, gen, unsealed, length, bad_flag) -> None:
        if self.conn[who] is None:
            return
        flags = (RequestFlag.ALLOW_UNSEALED if unsealed else 0) | (0x400 if bad_flag else 0)
        self._send(who, Load(flags=flags, request_id=next(self.req_ids),
                             handle=self._handle(who, *target_h), generation=gen,
                             data_descriptor=DataDescriptor(1, 0, length)), "LOAD")

    @rule(who=st.sampled_from(NAMES), target_h=handles, gen=gens)
    def free(self, who, target_h, gen) -> None:
        if self.conn[who] is None:
            return
        self._send(who, Free(request_id=next(self.req_ids), handle=self._handle(who, *target_h),
                             generation=gen), "FREE")

    @rule(who=st.sampled_from(NAMES))
    def read_slot(self, who) -> None:
        cid = self.conn[who]
        if cid is None or not any(a.conn_id == cid and a.held for a in self.target._waiters):
            return
        self._effects(self.target.read_slot(cid, self.now))

    @precondition(lambda self: self.reads)
    @rule(pick=st.integers(0, 10))
    def complete_read(self, pick) -> None:
        token = sorted(self.reads)[pick % len(self.reads)]
        _, data = self.reads.pop(token)
        self._effects(self.target.complete_read(token, data, self.now))

    @rule(data=st.binary(min_size=1, max_size=40))
    def direct_allocate(self, data) -> None:
        cid = self.conn["a"]
        if cid is None:
            return
        ack = self.acks["a"]
        try:
            old = self.target.remote_fetch_add(cid, ack.head.stag, 0, self.now)
        except RemoteAccessError:
            return
        ticket = old >> 32
        slot = RingSlot.decode(self.target.remote_read(
            cid, ack.ring.stag, 16 * (ticket % ack.ring.count), 16),
            addr_le=bool(ack.features & Feature.ADDR_LE))
        if slot.sequence == ticket and not slot.consumed:
            self.target.remote_write(cid, ack.partition.stag, slot.block_offset, data)
            self.tickets.append(("a", ticket, slot.block_offset, data))

    @precondition(lambda self: self.tickets)
    @rule(pick=st.integers(0, 10), target_h=handles, wrong_block=st.booleans())
    def bind(self, pick, target_h, wrong_block) -> None:
        name, ticket, block, data = self.tickets.pop(pick % len(self.tickets))
        if self.conn[name] is None:
            return
        block = block + BS if wrong_block else block
        self._send(name, Bind(request_id=next(self.req_ids), handle=self._handle(name, *target_h),
                              ticket=ticket, data_length=len(data), block_offset=block),
                   "BIND", data)

    @rule(who=st.sampled_from(NAMES), how=st.sampled_from(["fail", "goodbye", "release"]))
    def end_session(self, who, how) -> None:
        cid = self.conn[who]
        if cid is None:
            return
        if how != "fail" and not self.target.connections[cid].busy:
            goodbye = Goodbye(flags=int(how == "release"))
            self._effects(self.target.handle_message(cid, goodbye, self.now))
        self._effects(self.target.disconnect(cid, self.now))
        self._forget_conn(cid)
        self.conn[who] = None

    @rule(who=st.sampled_from(NAMES))
    def reconnect(self, who) -> None:
        if self.conn[who] is None:
            self._connect(who)

    @rule(ms=st.integers(0, 120))
    def advance(self, ms) -> None:
        self.now += ms * PS_PER_MS
        self._effects(self.target.advance(self.now))
        deadline = self.target.next_deadline()
        assert deadline is None or deadline > self.now

    @invariant()
    def conserved(self) -> None:
        self.target.check_invariant()
        assert not self.target.internal_errors, self.target.internal_errors


class UnmaskedLittleEndianMachine(TargetMachine):
    """The same rules with InfiniBand (unmasked) counters and ADDR_LE sessions."""

    options: ClassVar[dict[str, object]] = {
        "counter_mode": "unmasked", "addr_le": True, "ring_slots": 16,
    }


SETTINGS = settings(max_examples=100, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
TargetMachine.TestCase.settings = SETTINGS
UnmaskedLittleEndianMachine.TestCase.settings = SETTINGS
TestTarget = TargetMachine.TestCase
TestTargetUnmaskedLittleEndian = UnmaskedLittleEndianMachine.TestCase


@pytest.mark.parametrize("machine_class", [TargetMachine, UnmaskedLittleEndianMachine])
def test_seeded_random_walk(machine_class: type[TargetMachine]) -> None:
    """The same machine driven by a seeded random walk: hypothesis favours short runs, this
    reaches deep states (full quotas, wrapped rings, deferred frees) deterministically."""
    rnd = random.Random(20261130)
    seen: Counter[tuple[str, str]] = Counter()
    for _ in range(40):
        machine = machine_class()
        for _ in range(80):
            who = rnd.choice(NAMES)
            where = (rnd.choice(["own"] * 6 + ["other", "none"]), rnd.randint(0, 2))
            gen = rnd.choice([0] * 8 + [1, 2, 3])
            data = rnd.randbytes(rnd.randint(0, 80))
            r = rnd.random()
            if r < 0.25:
                machine.alloc_store(who, where, gen, data, rnd.random() < 0.3,
                                    rnd.random() < 0.8, rnd.random() < 0.1)
            elif r < 0.40:
                machine.free(who, where, gen)
            elif r < 0.55:
                machine.load(who, where, gen, rnd.random() < 0.7, BS, rnd.random() < 0.05)
            elif r < 0.62:
                machine.store(who, where, gen, data, rnd.random() < 0.3)
            elif r < 0.67:
                machine.read_slot(who)
            elif r < 0.72 and machine.reads:
                machine.complete_read(rnd.randint(0, 10))
            elif r < 0.78:
                machine.direct_allocate(data[:40] or b"d")
            elif r < 0.83 and machine.tickets:
                machine.bind(rnd.randint(0, 10), where, rnd.random() < 0.2)
            elif r < 0.87:
                machine.end_session(who, rnd.choice(["fail", "goodbye", "release"]))
            elif r < 0.95:
                machine.reconnect(who)
            else:
                machine.advance(rnd.randint(0, 120))
            machine.conserved()
        seen.update(machine.target.counters.counts)
    for op in ("ALLOC_STORE", "FREE", "LOAD", "STORE", "BIND"):
        assert seen[(op, "OK")] > 10, seen
    assert seen[("BIND", "TICKET_ABANDONED")] and seen[("ALLOC_STORE", "NO_SPACE")]
