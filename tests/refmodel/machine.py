"""The differential state machine: one request stream into Target and the reference model.

Several initiators in two trust domains (one with DIRECT_ALLOC), valid and invalid
requests, out-of-range and stale handles and Generations, undefined flags, raw malformed
octets, split allocations (``hold_after_ticket`` / ``read_slot``), RDMA Read data,
GOODBYE with and without RELEASE, connection failures and reconnections, DIRECT_ALLOC
tickets and BINDs, and clock advances past ticket timeouts and retention. After every
step :class:`~tests.refmodel.pair.Pair` compares every effect and the whole state.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kbtpsim.target import Binding, CounterMode, TargetConfig
from kbtpsim.wire import (
    AllocStore,
    Bind,
    CompletionDescriptor,
    DataDescriptor,
    Feature,
    Free,
    Goodbye,
    Hello,
    Load,
    Store,
    encode,
)
from tests.refmodel.pair import Pair, iid, ini

DA = int(Feature.DIRECT_ALLOC)


def configs() -> list[TargetConfig]:
    """Small pools so quotas, the ring and deferred frees are reached quickly."""
    inis = (ini("a", 3, 0x100, 6), ini("b", 2, 0x106, 4), ini("c", 2, 0x10A, 6, domain="y"),
            ini("d", 2, 0x110, 4, features=DA | 0x4))
    out = []
    for mode, binding, le in ((CounterMode.MASKED, Binding.RDMAP, False),
                              (CounterMode.UNMASKED, Binding.INFINIBAND, True),
                              (CounterMode.MASKED, Binding.INFINIBAND, True),
                              (CounterMode.UNMASKED, Binding.RDMAP, False)):
        out.append(TargetConfig(blocks=9, block_size=32, max_inline=24, initiators=inis,
                                ticket_timeout_ms=1, retention_ms=2, counter_mode=mode,
                                binding=binding, addr_le=le, request_credits=4))
    # one trust domain and DIRECT_LOAD (offered only then, decision T7); N > F
    one = (ini("a", 2, 0x10, 4, features=0x5), ini("b", 2, 0x14, 4, features=0x1),
           ini("d", 2, 0x20, 4, features=DA | 0x1))
    out.append(TargetConfig(blocks=6, block_size=16, max_inline=16, initiators=one,
                            ring_slots=8, first_block=3, ticket_timeout_ms=2, retention_ms=1,
                            table_range=(0x8, 0x20)))
    # free_quiesce (decision C13): frees wait for the `quiesced` rule
    out.append(replace(out[0], free_quiesce=True))
    out.append(replace(out[4], free_quiesce=True))
    return out


CONFIGS = configs()
STEPS = {"steps": 0}
MS = 10**9
DTS = [0, 1, 10**6, MS // 2, MS, MS + 1, 2 * MS, 3 * MS]
FLAGS = st.sampled_from([0, 0x1, 0x2, 0x3, 0x4, 0x8, 0x10, 0x12, 0x9, 0xB, 0x20, 0x8000])


class Differential(RuleBasedStateMachine):
    """Target and the model, step by step (see the module docstring)."""

    @initialize(k=st.integers(0, len(CONFIGS) - 1))
    def setup(self, k: int) -> None:
        self.pair = Pair(CONFIGS[k])
        self.names = [i.name for i in CONFIGS[k].initiators]
        self.conn: dict[str, int] = {}
        self.next_conn = 0
        self.now = 0
        self.rid = 0

    def teardown(self) -> None:
        if hasattr(self, "pair"):
            STEPS["steps"] += self.pair.steps

    # ------------------------------------------------------------ helpers
    def _session(self, who: str) -> bool:
        c = getattr(self, "conn", {}).get(who)
        return c is not None and self.pair.model.model.conns[c]["sess"] == who

    def _le(self, who: str) -> bool:
        c = self.pair.model.model.conns.get(self.conn.get(who, -1))
        return bool(c and c["le"])

    def _send(self, who: str, data: bytes, hold: bool = False) -> None:
        if who not in self.conn:
            return
        self.pair.call("handle", self.conn[who], data, self.now, hold_after_ticket=hold)

    def _handle(self, data: st.DataObject, who: str) -> int:
        cfg = {i.name: i for i in self.pair.config.initiators}
        other = cfg[data.draw(st.sampled_from(self.names))]
        return data.draw(st.one_of(
            st.integers(cfg[who].handle_base, cfg[who].handle_base + cfg[who].handle_count - 1),
            st.integers(other.handle_base, other.handle_base + other.handle_count - 1),
            st.sampled_from([0, 0xFF, 0x114, 1 << 63, other.handle_base + other.handle_count])))

    # ------------------------------------------------------------ rules
    def connect(self, who: str) -> None:
        if who not in self.names:
            return
        if who in self.conn:
            self.pair.call("disconnect", self.conn.pop(who), self.now)
        self.next_conn += 1
        self.conn[who] = self.next_conn
        self.pair.call("connect", self.next_conn, self.now)

    @rule(who=st.sampled_from("abcd"), features=st.sampled_from([0xF, 0xF, 0x7, 0x2, 0]),
          hello=st.sampled_from([True, True, True, True, False]))
    def join(self, who: str, features: int, hello: bool) -> None:
        """A new connection and (mostly) a valid HELLO (a reconnection if one was up)."""
        self.connect(who)
        if who in self.conn and hello:
            self.hello(who, features, None)

    @rule(who=st.sampled_from("abcd"), op=st.sampled_from(
        ["load", "load", "store", "alloc", "alloc", "alloc", "free", "free"]),
        flags=st.sampled_from([0x1, 0x1, 0x3, 0x3, 0x0, 0x2, 0x10, 0x9, 0x5, 0x4]),
        data=st.data())
    def usual(self, who: str, op: str, flags: int, data: st.DataObject) -> None:
        """A burst of mostly valid requests: own (or, for LOAD, others') handles,
        Generation 0 or the current one, lengths within the block."""
        for i in range(data.draw(st.integers(1, 6))):
            if i:
                who = data.draw(st.sampled_from(self.names))
                op = data.draw(st.sampled_from(["load", "load", "store", "alloc", "free"]))
                flags = data.draw(st.sampled_from([0x3, 0x1, 0x0, 0x10, 0x9]))
            self._usual(who, op, flags, data)

    usual2 = usual  # the same rule under more names: drawn more often
    usual3 = usual
    usual4 = usual

    def _usual(self, who: str, op: str, flags: int, data: st.DataObject) -> None:
        if who not in self.conn or who not in self.names:
            return
        if data.draw(st.integers(0, 9)) < 8:  # mostly let a waiting request go on first
            self.read_slot(who)
            self.read_data(who, data)
        cfg = {i.name: i for i in self.pair.config.initiators}
        src = cfg[who if op != "load" else data.draw(st.sampled_from(self.names))]
        h = data.draw(st.integers(src.handle_base, src.handle_base + 3))
        m = self.pair.model.model
        bound = sorted(m.sess[src.name]["bound"])
        if op in ("load", "store", "free") and bound and data.draw(st.integers(0, 3)):
            h = data.draw(st.sampled_from(bound))  # mostly a bound handle
        g = self.pair.model.model.entry(h)[1]
        self._request(who, op, flags, h, data.draw(st.sampled_from([0, 0, 0, g])), data,
                      lengths=[0, 5, 16, 24], le_flip=False)

    @rule(who=st.sampled_from("abcd"), features=st.integers(0, 15),
          bogus=st.sampled_from([None, None, None, "id", "header"]))
    def hello(self, who: str, features: int, bogus: str | None) -> None:
        ident = iid("nobody") if bogus == "id" else iid(who)
        msg = Hello(requested_features=Feature(features), completion_credits=4,
                    initiator_id=ident, request_id=7 if bogus == "header" else 0)
        self._send(who, encode(msg))

    @rule(who=st.sampled_from("abcd"), op=st.sampled_from(["load", "store", "alloc", "free"]),
          flags=FLAGS, data=st.data())
    def request(self, who: str, op: str, flags: int, data: st.DataObject) -> None:
        if who not in self.conn:
            return
        h = self._handle(data, who)
        g = self.pair.model.model.entry(h)[1]
        gen = data.draw(st.sampled_from([0, 0, g, g + 1 & 0xFFFF, 1]))
        self._request(who, op, flags, h, gen, data, [0, 3, 16, 24, 32, 33], True)

    def _request(self, who: str, op: str, flags: int, h: int, gen: int,
                 data: st.DataObject, lengths: list[int], le_flip: bool) -> None:
        self.rid += 1
        cd = CompletionDescriptor(0x77, 0x40) if flags & 0x4 else None
        hold = False
        if op == "load":
            flags &= ~0x1
            n = data.draw(st.sampled_from([0, 4, 16, 32, 64]))
            msg = Load(flags=flags, request_id=self.rid, handle=h, generation=gen,
                       data_descriptor=DataDescriptor(0x55, 0x1000, n), completion_descriptor=cd)
        elif op in ("store", "alloc"):
            n = data.draw(st.sampled_from(lengths))
            cls = Store if op == "store" else AllocStore
            inline = bytes([self.rid & 0xFF]) * n if flags & 0x1 else None
            dd = DataDescriptor(0, 0, n) if inline is not None else DataDescriptor(0x66, 0x20, n)
            msg = cls(flags=flags, request_id=self.rid, handle=h, generation=gen,
                      data_descriptor=dd, completion_descriptor=cd, inline_data=inline)
            hold = op == "alloc" and data.draw(st.integers(0, 5)) == 0
        else:
            msg = Free(flags=flags & ~0x1, request_id=self.rid, handle=h, generation=gen,
                       completion_descriptor=cd)
        le = self._le(who) ^ (le_flip and data.draw(st.sampled_from([False] * 9 + [True])))
        self._send(who, encode(msg, le), hold)

    @rule(who=st.sampled_from("abcd"), data=st.data())
    def raw(self, who: str, data: st.DataObject) -> None:
        """Malformed octets: random, or a valid request cut, extended or with one octet
        changed (Version, Opcode, Status, lengths)."""
        if who not in self.conn:
            return
        self.rid += 1
        base = encode(AllocStore(flags=0x1, request_id=self.rid, handle=0x101,
                                 data_descriptor=DataDescriptor(0, 0, 4), inline_data=b"abcd"),
                      self._le(who))
        kind = data.draw(st.sampled_from(["random", "cut", "extend", "poke"]))
        if kind == "random":
            raw = data.draw(st.binary(max_size=48))
        elif kind == "cut":
            raw = base[:data.draw(st.integers(0, len(base) - 1))]
        elif kind == "extend":
            raw = base + data.draw(st.binary(min_size=1, max_size=8))
        else:
            i = data.draw(st.sampled_from([0, 1, 2, 3, 22, 23, 24, 36, 39]))
            raw = base[:i] + bytes([data.draw(st.integers(0, 255))]) + base[i + 1:]
        self._send(who, raw)

    @rule(who=st.sampled_from("abcd"), release=st.booleans(), bad=st.booleans())
    def goodbye(self, who: str, release: bool, bad: bool) -> None:
        """GOODBYE (bad: an undefined flag), then a new HELLO on the same connection."""
        self._send(who, encode(Goodbye(flags=(1 if release else 0) | (4 if bad else 0)),
                               self._le(who)))
        if not bad:
            self.hello(who, 0xF, None)

    @rule(who=st.sampled_from("abcd"))
    def disconnect(self, who: str) -> None:
        if who in self.conn:
            c = self.conn.pop(who)
            self.pair.reads.pop(c, None)
            self.pair.call("disconnect", c, self.now)

    @rule(who=st.sampled_from("abcd"), data=st.data())
    def read_data(self, who: str, data: st.DataObject) -> None:
        c = self.conn.get(who)
        if c is None or not self.pair.reads.get(c):
            return
        n = self.pair.reads[c][0][2]
        self.pair.complete_read(c, bytes([data.draw(st.integers(1, 255))]) * n, self.now)

    @rule(who=st.sampled_from("abcd"))
    def read_slot(self, who: str) -> None:
        c = self.conn.get(who)
        conn = self.pair.model.model.conns.get(c) if c is not None else None
        if conn and conn["wait"] and conn["wait"].get("held"):
            self.pair.call("read_slot", c, self.now)

    @precondition(lambda self: self.pair.target.quiescing)
    @rule(data=st.data())
    def quiesced(self, data: st.DataObject) -> None:
        block = data.draw(st.sampled_from(self.pair.target.quiescing))
        self.pair.call("quiesced", block, self.now)

    @rule(dt=st.sampled_from(DTS), to_deadline=st.booleans())
    def advance(self, dt: int, to_deadline: bool) -> None:
        d = self.pair.target.next_deadline()
        self.now = max(self.now, d) if to_deadline and d is not None else self.now + dt
        self.pair.call("advance", self.now)

    @precondition(lambda self: self._session("d"))
    @rule(via_ring=st.booleans(), bad_stag=st.booleans())
    def fetch_add(self, via_ring: bool, bad_stag: bool) -> None:
        """DIRECT_ALLOC: FetchAdd on d's Head, as remote_fetch_add or as the oracle's shadow
        does it (FetchAdd on the ring, then ticket_taken)."""
        m = self.pair.model.initiators["d"].direct
        if via_ring:
            t = self.pair.target.initiators["d"].direct.ring.take_ticket().ticket
            m.ring.take_ticket()
            self.pair.call("ticket_taken", "d", t, self.now)
        else:
            stag = m.d["head_stag"] + (4 if bad_stag else 0)
            self.pair.call("remote_fetch_add", self.conn["d"], stag, 0, self.now)

    @precondition(lambda self: self._session("d"))
    @rule(data=st.data())
    def bind(self, data: st.DataObject) -> None:
        d = self.pair.model.initiators["d"].direct
        tickets = sorted(d.outstanding) + sorted(d.abandoned) + [d.ring.head_ticket]
        t = data.draw(st.sampled_from(tickets))
        slot = d.ring.slot(16 * (t % d.ring.n_slots)).block_offset
        bo = data.draw(st.sampled_from([slot, slot, 0, slot ^ 0x10]))
        bo &= (1 << 64) - 1
        self.rid += 1
        msg = Bind(request_id=self.rid, handle=self._handle(data, "d"), ticket=t,
                   data_length=data.draw(st.sampled_from([0, 8, 16, 33])), block_offset=bo,
                   generation=data.draw(st.sampled_from([0, 0, 3])))
        self._send("d", encode(msg, self._le("d")))
