"""Chains v2's two-step LOAD (decision C21), mixed into
:class:`~kbtpsim.chains.variants.VariantSteps`: the credit's receive places the Block
Handle straight into the LOAD's entry Read (or, where the LOADs count their readers,
decision C20, into the count's FetchAdd), so the Read runs beside the request markers
instead of a step after them; the data Write and the COMPLETION test the entry and the
markers' octets in one window (draft, "Block Load" steps 1-3)."""

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
from kbtpsim.chains.lowering import RCQE
from kbtpsim.chains.steps import StepHelpers
from kbtpsim.chains.vocab import (
    ALLOW_UNSEALED,
    GO,
    SUB_LANE,
    W_BC,
    W_FLAGS,
    W_GS,
    W_LEN,
    Variant,
    msg_length,
)
from kbtpsim.nic.cq import CQE_BYTE_CNT
from kbtpsim.nic.wqe import Opcode, WqeFlags


class RecvLoadSteps(StepHelpers):
    """The two-step LOAD's WRs (decision C21), on top of the builder's helpers."""

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
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}{self._load_lane(tag)}"
                self.arm_producers[v.name].append(name)
            else:
                assert tag == "range", tag

    def _load_lane(self, wr: str) -> str:
        """The sub-lane of a LOAD marker (``gs``, ``len``) or ALLOW_UNSEALED patch (by its
        target). Decision C28: the Generation/Status marker reads the CPU's session
        octet, so it runs after the gate (C25), alone on ``req``, beside the entry Read;
        the rest of step 1 is the credit's own and runs before the gate on ``au``. With
        C20's reader counts the markers run in step 2, after the gate either way, and
        the descriptor-length marker and the data Write's and Send's patches share
        ``req`` (two lanes of about equal length beside the Read)."""
        if wr == "gs" or (self.geo.readers and wr in ("len", "load_write", "load_send")):
            return "req"
        return "au"

    def _load_first(self, v: Variant) -> None:
        """C21's two WRs of step 1 that take longest, added first so that the LOAD's
        sub-master ENABLEs their lanes first: the entry Read, then the byte-count marker
        (whose condition reads the receive CQE in host memory)."""
        ro = self.ro
        in_range = self._load_in_range()
        readers = self.geo.readers
        if readers:  # C20's + 1 first, its address placed by the receive; then the Read
            self._reader_count(v, True, 1, Placed("recv", "Block Handle << 8", ro,
                                                  "request"), in_range,
                               "one reader more of the handle, a step before the entry "
                               "Read on its QP (C20, C21)")
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

    def _early_on_read_lane(self, v: Variant, sealed: CondSpec, step: int) -> None:
        """Decision C31: the early release (C16) right behind the entry Read on its lane,
        fenced (it runs once the Read has landed), instead of on the sub-master after
        the WAIT for every step-1 CQE: the Read's CQE, that WAIT, and the fetch and
        decode of the WQE behind it leave the path from one credit's gate to the next.

        Nothing but its FENCE orders it after the request markers, on three other
        lanes, so it is *opportunistic* (``twin``: the release at the end of the
        LOAD, properly ordered): a marker not landed yet reads as restored (00, the
        test wants 01) and it does nothing, the twin releasing later. What the gate
        promises the next credit -- this credit's data Write and COMPLETION are
        patched -- a marker carries: the Data Descriptor and INVALIDATE patches run on
        one lane before the descriptor-length marker, and one QP's Writes are placed in
        order; ALLOW_UNSEALED's patches of their masks only free the SEALED bit this
        release requires (rule ``opportunistic``)."""
        self.chain.wr(f"m_{v.name}_len").lane = f"{v.name}{SUB_LANE}dd"
        self._move_last(f"m_{v.name}_len")
        self.add(WrTemplate(
            f"early_{v.name}", Role.WORKER, Opcode.ENABLE, v.name, step,
            flags=WqeFlags.FENCE,
            fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
            cond=sealed, twin=f"release_{v.name}",
            note="release the next credit early, behind the entry Read (fenced; "
                 "opportunistic, C31): a sealed block cannot change before this LOAD's "
                 "data Write has read it"))

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
           Generation/Status marker (which also tests the handle's top octet and reads
           the CPU's session octet, so it runs after the gate, alone on its lane: C28),
           the descriptor-length marker, the receive's byte-count marker, each writing
           its octet of ``w_load``, and the Data Descriptor and INVALIDATE patches
           (these four before the gate: C25);
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
        early_on_lane = not self.geo.readers  # decision C31 (below)
        for name in ("p_dd_load", "p_inv_load", "c_inv_load"):  # on a lane of their own
            if name in self.chain:
                self.chain.wr(name).lane = f"{v.name}{SUB_LANE}dd"
        self._commit(v, data + 1, sealed)
        for name in (f"commit_{v.name}", f"release_{v.name}"):
            self.chain.wr(name).cond = valid(name)
        au = self._flag_cond(ALLOW_UNSEALED, True, "Flags has ALLOW_UNSEALED")
        for target in ("load_write", "load_send", f"commit_{v.name}", f"release_{v.name}"):
            # on lanes of their own (the byte-count marker's lane waits for its read of
            # host memory): :meth:`_load_lane`
            dest = f"wqe:{target}.cond_mask"
            self.add(WrTemplate(
                f"p_au_{target}", Role.WORKER, Opcode.RDMA_WRITE, v.name, data - 1,
                inline=b"\xfd", fields={"raddr": Addr(dest, 4), "rkey": Addr("key:rings")},
                places=(Place(dest, 1, "Flags mask: SEALED free if ALLOW_UNSEALED",
                              "octets", 4),),
                cond=au, remote_kind="loopback",
                note="conditional patch: ALLOW_UNSEALED frees the SEALED bit of the test"))
            self.chain.wr(f"p_au_{target}").lane = \
                f"{v.name}{SUB_LANE}{self._load_lane(target)}"
        # Pipelining (decision C16): a sealed LOAD releases the next credit early
        if not early_on_lane:
            self.add(WrTemplate(
                f"early_{v.name}", Role.WORKER, Opcode.ENABLE, v.name, data,
                fields={"target": Addr("qp:gate"), "count": Addr("wr:gate_nop", 1)},
                cond=sealed, note="release the next credit early: a sealed block cannot "
                                  "change before this LOAD's data Write has read it"))
        else:
            self._early_on_read_lane(v, sealed, data - 1)
        if self.geo.readers:  # C20: the - 1 once the data Write has completed, under the
            # + 1's condition; its address from where the receive placed the handle
            self.patch("p_h_unr", v.name, 1, [self._handle_src()], "wqe:load_unread.raddr",
                       "Block Handle << 8", ro, ("recv",))
            self.chain.wr("p_h_unr").lane = f"{v.name}{SUB_LANE}h"
            self._reader_count(v, False, data + 1, Placed("p_h_unr", "Block Handle << 8",
                                                          ro, "patch"),
                               self._load_in_range(),
                               "one reader fewer, after the data Write completed (C20)")
