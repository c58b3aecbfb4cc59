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
from dataclasses import dataclass
from typing import Literal

from kbtpsim.atomics import RING_ADD_DATA, ring_add_mask
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
from kbtpsim.chains.lowering import M64, RCQE, CasLowering
from kbtpsim.nic.cq import CQE_BYTE_CNT
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.wqe import Opcode, WqeFlags

GO = b"\x01"
INVALIDATE = 0x0008  #: RequestFlag.INVALIDATE (FORMATS.md "Flags")
SEAL = 0x0002  #: RequestFlag.SEAL
ALLOW_UNSEALED = 0x0010  #: RequestFlag.ALLOW_UNSEALED
#: Constants every chain gathers from (one shared buffer per connection).
CONSTS = {"k_hdr": bytes([1, 0x20, 0, 0]), "k_zero": bytes(8), "k_valid": b"\x00\x01",
          "k_ones": b"\xff" * 8}
REQ_LEN = 40  #: header (24) + Data Descriptor (16)
#: Octet of the entry Read's arm word the CPU presets to 01 only while the connection's
#: session is established (after HELLO, before GOODBYE): without the entry Read every
#: entry marker fails (``w`` is preset to all ones), so no variant can arm.
SESSION_OCTET = 1

# Request layout (FORMATS.md "Common header", "Descriptors")
RID, HANDLE, GEN_STATUS, DD_STAG, DD_TO, DD_LEN = 4, 12, 20, 24, 28, 36


@dataclass(frozen=True, slots=True)
class Geometry:
    """What the constants in a chain depend on."""

    block_size: int = 4096
    max_inline: int = 4096
    table_block: tuple[int, int] = (0x4000, 8)  #: (base, bits): handles the table key covers
    load_block: tuple[int, int] = (0x4000, 8)  #: handles this connection may LOAD
    own_block: tuple[int, int] = (0x4000, 4)  #: handles this connection may store to
    ring_slots: int = 8  #: N, slots of the ring the connection allocates from
    #: a LOAD re-reads the entry after the data (decision O3); False where the target
    #: returns a freed block only once no chain can still read it (chains v2, C13)
    seqlock: bool = True


@dataclass(frozen=True, slots=True)
class Variant:
    """One fast path of the per-credit chain."""

    name: str  #: "load", "store_inline", "store_read", "alloc_inline", "alloc_read"
    op: str  #: "LOAD", "STORE", "ALLOC_STORE"
    opcode: int
    flags: int  #: flags the fast path accepts ...
    flags_free: int  #: ... with these bits free to vary
    inline: bool
    about: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("load", "LOAD", 0x10, 0x0000, 0x0018, False,
            "LOAD, flags 0 or ALLOW_UNSEALED [| INVALIDATE], of a full block, sealed "
            "(or VALID only, with ALLOW_UNSEALED)"),
    Variant("store_inline", "STORE", 0x11, 0x0001, 0x0002, True,
            "STORE, INLINE [| SEAL], of a full block"),
    Variant("store_read", "STORE", 0x11, 0x0000, 0x000A, False,
            "STORE, RDMA Read source, flags 0 [| SEAL] [| INVALIDATE], of a full block"),
    Variant("alloc_inline", "ALLOC_STORE", 0x12, 0x0001, 0x0002, True,
            "ALLOC_STORE, INLINE [| SEAL], of a full block"),
    Variant("alloc_read", "ALLOC_STORE", 0x12, 0x0000, 0x000A, False,
            "ALLOC_STORE, RDMA Read source, flags 0 [| SEAL] [| INVALIDATE], of a full "
            "block"),
)}
#: Operation name (CLI) -> variants.
OPERATIONS: dict[str, tuple[str, ...]] = {
    "LOAD": ("load",),
    "STORE": ("store_inline", "store_read"),
    "STORE-INLINE": ("store_inline",),
    "STORE-READ": ("store_read",),
    "ALLOC_STORE": ("alloc_inline", "alloc_read"),
    "ALLOC_STORE-INLINE": ("alloc_inline",),
    "ALLOC_STORE-READ": ("alloc_read",),
}


def msg_length(v: Variant, geo: Geometry) -> int:
    """The octet count of a request the variant serves: header and Data Descriptor, plus
    Block Size octets of inline data for INLINE variants."""
    return REQ_LEN + (geo.block_size if v.inline else 0)


def _window(compare: bytes, mask: bytes) -> tuple[bytes, bytes]:
    return compare.ljust(8, b"\0"), mask.ljust(8, b"\0")


def _block_test(block: tuple[int, int], order: Order) -> tuple[bytes, bytes]:
    """Compare/mask octets testing a handle (in ``order``) against an aligned block; the
    top octet is tested too (it is dropped by the << 8 of the strided address)."""
    base, bits = block
    o: ByteOrder = "little" if order == "little" else "big"
    mask = (M64 << bits) & M64
    return base.to_bytes(8, o), mask.to_bytes(8, o)


