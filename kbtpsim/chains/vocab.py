"""What the chain compiler builds against: the request layout it reads, the constants it
gathers, and its fast-path variants (:data:`VARIANTS`, :data:`OPERATIONS`) with the
geometry their constants depend on (:class:`Geometry`)."""

from __future__ import annotations

from dataclasses import dataclass

from kbtpsim.chains.ir import Order
from kbtpsim.chains.lowering import M64
from kbtpsim.nic.memory import ByteOrder

GO = b"\x01"
INVALIDATE = 0x0008  #: RequestFlag.INVALIDATE (FORMATS.md "Flags")
SEAL = 0x0002  #: RequestFlag.SEAL
ALLOW_UNSEALED = 0x0010  #: RequestFlag.ALLOW_UNSEALED
#: Constants every chain gathers from (one shared buffer per connection).
CONSTS = {"k_hdr": bytes([1, 0x20, 0, 0]), "k_zero": bytes(8), "k_valid": b"\x00\x01",
          "k_ones": b"\xff" * 8}
REQ_LEN = 40  #: header (24) + Data Descriptor (16)
FREE_LEN = 24  #: a FREE without RECORD: the header alone (FORMATS.md)
#: Octet of the entry Read's arm word the CPU presets to 01 only while the connection's
#: session is established (after HELLO, before GOODBYE): without the entry Read every
#: entry marker fails (``w`` is preset to all ones), so no variant can arm.
SESSION_OCTET = 1
#: Chains v2 (decision C15): a LOAD reads its own entry, conditional on its arm word,
#: whose octet 4 (after its four request markers) is the CPU's session octet too.
LOAD_SESSION_OCTET = 4
#: Decision C21 (chains v2's two-step LOAD): octets of its word ``w_load`` after
#: Generation, Status and Data Length (+0..+7): the entry's Flags (2), then the markers'
#: octets (Generation/Status with the handle's top octet and the CPU's session octet,
#: descriptor length, receive byte count). The step-2 test reads +5..+12.
W_FLAGS, W_GS, W_LEN, W_BC = 8, 10, 11, 12
#: C21: the CPU's session octet sits in the request copy ``ct``, in the window of the
#: Generation/Status marker (octets 12..18 of ``ct`` are not received there)
CT_SESSION = 18
#: A variant's further lane (chains v2) is named VARIANT + SUB_LANE + tag, e.g. ``load__cqe``
SUB_LANE = "__"


def session_octets(bufs: dict[str, int]) -> list[int]:
    """Where the CPU writes a credit's session octet (01 while the session is
    established): the common entry Read's arm word and, with C15's LOAD, the LOAD's."""
    out = [bufs["arm_read"] + SESSION_OCTET] if "arm_read" in bufs else []
    if "w_load" in bufs:  # C15's LOAD; C21's (no arm word) in its Generation marker
        out.append(bufs["arm_load"] + LOAD_SESSION_OCTET if "arm_load" in bufs
                   else bufs["ct"] + CT_SESSION)
    return out

# Request layout (FORMATS.md "Common header", "Descriptors")
RID, HANDLE, GEN_STATUS, DD_STAG, DD_TO, DD_LEN = 4, 12, 20, 24, 28, 36


@dataclass(frozen=True, slots=True)
class Geometry:
    """What the constants in a chain depend on."""

    block_size: int = 4096
    max_inline: int = 4096
    table_block: tuple[int, int] = (0x4000, 8)  #: (base, bits): handles the table key covers
    load_block: tuple[int, int] = (0x4000, 8)  #: handles this connection may LOAD
    own_block: tuple[int, int] = (0x4000, 4)  #: handles this connection may store to
    ring_slots: int = 8  #: N, slots of the ring the connection allocates from
    #: a LOAD re-reads the entry after the data (decision O3); False where the target
    #: returns a freed block only once no chain can still read it (chains v2, C13)
    seqlock: bool = True
    #: LOADs count themselves readers of their handle (a FetchAdd before the entry Read,
    #: one after the data Write), so that a FREE can run on the NIC (decision C20)
    readers: bool = False
    #: a Read-source store's data Read lands in the credit's staging buffer, and a copy
    #: into the block runs only if the Read's CQE says it completed (chains v2 with native
    #: conditions, blocks of several packets: decision C24); otherwise the Read lands in
    #: the block itself, and the verifier's rule ``torn-read`` keeps Reads of several
    #: packets off the chains
    stage_reads: bool = False


@dataclass(frozen=True, slots=True)
class Variant:
    """One fast path of the per-credit chain."""

    name: str  #: "load", "store_inline", "store_read", "alloc_inline", "alloc_read", "free"
    op: str  #: "LOAD", "STORE", "ALLOC_STORE", "FREE"
    opcode: int
    flags: int  #: flags the fast path accepts ...
    flags_free: int  #: ... with these bits free to vary
    inline: bool
    about: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("load", "LOAD", 0x10, 0x0000, 0x0018, False,
            "LOAD, flags 0 or ALLOW_UNSEALED [| INVALIDATE], of a full block, sealed "
            "(or VALID only, with ALLOW_UNSEALED)"),
    Variant("store_inline", "STORE", 0x11, 0x0001, 0x0002, True,
            "STORE, INLINE [| SEAL], of a full block"),
    Variant("store_read", "STORE", 0x11, 0x0000, 0x000A, False,
            "STORE, RDMA Read source, flags 0 [| SEAL] [| INVALIDATE], of a full block"),
    Variant("alloc_inline", "ALLOC_STORE", 0x12, 0x0001, 0x0002, True,
            "ALLOC_STORE, INLINE [| SEAL], of a full block"),
    Variant("alloc_read", "ALLOC_STORE", 0x12, 0x0000, 0x000A, False,
            "ALLOC_STORE, RDMA Read source, flags 0 [| SEAL] [| INVALIDATE], of a full "
            "block"),
    Variant("free", "FREE", 0x13, 0x0000, 0x0000, False,
            "FREE, flags 0, of a bound handle (chains v2 with native conditions and the "
            "LOADs' reader counts: decision C20)"),
)}
#: Operation name (CLI) -> variants.
OPERATIONS: dict[str, tuple[str, ...]] = {
    "LOAD": ("load",),
    "STORE": ("store_inline", "store_read"),
    "STORE-INLINE": ("store_inline",),
    "STORE-READ": ("store_read",),
    "ALLOC_STORE": ("alloc_inline", "alloc_read"),
    "ALLOC_STORE-INLINE": ("alloc_inline",),
    "ALLOC_STORE-READ": ("alloc_read",),
    "FREE": ("free",),
}


def msg_length(v: Variant, geo: Geometry) -> int:
    """The octet count of a request the variant serves: header and Data Descriptor, plus
    Block Size octets of inline data for INLINE variants; the header alone for FREE."""
    if v.op == "FREE":
        return FREE_LEN
    return REQ_LEN + (geo.block_size if v.inline else 0)


def window8(compare: bytes, mask: bytes) -> tuple[bytes, bytes]:
    """``compare`` and ``mask`` padded to an 8-octet condition window."""
    return compare.ljust(8, b"\0"), mask.ljust(8, b"\0")


def block_test(block: tuple[int, int], order: Order) -> tuple[bytes, bytes]:
    """Compare/mask octets testing a handle (in ``order``) against an aligned block; the
    top octet is tested too (it is dropped by the << 8 of the strided address)."""
    base, bits = block
    o: ByteOrder = "little" if order == "little" else "big"
    mask = (M64 << bits) & M64
    return base.to_bytes(8, o), mask.to_bytes(8, o)
