"""Workload generators: request descriptions, independent of the simulator.

A generator is asked for the next :class:`Request` (``next()``; None when nothing can be
issued until an outstanding request completes) and told how each one ended
(``done(request, ok)``). It keeps a model of its own handles (bound, sealed, busy) so the
requests it issues are ones the target should accept; misbehaviour is explicit. Every draw
comes from the numpy ``Generator`` it was given (seeded per initiator from the scenario
seed), so a generator fed the same completions yields the same requests.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from kbtpsim.scenario.schema import LengthSpec, Popularity, WorkloadSpec

#: A handle outside every initiator's range (an INVALID_HANDLE request).
FOREIGN_HANDLE = 0x7FFF_FFFF_FFFF_0000


@dataclass(frozen=True, slots=True)
class Request:
    """One request to issue. ``op`` is a workload operation (``load``, ``store``,
    ``alloc_store``, ``free``, ``direct_load``, ``direct_alloc``) or a misbehaviour
    (``invalid_load``, ``malformed``, ``hoard``)."""

    op: str
    handle: int
    length: int = 0
    inline: bool = False
    seal: bool = False
    seq: int = 0  #: the generator's sequence number


class Workload(Protocol):
    def next(self) -> Request | None: ...

    def done(self, req: Request, ok: bool) -> None: ...


# ---------------------------------------------------------------------------- draws
def choice_cdf(p: np.ndarray) -> list[float]:
    """The cumulative distribution ``numpy.random.Generator.choice(n, p=p)`` searches,
    computed as it computes it (``cumsum``, then divided by its last entry).

    ``bisect_right(cdf, rng.random())`` then draws the index ``rng.choice(n, p=p)``
    draws, from the same single uniform, without ``choice``'s per-call checks of ``p``
    (about 30 times faster; tests/workload check the streams are identical)."""
    cdf = np.asarray(p, dtype=np.float64).cumsum()
    cdf /= cdf[-1]
    return [float(x) for x in cdf]


class HandlePicker:
    """Draws handle indices 0..n-1 (uniform or Zipf by index rank)."""

    def __init__(self, n: int, pop: Popularity, rng: np.random.Generator) -> None:
        self.n = n
        self.rng = rng
        self.cdf: list[float] | None = None
        if pop.distribution == "zipf":
            w = 1.0 / np.arange(1, n + 1, dtype=float) ** pop.exponent
            # numpy's searchsorted(side="right") on these floats is bisect_right on them
            self.cdf = [float(x) for x in np.cumsum(w / w.sum())]

    def draw(self) -> int:
        if self.cdf is None:
            return int(self.rng.integers(self.n))
        return min(bisect_right(self.cdf, self.rng.random()), self.n - 1)

    def pick(self, eligible: set[int], tries: int = 16) -> int | None:
        """An index in ``eligible`` following the popularity (by rejection; uniform among
        ``eligible`` when rejection keeps failing)."""
        if not eligible:
            return None
        for _ in range(tries):
            k = self.draw()
            if k in eligible:
                return k
        ordered = sorted(eligible)
        return ordered[int(self.rng.integers(len(ordered)))]


class LengthSampler:
    """Store lengths (octets) from a :class:`LengthSpec`."""

    def __init__(self, spec: LengthSpec, rng: np.random.Generator,
                 block_size: int = 0) -> None:
        self.spec = spec
        self.rng = rng
        self.block_size = block_size
        if spec.distribution == "choice":
            w = np.array(spec.weights or [1.0] * len(spec.values), dtype=float)
            self.p = w / w.sum()
            self.cdf = choice_cdf(self.p)

    def draw(self) -> int:
        s = self.spec
        if s.distribution == "fixed":
            return s.value
        if s.distribution == "block":
            return self.block_size
        if s.distribution == "uniform":
            return int(self.rng.integers(s.min, s.max + 1))
        return int(s.values[bisect_right(self.cdf, self.rng.random())])


# ---------------------------------------------------------------------------- synthetic
STATE_OPS = ("load", "store", "alloc_store", "free", "direct_load", "direct_alloc")


class SyntheticWorkload:
    """A mix of operations over the initiator's own handles ``base .. base+count-1``."""

    def __init__(self, spec: WorkloadSpec, rng: np.random.Generator, *, handle_base: int,
                 handles: int, quota: int, inline_threshold: int,
                 block_size: int = 0) -> None:
        self.spec = spec
        self.rng = rng
        self.base = handle_base
        self.n = handles
        self.quota = quota
        self.inline_threshold = inline_threshold
        mix: dict[str, float] = {str(k): v for k, v in spec.mix.items()}
        self.ops = [op for op in STATE_OPS if mix.get(op, 0) > 0]
        w = np.array([mix[op] for op in self.ops], dtype=np.float64)
        self.p = w / w.sum()
        self.cdf = choice_cdf(self.p)
        self.picker = HandlePicker(handles, spec.popularity, rng)
        self.lengths = LengthSampler(spec.length, rng, block_size)
        self.unbound: set[int] = set(range(handles))
        self.bound: set[int] = set()
        self.sealed: set[int] = set()
        self.busy: set[int] = set()
        self.allocating = 0
        self.seq = 0
        self.hoard = spec.misbehave.hoard_tickets
        self.hoarding = 0
        self.store_in_mix = mix.get("store", 0) > 0
        #: what replaces an operation with no eligible handle (besides FREE): the mix's
        #: own allocation, so a DIRECT_ALLOC-only mix never issues ALLOC_STORE
        self.alloc_op = "direct_alloc" if mix.get("direct_alloc", 0) > 0 and not \
            mix.get("alloc_store", 0) > 0 else "alloc_store"
        self.skipped: dict[str, int] = {}

    def _req(self, op: str, idx: int, length: int = 0, seal: bool = False) -> Request:
        self.seq += 1
        if idx >= 0:
            self.busy.add(idx)
        inline = 0 < length <= self.inline_threshold
        return Request(op, self.base + idx if idx >= 0 else FOREIGN_HANDLE, length, inline,
                       seal, self.seq)

    def _eligible(self, op: str) -> set[int]:
        if op in ("alloc_store", "direct_alloc"):
            if len(self.bound) + self.allocating >= self.quota:
                return set()
            return self.unbound - self.busy
        if op in ("direct_load",):
            return self.sealed - self.busy
        if op == "store":
            return (self.bound - self.sealed) - self.busy
        return self.bound - self.busy

    def next(self) -> Request | None:
        if self.hoard or self.hoarding:
            # one hoarded ticket at a time, and nothing else meanwhile: a software
            # allocation concurrent with a one-sided FetchAdd on the same Head is not
            # atomic with it (docs/system.md, "Not modelled")
            if self.hoarding:
                return None
            self.hoard -= 1
            self.hoarding += 1
            return self._req("hoard", -1)
        mis = self.spec.misbehave
        if mis.invalid_fraction and self.rng.random() < mis.invalid_fraction:
            return self._req("invalid_load" if mis.invalid_kind == "handle" else "malformed",
                             -1)
        op = self.ops[bisect_right(self.cdf, self.rng.random())]
        candidates = [op, self.alloc_op, "free"]
        for choice in candidates:
            idx = self.picker.pick(self._eligible(choice))
            if idx is None:
                continue
            if choice != op:
                self.skipped[op] = self.skipped.get(op, 0) + 1
            if choice in ("alloc_store", "direct_alloc"):
                self.allocating += 1
                # DIRECT_ALLOC binds unsealed (BIND has no SEAL flag)
                seal = self.spec.seal and choice == "alloc_store" and not self.store_in_mix
                return self._req(choice, idx, self.lengths.draw(), seal)
            if choice == "store":
                return self._req(choice, idx, self.lengths.draw(), self.spec.seal)
            return self._req(choice, idx)
        return None

    def done(self, req: Request, ok: bool) -> None:
        if req.op == "hoard":
            self.hoarding -= 1
            return
        if req.handle == FOREIGN_HANDLE:
            return
        idx = req.handle - self.base
        self.busy.discard(idx)
        if req.op in ("alloc_store", "direct_alloc"):
            self.allocating -= 1
            if ok:
                self.unbound.discard(idx)
                self.bound.add(idx)
                if req.seal:
                    self.sealed.add(idx)
        elif req.op == "free" and ok:
            self.bound.discard(idx)
            self.sealed.discard(idx)
            self.unbound.add(idx)
        elif req.op == "store" and ok and req.seal:
            self.sealed.add(idx)


