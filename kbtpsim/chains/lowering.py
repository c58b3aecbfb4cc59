"""CAS-on-WQE condition lowering (RedN's construction, decision C5): a pass of the chain
compiler for NICs without native conditional WRs (cx5).

A conditional WR X is posted *disarmed* (a NOP with its segments); one step before it, a
loopback RDMA Read copies the octets its condition tests into X's free control-word
octets and a masked CAS on that word swaps in X's live control word when they match. X
runs in the next step, behind a WAIT/ENABLE (a prefetched WQE would run stale).
:class:`CasLowering` is the compiler's builder's half that does it (:meth:`_lower`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.chains.ir import (
    Addr,
    Chain,
    CondSpec,
    Const,
    CtrlWord,
    Order,
    Place,
    Placed,
    Read,
    Role,
    WrTemplate,
)
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.wqe import Opcode, WqeFlags

M64 = (1 << 64) - 1
#: Pseudo-buffer: the receive's CQE in the receive CQ's buffer in memory (64 octets,
#: mlx5 layout, kbtpsim.nic.cq); its octets 40..47 are 4 reserved zeros and the big-endian
#: byte count.
RCQE = "rcqe"
#: ``buf:ccqe_WR``: the CQE of this credit's connection WR ``WR`` in the connection QP's CQ
#: buffer (chains v2: one round of credits deep, so at a fixed place per credit slot;
#: decision C24)
CCQE = "ccqe"
#: ``buf:rstg``: the credit's staging buffer for a Read-source store's data (decision C24)
RSTG = "rstg"
#: the per-credit buffers in the staging region (host memory), not in the scratch
STAGING = frozenset({"stg", RSTG})

#: Control-word octets a disarmed WQE leaves free for compared data: all but octet 3, the
#: opcode, which must stay NOP (a failed CAS leaves the WQE a NOP the NIC can decode).
FREE_CTRL = (0, 1, 2, 4, 5, 6, 7)
#: Octet 0 of a control word after the first of two CASes (8 compared octets): the second
#: CAS tests it, so it arms only after the first matched (a disarmed WQE's octet 0, its
#: opmod, is 0x00 or 0x09).
STAGE_TAG = 0xA5


def ctrl_positions(tested: list[int]) -> dict[int, int]:
    """Where a condition's compared octets (offsets in its 8-octet window) go in a disarmed
    control word: unchanged if they avoid the opcode octet 3, else shifted to octets 4..7
    (QP number, ds) when they span at most 4, else packed into :data:`FREE_CTRL`."""
    if len(tested) > len(FREE_CTRL):
        raise ValueError("at most 7 compared octets fit a disarmed control word")
    if 3 not in tested:
        return {t: t for t in tested}
    lo, hi = min(tested), max(tested)
    if hi - lo < 4:
        return {t: t - lo + 4 for t in tested}
    return dict(zip(sorted(tested), FREE_CTRL, strict=False))


def at_offset(loc: str, k: int) -> str:
    """``loc`` (``buf:NAME[+n]``) moved ``k`` octets on."""
    base, _, off = loc.partition("+")
    n = int(off or 0) + k
    return f"{base}+{n}" if n else base


class CasLowering:
    """The chain builder's CAS-on-WQE pass (mixed into the compiler's builder, which
    provides ``chain``, ``ao``, ``step_wrs`` and ``add``)."""

    chain: Chain
    ao: Order
    step_wrs: dict[int, list[str]]

    if TYPE_CHECKING:
        def add(self, wr: WrTemplate) -> WrTemplate: ...

    def _lower(self) -> None:
        """Express every native condition with a masked CAS on the conditional WR's control
        word (RedN, rdma-primer.md; decision C5). The WR X is posted *disarmed* (a NOP with
        its segments). One step before X: ``X.cas_p``, a loopback RDMA Read, copies the
        compared octets of the condition's window into X's free control-word octets (not
        octet 3, the opcode); ``X.cas``, a masked CAS on that word, fenced after the Reads
        (compare: the constants, compare mask: the condition's mask, both moved to those
        octets), swaps in X's live control word when they match. X runs in the next step
        (WAIT on the CAS's CQE, then ENABLE: a prefetched WQE would run stale). A window of
        8 compared octets takes two rounds: ``X.cas`` tests octets 0..3 and leaves a staged
        NOP (a tag in octet 0), ``X.cas_p2`` then reads octets 4..7 into it and ``X.cas2``
        tests the tag and those. A placed compare operand (the Ticket) is written into
        ``X.cas``'s compare operand; a patch of X's opcode (INVALIDATE) into its swap
        operand. Names of the original WRs are unchanged; the added ones derive from them.
        """
        ch = self.chain
        for w in ch.wrs():  # a condition comparing nothing always holds
            if w.cond is not None and not any(w.cond.mask):
                w.cond = None
        conds = [w for w in ch.wrs() if w.cond is not None]
        if not conds:
            return
        work = [w for w in ch.wrs() if w.role in (Role.WORKER, Role.CONN)]
        new: dict[int, int] = {}
        prev = 0

        def at(name: str) -> int:
            w = ch.wr(name)
            return 0 if w.role is Role.RECV else new[w.step]

        for s in sorted({w.step for w in work}):
            need = prev + 1
            for x in (c for c in conds if c.step == s):
                assert x.cond is not None
                for p in x.cond.word.producers:
                    need = max(need, at(p) + 2)  # X.cas_p and X.cas, then X
                if x.cond.compare_source is not None:  # placed into the CAS's WQE
                    need = max(need, at(x.cond.compare_source.producer) + 2)
            new[s] = prev = need
        for w in work:
            w.step = new[w.step]
        # per step, on the worker QP: the Reads, the CASes (the first fenced: it waits for
        # every earlier Read), the second Reads (fenced: after the CASes), the second CASes
        plans = [self._plan_one(x) for x in conds]
        for rnd in range(4):
            fenced: set[int] = set()
            for plan in plans:
                if rnd < len(plan):
                    w = plan[rnd]
                    if rnd and w.step not in fenced:  # the round's first WR in its step
                        w.flags |= WqeFlags.FENCE
                        fenced.add(w.step)
                    self.add(w)
        for x in conds:
            self._arm(x)
        self.step_wrs = {}
        for w in ch.wrs():
            if w.role in (Role.WORKER, Role.CONN):
                self.step_wrs.setdefault(w.step, []).append(w.name)

    def _read_into(self, name: str, part: str, step: int, word: Read, tested: list[int],
                   pos: dict[int, int], dest: str, what: str) -> WrTemplate:
        """A loopback RDMA Read of the window's octets ``tested`` into ``dest`` octets
        ``pos`` (octets of the window between them that are not compared go to a scratch
        sink, so octet 3 of a control word keeps its NOP)."""
        if word.loc.startswith(("buf:stg", f"buf:{RCQE}")):
            raise ValueError(f"{name}: a condition window must be in the scratch buffers")
        lo, hi = min(tested), max(tested)
        identity = all(pos[t] == t for t in tested)
        places: list[Place] = []
        for t in range(lo, hi + 1):
            if t in pos:
                d, off = dest, pos[t]
            elif identity and t != 3:
                d, off = dest, t  # an octet of the window that is not compared: harmless
            else:
                d, off = "buf:cas_sink", t
            last = places[-1] if places else None
            if last is not None and last.dest == d and last.offset + last.length == off:
                places[-1] = Place(d, last.length + 1, last.what, "octets", last.offset)
            else:
                places.append(Place(d, 1, what if d == dest else "not compared (sink)",
                                    "octets", off))
        return WrTemplate(
            name, Role.WORKER, Opcode.RDMA_READ, part, step,
            fields={"raddr": Addr(at_offset(word.loc, lo)), "rkey": Addr("key:scratch")},
            places=tuple(places), remote_kind="loopback",
            note=f"CAS operand: {what}")

    def _cas(self, name: str, x: WrTemplate, step: int, cond: CondSpec, compare: bytes,
             mask: bytes, swap: Const | CtrlWord, reads: Read, about: str) -> WrTemplate:
        ao: ByteOrder = "little" if self.ao == "little" else "big"
        return WrTemplate(
            name, Role.WORKER, Opcode.MASKED_CAS, x.part, step,
            fields={"raddr": Addr(f"wqe:{x.name}.ctrl_word"), "rkey": Addr("key:rings"),
                    "swap_add": swap,
                    "compare": Const(int.from_bytes(compare, ao), "the constants"),
                    "compare_mask": Const(int.from_bytes(mask, ao), "the condition's mask"),
                    "swap_mask": Const(M64, "whole word")},
            places=(Place("buf:cas_r", 8, "old control word (unused)", "octets"),),
            reads=(reads,), remote_kind="loopback", targets_ctrl=True, arms=x.name,
            cas_cond=cond, atomic_word_order=self.ao, note=about)

    def _plan_one(self, x: WrTemplate) -> list[WrTemplate]:
        """X's added WRs, in the order the rounds of :meth:`_lower` post them."""
        cond = x.cond
        assert cond is not None
        s, ctrl = x.step - 1, f"wqe:{x.name}.ctrl_word"
        tested = [i for i in range(8) if cond.mask[i]]
        two = len(tested) > len(FREE_CTRL)
        first = tested[:4] if two else tested
        pos = ctrl_positions(first)
        read1 = self._read_into(f"{x.name}.cas_p", x.part, s, cond.word, first, pos, ctrl,
                                f"compared octets of {cond.about}")
        cmp_, mask = bytearray(8), bytearray(8)
        for t, p in pos.items():
            cmp_[p], mask[p] = cond.compare[t], cond.mask[t]
        word = Read(ctrl, 8, (read1.name,), f"control word of {x.name}")
        if two:  # a staged NOP: the tag in octet 0 (opmod), octet 3 NOP
            cas = self._cas(f"{x.name}.cas", x, s, cond, bytes(cmp_), bytes(mask),
                            Const(STAGE_TAG << 56 if self.ao == "big" else STAGE_TAG,
                                  "staged NOP (tag in octet 0)"),
                            word, f"stage 1 of arming {x.name}: {cond.about}, "
                            "octets 0..3")
            rest = tested[4:]
            read2 = self._read_into(f"{x.name}.cas_p2", x.part, s, cond.word, rest,
                                    {t: t for t in rest}, ctrl,
                                    f"compared octets 4..7 of {cond.about}")
            cmp2 = bytes([STAGE_TAG, 0, 0, 0]) + cond.compare[4:]
            mask2 = b"\xff\0\0\0" + cond.mask[4:]
            cas2 = self._cas(f"{x.name}.cas2", x, s, cond, cmp2, mask2,
                             CtrlWord(x.name, "live"),
                             Read(ctrl, 8, (cas.name, read2.name),
                                  f"staged control word of {x.name}"),
                             f"arm {x.name}: stage tag, {cond.about}, octets 4..7")
            return [read1, cas, read2, cas2]
        compare_src = cond.compare_source
        cas = self._cas(f"{x.name}.cas", x, s, cond, bytes(cmp_), bytes(mask),
                        CtrlWord(x.name, "live"), word, f"arm {x.name} if {cond.about}")
        if compare_src is not None:  # the compare operand is placed at run time (Ticket)
            prod = self.chain.wr(compare_src.producer)
            old, dest = f"wqe:{x.name}.cond_compare", f"wqe:{x.name}.cas.compare"
            places = []
            for pl in prod.places:
                if pl.dest == old:
                    offs = [pos[pl.offset + i] for i in range(pl.length)]
                    assert offs == list(range(offs[0], offs[0] + pl.length)), offs
                    pl = Place(dest, pl.length, pl.what, pl.order, offs[0])
                    prod.fields["raddr"] = Addr(dest, offs[0])
                places.append(pl)
            prod.places = tuple(places)
            cas.fields["compare"] = Placed(compare_src.producer, compare_src.what,
                                           compare_src.order, "patch", Const(0, "zeros"))
        return [read1, cas]

    def _arm(self, x: WrTemplate) -> None:
        """X is posted disarmed; its control word comes from its last CAS."""
        cond = x.cond
        assert cond is not None
        last = self.chain.wr(f"{x.name}.cas2" if f"{x.name}.cas2" in self.chain
                             else f"{x.name}.cas")
        # a patch of X's control word (the opcode: Send -> Send with Invalidate) would be
        # overwritten by the swap: it patches the same octet of the swap operand instead
        for fname, off in (("opmod", 0), ("opcode", 3), ("qpn", 4), ("ds", 7)):
            src = x.fields.get(fname)
            if not isinstance(src, Placed):
                continue
            prod = self.chain.wr(src.producer)
            old, dest = f"wqe:{x.name}.{fname}", f"wqe:{last.name}.swap_add"
            prod.places = tuple(
                Place(dest, pl.length, pl.what, pl.order, off + pl.offset)
                if pl.dest == old else pl for pl in prod.places)
            raddr = prod.fields.get("raddr")
            if isinstance(raddr, Addr) and raddr.ref == old:
                prod.fields["raddr"] = Addr(dest, off + raddr.offset)
            last.fields["swap_add"] = Placed(src.producer, f"{src.what} (octet {off})",
                                             "octets", "patch", CtrlWord(x.name, "live"))
            del x.fields[fname]
        x.disarmed = True
        x.cond = None
        x.fields["ctrl_word"] = Placed(last.name, f"live control word if {cond.about}",
                                       "octets", "patch")
