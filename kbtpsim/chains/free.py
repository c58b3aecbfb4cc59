"""Chains v2's FREE (decision C20; draft, "Block Free" 1-4 and "Free-Block Ring", Free),
mixed into :class:`~kbtpsim.chains.variants.VariantSteps`.

After the request markers (step 1) and the common entry Read (step 2):

3. entry markers into the arm word: VALID (Flags 0001 or 0003), SEALED (0003), VALID
   only (0001), and a Generation about to wrap (0xFFFF: the CPU frees then, so the
   chain's Generation + 1 never gives 0) clearing an octet posted GO;
4. the unbind: a masked FetchAdd on the entry's first word that clears the Flags and
   adds 1 to the Generation, one per Flags value (conditions test equality only), so
   exactly one runs; beside it, the fold of the arm word into a second word;
5. on the unbind's own QP, after it: a Read of the handle's reader count (the LOADs'
   FetchAdds, :mod:`kbtpsim.chains.load_direct`), its low half straight into the second
   arm word, and a re-read of the entry word (the new Generation for the COMPLETION);
6. a masked FetchAdd on Tail, if the count is 0 (else the CPU takes over with the entry
   unbound and waits for the readers, as for a FREE of its own: decision C13): the
   ticket;
7. its Slot Offset patched into the slot Read and the two slot Writes;
8. the Read of the slot's Block Offset field;
9. if the slot is consumed (Block Offset all ones, tested by each WR from here on; else
   the CPU takes over with the ticket: the draft's deferred write), the Block Offset into
   the slot, then the Sequence (the ticket), on one QP in order;
10. the COMPLETION Send (new Generation, Data Length and Block Offset as they were) and
    the next credit's early release (C19); 11. the commit.
"""

from __future__ import annotations

from kbtpsim.atomics import RING_ADD_DATA, ring_add_mask
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
from kbtpsim.chains.steps import StepHelpers
from kbtpsim.chains.vocab import GO, SUB_LANE, Geometry, Variant, window8
from kbtpsim.nic.wqe import Opcode

#: the arm word's octets after the FREE's four request markers (header, Generation and
#: Status, handle range, byte count)
VALID_AT, NOWRAP_AT, SEALED_AT, UNSEALED_AT = 4, 5, 6, 7
#: the entry word's field carries a masked FetchAdd discards (Flags, Generation, Length)
FIELD_CARRIES = (1 << 63) | (1 << 47) | (1 << 31)


#: why a FREE chain is not built (:func:`free_buildable`)
FREE_NEEDS = ("FREE on the NIC needs chains v2 (frees quiesce, no LOAD re-read), native "
              "conditional WRs and the LOADs' reader counts (target.operations.free: "
              "offload; decision C20)")


def free_buildable(geo: Geometry, lowering: str) -> bool:
    """Whether the FREE chain can be built for this geometry and condition lowering."""
    return geo.readers and not geo.seqlock and lowering == "native"


