"""Chains' ALLOC_STORE (draft, "Block Unmapped Store"), mixed into
:class:`~kbtpsim.chains.variants.VariantSteps`: a ticket by a masked FetchAdd on Head,
the slot's Read and its Sequence and consumed tests, the slot consumed, the data into the
block, the entry (Data Length and Block Offset, then Flags and Generation + 1), the
COMPLETION. Chains v2 with native conditions run it two steps shorter (decision C18)."""

from __future__ import annotations

from kbtpsim.atomics import RING_ADD_DATA, ring_add_mask
from kbtpsim.chains.ir import (
    Addr,
    CondSpec,
    Const,
    Order,
    Place,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.chains.steps import StepHelpers
from kbtpsim.chains.vocab import GO, SEAL, Variant, window8
from kbtpsim.nic.wqe import Opcode


class AllocSteps(StepHelpers):
    """The ALLOC_STORE variants' WRs, on top of the builder's helpers."""

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
        # chains v2 with native conditions: the byte-count marker runs in step 1, so the
        # fold runs beside the entry marker (step 3, not 4), and a Generation about to
        # wrap is handed to the CPU before the ticket, so no skip-0 add: the FetchAdd on
        # Head one step earlier, the re-read, Send and commit two (decision C18). v1 and
        # the CAS-armed chains (cx5) as they were: there each test costs an arming step
        short = self._cqe_marker()
        st = {k: k - short for k in range(4, 12)}  # the fold .. the Generation add
        st.update({k: k - 2 * short for k in (13, 14, 15)})  # re-read, Send, commit
        # decision C24: a Read source of several packets lands in staging, then a marker
        # tests the Read's CQE and a copy moves the data into the block: two steps more
        # before the entry
        staged = not v.inline and self.geo.stage_reads
        if staged:
            assert short, "staged Reads need native conditions (chains v2)"
            st.update({k: st[k] + 2 for k in (10, 11, 13, 14, 15)})
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
        self.marker(f"m_{v.name}_fold", v.name, st[4], armed.word.loc, armed.word.producers,
                    armed.compare, armed.mask, armed.about, arm2, 0)
        self.marker(f"m_{v.name}_entry", v.name, 3, "buf:w", ("read_entry",),
                    *window8(b"\x00\x00", b"\xff\xff"), "entry Flags 0 (not VALID)", arm2, 1,
                    "big")
        arm2_prods = (f"m_{v.name}_fold", f"m_{v.name}_entry")
        gen_ok, gen_mask = b"", b""
        if short:  # arm2[3], posted GO (scratch.py), cleared if the Generation is 0xFFFF:
            # the CPU allocates then (draft, "Generation": never 0, so its + 1 skips 0)
            self.add(WrTemplate(
                f"m_{v.name}_genwrap", Role.WORKER, Opcode.RDMA_WRITE, v.name, 3,
                inline=b"\x00",
                fields={"raddr": Addr(f"buf:{arm2}", 3), "rkey": Addr("key:scratch")},
                cond=CondSpec(Read("buf:w", 8, ("read_entry",), "entry word"),
                              *window8(b"\x00\x00\xff\xff", b"\x00\x00\xff\xff"),
                              "entry Generation 0xFFFF", "big"),
                remote_kind="loopback",
                note="marker: the Generation would wrap (the CPU allocates) -> "
                     f"{arm2}[3] 00"))
            arm2_prods += (f"m_{v.name}_genwrap",)
            gen_ok, gen_mask = GO, b"\xff"
        armed = CondSpec(Read(f"buf:{arm2}", 8, arm2_prods, "second arm word"),
                         *window8(GO * 2 + b"\x00" + gen_ok, b"\xff" * 2 + b"\x00" + gen_mask),
                         f"{v.name} armed, entry not VALID"
                         + (", Generation not 0xFFFF" if short else ""))
        self.add(WrTemplate(
            f"{tag}_fa_head", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, st[5],
            fields={"raddr": Addr("ring:head"), "rkey": Addr("key:ring_head"),
                    "swap_add": Const(RING_ADD_DATA, "Add Data"),
                    "add_mask": Const(ring_add_mask(self.geo.ring_slots),
                                      "bit 63 | bit 31 | bit n+3")},
            places=(Place("buf:fa", 8, "FetchAdd result: Ticket, Slot Offset", ao),),
            cond=armed, remote_kind="ring", note="take a ticket"))
        # the Slot Offset is the low half of the counter word (octets 4..7 big-endian)
        off_src = 4 if ao == "big" else 0
        off_dst = 4 if wo == "big" else 0
        self.patch(f"{tag}_p_slot", v.name, st[6], [(f"buf:fa+{off_src}", 4, "Slot Offset")],
                   f"wqe:{tag}_read_slot.raddr", "Slot Offset", ao, (f"{tag}_fa_head",),
                   off_dst)
        self.patch(f"{tag}_p_cons", v.name, st[6], [(f"buf:fa+{off_src}", 4, "Slot Offset")],
                   f"wqe:{tag}_consume.raddr", "Slot Offset", ao, (f"{tag}_fa_head",),
                   off_dst)
        self.patch(f"{tag}_p_tkt", v.name, st[6], [(f"buf:fa+{4 - off_src}", 4, "Ticket")],
                   f"wqe:{tag}_seq.cond_compare", "Ticket", ao, (f"{tag}_fa_head",))
        self.add(WrTemplate(
            f"{tag}_read_slot", Role.WORKER, Opcode.RDMA_READ, v.name, st[7],
            fields={"raddr": Placed(f"{tag}_p_slot", "Slot Offset", ao, "patch",
                                    Addr("region:ring")),
                    "rkey": Addr("key:ring")},
            places=(Place("buf:seq", 8, "slot Sequence, reserved", "big"),
                    Place("buf:bo2", 8, "slot Block Offset", ro, 4)),
            cond=armed, remote_kind="ring", note="read the slot"))
        self.add(WrTemplate(
            f"{tag}_seq", Role.WORKER, Opcode.RDMA_WRITE, v.name, st[8], inline=GO,
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
            f"{tag}_consumed", Role.WORKER, Opcode.RDMA_WRITE, v.name, st[8], inline=b"\x00",
            fields={"raddr": Addr(f"buf:{arm2}", 2), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read("buf:bo2+4", 8, (f"{tag}_read_slot",), "slot Block Offset"),
                          *window8(b"\xff" * 8, b"\xff" * 8),
                          "slot Block Offset all ones (consumed)"),
            remote_kind="loopback",
            note="marker: the slot is consumed (Block Offset all ones): not ready"))
        data_wr = f"{tag}_copy" if v.inline or staged else "ar_read"
        data_field = "raddr" if v.inline or staged else "sge0.addr"
        self.patch(f"{tag}_p_bo", v.name, st[8], [("buf:bo2+4", 8, "slot Block Offset")],
                   f"wqe:{data_wr}.{data_field}", "slot Block Offset", ro,
                   (f"{tag}_read_slot",))
        for i, target in ((1, "ent_lo"), (2, "gen"), (3, "gen0"), (4, "reread")):
            if short and target == "gen0":
                continue
            what = "Block Handle << 8" + (" | 4 (Data Length, Block Offset)" if i == 1 else "")
            self.patch(f"{tag}_p_h{i}", v.name, 1, [self._handle_src()],
                       f"wqe:{tag}_{target}.raddr", what, ro, ("recv",), self._shift_at())
        ready = CondSpec(Read(f"buf:{arm2}", 8, (*arm2_prods, f"{tag}_seq",
                                                  f"{tag}_consumed"), "second arm word"),
                         *window8(GO * (4 if short else 3), b"\xff" * (4 if short else 3)),
                         "slot ready for this ticket")
        self.add(WrTemplate(
            f"{tag}_consume", Role.WORKER, Opcode.RDMA_WRITE, v.name, st[9],
            fields={"raddr": Placed(f"{tag}_p_cons", "Slot Offset", ao, "patch",
                                    Addr("region:ring")),
                    "rkey": Addr("key:ring")},
            gather=(Read("buf:seq", 4, (f"{tag}_read_slot",), "Sequence (unchanged)"),
                    Read("buf:k_zero", 4, (), "reserved"),
                    Read("buf:k_ones", 8, (), "Block Offset all ones: consumed")),
            cond=ready, remote_kind="ring", note="mark the slot consumed"))
        if v.inline:
            self.add(WrTemplate(
                data_wr, Role.WORKER, Opcode.RDMA_WRITE, v.name, st[9],
                fields={"raddr": Placed(f"{tag}_p_bo", "slot Block Offset", ro, "patch"),
                        "rkey": Addr("key:pool")},
                gather=(Read("buf:stg", bs, ("recv",), "inline data"),), cond=ready,
                remote_kind="pool", note="write the data into the block"))
        elif staged:  # decision C24
            self.staging_read(v, "ar_read", st[9], ready)
            rdok = self.read_ok_marker(v, "ar_read", st[9] + 1, arm2, 4)
            ready = CondSpec(Read(f"buf:{arm2}", 8, (*ready.word.producers, rdok),
                                  "second arm word"),
                             *window8(GO * 5, b"\xff" * 5),
                             "slot ready for this ticket, the data Read complete")
            self.staged_copy(v, data_wr, "ar_read", st[9] + 2, f"{tag}_p_bo",
                             "slot Block Offset", ready)
        else:
            self.add(WrTemplate(
                data_wr, Role.CONN, Opcode.RDMA_READ, v.name, st[9],
                fields={"raddr": Placed("p_dd_alloc_read", "DD Tagged Offset", ro, "patch"),
                        "rkey": Placed("p_dd_alloc_read", "DD STag", ro, "patch"),
                        "sge0.addr": Placed(f"{tag}_p_bo", "slot Block Offset", ro, "patch"),
                        "sge0.count": Const(bs, "Block Size"), "sge0.lkey": Addr("key:pool")},
                places=(Place("pool", bs, "the initiator's data"),), cond=ready,
                remote_kind="initiator", note="RDMA Read of the data into the block"))
        self.add(WrTemplate(
            f"{tag}_ent_lo", Role.WORKER, Opcode.RDMA_WRITE, v.name, st[10],
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
            f"{tag}_gen", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, st[11],
            fields={"raddr": Placed(f"{tag}_p_h2", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table"),
                    "swap_add": gen_add,
                    "add_mask": Const((1 << 63) | (1 << 47) | (1 << 31), "field carries")},
            # the variant's own word: with chains v1 (and v2 without dispatch) every
            # variant's WRs run for every request, and the other ALLOC_STORE variant's
            # skip-0 add must not see this variant's old Generation
            places=(Place(f"buf:{tag}_oldw", 8, "old entry word", "big"),), cond=ready,
            remote_kind="strided_table", atomic_word_order="big",
            note="Flags and Generation + 1 after Data Length and Block Offset"))
        if not short:
            self._gen_skip0(v, tag, ro)
        self.add(WrTemplate(
            f"{tag}_reread", Role.WORKER, Opcode.RDMA_READ, v.name, st[13],
            fields={"raddr": Placed(f"{tag}_p_h4", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table")},
            places=(Place("buf:wn", 8, "new entry word", "big"),), cond=ready,
            remote_kind="strided_table",
            note="the new Generation for the completion (a FetchAdd returns the old one); "
                 "buf:w keeps the entry as read_entry sampled it, the before-image a "
                 "connection failure restores (decision O5)"))
        self._early_release(v, st[14], ready)
        self._completion(v, f"{tag}_send", st[14], Read("buf:k_bs", 4, (), "Data Length"),
                         "buf:bo2", (f"{tag}_read_slot",))
        self.chain.wr(f"{tag}_send").gather = tuple(
            Read("buf:wn+2", r.length, (f"{tag}_reread",), r.about) if r.loc == "buf:w+2" else r
            for r in self.chain.wr(f"{tag}_send").gather)
        self._commit(v, st[15])
        for wr_name in (f"{tag}_send", f"commit_{v.name}", f"release_{v.name}"):
            self.chain.wr(wr_name).cond = ready

    def _gen_skip0(self, v: Variant, tag: str, ro: Order) -> None:
        """Chains v1's ALLOC_STORE: a second Generation add when the first wrapped it to
        0 (draft, "Generation": never 0)."""
        self.add(WrTemplate(
            f"{tag}_gen0", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, 12,
            fields={"raddr": Placed(f"{tag}_p_h3", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table"),
                    "swap_add": Const(1 << 32, "Generation += 1 again (skip 0)")},
            places=(Place(f"buf:{tag}_oldw2", 8, "entry word", "big"),),
            cond=CondSpec(Read(f"buf:{tag}_oldw", 8, (f"{tag}_gen",), "old entry word"),
                          *window8(b"\x00\x00\xff\xff", b"\x00\x00\xff\xff"),
                          "old Generation was 0xFFFF"),
            remote_kind="strided_table", atomic_word_order="big",
            note="skip Generation 0 (a reader may see it for an instant)"))

    _v_alloc_inline = _alloc
    _v_alloc_read = _alloc


__all__ = ["AllocSteps"]
