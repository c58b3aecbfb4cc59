"""The fast-path variants' WRs (the chain compiler's builder's half that knows KBTP's
operations): per variant its markers, patches, data movement, COMPLETION and commit, on
top of the builder's helpers (``add``, ``marker``, ``patch``, ``armed``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.atomics import RING_ADD_DATA, ring_add_mask
from kbtpsim.chains.ir import (
    Addr,
    Chain,
    CondSpec,
    Const,
    Order,
    Place,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.chains.load_direct import DirectLoadSteps
from kbtpsim.chains.vocab import (
    ALLOW_UNSEALED,
    GO,
    INVALIDATE,
    SEAL,
    SUB_LANE,
    Geometry,
    Variant,
    block_test,
    msg_length,
    window8,
)
from kbtpsim.nic.wqe import Opcode


class VariantSteps(DirectLoadSteps):
    """Mixed into the chain builder (:mod:`kbtpsim.chains.compiler`), which provides the
    chain, the geometry, the byte orders and the helpers used here."""

    chain: Chain
    geo: Geometry
    ro: Order
    ao: Order
    arm_producers: dict[str, list[str]]
    alt_producers: dict[str, list[str]]
    lowering: str

    if TYPE_CHECKING:
        def add(self, wr: WrTemplate) -> WrTemplate: ...
        def marker(self, name: str, part: str, step: int, loc: str,
                   producers: tuple[str, ...], compare: bytes, mask: bytes, about: str,
                   arm: str, slot: int, word_order: Order = "octets",
                   compare_source: Placed | None = None) -> None: ...
        def patch(self, name: str, part: str, step: int, src: list[tuple[str, int, str]],
                  dest: str, what: str, order: Order, producers: tuple[str, ...],
                  offset: int = 0, extra: tuple[Place, ...] = ()) -> None: ...
        def armed(self, v: Variant, n_markers: int) -> CondSpec: ...
        def _handle_src(self) -> tuple[str, int, str]: ...
        def _shift_at(self) -> int: ...

    def _markers(self, v: Variant) -> None:
        ro, geo = self.ro, self.geo
        arm = f"arm_{v.name}"
        hdr_c, hdr_m = window8(bytes([1, v.opcode]) + v.flags.to_bytes(2, "big"),
                               b"\xff\xff" + (0xFFFF & ~v.flags_free).to_bytes(2, "big"))
        tests: list[tuple[str, str, tuple[str, ...], bytes, bytes, str]] = [
            ("hdr", "buf:hdr", ("recv",), hdr_c, hdr_m,
             f"version 1, opcode {v.op}, flags {v.flags:#06x} (free {v.flags_free:#06x})"),
            ("gs", "buf:ct+20", ("recv",), bytes(8), b"\xff\xff\xff\xff",
             "Generation 0 (any), Status 0"),
        ]
        block = geo.load_block if v.op == "LOAD" else geo.own_block
        rc, rm = block_test(block, ro)
        tests.append(("range", "buf:ct+12", ("recv",), rc, rm,
                      "handle in the " + ("readable" if v.op == "LOAD" else "own") + " range"))
        len_c, len_m = window8(geo.block_size.to_bytes(4, "little" if ro == "little" else "big"),
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
        if self._load_direct(v):  # C15: the byte count is tested beside its entry Read
            self.patch("p_h_load", v.name, 1, [self._handle_src()], "wqe:load_read.raddr",
                       "Block Handle << 8", ro, ("recv",), self._shift_at())
        else:  # in step 3, on the device-memory copy p_bc made
            tests.append(("msg", "buf:bc", ("p_bc",), bytes(4) + n_msg.to_bytes(4, "big"),
                          b"\xff" * 8, f"receive byte count = {n_msg} (CQE)"))
        for i, (tag, loc, prods, c, m, about) in enumerate(tests):
            name = f"m_{v.name}_{tag}"
            self.marker(name, v.name, 3 if tag == "msg" else 1, loc, prods,
                        c, m, about, arm, i)
            if self._load_direct(v) and i >= 1:  # C15: beside the patches, on a lane of
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}req"  # their own (v2)
            self.arm_producers[v.name].append(name)

    def _entry_marker(self, v: Variant, compare: bytes, mask: bytes, about: str) -> None:
        slot = len(self.arm_producers[v.name])
        name = f"m_{v.name}_entry"
        self.marker(name, v.name, 3, "buf:w", ("read_entry",), compare, mask, about,
                    f"arm_{v.name}", slot, "big")
        self.arm_producers[v.name].append(name)

    def _completion(self, v: Variant, name: str, step: int, length_src: Read | None,
                    bo_loc: str, bo_producers: tuple[str, ...],
                    generation: Read | None = None, block_offset: tuple[Read, ...] = (),
                    cond: CondSpec | None = None, patch_step: int = 1) -> None:
        """The COMPLETION Send; ``generation`` (with ``length_src`` None: Generation,
        Status and Data Length in one piece) and ``block_offset`` replace the pieces
        read from the common entry Read."""
        middle = (generation,) if length_src is None and generation is not None else (
            generation or Read("buf:w+2", 2, ("read_entry",), "entry Generation"),
            Read("buf:k_zero", 2, (), "Status OK"), length_src)
        gather = (
            Read("buf:ct", 20, ("recv",), "COMPLETION header: version 1, opcode, flags 0 "
                 "(preset), Request ID, Block Handle (received)"),
            *[r for r in middle if r is not None],
            *(block_offset or (Read(bo_loc, 12, bo_producers,
                                    "reserved 0 (preset), entry Block Offset"),)),
        )
        n = len(self.arm_producers[v.name])
        send = self.add(WrTemplate(name, Role.CONN, Opcode.SEND, v.name, step,
                                   gather=gather, cond=cond or self.armed(v, n),
                                   note="COMPLETION (Send)"))
        if v.flags_free & INVALIDATE:
            self._invalidate(v, send, patch_step)

    def _invalidate(self, v: Variant, send: WrTemplate, step: int = 1) -> None:
        """INVALIDATE (draft, "Completion"; T10): the COMPLETION goes out as a Send with
        Invalidate of the Data Descriptor's STag. In step 1, a patch copies the STag into
        the Send's invalidate key (control segment octets 12..15, as mlx5's SEND_INV carries
        the rkey in the immediate field) and a conditional loopback Write of the
        SEND_WITH_INVALIDATE opcode into its opcode octet runs only if the request's Flags
        have INVALIDATE (the only bit under the mask). SEND and SEND_WITH_INVALIDATE have
        the same segments; the Send is held back (step >= 4) until both have landed."""
        tag = v.name
        self.patch(f"p_inv_{tag}", v.name, step, [("buf:dd", 4, "request[24:28] DD STag")],
                   f"wqe:{send.name}.imm", "DD STag (key to invalidate)", self.ro, ("recv",))
        flag = INVALIDATE.to_bytes(2, "big")  # Flags are big-endian (D3)
        dest = f"wqe:{send.name}.opcode"
        self.add(WrTemplate(
            f"c_inv_{tag}", Role.WORKER, Opcode.RDMA_WRITE, v.name, step,
            inline=bytes([Opcode.SEND_WITH_INVALIDATE]),
            fields={"raddr": Addr(dest), "rkey": Addr("key:rings")},
            places=(Place(dest, 1, "opcode SEND_WITH_INVALIDATE"),),
            cond=CondSpec(Read("buf:hdr", 8, ("recv",), "request Flags"),
                          *window8(b"\0\0" + flag, b"\0\0" + flag), "Flags has INVALIDATE"),
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
                        *window8(b"\0\0" + (f if is_set else b"\0\0"), b"\0\0" + f), about)

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
                    *window8(b"\x00\x01\x00\x00" + self.geo.block_size.to_bytes(4, "big"),
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
        if self._load_direct(v):
            self._v_load_direct(v)
            return
        bs, ro = self.geo.block_size, self.ro
        self.patch("p_bo_load", v.name, 3, [("buf:bo+4", 8, "entry Block Offset")],
                   "wqe:load_write.sge0.addr", "entry Block Offset", ro, ("read_entry",))
        self._entry_marker(v, *window8(b"\x00\x03\x00\x00" + bs.to_bytes(4, "big"),
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
                          *window8(b"", b"\xff" * 4), "entry Flags and Generation unchanged",
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
        self._entry_marker(v, *window8(b"\x00\x01", b"\xff\xff"), "entry VALID, not SEALED")
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
                    *window8(b"\x00\x00", b"\xff\xff"), "entry Flags 0 (not VALID)", arm2, 1,
                    "big")
        armed = CondSpec(Read(f"buf:{arm2}", 8, (f"m_{v.name}_fold", f"m_{v.name}_entry"),
                              "second arm word"), *window8(GO * 2, b"\xff" * 2),
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
                          *window8(b"", b"\xff" * 4), "slot Sequence = ticket", "big",
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
                          *window8(b"\xff" * 8, b"\xff" * 8),
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
                         *window8(GO * 3, b"\xff" * 3), "slot ready for this ticket")
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
                          *window8(b"\x00\x00\xff\xff", b"\x00\x00\xff\xff"),
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

    def _commit(self, v: Variant, step: int, cond: CondSpec | None = None) -> None:
        n = len(self.arm_producers[v.name])
        cond = cond or self.armed(v, n)
        self.add(WrTemplate(
            f"commit_{v.name}", Role.WORKER, Opcode.RDMA_WRITE, "commit", step, inline=GO,
            fields={"raddr": Addr("buf:done"), "rkey": Addr("key:scratch")},
            cond=cond, remote_kind="loopback",
            note=f"{v.name} done on the NIC (its CQE tells the CPU)"))
        self.add(WrTemplate(
            f"release_{v.name}", Role.WORKER, Opcode.ENABLE, "commit", step,
            fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
            cond=cond, note="release the next credit"))