class FreeSteps(StepHelpers):
    """The FREE variant's WRs, on top of the builder's helpers."""

    def _v_free(self, v: Variant) -> None:
        if not free_buildable(self.geo, self.lowering):
            raise ValueError(FREE_NEEDS)
        ro, ao = self.ro, self.ao
        n = len(self.arm_producers[v.name])
        assert n == VALID_AT, "FREE: four request markers, then the entry's octets"
        arm = f"arm_{v.name}"
        for name, slot, flags, mask, about in (
                ("valid", VALID_AT, b"\x00\x01", b"\xff\xfd", "entry VALID (Flags 0001, 0003)"),
                ("sealed", SEALED_AT, b"\x00\x03", b"\xff\xff", "entry Flags VALID|SEALED"),
                ("unsealed", UNSEALED_AT, b"\x00\x01", b"\xff\xff", "entry Flags VALID")):
            self.marker(f"m_{v.name}_{name}", v.name, 3, "buf:w", ("read_entry",),
                        *window8(flags, mask), about, arm, slot, "big")
        self.add(WrTemplate(  # draft, "Generation": never 0, so the CPU frees at 0xFFFF
            f"m_{v.name}_genwrap", Role.WORKER, Opcode.RDMA_WRITE, v.name, 3,
            inline=b"\x00",
            fields={"raddr": Addr(f"buf:{arm}", NOWRAP_AT), "rkey": Addr("key:scratch")},
            cond=CondSpec(Read("buf:w", 8, ("read_entry",), "entry word"),
                          *window8(b"\x00\x00\xff\xff", b"\x00\x00\xff\xff"),
                          "entry Generation 0xFFFF", "big"),
            remote_kind="loopback",
            note=f"marker: the Generation would wrap (the CPU frees) -> {arm}[{NOWRAP_AT}] 00"))
        markers = (*self.arm_producers[v.name], f"m_{v.name}_valid", f"m_{v.name}_sealed",
                   f"m_{v.name}_unsealed", f"m_{v.name}_genwrap")
        word = Read(f"buf:{arm}", 8, markers, f"arm word of {v.name}")
        # the unbind: Flags - (VALID|SEALED or VALID) (modulo 2^16: 0), Generation + 1
        for tag, slot, flags in (("s", SEALED_AT, 0x0003), ("u", UNSEALED_AT, 0x0001)):
            compare = bytearray(GO * 6 + bytes(2))
            maskb = bytearray(b"\xff" * 6 + bytes(2))
            compare[slot], maskb[slot] = GO[0], 0xFF
            self.patch(f"p_h_fu{tag}", v.name, 1, [self._handle_src()],
                       f"wqe:fr_unbind_{tag}.raddr", "Block Handle << 8", ro, ("recv",),
                       self._shift_at())
            self.add(WrTemplate(
                f"fr_unbind_{tag}", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, 4,
                fields={"raddr": Placed(f"p_h_fu{tag}", "Block Handle << 8", ro, "patch"),
                        "rkey": Addr("key:table"),
                        "swap_add": Const(((0x10000 - flags) << 48) | (1 << 32),
                                          f"Flags - {flags:#06x}, Generation + 1"),
                        "add_mask": Const(FIELD_CARRIES, "field carries")},
                places=(Place("buf:fr_old", 8, "the entry word before", "big"),),
                cond=CondSpec(word, bytes(compare), bytes(maskb),
                              f"{v.name} armed, entry {'VALID|SEALED' if flags == 3 else 'VALID'}"
                              ", Generation not 0xFFFF"),
                remote_kind="strided_table", atomic_word_order="big",
                note="unbind: Flags cleared, Generation + 1 (draft, 'Block Free' 2)"))
        unbound = CondSpec(word, GO * 6 + bytes(2), b"\xff" * 6 + bytes(2),
                           f"{v.name} armed, entry VALID, Generation not 0xFFFF (unbound)")
        arm2 = f"arm2_{v.name}"
        self.marker(f"m_{v.name}_fold", v.name, 4, word.loc, word.producers,
                    GO * 6, b"\xff" * 6, unbound.about, arm2, 0)
        self.chain.wr(f"m_{v.name}_fold").lane = f"{v.name}{SUB_LANE}fold"
        # after the unbind, on its QP: the readers' count, and the new Generation
        for name, dest in (("p_h_frd", "fr_readers"), ("p_h_frr", "fr_reread")):
            self.patch(name, v.name, 1, [self._handle_src()], f"wqe:{dest}.raddr",
                       "Block Handle << 8", ro, ("recv",), self._shift_at())
        for name in ("p_h_fus", "p_h_fuu", "p_h_frd", "p_h_frr"):
            self.chain.wr(name).lane = f"{v.name}{SUB_LANE}h"
        # the count's low half straight into the second arm word (a count never reaches
        # 2^32: at most every credit's LOAD at once), so the Tail FetchAdd tests it
        self.add(WrTemplate(
            "fr_readers", Role.WORKER, Opcode.RDMA_READ, v.name, 5,
            fields={"raddr": Placed("p_h_frd", "Block Handle << 8 | 4", ro, "patch",
                                    Const(4, "count octet 4")),
                    "rkey": Addr("key:readers")},
            places=(Place(f"buf:{arm2}", 4, "the handle's reader count, low half", "big",
                          1),),
            cond=unbound, remote_kind="readers",
            note="the LOADs still reading the handle, after the unbind (C20)"))
        self.add(WrTemplate(
            "fr_reread", Role.WORKER, Opcode.RDMA_READ, v.name, 5,
            fields={"raddr": Placed("p_h_frr", "Block Handle << 8", ro, "patch"),
                    "rkey": Addr("key:table")},
            # Generation, Status OK (preset 0), Data Length: the COMPLETION's order, in one
            # piece (C21: a COMPLETION gathers the handle in two)
            places=(Place("buf:fr_new", 2, "entry[0:2] Flags (unused)", "big", 8),
                    Place("buf:fr_new", 2, "entry[2:4] the new Generation", "big"),
                    Place("buf:fr_new", 4, "entry[4:8] Data Length (unchanged)", "big", 4)),
            cond=unbound, remote_kind="strided_table",
            note="the new Generation for the COMPLETION"))
        idle = CondSpec(Read(f"buf:{arm2}", 8, (f"m_{v.name}_fold", "fr_readers"),
                             "second arm word"),
                        *window8(GO + bytes(4), b"\xff" * 5),
                        f"{v.name} unbound, no reader counted")
        self.add(WrTemplate(
            "fr_fa_tail", Role.WORKER, Opcode.MASKED_FETCH_ADD, v.name, 6,
            fields={"raddr": Addr("ring:tail"), "rkey": Addr("key:ring_tail"),
                    "swap_add": Const(RING_ADD_DATA, "Add Data"),
                    "add_mask": Const(ring_add_mask(self.geo.ring_slots),
                                      "bit 63 | bit 31 | bit n+3")},
            places=(Place("buf:fa", 8, "FetchAdd result: Ticket, Slot Offset", ao),),
            cond=idle, remote_kind="ring", note="take a Tail ticket (draft, 'Free-Block "
                                                "Ring', Free)"))
        off_src = 4 if ao == "big" else 0
        off_dst = 4 if ro == "big" else 0
        for patch, dest in (("p_fr_slot", "fr_read_slot"), ("p_fr_bo", "fr_w_bo"),
                            ("p_fr_seq", "fr_w_seq")):
            self.patch(patch, v.name, 7, [(f"buf:fa+{off_src}", 4, "Slot Offset")],
                       f"wqe:{dest}.raddr", "Slot Offset", ao, ("fr_fa_tail",), off_dst)
        self.add(WrTemplate(
            "fr_read_slot", Role.WORKER, Opcode.RDMA_READ, v.name, 8,
            fields={"raddr": Placed("p_fr_slot", "Slot Offset", ao, "patch",
                                    Addr("region:ring_bo")),
                    "rkey": Addr("key:ring_bo")},
            places=(Place("buf:fr_sbo", 8, "the slot's Block Offset", ro),),
            cond=idle, remote_kind="ring", note="read the slot's Block Offset"))
        # the slot is consumed (Block Offset all ones): tested by the writes, the Send and
        # the commit themselves (posted 0: a Read that did not run fails it)
        ready = CondSpec(Read("buf:fr_sbo", 8, ("fr_read_slot",), "the slot's Block Offset"),
                         b"\xff" * 8, b"\xff" * 8, "the Tail ticket's slot is consumed")
        self.add(WrTemplate(
            "fr_w_bo", Role.WORKER, Opcode.RDMA_WRITE, v.name, 9,
            fields={"raddr": Placed("p_fr_bo", "Slot Offset", ao, "patch",
                                    Addr("region:ring_bo")),
                    "rkey": Addr("key:ring_bo")},
            gather=(Read("buf:bo+4", 8, ("read_entry",), "the entry's Block Offset"),),
            cond=ready, remote_kind="ring",
            note="the block into the slot: Block Offset first"))
        self.add(WrTemplate(
            "fr_w_seq", Role.WORKER, Opcode.RDMA_WRITE, v.name, 9,
            fields={"raddr": Placed("p_fr_seq", "Slot Offset", ao, "patch",
                                    Addr("region:ring")),
                    "rkey": Addr("key:ring")},
            gather=(Read(f"buf:fa+{4 - off_src}", 4, ("fr_fa_tail",), "Ticket"),),
            cond=ready, remote_kind="ring",
            note="then the Sequence: the Tail ticket (same QP, placed in order)"))
        self._early_release(v, 10, ready)
        self._completion(v, "fr_send", 10, None, "buf:bo", ("read_entry",),
                         generation=Read("buf:fr_new", 8, ("fr_reread",),
                                         "the new Generation, Status OK (preset), Data "
                                         "Length (unchanged)"),
                         cond=ready)
        self._commit(v, 11, ready)
