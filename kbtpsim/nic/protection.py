"""Memory regions, memory windows, indirect and strided keys, and the protection check.

A :class:`MemoryRegion` maps Tagged Offsets (TOs) of one STag to host addresses. As in
InfiniBand the TO of an ordinary region is the virtual address itself (``base_to == addr``).
A *strided* region (a profile option, :attr:`NicProfile.strided_keys`) maps TO ``k * stride
+ j`` to ``addr + entry_size * (k - base_index) + j`` (``j + length <= entry_size``), so a
table index scattered straight into a WQE's address field (stride 1), or shifted by whole
octets (stride 256, ...), finds its entry.

An *indirect* key (:meth:`ProtectionTable.register_indirect`) is what an mlx5 UMR work
request builds (:mod:`kbtpsim.nic.keys`): an interleaved (repeat block) or list layout of
entries, each mapping octets of the key to memory of a direct region; an access is
translated through the layout, then checked against the entry's region (range, and
LOCAL_WRITE for a write). Each indirect key has a translation cost per access
(``xlat_ps``, charged by the responder; an estimate, docs/nic-model.md).

A memory window is a region whose range lies inside a parent region, bound to one QP: only
that QP's incoming requests may use its STag, and it is invalidated by a received Send with
Invalidate or by a LOCAL_INV work request.

:meth:`ProtectionTable.translate` is the one check every DMA goes through: it returns the
host address or ``-1``; the caller chooses the status (LOC_PROT_ERR or REM_ACCESS_ERR).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntFlag

from kbtpsim.nic.errors import ProtectionError
from kbtpsim.nic.keys import IndirectLayout


class Access(IntFlag):
    """Access rights of a region or window (values of ``ibv_access_flags``)."""

    LOCAL_READ = 0  #: always granted
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8
    MW_BIND = 16


#: Rights as plain ints, for the per-packet checks (IntFlag arithmetic is slow).
R_LOCAL_READ = 0
R_LOCAL_WRITE = int(Access.LOCAL_WRITE)
R_REMOTE_WRITE = int(Access.REMOTE_WRITE)
R_REMOTE_READ = int(Access.REMOTE_READ)
R_REMOTE_ATOMIC = int(Access.REMOTE_ATOMIC)
#: All rights a region can carry.
ALL_ACCESS = (
    Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
    | Access.MW_BIND
)
#: STag that ends a receive scatter list (mlx5's MLX5_INVALID_LKEY); never allocated.
INVALID_STAG = 0x100
_KEY_BYTE = 0x5A


@dataclass(frozen=True, slots=True)
class MemoryRegion:
    """A registered region or a bound memory window.

    ``stride``/``entry_size`` are non-zero only for a strided key. ``qpn`` is the QP a
    window is bound to (``None`` for a region).
    """

    stag: int
    addr: int
    length: int
    access: Access
    base_to: int
    stride: int = 0
    entry_size: int = 0
    qpn: int | None = None
    in_nic_memory: bool = False
    layout: IndirectLayout | None = None  #: an indirect (UMR-built) key's layout

    @property
    def lkey(self) -> int:
        return self.stag

    @property
    def rkey(self) -> int:
        return self.stag

    @property
    def is_window(self) -> bool:
        return self.qpn is not None

    def to_of(self, addr: int) -> int:
        """The Tagged Offset of host address ``addr`` (ordinary regions and windows)."""
        return self.base_to + (addr - self.addr)


class ProtectionTable:
    """All STags of one NIC (one protection domain)."""

    __slots__ = ("_next_index", "_regions", "xlat_ps")

    def __init__(self) -> None:
        self._regions: dict[int, MemoryRegion] = {}
        self._next_index = 1
        #: STag -> extra translation time (ps) of each access through an indirect key
        self.xlat_ps: dict[int, int] = {}

    def _new_stag(self, stag: int | None = None) -> int:
        """The next free STag, or ``stag`` if it is given, valid and unused."""
        if stag is not None:
            if not 0 < stag < 1 << 32 or stag == INVALID_STAG:
                raise ProtectionError(f"STag {stag:#x} is not a valid 32-bit STag")
            if stag in self._regions:
                raise ProtectionError(f"STag {stag:#x} is in use")
            return stag
        while True:
            new = (self._next_index << 8) | _KEY_BYTE
            self._next_index += 1
            if new not in self._regions:
                return new

    def register(
        self,
        addr: int,
        length: int,
        access: Access,
        *,
        base_to: int | None = None,
        in_nic_memory: bool = False,
        stag: int | None = None,
    ) -> MemoryRegion:
        """Register ``[addr, addr + length)``; the TO base defaults to ``addr``."""
        if length <= 0:
            raise ProtectionError(f"region length must be positive, got {length!r}")
        if addr < 0 or addr + length > 1 << 64:
            raise ProtectionError(f"region [{addr:#x}, +{length}) is outside the address space")
        if access & ~ALL_ACCESS:
            raise ProtectionError(f"unknown access bits {int(access):#x}")
        if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not (
            access & Access.LOCAL_WRITE
        ):
            raise ProtectionError("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (IB rule)")
        region = MemoryRegion(
            self._new_stag(stag), addr, length, Access(access),
            addr if base_to is None else base_to, in_nic_memory=in_nic_memory,
        )
        self._regions[region.stag] = region
        return region

    def register_strided(
        self, addr: int, entry_size: int, n_entries: int, stride: int, access: Access,
        base_index: int = 0,
    ) -> MemoryRegion:
        """A strided key: TO ``k * stride + j`` -> byte ``j`` of entry ``k - base_index`` at
        ``addr + entry_size * (k - base_index)`` (``j + length <= entry_size``). With
        stride 1 a handle ``k`` scattered unchanged into an address field names its entry."""
        if entry_size <= 0 or n_entries <= 0 or stride <= 0 or base_index < 0:
            raise ProtectionError("entry_size, n_entries and stride must be positive, "
                                  "base_index >= 0")
        region = self.register(addr, entry_size * n_entries, access)
        region = MemoryRegion(region.stag, addr, stride * n_entries, region.access,
                              base_index * stride, stride, entry_size)
        self._regions[region.stag] = region
        return region

    def register_indirect(self, layout: IndirectLayout, access: Access, *,
                          xlat_ps: int = 0) -> MemoryRegion:
        """An indirect key over ``layout`` (what a UMR WQE builds; its constraints are
        checked by :func:`kbtpsim.nic.keys.check_layout` before this is called): TO
        ``layout.start + off`` -> the entry holding layout offset ``off``. Every entry's
        ``lkey`` must name a registered direct region (not a window, not indirect)."""
        for e in layout.entries:
            ref = self._regions.get(e.lkey)
            if ref is None or ref.is_window or ref.layout is not None or ref.stride:
                raise ProtectionError(f"indirect key entry names {e.lkey:#x}, which is not "
                                      "a registered direct region")
        if access & ~ALL_ACCESS or access & Access.MW_BIND:
            raise ProtectionError(f"access bits {int(access):#x} not allowed on an "
                                  "indirect key")
        region = MemoryRegion(self._new_stag(), 0, layout.length, Access(access),
                              layout.start, layout=layout)
        self._regions[region.stag] = region
        if xlat_ps:
            self.xlat_ps[region.stag] = xlat_ps
        return region

    def bind_window(
        self, parent: MemoryRegion, qpn: int, addr: int, length: int, access: Access,
        *, base_to: int | None = None, stag: int | None = None,
    ) -> MemoryRegion:
        """Bind a new type-2 memory window over part of ``parent`` to QP ``qpn``; its
        Tagged Offsets start at ``base_to`` (default ``addr``)."""
        if parent.stag not in self._regions or parent.is_window or parent.stride or \
                parent.layout is not None:
            raise ProtectionError("a window binds over a registered, direct region")
        if not parent.access & Access.MW_BIND:
            raise ProtectionError(f"region {parent.stag:#x} lacks the MW_BIND right")
        if addr < parent.addr or addr + length > parent.addr + parent.length or length <= 0:
            raise ProtectionError("window range is not inside the parent region")
        if access & ~(Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC):
            raise ProtectionError("a window carries only remote rights")
        if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not (
            parent.access & Access.LOCAL_WRITE
        ):
            raise ProtectionError("remote write/atomic windows need LOCAL_WRITE on the parent")
        window = MemoryRegion(self._new_stag(stag), addr, length, Access(access),
                              addr if base_to is None else base_to, qpn=qpn)
        self._regions[window.stag] = window
        return window

    def get(self, stag: int) -> MemoryRegion | None:
        return self._regions.get(stag)

    def deregister(self, stag: int) -> None:
        if self._regions.pop(stag, None) is None:
            raise ProtectionError(f"unknown STag {stag:#x}")

    def invalidate(self, stag: int) -> bool:
        """Invalidate a window's STag (Send with Invalidate, LOCAL_INV); False if unknown."""
        self.xlat_ps.pop(stag, None)
        return self._regions.pop(stag, None) is not None

    def translate(
        self, stag: int, to: int, length: int, need: int, qpn: int | None = None
    ) -> int:
        """Host address for ``length`` bytes at TO ``to`` of ``stag``, or ``-1`` if refused.

        ``need`` is the right the access needs (``Access.LOCAL_READ`` for a local read);
        ``qpn`` is the QP an incoming request arrived on (windows check their binding).
        """
        region = self._regions.get(stag)
        if region is None or (need and not int(region.access) & need):
            return -1
        if region.qpn is not None and region.qpn != qpn:
            return -1
        off = to - region.base_to
        if off < 0 or length < 0:
            return -1
        if region.layout is not None:
            return self._indirect(region.layout, off, length, need)
        if region.stride:
            k, j = divmod(off, region.stride)
            if off >= region.length or j + length > region.entry_size:
                return -1
            return region.addr + region.entry_size * k + j
        if off + length > region.length:
            return -1
        return region.addr + off

    def _indirect(self, layout: IndirectLayout, off: int, length: int, need: int) -> int:
        """Translate through an indirect key's layout, then check the entry's direct
        region: the address range, and LOCAL_WRITE where the access writes."""
        hit = layout.locate(off, length)
        if hit is None:
            return -1
        entry, addr = hit
        ref = self._regions.get(entry.lkey)
        if ref is None or addr < ref.addr or addr + length > ref.addr + ref.length:
            return -1
        writes = need & (R_REMOTE_WRITE | R_REMOTE_ATOMIC | R_LOCAL_WRITE)
        if writes and not int(ref.access) & R_LOCAL_WRITE:
            return -1
        return addr
