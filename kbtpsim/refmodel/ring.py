"""The free-block ring of the reference model, as one plain dict (draft, "Free-Block Ring").

A ring is ``{"name", "n", "blocks", "masked", "slots", "head", "tail", "deferred"}``:
``slots`` maps a slot number to ``[Sequence, Block Offset]`` once written (a slot never
written holds its initial contents), ``head`` and ``tail`` are the 64-bit counter words,
``deferred`` maps a slot number to the frees waiting for it (``[Tail ticket, Block
Offset, what to finish]``, oldest first).
"""

from __future__ import annotations

from typing import Any

from kbtpsim import atomics
from kbtpsim.wire import CONSUMED

Ring = dict[str, Any]
M32 = (1 << 32) - 1


def new_ring(name: str, n: int, blocks: list[int], masked: bool) -> Ring:
    """Initialization (draft, "Free-Block Ring", first rule): Head = Ticket 0, Slot 0;
    Tail = Ticket F, Slot Offset 16 * (F mod N)."""
    f = len(blocks)
    tail = (f << 32) | (16 * (f % n)) if masked else f << 32
    return {"name": name, "n": n, "blocks": blocks, "masked": masked, "slots": {},
            "head": 0, "tail": tail, "deferred": {}}


def slot(r: Ring, i: int) -> tuple[int, int]:
    """(Sequence, Block Offset) of slot i; initially {s, s-th free block} for s < F and
    {s - N mod 2^32, all ones} for F <= s < N (draft, "Free-Block Ring")."""
    if i in r["slots"]:
        seq, bo = r["slots"][i]
        return seq, bo
    if i < len(r["blocks"]):
        return i, r["blocks"][i]
    return (i - r["n"]) & M32, CONSUMED


def fetch_add(r: Ring, which: str) -> tuple[int, int]:
    """One FetchAdd on Head or Tail: (ticket, slot number). Masked: Add Data
    0x0000000100000010 under the Add Mask bit 63 | bit 31 | bit (n+3) (draft, "Free-Block
    Ring"); unmasked: Add Data 0x0000000100000000, slot = ticket mod N (draft,
    "InfiniBand and RoCEv2")."""
    word = r[which]
    ticket = word >> 32
    if r["masked"]:
        r[which] = atomics.masked_fetch_add(word, atomics.RING_ADD_DATA,
                                            atomics.ring_add_mask(r["n"]))
        return ticket, (word & M32) // 16
    r[which] = atomics.fetch_add(word, atomics.UNMASKED_ADD_DATA)
    return ticket, ticket % r["n"]


def ready(r: Ring, ticket: int) -> int | None:
    """The Block Offset for ``ticket`` once its slot holds Sequence = ticket and a Block
    Offset that is not all ones (draft, "Free-Block Ring", Allocation), else None."""
    seq, bo = slot(r, ticket % r["n"])
    return bo if seq == ticket and bo != CONSUMED else None


def consume(r: Ring, i: int) -> list[Any]:
    """Mark slot i consumed (Block Offset all ones), then perform the oldest free deferred
    on it (draft, Free: "defer the write until the slot is consumed"). Returns what that
    free has to finish ([] if none)."""
    seq, _ = slot(r, i)
    r["slots"][i] = [seq, CONSUMED]
    waiting = r["deferred"].get(i)
    if not waiting:
        return []
    u, bo, done = waiting.pop(0)
    if not waiting:
        del r["deferred"][i]
    r["slots"][i] = [u, bo]  # Block Offset, then Sequence: one step here
    return [done]


def free(r: Ring, block: int, done: Any) -> bool:
    """FetchAdd on Tail, then write the slot if it is consumed; otherwise defer and MUST
    NOT overwrite it (draft, "Free-Block Ring", Free). True if the write is deferred."""
    u, i = fetch_add(r, "tail")
    if slot(r, i)[1] == CONSUMED and i not in r["deferred"]:
        r["slots"][i] = [u, block]
        return False
    r["deferred"].setdefault(i, []).append([u, block, done])
    return True


def deferred_blocks(r: Ring) -> list[int]:
    return [bo for q in r["deferred"].values() for _, bo, _ in q]


def ring_blocks(r: Ring) -> list[int]:
    """Block Offsets the ring holds in its slots (not consumed)."""
    out = [slot(r, i)[1] for i in range(min(r["n"], len(r["blocks"]))) if i not in r["slots"]]
    out += [bo for _, bo in r["slots"].values()]
    return [bo for bo in out if bo != CONSUMED]
