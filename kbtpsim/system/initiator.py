"""A KBTP initiator: a host and its NIC speaking KBTP to a target over one RC connection.

Every request method (:meth:`Initiator.load`, :meth:`~Initiator.store`, ...) returns a
simpy process whose value is an :class:`OpResult`: the decoded COMPLETION, the loaded
bytes, and the request's latency (post to completion). Run it from another process
(``result = yield ini.load(h)``) or drive the simulation until it is done.

Protocol behaviour (draft, "Session Establishment", "Operations", "Security
Considerations"):

* HELLO carries a 128-bit Initiator ID drawn from a seeded RNG, the Requested Features,
  and Completion Credits = the receive buffers posted for COMPLETION messages; each
  completion's buffer is re-posted once it has been read.
* At most Request Credits requests are outstanding (a ``simpy.Resource`` of that size).
* Each request's buffer is exposed through a **memory window** bound to the connection
  QP and valid for that request only; INVALIDATE is requested by default, so the target's
  Send with Invalidate revokes it (``OpResult.stag_revoked``). Without it the initiator
  invalidates the window itself when the request completes.
* Non-inline stores expose the source buffer for the target's RDMA Read.
* DIRECT_LOAD and DIRECT_ALLOC run one-sided on the same QP; an access the target's NIC
  refuses completes with an error status, breaks the connection as hardware does, and is
  raised as :class:`RdmaError`. Requests outstanding on a broken connection raise
  :class:`ConnectionLost`.

The request/completion exchange and the connection QP under it (Sends, receive buffers,
CQE dispatch, breaking) are :class:`~kbtpsim.system.rpc.RpcPlumbing`, the direct modes
:class:`~kbtpsim.system.direct.DirectModes`: both mixed into :class:`Initiator`.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.nic import (
    Access,
    Cqe,
    Link,
    Nic,
    NicProfile,
    QueuePair,
    Simulation,
)
from kbtpsim.nic.qpstate import QpState
from kbtpsim.system.direct import DirectModes, HeadGate
from kbtpsim.system.results import (
    ConnectionLost,
    Discard,
    HelloRejected,
    OpResult,
    RdmaError,
)
from kbtpsim.system.rpc import NO_ACCESS as NO_ACCESS
from kbtpsim.system.rpc import RECV_SIZE, RpcPlumbing, _Chain
from kbtpsim.system.staging import Staging
from kbtpsim.target.config import CounterMode
from kbtpsim.wire import (
    AllocStore,
    Bind,
    DataDescriptor,
    Feature,
    Free,
    Goodbye,
    GoodbyeFlag,
    Hello,
    HelloAck,
    Load,
    Message,
    RequestFlag,
    Status,
    Store,
    encode,
)

if TYPE_CHECKING:
    from kbtpsim.system.server import ServerConnection, SoftwareTargetServer

Gen = Generator[simpy.Event, Any, Any]
#: From an initiator's disconnect to the target learning of it (ps): the CM's DREQ is a
#: management datagram through both hosts' CM and the fabric, so it arrives after what
#: the initiator's NIC sent before it, its ACKs included (decision O11). An estimate:
#: no published figure for rdma_cm's disconnect latency was found.
CM_DISCONNECT_PS = 10_000_000
NO_FEATURES = Feature(0)


class Initiator(RpcPlumbing, DirectModes):
    """A KBTP initiator host with NIC ``name`` on ``sim``.

    ``seed`` seeds the Initiator ID (unless ``initiator_id`` is given);
    ``completion_credits`` receive buffers are posted for completions;
    ``buffer_bytes`` bounds the data buffers outstanding at once.
    ``keep_results=False`` does not keep :attr:`results` (every result, loaded data
    included, for the whole run; each operation's process still returns its result),
    ``keep_received=False`` does not keep :attr:`received` (only oracle checks use it).
    """

    def __init__(self, sim: Simulation, name: str, *, profile: str | NicProfile = "cx5",
                 seed: int = 0, initiator_id: bytes | None = None,
                 requested_features: Feature = NO_FEATURES, completion_credits: int = 64,
                 buffer_bytes: int = 256 << 20,
                 counter_mode: CounterMode = CounterMode.MASKED, keep_results: bool = True,
                 keep_received: bool = True) -> None:
        self.sim = sim
        self.env = sim.env
        self.name = name
        self.nic: Nic = sim.add_nic(name, profile)
        prof = self.nic.profile
        self.initiator_id = initiator_id or self.random_id(seed, name)
        self.requested_features = Feature(requested_features)
        self.completion_credits = completion_credits
        #: how the target's ring counters advance (draft, "Free-Block Ring" and
        #: "InfiniBand"): not in HELLO_ACK, so known out of band like the binding
        self.counter_mode = CounterMode(counter_mode)
        self.cq = self.nic.create_cq(1 << 16)
        self.buffers = Staging(self.nic, buffer_bytes, Access.LOCAL_WRITE | Access.MW_BIND)
        self.post_ps = round((prof.cpu_post_ns + prof.cpu_doorbell_ns) * 1000)
        self.qp: QueuePair | None = None
        self.conn: ServerConnection | None = None
        self.server: SoftwareTargetServer | None = None
        self.ack: HelloAck | None = None
        self.addr_le = False
        self.broken: str | None = None
        self._credits: simpy.Resource | None = None
        self._request_ids = itertools.count(1)
        self._wr_ids = itertools.count(1)
        self._pending: dict[int, simpy.Event] = {}  # request id -> completion event
        #: immediate (low 32 bits of the Request ID) -> (Request ID, record slot, handle)
        self._records: dict[int, tuple[int, int, int]] = {}
        self._hello: simpy.Event | None = None
        self._wrs: dict[int, simpy.Event | _Chain | None] = {}  # wr id -> waiter (one-sided ops)
        self._recv_bufs: dict[int, int] = {}  # wr id -> buffer address
        self.outstanding = 0
        self.max_outstanding = 0
        #: handles this initiator bound (as far as it knows), and DIRECT_ALLOC tickets
        #: taken and not yet bound: its usage of the Allocation Quota
        self.bound: set[int] = set()
        self.tickets = 0
        #: keeps the target's ALLOC_STOREs and this initiator's FetchAdds on its Head
        #: disjoint in time (DIRECT_ALLOC sessions; docs/decisions.md, S1)
        self.head_gate = HeadGate(self.env)
        #: every finished operation, in completion order (for metrics); always empty
        #: with ``keep_results=False``
        self.results: list[OpResult] = [] if keep_results else Discard()
        #: every message received (HELLO_ACK, COMPLETION), in arrival order; always
        #: empty with ``keep_received=False``
        self.received: list[bytes] = [] if keep_received else Discard()
        #: Request ID -> (Tagged Offset, octets) of every non-inline store's exposed
        #: source (what a target's RDMA Read may fetch); empty with keep_received=False
        self.sources: dict[int, tuple[int, bytes]] = {}
        self._keep_sources = keep_received
        self.env.process(self.cq.serve(self._dispatch))

    @staticmethod
    def random_id(seed: int, name: str) -> bytes:
        """The Initiator ID an initiator named ``name`` draws with ``seed``: 128 bits
        from a seeded RNG (secret and stable; put it in the target's configuration)."""
        return random.Random(f"kbtp-initiator:{seed}:{name}").getrandbits(128).to_bytes(
            16, "big")

    # ================================================================ session
    def connect(self, server: SoftwareTargetServer, link: Link | None = None) -> simpy.Process:
        """Process: open an RC connection to ``server`` and establish the session
        (HELLO / HELLO_ACK). Its value is the :class:`HelloAck`; raises
        :class:`HelloRejected` if the target refuses."""
        if self.qp is not None and self.qp.state is not QpState.ERROR:
            raise RuntimeError(f"{self.name} is already connected")
        depth = self.completion_credits + 2
        self.qp = self.nic.create_qp(self.cq, self.cq, sq_depth=1024, rq_depth=depth)
        self.server = server
        self.conn = server.accept(self.qp, link, name=self.name)
        self.broken = None
        for _ in range(self.completion_credits):
            self._post_recv(self.buffers.alloc(RECV_SIZE))
        return self.env.process(self._hello_process())

    def hello(self) -> simpy.Process:
        """Process: a new HELLO on the existing connection (after GOODBYE)."""
        return self.env.process(self._hello_process())

    def _hello_process(self) -> Gen:
        self.addr_le = False
        msg = Hello(requested_features=self.requested_features,
                    completion_credits=self.completion_credits,
                    initiator_id=self.initiator_id)
        self._hello = self.env.event()
        yield from self._send(encode(msg))
        ack: HelloAck = yield self._hello
        if ack.status != Status.OK:
            raise HelloRejected(ack.status)
        self.ack = ack
        self.addr_le = bool(ack.features & Feature.ADDR_LE)
        self._credits = simpy.Resource(self.env, capacity=ack.request_credits)
        return ack

    def goodbye(self, release: bool = False) -> simpy.Process:
        """Process: send GOODBYE (RELEASE frees every handle). The target sends no
        completion; the value is an :class:`OpResult` with ``completion`` None, done when
        the Send is acknowledged."""
        return self.env.process(self._goodbye(release))

    def _goodbye(self, release: bool) -> Gen:
        if release:
            self.bound.clear()
        posted = int(self.env.now)
        msg = Goodbye(flags=GoodbyeFlag.RELEASE if release else 0)
        done = self.env.event()
        yield from self._send(encode(msg, self.addr_le), waiter=done)
        cqe: Cqe = yield done
        self._check(cqe, "GOODBYE")
        self.ack = None
        result = OpResult("GOODBYE", 0, None, posted, int(self.env.now))
        self.results.append(result)
        return result

    def close(self) -> None:
        """Tear the connection down (a CM disconnect); the target retains bindings. The
        target learns of it :data:`CM_DISCONNECT_PS` later (decision O11)."""
        if self.qp is not None and self.qp.state is not QpState.ERROR:
            self.qp.to_error()
        if self.server is not None and self.conn is not None:
            server, conn = self.server, self.conn
            self.env.timeout(CM_DISCONNECT_PS).callbacks.append(
                lambda _ev: server.close(conn))
        self._break("closed")

    # ================================================================ requests
    def load(self, handle: int, generation: int = 0, *, length: int | None = None,
             invalidate: bool = True, allow_unsealed: bool = False,
             record: bool = False) -> simpy.Process:
        """Process: LOAD ``handle`` into a fresh buffer of ``length`` octets (default
        the Block Size) exposed through a window for this request. ``record`` (needs
        RECORD_COMPLETION, InfiniBand binding) asks for a completion record written with
        RDMA Write with Immediate instead of a COMPLETION message."""
        return self.env.process(self._load(handle, generation, length, invalidate,
                                           allow_unsealed, record))

    def _load(self, handle: int, generation: int, length: int | None, invalidate: bool,
              allow_unsealed: bool, record: bool) -> Gen:
        ack = self._session()
        length = ack.block_size if length is None else length
        flags = (RequestFlag.INVALIDATE if invalidate else 0) | (
            RequestFlag.ALLOW_UNSEALED if allow_unsealed else 0)

        def build(rid: int, dd: DataDescriptor) -> Message:
            return Load(flags=flags, request_id=rid, handle=handle, generation=generation,
                        data_descriptor=dd)

        return (yield from self._rpc("LOAD", handle, build, length=length,
                                     access=Access.REMOTE_WRITE, record=record))

    def store(self, handle: int, data: bytes, generation: int = 0, *,
              inline: bool | None = None, seal: bool = False, invalidate: bool = True,
              record: bool = False) -> simpy.Process:
        """Process: STORE ``data`` to bound ``handle``. ``inline`` (default: when it fits
        the target's Max Inline) sends the data in the request; otherwise the target
        RDMA-reads it through a window for this request."""
        return self.env.process(self._store(Store, handle, data, generation, inline, seal,
                                            invalidate, record))

    def alloc_store(self, handle: int, data: bytes, *, inline: bool | None = None,
                    seal: bool = False, invalidate: bool = True,
                    record: bool = False) -> simpy.Process:
        """Process: ALLOC_STORE (Block Unmapped Store) of ``data`` to unbound ``handle``."""
        return self.env.process(self._store_gated(AllocStore, handle, data, 0, inline, seal,
                                                  invalidate, record))

    def _store(self, cls: type[Store] | type[AllocStore], handle: int, data: bytes,
               generation: int, inline: bool | None, seal: bool, invalidate: bool,
               record: bool) -> Gen:
        ack = self._session()
        if inline is None:
            inline = len(data) <= ack.max_inline
        flags = RequestFlag.SEAL if seal else RequestFlag(0)
        op = cls.OPCODE.name
        if inline:
            def build_inline(rid: int, dd: DataDescriptor) -> Message:
                return cls(flags=flags | RequestFlag.INLINE, request_id=rid, handle=handle,
                           generation=generation, data_descriptor=DataDescriptor(0, 0,
                                                                                 len(data)),
                           inline_data=data)

            return (yield from self._rpc(op, handle, build_inline, record=record))
        if invalidate:
            flags |= RequestFlag.INVALIDATE

        def build(rid: int, dd: DataDescriptor) -> Message:
            return cls(flags=flags, request_id=rid, handle=handle, generation=generation,
                       data_descriptor=dd)

        return (yield from self._rpc(op, handle, build, length=len(data),
                                     access=Access.REMOTE_READ, source=data, record=record))

    def _store_gated(self, cls: type[Store] | type[AllocStore], handle: int, data: bytes,
                     generation: int, inline: bool | None, seal: bool, invalidate: bool,
                     record: bool) -> Gen:
        """An ALLOC_STORE in a DIRECT_ALLOC session takes its ticket with the target CPU's
        read-modify-write of this initiator's Head: not while a FetchAdd of ours is in
        flight (:class:`~kbtpsim.system.direct.HeadGate`)."""
        ack = self._session()
        if cls is not AllocStore or ack.head is None:
            return (yield from self._store(cls, handle, data, generation, inline, seal,
                                           invalidate, record))
        yield from self.head_gate.enter("target")
        try:
            return (yield from self._store(cls, handle, data, generation, inline, seal,
                                           invalidate, record))
        finally:
            self.head_gate.leave("target")

    def free(self, handle: int, generation: int = 0, *, record: bool = False) -> simpy.Process:
        """Process: FREE ``handle``."""
        def build(rid: int, dd: DataDescriptor) -> Message:
            return Free(request_id=rid, handle=handle, generation=generation)

        return self.env.process(self._rpc_checked("FREE", handle, build, record))

    def bind(self, handle: int, ticket: int, data_length: int,
             block_offset: int) -> simpy.Process:
        """Process: BIND a DIRECT_ALLOC ticket's block to ``handle``."""
        def build(rid: int, dd: DataDescriptor) -> Message:
            return Bind(request_id=rid, handle=handle, ticket=ticket & 0xFFFF_FFFF,
                        data_length=data_length, block_offset=block_offset)

        return self.env.process(self._rpc_checked("BIND", handle, build))

    def send_raw(self, data: bytes, *, session: bool = True) -> simpy.Process:
        """Process: send arbitrary octets as a request (tests of malformed input); the
        value is the COMPLETION whose Request ID equals the header's (octets 4..11).
        ``session=False`` sends it on a connected QP without a session (a request
        before HELLO, or after GOODBYE)."""
        return self.env.process(self._raw(data, session))

    def _raw(self, data: bytes, session: bool = True) -> Gen:
        if session:
            self._session()
        else:
            self._up()
        rid = int.from_bytes(data[4:12], "big")
        ev = self._pending[rid] = self.env.event()
        posted = int(self.env.now)
        yield from self._send(data)
        completion, _ = yield ev
        return OpResult("RAW", 0, completion, posted, int(self.env.now))


__all__ = ["ConnectionLost", "HelloRejected", "Initiator", "OpResult", "RdmaError"]
