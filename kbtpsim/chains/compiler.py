"""The chain compiler: one per-credit chain that serves LOAD, STORE and ALLOC_STORE.

A request credit owns one receive and one chain. The receive cannot know the opcode, so its
scatter list is the same for every request: the header and Data Descriptor go to a scratch
buffer ``req`` (except the Block Handle, scattered straight into the table-entry Read's
remote address, shifted one octet left: a strided key of stride 256 turns ``h << 8`` into
the address of entry ``h``), the body after the descriptor to a staging buffer ``stg``.

The chain then runs in *steps*; between steps the master QP WAITs for every CQE of the
step and ENABLEs the managed worker/connection QPs up to the next step's WRs, so a WQE is
never fetched before the octets placed into it have landed (rule ``held-back``):

1. *dispatch*: patches copy request fields into WQE fields; conditional **markers** test
   8-octet windows of the request against constants (version, opcode, flags, Generation 0,
   Status 0, handle range as an aligned power-of-two block, lengths) and each writes
   ``01`` into one octet of its variant's *arm word*;
2. the table-entry Read, armed only if the handle lies in the table's block (an
   out-of-range Read would be a remote access error that kills the QP);
3. patches of the entry's Block Offset and handle into later WQEs; the entry **marker**;
4+. the variant's WRs, each conditional on its arm word being all ``01``: data Write /
   Read, pool and entry Writes, the COMPLETION Send (gathered from the request, the entry
   and constants: the same octets the software target sends);
last. *commit*: per variant, a conditional Write of ``01`` (its CQE tells the CPU the NIC
   finished the request) and a conditional ENABLE of the credit's NOP on the *gate* QP.

On a NIC without native conditional WRs but with CAS-on-WQE (cx5), every condition is
lowered to RedN's construction (:mod:`kbtpsim.chains.lowering`, decision C5): the conditional WR
is posted disarmed (a NOP) and a masked CAS on its control word arms it.

Nothing outside the chain's own scratch memory and WQEs is written unless a variant's arm
word is complete, so a request that fails any test has had no effect: the CPU finds that
no commit CQE of the credit is a Write, processes the request with the software target,
and ENABLEs the gate itself. The next credit's master WAITs for the gate, so requests of a
connection complete in order whoever serves them.
"""

from __future__ import annotations

import itertools
from typing import Literal

