"""Workload generators: distributions, determinism, and the handle-state model."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from kbtpsim.scenario.schema import (
    KV_MODELS,
    KvCacheSpec,
    LengthSpec,
    Popularity,
    WorkloadSpec,
)
from kbtpsim.workload import (
    FOREIGN_HANDLE,
    DecodeWorkload,
    HandlePicker,
    LengthSampler,
    PrefillWorkload,
    Request,
    SequenceRegistry,
    SyntheticWorkload,
    blocks_of,
)

BASE = 0x1000


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, 0])


def test_zipf_popularity_follows_the_exponent() -> None:
    picker = HandlePicker(100, Popularity(distribution="zipf", exponent=1.0), rng())
    counts = Counter(picker.draw() for _ in range(40_000))
    h = sum(1 / k for k in range(1, 101))
    assert counts[0] / 40_000 == pytest.approx(1 / h, rel=0.05)
    assert counts[0] / counts[1] == pytest.approx(2.0, rel=0.1)
    assert counts[0] / counts[3] == pytest.approx(4.0, rel=0.15)


def test_uniform_popularity_is_flat() -> None:
    picker = HandlePicker(10, Popularity(), rng())
    counts = Counter(picker.draw() for _ in range(20_000))
    assert set(counts) == set(range(10))
    assert max(counts.values()) / min(counts.values()) < 1.15


def test_pick_respects_the_eligible_set() -> None:
    picker = HandlePicker(50, Popularity(distribution="zipf"), rng())
    for _ in range(200):
        assert picker.pick({40, 41, 49}) in {40, 41, 49}
    assert picker.pick(set()) is None


def test_length_distributions() -> None:
    fixed = LengthSampler(LengthSpec(value=700), rng())
    assert {fixed.draw() for _ in range(10)} == {700}
    uni = LengthSampler(LengthSpec(distribution="uniform", min=10, max=20), rng())
    draws = [uni.draw() for _ in range(2000)]
    assert min(draws) == 10 and max(draws) == 20
    choice = LengthSampler(LengthSpec(distribution="choice", values=[1, 2],
                                      weights=[3, 1]), rng())
    c = Counter(choice.draw() for _ in range(8000))
    assert c[1] / 8000 == pytest.approx(0.75, abs=0.02)
    block = LengthSampler(LengthSpec(distribution="block"), rng(), block_size=4096)
    assert block.draw() == 4096


def synthetic(seed: int = 0, **kw: object) -> SyntheticWorkload:
    spec = WorkloadSpec(**kw)  # type: ignore[arg-type]
    return SyntheticWorkload(spec, rng(seed), handle_base=BASE, handles=32, quota=8,
                             inline_threshold=4096)


def drive(gen: SyntheticWorkload, n: int, window: int = 3,
          fail: set[str] = frozenset()) -> list[Request]:  # type: ignore[assignment]
    """Issue up to ``window`` at once, completing the oldest first."""
    out: list[Request] = []
    pending: list[Request] = []
    while len(out) < n:
        while len(pending) < window:
            req = gen.next()
            if req is None:
                break
            pending.append(req)
            out.append(req)
        if not pending:
            break
        req = pending.pop(0)
        gen.done(req, req.op not in fail)
    return out


def test_synthetic_is_deterministic_from_the_seed() -> None:
    a = drive(synthetic(3), 500)
    b = drive(synthetic(3), 500)
    c = drive(synthetic(4), 500)
    assert a == b and a != c


def test_synthetic_requests_are_valid_for_the_model() -> None:
    gen = synthetic(1, mix={"alloc_store": 1, "load": 2, "store": 1, "free": 1})
    bound: set[int] = set()
    sealed: set[int] = set()
    busy: set[int] = set()
    pending: list[Request] = []
    for _ in range(3000):
        while len(pending) < 4:
            req = gen.next()
            assert req is not None
            assert req.handle not in busy  # never two requests on one handle at once
            if req.op == "alloc_store":
                assert req.handle not in bound
                assert len(bound) + sum(p.op == "alloc_store" for p in pending) < 8
            elif req.op == "store":
                assert req.handle in bound and req.handle not in sealed
            else:
                assert req.handle in bound
            busy.add(req.handle)
            pending.append(req)
        req = pending.pop(0)
        busy.discard(req.handle)
        gen.done(req, True)
        if req.op == "alloc_store":
            bound.add(req.handle)
            if req.seal:
                sealed.add(req.handle)
        elif req.op == "free":
            bound.discard(req.handle)
            sealed.discard(req.handle)
        elif req.op == "store" and req.seal:
            sealed.add(req.handle)


def test_synthetic_mix_proportions_when_feasible() -> None:
    gen = synthetic(2, mix={"alloc_store": 1, "load": 4, "free": 1})
    reqs = drive(gen, 6000, window=1)
    c = Counter(r.op for r in reqs)
    assert c["load"] / len(reqs) == pytest.approx(4 / 6, abs=0.04)


def test_failed_allocation_leaves_the_handle_unbound() -> None:
    gen = synthetic(0, mix={"alloc_store": 1, "load": 1})
    reqs = drive(gen, 50, window=1, fail={"alloc_store"})
    assert all(r.op == "alloc_store" for r in reqs)  # nothing ever bound: nothing to load


def test_misbehaviour() -> None:
    gen = synthetic(0, misbehave={"hoard_tickets": 2, "invalid_fraction": 1.0})
    reqs = drive(gen, 6, window=1)
    assert [r.op for r in reqs[:2]] == ["hoard", "hoard"]
    assert all(r.op == "invalid_load" and r.handle == FOREIGN_HANDLE for r in reqs[2:])
    gen = synthetic(0, misbehave={"invalid_fraction": 1.0, "invalid_kind": "malformed"})
    assert {r.op for r in drive(gen, 5, window=1)} == {"malformed"}


def test_inline_threshold() -> None:
    spec = WorkloadSpec(mix={"alloc_store": 1}, length=LengthSpec(
        distribution="choice", values=[100, 5000]))
    gen = SyntheticWorkload(spec, rng(), handle_base=BASE, handles=64, quota=64,
                            inline_threshold=1000)
    reqs = drive(gen, 40, window=40)
    assert all(r.inline == (r.length <= 1000) for r in reqs)


def test_kv_presets_and_blocks() -> None:
    assert KV_MODELS == {"llama3-8b": 128 << 10, "llama3-70b": 320 << 10,
                         "qwen3-8b": 144 << 10}
    assert KvCacheSpec(model="llama3-70b", tokens_per_block=32).block_bytes == 32 * 320 << 10
    assert blocks_of(40, 16, 10) == [160, 160, 80]
    assert blocks_of(32, 16, 10) == [160, 160]


def kv_spec(role: str) -> WorkloadSpec:
    return WorkloadSpec(kind="kvcache", kvcache=KvCacheSpec(
        role=role, model="custom", bytes_per_token=64, tokens_per_block=16,
        sequence_tokens_min=20, sequence_tokens_max=100))  # type: ignore[arg-type]


def test_prefill_and_decode_share_sequences() -> None:
    reg = SequenceRegistry()
    pre = PrefillWorkload(kv_spec("prefill"), rng(1), reg, name="p", handle_base=BASE,
                          handles=16, quota=12, inline_threshold=4096)
    dec = DecodeWorkload(kv_spec("decode"), rng(2), reg)
    assert dec.next() is None  # nothing published yet
    bound: set[int] = set()
    loads = 0
    for _ in range(400):
        req = pre.next()
        if req is not None:
            if req.op == "alloc_store":
                assert req.handle not in bound and req.seal
                assert len(bound) < 12
                bound.add(req.handle)
            else:
                assert req.op == "free" and req.handle in bound
                bound.discard(req.handle)
            pre.done(req, True)
        d = dec.next()
        if d is not None:
            assert d.op == "load" and d.handle in bound
            loads += 1
    assert reg.published >= 5 and loads > 50
    for seq in reg.sequences:
        assert sum(seq.lengths) == seq.tokens * 64
