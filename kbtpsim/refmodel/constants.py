"""The reference model's constants: the time unit (T1), entry and request flag bits, the
GOODBYE flag, the flag bits defined per opcode (draft, "Block Table", "Common Header",
"IANA Considerations"; D5), the STags of exposed structures; and the draft's small
arithmetic (the next Generation, a ring's size).
"""

from __future__ import annotations

from kbtpsim.wire import Opcode

PS_PER_MS = 10**9  # T1: now is in picoseconds, configuration in ms
VALID, SEALED = 0x0001, 0x0002  # draft, "Block Table": entry Flags
INLINE, SEAL, RECORD, INVALIDATE, ALLOW_UNSEALED = 0x01, 0x02, 0x04, 0x08, 0x10
RELEASE = 0x0001  # draft, "IANA Considerations": GOODBYE flag
#: flag bits the registry defines per opcode (draft, "Common Header", "IANA"); others: D5
DEFINED = {Opcode.LOAD: 0x1F, Opcode.STORE: 0x1F, Opcode.ALLOC_STORE: 0x1F,
           Opcode.FREE: 0x1F, Opcode.BIND: 0, Opcode.GOODBYE: RELEASE}
# STag names of exposed structures: the target's own choice (the draft names none)
TABLE_STAG, POOL_STAG = 0x7AB1, 0xB001
RING_STAG, PARTITION_STAG = 0x0100_0000, 0x0200_0000


def next_generation(g: int) -> int:
    """Incremented by one, skipping zero (draft, "Block Unmapped Store" step 4)."""
    return g % 0xFFFF + 1


def pow2(n: int) -> int:
    """Smallest power of two >= n, at least 2 (draft N = 2^n >= F; D9)."""
    return max(2, 1 << (n - 1).bit_length())
