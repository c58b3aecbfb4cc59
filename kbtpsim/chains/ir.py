"""The chain IR: a directed graph of work-request templates with declared field sources.

A :class:`Chain` holds :class:`WrTemplate` nodes in a ``networkx.DiGraph``. Every WQE field
a template sets has a :data:`Source`:

* :class:`Const` -- a value known when the chain is posted;
* :class:`Addr` -- the address (and key) of a scratch buffer, a WQE field or a memory region,
  also known at post time;
* :class:`CtrlWord` -- the control word a disarmed WR has when posted armed (the swap
  operand of the CAS that arms it, CAS-on-WQE), also known at post time;
* :class:`Placed` -- octets written into the field *at run time* by another WR of the chain:
  the receive's scatter list (request fields), an RDMA Read's scatter list (table entry or
  ring slot fields), an atomic's returned value, or a patch (a loopback Write copying
  octets, or a CAS on a WQE's first 8 octets).

Besides fields, a template declares what it *reads* at execution time (gather lists,
condition words): :class:`Read` names the buffer and the WRs that place data there.

Edges are the orderings the NIC enforces (:class:`EdgeKind`): ``completion`` (a WAIT counts
the producer's CQE), ``enable`` (an ENABLE releases a managed QP up to the consumer),
``qp_order`` (same send queue, in posting order: executes in order, but WQEs are
*prefetched*) and ``fence`` (execution waits for earlier Reads/atomics of the QP).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import networkx as nx

from kbtpsim.nic.wqe import Opcode, WqeFlags

#: Byte order of a placed value: a number in "big"/"little" order, or plain "octets"
#: (request IDs, data, opaque copies) whose order does not matter.
Order = Literal["big", "little", "octets"]


class Role(StrEnum):
    """Which queue a WR sits on (one set of queues per connection)."""

    RECV = "recv"  #: the connection QP's receive queue (the request arrives here)
    MASTER = "master"  #: unmanaged loopback QP that runs the WAIT/ENABLE sequence
    WORKER = "worker"  #: managed loopback QP: table Reads, patches, markers, local Writes
    CONN = "conn"  #: managed QP connected to the initiator: data Write/Read, completion Send
    GATE = "gate"  #: managed loopback QP: one NOP per credit, released when a request is done


class EdgeKind(StrEnum):
    COMPLETION = "completion"  #: producer's CQE counted by a WAIT
    ENABLE = "enable"  #: ENABLE lets the consumer's managed QP fetch and run it
    QP_ORDER = "qp_order"  #: same send queue, posting order (prefetch: no placement guard)
    FENCE = "fence"  #: consumer has FENCE: waits for earlier Reads/atomics of its QP


@dataclass(frozen=True, slots=True)
class Const:
    """A value fixed when the chain is posted."""

    value: int | bytes
    about: str = ""

    def describe(self) -> str:
        v = self.value
        text = v.hex() if isinstance(v, bytes) else f"{v:#x}"
        return f"const {text}" + (f" ({self.about})" if self.about else "")


@dataclass(frozen=True, slots=True)
class Addr:
    """The address of something the poster knows: ``buf:NAME``, ``wqe:WR.FIELD``,
    ``region:NAME`` (a memory region's base Tagged Offset) or ``key:NAME`` (an STag)."""

    ref: str
    offset: int = 0

    def describe(self) -> str:
        return f"addr {self.ref}" + (f"+{self.offset}" if self.offset else "")


@dataclass(frozen=True, slots=True)
class Placed:
    """Octets written into this field at run time by WR ``producer``."""

    producer: str
    what: str  #: e.g. "request[28:36] Data Descriptor Tagged Offset"
    order: Order
    kind: Literal["request", "entry", "slot", "atomic", "patch"] = "request"
    #: the value posted before the placement (the octets the placement leaves alone keep
    #: it: e.g. the high half of a ring address, the ``| 4`` of an entry's octet 4)
    init: Const | Addr | CtrlWord | None = None

    def describe(self) -> str:
        return f"{self.kind} <- {self.producer}: {self.what} ({self.order})"


@dataclass(frozen=True, slots=True)
class CtrlWord:
    """The first 8 octets of WR ``wr``'s WQE as it is posted *armed* (its real opcode, WQE
    index, QP number and ds), as the u64 an atomic on them sees: known when the chain is
    posted. A CAS swaps it in to arm a disarmed WQE (RedN)."""

    wr: str
    about: str = ""

    def describe(self) -> str:
        return f"ctrl word of {self.wr} (armed)" + (f" ({self.about})" if self.about else "")


Source = Const | Addr | Placed | CtrlWord


@dataclass(frozen=True, slots=True)
class Place:
    """One piece of a producer's output: ``length`` octets to ``dest`` (``buf:NAME`` or
    ``wqe:WR.FIELD``) at ``offset`` within it."""

    dest: str
    length: int
    what: str
    order: Order = "octets"
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Read:
    """Memory a WR reads when it executes (a gather piece or a condition word)."""

    loc: str  #: ``buf:NAME`` or ``wqe:WR.FIELD``
    length: int
    producers: tuple[str, ...] = ()  #: WRs that place the octets read
    about: str = ""


@dataclass(frozen=True, slots=True)
class CondSpec:
    """Native conditional execution: run only if ``(u64 at word ^ compare) & mask == 0``.

    ``compare`` and ``mask`` are octet strings (8 octets each), so the test is independent
    of the NIC's byte order; ``compare_source`` set means the compare operand is placed at
    run time (then its order must match ``word_order``); ``mask_source``, that octets of
    the mask are (decision C21: ALLOW_UNSEALED frees the SEALED bit of the LOAD's Flags
    test), over ``mask``."""

    word: Read
    compare: bytes
    mask: bytes
    about: str
    word_order: Order = "octets"
    compare_source: Placed | None = None
    mask_source: Placed | None = None


@dataclass(slots=True)
class WrTemplate:
    """One work request of a chain, with the source of each field it sets."""

    name: str
    role: Role
    opcode: Opcode | None  #: None for the receive
    part: str  #: "dispatch", "load", "store", "alloc_store", "commit", "sequence"
    step: int = 0
    signaled: bool = False
    flags: WqeFlags = WqeFlags.NONE
    fields: dict[str, Source] = field(default_factory=dict)
    gather: tuple[Read, ...] = ()  #: local data read at execution (Send/Write/Read SGEs)
    places: tuple[Place, ...] = ()  #: what this WR writes into chain memory at run time
    cond: CondSpec | None = None
    inline: bytes | None = None
    remote_kind: str = ""  #: "strided_table", "pool", "initiator", "loopback", "ring", ""
    targets_ctrl: bool = False  #: an atomic whose target is a WQE's first 8 octets (RedN)
    atomic_word_order: Order | None = None  #: an atomic on a word stored in this order
    note: str = ""
    #: posted as a NOP (its segments intact); a CAS on its control word arms it (RedN)
    disarmed: bool = False
    #: for a CAS on a WQE's control word (``targets_ctrl``): the WR it arms
    arms: str | None = None
    #: for such a CAS: the native condition it decides (lowered by the compiler)
    cas_cond: CondSpec | None = None
    #: memory read at execution besides gather lists and conditions (an atomic's target)
    reads: tuple[Read, ...] = ()
    #: for a worker WR: the worker QP it runs on ("" = the connection's one worker QP;
    #: chains v2 give each part its own, :mod:`kbtpsim.chains.v2.lanes`)
    lane: str = ""
    #: an *opportunistic* WR (decision C31): an early copy of WR ``twin`` (same opcode,
    #: target and count), which may test request markers' octets before they are
    #: ordered to land: one not landed yet reads as restored and fails the test, and
    #: the twin, properly ordered, does the work later (rule ``opportunistic``)
    twin: str | None = None

    @property
    def label(self) -> str:
        return "RECV" if self.opcode is None else self.opcode.name

    def reads_from(self) -> set[str]:
        """The WRs whose placements this WR reads when it executes (gather pieces,
        condition words and operands, atomic targets, placed fields)."""
        out = {p for r in (*self.gather, *self.reads) for p in r.producers}
        for c in (self.cond, self.cas_cond):
            if c is not None:
                out.update(c.word.producers)
                out.update(s.producer for s in (c.compare_source, c.mask_source)
                           if s is not None)
        out.update(f.producer for f in self.fields.values() if isinstance(f, Placed))
        return out

    def buffers_read(self) -> set[str]:
        """The scratch buffers (``buf:NAME``) this WR reads when it executes."""
        conds = [c for c in (self.cond, self.cas_cond) if c is not None]
        return _buffers([r.loc for r in (*self.gather, *self.reads)]
                        + [c.word.loc for c in conds])

    def buffers_placed(self) -> set[str]:
        """The scratch buffers (``buf:NAME``) this WR places into."""
        return _buffers([p.dest for p in self.places])

    def reads_what(self, other: WrTemplate) -> bool:
        """This WR reads what ``other`` places: it names ``other`` as a producer, or
        reads a scratch buffer ``other`` places."""
        return other.name in self.reads_from() or bool(
            other.buffers_placed() & self.buffers_read())


def _buffers(locs: list[str]) -> set[str]:
    """The ``buf:NAME`` buffers among locations (``buf:NAME+offset``, ``wqe:...``)."""
    return {loc.split("+", 1)[0] for loc in locs if loc.startswith("buf:")}


@dataclass
class Chain:
    """A chain for one operation variant (or the whole per-credit chain)."""

    name: str
    addr_le: bool
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    notes: list[str] = field(default_factory=list)
    #: header tests of variants that have no header marker WR: chains v2's two-step LOAD
    #: (decision C21) is dispatched by its header test and never runs it itself, so its
    #: chain is sound only once per-operation dispatch has split it (rule
    #: ``dispatch-header``)
    headers: dict[str, CondSpec] = field(default_factory=dict)

    def add(self, wr: WrTemplate) -> WrTemplate:
        if wr.name in self.graph:
            raise ValueError(f"duplicate WR name {wr.name!r}")
        self.graph.add_node(wr.name, wr=wr)
        return wr

    def edge(self, a: str, b: str, kind: EdgeKind) -> None:
        for n in (a, b):
            if n not in self.graph:
                raise ValueError(f"edge names unknown WR {n!r}")
        self.graph.add_edge(a, b, kind=kind)

    def wr(self, name: str) -> WrTemplate:
        return self.graph.nodes[name]["wr"]  # type: ignore[no-any-return]

    def __contains__(self, name: str) -> bool:
        return name in self.graph

    def wrs(self) -> Iterator[WrTemplate]:
        """WRs in a stable order: by step, then role, then insertion."""
        nodes = [self.graph.nodes[n]["wr"] for n in self.graph.nodes]
        roles = list(Role)
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        return iter(sorted(nodes, key=lambda w: (w.step, roles.index(w.role), order[w.name])))

    def subchain(self, parts: set[str], name: str) -> Chain:
        """The WRs whose ``part`` is in ``parts`` (and the edges among them)."""
        keep = [n for n in self.graph.nodes if self.graph.nodes[n]["wr"].part in parts]
        sub = Chain(name, self.addr_le, self.graph.subgraph(keep).copy(), list(self.notes),
                    dict(self.headers))
        return sub

    def count(self, include_master: bool = True) -> int:
        return sum(1 for w in self.wrs() if include_master or w.role is not Role.MASTER)

    def capabilities(self) -> list[str]:
        """Capability flags of NicProfile this chain uses."""
        used: set[str] = set()
        for w in self.wrs():
            if w.opcode in (Opcode.WAIT, Opcode.ENABLE):
                used.add("wait_enable")
            if w.opcode in (Opcode.MASKED_CAS, Opcode.MASKED_FETCH_ADD):
                used.add("masked_atomics")
            if w.cond is not None:
                used.add("native_conditional")
            if w.targets_ctrl:
                used.add("cas_on_wqe")
            if w.remote_kind == "strided_table":
                used.add("strided_keys")
            if w.role in (Role.WORKER, Role.MASTER, Role.GATE):
                used.add("loopback")
        return sorted(used)
