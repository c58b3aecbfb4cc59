"""Where the target's structures live in host memory, as the chains see them.

:class:`ChainLayout` is the part of :class:`kbtpsim.target.layout.TargetLayout` chains use
(table, pool), built from one with :meth:`ChainLayout.of`, plus the keys chains need: the
table's strided key and the pool region whose Tagged Offsets are Block Offsets.
:func:`aligned_block` computes the handle blocks chain conditions test.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbtpsim.chains.compiler import Geometry
from kbtpsim.nic import Access, MemoryRegion, Nic, umr
from kbtpsim.target import TargetConfig
from kbtpsim.target.layout import RingLayout, TargetLayout

#: Stride of the table's strided key: the handle is scattered one octet left (h << 8).
STRIDE = 256


def aligned_block(lo: int, hi: int) -> tuple[int, int]:
    """The largest ``(base, bits)`` with ``base`` a multiple of ``2**bits`` and
    ``[base, base + 2**bits)`` inside ``[lo, hi)`` (lowest such block on ties)."""
    if hi <= lo:
        raise ValueError("empty range")
    best = (lo, 0)
    for bits in range(0, 64):
        size = 1 << bits
        base = (lo + size - 1) // size * size
        if base + size <= hi:
            best = (base, bits)
        else:
            break
    return best


def enclosing_block(inner: tuple[int, int], lo: int, hi: int) -> tuple[int, int]:
    """The largest aligned ``(base, bits)`` block that contains the aligned block
    ``inner`` and lies inside ``[lo, hi)`` (``inner`` itself must lie inside)."""
    base, bits = inner
    if base < lo or base + (1 << bits) > hi:
        raise ValueError(f"block {inner} is not inside [{lo:#x}, {hi:#x})")
    while bits < 63:
        size = 1 << (bits + 1)
        up = base // size * size
        if up < lo or up + size > hi:
            break
        base, bits = up, bits + 1
    return base, bits


#: Tagged Offset of slot 0 in the ring key (low 32 bits zero: a chain patches the
#: FetchAdd's 32-bit Slot Offset into the low half of a remote address).
RING_TO = 1 << 32


@dataclass(frozen=True, slots=True)
class RingKeys:
    """The keys chains use on one ring: slots (TO ``RING_TO`` + Slot Offset), the slots'
    Block Offset fields (``slots_bo``: TO ``RING_TO`` + Slot Offset is octet 8 of that
    slot, so that a FREE writes the Block Offset before the Sequence: decision C20),
    and Head and Tail (TO = their addresses; remote atomics)."""

    slots: MemoryRegion
    head: MemoryRegion
    head_to: int
    tail: MemoryRegion | None = None
    tail_to: int = 0
    slots_bo: MemoryRegion | None = None


def register_ring(nic: Nic, ring: RingLayout) -> RingKeys:
    """Register ``ring``'s slots and its Head and Tail counters for a chain's Read/Write
    and FetchAdd."""
    rights = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE
    slots = nic.register_mr(ring.slots_addr, ring.slots_size, rights, base_to=RING_TO)
    head = nic.register_mr(ring.head_addr, 8, rights | Access.REMOTE_ATOMIC)
    tail = nic.register_mr(ring.tail_addr, 8, rights | Access.REMOTE_ATOMIC)
    slots_bo = nic.register_mr(ring.slots_addr + 8, ring.slots_size - 8, rights,
                               base_to=RING_TO)
    return RingKeys(slots, head, ring.head_addr, tail, ring.tail_addr, slots_bo)


def register_readers(nic: Nic, layout: ChainLayout) -> MemoryRegion:
    """The LOADs' reader counts (decision C20): one 8-octet word per table entry in the
    NIC's device memory, behind a strided key with the table's geometry (TO ``h << 8``
    is handle ``h``'s count), for the LOAD's FetchAdds and the FREE's Read."""
    rights = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE \
        | Access.REMOTE_ATOMIC
    addr = nic.dm_alloc(8 * layout.table_count, 64)
    return nic.register_strided(addr, 8, layout.table_count, STRIDE, rights,
                                base_index=layout.table_base)


@dataclass(frozen=True, slots=True)
class ChainLayout:
    """Table at ``table_addr`` (entry of ``table_base`` first), pool at ``pool_addr``
    (Block Offset b at ``pool_addr + b``)."""

    table_addr: int
    table_base: int
    table_count: int
    pool_addr: int
    block_size: int
    first_block: int
    blocks: int
    addr_le: bool
    ring_slots: int = 8  #: slots of the shared ring (rings[0] of the target layout)

    @classmethod
    def of(cls, layout: TargetLayout, config: TargetConfig) -> ChainLayout:
        """The chains' view of a memory-backed target's layout."""
        return cls(layout.table_addr, layout.table_base_handle, layout.table_count,
                   layout.pool_addr, config.block_size, config.first_block, config.blocks,
                   config.addr_le, layout.rings[0].n_slots)

    def entry_addr(self, handle: int) -> int:
        return self.table_addr + 16 * (handle - self.table_base)

    def block_addr(self, block_offset: int) -> int:
        return self.pool_addr + block_offset

    def geometry(self, config: TargetConfig, initiator: str, seqlock: bool = True,
                 readers: bool = False, stage_reads: bool = False) -> Geometry:
        """The constants of a connection's chains (handle blocks, sizes); ``seqlock``:
        LOADs re-read the entry (O3), else the target quiesces frees (C13);
        ``stage_reads``: Read-source stores read into staging (C24)."""
        ini = next(i for i in config.initiators if i.name == initiator)
        own = aligned_block(ini.handle_base, ini.handle_base + ini.handle_count)
        lo, hi = self.table_base, self.table_base + self.table_count
        # LOAD (decision T7: any handle of the trust domain): the largest aligned block
        # around the own block, inside the table, holding no other domain's handle.
        # Handles between ranges are in it: their entries are never VALID, so the chain
        # hands such a LOAD to the CPU, which answers INVALID_HANDLE.
        foreign = [(i.handle_base, i.handle_base + i.handle_count)
                   for i in config.initiators if i.trust_domain != ini.trust_domain]
        load = own
        while load[1] < 63:
            size = 1 << (load[1] + 1)
            up = load[0] // size * size
            if up < lo or up + size > hi or any(a < up + size and up < b for a, b in foreign):
                break
            load = (up, load[1] + 1)
        # the table test (every variant's entry Read) must admit the own and load blocks:
        # the largest aligned block of the table around them (not simply the table's
        # largest aligned block, which may hold another initiator's range only)
        table = enclosing_block(load, lo, hi)
        return Geometry(
            block_size=config.block_size, max_inline=config.max_inline,
            table_block=table, load_block=load, own_block=own, ring_slots=self.ring_slots,
            seqlock=seqlock, readers=readers, stage_reads=stage_reads)

    def register(self, nic: Nic) -> tuple[MemoryRegion | None, MemoryRegion]:
        """The table's strided key (None without ``strided_keys``) and the pool region
        (Tagged Offset = Block Offset)."""
        rights = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE
        table = None
        start = self.first_block * self.block_size
        if nic.profile.indirect_keys == "exp_umr" and not nic.profile.strided_keys:
            # UMR-built keys (kbtpsim.nic.umr; a layout the UMR cannot describe raises
            # KeyLayoutError, one line): interleaved table key, list pool key
            atomic = Access.REMOTE_ATOMIC if nic.profile.masked_atomics else Access.LOCAL_READ
            table = umr.table_key(nic, self.table_addr, self.table_base, self.table_count,
                                  rights | atomic).key
            pool = umr.pool_key(nic, self.pool_addr + start, start,
                                self.blocks * self.block_size, rights).key
            return table, pool
        if nic.profile.strided_keys:
            # TO (Table Base Handle + i) * 256 + j -> octet j of entry i (the key's base index
            # is the Table Base Handle, so the table may sit anywhere); atomics for the
            # ALLOC_STORE chain's Generation + 1
            atomic = Access.REMOTE_ATOMIC if nic.profile.masked_atomics else Access.LOCAL_READ
            table = nic.register_strided(self.table_addr, 16, self.table_count, STRIDE,
                                         rights | atomic, base_index=self.table_base)
        # the pool region's Tagged Offsets are Block Offsets
        pool = nic.register_mr(self.pool_addr + start, self.blocks * self.block_size, rights,
                               base_to=start)
        return table, pool
