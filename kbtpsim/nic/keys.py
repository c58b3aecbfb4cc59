"""Indirect memory keys as mlx5 hardware builds them: a UMR work request fills an mkey
with a *repeat block* (interleaved layout) or a *KLM list* (list layout).

Sources (docs/nic-model.md, "Indirect keys"):

* upstream rdma-core: ``mlx5dv_wr_mr_interleaved`` / ``mlx5dv_wr_mr_list``
  (``providers/mlx5/man/mlx5dv_wr_post.3.md``): RC QPs only, posted inline, the mkey used
  *zero-based* (the Tagged Offset is the offset into the layout); an interleaved entry is
  ``{addr, bytes_count, bytes_skip, lkey}`` and the provider writes
  ``stride = bytes_count + bytes_skip`` (``providers/mlx5/qp.c``,
  ``umr_strided_seg_create``), so ``stride >= bytes_count``. At most
  ``(max_inline_data + 4) / 16 - 1`` interleaved entries (one 16-octet slot holds the repeat
  block header) or ``(max_inline_data + 4) / 16`` list entries
  (``mlx5_send_wr_set_mkey_layout``).
* MLNX_OFED 4.x experimental verbs (RedN's bundled ``lib/libmlx5/src/qp.c``, ``lay_umr`` and
  ``set_mkey_seg``): ``IBV_EXP_WR_UMR_FILL`` with ``IBV_EXP_UMR_REPEAT`` or
  ``IBV_EXP_UMR_MR_LIST``; the stride is given directly (one dimension only) and the mkey's
  start address is ``base_addr`` (not zero-based); the KLM list may be inline or in a
  registered buffer.
* field widths (``providers/mlx5/mlx5dv.h``, ``struct mlx5_wqe_umr_repeat_block_seg`` /
  ``_repeat_ent_seg`` / ``_klm_seg``): per entry a 16-bit ``byte_count`` and 16-bit
  ``stride``; per repeat block a 32-bit ``byte_count`` and a 32-bit ``repeat_count``; a
  KLM entry's 32-bit ``byte_count`` is documented "up to 2GB".

The model checks every constraint when the key is built (:func:`check_layout`), so a
layout hardware would refuse is refused at start-up with one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from kbtpsim.nic.profile import NicProfile

#: API flavours (``NicProfile.indirect_keys``)
NONE = "none"
EXP_UMR = "exp_umr"  #: MLNX_OFED 4.x ibv_exp_post_send(IBV_EXP_WR_UMR_FILL)
MLX5DV = "mlx5dv"  #: upstream rdma-core mlx5dv_wr_mr_interleaved / mlx5dv_wr_mr_list
APIS = (NONE, EXP_UMR, MLX5DV)

U16 = (1 << 16) - 1
U32 = (1 << 32) - 1
#: a KLM entry maps up to 2 GB (mlx5dv.h, struct mlx5_wqe_umr_klm_seg: "up to 2GB")
KLM_MAX = 1 << 31
#: max_inline_data the model creates its UMR QP with (mlx5dv_wr_post(3): "more than 3
#: interleaved / 4 list entries need a larger WQE, asked for with max_inline_data")
UMR_QP_MAX_INLINE = 252
#: UMR WQE segments before the translation entries (providers/mlx5/qp.c): control (16),
#: UMR control (48), mkey context (64)
UMR_HEADER = 16 + 48 + 64


class KeyLayoutError(ValueError):
    """A layout the UMR cannot describe; the message names the field and value."""


class Layout(IntEnum):
    INTERLEAVED = 1
    LIST = 2


@dataclass(frozen=True, slots=True)
class Entry:
    """One translation entry: ``byte_count`` octets of layout space map to memory at
    ``va`` (+ ``stride`` per repeat for an interleaved layout) through the direct key
    ``lkey``."""

    va: int
    byte_count: int
    lkey: int
    stride: int = 0


@dataclass(frozen=True, slots=True)
class IndirectLayout:
    """An mkey's layout: ``repeat_count`` repeats of ``entries`` (INTERLEAVED), or the
    entries once, in order (LIST). ``start`` is the Tagged Offset of layout octet 0
    (0 for a zero-based mkey)."""

    kind: Layout
    entries: tuple[Entry, ...]
    repeat_count: int = 1
    start: int = 0

    @property
    def per_repeat(self) -> int:
        return sum(e.byte_count for e in self.entries)

    @property
    def length(self) -> int:
        return self.per_repeat * (self.repeat_count if self.kind is Layout.INTERLEAVED else 1)

    def locate(self, off: int, length: int) -> tuple[Entry, int] | None:
        """(entry, address) of layout offset ``off`` if ``length`` octets from there lie in
        one entry; None otherwise (outside the layout, or across an entry boundary: the
        hardware would split the access over two translations, which the model's
        single-address DMA does not, so it refuses it; the chains never do so)."""
        if off < 0 or length < 0 or off + length > self.length:
            return None
        if self.kind is Layout.INTERLEAVED:
            r, o = divmod(off, self.per_repeat)
        else:
            r, o = 0, off
        for e in self.entries:
            if o < e.byte_count:
                if o + length > e.byte_count:
                    return None
                return e, e.va + r * e.stride + o
            o -= e.byte_count
        return None


def max_entries(api: str, kind: Layout) -> int:
    """Translation entries one inline UMR WQE carries (mlx5_send_wr_set_mkey_layout)."""
    slots = (UMR_QP_MAX_INLINE + 4) // 16
    return slots - 1 if kind is Layout.INTERLEAVED else slots


def check_layout(api: str, layout: IndirectLayout, what: str) -> None:
    """Raise :class:`KeyLayoutError` (one line: ``what``, the field, the value, the limit)
    if ``api`` cannot build ``layout``."""
    def bad(msg: str) -> KeyLayoutError:
        return KeyLayoutError(f"{what}: {msg}")

    if api not in (EXP_UMR, MLX5DV):
        raise bad(f"no indirect keys on this stack (indirect_keys={api!r})")
    n = len(layout.entries)
    limit = max_entries(api, layout.kind)
    if not 0 < n <= limit:
        raise bad(f"{n} translation entries; one inline UMR WQE holds 1..{limit} "
                  f"(max_inline_data {UMR_QP_MAX_INLINE})")
    if api == MLX5DV and layout.start:
        raise bad(f"start address {layout.start:#x}: an mlx5dv indirect mkey is zero-based "
                  "(mlx5dv_wr_post(3)), its first octet is Tagged Offset 0")
    if not 0 <= layout.start < 1 << 64 or layout.start + layout.length > 1 << 64:
        raise bad(f"start address {layout.start:#x} + length {layout.length} exceeds 64 bits")
    if layout.kind is Layout.INTERLEAVED:
        if not 0 < layout.repeat_count <= U32:
            raise bad(f"repeat_count {layout.repeat_count} is not in 1..{U32} (32-bit field)")
        if layout.per_repeat > U32:
            raise bad(f"repeat block byte_count {layout.per_repeat} exceeds 32 bits")
        for i, e in enumerate(layout.entries):
            if not 0 < e.byte_count <= U16:
                raise bad(f"entry {i} byte_count {e.byte_count} is not in 1..{U16} "
                          "(16-bit field)")
            if not 0 <= e.stride <= U16:
                raise bad(f"entry {i} stride {e.stride} is not in 0..{U16} (16-bit field)")
            if api == MLX5DV and e.stride < e.byte_count:
                raise bad(f"entry {i} stride {e.stride} < byte_count {e.byte_count}: "
                          "mlx5dv sets stride = bytes_count + bytes_skip")
    else:
        for i, e in enumerate(layout.entries):
            if not 0 < e.byte_count <= KLM_MAX:
                raise bad(f"list entry {i} length {e.byte_count} is not in 1..{KLM_MAX} "
                          "(a KLM maps up to 2 GB)")


def umr_wqe_size(layout: IndirectLayout) -> int:
    """Octets of the inline UMR WQE (control, UMR control, mkey context, then the entries
    padded to 64 octets; an interleaved layout's repeat block header takes one slot)."""
    slots = len(layout.entries) + (1 if layout.kind is Layout.INTERLEAVED else 0)
    return UMR_HEADER + -(-16 * slots // 64) * 64


@dataclass(frozen=True, slots=True)
class UmrCost:
    """What building one key costs (setup, not per request): CPU ns and NIC-side ps."""

    wqe_octets: int
    cpu_ns: float  #: CPU: build the WQE and ring the doorbell
    nic_ps: int  #: doorbell seen, WQE fetched by DMA, mkey context and entries written


def umr_cost(profile: NicProfile, layout: IndirectLayout) -> UmrCost:
    """The cost of the UMR WQE that builds ``layout`` on ``profile``'s NIC: the CPU posts
    it (``cpu_post_ns`` + ``cpu_doorbell_ns``), the NIC sees the doorbell (``mmio_ns``),
    fetches the WQE by DMA (a PCIe read: ``pcie_latency_ns`` twice, ``host_mem_ns``,
    the octets at ``pcie_gbps``) and writes the mkey (``umr_cycles``, an estimate)."""
    p = profile
    size = umr_wqe_size(layout)
    fetch_ns = 2 * p.pcie_latency_ns + p.host_mem_ns + size * 8 / p.pcie_gbps
    cyc_ns = 1000.0 / p.clock_mhz
    nic_ns = p.mmio_ns + fetch_ns + (
        p.doorbell_cycles + p.decode_cycles + p.umr_cycles + p.cqe_cycles) * cyc_ns
    return UmrCost(size, p.cpu_post_ns + p.cpu_doorbell_ns, round(nic_ns * 1000))


# --------------------------------------------------------------------- the chains' keys
#: table entry octets, and the Tagged Offset step between handles (the handle is scattered
#: one octet left into the Read's remote address: TO = h << 8)
ENTRY = 16
STEP = 256


@dataclass(frozen=True, slots=True)
class TableKeyPlan:
    """How the block table's key is built: the layout (with placeholder lkeys 0 = table
    region, 1 = filler region) and the filler region's size."""

    layout: IndirectLayout
    filler_size: int


def plan_table_key(api: str, table_base: int, table_count: int,
                   step: int = STEP) -> TableKeyPlan:
    """The layout that maps TO ``h * step + j`` (``j < 16``) to octet ``j`` of entry
    ``h - table_base``: an interleaved layout of ``table_count`` repeats of
    ``{table + 16 k, 16 octets, stride 16}`` then ``{filler + (step - 16) k, step - 16
    octets, stride step - 16}`` (the filler is real memory the chains never touch; a
    stride of 0 would need no filler but neither API documents one shorter than the
    entry), starting at TO ``table_base * step``. Upstream's zero-based keys start at TO 0
    instead: that needs ``table_base`` == 0. Raises :class:`KeyLayoutError` otherwise."""
    what = f"block table key ({table_count} handles from {table_base:#x})"
    if table_count <= 0:
        raise KeyLayoutError(f"{what}: the table is empty")
    fill = step - ENTRY
    layout = IndirectLayout(
        Layout.INTERLEAVED, (Entry(0, ENTRY, 0, ENTRY), Entry(0, fill, 1, fill)),
        table_count, (table_base * step) & ((1 << 64) - 1))
    if table_base * step >= 1 << 64:
        raise KeyLayoutError(f"{what}: start TO {table_base:#x} * {step} exceeds 64 bits")
    check_layout(api, layout, what)
    return TableKeyPlan(layout, fill * table_count)


def plan_pool_key(api: str, start: int, length: int) -> IndirectLayout:
    """The pool's key: TO ``start + b`` -> pool octet ``b``: a list layout of KLM entries
    of at most 2 GB each, starting at TO ``start`` (placeholder lkey 0 = the pool region,
    entry ``i``'s va is an offset into it)."""
    what = f"pool key ({length} octets from Block Offset {start:#x})"
    entries = []
    off = 0
    while off < length:
        n = min(KLM_MAX, length - off)
        entries.append(Entry(off, n, 0))
        off += n
    layout = IndirectLayout(Layout.LIST, tuple(entries), 1, start)
    check_layout(api, layout, what)
    return layout