# ---------------------------------------------------------------------------- KV cache
@dataclass
class Sequence:
    """A prefilled sequence: its owner's handles and the length of each block."""

    owner: str
    handles: tuple[int, ...]
    lengths: tuple[int, ...]
    tokens: int


@dataclass
class SequenceRegistry:
    """Sequences published by prefill initiators of one target (shared with decoders)."""

    sequences: list[Sequence] = field(default_factory=list)
    published: int = 0

    def publish(self, seq: Sequence) -> None:
        self.sequences.append(seq)
        self.published += 1

    def withdraw(self, seq: Sequence) -> None:
        self.sequences.remove(seq)


def blocks_of(tokens: int, tokens_per_block: int, token_bytes: int) -> list[int]:
    """Lengths of the blocks holding ``tokens`` tokens (the last one partial)."""
    n = math.ceil(tokens / tokens_per_block)
    out = [tokens_per_block * token_bytes] * n
    rest = tokens - (n - 1) * tokens_per_block
    out[-1] = rest * token_bytes
    return out


class PrefillWorkload:
    """Stores sequences block by block (ALLOC_STORE, sealed), publishing each sequence
    once all its blocks are stored; evicts (FREE) its oldest sequence when short of
    handles or quota."""

    def __init__(self, spec: WorkloadSpec, rng: np.random.Generator, registry:
                 SequenceRegistry, *, name: str, handle_base: int, handles: int, quota: int,
                 inline_threshold: int) -> None:
        self.kv = spec.kvcache
        self.rng = rng
        self.registry = registry
        self.name = name
        self.base = handle_base
        self.limit = min(handles, quota)
        self.inline_threshold = inline_threshold
        self.free_handles: deque[int] = deque(range(handles))
        self.in_use = 0  # handles allocated or being allocated (not yet freed)
        self.queue: deque[Request] = deque()
        self.mine: deque[Sequence] = deque()  # published, oldest first
        self.building: dict[int, list[int]] = {}  # seq id -> handles not yet stored
        self.current: tuple[int, Sequence] | None = None
        self.failed: set[int] = set()
        self.seq = 0
        self.seq_ids = 0
        self._req_seq: dict[int, int] = {}
        self._pending: dict[int, Sequence] = {}

    def _evict_oldest(self) -> bool:
        """Withdraw the oldest published sequence and FREE its blocks; False when none is
        published (wait for the frees in flight)."""
        if not self.mine:
            return False
        old = self.mine.popleft()
        if old in self.registry.sequences:
            self.registry.withdraw(old)
        for h in old.handles:
            self.seq += 1
            self.queue.append(Request("free", h, seq=self.seq))
        return True

    def _plan(self) -> bool:
        kv = self.kv
        tokens = int(self.rng.integers(kv.sequence_tokens_min, kv.sequence_tokens_max + 1))
        lengths = blocks_of(tokens, kv.tokens_per_block, kv.token_bytes)
        need = len(lengths)
        if need > self.limit:
            lengths = lengths[: self.limit]
            need = self.limit
        if self.in_use + need > self.limit or len(self.free_handles) < need:
            return self._evict_oldest()
        handles = tuple(self.base + self.free_handles.popleft() for _ in range(need))
        self.in_use += need
        self.seq_ids += 1
        sid = self.seq_ids
        seq = Sequence(self.name, handles, tuple(lengths), tokens)
        self.building[sid] = list(handles)
        for h, ln in zip(handles, lengths, strict=True):
            self.seq += 1
            self._req_seq[self.seq] = sid
            self.queue.append(Request("alloc_store", h, ln, 0 < ln <= self.inline_threshold,
                                      True, self.seq))
        self.current = (sid, seq)
        self._pending[sid] = seq
        return True

    def next(self) -> Request | None:
        if not self.queue and not self._plan():
            return None
        return self.queue.popleft() if self.queue else None

    def done(self, req: Request, ok: bool) -> None:
        if req.op == "free":
            self.free_handles.append(req.handle - self.base)
            self.in_use -= 1
            return
        sid = self._req_seq.pop(req.seq)
        left = self.building[sid]
        left.remove(req.handle)
        if not ok:
            self.failed.add(sid)
        if not left:
            del self.building[sid]
            seq = self._pending.pop(sid)
            if sid in self.failed:  # give its handles back: free what was stored
                self.failed.discard(sid)
                self.mine.appendleft(seq)  # evicted first
            else:
                self.mine.append(seq)
                self.registry.publish(seq)


class DecodeWorkload:
    """Loads every block of a published sequence (chosen by popularity over the
    published sequences, most recent first), then the next sequence."""

    def __init__(self, spec: WorkloadSpec, rng: np.random.Generator,
                 registry: SequenceRegistry) -> None:
        self.rng = rng
        self.registry = registry
        self.pop = spec.popularity
        self.queue: deque[Request] = deque()
        self.seq = 0
        self.sequences_loaded = 0

    def next(self) -> Request | None:
        if not self.queue:
            seqs = self.registry.sequences
            if not seqs:
                return None
            picker = HandlePicker(len(seqs), self.pop, self.rng)
            chosen = seqs[len(seqs) - 1 - picker.draw()]
            self.sequences_loaded += 1
            for h, ln in zip(chosen.handles, chosen.lengths, strict=True):
                self.seq += 1
                self.queue.append(Request("load", h, ln, seq=self.seq))
        return self.queue.popleft()

    def done(self, req: Request, ok: bool) -> None:
        return None


__all__ = [
    "FOREIGN_HANDLE", "DecodeWorkload", "HandlePicker", "LengthSampler", "PrefillWorkload",
    "Request", "Sequence", "SequenceRegistry", "SyntheticWorkload", "Workload", "blocks_of",
]
