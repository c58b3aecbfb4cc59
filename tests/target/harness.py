"""Test helpers: a target with named initiators and a small client per initiator."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field

from kbtpsim.target import (
    Effect,
    InitiatorConfig,
    ReadInitiator,
    SendMessage,
    Target,
    TargetConfig,
    WriteInitiator,
)
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    DataDescriptor,
    Feature,
    Free,
    Goodbye,
    Hello,
    HelloAck,
    Load,
    RequestFlag,
    Status,
    Store,
)

BS = 32 * 1024


def iid(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()[:16]


def ini(name: str, quota: int, base: int, count: int = 16, features: int = 0,
        domain: str = "default") -> InitiatorConfig:
    return InitiatorConfig(name, iid(name), quota, base, count, Feature(features), domain)


def completions(effects: list[Effect]) -> list[Completion]:
    return [e.message for e in effects
            if isinstance(e, SendMessage) and isinstance(e.message, Completion)]


@dataclass
class Client:
    """Builds requests for one initiator and feeds them to the target."""

    target: Target
    name: str
    conn: int
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    now: int = 0
    ack: HelloAck | None = None

    def hello(self, features: int = 0xF) -> HelloAck:
        out = self.target.handle_message(
            self.conn, Hello(requested_features=Feature(features), completion_credits=8,
                             initiator_id=iid(self.name)), self.now)
        (effect,) = out
        assert isinstance(effect, SendMessage) and isinstance(effect.message, HelloAck)
        self.ack = effect.message
        return effect.message

    def send(self, msg, hold: bool = False) -> list[Effect]:
        return self.target.handle_message(self.conn, msg, self.now, hold_after_ticket=hold)

    def one(self, msg) -> Completion:
        (c,) = completions(self.send(msg))
        return c

    def alloc_store(self, handle: int, data: bytes, flags: int = 0, generation: int = 0,
                    hold: bool = False) -> list[Effect]:
        return self.send(AllocStore(
            flags=RequestFlag.INLINE | flags, request_id=next(self.ids), handle=handle,
            generation=generation, data_descriptor=DataDescriptor(0, 0, len(data)),
            inline_data=data), hold=hold)

    def store(self, handle: int, data: bytes, flags: int = 0, generation: int = 0):
        return self.send(Store(
            flags=RequestFlag.INLINE | flags, request_id=next(self.ids), handle=handle,
            generation=generation, data_descriptor=DataDescriptor(0, 0, len(data)),
            inline_data=data))

    def load(self, handle: int, length: int = BS, flags: int = RequestFlag.ALLOW_UNSEALED,
             generation: int = 0, stag: int = 0x55, record: CompletionDescriptor | None = None):
        return self.send(Load(
            flags=flags, request_id=next(self.ids), handle=handle, generation=generation,
            data_descriptor=DataDescriptor(stag, 0x1000, length), completion_descriptor=record))

    def free(self, handle: int, generation: int = 0, flags: int = 0):
        return self.send(Free(flags=flags, request_id=next(self.ids), handle=handle,
                              generation=generation))

    def bind(self, handle: int, ticket: int, length: int, block_offset: int,
             generation: int = 0):
        return self.send(Bind(request_id=next(self.ids), handle=handle, ticket=ticket,
                              data_length=length, block_offset=block_offset,
                              generation=generation))

    def goodbye(self, release: bool = False):
        return self.send(Goodbye(flags=1 if release else 0))


def make(blocks: int = 8, initiators=(), connect=True, **kw) -> tuple[Target, dict[str, Client]]:
    target = Target(TargetConfig(blocks=blocks, block_size=kw.pop("block_size", BS),
                                 initiators=tuple(initiators), **kw))
    clients = {}
    for n, i in enumerate(initiators, start=1):
        c = Client(target, i.name, n)
        target.connect(n, 0)
        if connect:
            c.hello()
        clients[i.name] = c
    return target, clients


def loaded_data(effects: list[Effect]) -> bytes:
    return b"".join(e.data for e in effects if isinstance(e, WriteInitiator))


def reads(effects: list[Effect]) -> list[ReadInitiator]:
    return [e for e in effects if isinstance(e, ReadInitiator)]


OK = Status.OK
