"""The fast-path variants' WRs (the chain compiler's builder's half that knows KBTP's
operations): per variant its markers, patches, data movement, COMPLETION and commit, on
top of the builder's helpers (``add``, ``marker``, ``patch``, ``armed``)."""

from __future__ import annotations

from collections.abc import Callable

from kbtpsim.chains.alloc import AllocSteps
from kbtpsim.chains.free import FreeSteps
from kbtpsim.chains.ir import (
    Addr,
    CondSpec,
    Const,
    Place,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.chains.load_direct import DirectLoadSteps
from kbtpsim.chains.load_recv import RecvLoadSteps
from kbtpsim.chains.lowering import RCQE, RSTG
from kbtpsim.chains.vocab import (
    ALLOW_UNSEALED,
    GO,
    INVALIDATE,
    SEAL,
    SUB_LANE,
    Variant,
    msg_length,
    window8,
)
from kbtpsim.nic.cq import CQE_BYTE_CNT
from kbtpsim.nic.wqe import Opcode


class VariantSteps(DirectLoadSteps, RecvLoadSteps, AllocSteps, FreeSteps):
    """Mixed into the chain builder (:mod:`kbtpsim.chains.compiler`), which provides the
    chain, the geometry, the byte orders and the helpers used here."""

    def _markers(self, v: Variant) -> None:
        ro, geo = self.ro, self.geo
        arm = f"arm_{v.name}"
        hdr_c, hdr_m = window8(bytes([1, v.opcode]) + v.flags.to_bytes(2, "big"),
                               b"\xff\xff" + (0xFFFF & ~v.flags_free).to_bytes(2, "big"))
        tests: list[tuple[str, str, tuple[str, ...], bytes, bytes, str]] = [
            ("hdr", "buf:hdr", ("recv",), hdr_c, hdr_m,
             f"version 1, opcode {v.op}, flags {v.flags:#06x} (free {v.flags_free:#06x})"),
        ]
        block = geo.load_block if v.op == "LOAD" else geo.own_block
        if self.recv_handle:  # C21: the handle's top octet sits beside them
            top_c, top_m = self._top_test(block)
            session = v.op == "LOAD" and self._load_direct(v)  # and the session octet
            tests.append(("gs", "buf:ct+12", ("recv",),
                          bytes([top_c, 0, 0, 0, 0, 0, 1 if session else 0, 0]),
                          bytes([top_m, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0xFF if session else 0,
                                 0]),
                          "handle's top octet in range, Generation 0 (any), Status 0"
                          + (", session established (CPU octet)" if session else "")))
        else:
            tests.append(("gs", "buf:ct+20", ("recv",), bytes(8), b"\xff\xff\xff\xff",
                          "Generation 0 (any), Status 0"))
        at, rc, rm = self._handle_window(block)
        tests.append(("range", at, ("recv",), rc, rm,
                      "handle in the " + ("readable" if v.op == "LOAD" else "own") + " range"))
        len_c, len_m = window8(geo.block_size.to_bytes(4, "little" if ro == "little" else "big"),
                               b"\xff" * 4)
        if v.op != "FREE":  # a FREE has no Data Descriptor (its byte count says so)
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
        if self.recv_handle and self._load_direct(v):  # C21: tests in the LOAD's own word
            self._load_markers(v, tests)
            return
        if self._load_direct(v):  # C15: the byte count is tested beside its entry Read
            self.patch("p_h_load", v.name, 1, [self._handle_src()], "wqe:load_read.raddr",
                       "Block Handle << 8", ro, ("recv",), self._shift_at())
        elif self._cqe_marker():  # chains v2, native conditions: on the CQE in host
            tests.append(("msg", f"buf:{RCQE}+{CQE_BYTE_CNT - 4}", ("recv",),  # memory,
                          bytes(4) + n_msg.to_bytes(4, "big"), b"\xff" * 8,  # in step 1
                          f"receive byte count = {n_msg} (CQE)"))
        else:  # on the device-memory copy p_bc made, in step 3
            tests.append(("msg", "buf:bc", ("p_bc",), bytes(4) + n_msg.to_bytes(4, "big"),
                          b"\xff" * 8, f"receive byte count = {n_msg} (CQE)"))
        msg_step = 1 if self._cqe_marker() else 3
        for i, (tag, loc, prods, c, m, about) in enumerate(tests):
            name = f"m_{v.name}_{tag}"
            self.marker(name, v.name, msg_step if tag == "msg" else 1, loc, prods,
                        c, m, about, arm, i)
            if self._load_direct(v) and i >= 1:  # C15: beside the patches, on a lane of
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}req"  # their own (v2)
            elif tag == "msg" and self._cqe_marker():  # its condition read of host
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}cqe"  # memory on its own lane
            self.arm_producers[v.name].append(name)

    def _cqe_marker(self) -> bool:
        """Whether a variant's byte-count marker tests the receive CQE in host memory
        itself, in step 1 beside the request markers (chains v2 with native conditions),
        rather than the copy ``p_bc`` makes in step 1 (a CAS's operand must be in the
        scratch buffers; v1 keeps its step 3)."""
        return not self.geo.seqlock and self.lowering == "native"

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
        if self.recv_handle and length_src is not None and length_src.loc == "buf:k_bs":
            # C21: the handle comes in two pieces; Status and Data Length in one
            middle = (middle[0], Read("buf:k_st_bs", 6, (), "Status OK, Data Length "
                                      "(Block Size)"))
        gather = (
            *self._completion_head(),
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

    def _completion_head(self) -> tuple[Read, ...]:
        """The COMPLETION's first 20 octets: its header (preset), the Request ID and the
        Block Handle as received (C21: the handle from where the receive placed it)."""
        about = "COMPLETION header: version 1, opcode, flags 0 (preset)"
        if not self.recv_handle:
            return (Read("buf:ct", 20, ("recv",), f"{about}, Request ID, Block Handle "
                         "(received)"),)
        return (Read("buf:ct", 13, ("recv",), f"{about}, Request ID, Block Handle[0]"),
                Read(*self._handle_src()[:2], ("recv",), self._handle_src()[2]))

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

    def _store_common(self, v: Variant, data_step: int,
                      data: Callable[[], None] | None = None) -> str:
        """Entry marker, handle patch, ``data`` (the data movement, which may add markers
        the update then needs too) and the entry update; returns the update's name."""
        tag = "si" if v.inline else "sr"
        self.patch(f"p_h_{tag}", v.name, 1, [self._handle_src()], f"wqe:{tag}_upd.raddr",
                   "Block Handle << 8", self.ro, ("recv",), self._shift_at())
        self._entry_marker(v, *window8(b"\x00\x01", b"\xff\xff"), "entry VALID, not SEALED")
        if data is not None:
            data()
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
        self._early_release(v, 6, self.armed(v, n))
        self._commit(v, 7)

    def _v_store_read(self, v: Variant) -> None:
        bs, ro = self.geo.block_size, self.ro
        if self.geo.stage_reads:
            self._v_store_read_staged(v)
            return
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
        self._early_release(v, 6, self.armed(v, n))
        self._commit(v, 7)

    def _v_store_read_staged(self, v: Variant) -> None:
        """Decision C24: the data Read lands in the credit's staging buffer; a marker
        tests the Read's CQE (the connection QP's, in its CQ's buffer: no error opcode);
        only then a loopback Write copies the data into the block, and the entry update,
        COMPLETION and commit follow. A connection failure that cuts the Read leaves the
        block as it was (its flushed CQE fails the test); one that cuts the copy leaves
        the staging buffer whole, from which the CPU serves the STORE again (O5)."""
        self.patch("p_bo_sr", v.name, 3, [("buf:bo+4", 8, "entry Block Offset")],
                   "wqe:sr_copy.raddr", "entry Block Offset", self.ro, ("read_entry",))

        def data() -> None:
            n = len(self.arm_producers[v.name])
            self.staging_read(v, "sr_read", 4, self.armed(v, n))
            self._read_ok_marker(v, "sr_read", 5)
            self.staged_copy(v, "sr_copy", "sr_read", 6, "p_bo_sr", "entry Block Offset",
                             self.armed(v, n + 1))

        self._store_common(v, 6, data)
        n = len(self.arm_producers[v.name])
        self._completion(v, "sr_send", 8, Read("buf:k_bs", 4, (), "Data Length"),
                         "buf:bo", ("read_entry",))
        self._early_release(v, 8, self.armed(v, n))
        self._commit(v, 9)

    def staging_read(self, v: Variant, name: str, step: int, cond: CondSpec) -> None:
        """Decision C24: the RDMA Read ``name`` of the initiator's data into the credit's
        staging buffer (its address and key patched from the Data Descriptor)."""
        ro, dd = self.ro, f"p_dd_{v.name}"
        self.add(WrTemplate(
            name, Role.CONN, Opcode.RDMA_READ, v.name, step,
            fields={"raddr": Placed(dd, "DD Tagged Offset", ro, "patch"),
                    "rkey": Placed(dd, "DD STag", ro, "patch")},
            places=(Place(f"buf:{RSTG}", self.geo.block_size,
                          "the initiator's data (staging)"),),
            cond=cond, remote_kind="initiator",
            note="RDMA Read of the data into the credit's staging buffer (C24)"))

    def staged_copy(self, v: Variant, name: str, read: str, step: int, bo_patch: str,
                    bo_what: str, cond: CondSpec) -> None:
        """Decision C24: the loopback Write ``name`` of the octets ``read`` staged into
        the block whose offset ``bo_patch`` placed (``cond`` must test the Read's CQE:
        rule ``staged-read``)."""
        self.add(WrTemplate(
            name, Role.WORKER, Opcode.RDMA_WRITE, v.name, step,
            fields={"raddr": Placed(bo_patch, bo_what, self.ro, "patch"),
                    "rkey": Addr("key:pool")},
            gather=(Read(f"buf:{RSTG}", self.geo.block_size, (read,), "the staged data"),),
            cond=cond, remote_kind="pool",
            note="copy the staged data into the block, the Read having completed"))

    def _read_ok_marker(self, v: Variant, read: str, step: int) -> None:
        """:meth:`read_ok_marker` into the variant's arm word, as its next marker."""
        name = self.read_ok_marker(v, read, step, f"arm_{v.name}",
                                   len(self.arm_producers[v.name]))
        self.arm_producers[v.name].append(name)

    def _early_release(self, v: Variant, step: int, cond: CondSpec) -> None:
        """Chains v2 with native conditions (decision C19): a STORE or ALLOC_STORE the NIC
        served releases the next credit beside its COMPLETION Send (``step``), a step
        before its commit's release: its data and entry are placed (the chains need
        in-order placement, O7), its Send leaves before the next credit's on the
        connection QP, and the CPU serves a connection's credits in order. Not earlier:
        the next credit's master ENABLEs the connection QP through this credit's WRs
        once the gate passes, which would run the Send before what it gathers landed."""
        if not self._cqe_marker():
            return
        self.add(WrTemplate(
            f"early_{v.name}", Role.WORKER, Opcode.ENABLE, v.name, step,
            fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
            cond=cond, note="release the next credit early: the operation's effects are "
                            "placed"))

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