from kbtpsim.chains.free import free_buildable
from kbtpsim.chains.ir import (
    Addr,
    Chain,
    CondSpec,
    Const,
    EdgeKind,
    Order,
    Place,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.chains.lowering import CCQE, RCQE, CasLowering
from kbtpsim.chains.variants import VariantSteps
from kbtpsim.chains.vocab import (
    ALLOW_UNSEALED,
    CONSTS,
    GO,
    INVALIDATE,
    OPERATIONS,
    REQ_LEN,
    SEAL,
    SESSION_OCTET,
    VARIANTS,
    Geometry,
    Variant,
    block_test,
    msg_length,
    window8,
)
from kbtpsim.nic.cq import CQE_BYTE_CNT, CQE_OP_OWN, CQE_REQ
from kbtpsim.nic.wqe import Opcode, WqeFlags

#: How the chain expresses its conditions: the profile's native conditional WRs, or a
#: masked CAS on each conditional WR's control word (RedN; :mod:`kbtpsim.chains.lowering`).
Lowering = Literal["native", "cas"]


class _Builder(VariantSteps, CasLowering):
    def __init__(self, addr_le: bool, atomic_order: Order, geo: Geometry,
                 variants: tuple[str, ...], lowering: Lowering = "native") -> None:
        self.lowering = lowering
        self.addr_le = addr_le
        self.ro: Order = "little" if addr_le else "big"  # request address fields, Block Offset
        self.ao = atomic_order
        self.geo = geo
        self.variants = [VARIANTS[v] for v in variants]
        self.chain = Chain("credit", addr_le)
        self.step_wrs: dict[int, list[str]] = {}
        #: markers that write an octet of a variant's arm word another marker also writes
        #: (alternatives: ALLOW_UNSEALED's entry marker, decision C10): producers of the
        #: word, not octets of it
        self.alt_producers: dict[str, list[str]] = {}

    # ---------------------------------------------------------------- helpers
    def add(self, wr: WrTemplate) -> WrTemplate:
        self.chain.add(wr)
        if wr.role in (Role.WORKER, Role.CONN):
            wr.signaled = wr.opcode is not Opcode.ENABLE
            self.step_wrs.setdefault(wr.step, []).append(wr.name)
        return wr

    def _move_last(self, name: str) -> None:
        """Move WR ``name`` behind the WRs added so far in its step (on its QP, behind
        those of its lane), before any edge exists (decision C31)."""
        wr = self.chain.wr(name)
        self.chain.graph.remove_node(name)
        self.step_wrs[wr.step].remove(name)
        self.add(wr)

    def marker(self, name: str, part: str, step: int, loc: str, producers: tuple[str, ...],
               compare: bytes, mask: bytes, about: str, arm: str, slot: int,
               word_order: Order = "octets", compare_source: Placed | None = None) -> None:
        self.add(WrTemplate(
            name, Role.WORKER, Opcode.RDMA_WRITE, part, step, inline=GO,
            fields={"raddr": Addr(f"buf:{arm}", slot), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read(loc, 8, producers, about), *window8(compare, mask), about,
                          word_order, compare_source),
            remote_kind="loopback", note=f"marker: {about} -> {arm}[{slot}]"))

    def read_ok_marker(self, v: Variant, read: str, step: int, arm: str, slot: int) -> str:
        """Decision C24: a marker (``arm``[``slot``]) that the connection WR ``read``, a
        data Read, completed without error: the opcode nibble of its CQE, in the
        connection QP's CQ buffer, is a requester's completion (the owner bit, which
        flips every pass around the ring, is left out). A flushed Read's CQE satisfies
        the WAITs too, and says so only here. Returns the marker's name."""
        name = f"m_{v.name}_rdok"
        self.marker(name, v.name, step, f"buf:{CCQE}_{read}+{CQE_OP_OWN - 7}", (read,),
                    bytes(8), bytes(7) + bytes([0xF0]), "the data Read completed (its "
                    f"CQE's opcode {CQE_REQ:#x}: no error)", arm, slot)
        return name

    def patch(self, name: str, part: str, step: int, src: list[tuple[str, int, str]],
              dest: str, what: str, order: Order, producers: tuple[str, ...],
              offset: int = 0, extra: tuple[Place, ...] = ()) -> None:
        """A loopback Write copying ``src`` pieces (loc, length, about) into ``dest``
        (``extra`` declares further fields the same octets run into)."""
        length = sum(n for _, n, _ in src) - sum(p.length for p in extra)
        self.add(WrTemplate(
            name, Role.WORKER, Opcode.RDMA_WRITE, part, step,
            fields={"raddr": Addr(dest, offset), "rkey": Addr("key:rings")},
            gather=tuple(Read(loc, n, producers, about) for loc, n, about in src),
            places=(Place(dest, length, what, order, offset), *extra),
            remote_kind="loopback", note=f"patch: {what}"))

    def _handle_src(self) -> tuple[str, int, str]:
        """The 7 handle octets that become ``h << 8`` (the top one is dropped): in the
        request's copy, or (C21) where the receive placed them, the LOAD's entry Read."""
        if self.recv_handle:
            return (f"wqe:{self.recv_wqe}.raddr", 7, "Block Handle[1:8]")
        if self.ro == "little":
            return ("buf:ct+12", 7, "Block Handle[0:7]")
        return ("buf:ct+13", 7, "Block Handle[1:8]")

    def _shift_at(self) -> int:
        return 1 if self.ro == "little" else 0

    def _uses_recv_handle(self) -> bool:
        """Decision C21: chains v2's LOAD with native conditions and per-operation
        dispatch reads its entry in its first step: the receive places the handle
        straight into that Read's remote address (with reader counts, C20, into the
        count's FetchAdd, and the Read follows it a step later). Big-endian request
        fields only (ADDR_LE off): the handle's seven address octets then directly follow
        its top octet, which stays beside the Request ID, so a COMPLETION gathers the
        Block Handle in two pieces."""
        return (self.lowering == "native" and self.ro == "big" and not self.geo.seqlock
                and any(self._load_direct(v) for v in self.variants))

    @property
    def recv_wqe(self) -> str:
        """C21: the WR whose remote address the receive places the handle into: the
        LOAD's entry Read, or, where the LOADs count their readers (C20), the reader
        count's FetchAdd, which must precede that Read on its QP."""
        return "load_readers" if self.geo.readers else "load_read"

    def _handle_window(self, block: tuple[int, int]) -> tuple[str, bytes, bytes]:
        """(location, compare, mask) of the test "handle in ``block``" on the 7 octets
        that make the entry address; with C21 the handle's top octet (dropped there) is
        tested by :meth:`_top_test`, in each variant's Generation/Status marker."""
        rc, rm = block_test(block, self.ro)
        if not self.recv_handle:
            return "buf:ct+12", rc, rm
        return f"wqe:{self.recv_wqe}.raddr", rc[1:] + b"\0", rm[1:] + b"\0"

    @staticmethod
    def _top_test(block: tuple[int, int]) -> tuple[int, int]:
        """(compare, mask) of the handle's top octet (C21: the receive leaves it at
        ``ct+12``, then Generation and Status)."""
        rc, rm = block_test(block, "big")
        return rc[0], rm[0]

    def armed(self, v: Variant, n_markers: int) -> CondSpec:
        compare = GO * n_markers
        mask = b"\xff" * n_markers
        c, m = window8(compare, mask)
        producers = (*self.arm_producers[v.name], *self.alt_producers.get(v.name, ()))
        return CondSpec(Read(f"buf:arm_{v.name}", 8, producers,
                             f"arm word of {v.name}"), c, m, f"{v.name} armed")

    # ---------------------------------------------------------------- the chain
    def build(self) -> Chain:
        ro, geo = self.ro, self.geo
        self.arm_producers: dict[str, list[str]] = {v.name: [] for v in self.variants}
        self.recv_handle = self._uses_recv_handle()
        # --- the receive: header to hdr / ct, descriptor to dd, body to stg ---
        places = [Place("buf:hdr", 4, "request[0:4] Version, Opcode, Flags")]
        if not self.recv_handle:
            places.append(Place("buf:ct", 20, "request[4:24] Request ID, Block Handle, "
                                "Generation, Status", "octets", 4))
        else:  # C21: handle[1:8] make h << 8 in the LOAD's entry Read; its top octet,
            # then Generation and Status, follow the Request ID
            places += [Place("buf:ct", 9, "request[4:13] Request ID, Block Handle[0]",
                             "octets", 4),
                       Place(f"wqe:{self.recv_wqe}.raddr", 7,
                             "request[13:20] Block Handle[1:8]"),
                       Place("buf:ct", 4, "request[20:24] Generation, Status", "octets",
                             13)]
        places += [Place("buf:dd", 16, "request[24:40] Data Descriptor"),
                   Place("buf:stg", geo.max_inline + 16,
                         "request[40:] Completion Descriptor / inline data")]
        self.add(WrTemplate("recv", Role.RECV, None, "dispatch", 0, places=tuple(places),
                            note="receive: scatter the request"))
        # --- step 1: patches and markers on the request ---
        self.patch("p_handle", "dispatch", 1, [self._handle_src()], "wqe:read_entry.raddr",
                   "Block Handle << 8 (stride 256)", ro, ("recv",), self._shift_at())
        need_dd = [v for v in self.variants if v.name in ("load", "store_read", "alloc_read")
                   and not self._load_direct(v)]  # C15's LOAD patches it in step 2
        for v in need_dd:
            target = {"load": "load_write", "store_read": "sr_read",
                      "alloc_read": "ar_read"}[v.name]
            self.patch(f"p_dd_{v.name}", v.name, 1,
                       [("buf:dd+4", 8, "request[28:36] DD Tagged Offset"),
                        ("buf:dd", 4, "request[24:28] DD STag")],
                       f"wqe:{target}.raddr", "Data Descriptor Tagged Offset", ro,
                       ("recv",), extra=(Place(f"wqe:{target}.rkey", 4, "DD STag", ro),))
        if self.variants:  # one copy of the receive CQE's byte count into device memory
            self.add(WrTemplate(
                "p_bc", Role.WORKER, Opcode.RDMA_WRITE, "dispatch", 1,
                fields={"raddr": Addr("buf:bc"), "rkey": Addr("key:scratch")},
                gather=(Read(f"buf:{RCQE}+{CQE_BYTE_CNT - 4}", 8, ("recv",),
                             "receive CQE octets 40..47: reserved, byte count"),),
                places=(Place("buf:bc", 8, "receive byte count (CQE octets 40..47)"),),
                remote_kind="loopback",
                note="copy the receive's byte count (CQE in the receive CQ's buffer) next to "
                "the markers"))
        tb_at, tb_c, tb_m = self._handle_window(geo.table_block)
        self.marker("m_table", "dispatch", 1, tb_at, ("recv",), tb_c, tb_m,
                    "handle in the table's block", "arm_read", 0)
        for v in self.variants:
            self._markers(v)
        # --- step 2: read the table entry ---
        self.add(WrTemplate(
            "read_entry", Role.WORKER, Opcode.RDMA_READ, "dispatch", 2,
            fields={"raddr": Placed("p_handle", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table")},
            places=(Place("buf:w", 8, "entry[0:8] Flags, Generation, Data Length", "big"),
                    Place("buf:bo", 8, "entry[8:16] Block Offset", ro, 4)),
            cond=CondSpec(Read("buf:arm_read", 8, ("m_table",), "arm word of the entry Read"),
                          *window8(GO * 2, b"\xff" * 2),
                          "handle in the table's block, session established (CPU octet)"),
            remote_kind="strided_table", note="read the table entry (strided key)"))
        # --- step 3+: per variant ---
        for v in self.variants:
            getattr(self, f"_v_{v.name}")(v)
        self._prune_unread_common()  # before the CAS lowering, which places fences
        if self.lowering == "cas":
            self._lower()
        self._sequence()
        self._fences()
        return self.chain

    def _prune_unread_common(self) -> None:
        """Decision C30: a WR of the common part that nothing reads is not built (the
        byte-count copy where every variant tests the receive CQE itself; the entry Read,
        with its handle patch and table marker, where no variant reads the entry it
        samples: a chain of LOADs that read their own, C21). A WR is read when another
        names it as a producer of what it reads, or reads a buffer it places
        (:meth:`~kbtpsim.chains.ir.WrTemplate.reads_what`)."""
        ch = self.chain
        while True:  # what every WR reads, once a round (not pairwise: reads_what)
            kept = list(ch.wrs())
            read = {n for r in kept for n in r.reads_from()}
            read_bufs = {b for r in kept for b in r.buffers_read()}
            dead = [w.name for w in kept if w.part == "dispatch" and w.role is Role.WORKER
                    and w.name not in read and not w.buffers_placed() & read_bufs]
            if not dead:
                return
            for name in dead:
                step = ch.wr(name).step
                ch.graph.remove_node(name)
                self.step_wrs[step].remove(name)
                if not self.step_wrs[step]:
                    del self.step_wrs[step]

    def _fences(self) -> None:
        """A FENCE WR waits for every earlier Read and atomic of its send queue: the
        queue-order edge into it becomes a ``fence`` edge (the verifier counts it for
        Read and atomic producers only)."""
        ch = self.chain
        for w in ch.wrs():
            if w.flags & WqeFlags.FENCE:
                for a, _ in list(ch.graph.in_edges(w.name)):
                    if ch.graph.edges[a, w.name]["kind"] is EdgeKind.QP_ORDER:
                        ch.edge(a, w.name, EdgeKind.FENCE)

    # ---------------------------------------------------------------- master sequence
    def _sequence(self) -> None:
        """Master WAIT/ENABLE per step, gate NOP, and the graph's edges."""
        ch = self.chain
        self.add(WrTemplate("gate_nop", Role.GATE, Opcode.NOP, "sequence", 99, signaled=True,
                            note="one per credit; the next credit WAITs for its CQE"))
        m: list[WrTemplate] = []
        m.append(self.add(WrTemplate(
            "wait_prev", Role.MASTER, Opcode.WAIT, "sequence", 0,
            fields={"target": Addr("cq:gate"), "count": Const(0, "credits before this one")},
            note="earlier requests of the connection are done")))
        m.append(self.add(WrTemplate(
            "wait_recv", Role.MASTER, Opcode.WAIT, "sequence", 0,
            fields={"target": Addr("cq:recv"), "count": Const(1, "this credit's receive")},
            note="the request has arrived")))
        ch.edge("recv", "wait_recv", EdgeKind.COMPLETION)
        steps = sorted(s for s in self.step_wrs if s > 0)
        cum = 0
        for i, s in enumerate(steps):
            names = self.step_wrs[s]
            for role in (Role.WORKER, Role.CONN):
                on = [n for n in names if ch.wr(n).role is role]
                if not on:
                    continue
                en = self.add(WrTemplate(
                    f"enable_{role.value}_{s}", Role.MASTER, Opcode.ENABLE, "sequence", s,
                    fields={"target": Addr(f"qp:{role.value}"), "count": Addr(f"wr:{on[-1]}", 1)},
                    note=f"release step {s} on the {role.value} QP"))
                m.append(en)
                for n in on:
                    ch.edge(en.name, n, EdgeKind.ENABLE)
            cum += sum(1 for n in names if ch.wr(n).signaled)
            if i + 1 < len(steps):
                w = self.add(WrTemplate(
                    f"wait_step_{s}", Role.MASTER, Opcode.WAIT, "sequence", s,
                    fields={"target": Addr("cq:chain"), "count": Const(cum, "CQEs so far")},
                    note=f"every WR of step {s} has completed"))
                m.append(w)
                for n in names:
                    if ch.wr(n).signaled:
                        ch.edge(n, w.name, EdgeKind.COMPLETION)
        for a, b in itertools.pairwise(m):
            ch.edge(a.name, b.name, EdgeKind.QP_ORDER)
        for v in self.variants:
            ch.edge(f"release_{v.name}", "gate_nop", EdgeKind.ENABLE)
            if f"early_{v.name}" in ch:  # decision C16: a sealed LOAD releases early
                ch.edge(f"early_{v.name}", "gate_nop", EdgeKind.ENABLE)
        # queue order within each managed QP
        for role in (Role.WORKER, Role.CONN):
            seq = [w.name for w in ch.wrs() if w.role is role]
            for x, y in itertools.pairwise(seq):
                ch.edge(x, y, EdgeKind.QP_ORDER)
        ch.notes.append(f"signaled CQEs per credit on the chain CQ: {cum}")


def build_chain(addr_le: bool, atomic_order: Order = "little", geo: Geometry | None = None,
                variants: tuple[str, ...] | None = None,
                lowering: Lowering = "native") -> Chain:
    """The per-credit chain serving ``variants`` (default: all that this geometry and
    lowering can build: FREE only with the LOADs' reader counts, decision C20), its
    conditions expressed with native conditional WRs or (``lowering="cas"``) with
    CAS-on-WQE."""
    geo = geo or Geometry()
    if variants is None:
        variants = tuple(v for v in VARIANTS if v != "free" or free_buildable(geo, lowering))
    return _Builder(addr_le, atomic_order, geo, variants, lowering).build()


def build_software(addr_le: bool, geo: Geometry | None = None) -> Chain:
    """No fast path: a receive per credit whose CQE wakes the CPU (every request)."""
    full = build_chain(addr_le, "little", geo, ())
    sw = full.subchain({"dispatch"}, "software")
    for name in [n for n in sw.graph.nodes if n != "recv"]:
        sw.graph.remove_node(name)
    return sw


#: the vocabulary (kbtpsim.chains.vocab) the rest of kbtpsim imports from here
__all__ = [
    "ALLOW_UNSEALED",
    "CONSTS",
    "GO",
    "INVALIDATE",
    "OPERATIONS",
    "RCQE",
    "REQ_LEN",
    "SEAL",
    "SESSION_OCTET",
    "VARIANTS",
    "Geometry",
    "Lowering",
    "Variant",
    "block_test",
    "build_chain",
    "build_software",
    "msg_length",
    "window8",
]
