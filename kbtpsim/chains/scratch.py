"""A credit's scratch buffers (mixed into :class:`~kbtpsim.chains.post.ChainServer`):
which buffers its chain's templates name and their sizes, where each credit slot's lie,
and what they hold when posted (the sentinels a chain's tests and a failed connection's
salvage rely on)."""

from __future__ import annotations

from kbtpsim.chains.compiler import CONSTS, RCQE
from kbtpsim.chains.ir import Addr, WrTemplate
from kbtpsim.chains.lowering import CCQE, RSTG
from kbtpsim.chains.vocab import GO
from kbtpsim.chains.wr_build import _LOC, _Credit
from kbtpsim.nic import Nic


class ScratchBuffers:
    """Per-credit scratch buffers and staging (module docstring)."""

    nic: Nic
    templates: list[WrTemplate]
    sizes: dict[str, int]
    live: dict[int, _Credit]
    credits: int
    scratch_addr: int
    slot_size: int
    staging_addr: int
    stg_size: int
    rstg_size: int

    def _buffer_sizes(self) -> dict[str, int]:
        names: dict[str, int] = {"hdr": 8, "ct": 32, "dd": 24, "w": 8, "bo": 16, "done": 8}
        for w in self.templates:
            for src in [*w.fields.values()]:
                if isinstance(src, Addr) and src.ref.startswith("buf:"):
                    names.setdefault(src.ref[4:], 8)
            for rd in w.gather + ((w.cond.word,) if w.cond else ()):
                m = _LOC.match(rd.loc)
                if m and m.group(1) == "buf":
                    names.setdefault(m.group(2), 8)
            for p in w.places:
                m = _LOC.match(p.dest)
                if m and m.group(1) == "buf":
                    size = max(8, p.offset + p.length)
                    names[m.group(2)] = max(names.get(m.group(2), 8), size)
        for k in CONSTS:
            names.pop(k, None)
        names.pop(RCQE, None)
        for k in [k for k in names if k.startswith(CCQE + "_")]:  # in the conn CQ (C24)
            del names[k]
        names.pop("k_bs", None)
        names.pop("k_st_bs", None)
        return {k: (v + 7) // 8 * 8 for k, v in names.items()}

    def _init_buffers(self, slot: int) -> dict[str, int]:
        mem = self.nic.host.memory
        bufs = self._buffer_addrs(slot)
        for name, size in self.sizes.items():
            at = bufs[name]
            # all ones in the entry word and the FetchAdd result: nothing read yet (a
            # Ticket never reads all ones with its Slot Offset); tests of an entry never
            # read fail, and a failed connection's salvage tells what ran (decision O5)
            fill = b"\xff" * size if name in ("w", "fa", "fr_old", "fr_cnt") else bytes(size)
            if name == "w_load" and "au_load" not in self.sizes:  # C21: Generation,
                # Status OK (0), Data Length; Flags; the markers' octets (load_direct.py)
                fill = b"\xff\xff" + bytes(2) + b"\xff" * 4 + bytes(5) \
                    + b"\xff" * (size - 13)
            elif name == "w_load":  # C15: Generation, Status OK (0), Data Length; Flags
                # A, B, the byte count's octet (chains/load_direct.py)
                fill = b"\xff\xff" + bytes(2) + b"\xff" * 4 + b"\x00\x03\x00\x03" \
                    + bytes(1) + b"\xff" * (size - 13)
            elif name == "arm_free":  # C20: octet 5, the Generation test, holds unless
                fill = bytes(5) + GO + bytes(size - 6)  # its marker clears it (free.py)
            elif name == "arm2_free":  # C20: octets 1..4, the reader count's low half,
                fill = bytes(1) + b"\xff" * 4 + bytes(size - 5)  # until the Read places it
            elif name.startswith("arm2_") and f"m_{name[5:]}_genwrap" in self._position:
                # chains v2's ALLOC_STORE: octet 3, the Generation test, holds unless its
                # marker clears it (chains/variants.py)
                fill = bytes(3) + GO + bytes(size - 4)
            elif name == "au_load":  # C15: where ALLOW_UNSEALED scatters the entry Flags
                fill = (bufs["w_load"] + 10).to_bytes(
                    8, self.nic.profile.wqe_field_byte_order).ljust(size, b"\0")
            if name == "ct":
                fill = CONSTS["k_hdr"] + bytes(size - 4)
            elif name in ("seq", "bo", "bo2"):  # slot Sequence / Block Offsets: unread
                fill = (b"\xff" * 4 + bytes(size - 4)) if name == "seq" else \
                    (bytes(4) + b"\xff" * 8 + bytes(size - 12))
            mem.write(at, fill)
        return bufs

    def _bufs_of(self, credit: int) -> dict[str, int]:
        cr = self.live.get(credit)
        return cr.bufs if cr is not None else self._buffer_addrs(credit % self.credits)

    def _buffer_addrs(self, slot: int) -> dict[str, int]:
        """The addresses of credit slot ``slot``'s scratch buffers and staging."""
        at = self.scratch_addr + slot * self.slot_size
        bufs = {}
        for name, size in self.sizes.items():
            bufs[name] = at
            at += size
        bufs["stg"] = self.staging_addr + slot * self.stg_size
        if self.rstg_size:  # a Read-source store's staged data (decision C24)
            bufs[RSTG] = self.staging_addr + self.stg_size * self.credits \
                + slot * self.rstg_size
        return bufs


__all__ = ["ScratchBuffers"]
