"""Chains v2's LOAD that reads its own table entry (decision C15), mixed into
:class:`~kbtpsim.chains.variants.VariantSteps`: with per-operation dispatch the LOAD's
sub-master runs right after the receive, three dependent steps (request markers and the
handle patch; the LOAD's own entry Read; the data Write and the COMPLETION Send, each
testing the entry that Read placed), instead of waiting for the common part's entry Read
and testing the entry with markers (draft, "Block Load" steps 1-3)."""

from __future__ import annotations

from dataclasses import replace

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
from kbtpsim.chains.lowering import M64, RCQE
from kbtpsim.chains.steps import StepHelpers
from kbtpsim.chains.vocab import (
    ALLOW_UNSEALED,
    GO,
    LOAD_SESSION_OCTET,
    SUB_LANE,
    W_BC,
    W_FLAGS,
    W_GS,
    W_LEN,
    Variant,
    msg_length,
    window8,
)
from kbtpsim.nic.cq import CQE_BYTE_CNT
from kbtpsim.nic.wqe import Opcode


class DirectLoadSteps(StepHelpers):
    """The direct LOAD's WRs, on top of the builder's helpers."""

    def _load_direct(self, v: Variant) -> bool:
        """Whether ``v`` is chains v2's LOAD that reads its own entry (decision C15)."""
        return (v.op == "LOAD" and not self.geo.seqlock
                and self.geo.block_size < 1 << 24)  # Data Length's high octet is 0

    def _v_load_direct(self, v: Variant) -> None:
        """Chains v2's LOAD (decision C15): three steps after the receive instead of five.

        1. four request markers (header, Generation/Status, handle range, descriptor
           length), the handle patch into the LOAD's own entry Read, and the Data
           Descriptor and INVALIDATE patches of the data Write and the COMPLETION, on
           three lanes (chains v2 runs each lane on its own worker QP);
        2. that Read, conditional on the arm word (the markers and the CPU's session
           octet): it scatters the entry into the LOAD's own word ``w_load`` and its
           Block Offset straight into the data Write's local address (no patch, no entry
           marker); beside it, on a lane of its own, the fifth request marker, the
           receive's byte count (on the CQE in host memory: its condition read overlaps
           the Read), which writes its octet into ``w_load``;
        3. the data Write and the COMPLETION Send, each conditional on ``w_load``
           (Data Length = Block Size, the Flags, the byte count's octet): a Read that did
           not run leaves ``w_load`` as restored (Data Length all ones), a failed byte
           count its octet 00, and either fails; then the commit and release.

        It waits for nothing of the common part, so per-operation dispatch runs it whole
        right after the receive.

        ``w_load`` (16 octets): Generation (2), Status (2, preset 0), Data Length (4) --
        the COMPLETION's order --, then ``A`` (+8, preset 0003), ``B`` (+10, preset
        0003) and the byte count's octet (+12, preset 00). The step-3 window (+5..+13)
        wants Data Length's low three octets = Block Size (its high octet is 0 in every
        entry the target writes: Data Length <= Block Size < 2^24, which
        :meth:`_load_direct` requires), ``A`` = 0003, ``B`` = 0001 or 0003 and the byte
        count's octet 01. The Read places the entry's Flags in ``A``. ALLOW_UNSEALED
        (draft, "Block Load" step 1; decision C10) without a second entry test:
        ``c_au_load``, a step-1 patch run only if the request's Flags have ALLOW_UNSEALED,
        points that scatter entry at ``B`` instead (it copies ``B``'s address, written at
        posting into ``au_load``). So a sealed entry passes either way, a VALID unsealed
        one only with the flag, anything else never."""
        if self.recv_handle:
            self._v_load_recv(v)
            return
        bs, ro = self.geo.block_size, self.ro
        self.add(WrTemplate(
            "c_au_load", Role.WORKER, Opcode.RDMA_WRITE, v.name, 1,
            fields={"raddr": Addr("wqe:load_read.sge0.addr"), "rkey": Addr("key:rings")},
            gather=(Read("buf:au_load", 8, (), "address of w_load+10 (set at posting)"),),
            places=(Place("wqe:load_read.sge0.addr", 8,
                          "the entry Flags' scatter address: w_load+10"),),
            cond=self._flag_cond(ALLOW_UNSEALED, True, "Flags has ALLOW_UNSEALED"),
            remote_kind="loopback",
            note="conditional patch: with ALLOW_UNSEALED the entry Flags go to w_load+10"))
        n = len(self.arm_producers[v.name])
        assert n == LOAD_SESSION_OCTET, "the LOAD's arm word: 4 markers, then the session"
        armed = CondSpec(Read(f"buf:arm_{v.name}", 8, tuple(self.arm_producers[v.name]),
                              f"arm word of {v.name}"),
                         *window8(GO * (n + 1), b"\xff" * (n + 1)),
                         f"{v.name} armed (request tests), session established (CPU octet)")
        if self.geo.readers:
            self._load_readers(v, armed)
        self.add(WrTemplate(
            "load_read", Role.WORKER, Opcode.RDMA_READ, v.name, 2,
            fields={"raddr": Placed("p_h_load", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table")},
            # w_load: Generation, Status (0, preset), Data Length (the COMPLETION's order),
            # then the Flags, so that one window holds Data Length, Flags, byte count
            places=(Place("buf:w_load", 2, "entry[0:2] Flags (at +10: c_au_load)", "big", 8),
                    Place("buf:w_load", 2, "entry[2:4] Generation", "big"),
                    Place("buf:w_load", 4, "entry[4:8] Data Length", "big", 4),
                    Place("wqe:load_write.sge0.addr", 8, "entry[8:16] Block Offset", ro)),
            cond=armed, remote_kind="strided_table",
            note="the LOAD's own entry Read (strided key): Block Offset into the data Write"))
        self.patch("p_dd_load", v.name, 1,
                   [("buf:dd+4", 8, "request[28:36] DD Tagged Offset"),
                    ("buf:dd", 4, "request[24:28] DD STag")],
                   "wqe:load_write.raddr", "Data Descriptor Tagged Offset", ro,
                   ("recv",), extra=(Place("wqe:load_write.rkey", 4, "DD STag", ro),))
        entry = Read("buf:w_load+5", 8, ("load_read", "m_load_msg"),
                     "the LOAD's entry Data Length[1:4], Flags (A, B), byte count")
        valid = CondSpec(entry, bs.to_bytes(4, "big")[1:] + b"\x00\x03\x00\x01" + GO,
                         b"\xff" * 6 + b"\xfd\xff",
                         "entry VALID|SEALED (VALID with ALLOW_UNSEALED), Data Length = "
                         "Block Size; receive byte count", "big")
        self.add(WrTemplate(
            "load_write", Role.CONN, Opcode.RDMA_WRITE, v.name, 3,
            fields={"raddr": Placed("p_dd_load", "DD Tagged Offset", ro, "patch"),
                    "rkey": Placed("p_dd_load", "DD STag", ro, "patch"),
                    "sge0.addr": Placed("load_read", "entry Block Offset", ro, "entry"),
                    "sge0.count": Const(bs, "Block Size"), "sge0.lkey": Addr("key:pool")},
            gather=(Read("pool", bs, (), "the block"),), cond=valid,
            remote_kind="initiator", note="RDMA Write of the block to the initiator"))
        self._completion(
            v, "load_send", 3, None, "", (),
            generation=Read("buf:w_load", 8, ("load_read",),
                            "entry Generation, Status OK (preset), entry Data Length"),
            block_offset=(Read("buf:k_zero", 4, (), "reserved 0"),
                          Read("wqe:load_write.sge0.addr", 8, ("load_read",),
                               "entry Block Offset (in the data Write's WQE)")),
            cond=valid, patch_step=1)
        for name in ("p_dd_load", "p_inv_load", "c_inv_load"):  # request fields only: in
            if name in self.chain:  # step 1, on a lane of their own (chains v2)
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}dd"
        n_msg = msg_length(v, self.geo)
        if self.lowering == "cas":  # a CAS's operand comes from the scratch buffers: the
            loc, producers = "buf:bc", ("p_bc",)  # common part's copy of the byte count
        else:  # the CQE in host memory, read by the native condition itself
            loc, producers = f"buf:{RCQE}+{CQE_BYTE_CNT - 4}", ("recv",)
        self.marker("m_load_msg", v.name, 2, loc, producers,
                    bytes(4) + n_msg.to_bytes(4, "big"), b"\xff" * 8,
                    f"receive byte count = {n_msg} (CQE)", "w_load", 12)
        # on a lane of its own (chains v2's lanes): its condition read of the CQE in host
        # memory runs beside the entry Read instead of behind the patches
        self.chain.wr("m_load_msg").lane = f"{v.name}{SUB_LANE}cqe"
        self._commit(v, 4, valid)
        if self.geo.readers:
            self._load_unread(v, armed)
        # Pipelining (decision C16): a LOAD of a SEALED entry releases the next credit
        # once its entry Read has landed, beside its data Write. Nothing later on the
        # connection can change that block before the Write has read it: a STORE needs
        # the entry unsealed (draft, "Block Mapped Store" 1), a FREE and every other CPU
        # fallback wait for this credit to end (the CPU serves credits in order), and a
        # free on another connection quiesces against it (decision C13). A LOAD that
        # delivered an unsealed block (ALLOW_UNSEALED) releases after its COMPLETION, as
        # before: ``B`` keeps its preset 0003 only without ALLOW_UNSEALED, or with it
        # when the entry is sealed.
        sealed = CondSpec(entry, bs.to_bytes(4, "big")[1:] + b"\x00\x03\x00\x03" + GO,
                          b"\xff" * 8, "entry VALID|SEALED, Data Length = Block Size; "
                          "receive byte count", "big")
        self.add(WrTemplate(
            f"early_{v.name}", Role.WORKER, Opcode.ENABLE, v.name, 3,
            fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
            cond=sealed, note="release the next credit early: a sealed block cannot "
                              "change before this LOAD's data Write has read it"))

    def _load_markers(self, v: Variant,
                      tests: list[tuple[str, str, tuple[str, ...], bytes, bytes, str]]
                      ) -> None:
        """Decision C21: the two-step LOAD's request tests. The header test dispatches
        it (``Chain.headers``: no WR of its own); the handle range is its entry Read's
        own condition; the Generation/Status (with the handle's top octet) and the
        descriptor-length markers write their octets into ``w_load``, which its step-2
        WRs test."""
        self._load_first(v)
        slots = {"gs": W_GS, "len": W_LEN}
        for tag, loc, prods, c, m, about in tests:
            if tag == "hdr":
                self.chain.headers[v.name] = CondSpec(Read(loc, 8, prods, about), c, m,
                                                      about)
            elif tag in slots:
                name = f"m_{v.name}_{tag}"
                # C20's reader count: step 1 is the + 1 and the Read's address patch,
                # so what only the data Write needs runs beside the Read, in step 2
                self.marker(name, v.name, 2 if self.geo.readers else 1, loc, prods, c, m,
                            about, "w_load", slots[tag])
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}req"
                self.arm_producers[v.name].append(name)
            else:
                assert tag == "range", tag

    def _load_first(self, v: Variant) -> None:
        """C21's two WRs of step 1 that take longest, added first so that the LOAD's
        sub-master ENABLEs their lanes first: the entry Read, then the byte-count marker
        (whose condition reads the receive CQE in host memory)."""
        ro = self.ro
        in_range = self._load_in_range()
        readers = self.geo.readers
        if readers:  # C20's + 1 first, its address placed by the receive; then the Read
            self.add(WrTemplate(
                "load_readers", Role.WORKER, Opcode.FETCH_ADD, v.name, 1,
                fields={"raddr": Placed("recv", "Block Handle << 8", ro, "request"),
                        "rkey": Addr("key:readers"), "swap_add": Const(1, "+ 1")},
                places=(Place("buf:rdr_old", 8, "the count before (unused)", "big"),),
                cond=in_range, remote_kind="readers",
                note="one reader more of the handle, a step before the entry Read on its "
                     "QP (C20, C21)"))
            self.patch("p_h_load", v.name, 1, [self._handle_src()], "wqe:load_read.raddr",
                       "Block Handle << 8", ro, ("recv",))
            self.chain.wr("p_h_load").lane = f"{v.name}{SUB_LANE}h"
        self.add(WrTemplate(
            "load_read", Role.WORKER, Opcode.RDMA_READ, v.name, 2 if readers else 1,
            fields={"raddr": Placed("p_h_load", "Block Handle << 8", ro, "patch")
                    if readers else Placed("recv", "Block Handle << 8", ro, "request"),
                    "rkey": Addr("key:table")},
            places=(Place("buf:w_load", 2, "entry[0:2] Flags", "big", W_FLAGS),
                    Place("buf:w_load", 2, "entry[2:4] Generation", "big"),
                    Place("buf:w_load", 4, "entry[4:8] Data Length", "big", 4),
                    Place("wqe:load_write.sge0.addr", 8, "entry[8:16] Block Offset", ro)),
            cond=in_range, remote_kind="strided_table",
            note="the LOAD's own entry Read, its address placed by the receive (C21)"))
        n_msg = msg_length(v, self.geo)
        self.marker("m_load_msg", v.name, 2 if readers else 1,  # beside the Read
                    f"buf:{RCQE}+{CQE_BYTE_CNT - 4}", ("recv",),
                    bytes(4) + n_msg.to_bytes(4, "big"), b"\xff" * 8,
                    f"receive byte count = {n_msg} (CQE)", "w_load", W_BC)
        self.chain.wr("m_load_msg").lane = f"{v.name}{SUB_LANE}cqe"

    def _load_in_range(self) -> CondSpec:
        """C21: the handle in the readable block, tested on the octets the receive
        placed (the entry Read's, and the reader count's, own condition)."""
        at, rc, rm = self._handle_window(self.geo.load_block)
        return CondSpec(Read(at, 8, ("recv",), "Block Handle << 8 (the receive's)"),
                        rc, rm, "handle in the readable range")

    def _v_load_recv(self, v: Variant) -> None:
        """Chains v2's two-step LOAD (decision C21; draft, "Block Load" steps 1-3).

        The receive places the handle's seven address octets straight into the entry
        Read's remote address (``h << 8``, the table's strided key) and its top octet at
        ``ct+12`` (Generation and Status follow it), so nothing has to patch the Read:

        1. the entry Read, first on its lane, conditional only on the handle lying in
           the readable block (its own test on the octets the receive placed: an
           out-of-range Read would be a remote access error that kills the QP); it
           scatters Generation, Data Length and the Flags' low octet into ``w_load`` and
           the Block Offset into the data Write. Beside it, on lanes of their own: the
           Generation/Status marker (which also tests the handle's top octet), the
           descriptor-length marker, the receive's byte-count marker, each writing its
           octet of ``w_load``, and the Data Descriptor and INVALIDATE patches;
        2. the data Write and the COMPLETION Send, and the early release, each
           conditional on ``w_load`` +5..+12: Data Length = Block Size, Flags = VALID |
           SEALED, the three markers' octets and the CPU's session octet;
        3. the commit and release.

        An entry Read that did not run leaves Data Length all ones (restored), so step 2
        fails. The header test is its dispatch's (``Chain.headers``).

        ALLOW_UNSEALED (draft, "Block Load" step 1; decision C10): four step-1 patches,
        each run only if the request's Flags have it, write ``FD`` into the Flags octet
        of the mask of the data Write's, the Send's, the commit's and the release's
        test, freeing its SEALED bit: a VALID unsealed entry then passes too. (C15's
        redirect of the Read's Flags scatter cannot be used: the Read runs beside the
        patches.) The early release keeps the unpatched test: SEALED only (C16)."""
        bs, ro = self.geo.block_size, self.ro
        data = 3 if self.geo.readers else 2  # the data Write's step (C20: the Read is 2)
        self.patch("p_dd_load", v.name, data - 1,
                   [("buf:dd+4", 8, "request[28:36] DD Tagged Offset"),
                    ("buf:dd", 4, "request[24:28] DD STag")],
                   "wqe:load_write.raddr", "Data Descriptor Tagged Offset", ro,
                   ("recv",), extra=(Place("wqe:load_write.rkey", 4, "DD STag", ro),))
        entry = Read("buf:w_load+5", 8, ("load_read", *self.arm_producers[v.name],
                                         "m_load_msg"),
                     "the LOAD's entry Data Length[1:4], Flags, request tests, session")
        sealed = CondSpec(entry, bs.to_bytes(4, "big")[1:] + b"\x00\x03" + GO * 3,
                          b"\xff" * 8, "entry VALID|SEALED, Data Length = Block Size; "
                          "request tests, byte count, session", "big")

        def valid(target: str) -> CondSpec:  # its Flags mask octet freed by ALLOW_UNSEALED
            return replace(sealed, about=sealed.about.replace(
                "VALID|SEALED", "VALID|SEALED (VALID with ALLOW_UNSEALED)"),
                mask_source=Placed(f"p_au_{target}", "Flags mask: SEALED free if "
                                   "ALLOW_UNSEALED", "octets", "patch"))
        self.add(WrTemplate(
            "load_write", Role.CONN, Opcode.RDMA_WRITE, v.name, data,
            fields={"raddr": Placed("p_dd_load", "DD Tagged Offset", ro, "patch"),
                    "rkey": Placed("p_dd_load", "DD STag", ro, "patch"),
                    "sge0.addr": Placed("load_read", "entry Block Offset", ro, "entry"),
                    "sge0.count": Const(bs, "Block Size"), "sge0.lkey": Addr("key:pool")},
            gather=(Read("pool", bs, (), "the block"),), cond=valid("load_write"),
            remote_kind="initiator", note="RDMA Write of the block to the initiator"))
        self._completion(
            v, "load_send", data, None, "", (),
            generation=Read("buf:w_load", 8, ("load_read",),
                            "entry Generation, Status OK (preset), entry Data Length"),
            block_offset=(Read("buf:k_zero", 4, (), "reserved 0"),
                          Read("wqe:load_write.sge0.addr", 8, ("load_read",),
                               "entry Block Offset (in the data Write's WQE)")),
            cond=valid("load_send"), patch_step=data - 1)
        for name in ("p_dd_load", "p_inv_load", "c_inv_load"):  # on a lane of their own
            if name in self.chain:
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}dd"
        self._commit(v, data + 1, sealed)
        for name in (f"commit_{v.name}", f"release_{v.name}"):
            self.chain.wr(name).cond = valid(name)
        au = self._flag_cond(ALLOW_UNSEALED, True, "Flags has ALLOW_UNSEALED")
        for i, target in enumerate(("load_write", "load_send", f"commit_{v.name}",
                                    f"release_{v.name}")):
            dest = f"wqe:{target}.cond_mask"
            self.add(WrTemplate(
                f"p_au_{target}", Role.WORKER, Opcode.RDMA_WRITE, v.name, data - 1,
                inline=b"\xfd", fields={"raddr": Addr(dest, 4), "rkey": Addr("key:rings")},
                places=(Place(dest, 1, "Flags mask: SEALED free if ALLOW_UNSEALED",
                              "octets", 4),),
                cond=au, remote_kind="loopback",
                note="conditional patch: ALLOW_UNSEALED frees the SEALED bit of the test"))
            # beside the markers, and on a lane of their own (the byte-count marker's
            # lane waits for its read of host memory)
            self.chain.wr(f"p_au_{target}").lane = \
                f"{v.name}{SUB_LANE}{'req' if i < 2 else 'au'}"
        # Pipelining (decision C16): a sealed LOAD releases the next credit early
        self.add(WrTemplate(
            f"early_{v.name}", Role.WORKER, Opcode.ENABLE, v.name, data,
            fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
            cond=sealed, note="release the next credit early: a sealed block cannot "
                              "change before this LOAD's data Write has read it"))
        if self.geo.readers:  # C20: the - 1 once the data Write has completed, under the
            # + 1's condition; its address from where the receive placed the handle
            self.patch("p_h_unr", v.name, 1, [self._handle_src()], "wqe:load_unread.raddr",
                       "Block Handle << 8", ro, ("recv",))
            self.chain.wr("p_h_unr").lane = f"{v.name}{SUB_LANE}h"
            self.add(WrTemplate(
                "load_unread", Role.WORKER, Opcode.FETCH_ADD, v.name, data + 1,
                fields={"raddr": Placed("p_h_unr", "Block Handle << 8", ro, "patch"),
                        "rkey": Addr("key:readers"), "swap_add": Const(M64, "- 1")},
                places=(Place("buf:rdr_old2", 8, "the count before (unused)", "big"),),
                cond=self._load_in_range(), remote_kind="readers",
                note="one reader fewer, after the data Write completed (C20)"))

    def _load_readers(self, v: Variant, armed: CondSpec) -> None:
        """Decision C20: the LOAD counts itself a reader of its handle before its entry
        Read, with a FetchAdd + 1 on the handle's count (NIC device memory, a strided key
        like the table's) on the entry Read's own QP, right before it (a responder runs
        an atomic and a later Read in order: the count is raised before the entry is
        sampled). A FREE on the NIC unbinds the entry, then reads the count: either it
        sees this LOAD, or this LOAD's Read sees the entry unbound (a Dekker pair on one
        atomic unit)."""
        ro = self.ro
        for name, dest in (("p_h_rdr", "load_readers"), ("p_h_unr", "load_unread")):
            self.patch(name, v.name, 1, [self._handle_src()], f"wqe:{dest}.raddr",
                       "Block Handle << 8", ro, ("recv",), self._shift_at())
            self.chain.wr(name).lane = f"{v.name}{SUB_LANE}rdr"
        self.add(WrTemplate(
            "load_readers", Role.WORKER, Opcode.FETCH_ADD, v.name, 2,
            fields={"raddr": Placed("p_h_rdr", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:readers"), "swap_add": Const(1, "+ 1")},
            places=(Place("buf:rdr_old", 8, "the count before (unused)", "big"),),
            cond=armed, remote_kind="readers",
            note="one reader more of the handle, before the entry Read (C20)"))

    def _load_unread(self, v: Variant, armed: CondSpec) -> None:
        """Decision C20: once the data Write has completed (the block has been read), the
        count goes down again, on every path that raised it (the same condition)."""
        self.add(WrTemplate(
            "load_unread", Role.WORKER, Opcode.FETCH_ADD, v.name, 4,
            fields={"raddr": Placed("p_h_unr", "Block Handle << 8", self.ro, "patch"),
                    "rkey": Addr("key:readers"), "swap_add": Const(M64, "- 1")},
            places=(Place("buf:rdr_old2", 8, "the count before (unused)", "big"),),
            cond=armed, remote_kind="readers",
            note="one reader fewer, after the data Write completed (C20)"))

