"""Chains v2's LOAD that reads its own table entry (decision C15), mixed into
:class:`~kbtpsim.chains.variants.VariantSteps`: with per-operation dispatch the LOAD's
sub-master runs right after the receive, three dependent steps (request markers and the
handle patch; the LOAD's own entry Read; the data Write and the COMPLETION Send, each
testing the entry that Read placed), instead of waiting for the common part's entry Read
and testing the entry with markers (draft, "Block Load" steps 1-3)."""

from __future__ import annotations

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
        self._reader_count(v, True, 2, Placed("p_h_rdr", "Block Handle << 8", ro, "patch"),
                           armed, "one reader more of the handle, before the entry Read "
                           "(C20)")

    def _load_unread(self, v: Variant, armed: CondSpec) -> None:
        """Decision C20: once the data Write has completed (the block has been read), the
        count goes down again, on every path that raised it (the same condition)."""
        self._reader_count(v, False, 4, Placed("p_h_unr", "Block Handle << 8", self.ro,
                                               "patch"), armed,
                           "one reader fewer, after the data Write completed (C20)")

    def _reader_count(self, v: Variant, up: bool, step: int, raddr: Placed,
                      cond: CondSpec, note: str) -> None:
        """The LOAD's FetchAdd on its handle's reader count (decision C20): + 1
        (``load_readers``) or - 1 (``load_unread``), at ``raddr`` under the readers' key."""
        self.add(WrTemplate(
            "load_readers" if up else "load_unread", Role.WORKER, Opcode.FETCH_ADD, v.name,
            step, fields={"raddr": raddr, "rkey": Addr("key:readers"),
                          "swap_add": Const(1, "+ 1") if up else Const(M64, "- 1")},
            places=(Place("buf:rdr_old" if up else "buf:rdr_old2", 8,
                          "the count before (unused)", "big"),),
            cond=cond, remote_kind="readers", note=note))