#: How the chain expresses its conditions: the profile's native conditional WRs, or a
#: masked CAS on each conditional WR's control word (RedN; :mod:`kbtpsim.chains.lowering`).
Lowering = Literal["native", "cas"]
class _Builder(CasLowering):
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

    def marker(self, name: str, part: str, step: int, loc: str, producers: tuple[str, ...],
               compare: bytes, mask: bytes, about: str, arm: str, slot: int,
               word_order: Order = "octets", compare_source: Placed | None = None) -> None:
        self.add(WrTemplate(
            name, Role.WORKER, Opcode.RDMA_WRITE, part, step, inline=GO,
            fields={"raddr": Addr(f"buf:{arm}", slot), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read(loc, 8, producers, about), *_window(compare, mask), about,
                          word_order, compare_source),
            remote_kind="loopback", note=f"marker: {about} -> {arm}[{slot}]"))

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
        """The 7 handle octets that become ``h << 8`` (the top one is dropped)."""
        if self.ro == "little":
            return ("buf:ct+12", 7, "Block Handle[0:7]")
        return ("buf:ct+13", 7, "Block Handle[1:8]")

    def _shift_at(self) -> int:
        return 1 if self.ro == "little" else 0

    def armed(self, v: Variant, n_markers: int) -> CondSpec:
        compare = GO * n_markers
        mask = b"\xff" * n_markers
        c, m = _window(compare, mask)
        producers = (*self.arm_producers[v.name], *self.alt_producers.get(v.name, ()))
        return CondSpec(Read(f"buf:arm_{v.name}", 8, producers,
                             f"arm word of {v.name}"), c, m, f"{v.name} armed")

    # ---------------------------------------------------------------- the chain
    def build(self) -> Chain:
        ro, geo = self.ro, self.geo
        self.arm_producers: dict[str, list[str]] = {v.name: [] for v in self.variants}
        # --- the receive: header to hdr / ct, descriptor to dd, body to stg ---
        places = [Place("buf:hdr", 4, "request[0:4] Version, Opcode, Flags"),
                  Place("buf:ct", 20, "request[4:24] Request ID, Block Handle, Generation, "
                        "Status", "octets", 4),
                  Place("buf:dd", 16, "request[24:40] Data Descriptor"),
                  Place("buf:stg", geo.max_inline + 16,
                        "request[40:] Completion Descriptor / inline data")]
        self.add(WrTemplate("recv", Role.RECV, None, "dispatch", 0, places=tuple(places),
                            note="receive: scatter the request"))
        # --- step 1: patches and markers on the request ---
        self.patch("p_handle", "dispatch", 1, [self._handle_src()], "wqe:read_entry.raddr",
                   "Block Handle << 8 (stride 256)", ro, ("recv",), self._shift_at())
        need_dd = [v for v in self.variants if v.name in ("load", "store_read", "alloc_read")]
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
        tb_c, tb_m = _block_test(geo.table_block, ro)
        self.marker("m_table", "dispatch", 1, "buf:ct+12", ("recv",), tb_c, tb_m,
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
                          *_window(GO * 2, b"\xff" * 2),
                          "handle in the table's block, session established (CPU octet)"),
            remote_kind="strided_table", note="read the table entry (strided key)"))
        # --- step 3+: per variant ---
        for v in self.variants:
            getattr(self, f"_v_{v.name}")(v)
        if self.lowering == "cas":
            self._lower()
        self._sequence()
        self._fences()
        return self.chain

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

    def _markers(self, v: Variant) -> None:
        ro, geo = self.ro, self.geo
        arm = f"arm_{v.name}"
        hdr_c, hdr_m = _window(bytes([1, v.opcode]) + v.flags.to_bytes(2, "big"),
                               b"\xff\xff" + (0xFFFF & ~v.flags_free).to_bytes(2, "big"))
        tests: list[tuple[str, str, tuple[str, ...], bytes, bytes, str]] = [
            ("hdr", "buf:hdr", ("recv",), hdr_c, hdr_m,
             f"version 1, opcode {v.op}, flags {v.flags:#06x} (free {v.flags_free:#06x})"),
            ("gs", "buf:ct+20", ("recv",), bytes(8), b"\xff\xff\xff\xff",
             "Generation 0 (any), Status 0"),
        ]
        block = geo.load_block if v.op == "LOAD" else geo.own_block
        rc, rm = _block_test(block, ro)
        tests.append(("range", "buf:ct+12", ("recv",), rc, rm,
                      "handle in the " + ("readable" if v.op == "LOAD" else "own") + " range"))
        len_c, len_m = _window(geo.block_size.to_bytes(4, "little" if ro == "little" else "big"),
                               b"\xff" * 4)
        tests.append(("len", "buf:dd+12", ("recv",), len_c, len_m,
                      "Data Descriptor Length = Block Size"))
        if v.inline:
            tests.append(("zdd", "buf:dd", ("recv",), bytes(8), b"\xff" * 8,
                          "INLINE: STag 0, Tagged Offset[0:4] 0"))
            tests.append(("zdd2", "buf:dd+4", ("recv",), bytes(8), b"\xff" * 8,
                          "INLINE: Tagged Offset 0"))
        # the message's length, from the receive's CQE in the receive CQ's buffer: the
        # header, the descriptor and (INLINE) exactly Block Size octets of data, nothing
        # more; anything else (trailing octets, short or long inline data) -> CPU
        n_msg = msg_length(v, geo)
        tests.append(("msg", "buf:bc", ("p_bc",),
                      bytes(4) + n_msg.to_bytes(4, "big"), b"\xff" * 8,
                      f"receive byte count = {n_msg} (CQE)"))
        for i, (tag, loc, prods, c, m, about) in enumerate(tests):
            name = f"m_{v.name}_{tag}"
            # the byte count is tested in step 3, on the device-memory copy p_bc made
            self.marker(name, v.name, 3 if tag == "msg" else 1, loc, prods, c, m, about,
                        arm, i)
            self.arm_producers[v.name].append(name)

    def _entry_marker(self, v: Variant, compare: bytes, mask: bytes, about: str) -> None:
        slot = len(self.arm_producers[v.name])
        name = f"m_{v.name}_entry"
        self.marker(name, v.name, 3, "buf:w", ("read_entry",), compare, mask, about,
                    f"arm_{v.name}", slot, "big")
        self.arm_producers[v.name].append(name)

    def _completion(self, v: Variant, name: str, step: int, length_src: Read,
                    bo_loc: str, bo_producers: tuple[str, ...]) -> None:
        gather = (
            Read("buf:ct", 20, ("recv",), "COMPLETION header: version 1, opcode, flags 0 "
                 "(preset), Request ID, Block Handle (received)"),
            Read("buf:w+2", 2, ("read_entry",), "entry Generation"),
            Read("buf:k_zero", 2, (), "Status OK"),
            length_src,
            Read(bo_loc, 12, bo_producers, "reserved 0 (preset), entry Block Offset"),
        )
        n = len(self.arm_producers[v.name])
        send = self.add(WrTemplate(name, Role.CONN, Opcode.SEND, v.name, step,
                                   gather=gather, cond=self.armed(v, n),
                                   note="COMPLETION (Send)"))
        if v.flags_free & INVALIDATE:
            self._invalidate(v, send)

    def _invalidate(self, v: Variant, send: WrTemplate) -> None:
        """INVALIDATE (draft, "Completion"; T10): the COMPLETION goes out as a Send with
        Invalidate of the Data Descriptor's STag. In step 1, a patch copies the STag into
        the Send's invalidate key (control segment octets 12..15, as mlx5's SEND_INV carries
        the rkey in the immediate field) and a conditional loopback Write of the
        SEND_WITH_INVALIDATE opcode into its opcode octet runs only if the request's Flags
        have INVALIDATE (the only bit under the mask). SEND and SEND_WITH_INVALIDATE have
        the same segments; the Send is held back (step >= 4) until both have landed."""
        tag = v.name
        self.patch(f"p_inv_{tag}", v.name, 1, [("buf:dd", 4, "request[24:28] DD STag")],
                   f"wqe:{send.name}.imm", "DD STag (key to invalidate)", self.ro, ("recv",))
        flag = INVALIDATE.to_bytes(2, "big")  # Flags are big-endian (D3)
        dest = f"wqe:{send.name}.opcode"
        self.add(WrTemplate(
            f"c_inv_{tag}", Role.WORKER, Opcode.RDMA_WRITE, v.name, 1,
            inline=bytes([Opcode.SEND_WITH_INVALIDATE]),
            fields={"raddr": Addr(dest), "rkey": Addr("key:rings")},
            places=(Place(dest, 1, "opcode SEND_WITH_INVALIDATE"),),
            cond=CondSpec(Read("buf:hdr", 8, ("recv",), "request Flags"),
                          *_window(b"\0\0" + flag, b"\0\0" + flag), "Flags has INVALIDATE"),
            remote_kind="loopback",
            note="conditional patch: Send -> Send with Invalidate if INVALIDATE"))
        send.fields["imm"] = Placed(f"p_inv_{tag}", "DD STag", self.ro, "patch",
                                    Const(0, "no key"))
        send.fields["opcode"] = Placed(f"c_inv_{tag}", "SEND_WITH_INVALIDATE if INVALIDATE",
                                       "octets", "patch", Const(int(Opcode.SEND), "SEND"))
        send.note = "COMPLETION (Send, or Send with Invalidate of the DD STag: INVALIDATE)"

    @staticmethod
    def _flag_cond(flag: int, is_set: bool, about: str) -> CondSpec:
        """The request's Flags (big-endian whatever ADDR_LE, D3) with ``flag`` set or clear,
        the only bit under the mask."""
        f = flag.to_bytes(2, "big")
        return CondSpec(Read("buf:hdr", 8, ("recv",), "request Flags"),
                        *_window(b"\0\0" + (f if is_set else b"\0\0"), b"\0\0" + f), about)

    def _allow_unsealed(self, v: Variant) -> None:
        """ALLOW_UNSEALED (draft, "Block Load" step 1: the entry MUST be VALID, and SEALED
        unless ALLOW_UNSEALED is set; decision C10). A second entry marker ``m_V_entry_u``
        tests VALID without SEALED (and Data Length = Block Size, as the first) and writes
        ``01`` into octet 7 of the arm word, which no armed test reads; ``c_au_V``, a
        conditional patch in step 1 run only if the request's Flags have ALLOW_UNSEALED,
        copies the sealed marker's remote address (its arm-word octet: a WQE field set at
        posting) into the second marker's, so either marker arms the variant. The masks
        stay constant: an OR of the two entry tests, the second ANDed with the flag.
        Without the flag an unsealed entry arms nothing (CPU: NOT_SEALED)."""
        slot = len(self.arm_producers[v.name]) - 1  # the sealed entry marker's octet
        assert slot < 7, "octet 7 of the arm word is the unsealed marker's sink"
        sealed, name, patch = f"m_{v.name}_entry", f"m_{v.name}_entry_u", f"c_au_{v.name}"
        self.marker(name, v.name, 3, "buf:w", ("read_entry",),
                    *_window(b"\x00\x01\x00\x00" + self.geo.block_size.to_bytes(4, "big"),
                             b"\xff\xff\x00\x00\xff\xff\xff\xff"),
                    "entry VALID, not SEALED, Data Length = Block Size", f"arm_{v.name}", 7,
                    "big")
        self.chain.wr(name).fields["raddr"] = Placed(
            patch, f"{sealed}'s arm-word octet if ALLOW_UNSEALED", "octets", "patch",
            Addr(f"buf:arm_{v.name}", 7))
        self.chain.wr(name).note = (f"marker: entry VALID, not SEALED -> arm_{v.name}[{slot}] "
                                    f"if ALLOW_UNSEALED, else arm_{v.name}[7] (not tested)")
        dest = f"wqe:{name}.raddr"
        self.add(WrTemplate(
            patch, Role.WORKER, Opcode.RDMA_WRITE, v.name, 1,
            fields={"raddr": Addr(dest), "rkey": Addr("key:rings")},
            gather=(Read(f"wqe:{sealed}.raddr", 8, (),
                         f"{sealed}'s remote address (arm_{v.name}[{slot}], set at posting)"),),
            places=(Place(dest, 8, f"remote address arm_{v.name}[{slot}]"),),
            cond=self._flag_cond(ALLOW_UNSEALED, True, "Flags has ALLOW_UNSEALED"),
            remote_kind="loopback",
            note="conditional patch: an unsealed entry arms the LOAD if ALLOW_UNSEALED"))
        self.alt_producers.setdefault(v.name, []).append(name)

    def _seal_flags(self, v: Variant) -> Read:
        """SEAL with a Read source (draft, "Block Mapped Store" step 3: it updates Data
        Length and, if SEAL is set, sets SEALED; decision C10): two conditional loopback
        Writes in step 1, one per value of the request's SEAL bit (the only bit under
        their masks: exactly one runs), write the entry's new Flags, VALID or VALID|SEALED
        (big-endian, D3), into the scratch word ``fl_V``, which the entry update gathers.
        The update itself is unchanged: after the data, in one Write with the Generation
        and Data Length."""
        buf = f"buf:fl_{v.name}"
        names = []
        for tag, is_set, flags in (("noseal", False, 0x0001), ("seal", True, 0x0003)):
            what = "VALID|SEALED" if is_set else "VALID"
            names.append(f"c_{tag}_{v.name}")
            self.add(WrTemplate(
                names[-1], Role.WORKER, Opcode.RDMA_WRITE, v.name, 1,
                inline=flags.to_bytes(2, "big"),
                fields={"raddr": Addr(buf), "rkey": Addr("key:scratch")},
                places=(Place(buf, 2, f"new entry Flags {what}", "big"),),
                cond=self._flag_cond(SEAL, is_set, "Flags has SEAL" if is_set
                                     else "Flags without SEAL"),
                remote_kind="loopback",
                note=f"new entry Flags {what} if SEAL is {'set' if is_set else 'clear'}"))
        return Read(buf, 2, tuple(names), "new entry Flags: VALID, | SEALED if SEAL")

    def _v_load(self, v: Variant) -> None:
        bs, ro = self.geo.block_size, self.ro
        self.patch("p_bo_load", v.name, 3, [("buf:bo+4", 8, "entry Block Offset")],
                   "wqe:load_write.sge0.addr", "entry Block Offset", ro, ("read_entry",))
        self._entry_marker(v, *_window(b"\x00\x03\x00\x00" + bs.to_bytes(4, "big"),
                                       b"\xff\xff\x00\x00\xff\xff\xff\xff"),
                           "entry VALID|SEALED, Data Length = Block Size")
        self._allow_unsealed(v)
        n = len(self.arm_producers[v.name])
        self.add(WrTemplate(
            "load_write", Role.CONN, Opcode.RDMA_WRITE, v.name, 4,
            fields={"raddr": Placed("p_dd_load", "DD Tagged Offset", ro, "patch"),
                    "rkey": Placed("p_dd_load", "DD STag", ro, "patch"),
                    "sge0.addr": Placed("p_bo_load", "entry Block Offset", ro, "patch"),
                    "sge0.count": Const(bs, "Block Size"), "sge0.lkey": Addr("key:pool")},
            gather=(Read("pool", bs, (), "the block"),), cond=self.armed(v, n),
            remote_kind="initiator", note="RDMA Write of the block to the initiator"))
        if self.geo.seqlock:
            self._load_recheck(v, n)
        # without the re-read the COMPLETION follows the data Write in the same step, on
        # the same QP: its delivery implies the data's (draft, "Completion"; RFC 5040)
        send_step = 7 if self.geo.seqlock else 4
        self._completion(v, "load_send", send_step, Read("buf:w+4", 4, ("read_entry",),
                                                         "entry Data Length"),
                         "buf:bo", ("read_entry",))
        self._commit(v, send_step + 1)

    def _load_recheck(self, v: Variant, slot: int) -> None:
        """Seqlock (decision O3): after the data Write completed (the block has been read),
        re-read the entry; only if its Flags and Generation equal the first Read's does a
        marker complete the arm word, so the COMPLETION and the commit run. Otherwise the
        chain hands the LOAD over: a FREE (and a re-allocation of the block) between the
        entry Read and the data Read changed the Generation (draft, "Block Free")."""
        ro = self.ro
        self.patch("p_h_lrr", v.name, 1, [self._handle_src()], "wqe:load_reread.raddr",
                   "Block Handle << 8", ro, ("recv",), self._shift_at())
        self.patch("p_lrr_cmp", v.name, 3, [("buf:w", 4, "entry Flags, Generation")],
                   "wqe:m_load_same.cond_compare", "entry Flags, Generation (first Read)",
                   "octets", ("read_entry",))
        self.add(WrTemplate(
            "load_reread", Role.WORKER, Opcode.RDMA_READ, v.name, 5,
            fields={"raddr": Placed("p_h_lrr", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table")},
            places=(Place("buf:lrr", 8, "entry[0:8] again, after the data Write", "big"),),
            cond=self.armed(v, slot), remote_kind="strided_table",
            note="re-read the entry after the block was read (seqlock)"))
        self.add(WrTemplate(
            "m_load_same", Role.WORKER, Opcode.RDMA_WRITE, v.name, 6, inline=GO,
            fields={"raddr": Addr(f"buf:arm_{v.name}", slot), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read("buf:lrr", 8, ("load_reread",), "entry re-read"),
                          *_window(b"", b"\xff" * 4), "entry Flags and Generation unchanged",
                          "octets", Placed("p_lrr_cmp", "entry Flags, Generation",
                                           "octets", "patch")),
            remote_kind="loopback",
            note=f"marker: the entry did not change while the block was read -> "
            f"arm_{v.name}[{slot}]"))
        self.arm_producers[v.name].append("m_load_same")

    def _store_common(self, v: Variant, data_step: int) -> str:
        """Entry marker, handle patch and the entry update; returns the update's name."""
        tag = "si" if v.inline else "sr"
        self.patch(f"p_h_{tag}", v.name, 1, [self._handle_src()], f"wqe:{tag}_upd.raddr",
                   "Block Handle << 8", self.ro, ("recv",), self._shift_at())
        self._entry_marker(v, *_window(b"\x00\x01", b"\xff\xff"), "entry VALID, not SEALED")
        n = len(self.arm_producers[v.name])
        flags = (Read("buf:hdr+2", 2, ("recv",), "request Flags (INLINE|SEAL = VALID|SEALED)")
                 if v.inline else self._seal_flags(v) if v.flags_free & SEAL
                 else Read("buf:k_valid", 2, (), "VALID"))
        self.add(WrTemplate(
            f"{tag}_upd", Role.WORKER, Opcode.RDMA_WRITE, v.name, data_step + 1,
            fields={"raddr": Placed(f"p_h_{tag}", "Block Handle << 8", self.ro, "patch"),
                    "rkey": Addr("key:table")},
            gather=(flags, Read("buf:w+2", 2, ("read_entry",), "entry Generation"),
                    Read("buf:k_bs", 4, (), "Data Length = Block Size")),
            cond=self.armed(v, n), remote_kind="strided_table",
            note="update the entry: Flags, Generation, Data Length"))
        return f"{tag}_upd"

    def _v_store_inline(self, v: Variant) -> None:
        bs, ro = self.geo.block_size, self.ro
        self.patch("p_bo_si", v.name, 3, [("buf:bo+4", 8, "entry Block Offset")],
                   "wqe:si_copy.raddr", "entry Block Offset", ro, ("read_entry",))
        self._store_common(v, 4)
        n = len(self.arm_producers[v.name])
        self.add(WrTemplate(
            "si_copy", Role.WORKER, Opcode.RDMA_WRITE, v.name, 4,
            fields={"raddr": Placed("p_bo_si", "entry Block Offset", ro, "patch"),
                    "rkey": Addr("key:pool")},
            gather=(Read("buf:stg", bs, ("recv",), "inline data"),), cond=self.armed(v, n),
            remote_kind="pool", note="copy the inline data into the block"))
        self._completion(v, "si_send", 6, Read("buf:k_bs", 4, (), "Data Length"),
                         "buf:bo", ("read_entry",))
        self._commit(v, 7)

    def _v_store_read(self, v: Variant) -> None:
        bs, ro = self.geo.block_size, self.ro
        self.patch("p_bo_sr", v.name, 3, [("buf:bo+4", 8, "entry Block Offset")],
                   "wqe:sr_read.sge0.addr", "entry Block Offset", ro, ("read_entry",))
        self._store_common(v, 4)
        n = len(self.arm_producers[v.name])
        self.add(WrTemplate(
            "sr_read", Role.CONN, Opcode.RDMA_READ, v.name, 4,
            fields={"raddr": Placed("p_dd_store_read", "DD Tagged Offset", ro, "patch"),
                    "rkey": Placed("p_dd_store_read", "DD STag", ro, "patch"),
                    "sge0.addr": Placed("p_bo_sr", "entry Block Offset", ro, "patch"),
                    "sge0.count": Const(bs, "Block Size"), "sge0.lkey": Addr("key:pool")},
            places=(Place("pool", bs, "the initiator's data"),), cond=self.armed(v, n),
            remote_kind="initiator", note="RDMA Read of the data into the block"))
        self._completion(v, "sr_send", 6, Read("buf:k_bs", 4, (), "Data Length"),
                         "buf:bo", ("read_entry",))
        self._commit(v, 7)

    def _alloc(self, v: Variant) -> None:
        """ALLOC_STORE (design; verified, not posted): FetchAdd on Head, Read the slot,
        Sequence marker, consume the slot, data, entry (Data Length and Block Offset, then
        Flags and Generation + 1 by a masked FetchAdd on the big-endian entry word, a
        conditional second add skipping 0), re-read the entry word, completion.

        Quota: the CPU presets octet 7 of the arm word to 01 only in credits it allows an
        allocation (at most quota - usage of them at refill); other credits hand
        ALLOC_STORE to the CPU, which answers NO_SPACE or allocates in software."""
        ro, ao, bs = self.ro, self.ao, self.geo.block_size
        wo = ro  # a correct chain has request order = WQE order (else byte-order violations)
        tag = "ai" if v.inline else "ar"
        # arm word: the request markers (at most 7; the byte count's in step 3, so the
        # allocation starts in step 5) and, in octet 7, the CPU's quota octet;
        # a second word arm2: [0] the first word complete (fold), [1] entry not VALID,
        # [2] slot ready (Sequence = Ticket)
        n = len(self.arm_producers[v.name])
        assert n <= 7, "ALLOC_STORE: at most 7 request markers besides the quota octet"
        armed = self.armed(v, n)
        armed = CondSpec(armed.word, armed.compare[:7] + GO, armed.mask[:7] + b"\xff",
                         f"{v.name} armed (and the CPU's quota octet)")
        arm2 = f"arm2_{v.name}"
        self.marker(f"m_{v.name}_fold", v.name, 4, armed.word.loc, armed.word.producers,
                    armed.compare, armed.mask, armed.about, arm2, 0)
        self.marker(f"m_{v.name}_entry", v.name, 3, "buf:w", ("read_entry",),
                    *_window(b"\x00\x00", b"\xff\xff"), "entry Flags 0 (not VALID)", arm2, 1,
                    "big")
        armed = CondSpec(Read(f"buf:{arm2}", 8, (f"m_{v.name}_fold", f"m_{v.name}_entry"),
                              "second arm word"), *_window(GO * 2, b"\xff" * 2),
                         f"{v.name} armed, entry not VALID")
        self.add(WrTemplate(
            f"{tag}_fa_head", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, 5,
            fields={"raddr": Addr("ring:head"), "rkey": Addr("key:ring_head"),
                    "swap_add": Const(RING_ADD_DATA, "Add Data"),
                    "add_mask": Const(ring_add_mask(self.geo.ring_slots),
                                      "bit 63 | bit 31 | bit n+3")},
            places=(Place("buf:fa", 8, "FetchAdd result: Ticket, Slot Offset", ao),),
            cond=armed, remote_kind="ring", note="take a ticket"))
        # the Slot Offset is the low half of the counter word (octets 4..7 big-endian)
        off_src = 4 if ao == "big" else 0
        off_dst = 4 if wo == "big" else 0
        self.patch(f"{tag}_p_slot", v.name, 6, [(f"buf:fa+{off_src}", 4, "Slot Offset")],
                   f"wqe:{tag}_read_slot.raddr", "Slot Offset", ao, (f"{tag}_fa_head",),
                   off_dst)
        self.patch(f"{tag}_p_cons", v.name, 6, [(f"buf:fa+{off_src}", 4, "Slot Offset")],
                   f"wqe:{tag}_consume.raddr", "Slot Offset", ao, (f"{tag}_fa_head",),
                   off_dst)
        self.patch(f"{tag}_p_tkt", v.name, 6, [(f"buf:fa+{4 - off_src}", 4, "Ticket")],
                   f"wqe:{tag}_seq.cond_compare", "Ticket", ao, (f"{tag}_fa_head",))
        self.add(WrTemplate(
            f"{tag}_read_slot", Role.WORKER, Opcode.RDMA_READ, v.name, 7,
            fields={"raddr": Placed(f"{tag}_p_slot", "Slot Offset", ao, "patch",
                                    Addr("region:ring")),
                    "rkey": Addr("key:ring")},
            places=(Place("buf:seq", 8, "slot Sequence, reserved", "big"),
                    Place("buf:bo2", 8, "slot Block Offset", ro, 4)),
            cond=armed, remote_kind="ring", note="read the slot"))
        self.add(WrTemplate(
            f"{tag}_seq", Role.WORKER, Opcode.RDMA_WRITE, v.name, 8, inline=GO,
            fields={"raddr": Addr(f"buf:{arm2}", 2), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read("buf:seq", 8, (f"{tag}_read_slot",), "slot Sequence"),
                          *_window(b"", b"\xff" * 4), "slot Sequence = ticket", "big",
                          Placed(f"{tag}_p_tkt", "Ticket", ao, "patch")),
            remote_kind="loopback",
            note="marker: the slot holds this ticket's block (not ready: the CPU takes over "
            "with this ticket)"))
        # draft, "Free-Block Ring", Allocation: the slot holds the block once its Sequence
        # equals the ticket *and* its Block Offset is not all ones. Conditions test
        # equality only, so a second marker, after the first on the same QP, clears the
        # octet again when the Block Offset is all ones (a consumed slot)
        self.add(WrTemplate(
            f"{tag}_consumed", Role.WORKER, Opcode.RDMA_WRITE, v.name, 8, inline=b"\x00",
            fields={"raddr": Addr(f"buf:{arm2}", 2), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read("buf:bo2+4", 8, (f"{tag}_read_slot",), "slot Block Offset"),
                          *_window(b"\xff" * 8, b"\xff" * 8),
                          "slot Block Offset all ones (consumed)"),
            remote_kind="loopback",
            note="marker: the slot is consumed (Block Offset all ones): not ready"))
        data_wr = f"{tag}_copy" if v.inline else "ar_read"
        data_field = "raddr" if v.inline else "sge0.addr"
        self.patch(f"{tag}_p_bo", v.name, 8, [("buf:bo2+4", 8, "slot Block Offset")],
                   f"wqe:{data_wr}.{data_field}", "slot Block Offset", ro,
                   (f"{tag}_read_slot",))
        for i, target in ((1, "ent_lo"), (2, "gen"), (3, "gen0"), (4, "reread")):
            what = "Block Handle << 8" + (" | 4 (Data Length, Block Offset)" if i == 1 else "")
            self.patch(f"{tag}_p_h{i}", v.name, 1, [self._handle_src()],
                       f"wqe:{tag}_{target}.raddr", what, ro, ("recv",), self._shift_at())
        ready = CondSpec(Read(f"buf:{arm2}", 8, (f"m_{v.name}_fold", f"m_{v.name}_entry",
                                                  f"{tag}_seq", f"{tag}_consumed"),
                              "second arm word"),
                         *_window(GO * 3, b"\xff" * 3), "slot ready for this ticket")
        self.add(WrTemplate(
            f"{tag}_consume", Role.WORKER, Opcode.RDMA_WRITE, v.name, 9,
            fields={"raddr": Placed(f"{tag}_p_cons", "Slot Offset", ao, "patch",
                                    Addr("region:ring")),
                    "rkey": Addr("key:ring")},
            gather=(Read("buf:seq", 4, (f"{tag}_read_slot",), "Sequence (unchanged)"),
                    Read("buf:k_zero", 4, (), "reserved"),
                    Read("buf:k_ones", 8, (), "Block Offset all ones: consumed")),
            cond=ready, remote_kind="ring", note="mark the slot consumed"))
        if v.inline:
            self.add(WrTemplate(
                data_wr, Role.WORKER, Opcode.RDMA_WRITE, v.name, 9,
                fields={"raddr": Placed(f"{tag}_p_bo", "slot Block Offset", ro, "patch"),
                        "rkey": Addr("key:pool")},
                gather=(Read("buf:stg", bs, ("recv",), "inline data"),), cond=ready,
                remote_kind="pool", note="write the data into the block"))
        else:
            self.add(WrTemplate(
                data_wr, Role.CONN, Opcode.RDMA_READ, v.name, 9,
                fields={"raddr": Placed("p_dd_alloc_read", "DD Tagged Offset", ro, "patch"),
                        "rkey": Placed("p_dd_alloc_read", "DD STag", ro, "patch"),
                        "sge0.addr": Placed(f"{tag}_p_bo", "slot Block Offset", ro, "patch"),
                        "sge0.count": Const(bs, "Block Size"), "sge0.lkey": Addr("key:pool")},
                places=(Place("pool", bs, "the initiator's data"),), cond=ready,
                remote_kind="initiator", note="RDMA Read of the data into the block"))
        self.add(WrTemplate(
            f"{tag}_ent_lo", Role.WORKER, Opcode.RDMA_WRITE, v.name, 10,
            fields={"raddr": Placed(f"{tag}_p_h1", "Block Handle << 8 | 4", ro, "patch",
                                    Const(4, "entry octet 4")),
                    "rkey": Addr("key:table")},
            gather=(Read("buf:k_bs", 4, (), "Data Length = Block Size"),
                    Read("buf:bo2+4", 8, (f"{tag}_read_slot",), "Block Offset")),
            cond=ready, remote_kind="strided_table",
            note="entry Data Length and Block Offset, after the data"))
        if v.inline:  # Flags += request Flags (INLINE|SEAL = VALID|SEALED), Generation += 1
            self.patch(f"{tag}_p_flags", v.name, 1, [("buf:hdr+2", 2, "request Flags")],
                       f"wqe:{tag}_gen.swap_add", "request Flags << 48 (Add Data)", "big",
                       ("recv",))
            gen_add: Const | Placed = Placed(
                f"{tag}_p_flags", "request Flags << 48 | 1 << 32 (Flags += INLINE|SEAL = "
                "VALID|SEALED, Generation += 1)", "big", "patch",
                Const(1 << 32, "Generation += 1"))
        elif v.flags_free & SEAL:  # Flags += VALID|SEALED if SEAL, else VALID (C10)
            add = Const((1 << 48) | (1 << 32), "Flags += VALID, Generation += 1")
            self.add(WrTemplate(
                f"c_seal_{v.name}", Role.WORKER, Opcode.RDMA_WRITE, v.name, 1,
                inline=b"\x00\x03",  # VALID|SEALED, big-endian (D3)
                fields={"raddr": Addr(f"wqe:{tag}_gen.swap_add"), "rkey": Addr("key:rings")},
                places=(Place(f"wqe:{tag}_gen.swap_add", 2, "Flags add VALID|SEALED", "big"),),
                cond=self._flag_cond(SEAL, True, "Flags has SEAL"), remote_kind="loopback",
                note="conditional patch: the entry's Flags += VALID|SEALED if SEAL (draft, "
                "'Block Unmapped Store' step 4)"))
            gen_add = Placed(f"c_seal_{v.name}", "Flags += VALID|SEALED if SEAL (Add Data "
                             "octets 0..1)", "big", "patch", add)
        else:
            gen_add = Const((1 << 48) | (1 << 32), "Flags += VALID, Generation += 1")
        self.add(WrTemplate(
            f"{tag}_gen", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, 11,
            fields={"raddr": Placed(f"{tag}_p_h2", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table"),
                    "swap_add": gen_add,
                    "add_mask": Const((1 << 63) | (1 << 47) | (1 << 31), "field carries")},
            places=(Place("buf:oldw", 8, "old entry word", "big"),), cond=ready,
            remote_kind="strided_table", atomic_word_order="big",
            note="Flags and Generation + 1 after Data Length and Block Offset"))
        self.add(WrTemplate(
            f"{tag}_gen0", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, 12,
            fields={"raddr": Placed(f"{tag}_p_h3", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table"),
                    "swap_add": Const(1 << 32, "Generation += 1 again (skip 0)")},
            places=(Place("buf:oldw2", 8, "entry word", "big"),),
            cond=CondSpec(Read("buf:oldw", 8, (f"{tag}_gen",), "old entry word"),
                          *_window(b"\x00\x00\xff\xff", b"\x00\x00\xff\xff"),
                          "old Generation was 0xFFFF"),
            remote_kind="strided_table", atomic_word_order="big",
            note="skip Generation 0 (a reader may see it for an instant)"))
        self.add(WrTemplate(
            f"{tag}_reread", Role.WORKER, Opcode.RDMA_READ, v.name, 13,
            fields={"raddr": Placed(f"{tag}_p_h4", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table")},
            places=(Place("buf:wn", 8, "new entry word", "big"),), cond=ready,
            remote_kind="strided_table",
            note="the new Generation for the completion (a FetchAdd returns the old one); "
                 "buf:w keeps the entry as read_entry sampled it, the before-image a "
                 "connection failure restores (decision O5)"))
        self._completion(v, f"{tag}_send", 14, Read("buf:k_bs", 4, (), "Data Length"),
                         "buf:bo2", (f"{tag}_read_slot",))
        self.chain.wr(f"{tag}_send").gather = tuple(
            Read("buf:wn+2", r.length, (f"{tag}_reread",), r.about) if r.loc == "buf:w+2" else r
            for r in self.chain.wr(f"{tag}_send").gather)
        self._commit(v, 15)
        for wr_name in (f"{tag}_send", f"commit_{v.name}", f"release_{v.name}"):
            self.chain.wr(wr_name).cond = ready

    _v_alloc_inline = _alloc
    _v_alloc_read = _alloc

    def _commit(self, v: Variant, step: int) -> None:
        n = len(self.arm_producers[v.name])
        self.add(WrTemplate(
            f"commit_{v.name}", Role.WORKER, Opcode.RDMA_WRITE, "commit", step, inline=GO,
            fields={"raddr": Addr("buf:done"), "rkey": Addr("key:scratch")},
            cond=self.armed(v, n), remote_kind="loopback",
            note=f"{v.name} done on the NIC (its CQE tells the CPU)"))
        self.add(WrTemplate(
            f"release_{v.name}", Role.WORKER, Opcode.ENABLE, "commit", step,
            fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
            cond=self.armed(v, n), note="release the next credit"))

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
        # queue order within each managed QP
        for role in (Role.WORKER, Role.CONN):
            seq = [w.name for w in ch.wrs() if w.role is role]
            for x, y in itertools.pairwise(seq):
                ch.edge(x, y, EdgeKind.QP_ORDER)
        ch.notes.append(f"signaled CQEs per credit on the chain CQ: {cum}")


def build_chain(addr_le: bool, atomic_order: Order = "little", geo: Geometry | None = None,
                variants: tuple[str, ...] = tuple(VARIANTS),
                lowering: Lowering = "native") -> Chain:
    """The per-credit chain serving ``variants`` (default: all), its conditions expressed
    with native conditional WRs or (``lowering="cas"``) with CAS-on-WQE."""
    return _Builder(addr_le, atomic_order, geo or Geometry(), variants, lowering).build()


def build_software(addr_le: bool, geo: Geometry | None = None) -> Chain:
    """No fast path: a receive per credit whose CQE wakes the CPU (every request)."""
    full = build_chain(addr_le, "little", geo, ())
    sw = full.subchain({"dispatch"}, "software")
    for name in [n for n in sw.graph.nodes if n != "recv"]:
        sw.graph.remove_node(name)
    return sw
